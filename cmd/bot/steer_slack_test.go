package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/todo"
)

// The Slack surface of steering the plan (DESIGN §19), through the
// binary: Start while the first plan waits (PINPLAN_PLAN_APPROVAL=ask),
// and the Edit plan modal.

const (
	slackChangeID = "pinplan:change:plan" // Edit plan, or Change while the plan waits for Start
	slackStartPfx = "pinplan:start:"
)

// slackSteerItems is the plan the steering tests' model writes first.
var slackSteerItems = []todo.Item{
	{Content: "Read the notes", Status: todo.InProgress},
	{Content: "Write the summary", Status: todo.Pending},
	{Content: "Send it", Status: todo.Pending},
}

// newSlackSteerRig is a Socket Mode rig where ann (U1) asks and bob
// (U2) looks on; with ask, a turn's first plan waits for Start. The
// model answers with replies, by the number of its earlier answers in
// the conversation.
func newSlackSteerRig(t *testing.T, ask bool, replies []fakeopenai.Reply) *slackRig {
	t.Helper()
	r := newSlackRig(t, 1, 0, true)
	r.model.Respond = fakeopenai.Script(func(string) []fakeopenai.Reply { return replies })
	if ask {
		r.env["PINPLAN_PLAN_APPROVAL"] = "ask"
	}
	r.slack.AddUser("U1", "ann")
	r.slack.AddUser("U2", "bob")
	return r
}

func slackWritePlan(items []todo.Item) fakeopenai.Reply {
	return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: todo.ToolName, Arguments: todo.Encode(items)}}}
}

// slackButtonIDs returns the action ids of the buttons in a message's blocks.
func slackButtonIDs(blocks string) []string {
	var list []map[string]any
	json.Unmarshal([]byte(blocks), &list)
	var ids []string
	for _, b := range list {
		els, _ := b["elements"].([]any)
		for _, e := range els {
			if el, _ := e.(map[string]any); el["type"] == "button" {
				id, _ := el["action_id"].(string)
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// slackStartButton is the Start button's id on a plan message, "" if none.
func slackStartButton(m fakeslack.Message) string {
	for _, id := range slackButtonIDs(m.Blocks) {
		if strings.HasPrefix(id, slackStartPfx) {
			return id
		}
	}
	return ""
}

// slackPlanWaiting waits for the thread's plan message to wait for Start, and
// returns it with its Start button's id.
func slackPlanWaiting(t *testing.T, s *fakeslack.Server, thread string) (fakeslack.Message, string) {
	t.Helper()
	var plan fakeslack.Message
	waitFor(t, 60*time.Second, "the plan waiting for Start in "+thread, func() bool {
		for _, m := range planMessages(s, "C1") {
			if m.ThreadTS == thread && slackStartButton(m) != "" && strings.Contains(m.Blocks, "waiting for Start") {
				plan = m
				return true
			}
		}
		return false
	})
	return plan, slackStartButton(plan)
}

// slackPlanMessage is the bot's message ts in channel C1 as it is now.
func slackPlanMessage(t *testing.T, s *fakeslack.Server, ts string) fakeslack.Message {
	t.Helper()
	for _, m := range planMessages(s, "C1") {
		if m.TS == ts {
			return m
		}
	}
	t.Fatalf("no plan message %s", ts)
	return fakeslack.Message{}
}

// slackPress clicks the button actionID on message ts as user, over
// Socket Mode.
func slackPress(t *testing.T, s *fakeslack.Server, user, ts, actionID string) {
	t.Helper()
	payload := s.BlockActions(user, "C1", ts, actionID)
	if payload == nil {
		t.Fatalf("no button %s on message %s", actionID, ts)
	}
	if _, err := s.PushInteraction(payload); err != nil {
		t.Fatal(err)
	}
}

// slackAnswers returns the bot's replies in the thread: its messages without
// blocks.
func slackAnswers(s *fakeslack.Server, thread string) []fakeslack.Message {
	var out []fakeslack.Message
	for _, m := range s.Messages("C1") {
		if m.ThreadTS == thread && m.BotID != "" && m.Blocks == "" {
			out = append(out, m)
		}
	}
	return out
}

// TestSlackSteerStartWaitsForTheRequester (DESIGN §19): with
// PINPLAN_PLAN_APPROVAL=ask a mention's first plan is posted with Start
// and Change, and no model request follows it; bob's Start is refused to
// him alone and changes nothing; ann's continues the turn to its answer,
// and Start leaves the message.
func TestSlackSteerStartWaitsForTheRequester(t *testing.T) {
	t.Parallel()
	r := newSlackSteerRig(t, true, []fakeopenai.Reply{slackWritePlan(slackSteerItems), {Content: "Summary sent."}})
	p := r.start(t)
	defer p.stop(t)
	thread := "1700090000.000100"
	if _, err := r.slack.Push("EvStart", mention("C1", thread, "summarise the notes")); err != nil {
		t.Fatal(err)
	}
	plan, start := slackPlanWaiting(t, r.slack, thread)
	if ids := slackButtonIDs(plan.Blocks); len(ids) != 3 || ids[1] != slackChangeID || ids[2] != "pinplan:stop:plan" {
		t.Errorf("buttons %q, want Start, Change and Stop", ids)
	}
	if n := len(r.model.Requests()); n != 1 {
		t.Fatalf("%d model requests before Start, want 1", n)
	}
	slackPress(t, r.slack, "U2", plan.TS, start)
	ephemeralTo(t, r.slack, "C1", "U2", "Only the person who asked")
	if n := len(r.model.Requests()); n != 1 {
		t.Errorf("%d model requests after bob's Start, want 1", n)
	}
	if now := slackPlanMessage(t, r.slack, plan.TS); now.Blocks != plan.Blocks || now.Edits != plan.Edits {
		t.Errorf("bob's Start changed the plan message: %d edits, %s", now.Edits-plan.Edits, now.Blocks)
	}
	if got := slackAnswers(r.slack, thread); len(got) != 0 {
		t.Errorf("replies after bob's Start: %+v", got)
	}
	for _, m := range r.slack.Ephemerals("C1") {
		if m.Recipient != "U2" {
			t.Errorf("a private note to %s: %q", m.Recipient, m.Text)
		}
	}
	slackPress(t, r.slack, "U1", plan.TS, start)
	waitReply(t, r.slack, "C1", thread, "Summary sent.")
	if n := len(r.model.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2: the plan, then the answer after Start", n)
	}
	waitFor(t, 10*time.Second, "the plan done without Start", func() bool {
		m := slackPlanMessage(t, r.slack, plan.TS)
		return strings.Contains(m.Blocks, "· done") && slackStartButton(m) == ""
	})
}

// TestSlackSteerStartSurvivesKill: killed (-9) while the plan waits for
// Start, the bot started again takes the Start on the same message: the
// turn goes on and answers once.
func TestSlackSteerStartSurvivesKill(t *testing.T) {
	t.Parallel()
	r := newSlackSteerRig(t, true, []fakeopenai.Reply{slackWritePlan(slackSteerItems), {Content: "Summary sent."}})
	p := r.start(t)
	thread := "1700090100.000100"
	if _, err := r.slack.Push("EvKill", mention("C1", thread, "summarise the notes")); err != nil {
		t.Fatal(err)
	}
	plan, start := slackPlanWaiting(t, r.slack, thread)
	p.kill()
	p = r.start(t)
	defer p.stop(t)
	// Pressed as soon as the message shows Start: the bot started again
	// edits it while it resumes (and, for a moment, without Start).
	var payload map[string]any
	waitFor(t, 10*time.Second, "Start on the plan after the restart", func() bool {
		payload = r.slack.BlockActions("U1", "C1", plan.TS, start)
		return payload != nil
	})
	if _, err := r.slack.PushInteraction(payload); err != nil {
		t.Fatal(err)
	}
	waitReply(t, r.slack, "C1", thread, "Summary sent.")
	// The final state follows the answer's turn: once it shows, a
	// second answer would have been sent.
	waitFor(t, 10*time.Second, "the plan done without Start", func() bool {
		m := slackPlanMessage(t, r.slack, plan.TS)
		return strings.Contains(m.Blocks, "· done") && slackStartButton(m) == ""
	})
	if got := slackAnswers(r.slack, thread); len(got) != 1 {
		t.Errorf("%d replies, want the answer once: %+v", len(got), got)
	}
	if n := len(r.model.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2: the plan before the kill, the answer after Start", n)
	}
	if n := len(planMessages(r.slack, "C1")); n != 1 {
		t.Errorf("%d plan messages, want the one", n)
	}
}

// slackOption is the value of the option whose label starts with label
// in the view's input block: what a person picks there.
func slackOption(t *testing.T, view fakeslack.View, block, label string) string {
	t.Helper()
	var blocks []map[string]any
	if err := json.Unmarshal([]byte(view.Blocks), &blocks); err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if b["block_id"] != block {
			continue
		}
		el := b["element"].(map[string]any)
		for _, o := range el["options"].([]any) {
			om := o.(map[string]any)
			if text, _ := om["text"].(map[string]any)["text"].(string); strings.HasPrefix(text, label) {
				return om["value"].(string)
			}
		}
		t.Fatalf("block %s offers no option %q", block, label)
	}
	t.Fatalf("the view has no block %s", block)
	return ""
}

// TestSlackSteerSkipFromTheModal: after a turn, ann skips an item from
// the pinned plan's Edit plan modal (over Socket Mode): the modal
// closes, ann is told privately, and the plan message shows the item
// struck, skipped by ann, in one chat.update. The model's next request
// (ann's next message) tells it ann skipped the item; a snapshot that
// writes it back gets a tool error naming ann, and the plan keeps the
// skip to the end.
func TestSlackSteerSkipFromTheModal(t *testing.T) {
	t.Parallel()
	done := todo.Item{Content: "Read the notes", Status: todo.Completed}
	r := newSlackSteerRig(t, false, []fakeopenai.Reply{
		slackWritePlan(slackSteerItems),
		{Content: "The plan is ready."},
		slackWritePlan([]todo.Item{done, {Content: "Write the summary", Status: todo.InProgress}, {Content: "Send it", Status: todo.Pending}}),
		slackWritePlan([]todo.Item{done, {Content: "Send it", Status: todo.Completed}}),
		{Content: "Sent, without a summary."},
	})
	p := r.start(t)
	defer p.stop(t)
	thread := "1700090200.000100"
	if _, err := r.slack.Push("EvSkip", mention("C1", thread, "summarise the notes")); err != nil {
		t.Fatal(err)
	}
	waitReply(t, r.slack, "C1", thread, "The plan is ready.")
	var plan fakeslack.Message
	waitFor(t, 10*time.Second, "the plan done, with Edit plan", func() bool {
		pl := planMessages(r.slack, "C1")
		if len(pl) == 1 && strings.Contains(pl[0].Blocks, "· done") {
			plan = pl[0]
		}
		return plan.TS != ""
	})
	if ids := slackButtonIDs(plan.Blocks); len(ids) != 1 || ids[0] != slackChangeID || !strings.Contains(plan.Blocks, `"Edit plan"`) {
		t.Fatalf("buttons %q on the done plan, want Edit plan", ids)
	}
	slackPress(t, r.slack, "U1", plan.TS, slackChangeID)
	var view fakeslack.View
	waitFor(t, 10*time.Second, "the modal", func() bool {
		for _, v := range r.slack.Views() {
			if v.User == "U1" && v.Open {
				view = v
				return true
			}
		}
		return false
	})
	payload, err := r.slack.ViewSubmission("U1", view.ID, map[string]map[string]string{
		"item":   {"item": slackOption(t, view, "item", "2. Write the summary")},
		"action": {"action": slackOption(t, view, "action", "Skip")},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := r.slack.PushViewSubmission(ctx, payload)
	if err != nil {
		t.Fatal(err)
	}
	if !ack.Closed || ack.Refused != "" {
		t.Fatalf("the submission's ack %+v, want the modal closed", ack)
	}
	ephemeralTo(t, r.slack, "C1", "U1", "You skipped")
	var skipped fakeslack.Message
	waitFor(t, 15*time.Second, "the plan to show the skip", func() bool {
		skipped = slackPlanMessage(t, r.slack, plan.TS)
		return strings.Contains(skipped.Blocks, "skipped by ann")
	})
	if !strings.Contains(skipped.Blocks, "⏭️ ~Write the summary~") || !strings.Contains(skipped.Text, "Plan · 0/2 done") {
		t.Errorf("the plan after the skip: %s\n%s, want the item struck, out of the count", skipped.Text, skipped.Blocks)
	}
	if n := skipped.Edits - plan.Edits; n != 1 {
		t.Errorf("the skip took %d edits of the plan message, want 1", n)
	}
	if n := len(r.model.Requests()); n != 2 {
		t.Errorf("%d model requests after the skip, want the first turn's 2", n)
	}
	followUp := map[string]any{"type": "message", "channel_type": "channel", "user": "U1", "text": "go on", "ts": "1700090201.000100", "thread_ts": thread, "channel": "C1"}
	if _, err := r.slack.Push("EvSkipGo", followUp); err != nil {
		t.Fatal(err)
	}
	waitReply(t, r.slack, "C1", thread, "Sent, without a summary.")
	if n := slackPlanMessage(t, r.slack, plan.TS).Edits - skipped.Edits; n == 0 {
		t.Error("the second turn did not edit the plan message")
	}
	reqs := r.model.Requests()
	if len(reqs) != 5 {
		t.Fatalf("%d model requests, want 5", len(reqs))
	}
	told := false
	for _, m := range reqs[2].Messages {
		if m.Role == openai.ChatMessageRoleUser && strings.Contains(m.Content, `ann skipped "Write the summary"`) {
			told = true
		}
	}
	if !told {
		t.Errorf("the next request does not tell the model ann skipped the item: %+v", reqs[2].Messages)
	}
	last := reqs[3].Messages[len(reqs[3].Messages)-1]
	if last.Role != openai.ChatMessageRoleTool || !strings.Contains(last.Content, "ann skipped") || !strings.Contains(last.Content, "Write the summary") {
		t.Errorf("the snapshot that wrote the skipped item back got %q, want a tool error naming ann", last.Content)
	}
	waitFor(t, 10*time.Second, "the final plan", func() bool {
		m := slackPlanMessage(t, r.slack, plan.TS)
		return strings.Contains(m.Blocks, "· done") && strings.Contains(m.Text, "Plan · 2/2 done")
	})
	final := slackPlanMessage(t, r.slack, plan.TS)
	if !strings.Contains(final.Blocks, "⏭️ ~Write the summary~") || !strings.Contains(final.Blocks, "skipped by ann") {
		t.Errorf("the final plan lost the skip: %s", final.Blocks)
	}
	if n := len(planMessages(r.slack, "C1")); n != 1 {
		t.Errorf("%d plan messages, want the one", n)
	}
}
