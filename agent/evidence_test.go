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
