package chat_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/plantest"
)

// TestCleanRemovesBidiControls: a cleaned plan and card show no
// bidirectional control character anywhere, and each item keeps its
// evidence line.
func TestCleanRemovesBidiControls(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := plantest.BidiPlan(at).Clean()
	b, _ := json.Marshal(p)
	shown := []string{string(b), p.Title(), p.Footer()}
	for _, it := range p.Items {
		shown = append(shown, p.EvidenceLine(it))
	}
	if line := p.EvidenceLine(p.Items[1]); !strings.Contains(line, "fs__read") {
		t.Errorf("the second item's evidence line %q, want its call", line)
	}
	for _, c := range []chat.Card{plantest.BidiCard(at).Clean(), plantest.BidiDecidedCard(at).Clean()} {
		b, _ := json.Marshal(c)
		shown = append(shown, string(b), c.Title(), c.Status())
	}
	for _, s := range shown {
		if got := plantest.BidiIn(s); got != "" {
			t.Errorf("%q holds %+q, want no bidirectional control", s, got)
		}
	}
	if plantest.BidiIn(plantest.BidiPlan(at).Items[0].Content) == "" {
		t.Error("Clean changed the plan it was given")
	}
	if got, want := chat.StripBidi("a\u202eb\u2069c\u200fd"), "abc\u200fd"; got != want {
		t.Errorf("StripBidi = %+q, want %+q", got, want)
	}
}
