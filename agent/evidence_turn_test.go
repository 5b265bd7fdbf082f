package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/todo"
)

// lookupTool is a tool with nothing to it but its call, for evidence.
func lookupTool() agent.Tool {
	return agent.Tool{Name: "lookup", Description: "Look something up.", Idempotent: true,
		Parameters: map[string]any{"type": "object", "properties": map[string]any{}},
		Run:        func(context.Context, *agent.ToolEnv, string) (string, error) { return `{"found":1}`, nil }}
}

// twoItems is a todo_write of "Search the notes" and "Draft the result".
func twoItems(search, draft todo.Status) fakeopenai.Call {
	return call(todo.ToolName, todo.Encode([]todo.Item{{Content: "Search the notes", Status: search}, {Content: "Draft the result", Status: draft}}))
}

// followUpReplies is a follow-up turn on a plan with the same item
// texts: one lookup while "Search the notes" is in progress, then
// "Search the notes" ticked and "Draft the result" left pending.
func followUpReplies() []fakeopenai.Reply {
	P, I, C := todo.Pending, todo.InProgress, todo.Completed
	return []fakeopenai.Reply{
		{ToolCalls: []fakeopenai.Call{twoItems(I, P)}},
		{ToolCalls: []fakeopenai.Call{call("lookup", `{}`)}},
		{ToolCalls: []fakeopenai.Call{twoItems(C, P)}},
		{Content: "follow-up done"},
	}
}

// checkFollowUp checks the evidence a follow-up turn (followUpReplies)
// showed, in its events and in its stored plan revisions: only its own
// lookup, under "Search the notes", and nothing under the pending
// "Draft the result".
func checkFollowUp(t *testing.T, h *harness, key string, events []agent.Event, revisions int) {
	t.Helper()
	shown := 0
	for _, e := range events {
		if e.Kind != agent.PlanChanged && e.Kind != agent.EvidenceChanged && e.Kind != agent.TurnStarted {
			continue
		}
		shown++
		if n := e.Evidence["Draft the result"].Count(); n != 0 {
			t.Errorf("event kind %d at revision %d: the pending \"Draft the result\" shows %d calls, want none", e.Kind, e.Revision, n)
		}
		if n := e.Evidence["Search the notes"].Count(); n > 1 {
			t.Errorf("event kind %d at revision %d: \"Search the notes\" counts %d calls, want at most the follow-up's 1", e.Kind, e.Revision, n)
		}
		if e.Kind == agent.EvidenceChanged && e.Calls != 1 {
			t.Errorf("the follow-up counts %d calls, want 1", e.Calls)
		}
	}
	if shown == 0 {
		t.Fatal("the follow-up published no plan or evidence")
	}
	plans, err := h.db.Plans(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) != revisions {
		t.Fatalf("%d stored revisions, want %d", len(plans), revisions)
	}
	last := plans[len(plans)-1].Evidence
	if got := fmt.Sprint(last["Search the notes"].Count(), last["Draft the result"].Count()); got != "1 0" {
		t.Errorf("the follow-up's last revision counts %s calls for its two items, want 1 0: %+v", got, last)
	}
	if first := plans[len(plans)-2].Evidence; first["Search the notes"].Count()+first["Draft the result"].Count() != 0 {
		t.Errorf("the follow-up's first revision shows calls made before it: %+v", first)
	}
}

// TestEvidenceOfAnEarlierTurn: a follow-up in the same session whose plan
// has items with the same texts shows only its own calls (DESIGN §15):
// neither the calls attributed in the first turn nor the one made there
// after every item was ticked.
func TestEvidenceOfAnEarlierTurn(t *testing.T) {
	P, I, C := todo.Pending, todo.InProgress, todo.Completed
	lookup := call("lookup", `{}`)
	first := []fakeopenai.Reply{
		{ToolCalls: []fakeopenai.Call{twoItems(I, P)}},
		{ToolCalls: []fakeopenai.Call{lookup}},
		{ToolCalls: []fakeopenai.Call{twoItems(C, I)}},
		{ToolCalls: []fakeopenai.Call{lookup}},
		{ToolCalls: []fakeopenai.Call{twoItems(C, C)}},
		{ToolCalls: []fakeopenai.Call{lookup}}, // with every item ticked
		{Content: "first done"},
	}
	fake := &fakeopenai.Server{Respond: fakeopenai.Script(func(string) []fakeopenai.Reply {
		return append(first, followUpReplies()...)
	})}
	h := newHarness(t, fake, harnessOpts{tools: []agent.Tool{lookupTool()}})
	h.send(t, "web/ev", "first task")
	events := h.waitEnd(t, "web/ev")
	var draft int
	for _, e := range events {
		if e.Kind == agent.PlanChanged {
			draft = e.Evidence["Draft the result"].Count()
		}
	}
	if draft != 1 {
		t.Fatalf("the first turn gave \"Draft the result\" %d calls, want 1", draft)
	}
	h.send(t, "web/ev", "now the follow-up")
	checkFollowUp(t, h, "web/ev", h.waitEnd(t, "web/ev"), 5)
}

// TestEvidenceOfAnEarlierTurnSavedBefore: a session saved by the previous
// version, idle after a turn, with its evidence and a call still waiting
// for a snapshot in its record, loads, and its follow-up shows only its
// own calls.
func TestEvidenceOfAnEarlierTurnSavedBefore(t *testing.T) {
	const saved = `{"key":"web/old","state":"idle",
 "plan":[{"content":"Search the notes","status":"completed"},{"content":"Draft the result","status":"completed"}],
 "revision":3,"stale":0,"usage":{"prompt_tokens":900,"completion_tokens":90,"total_tokens":990,"calls":7},
 "history_len":0,"turn_rounds":7,"turns":1,
 "ended":{"turn":1,"outcome":"done","at":"2025-01-02T10:00:07Z"},
 "evidence":{
  "Search the notes":{"calls":[{"tool":"lookup","outcome":"ok","start":"2025-01-02T10:00:01Z","duration":1000000}]},
  "Draft the result":{"calls":[{"tool":"lookup","outcome":"ok","start":"2025-01-02T10:00:03Z","duration":1000000}]}},
 "unattributed":[{"tool":"lookup","outcome":"ok","start":"2025-01-02T10:00:05Z","duration":1000000}],
 "turn_calls":3,"log_seq":0,
 "created":"2025-01-02T10:00:00Z","updated":"2025-01-02T10:00:07Z"}`
	var cp agent.Checkpoint
	if err := json.Unmarshal([]byte(saved), &cp); err != nil {
		t.Fatalf("the saved record does not read: %v", err)
	}
	fake := &fakeopenai.Server{Respond: fakeopenai.Script(func(string) []fakeopenai.Reply { return followUpReplies() })}
	h := newHarness(t, fake, harnessOpts{tools: []agent.Tool{lookupTool()}})
	if err := h.db.Commit(context.Background(), &agent.Round{Checkpoint: cp}); err != nil {
		t.Fatal(err)
	}
	h.send(t, "web/old", "now the follow-up")
	checkFollowUp(t, h, "web/old", h.waitEnd(t, "web/old"), 2)
}
