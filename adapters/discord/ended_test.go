package discord

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/todo"
)

// TestEndedPlanShowsNothingWorking: a stopped plan's item left in
// progress shows the halted mark, not the working one, as an embed and
// as Components V2.
func TestEndedPlanShowsNothingWorking(t *testing.T) {
	p := chat.Plan{State: chat.StateStopped, StoppedBy: "ann", Items: []todo.Item{{Content: "a", Status: todo.Completed}, {Content: "b", Status: todo.InProgress}}}
	for name, v := range map[string]any{"PlanMessage": PlanMessage(p), "PlanMessageV2": PlanMessageV2(p)} {
		b, _ := json.Marshal(v)
		out := string(b)
		if strings.Contains(out, chat.Mark(todo.InProgress)) || !strings.Contains(out, chat.MarkHalted+" **b**") {
			t.Errorf("%s of a stopped plan: %s\nwant %s on the item left in progress, no %s", name, out, chat.MarkHalted, chat.Mark(todo.InProgress))
		}
	}
}
