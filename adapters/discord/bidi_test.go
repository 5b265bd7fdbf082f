package discord

import (
	"testing"
	"time"

	"github.com/pinplan/pinplan/internal/plantest"
)

// TestRenderRemovesBidiControls: no bidirectional control character in
// a plan's items, evidence or footer, or in a card, reaches Discord, as
// an embed or as Components V2.
func TestRenderRemovesBidiControls(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := plantest.BidiPlan(at)
	for _, tc := range []struct {
		name string
		out  any
	}{
		{name: "PlanMessage", out: PlanMessage(p)},
		{name: "PlanMessageV2", out: PlanMessageV2(p)},
		{name: "CardEmbed open", out: CardEmbed(plantest.BidiCard(at))},
		{name: "CardEmbed decided", out: CardEmbed(plantest.BidiDecidedCard(at))},
	} {
		if got := plantest.BidiInJSON(tc.out); got != "" {
			t.Errorf("%s holds %+q, want no bidirectional control", tc.name, got)
		}
	}
}
