package slack

import (
	"testing"
	"time"

	"github.com/pinplan/pinplan/internal/plantest"
)

// TestRenderRemovesBidiControls: no bidirectional control character in
// a plan's items, evidence or footer, or in a card, reaches Slack, in
// any of the renderings.
func TestRenderRemovesBidiControls(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := plantest.BidiPlan(at)
	open, decided := plantest.BidiCard(at), plantest.BidiDecidedCard(at)
	for _, tc := range []struct {
		name string
		out  any
	}{
		{name: "PlanBlocks", out: PlanBlocks(p)},
		{name: "NativePlanBlocks", out: NativePlanBlocks(p)},
		{name: "PlanText", out: PlanText(p)},
		{name: "CardBlocks open", out: CardBlocks(open)},
		{name: "CardBlocks decided", out: CardBlocks(decided)},
		{name: "CardText open", out: CardText(open)},
		{name: "CardText decided", out: CardText(decided)},
	} {
		if got := plantest.BidiInJSON(tc.out); got != "" {
			t.Errorf("%s holds %+q, want no bidirectional control", tc.name, got)
		}
	}
}
