package slack

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/slack-go/slack"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/todo"
)

// TestEndedPlanShowsNothingWorking: a stopped plan's item left in
// progress shows the halted mark, not the working one.
func TestEndedPlanShowsNothingWorking(t *testing.T) {
	p := chat.Plan{State: chat.StateStopped, StoppedBy: "ann", Items: []todo.Item{{Content: "a", Status: todo.Completed}, {Content: "b", Status: todo.InProgress}}}
	blocks, _ := json.Marshal(PlanBlocks(p))
	for name, out := range map[string]string{"PlanBlocks": string(blocks), "PlanText": PlanText(p)} {
		if strings.Contains(out, chat.Mark(todo.InProgress)) || !strings.Contains(out, chat.MarkHalted+" *b*") && !strings.Contains(out, chat.MarkHalted+" b") {
			t.Errorf("%s of a stopped plan: %s\nwant %s on the item left in progress, no %s", name, out, chat.MarkHalted, chat.Mark(todo.InProgress))
		}
	}
}

// TestEndedNativePlanShowsNothingWorking: with Slack's native plan
// blocks, a stopped plan's item left in progress is not a task card in
// progress; while the run works it is.
func TestEndedNativePlanShowsNothingWorking(t *testing.T) {
	items := []todo.Item{{Content: "a", Status: todo.Completed}, {Content: "b", Status: todo.InProgress}}
	stopped, _ := json.Marshal(NativePlanBlocks(chat.Plan{State: chat.StateStopped, Items: items}))
	working, _ := json.Marshal(NativePlanBlocks(chat.Plan{State: chat.StateWorking, Items: items}))
	inProgress := `"status":"` + string(slack.TaskCardStatusInProgress) + `"`
	if strings.Contains(string(stopped), inProgress) {
		t.Errorf("native blocks of a stopped plan show an item in progress: %s", stopped)
	}
	if !strings.Contains(string(working), inProgress) {
		t.Errorf("native blocks of a working plan show no item in progress: %s", working)
	}
}
