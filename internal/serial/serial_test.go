package serial

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait fails t unless q becomes idle within ten seconds.
func wait(t testing.TB, q *Queue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := q.Wait(ctx); err != nil {
		t.Fatalf("queue not idle after 10s: %v", err)
	}
}

// recv fails t unless ch yields within ten seconds.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing after 10s", what)
		panic("unreachable")
	}
}

func TestKeepsOrderPerKey(t *testing.T) {
	var q Queue
	var mu sync.Mutex
	got := map[string][]int{}
	for i := range 200 {
		key := []string{"a", "b", "c"}[i%3]
		q.Add(key, func() {
			mu.Lock()
			got[key] = append(got[key], i)
			mu.Unlock()
		})
	}
	wait(t, &q)
	for key, seq := range got {
		for j := 1; j < len(seq); j++ {
			if seq[j] < seq[j-1] {
				t.Fatalf("key %s ran %d after %d", key, seq[j], seq[j-1])
			}
		}
	}
	if n := len(got["a"]) + len(got["b"]) + len(got["c"]); n != 200 {
		t.Errorf("ran %d functions, want 200", n)
	}
}

// TestOneAtATimePerKey adds from many goroutines at once: no key ever runs
// two functions together, and every function runs once.
func TestOneAtATimePerKey(t *testing.T) {
	var q Queue
	const keys, perKey, adders = 8, 100, 4
	var running [keys]atomic.Int32
	var overlaps, ran atomic.Int32
	var wg sync.WaitGroup
	for a := range adders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range keys * perKey / adders {
				k := (a + i) % keys
				q.Add(fmt.Sprint("key", k), func() {
					if running[k].Add(1) != 1 {
						overlaps.Add(1)
					}
					ran.Add(1)
					running[k].Add(-1)
				})
			}
		}()
	}
	wg.Wait()
	wait(t, &q)
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d functions ran while another of their key ran, want 0", n)
	}
	if n := ran.Load(); n != keys*perKey {
		t.Errorf("ran %d functions, want %d", n, keys*perKey)
	}
}

// TestKeysRunInParallel: every key's first function waits until all keys'
// first functions run, which they can only do at the same time.
func TestKeysRunInParallel(t *testing.T) {
	var q Queue
	const keys = 16
	var started atomic.Int32
	all := make(chan struct{})
	timedOut := make(chan int32, keys)
	for k := range keys {
		q.Add(fmt.Sprint("key", k), func() {
			if started.Add(1) == keys {
				close(all)
			}
			select {
			case <-all:
			case <-time.After(10 * time.Second):
				timedOut <- started.Load()
			}
		})
	}
	wait(t, &q)
	close(timedOut)
	for n := range timedOut {
		t.Fatalf("only %d of %d keys ran at once", n, keys)
	}
}

// TestSlowKeyHoldsUpNoOther: a key whose function blocks does not delay
// another key's work.
func TestSlowKeyHoldsUpNoOther(t *testing.T) {
	var q Queue
	release := make(chan struct{})
	q.Add("slow", func() { <-release })
	done := make(chan struct{})
	q.Add("fast", func() {})
	q.Add("fast", func() { close(done) })
	recv(t, done, "fast key behind a slow one")
	if !q.Busy("slow") || q.Busy("other") {
		t.Errorf("Busy(slow) = %t, Busy(other) = %t; want true, false", q.Busy("slow"), q.Busy("other"))
	}
	close(release)
	wait(t, &q)
	if q.Busy("slow") || q.Busy("fast") {
		t.Error("a key is still busy after Wait")
	}
}

func TestAddFromInsideRunsAfter(t *testing.T) {
	var q Queue
	var order []string // only the key's goroutine touches it
	done := make(chan struct{})
	q.Add("k", func() {
		q.Add("k", func() {
			order = append(order, "inner")
			close(done)
		})
		order = append(order, "outer")
	})
	recv(t, done, "function added from inside")
	wait(t, &q)
	if fmt.Sprint(order) != "[outer inner]" {
		t.Errorf("got %v, want [outer inner]", order)
	}
}

func TestKick(t *testing.T) {
	tests := []struct {
		name string
		// queue runs while the key's first function is blocked; it
		// returns what must have run, in order, once it is released.
		queue func(q *Queue, log func(string) func()) []string
	}{
		{
			name: "kicks during a run coalesce into one more run",
			queue: func(q *Queue, log func(string) func()) []string {
				for range 10 {
					q.Kick("k", log("kick"))
				}
				return []string{"first", "kick"}
			},
		},
		{
			name: "a kick behind an add is not merged into the add",
			queue: func(q *Queue, log func(string) func()) []string {
				q.Add("k", log("add"))
				q.Kick("k", log("kick"))
				return []string{"first", "add", "kick"}
			},
		},
		{
			name: "a kick after an add that follows a kick runs after the add",
			queue: func(q *Queue, log func(string) func()) []string {
				q.Kick("k", log("kick1"))
				q.Add("k", log("add"))
				q.Kick("k", log("kick2"))
				q.Kick("k", log("kick3"))
				return []string{"first", "kick1", "add", "kick2"}
			},
		},
		{
			name: "kicks on other keys are their own",
			queue: func(q *Queue, log func(string) func()) []string {
				done := make(chan struct{})
				q.Kick("other", func() { close(done) })
				<-done // runs while k is blocked
				q.Kick("k", log("kick"))
				return []string{"first", "kick"}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var q Queue
			var mu sync.Mutex
			var got []string
			log := func(s string) func() {
				return func() {
					mu.Lock()
					got = append(got, s)
					mu.Unlock()
				}
			}
			release, started := make(chan struct{}), make(chan struct{})
			q.Kick("k", func() {
				close(started)
				<-release
				log("first")()
			})
			recv(t, started, "first kick")
			want := tt.queue(&q, log)
			close(release)
			wait(t, &q)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}

// TestKickIsNeverLost: whatever the interleaving, a run starts after the
// last Kick, so the last run sees the last change.
func TestKickIsNeverLost(t *testing.T) {
	var q Queue
	var version, seen atomic.Int64
	var runs atomic.Int32
	look := func() {
		runs.Add(1)
		seen.Store(version.Load())
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				version.Add(1)
				q.Kick("k", look)
			}
		}()
	}
	wg.Wait()
	wait(t, &q)
	if s, v := seen.Load(), version.Load(); s != v {
		t.Errorf("last run saw version %d, want %d", s, v)
	}
	t.Logf("%d kicks, %d runs", version.Load(), runs.Load())
}

func TestWait(t *testing.T) {
	var q Queue
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.Wait(done); err != nil {
		t.Errorf("Wait on an idle queue with a done context: got %v, want nil", err)
	}

	release := make(chan struct{})
	q.Add("k", func() { <-release })
	cause := errors.New("gave up")
	ctx, cancelCause := context.WithCancelCause(context.Background())
	cancelCause(cause)
	if err := q.Wait(ctx); !errors.Is(err, cause) {
		t.Errorf("Wait on a busy queue with a done context: got %v, want the context's cause", err)
	}

	// Work queued while Wait waits keeps it waiting: Wait returns only
	// once both functions have, and "other" is held until "k" is done.
	var finished atomic.Int32
	returned := make(chan int32, 1)
	go func() {
		if err := q.Wait(context.Background()); err != nil {
			t.Errorf("Wait: got %v, want nil", err)
		}
		returned <- finished.Load()
	}()
	second := make(chan struct{})
	q.Add("other", func() {
		<-second
		finished.Add(1)
	})
	q.Add("k", func() { finished.Add(1) })
	close(release)
	for deadline := time.Now().Add(10 * time.Second); finished.Load() < 1; {
		if time.Now().After(deadline) {
			t.Fatal("k did not finish within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	close(second)
	if n := recv(t, returned, "Wait"); n != 2 {
		t.Errorf("Wait returned after %d of 2 functions", n)
	}
	if q.Busy("k") || q.Busy("other") {
		t.Error("a key is still busy after Wait")
	}
}

// TestNoGoroutineAfterWork: the goroutines of a thousand keys end once
// their work is done.
func TestNoGoroutineAfterWork(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var q Queue
	for i := range 1000 {
		q.Add(fmt.Sprint("key", i), func() {})
		q.Kick(fmt.Sprint("key", i), func() {})
	}
	wait(t, &q)
	q.mu.Lock()
	n := len(q.keys)
	q.mu.Unlock()
	if n != 0 {
		t.Errorf("%d keys held after Wait, want 0", n)
	}
}

// TestLater: a function queued for later runs once its delay is over,
// behind what its key had queued by then, and holds no goroutine while
// it waits.
func TestLater(t *testing.T) {
	var q Queue
	var mu sync.Mutex
	var got []string
	record := func(s string) func() {
		return func() {
			mu.Lock()
			got = append(got, s)
			mu.Unlock()
		}
	}
	release := make(chan struct{})
	q.Later(context.Background(), "a", 20*time.Millisecond, record("later"))
	if q.Busy("a") {
		t.Fatal("key busy while its only function waits for its time")
	}
	q.Add("a", func() { <-release })
	q.Add("a", record("first"))
	time.Sleep(40 * time.Millisecond) // the delay is over; the key is still held
	close(release)
	wait(t, &q)
	if want := []string{"first", "later"}; !slices.Equal(got, want) {
		t.Errorf("ran %q, want %q", got, want)
	}
}

// TestLaterQueuedWhenContextEnds: a function queued for later runs as
// soon as its context ends, not at the end of its delay, and only once.
func TestLaterQueuedWhenContextEnds(t *testing.T) {
	var q Queue
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{}, 2)
	q.Later(ctx, "a", time.Hour, func() { ran <- struct{}{} })
	cancel()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the function did not run when its context ended")
	}
	wait(t, &q)
	if len(ran) != 0 {
		t.Error("the function ran twice")
	}
}

func TestAddIdleRunsWhenNothingElseWaits(t *testing.T) {
	var q Queue
	var order []string // only the key's goroutine touches it
	release := make(chan struct{})
	log := func(s string) func() { return func() { order = append(order, s) } }
	q.Add("k", func() { <-release; order = append(order, "first") })
	q.AddIdle("k", log("tidy 1"))
	q.Add("k", log("second"))
	q.AddIdle("k", func() {
		order = append(order, "tidy 2")
		// Queued from inside an idle function: the next one waits for it.
		q.Add("k", log("from tidy 2"))
	})
	q.AddIdle("k", log("tidy 3"))
	q.Kick("k", log("kicked"))
	close(release)
	wait(t, &q)
	want := []string{"first", "second", "kicked", "tidy 1", "tidy 2", "from tidy 2", "tidy 3"}
	if !slices.Equal(order, want) {
		t.Errorf("order %q, want %q", order, want)
	}
	if q.Busy("k") {
		t.Error("key busy after Wait")
	}
}

func TestAddIdleAloneRunsAtOnce(t *testing.T) {
	var q Queue
	done := make(chan struct{})
	q.AddIdle("k", func() { close(done) })
	recv(t, done, "idle function on an idle key")
	wait(t, &q)
}
