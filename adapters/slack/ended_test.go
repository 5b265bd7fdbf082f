package slack

import (
	"encoding/json"
	"strings"
	"testing"

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
