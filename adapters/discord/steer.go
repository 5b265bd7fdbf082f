package discord

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/bwmarrin/discordgo"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/todo"
)

// Steering the plan on Discord (DESIGN §19). A steerable plan message
// carries, in its container (or under its embed), a string select, the
// item menu: one option per item with the change that applies to it
// first (Skip a pending or in-progress item, Reopen a completed or
// skipped one), its value the item's control (chat.ItemButton), and an
// "Add an item…" option that opens the Add form, a modal asking for the
// new item's text and the number of the item it goes after. While the
// turn waits for its first plan's Start, Start and Change stand beside
// Stop. What a person picks or submits goes to the router as a click; a
// refusal, or what the change did, is told to them alone.

// Ids of the controls the adapter handles itself: the item menu, its Add
// option and the Add form (whose custom_id carries the revision the
// person saw, "pinplan:add-form:7"), the form's text inputs, and Change.
// None is a chat.ButtonID the router knows.
const (
	itemMenuID    = "pinplan:items"
	addFormPrefix = "pinplan:add-form:"
	addTextID     = "text"
	addAfterID    = "after"
)

// changeID is the Change button's custom_id: it answers with where the
// changes are made, the item menu.
var changeID = chat.ButtonID(chat.ActionChange, "plan")

// Discord's limits on a string select and a modal (Component reference).
const (
	maxSelectOptions = 25
	maxOptionLabel   = 100
	// maxItemOptions is how many items the menu offers: all its options
	// but "Add an item…".
	maxItemOptions = maxSelectOptions - 1
)

// Words of the item menu and the Add form.
const (
	itemMenuPlaceholder = "Change an item…"
	addOptionLabel      = "Add an item…"
	addOptionDesc       = "A new item after the one whose number you give"
	addFormTitle        = "Add an item to the plan"
	addTextLabel        = "New item"
	addAfterLabel       = "After item number"
	addAfterHint        = "The number the item has on the plan, e.g. 3"
	changeAnswer        = "Pick a change in the plan's “Change an item…” menu (Skip, Reopen or Add an item), then press Start."
)

// labelEscaper keeps a menu label from reading as a mention: labels are
// plain text, never parsed, but the plan message names nobody even so.
var labelEscaper = strings.NewReplacer("@everyone", "@\u200beveryone", "@here", "@\u200bhere", "<@", "<\u200b@", "<#", "<\u200b#")

// addFormID is the custom_id of the Add form for revision rev, and the
// value of the menu's Add option.
func addFormID(rev int64) string { return addFormPrefix + strconv.FormatInt(rev, 10) }

// menuChoice is an item the menu offers: its number on the plan (from
// 1), the change, and the item.
type menuChoice struct {
	n      int
	action string
	item   todo.Item
}

// menuChoices are the items the item menu offers, in plan order: each
// with the first of chat.Plan.Actions (Skip or Reopen), an item whose
// text an earlier one has once only (the router finds an item by its
// text). A select holds 25 options, so with more than 24 such items (a
// plan holds up to 50, and the items people skipped besides) the menu
// offers 24 in a row: from the first item still open (pending or in
// progress) on, because the work ahead is what people skip, reaching
// back to finished items only where fewer than 24 follow it; a plan with
// nothing open offers its last 24. Items out of the menu keep their
// numbers on the message, and the Add form takes any of them.
func menuChoices(p chat.Plan) []menuChoice {
	var out []menuChoice
	seen := map[string]bool{}
	for i, it := range p.Items {
		actions := p.Actions(it)
		if len(actions) == 0 || seen[it.Content] {
			continue
		}
		seen[it.Content] = true
		out = append(out, menuChoice{n: i + 1, action: actions[0], item: it})
	}
	if len(out) <= maxItemOptions {
		return out
	}
	start := slices.IndexFunc(out, func(c menuChoice) bool { return c.item.Status == todo.Pending || c.item.Status == todo.InProgress })
	if start < 0 {
		start = len(out)
	}
	start = min(start, len(out)-maxItemOptions)
	return out[start : start+maxItemOptions]
}

// actionLabels are the menu's words for the changes, chat's on every
// platform.
var actionLabels = map[string]string{chat.ActionSkip: chat.LabelSkip, chat.ActionReopen: chat.LabelReopen}

// optionLabel is the menu's label for doing action to item n with text
// content: "Skip 3. Deploy to staging", on one line, cut to Discord's
// 100 characters.
func optionLabel(action string, n int, content string) string {
	text := strings.Join(strings.Fields(chat.StripBidi(content)), " ")
	return chat.Shorten(labelEscaper.Replace(fmt.Sprintf("%s %d. %s", actionLabels[action], n, text)), maxOptionLabel)
}

// itemMenu is p's item menu (menuChoices and "Add an item…"); false when
// p offers no changes (chat.Plan.Steerable). p is the plan as chat holds
// it, before Clean: an option's value names its item by a hash of the
// item's text as chat knows it.
func itemMenu(p chat.Plan) (discordgo.SelectMenu, bool) {
	if !p.Steerable() {
		return discordgo.SelectMenu{}, false
	}
	var options []discordgo.SelectMenuOption
	for _, c := range menuChoices(p) {
		options = append(options, discordgo.SelectMenuOption{Label: optionLabel(c.action, c.n, c.item.Content), Value: chat.ItemButton(c.action, p, c.item)})
	}
	options = append(options, discordgo.SelectMenuOption{Label: addOptionLabel, Value: addFormID(p.Revision), Description: addOptionDesc})
	return discordgo.SelectMenu{MenuType: discordgo.StringSelectMenu, CustomID: itemMenuID, Placeholder: itemMenuPlaceholder, Options: options}, true
}

// planControls are the plan message's action rows: the item menu while
// the plan is steerable, then Start and Change while the turn waits for
// Start, and Stop while it runs; none for a plan that offers nothing.
// At most two rows of four components: with the container, its two
// text displays and its separator, ten of the 40 a message may hold.
func planControls(p chat.Plan) []discordgo.MessageComponent {
	var rows []discordgo.MessageComponent
	if menu, ok := itemMenu(p); ok {
		rows = append(rows, discordgo.ActionsRow{Components: []discordgo.MessageComponent{menu}})
	}
	var buttons []discordgo.MessageComponent
	if p.Start != "" {
		buttons = append(buttons,
			discordgo.Button{Label: chat.LabelStart, Style: discordgo.SuccessButton, CustomID: p.Start},
			discordgo.Button{Label: chat.LabelChange, Style: discordgo.SecondaryButton, CustomID: changeID})
	}
	if p.Stoppable {
		buttons = append(buttons, stopButton())
	}
	if len(buttons) > 0 {
		rows = append(rows, discordgo.ActionsRow{Components: buttons})
	}
	return rows
}

// shownPlan is what a channel's newest plan message shows of its items,
// as this process last rendered it: the message, its revision, and by
// number (from 1) each item's Add control (chat.ItemButton), "" for an
// item with none.
type shownPlan struct {
	message  string
	revision int64
	add      []string
}

// remember keeps what the plan message msg in channel now shows, for the
// Add form's numbers. A post makes msg the channel's plan message; an
// edit of another message (an earlier plan's, given its final content
// back) leaves the newest one's record alone.
func (a *Adapter) remember(channel, msg string, p chat.Plan, posted bool) {
	sp := shownPlan{message: msg, revision: p.Revision}
	if p.Steerable() {
		sp.add = make([]string, len(p.Items))
		for i, it := range p.Items {
			if slices.Contains(p.Actions(it), chat.ActionAdd) {
				sp.add[i] = chat.ItemButton(chat.ActionAdd, p, it)
			}
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.shown[channel]; posted || !ok || old.message == msg {
		a.shown[channel] = sp
	}
}

// addControls is, by number, the Add control of each item of revision
// rev of the plan message the interaction i came from, as far as it is
// known here: what this process last rendered on it, when it rendered
// rev; else what the message's own item menu offers (after a restart, or
// where another replica rendered it), which is every item of a plan of
// up to 24. An item known neither way is missing from the map; whole
// reports that every item is in it.
func (a *Adapter) addControls(i *discordgo.Interaction, rev int64) (controls map[int]string, whole bool) {
	out := map[int]string{}
	if i.Message == nil {
		return out, false
	}
	a.mu.Lock()
	sp, ok := a.shown[i.ChannelID]
	a.mu.Unlock()
	if ok && sp.message == i.Message.ID && sp.revision == rev {
		for j, id := range sp.add {
			if id != "" {
				out[j+1] = id
			}
		}
		return out, true
	}
	for _, o := range menuOptions(i.Message.Components) {
		_, id, ok := chat.ParseButtonID(o.Value)
		revText, _, _ := strings.Cut(id, ".")
		fields := strings.Fields(o.Label)
		if !ok || len(fields) < 2 || revText != strconv.FormatInt(rev, 10) {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSuffix(fields[1], ".")); err == nil {
			out[n] = chat.ButtonID(chat.ActionAdd, id)
		}
	}
	return out, false
}

// menuOptions are the options of the item menu among components, at any
// depth (in a container's row or a message's).
func menuOptions(components []discordgo.MessageComponent) []discordgo.SelectMenuOption {
	for _, c := range components {
		switch v := c.(type) {
		case *discordgo.SelectMenu:
			if v.CustomID == itemMenuID {
				return v.Options
			}
		case *discordgo.ActionsRow:
			if o := menuOptions(v.Components); o != nil {
				return o
			}
		case *discordgo.Container:
			if o := menuOptions(v.Components); o != nil {
				return o
			}
		}
	}
	return nil
}

// addForm is the Add form for revision rev: the new item's text (at most
// todo.MaxContentLength characters) and the number of the item it goes
// after. Text inputs stand in action rows: discordgo v0.29 cannot read
// the submission of a form of labels (type 18).
func addForm(rev int64) modalResponse {
	row := func(in discordgo.TextInput) discordgo.ActionsRow {
		return discordgo.ActionsRow{Components: []discordgo.MessageComponent{in}}
	}
	return modalResponse{Type: discordgo.InteractionResponseModal, Data: modalData{
		CustomID: addFormID(rev), Title: addFormTitle,
		Components: []discordgo.MessageComponent{
			row(discordgo.TextInput{CustomID: addTextID, Label: addTextLabel, Style: discordgo.TextInputParagraph, Required: true, MinLength: 1, MaxLength: todo.MaxContentLength}),
			row(discordgo.TextInput{CustomID: addAfterID, Label: addAfterLabel, Style: discordgo.TextInputShort, Required: true, MinLength: 1, MaxLength: 4,
				Placeholder: addAfterHint}),
		},
	}}
}

// modalResponse is a MODAL callback: the form alone (discordgo's
// response data always sends content and embeds too).
type modalResponse struct {
	Type discordgo.InteractionResponseType `json:"type"`
	Data modalData                         `json:"data"`
}

type modalData struct {
	CustomID   string                       `json:"custom_id"`
	Title      string                       `json:"title"`
	Components []discordgo.MessageComponent `json:"components"`
}

// pick handles a choice in the item menu: "Add an item…" opens the Add
// form; an item's change goes to the router as a click on its control.
func (a *Adapter) pick(ctx context.Context, i *discordgo.Interaction, c chat.Click, values []string) {
	if len(values) != 1 {
		a.respond(ctx, i, "Pick one change in the menu.", true)
		return
	}
	if revText, ok := strings.CutPrefix(values[0], addFormPrefix); ok {
		rev, err := strconv.ParseInt(revText, 10, 64)
		if err != nil {
			a.respond(ctx, i, "I don't know that change.", true)
			return
		}
		endpoint := discordgo.EndpointInteractionResponse(i.ID, i.Token)
		if _, err := a.s.RequestWithBucketID(http.MethodPost, endpoint, addForm(rev), endpoint, discordgo.WithContext(ctx)); err != nil {
			a.log.Warn("discord open the Add form", "interaction", i.ID, "err", err)
		}
		return
	}
	c.Button = values[0]
	a.answer(ctx, i, a.in.Click(ctx, c))
}

// submitAdd handles the Add form: the number given is the item of the
// plan as its message showed it at the form's revision (addControls),
// and the router gets a click on that item's Add control with the text.
// A number that names no item is told to the person alone, as the
// router's refusals are.
func (a *Adapter) submitAdd(ctx context.Context, i *discordgo.Interaction, c chat.Click) {
	data := i.ModalSubmitData()
	rev, err := strconv.ParseInt(strings.TrimPrefix(data.CustomID, addFormPrefix), 10, 64)
	if !strings.HasPrefix(data.CustomID, addFormPrefix) || err != nil {
		a.respond(ctx, i, "I don't know that form.", true)
		return
	}
	values := formValues(data.Components)
	text, afterText := strings.TrimSpace(values[addTextID]), strings.TrimSpace(values[addAfterID])
	controls, whole := a.addControls(i, rev)
	n, err := strconv.Atoi(strings.TrimSuffix(afterText, "."))
	id, ok := controls[n]
	switch {
	case len(controls) == 0:
		a.respond(ctx, i, "The plan changed since you opened the form; pick “Add an item…” on the pinned plan again.", true)
		return
	case err == nil && !ok && !whole && n > 0:
		lo, hi := len(controls), 0
		for k := range controls {
			lo, hi = min(lo, k), max(hi, k)
		}
		a.respond(ctx, i, fmt.Sprintf("I can't tell which item %d is on this plan just now: add after one of the items its menu lists (%d to %d), or try again once the plan next changes.", n, lo, hi), true)
		return
	case err != nil || !ok:
		a.respond(ctx, i, fmt.Sprintf("“%s” is not the number of an item on the plan; give the number the item you want it after has on the pinned plan.", chat.Shorten(afterText, 20)), true)
		return
	}
	c.Button, c.Text = id, text
	a.answer(ctx, i, a.in.Click(ctx, c))
}

// formValues are a submitted form's text inputs by custom_id.
func formValues(components []discordgo.MessageComponent) map[string]string {
	out := map[string]string{}
	for _, c := range components {
		switch v := c.(type) {
		case *discordgo.ActionsRow:
			for k, s := range formValues(v.Components) {
				out[k] = s
			}
		case *discordgo.TextInput:
			out[v.CustomID] = v.Value
		}
	}
	return out
}

// clicker is who pressed, picked or submitted in i, as a click in its
// channel's session; false for an interaction without a user.
func clicker(i *discordgo.Interaction) (chat.Click, bool) {
	user := i.User
	if i.Member != nil && i.Member.User != nil {
		user = i.Member.User
	}
	if user == nil {
		return chat.Click{}, false
	}
	th := chat.Thread{Platform: "discord", Key: Key(i.ChannelID), Channel: i.ChannelID}
	return chat.Click{Thread: th, UserID: user.ID, UserName: cmp.Or(user.GlobalName, user.Username)}, true
}
