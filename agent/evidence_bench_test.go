package agent

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/todo"
)

// BenchmarkEvidenceBytes reports what evidence adds to a round's
// checkpoint record (the JSON the store writes) and to a plan revision:
// for a typical round (a five-item plan, one item in progress, one read)
// and for the cap (50 items of 1,000 characters, 50 calls each).
func BenchmarkEvidenceBytes(b *testing.B) {
	call := Call{Tool: "fs__read_text_file", Server: "fs", Outcome: OutcomeOK, Start: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC),
		Duration: 12 * time.Millisecond, Args: `{"path":"/srv/docs/notes.txt"}`}
	plan := func(n, size int) []todo.Item {
		var it []todo.Item
		for i := range n {
			st := todo.Pending
			if i == 0 {
				st = todo.InProgress
			}
			it = append(it, todo.Item{Content: fmt.Sprintf("%d %s", i, strings.Repeat("x", size)), Status: st})
		}
		return it
	}
	for _, tc := range []struct {
		name         string
		items        []todo.Item
		callsPerItem int
		allItems     bool
	}{
		{"typical", plan(5, 30), 1, false},
		{"cap", plan(50, 1000), maxCallsPerItem, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ev := Evidence{}
			for _, it := range tc.items {
				if !tc.allItems && it.Status != todo.InProgress {
					continue
				}
				for range tc.callsPerItem {
					ev.add(it.Content, call)
				}
			}
			bare := Checkpoint{Key: "slack/T1/C1/1700000000.000100", State: Running, Plan: tc.items, Revision: 3, Turns: 1}
			with := bare
			with.Evidence, with.TurnCalls = ev, len(ev)*tc.callsPerItem
			var nBare, nWith, nRev int
			for b.Loop() {
				x, _ := json.Marshal(bare)
				y, _ := json.Marshal(with)
				r, _ := json.Marshal(PlanRevision{Revision: 3, Items: tc.items, Evidence: ev})
				nBare, nWith, nRev = len(x), len(y), len(r)
			}
			b.ReportMetric(float64(nWith-nBare), "evidence-B/checkpoint")
			b.ReportMetric(float64(nBare), "checkpoint-B")
			b.ReportMetric(float64(nRev), "revision-B")
		})
	}
}
