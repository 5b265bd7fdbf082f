package slack

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/todo"
)

// Steering the plan on Slack (DESIGN §19): the plan message's Edit plan
// button (Change while the plan waits for Start, render.go) opens one
// modal, views.open with the press's trigger_id, where the person picks
// an item of the plan as the message showed it, what to do to it (Skip,
// Reopen, Add an item after) and, for Add, the new item's text. The
// submission goes to the router as the item control's click
// (chat.ItemButton's id), answered within Slack's 3 s: the router only
// queues the change.

// The modal's ids.
const (
	editCallbackID = "pinplan_edit_plan"
	blockItem      = "item"
	blockAction    = "action"
	blockText      = "text"
)

// Slack's limits on the modal (docs.slack.dev, modal views and
// composition objects).
const (
	maxEditItems  = 100 // options of a static_select
	maxOptionText = 75
)

// submitWithin bounds the work of answering a view_submission: Slack
// shows the person an error if the answer takes more than 3 s.
const submitWithin = 2 * time.Second

// shownItem is an item of the plan as a plan message showed it: its
// status and its hash (chat.ItemButton).
type shownItem struct {
	status todo.Status
	hash   string
}

// shownPlan is what Edit plan carries of the plan its message shows
// (editValue): the revision, the number of items and the first of them
// (maxEditItems), in order.
type shownPlan struct {
	rev   int64
	total int
	items []shownItem
}

// id is the part of an item control's id (chat.ItemButton) that names
// item i: the revision and the item's hash.
func (sp shownPlan) id(i int) string {
	return strconv.FormatInt(sp.rev, 10) + "." + sp.items[i].hash
}

// statusCodes are the statuses in an Edit plan value, one letter each.
var statusCodes = map[todo.Status]string{todo.Pending: "p", todo.InProgress: "i", todo.Completed: "c", chat.Skipped: "s"}

// editValue is the value of p's Edit plan (and Change) button: the
// revision and the number of items, then each item shown (the first
// maxEditItems) as its status's letter and its hash,
// "7/2:pa1b2c3d4e5f6,c0f9e8d7c6b5a". At most 100 items of 14
// characters: within a button value's 2,000.
func editValue(p chat.Plan) string {
	var b strings.Builder
	b.WriteString(strconv.FormatInt(p.Revision, 10) + "/" + strconv.Itoa(len(p.Items)) + ":")
	for i, it := range p.Items {
		if i == maxEditItems {
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		_, id, _ := chat.ParseButtonID(chat.ItemButton(chat.ActionSkip, p, it))
		_, hash, _ := strings.Cut(id, ".")
		b.WriteString(statusCodes[it.Status] + hash)
	}
	return b.String()
}

// parseEditValue reads an editValue.
func parseEditValue(v string) (shownPlan, bool) {
	head, list, ok := strings.Cut(v, ":")
	revText, totalText, ok2 := strings.Cut(head, "/")
	rev, err := strconv.ParseInt(revText, 10, 64)
	total, err2 := strconv.Atoi(totalText)
	if !ok || !ok2 || err != nil || err2 != nil || list == "" {
		return shownPlan{}, false
	}
	sp := shownPlan{rev: rev, total: total}
	for _, tok := range strings.Split(list, ",") {
		var status todo.Status
		for st, code := range statusCodes {
			if strings.HasPrefix(tok, code) {
				status = st
			}
		}
		if status == "" || len(tok) < 2 {
			return shownPlan{}, false
		}
		sp.items = append(sp.items, shownItem{status: status, hash: tok[1:]})
	}
	if len(sp.items) > total {
		return shownPlan{}, false
	}
	return sp, true
}

// itemMarks are the marks an item's line starts with in a plan's text
// (PlanText).
var itemMarks = []string{chat.Mark(todo.Pending), chat.Mark(todo.InProgress), chat.Mark(todo.Completed), chat.MarkSkipped, chat.MarkHalted}

// shownTexts reads the items' words from a plan message's text
// (PlanText), first to last, when it reads as a plan of total items:
// the lines that start with an item's mark, unescaped, and perhaps a
// last line counting the items left out. It returns nil for a text that
// does not.
func shownTexts(text string, total int) []string {
	var out []string
	more := 0
	unescape := strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&")
	for _, line := range strings.Split(text, "\n") {
		if _, err := fmt.Sscanf(line, moreItems, &more); err == nil {
			break
		}
		for _, m := range itemMarks {
			if rest, ok := strings.CutPrefix(line, m+" "); ok {
				out = append(out, unescape.Replace(rest))
				break
			}
		}
	}
	if len(out)+more != total {
		return nil
	}
	return out
}

// editMeta is the modal's private_metadata: what the submission needs,
// the session and the plan as the pressed message showed it.
type editMeta struct {
	Key     string `json:"key"`
	Channel string `json:"channel"`
	Thread  string `json:"thread"`
	Plan    string `json:"plan"` // the button's editValue
}

// statusWords are how the modal names the statuses.
var statusWords = map[todo.Status]string{todo.Pending: "pending", todo.InProgress: "in progress", todo.Completed: "done", chat.Skipped: "skipped"}

// editView is the modal that changes the plan a message shows: value is
// its Edit plan button's (editValue), text the message's text, whose
// item lines name the options. The items are offered as the message
// showed them, with their status; the submission says whether the
// action applies to the one chosen (submitEdit).
func editView(th chat.Thread, value, text string) (slack.ModalViewRequest, error) {
	sp, ok := parseEditValue(value)
	if !ok {
		return slack.ModalViewRequest{}, fmt.Errorf("slack: plan button value %q not understood", value)
	}
	meta, err := json.Marshal(editMeta{Key: th.Key, Channel: th.Channel, Thread: th.ThreadID, Plan: value})
	if err != nil {
		return slack.ModalViewRequest{}, err
	}
	// The items' words, where the text has them; a text that does not
	// read as the button's plan numbers them only, rather than risk
	// naming an item with another's words.
	texts := shownTexts(text, sp.total)
	options := make([]*slack.OptionBlockObject, 0, len(sp.items))
	for i, it := range sp.items {
		label := fmt.Sprintf("%d.", i+1)
		if i < len(texts) {
			label += " " + strings.Join(strings.Fields(texts[i]), " ")
		}
		options = append(options, slack.NewOptionBlockObject(sp.id(i), plainText(chat.Shorten(label, maxOptionText)), plainText(statusWords[it.status])))
	}
	actions := []*slack.OptionBlockObject{
		slack.NewOptionBlockObject(chat.ActionSkip, plainText(chat.LabelSkip), plainText("a pending or in-progress item")),
		slack.NewOptionBlockObject(chat.ActionReopen, plainText(chat.LabelReopen), plainText("a done or skipped item")),
		slack.NewOptionBlockObject(chat.ActionAdd, plainText(chat.LabelAdd), plainText("write the new item below")),
	}
	input := slack.NewPlainTextInputBlockElement(plainText("The new item"), blockText)
	input.MaxLength = todo.MaxContentLength
	intro := fmt.Sprintf("Revision %d of the plan. The agent reads your change before its next step.", sp.rev)
	if sp.total > len(sp.items) {
		intro += fmt.Sprintf(" The first %d of its %d items are listed.", len(sp.items), sp.total)
	}
	return slack.ModalViewRequest{
		Type:            slack.VTModal,
		Title:           plainText("Change the plan"),
		Submit:          plainText("Change"),
		Close:           plainText("Cancel"),
		CallbackID:      editCallbackID,
		PrivateMetadata: string(meta),
		Blocks: slack.Blocks{BlockSet: []slack.Block{
			slack.NewContextBlock("", plainText(intro)),
			slack.NewInputBlock(blockItem, plainText("Item"), nil,
				slack.NewOptionsSelectBlockElement(slack.OptTypeStatic, plainText("Choose an item"), blockItem, options...)),
			slack.NewInputBlock(blockAction, plainText("Change"), nil, slack.NewRadioButtonsBlockElement(blockAction, actions...)),
			slack.NewInputBlock(blockText, plainText("New item (for Add)"), plainText("Added after the item you chose."), input).WithOptional(true),
		}},
	}, nil
}

// openEdit opens the plan's modal for a press of Edit plan or Change
// (cb, on the plan message of th, the button's value). What fails is
// told to the presser alone.
func (a *Adapter) openEdit(ctx context.Context, cb slack.InteractionCallback, th chat.Thread, value string) {
	view, err := editView(th, value, cb.Message.Text)
	if err != nil {
		a.log.Warn("slack plan modal not opened", "session", th.Key, "err", err)
		a.in.Tell(ctx, th, cb.User.ID, "This plan message is out of date; press Edit plan on the pinned plan.")
		return
	}
	if _, err := a.on(th).api.OpenViewContext(ctx, cb.TriggerID, view); err != nil {
		a.log.Warn("slack plan modal not opened", "session", th.Key, "err", err)
		a.in.Tell(ctx, th, cb.User.ID, "I couldn't open the plan's editor; please press the button again.")
	}
}

// submitEdit answers the submission of the plan's modal: an answer with
// errors keeps the modal open and says, on the input concerned, what is
// wrong (an action that does not apply to the item as the modal showed
// it, Add without its text, the router's refusal, private to the
// person); nil closes it, the change queued, and the person is told so
// privately in the thread. It is quick: the router only queues the
// change.
func (a *Adapter) submitEdit(parent context.Context, cb slack.InteractionCallback) *slack.ViewSubmissionResponse {
	ctx, cancel := context.WithTimeout(parent, submitWithin)
	defer cancel()
	var meta editMeta
	sp, ok := shownPlan{}, false
	if json.Unmarshal([]byte(cb.View.PrivateMetadata), &meta) == nil {
		sp, ok = parseEditValue(meta.Plan)
	}
	if !ok || meta.Key == "" {
		a.log.Warn("slack plan modal submitted without its plan", "view", cb.View.ID)
		return refuse(blockItem, "This form is out of date; close it and press Edit plan on the pinned plan.")
	}
	values := cb.View.State.Values
	chosen := values[blockItem][blockItem].SelectedOption.Value
	action := values[blockAction][blockAction].SelectedOption.Value
	text := todo.TrimSpace(values[blockText][blockText].Value)
	i := slices.IndexFunc(sp.items, func(it shownItem) bool { return strconv.FormatInt(sp.rev, 10)+"."+it.hash == chosen })
	if i < 0 {
		return refuse(blockItem, "Choose an item of the plan.")
	}
	status := sp.items[i].status
	switch {
	case action == "":
		return refuse(blockAction, "Choose what to do.")
	case !slices.Contains(chat.Plan{}.Actions(todo.Item{Status: status}), action):
		return refuse(blockAction, notApplicable(action, status))
	case action == chat.ActionAdd && text == "":
		return refuse(blockText, "Write the item to add.")
	case action != chat.ActionAdd && text != "":
		return refuse(blockText, "Only Add takes a new item: clear this, or choose "+chat.LabelAdd+".")
	}
	th := chat.Thread{Platform: "slack", Key: meta.Key, Channel: meta.Channel, ThreadID: meta.Thread}
	name := cmp.Or(a.displayName(ctx, teamOf(th.Key), cb.User.ID), cb.User.Name, cb.User.Username, cb.User.ID)
	res := a.in.Click(ctx, chat.Click{Thread: th, Button: chat.ButtonID(action, chosen), UserID: cb.User.ID, UserName: name, Show: true, Text: text})
	if res.Refused {
		block := blockItem
		if action == chat.ActionAdd {
			block = blockText // the refusals of an Add are about its text
		}
		return refuse(block, res.Private)
	}
	if res.Private != "" {
		user, note := cb.User.ID, res.Private
		a.queue.Add("tell/"+cb.TriggerID+cb.View.ID, func() { a.in.Tell(parent, th, user, note) })
	}
	a.log.Info("slack plan changed from the modal", "session", th.Key, "action", action, "user", cb.User.ID)
	return nil
}

// refuse is the answer that keeps the modal open with msg on block.
func refuse(block, msg string) *slack.ViewSubmissionResponse {
	return slack.NewErrorsViewSubmissionResponse(map[string]string{block: msg})
}

// notApplicable says why action does not apply to an item with status.
func notApplicable(action string, status todo.Status) string {
	is := "This item is " + statusWords[status]
	switch action {
	case chat.ActionSkip:
		return is + ": only a pending or in-progress item can be skipped."
	case chat.ActionReopen:
		return is + ": only a done or skipped item can be reopened."
	}
	return "Choose " + chat.LabelSkip + ", " + chat.LabelReopen + " or " + chat.LabelAdd + "."
}
