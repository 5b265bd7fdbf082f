package chat

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestBudgetGivesSlotsByPriority: with the budget short, slots go to
// first posts, then final states, then intermediate revisions, oldest
// first within one, whatever order they asked in.
func TestBudgetGivesSlotsByPriority(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b := NewBudget(600, 1) // a slot every 100 ms
	// Take the one token, so that everyone below waits.
	if err := b.Wait(context.Background(), nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	base := time.Now()
	type req struct {
		name  string
		prio  Priority
		since time.Duration
	}
	reqs := []req{
		{"intermediate old", PriorityIntermediate, 0},
		{"intermediate new", PriorityIntermediate, 2 * time.Second},
		{"final new", PriorityFinal, 3 * time.Second},
		{"first post", PriorityFirstPost, 4 * time.Second},
		{"final old", PriorityFinal, time.Second},
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for _, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.Wait(context.Background(), func() Priority { return r.prio }, base.Add(r.since)); err != nil {
				t.Error(err)
			}
			mu.Lock()
			order = append(order, r.name)
			mu.Unlock()
		}()
	}
	waitUntil(t, func() bool { return b.Waiting() == len(reqs) })
	wg.Wait()
	want := []string{"first post", "final old", "final new", "intermediate old", "intermediate new"}
	// The first slot may have gone to whoever had asked by then; every
	// later one follows the priorities.
	if len(order) != len(want) {
		t.Fatalf("order %v", order)
	}
	for i := 1; i < len(want); i++ {
		if order[i] != want[i] && !(i == 1 && order[0] != want[0]) {
			t.Fatalf("slots went %v, want %v", order, want)
		}
	}
}

// TestBudgetPriorityReadAtGrant: a waiter whose wanted content turned
// final while it waited goes before intermediate ones that asked first.
func TestBudgetPriorityReadAtGrant(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b := NewBudget(300, 1) // a slot every 200 ms
	b.Wait(context.Background(), nil, time.Time{})
	var mu sync.Mutex
	prio := PriorityIntermediate
	var order []string
	var wg sync.WaitGroup
	wait := func(name string, p func() Priority, since time.Time) {
		defer wg.Done()
		b.Wait(context.Background(), p, since)
		mu.Lock()
		order = append(order, name)
		mu.Unlock()
	}
	old := time.Now().Add(-time.Minute)
	wg.Add(3)
	go wait("a", nil, old)
	go wait("b", nil, old.Add(time.Second))
	waitUntil(t, func() bool { return b.Waiting() == 2 })
	go wait("turned final", func() Priority { mu.Lock(); defer mu.Unlock(); return prio }, time.Now())
	waitUntil(t, func() bool { return b.Waiting() == 3 })
	mu.Lock()
	prio = PriorityFinal
	mu.Unlock()
	wg.Wait()
	if order[0] != "turned final" && order[1] != "turned final" {
		t.Errorf("order %v: the waiter that turned final did not move up", order)
	}
}

// TestBudgetHoldAndCancel: a 429's hold gives no slot before it ends;
// a cancelled waiter leaves at once and the dispatcher stops when no one
// waits (goleak).
func TestBudgetHoldAndCancel(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b := NewBudget(6000, 5)
	b.Hold(300 * time.Millisecond)
	start := time.Now()
	if err := b.Wait(context.Background(), nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Errorf("a slot came %s into a 300ms hold", took)
	}
	b.Hold(time.Hour)
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Wait(ctx, nil, time.Time{}) }()
	waitUntil(t, func() bool { return b.Waiting() == 1 })
	stop := errors.New("stopped")
	cancel(stop)
	if err := <-done; !errors.Is(err, stop) {
		t.Errorf("Wait after cancel = %v, want the cause", err)
	}
	waitUntil(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return !b.running
	})
}

func waitUntil(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newGate returns a budget with no slot until the test opens it
// (openGate), as when a platform's budget is spent for a long time.
func newGate() *Budget {
	b := NewBudget(60000, 1000)
	b.Hold(24 * time.Hour)
	return b
}

// openGate gives the gate's slots to every request waiting, and to every
// one after.
func openGate(b *Budget) {
	b.mu.Lock()
	b.hold = time.Time{}
	b.mu.Unlock()
	b.kick()
}

// TestBudgetSpareLeavesASlot: a request that asks with spare slots
// (NotifySpare, a live answer's append) is given its slot only while
// the burst keeps one for a request that comes after it, and a final
// state that comes then takes that one at once.
func TestBudgetSpareLeavesASlot(t *testing.T) {
	b := NewBudget(60, 3) // a slot a second, three at once
	got := make(chan struct{}, 3)
	ask := func() { b.NotifySpare(t.Context(), 1, nil, time.Time{}, func() { got <- struct{}{} }) }
	for i := range 2 {
		ask()
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatalf("append %d: no slot with %d of 3 left", i+1, 3-i)
		}
	}
	ask()
	select {
	case <-got:
		t.Fatal("the last slot of the burst went to a request that asked to leave one")
	case <-time.After(100 * time.Millisecond):
	}
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond) // well inside the second the spare one takes to refill
	defer cancel()
	final := func() Priority { return PriorityFinal }
	if err := b.Wait(ctx, final, time.Now()); err != nil {
		t.Fatalf("a final state waited for the slot left spare: %v", err)
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the append asking for a spare slot never got one")
	}
	tiny := NewBudget(60, 1) // a burst of one: nothing can be left spare
	tiny.NotifySpare(t.Context(), 1, nil, time.Time{}, func() { got <- struct{}{} })
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("with a burst of one, a request asking for a spare slot starves")
	}
}
