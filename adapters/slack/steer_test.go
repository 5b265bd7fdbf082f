package slack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/internal/golden"
	"github.com/pinplan/pinplan/internal/inboxtest"
	"github.com/pinplan/pinplan/todo"
)

// steeredPlan is a plan people changed while its turn runs: Ann skipped
// an item, Bo added one.
func steeredPlan() chat.Plan {
	return chat.Plan{Revision: 4, State: chat.StateWorking, Updated: at, Stoppable: true,
		Items: []todo.Item{
			{Content: "Read the failing test", Status: todo.Completed},
			{Content: "Deploy to <staging> & check", Status: chat.Skipped},
			{Content: "Fix the parser", Status: todo.InProgress},
			{Content: "Run the suite", Status: todo.Pending},
		},
		Marks: []agent.Mark{
			{Action: agent.SteerSkip, Item: "Deploy to <staging> & check", After: "Read the failing test", By: "Ann", At: at},
			{Action: agent.SteerAdd, Item: "Run the suite", By: "Bo", At: at, Owed: true},
		}}
}

// startPlan is a turn's first plan waiting for Start.
func startPlan() chat.Plan {
	return chat.Plan{Revision: 1, State: chat.StateWaiting, Updated: at, Stoppable: true, Start: chat.ButtonID(chat.ActionStart, "plan-1"),
		Items: []todo.Item{
			{Content: "Read the notes", Status: todo.InProgress},
			{Content: "Write the summary", Status: todo.Pending},
		}}
}

func TestSteerPlanBlocksGolden(t *testing.T) {
	for name, p := range map[string]chat.Plan{"steered": steeredPlan(), "start": startPlan()} {
		t.Run(name, func(t *testing.T) {
			blocks := PlanBlocks(p)
			checkLimits(t, blocks, PlanText(p))
			got, err := json.MarshalIndent(map[string]any{"text": PlanText(p), "blocks": blocks}, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", name+".json"), got)
			native, err := json.MarshalIndent(NativePlanBlocks(p), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", "native_"+name+".json"), native)
		})
	}
}

// buttons returns the labels, action ids and styles of the buttons in
// blocks.
func buttons(blocks []slack.Block) (labels, ids, styles []string) {
	for _, b := range blocks {
		ab, ok := b.(*slack.ActionBlock)
		if !ok {
			continue
		}
		for _, e := range ab.Elements.ElementSet {
			if btn, ok := e.(*slack.ButtonBlockElement); ok {
				labels, ids, styles = append(labels, btn.Text.Text), append(ids, btn.ActionID), append(styles, string(btn.Style))
			}
		}
	}
	return labels, ids, styles
}

// TestPlanControls: Edit plan on a plan people may steer, beside Stop
// while a turn runs; Start (primary, the plan's own id), Change and Stop
// while it waits for Start; nothing on a plan without items or before
// the agent wrote one; in both renderings, in one actions block.
func TestPlanControls(t *testing.T) {
	done := plans()["typical"]
	done.State = chat.StateDone
	tests := []struct {
		name   string
		plan   chat.Plan
		labels []string
		ids    []string
		styles []string
	}{
		{"running", steeredPlan(), []string{labelEdit, chat.LabelStop}, []string{editID, stopID}, []string{"", "danger"}},
		{"waiting for Start", startPlan(), []string{chat.LabelStart, chat.LabelChange, chat.LabelStop},
			[]string{startPlan().Start, editID, stopID}, []string{"primary", "", "danger"}},
		{"done", done, []string{labelEdit}, []string{editID}, []string{""}},
		{"no items", chat.Plan{Revision: 2, Updated: at}, nil, nil, nil},
		{"revision 0", chat.Plan{Updated: at, Items: []todo.Item{{Content: "a", Status: todo.Pending}}}, nil, nil, nil},
	}
	for _, tt := range tests {
		for render, blocks := range map[string][]slack.Block{"standard": PlanBlocks(tt.plan), "native": NativePlanBlocks(tt.plan)} {
			labels, ids, styles := buttons(blocks)
			if !slices.Equal(labels, tt.labels) || !slices.Equal(ids, tt.ids) || !slices.Equal(styles, tt.styles) {
				t.Errorf("%s, %s: buttons %q %q %q, want %q %q %q", tt.name, render, labels, ids, styles, tt.labels, tt.ids, tt.styles)
			}
			n := 0
			for _, b := range blocks {
				if _, ok := b.(*slack.ActionBlock); ok {
					n++
				}
			}
			if want := min(len(tt.labels), 1); n != want {
				t.Errorf("%s, %s: %d actions blocks, want %d", tt.name, render, n, want)
			}
		}
	}
}

// TestSkippedItemStruck: a skipped item stays where it was, struck
// through with its mark and who skipped it; it does not count in the
// progress.
func TestSkippedItemStruck(t *testing.T) {
	p := steeredPlan()
	items, evidence := sectionLines(PlanBlocks(p))
	if items[1] != chat.MarkSkipped+" ~Deploy to &lt;staging&gt; &amp; check~" {
		t.Errorf("skipped item line %q, want it struck with its mark", items[2])
	}
	if !slices.Contains(evidence, "↳ skipped by Ann") || !slices.Contains(evidence, "↳ added by Bo") {
		t.Errorf("evidence lines %q, want who skipped and who added", evidence)
	}
	if !strings.HasPrefix(PlanText(p), "Plan · 1/3 done") {
		t.Errorf("title %q, want the skipped item out of the count", strings.SplitN(PlanText(p), "\n", 2)[0])
	}
	tc := NativePlanBlocks(p)[0].(*slack.PlanBlock).Tasks[1]
	if tc.Title != chat.MarkSkipped+" Deploy to <staging> & check" || tc.Status != slack.TaskCardStatusPending {
		t.Errorf("native skipped card %q %s, want its mark, not done", tc.Title, tc.Status)
	}
	els := tc.Details.Elements[0].(*slack.RichTextSection).Elements
	struck := els[0].(*slack.RichTextSectionTextElement)
	if struck.Text != "Deploy to <staging> & check" || struck.Style == nil || !struck.Style.Strike || els[1].(*slack.RichTextSectionTextElement).Text != "\n↳ skipped by Ann" {
		t.Errorf("native skipped details %+v, want the item struck, then who skipped it", els)
	}
}

// bigPlan is a plan of n agent items of long content and skipped more
// items a person skipped, of content that escapes long, waiting for
// Start: every control shown.
func bigPlan(n, skipped int) chat.Plan {
	long := strings.Repeat("very long step with <html> & @channel ", 14)[:500]
	p := chat.Plan{Revision: 9, State: chat.StateWaiting, Updated: at, Stoppable: true, Start: chat.ButtonID(chat.ActionStart, "plan-1")}
	for i := range n {
		p.Items = append(p.Items, todo.Item{Content: fmt.Sprintf("%02d %s", i, long), Status: []todo.Status{todo.Completed, todo.InProgress, todo.Pending}[i%3]})
	}
	for i := range skipped {
		c := fmt.Sprintf("skipped %02d ", i) + strings.Repeat("&", 300) // five characters each in mrkdwn
		p.Items = append(p.Items, todo.Item{Content: c, Status: chat.Skipped})
		p.Marks = append(p.Marks, agent.Mark{Action: agent.SteerSkip, Item: c, By: "Ann", At: at})
	}
	return p
}

// TestControlsWithinLimits: with the controls in, a 50-item plan of long
// content keeps every item within 50 blocks and 3,000 characters a
// section; one with more items shown than fit still ends on its footer
// and controls; Slack (the fake) takes both, posted and edited, in both
// renderings, and the Edit plan value stays within a button's 2,000.
func TestControlsWithinLimits(t *testing.T) {
	for _, tt := range []struct {
		name    string
		plan    chat.Plan
		allKept bool
	}{{"50 items", bigPlan(todo.MaxItems, 0), true}, {"50 items and 80 skipped", bigPlan(todo.MaxItems, 80), false}} {
		t.Run(tt.name, func(t *testing.T) {
			blocks := PlanBlocks(tt.plan)
			checkLimits(t, blocks, PlanText(tt.plan))
			if len(blocks) > maxBlocks {
				t.Fatalf("%d blocks", len(blocks))
			}
			items, _ := sectionLines(blocks)
			if kept := len(items) == len(tt.plan.Items); kept != tt.allKept {
				t.Errorf("%d item lines for %d items", len(items), len(tt.plan.Items))
			}
			if _, ok := blocks[len(blocks)-2].(*slack.ContextBlock); !ok {
				t.Errorf("the block before the controls is a %T, want the footer", blocks[len(blocks)-2])
			}
			if labels, _, _ := buttons(blocks[len(blocks)-1:]); !slices.Equal(labels, []string{chat.LabelStart, chat.LabelChange, chat.LabelStop}) {
				t.Errorf("last block's buttons %q, want Start, Change and Stop", labels)
			}
			v := editValue(tt.plan)
			sp, ok := parseEditValue(v)
			if n := utf8.RuneCountInString(v); n > 2000 || !ok || len(sp.items) != min(len(tt.plan.Items), maxEditItems) {
				t.Errorf("Edit plan value of %d characters read as %d items (%t)", n, len(sp.items), ok)
			}
			for _, native := range []bool{false, true} {
				a, fake := testAdapter(t, native)
				th := chat.Thread{Platform: "slack", Key: "slack/T1/C1/1.1", Channel: "C1", ThreadID: "1.1"}
				ref, err := a.PostPlan(context.Background(), th, tt.plan)
				if err != nil {
					t.Fatal(err)
				}
				if err := a.EditPlan(context.Background(), th, ref, tt.plan); err != nil {
					t.Fatal(err)
				}
				if v := fake.Violations(); len(v) > 0 {
					t.Errorf("native %t: Slack refused the plan: %q", native, v)
				}
			}
		})
	}
}

// steerInbox answers clicks as the router does: a steer of U1 is taken,
// anyone else's refused; an Add of "dup" is refused as a duplicate.
type steerInbox struct {
	inboxtest.Inbox
	mu     sync.Mutex // guards clicks
	clicks []chat.Click
}

func (s *steerInbox) Click(_ context.Context, c chat.Click) chat.ClickResult {
	s.mu.Lock()
	s.clicks = append(s.clicks, c)
	s.mu.Unlock()
	action, _, _ := chat.ParseButtonID(c.Button)
	switch {
	case c.UserID != "U1":
		return chat.ClickResult{Private: "Only the person who asked, the one who started this conversation or an approver can change the plan.", Refused: true}
	case action == chat.ActionAdd && c.Text == "dup":
		return chat.ClickResult{Private: "I couldn't change the plan: the plan has that item already.", Refused: true}
	}
	return chat.ClickResult{Private: "You " + action + "ed it. The plan shows it in a moment."}
}

func (s *steerInbox) got() []chat.Click {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.clicks)
}

type steerRig struct {
	a     *Adapter
	fake  *fakeslack.Server
	inbox *steerInbox
	th    chat.Thread
}

// newSteerRig is a started adapter over HTTP on a fake, and a thread in
// it.
func newSteerRig(t *testing.T, native bool) *steerRig {
	t.Helper()
	fake := &fakeslack.Server{}
	fake.AddUser("U1", "Ann")
	fake.AddUser("U2", "Bob")
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	r := &steerRig{fake: fake, inbox: &steerInbox{}}
	r.a = New(Options{BotToken: "xoxb-t", APIURL: srv.URL + "/api/", SigningSecret: "secret", NativePlan: native, Dedupe: &inboxtest.Dedupe{}})
	if err := r.a.Start(t.Context(), r.inbox); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.a.Wait)
	fake.CallbackBody("EvRoot", map[string]any{"type": "message", "user": "U1", "channel": "C1", "ts": "1.1", "text": "plan the release"})
	r.th = chat.Thread{Platform: "slack", Key: Key("T1", "C1", "1.1"), Channel: "C1", ThreadID: "1.1"}
	return r
}

// interact posts payload to the interactivity Request URL, signed, and
// returns the answer.
func (r *steerRig) interact(t *testing.T, payload map[string]any) *httptest.ResponseRecorder {
	t.Helper()
	req := signed(t, "/slack/interactions", "secret", r.fake.InteractionBody(payload))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	r.a.InteractionsHandler(context.Background()).ServeHTTP(w, req)
	return w
}

// openEdit posts p, presses its Edit plan (or Change) as user and
// returns the modal opened.
func (r *steerRig) openEdit(t *testing.T, p chat.Plan, user string) fakeslack.View {
	t.Helper()
	ref, err := r.a.PostPlan(context.Background(), r.th, p)
	if err != nil {
		t.Fatal(err)
	}
	before := len(r.fake.Views())
	payload := r.fake.BlockActions(user, "C1", ref.ID, editID)
	if payload == nil {
		t.Fatalf("no %s button on the plan", editID)
	}
	if w := r.interact(t, payload); w.Code != http.StatusOK {
		t.Fatalf("block_actions answered %d", w.Code)
	}
	r.a.queue.Wait(context.Background())
	views := r.fake.Views()
	if len(views) != before+1 {
		t.Fatalf("%d modals opened, want 1; violations %q", len(views)-before, r.fake.Violations())
	}
	return views[len(views)-1]
}

// submit submits view as user with the item, action and text picked
// (each left out when ""), over HTTP, and returns what Slack made of the
// answer.
func (r *steerRig) submit(t *testing.T, view fakeslack.View, user, item, action, text string) fakeslack.ViewAck {
	t.Helper()
	values := map[string]map[string]string{}
	for block, v := range map[string]string{blockText: text, blockItem: item, blockAction: action} {
		if v != "" {
			values[block] = map[string]string{block: v} // each input's action_id is its block's id
		}
	}
	payload, err := r.fake.ViewSubmission(user, view.ID, values)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	w := r.interact(t, payload)
	if took := time.Since(start); took > time.Second {
		t.Errorf("the submission was answered in %s", took)
	}
	ack, err := r.fake.AnswerViewSubmission(payload, w.Code, w.Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if ack.Refused != "" {
		t.Fatalf("Slack refused the answer %s: %s", w.Body, ack.Refused)
	}
	return ack
}

// itemID is the id the modal gives p's item i: the item controls'.
func itemID(p chat.Plan, i int) string {
	_, id, _ := chat.ParseButtonID(chat.ItemButton(chat.ActionSkip, p, p.Items[i]))
	return id
}

// TestEditPlanModal: Edit plan opens, on the press's trigger, a modal
// Slack takes: the items as the message shows them, numbered, with
// their status, each named as the item controls name it; the actions;
// an optional text of at most an item's length; and what the submission
// needs in private_metadata. Change on a plan waiting for Start opens
// the same.
func TestEditPlanModal(t *testing.T) {
	for _, native := range []bool{false, true} {
		r := newSteerRig(t, native)
		p := steeredPlan()
		p.Items[3].Content = "Run the suite \u202e& report " + strings.Repeat("x", 100)
		p.Marks[1].Item = p.Items[3].Content
		view := r.openEdit(t, p, "U2")
		if view.Title != "Change the plan" || view.User != "U2" || view.CallbackID != editCallbackID || !view.Open {
			t.Errorf("native %t: modal %+v", native, view)
		}
		if v := r.fake.Violations(); len(v) > 0 {
			t.Fatalf("native %t: Slack refused: %q", native, v)
		}
		var blocks []map[string]any
		if err := json.Unmarshal([]byte(view.Blocks), &blocks); err != nil {
			t.Fatal(err)
		}
		var texts, values, descs []string
		for _, o := range blocks[1]["element"].(map[string]any)["options"].([]any) {
			om := o.(map[string]any)
			texts = append(texts, om["text"].(map[string]any)["text"].(string))
			values = append(values, om["value"].(string))
			descs = append(descs, om["description"].(map[string]any)["text"].(string))
		}
		wantTexts := []string{"1. Read the failing test", "2. Deploy to <staging> & check", "3. Fix the parser",
			chat.Shorten("4. Run the suite & report "+strings.Repeat("x", 100), maxOptionText)}
		if !slices.Equal(texts, wantTexts) {
			t.Errorf("native %t: options %q, want %q", native, texts, wantTexts)
		}
		if want := []string{itemID(p, 0), itemID(p, 1), itemID(p, 2), itemID(p, 3)}; !slices.Equal(values, want) {
			t.Errorf("native %t: option values %q, want the item controls' %q", native, values, want)
		}
		if want := []string{"done", "skipped", "in progress", "pending"}; !slices.Equal(descs, want) {
			t.Errorf("native %t: statuses %q, want %q", native, descs, want)
		}
		var actions []string
		for _, o := range blocks[2]["element"].(map[string]any)["options"].([]any) {
			actions = append(actions, o.(map[string]any)["value"].(string))
		}
		if !slices.Equal(actions, []string{chat.ActionSkip, chat.ActionReopen, chat.ActionAdd}) {
			t.Errorf("native %t: actions %q", native, actions)
		}
		if in := blocks[3]; in["optional"] != true || in["element"].(map[string]any)["max_length"] != float64(todo.MaxContentLength) {
			t.Errorf("native %t: text input %v, want optional, at most %d characters", native, in, todo.MaxContentLength)
		}
		var meta editMeta
		if err := json.Unmarshal([]byte(view.PrivateMetadata), &meta); err != nil || meta.Key != r.th.Key || meta.Channel != "C1" || meta.Thread != "1.1" || !strings.HasPrefix(meta.Plan, "4/4:") {
			t.Errorf("native %t: private_metadata %q (%v)", native, view.PrivateMetadata, err)
		}
		if c := r.inbox.got(); len(c) != 0 {
			t.Errorf("native %t: opening the modal clicked %+v", native, c)
		}
		start := r.openEdit(t, startPlan(), "U1")
		if start.Title != "Change the plan" || !strings.Contains(start.Blocks, "Write the summary") {
			t.Errorf("native %t: Change opened %+v", native, start)
		}
	}
}

// TestEditPlanSubmission: a submission that does not apply to the item
// as the modal showed it, or an Add without its text, is answered with
// errors on its input and reaches no one; the router's refusal too, kept
// private in the modal; a change taken closes the modal, and the router's
// note goes to the presser alone, in the thread.
func TestEditPlanSubmission(t *testing.T) {
	p := steeredPlan()
	id := func(i int) string { return itemID(p, i) }
	tests := []struct {
		name, user, item, action, text string
		errBlock, errHas               string // "" for a change taken
		button                         string
	}{
		{"skip pending", "U1", id(3), chat.ActionSkip, "", "", "", chat.ButtonID(chat.ActionSkip, id(3))},
		{"skip in progress", "U1", id(2), chat.ActionSkip, "", "", "", chat.ButtonID(chat.ActionSkip, id(2))},
		{"reopen skipped", "U1", id(1), chat.ActionReopen, "", "", "", chat.ButtonID(chat.ActionReopen, id(1))},
		{"reopen done", "U1", id(0), chat.ActionReopen, "", "", "", chat.ButtonID(chat.ActionReopen, id(0))},
		{"add", "U1", id(0), chat.ActionAdd, "  Tag the release ", "", "", chat.ButtonID(chat.ActionAdd, id(0))},
		{"skip done", "U1", id(0), chat.ActionSkip, "", blockAction, "only a pending or in-progress item can be skipped", ""},
		{"skip skipped", "U1", id(1), chat.ActionSkip, "", blockAction, "This item is skipped", ""},
		{"reopen pending", "U1", id(3), chat.ActionReopen, "", blockAction, "only a done or skipped item can be reopened", ""},
		{"add without text", "U1", id(2), chat.ActionAdd, "", blockText, "Write the item to add", ""},
		{"text without add", "U1", id(2), chat.ActionSkip, "more", blockText, "Only Add takes a new item", ""},
		{"refused", "U2", id(3), chat.ActionSkip, "", blockItem, "Only the person who asked", chat.ButtonID(chat.ActionSkip, id(3))},
		{"add refused", "U1", id(3), chat.ActionAdd, "dup", blockText, "the plan has that item already", chat.ButtonID(chat.ActionAdd, id(3))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newSteerRig(t, false)
			view := r.openEdit(t, p, tt.user)
			ack := r.submit(t, view, tt.user, tt.item, tt.action, tt.text)
			r.a.queue.Wait(context.Background())
			clicks, notes := r.inbox.got(), r.inbox.Notes()
			if tt.button == "" && len(clicks) != 0 {
				t.Errorf("clicks %+v, want none", clicks)
			}
			if tt.button != "" {
				want := chat.Click{Thread: r.th, Button: tt.button, UserID: tt.user, UserName: map[string]string{"U1": "Ann", "U2": "Bob"}[tt.user],
					Show: true, Text: strings.TrimSpace(tt.text)}
				if len(clicks) != 1 || clicks[0] != want {
					t.Errorf("clicks %+v, want %+v", clicks, want)
				}
			}
			if tt.errBlock == "" {
				if !ack.Closed || len(ack.Errors) != 0 {
					t.Errorf("ack %+v, want the modal closed", ack)
				}
				if len(notes) != 1 || notes[0].User != tt.user || notes[0].Thread != r.th || !strings.HasPrefix(notes[0].Text, "You ") {
					t.Errorf("notes %+v, want the router's note to %s alone", notes, tt.user)
				}
				return
			}
			if ack.Closed || ack.Action != "errors" || len(ack.Errors) != 1 || !strings.Contains(ack.Errors[tt.errBlock], tt.errHas) {
				t.Errorf("ack %+v, want the modal open with %q on %s", ack, tt.errHas, tt.errBlock)
			}
			if len(notes) != 0 || len(r.fake.Ephemerals("C1")) != 0 {
				t.Errorf("notes %+v, want none: the modal says it", notes)
			}
		})
	}
}

// TestEditPlanModalStale: a submission whose private_metadata is not
// the adapter's is answered with an error, not dropped.
func TestEditPlanModalStale(t *testing.T) {
	r := newSteerRig(t, false)
	var cb slack.InteractionCallback
	cb.Type, cb.View.CallbackID, cb.View.PrivateMetadata = slack.InteractionTypeViewSubmission, editCallbackID, "{}"
	ans := r.a.viewSubmitted(context.Background(), cb)
	if ans == nil || ans.ResponseAction != slack.RAErrors || ans.Errors[blockItem] == "" {
		t.Errorf("answer %+v, want an error on the item", ans)
	}
	if c := r.inbox.got(); len(c) != 0 {
		t.Errorf("clicks %+v", c)
	}
}

// TestEditPlanModalBigPlan: a plan of more items than a select takes
// offers the first 100, says so, and names each with its words where
// the message's text has them (its last items are counted, not
// written); the message's text stays within Slack's 40,000 characters.
func TestEditPlanModalBigPlan(t *testing.T) {
	r := newSteerRig(t, false)
	p := bigPlan(todo.MaxItems, 80)
	text := PlanText(p)
	if n := utf8.RuneCountInString(text); n > maxText {
		t.Fatalf("plan text of %d characters", n)
	}
	var more int
	if _, err := fmt.Sscanf(text[strings.LastIndex(text, "…"):], moreItems, &more); err != nil || more == 0 {
		t.Fatalf("the text counts no items left out (%v): ...%s", err, text[len(text)-200:])
	}
	view := r.openEdit(t, p, "U1")
	if v := r.fake.Violations(); len(v) > 0 {
		t.Fatalf("Slack refused: %q", v)
	}
	var blocks []map[string]any
	if err := json.Unmarshal([]byte(view.Blocks), &blocks); err != nil {
		t.Fatal(err)
	}
	if intro := blocks[0]["elements"].([]any)[0].(map[string]any)["text"]; !strings.Contains(intro.(string), "The first 100 of its 130 items") {
		t.Errorf("intro %q", intro)
	}
	options := blocks[1]["element"].(map[string]any)["options"].([]any)
	if len(options) != maxEditItems {
		t.Fatalf("%d options, want %d", len(options), maxEditItems)
	}
	named := len(p.Items) - more
	for i, o := range options {
		om := o.(map[string]any)
		label := om["text"].(map[string]any)["text"].(string)
		want := fmt.Sprintf("%d.", i+1)
		if i < named {
			want = chat.Shorten(fmt.Sprintf("%d. %s", i+1, strings.Join(strings.Fields(p.Items[i].Content), " ")), maxOptionText)
		}
		if label != want || om["value"] != itemID(p, i) {
			t.Errorf("option %d: %q %v, want %q %s", i, label, om["value"], want, itemID(p, i))
		}
	}
}

// TestShownTextsAllOrNothing: the items' words are read from a plan's
// text only when it reads as a plan of that many items.
func TestShownTextsAllOrNothing(t *testing.T) {
	p := steeredPlan()
	if got := shownTexts(PlanText(p), 4); !slices.Equal(got, []string{"Read the failing test", "Deploy to <staging> & check", "Fix the parser", "Run the suite"}) {
		t.Errorf("texts %q", got)
	}
	for _, total := range []int{3, 5} {
		if got := shownTexts(PlanText(p), total); got != nil {
			t.Errorf("a text of 4 items read as %d: %q", total, got)
		}
	}
	if got := shownTexts("something else", 1); got != nil {
		t.Errorf("texts %q", got)
	}
}
