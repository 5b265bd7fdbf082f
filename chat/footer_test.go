package chat_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/todo"
)

// TestFooterCountsDecisionsNotApprovals: the footer counts the turn's
// decided approval cards; after a Deny it must not read as if something
// was approved.
func TestFooterCountsDecisionsNotApprovals(t *testing.T) {
	p := chat.Plan{Revision: 2, State: chat.StateDone, Updated: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), Calls: 1, Approvals: 1,
		Items: []todo.Item{{Content: "write it", Status: todo.Completed}}}
	for _, tc := range []struct {
		approvals int
		want      string
	}{
		{approvals: 1, want: " · 1 approval decided"},
		{approvals: 3, want: " · 3 approvals decided"},
	} {
		p.Approvals = tc.approvals
		if got := p.Footer(); !strings.HasSuffix(got, tc.want) {
			t.Errorf("footer with %d decided cards: got %q, want it to end %q", tc.approvals, got, tc.want)
		}
	}
}

// TestItemMarkOfAnEndedRun: an item left in progress when the run ended
// (stopped, failed, the round limit, or done with items open) no longer
// shows the working mark: nothing works on it. While a turn runs, and
// for every other status, the mark is the status's.
func TestItemMarkOfAnEndedRun(t *testing.T) {
	items := []todo.Item{{Content: "a", Status: todo.Completed}, {Content: "b", Status: todo.InProgress}, {Content: "c", Status: todo.Pending}}
	for _, tc := range []struct {
		state chat.PlanState
		want  string // the in-progress item's mark
	}{
		{state: chat.StateWorking, want: chat.Mark(todo.InProgress)},
		{state: chat.StateResumed, want: chat.Mark(todo.InProgress)},
		{state: chat.StateWaiting, want: chat.Mark(todo.InProgress)},
		{state: chat.StateStopped, want: chat.MarkHalted},
		{state: chat.StateFailed, want: chat.MarkHalted},
		{state: chat.StateLimited, want: chat.MarkHalted},
		{state: chat.StateTurnBudget, want: chat.MarkHalted},
		{state: chat.StateDayBudget, want: chat.MarkHalted},
		{state: chat.StateDone, want: chat.MarkHalted},
	} {
		p := chat.Plan{State: tc.state, Items: items}
		if got := p.ItemMark(items[1]); got != tc.want {
			t.Errorf("%s: in-progress mark %q, want %q", tc.state, got, tc.want)
		}
		if got := p.ItemMark(items[0]); got != chat.Mark(todo.Completed) {
			t.Errorf("%s: completed mark %q", tc.state, got)
		}
		if got := p.ItemMark(items[2]); got != chat.Mark(todo.Pending) {
			t.Errorf("%s: pending mark %q", tc.state, got)
		}
	}
	if chat.MarkHalted == chat.Mark(todo.InProgress) {
		t.Error("the halted mark is the working one")
	}
}

// TestStateOfEveryOutcome: every way a turn ends has its own words in
// the footer, and a token budget's say so (DESIGN §18).
func TestStateOfEveryOutcome(t *testing.T) {
	seen := map[chat.PlanState]agent.Outcome{}
	for _, o := range []agent.Outcome{agent.Done, agent.Failed, agent.Stopped, agent.Limited, agent.TurnBudget, agent.DayBudget} {
		st := chat.StateOf(o)
		if st == "" {
			t.Errorf("outcome %s has no plan state", o)
		}
		if other, dup := seen[st]; dup {
			t.Errorf("outcomes %s and %s both show %q", other, o, st)
		}
		seen[st] = o
	}
	for _, o := range []agent.Outcome{agent.TurnBudget, agent.DayBudget} {
		if f := (chat.Plan{State: chat.StateOf(o)}).Footer(); !strings.Contains(f, "token budget") {
			t.Errorf("footer after %s: %q, want it to name the token budget", o, f)
		}
	}
}
