package web

import (
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/plantest"
)

// TestViewsRemoveBidiControls: no bidirectional control character in a
// plan, its history, a card or a thread's title reaches the page.
func TestViewsRemoveBidiControls(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := plantest.BidiPlan(at)
	open, decided := plantest.BidiCard(at), plantest.BidiDecidedCard(at)
	for _, tc := range []struct {
		name string
		out  any
	}{
		{name: "plan", out: viewPlan(&p)},
		{name: "open card", out: viewCard(&open)},
		{name: "decided card", out: viewCard(&decided)},
		{name: "thread", out: viewThread(Summary{ID: "t1", Key: "web/t1", Title: "\u202eReport\u2066 gpj.exe\u2069", Plan: &p})},
		{name: "revision", out: viewRevision(agent.PlanRevision{Revision: 3, Items: p.Items, Evidence: p.Evidence})},
	} {
		if got := plantest.BidiInJSON(tc.out); got != "" {
			t.Errorf("%s holds %+q, want no bidirectional control", tc.name, got)
		}
	}
}
