package etcdstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/storetest"
)

// TestWriteAfterLeaseGoneIsFenced: once the owner's lease is gone and
// another replica took the session, every write the old owner tries fails
// with agent.ErrFenced and changes nothing (DESIGN §14).
func TestWriteAfterLeaseGoneIsFenced(t *testing.T) {
	ctx := context.Background()
	cli := shared(t)
	s1, r1 := openReplica(t, cli, "r1", 10*time.Second)
	s2, r2 := openReplica(t, cli, "r2", 10*time.Second)
	const key = "slack/T1/C1/1.0"
	if ok, err := r1.Take(ctx, key); err != nil || !ok {
		t.Fatalf("r1 takes: %v, %v", ok, err)
	}
	if err := s1.Commit(ctx, storetest.Round(key, 0, "hello")); err != nil {
		t.Fatal(err)
	}
	if ok, err := r2.Take(ctx, key); err != nil || ok {
		t.Fatalf("r2 takes a held session: %v, %v; want false", ok, err)
	}
	// The lease ends behind r1's back (as a pause past the TTL would).
	if _, err := cli.Revoke(ctx, r1.Lease()); err != nil {
		t.Fatal(err)
	}
	if ok, err := r2.Take(ctx, key); err != nil || !ok {
		t.Fatalf("r2 takes the orphaned session: %v, %v", ok, err)
	}
	writes := map[string]func() error{
		"Commit":      func() error { return s1.Commit(ctx, storetest.Round(key, 1, "late answer")) },
		"SaveBoard":   func() error { return s1.SaveBoard(ctx, key, []byte("stale"), false) },
		"SaveCards":   func() error { return s1.SaveCards(ctx, key, []byte("stale")) },
		"SaveListing": func() error { return s1.SaveListing(ctx, key, []byte("stale")) },
		"AddOutbox": func() error {
			_, err := s1.AddOutbox(ctx, key, [][]byte{[]byte("late reply")})
			return err
		},
		"Archive": func() error { return s1.Archive(ctx, key) },
		"Held":    func() error { return r1.Held(ctx, key) },
	}
	for name, w := range writes {
		if err := w(); !errors.Is(err, agent.ErrFenced) {
			t.Errorf("%s after the lease ended: %v, want agent.ErrFenced", name, err)
		}
	}
	_, hist, _, err := s2.Load(ctx, key)
	if err != nil || len(hist) != 1 {
		t.Fatalf("history = %d entries, %v; want the one committed before", len(hist), err)
	}
	for _, load := range []func(context.Context, string) ([]byte, error){s2.Board, s2.Cards, s2.Listing} {
		if got, _ := load(ctx, key); got != nil {
			t.Errorf("a fenced save landed: %q", got)
		}
	}
	n := 0
	s2.Outbox(ctx, func(uint64, []byte) { n++ })
	if n != 0 {
		t.Errorf("outbox holds %d items after a fenced add", n)
	}
	if r1.Fenced.Load() < int64(len(writes)) {
		t.Errorf("fenced writes counted = %d, want at least %d", r1.Fenced.Load(), len(writes))
	}
	select {
	case <-r1.Lost():
	case <-time.After(5 * time.Second):
		t.Error("r1 did not notice its lease ended")
	}
	if err := s2.Commit(ctx, storetest.Round(key, 1, "new owner")); err != nil {
		t.Fatalf("the new owner commits: %v", err)
	}
}

// TestPausedPastTTLIsFencedAtOnce: a replica whose last renewal is older
// than the TTL counts itself lost before its keep-alive says so, and its
// writes are refused without reaching etcd.
func TestPausedPastTTLIsFencedAtOnce(t *testing.T) {
	ctx := context.Background()
	cli := shared(t)
	s, r := openReplica(t, cli, "r1", 10*time.Second)
	const key = "web/p"
	if ok, _ := r.Take(ctx, key); !ok {
		t.Fatal("take")
	}
	r.mu.Lock()
	r.deadline = time.Now().Add(-time.Second) // as after a SIGSTOP past the TTL
	r.mu.Unlock()
	before := s.Requests.Load()
	if err := s.SaveBoard(ctx, key, []byte("x"), false); !errors.Is(err, agent.ErrFenced) {
		t.Fatalf("SaveBoard = %v, want agent.ErrFenced", err)
	}
	if got := s.Requests.Load() - before; got != 0 {
		t.Errorf("the fenced write sent %d requests, want 0", got)
	}
	select {
	case <-r.Lost():
	default:
		t.Error("Lost is not closed")
	}
}

// TestTakeNudgesTheOwner: a replica that cannot take a session tells its
// owner through P wake/, and the owner's watch hears of it; events handed
// over reach the owner in order; an owner's end orphans its sessions.
func TestTakeNudgesTheOwner(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cli := shared(t)
	_, r1 := openReplica(t, cli, "r1", 10*time.Second)
	_, r2 := openReplica(t, cli, "r2", 10*time.Second)
	woken, handed, stops, orphans := make(chan string, 4), make(chan string, 4), make(chan string, 4), make(chan string, 4)
	r1.Watch(ctx, Events{Wake: func(k string) { woken <- k }, Handed: func(k string) { handed <- k }, Stop: func(k, by string) { stops <- k + " " + by }})
	r2.Watch(ctx, Events{Orphaned: func(k string) { orphans <- k }})
	time.Sleep(100 * time.Millisecond) // the watches start
	const key = "discord/G/C"
	if ok, _ := r1.Take(ctx, key); !ok {
		t.Fatal("r1 take")
	}
	if ok, _ := r2.Take(ctx, key); ok {
		t.Fatal("r2 took a held session")
	}
	expect(t, woken, key, "wake")
	for _, m := range []string{"first", "second"} {
		if err := r2.Forward(ctx, key, []byte(m)); err != nil {
			t.Fatal(err)
		}
		expect(t, handed, key, "handed")
	}
	q, err := r1.Queued(ctx, key)
	if err != nil || len(q) != 2 || string(q[0].Data) != "first" || string(q[1].Data) != "second" {
		t.Fatalf("Queued = %+v, %v", q, err)
	}
	if err := r2.RequestStop(ctx, key, "Bo"); err != nil {
		t.Fatal(err)
	}
	expect(t, stops, key+" Bo", "stop")
	if r2.Replicas() != 2 {
		t.Errorf("Replicas = %d, want 2", r2.Replicas())
	}
	r1.Close()
	expect(t, orphans, key, "orphaned")
	if ok, err := r2.TryTake(ctx, key); err != nil || !ok {
		t.Fatalf("r2 takes after r1 closed: %v, %v", ok, err)
	}
}

func expect(t *testing.T, ch chan string, want, what string) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("%s: got %q, want %q", what, got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: nothing heard in 5 s", what)
	}
}

// TestConsumedOnce: an event handed over becomes a queued message once,
// however often its owner passes over it.
func TestConsumedOnce(t *testing.T) {
	ctx := context.Background()
	cli := shared(t)
	s, r := openReplica(t, cli, "r1", 10*time.Second)
	const key = "web/once"
	if err := r.Forward(ctx, key, []byte("m")); err != nil {
		t.Fatal(err)
	}
	q, _ := r.Queued(ctx, key)
	for range 2 {
		if _, err := s.Enqueue(WithConsumed(ctx, q[0].Key), key, agent.Inbound{Text: "m"}); err != nil {
			t.Fatal(err)
		}
	}
	inbox, _ := s.Inbox(ctx, key)
	left, _ := r.Queued(ctx, key)
	if len(inbox) != 1 || len(left) != 0 {
		t.Fatalf("inbox = %d, handed left = %d; want 1 and 0", len(inbox), len(left))
	}
}

// TestReplicaIDsAreUnique: a second live replica with the same id is
// refused (it would ignore the first one's nudges and halve nobody's
// pace); once the first is gone, the id registers at once.
func TestReplicaIDsAreUnique(t *testing.T) {
	ctx := context.Background()
	cli := shared(t)
	first, err := NewReplica(ctx, cli, ReplicaOptions{Prefix: prefix(t), ID: "same", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewReplica(ctx, cli, ReplicaOptions{Prefix: prefix(t), ID: "same", TTL: 2 * time.Second}); err == nil || !strings.Contains(err.Error(), "PINPLAN_REPLICA_ID") {
		t.Fatalf("a second replica with the same id: %v, want it refused naming PINPLAN_REPLICA_ID", err)
	}
	first.Close()
	start := time.Now()
	again, err := NewReplica(ctx, cli, ReplicaOptions{Prefix: prefix(t), ID: "same", TTL: 2 * time.Second})
	if err != nil {
		t.Fatalf("the id after its replica closed: %v", err)
	}
	defer again.Close()
	if took := time.Since(start); took > time.Second {
		t.Errorf("registering took %s after a clean close, want at once", took)
	}
}
