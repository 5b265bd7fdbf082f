package store

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestPruneDedupeDropsExpiredFollowUps: follow-ups of threads that never
// got a session do not stay in the file: the periodic prune removes them
// once expired, and leaves those still waiting.
func TestPruneDedupeDropsExpiredFollowUps(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	db, err := Open(filepath.Join(t.TempDir(), "pinplan.db"), Options{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	for i, key := range []string{"slack/T1/C1/1.1", "slack/T1/C1/2.1", "slack/T1/C1/3.1"} {
		if _, err := db.HoldFollowUp(ctx, key, "1", []byte("chatter"), time.Duration(i+1)*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	now = now.Add(2*time.Minute + time.Second)
	mu.Unlock()
	if _, err := db.PruneDedupe(ctx); err != nil {
		t.Fatal(err)
	}
	var left []string
	db.bolt.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bFollowUps).ForEach(func(k, _ []byte) error { left = append(left, string(k)); return nil })
	})
	if len(left) != 1 || left[0] != "slack/T1/C1/3.1\x001" {
		t.Errorf("follow-ups left after the prune: %q, want the one still waiting", left)
	}
}
