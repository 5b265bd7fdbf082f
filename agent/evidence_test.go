package agent

import (
	"fmt"
	"testing"

	"github.com/pinplan/pinplan/todo"
)

func items(pairs ...string) []todo.Item {
	var out []todo.Item
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, todo.Item{Content: pairs[i], Status: todo.Status(pairs[i+1])})
	}
	return out
}

const (
	pend = string(todo.Pending)
	prog = string(todo.InProgress)
	done = string(todo.Completed)
)

func TestAttribution(t *testing.T) {
	read := Call{Tool: "fs__read_text_file", Outcome: OutcomeOK}
	write := Call{Tool: "fs__write_file", Outcome: OutcomeDenied}
	type step struct {
		call   *Call       // a call made on plan
		plan   []todo.Item // the snapshot when it is made (or, with next, before the revision)
		next   []todo.Item // a todo_write moving plan to next
		want   map[string]int
		unattr int
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"one item in progress", []step{
			{call: &read, plan: items("a", prog, "b", pend), want: map[string]int{"a": 1}},
		}},
		{"none in progress, then ticked", []step{
			{call: &read, plan: items("a", pend, "b", pend), want: map[string]int{}, unattr: 1},
			{call: &read, plan: items("a", pend, "b", pend), want: map[string]int{}, unattr: 2},
			{plan: items("a", pend, "b", pend), next: items("a", done, "b", pend), want: map[string]int{"a": 2}},
		}},
		{"none in progress, then a new item starts", []step{
			{call: &read, plan: items("a", done), want: map[string]int{}, unattr: 1},
			{plan: items("a", done), next: items("a", done, "b", prog), want: map[string]int{"b": 1}},
		}},
		{"several in progress", []step{
			{call: &read, plan: items("a", prog, "b", prog, "c", pend), want: map[string]int{"a": 1, "b": 1}},
		}},
		{"an item renamed starts fresh", []step{
			{call: &read, plan: items("a", prog), want: map[string]int{"a": 1}},
			{plan: items("a", prog), next: items("a, reworded", prog), want: map[string]int{}},
		}},
		{"an item removed loses its evidence", []step{
			{call: &read, plan: items("a", prog, "b", pend), want: map[string]int{"a": 1}},
			{plan: items("a", prog, "b", pend), next: items("b", prog), want: map[string]int{}},
		}},
		{"parallel calls in one message", []step{
			{call: &read, plan: items("a", prog), want: map[string]int{"a": 1}},
			{call: &write, plan: items("a", prog), want: map[string]int{"a": 2}},
		}},
		{"an in-progress item keeps its calls when ticked", []step{
			{call: &read, plan: items("a", prog, "b", pend), want: map[string]int{"a": 1}},
			{plan: items("a", prog, "b", pend), next: items("a", done, "b", prog), want: map[string]int{"a": 1}},
		}},
		{"an item moved back to pending shows none", []step{
			{call: &read, plan: items("a", prog, "b", pend), want: map[string]int{"a": 1}},
			{plan: items("a", prog, "b", pend), next: items("a", pend, "b", prog), want: map[string]int{}},
			{call: &read, plan: items("a", pend, "b", prog), want: map[string]int{"b": 1}},
			{plan: items("a", pend, "b", prog), next: items("a", prog, "b", done), want: map[string]int{"b": 1}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			att := newAttribution(Checkpoint{})
			for i, s := range tt.steps {
				if s.call != nil {
					att.called(s.plan, *s.call)
				}
				if s.next != nil {
					att.revised(s.plan, s.next)
				}
				got := map[string]int{}
				for item, ie := range att.ev {
					got[item] = ie.Count()
				}
				if fmt.Sprint(got) != fmt.Sprint(s.want) || len(att.pending) != s.unattr {
					t.Fatalf("step %d: evidence %v, %d waiting; want %v, %d", i, got, len(att.pending), s.want, s.unattr)
				}
			}
		})
	}
}

func TestAttributionKeepsOrderAndCaps(t *testing.T) {
	att := newAttribution(Checkpoint{})
	plan := items("a", prog)
	for i := range maxCallsPerItem + 5 {
		att.called(plan, Call{Tool: fmt.Sprintf("t%d", i), Outcome: OutcomeOK})
	}
	ie := att.ev["a"]
	if len(ie.Calls) != maxCallsPerItem || ie.More != 5 || ie.Count() != maxCallsPerItem+5 {
		t.Fatalf("%d calls kept, %d counted beyond; want %d and 5", len(ie.Calls), ie.More, maxCallsPerItem)
	}
	if ie.Calls[0].Tool != "t0" || ie.Calls[maxCallsPerItem-1].Tool != fmt.Sprintf("t%d", maxCallsPerItem-1) {
		t.Errorf("calls not kept in order: first %s, last %s", ie.Calls[0].Tool, ie.Calls[len(ie.Calls)-1].Tool)
	}
	if att.calls != maxCallsPerItem+5 {
		t.Errorf("the round counted %d calls", att.calls)
	}
}

func TestCallOutcomes(t *testing.T) {
	for out, want := range map[string]string{
		`{"content":"hello"}`: OutcomeOK,
		"plain text result":   OutcomeOK,
		errorResult(&ToolError{Code: "denied", Message: "no"}):                  OutcomeDenied,
		errorResult(&ToolError{Code: "timeout", Message: "slow"}):               OutcomeTimeout,
		errorResult(&ToolError{Code: "interrupted", Message: "restart"}):        OutcomeInterrupted,
		errorResult(&ToolError{Code: "tool_unavailable", Message: "down"}):      OutcomeUnavailable,
		errorResult(&ToolError{Code: "stopped", Message: "stop"}):               OutcomeStopped,
		errorResult(&ToolError{Code: "tool_failed", Message: "ENOENT"}):         OutcomeError,
		errorResult(&ToolError{Code: "invalid_arguments", Message: "bad json"}): OutcomeError,
	} {
		if got := outcomeOf(out); got != want {
			t.Errorf("outcomeOf(%s) = %s, want %s", out, got, want)
		}
	}
	long := make([]rune, 500)
	for i := range long {
		long[i] = 'é'
	}
	if got := []rune(cutArgs(string(long))); len(got) != maxCallArgs {
		t.Errorf("arguments cut to %d characters, want %d", len(got), maxCallArgs)
	}
}

func TestEvidenceClone(t *testing.T) {
	ev := Evidence{"a": {Calls: []Call{{Tool: "x"}}}}
	c := ev.Clone()
	c.add("a", Call{Tool: "y"})
	c["b"] = ItemEvidence{}
	if len(ev["a"].Calls) != 1 || len(ev) != 1 {
		t.Errorf("the clone shares with the original: %+v", ev)
	}
}

// TestEvidenceIsPerTurn: a turn starts with no evidence (DESIGN §15): the
// calls of an earlier turn, attributed or still waiting for a snapshot,
// never show under a follow-up's items that have the same text.
func TestEvidenceIsPerTurn(t *testing.T) {
	lookup := Call{Tool: "lookup", Outcome: OutcomeOK}
	// The first turn: a call for each item, then one after both were
	// ticked, which waits for a snapshot that moves an item forward.
	cp := Checkpoint{Key: "web/t", State: Idle}
	if err := (turn{&cp}).start(Inbound{Text: "first"}); err != nil {
		t.Fatal(err)
	}
	att := newAttribution(cp)
	att.revised(nil, items("Search", prog, "Draft the result", pend))
	att.called(items("Search", prog, "Draft the result", pend), lookup)
	att.revised(items("Search", prog, "Draft the result", pend), items("Search", done, "Draft the result", prog))
	att.called(items("Search", done, "Draft the result", prog), lookup)
	att.revised(items("Search", done, "Draft the result", prog), items("Search", done, "Draft the result", done))
	att.called(items("Search", done, "Draft the result", done), lookup)
	cp.Evidence, cp.Unattributed = att.ev, att.pending
	if cp.Evidence["Draft the result"].Count() != 1 || len(cp.Unattributed) != 1 {
		t.Fatalf("the first turn: evidence %+v, %d waiting", cp.Evidence, len(cp.Unattributed))
	}
	if err := (turn{&cp}).end(Ending{Outcome: Done}); err != nil {
		t.Fatal(err)
	}

	// The follow-up: the same texts, "Draft the result" still pending.
	if err := (turn{&cp}).start(Inbound{Text: "follow-up"}); err != nil {
		t.Fatal(err)
	}
	att = newAttribution(cp)
	before := items("Search", done, "Draft the result", done)
	next := items("Search", prog, "Draft the result", pend)
	att.revised(before, next)
	if n := att.ev["Draft the result"].Count(); n != 0 {
		t.Errorf("the pending item has %d calls of the first turn, want none", n)
	}
	att.called(next, lookup)
	att.revised(next, items("Search", done, "Draft the result", pend))
	if n := att.ev["Search"].Count(); n != 1 {
		t.Errorf("Search counts %d calls, want 1: only the follow-up's", n)
	}
	if n := att.ev["Draft the result"].Count(); n != 0 {
		t.Errorf("the pending item has %d calls, want none", n)
	}
	if len(att.pending) != 0 {
		t.Errorf("%d calls of the first turn still wait for a snapshot", len(att.pending))
	}
}
