package web

import (
	"testing"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/todo"
)

// TestPlanViewByRunState: the plan's border follows its run state (not
// blue in every state), and an item left in progress by an ended run is
// not shown as working.
func TestPlanViewByRunState(t *testing.T) {
	items := []todo.Item{{Content: "a", Status: todo.Completed}, {Content: "b", Status: todo.InProgress}}
	for _, tc := range []struct {
		state      chat.PlanState
		accent     string
		inProgress string
	}{
		{state: chat.StateWorking, accent: "working", inProgress: chat.Mark(todo.InProgress)},
		{state: chat.StateResumed, accent: "working", inProgress: chat.Mark(todo.InProgress)},
		{state: chat.StateWaiting, accent: "waiting", inProgress: chat.Mark(todo.InProgress)},
		{state: chat.StateDone, accent: "done", inProgress: chat.MarkHalted},
		{state: chat.StateStopped, accent: "stopped", inProgress: chat.MarkHalted},
		{state: chat.StateLimited, accent: "stopped", inProgress: chat.MarkHalted},
		{state: chat.StateFailed, accent: "failed", inProgress: chat.MarkHalted},
	} {
		v := viewPlan(&chat.Plan{State: tc.state, Items: items})
		if v.View.Accent != tc.accent {
			t.Errorf("%s: accent %q, want %q", tc.state, v.View.Accent, tc.accent)
		}
		if got := v.View.Items[1].Mark; got != tc.inProgress {
			t.Errorf("%s: in-progress item's mark %q, want %q", tc.state, got, tc.inProgress)
		}
		if got := v.View.Items[0].Mark; got != chat.Mark(todo.Completed) {
			t.Errorf("%s: completed item's mark %q", tc.state, got)
		}
	}
}
