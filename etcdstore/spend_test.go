package etcdstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/storetest"
)

// TestSpendAcrossReplicas: two replicas charge one person's day from
// sessions each holds, in turns, so that each one's remembered counter is
// stale every time: every round still counts once (DESIGN §18).
func TestSpendAcrossReplicas(t *testing.T) {
	cli := shared(t)
	ctx := context.Background()
	s1, rep1 := openReplica(t, cli, "r1", 10*time.Second)
	s2, rep2 := openReplica(t, cli, "r2", 10*time.Second)
	stores := []*Store{s1, s2}
	for i, rep := range []*Replica{rep1, rep2} {
		if ok, err := rep.TryTake(ctx, fmt.Sprint("web/r", i)); err != nil || !ok {
			t.Fatalf("take web/r%d: %v, %v", i, ok, err)
		}
	}
	const day = "2026-03-01"
	for round := range 4 {
		for i, s := range stores {
			r := storetest.Round(fmt.Sprint("web/r", i), round, "m")
			r.Spend = &agent.Spend{Person: "slack/U1", Day: day, Tokens: 10}
			if err := s.Commit(ctx, r); err != nil {
				t.Fatalf("replica %d round %d: %v", i+1, round, err)
			}
		}
	}
	for i, s := range stores {
		if n, err := s.Spent(ctx, "slack/U1", day); err != nil || n != 80 {
			t.Errorf("replica %d: Spent = %d, %v; want 80", i+1, n, err)
		}
	}
}
