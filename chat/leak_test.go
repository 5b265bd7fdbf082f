package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat/chattest"
	"github.com/pinplan/pinplan/todo"
)

// pinStarvedPlatform is fakePlatform under Slack's budgets as a busy
// workspace meets them: posts and edits have room, pins (Tier 2, about
// 20 a minute for the whole workspace, shared by the replicas) have none
// for the next hour, as when hundreds of other threads' pins are ahead.
type pinStarvedPlatform struct {
	*fakePlatform
	pins *Budget

	mu     sync.Mutex
	pinsAt map[string]bool // threads whose pin asked for a slot
}

func (p *pinStarvedPlatform) Caps() Caps { return testCaps(p) }

func newPinStarvedPlatform() *pinStarvedPlatform {
	p := &pinStarvedPlatform{fakePlatform: &fakePlatform{}, pins: NewBudget(18, 1), pinsAt: map[string]bool{}}
	p.pins.Hold(time.Hour)
	return p
}

func (p *pinStarvedPlatform) Budget(req Request) *Budget {
	if req.Method != MethodPin {
		return nil
	}
	p.mu.Lock()
	p.pinsAt[req.Thread.Key] = true
	p.mu.Unlock()
	return p.pins
}

func (p *pinStarvedPlatform) pinsAsked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pinsAt)
}

// TestPendingPinCostsNoGoroutine: sessions whose turn is over and whose
// plan shows its final state, with only their pin left to send behind a
// budget that has no slot for a long time, cost no goroutine each (issue
// #41: "An idle session must cost no goroutine"). The soak at 5,000
// threads an hour asks about 80 pins a minute of a budget of 18, so such
// sessions pile up by the hundred, on the replica that takes the others'
// sessions most of all; each parked a board loop in Budget.Wait:
//
//	chat.(*Budget).Wait pace.go
//	slack.(*Adapter).Pace
//	chat.(*Board).pace board.go
//	chat.(*Board).pin board.go
//	chat.(*Board).apply board.go
//	chat.(*Board).loop board.go
//
// A constant few (the budget's one dispatcher) are allowed; a goroutine
// per session is not.
func TestPendingPinCostsNoGoroutine(t *testing.T) {
	const n = 40
	const allowed = 4 // goroutines, whatever n

	t.Run("turns ended", func(t *testing.T) {
		p := newPinStarvedPlatform()
		r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: &chattest.Outbox{}})
		t.Cleanup(r.Close)
		base := runtime.NumGoroutine()
		for i := range n {
			key := fmt.Sprintf("test/%d", i)
			r.out.board(key, &Thread{Platform: "test", Key: key, Channel: fmt.Sprintf("C%d", i)})
			observe(r, chattest.Revision(key, 1))
			observe(r, agent.Event{Session: key, Kind: agent.TurnEnded, Outcome: agent.Done, Text: "the answer " + key})
		}
		// Every answer delivered, every plan on its final state, every
		// pin asked for: the threads are idle but for their pins.
		waitUntil(t, func() bool { return p.count("reply") == n && p.allShow(StateDone, n) && p.pinsAsked() == n })
		expectFewGoroutines(t, base, allowed, n)
	})

	t.Run("taken over", func(t *testing.T) {
		// The records another replica left: each plan posted and showing
		// its final state, the pin not made yet (it was waiting for the
		// budget when that replica died).
		boards := &chattest.Boards{}
		want := Plan{Items: plan(2, todo.Completed, todo.Completed).Items(), Revision: 2, State: StateDone}
		for i := range n {
			key := fmt.Sprintf("test/%d", i)
			th := Thread{Platform: "test", Key: key, Channel: fmt.Sprintf("C%d", i)}
			savedBoard(t, boards, nil, boardRecord{Thread: th, Ref: MessageRef{Channel: th.Channel, ID: fmt.Sprintf("old%d", i)}, Shown: want}, nil)
		}
		p := newPinStarvedPlatform()
		r := NewRouter(Options{Store: boards, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: &chattest.Outbox{}})
		t.Cleanup(r.Close)
		base := runtime.NumGoroutine()
		for i := range n {
			r.ResumeSession(context.Background(), fmt.Sprintf("test/%d", i))
		}
		waitUntil(t, func() bool { return p.pinsAsked() == n })
		if posts, edits := p.count("post"), p.count("edit"); posts != 0 || edits != 0 {
			t.Fatalf("%d posts and %d edits; want none: every plan shows its final state already", posts, edits)
		}
		expectFewGoroutines(t, base, allowed, n)
	})
}

// allShow reports whether n plan messages are shown and every one shows
// state.
func (f *fakePlatform) allShow(state PlanState, n int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.shown) != n {
		return false
	}
	for _, p := range f.shown {
		if p.State != state {
			return false
		}
	}
	return true
}

// expectFewGoroutines fails unless, within a few seconds, at most allowed
// goroutines more than base are left; it lists the chat goroutines that
// stayed, grouped by stack.
func expectFewGoroutines(t *testing.T, base, allowed, sessions int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine()-base > allowed && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	extra := runtime.NumGoroutine() - base
	if extra <= allowed {
		return
	}
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	var stayed []string
	for _, group := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(group, "pinplan/chat.") && !strings.Contains(group, "testing.tRunner") {
			stayed = append(stayed, group)
		}
	}
	t.Fatalf("%d goroutines more than before for %d idle sessions (at most %d allowed, whatever the sessions); chat's, by stack:\n%s",
		extra, sessions, allowed, strings.Join(stayed, "\n\n"))
}

// TestFencedBoardOwesNoPin: a board whose pin waits for its budget while
// another replica takes the session over stops at its fence (here on an
// edit), and owes nothing here after: the pin is the new holder's, and
// eviction drops the session (a stale board kept as busy would stay in
// memory for good).
func TestFencedBoardOwesNoPin(t *testing.T) {
	gate := newGate()
	p := &pinHeldPlatform{fakePlatform: &fakePlatform{}, gate: gate}
	fence := &fenceAfter{n: 1000}
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond,
		Outbox: &chattest.Outbox{}, Fence: fence})
	t.Cleanup(r.Close)
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, chattest.Revision("test/1", 1))
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done})
	waitUntil(t, func() bool { return gate.Waiting() == 1 })

	fence.mu.Lock()
	fence.n = 0 // another replica holds it now
	fence.mu.Unlock()
	observe(r, agent.Event{Session: "test/1", Kind: agent.EvidenceChanged, Revision: 1, Calls: 1}) // an edit, fenced
	waitUntil(t, func() bool {
		b := r.out.board("test/1", nil)
		b.mu.Lock()
		defer b.mu.Unlock()
		return !b.running && !b.owesSlotLocked()
	})
	if n := r.Evict(0); n != 1 {
		t.Errorf("Evict dropped %d sessions; want the fenced one", n)
	}
	openGate(gate) // the slot it asked for comes after all
	time.Sleep(50 * time.Millisecond)
	if n := p.count("pin"); n != 0 {
		t.Errorf("%d pins after the fence; want none", n)
	}
}

// TestPendingPinLeavesMemory: a session idle but for its pin, which
// waits behind a budget with no slot, leaves memory on eviction as an
// idle one does; when the slot comes the plan is pinned all the same.
// The soak at 5,000 threads an hour asks four times the pins Slack
// allows: such sessions piled up by the hundred in memory, the growth
// of the replica never killed (issue #41's RSS bound).
func TestPendingPinLeavesMemory(t *testing.T) {
	const n = 20
	p := newPinStarvedPlatform()
	p.pins = NewBudget(6000, n)
	p.pins.Hold(time.Hour)
	boards := &chattest.Boards{}
	r := NewRouter(Options{Store: boards, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: &chattest.Outbox{}})
	t.Cleanup(r.Close)
	for i := range n {
		key := fmt.Sprintf("test/%d", i)
		r.out.board(key, &Thread{Platform: "test", Key: key, Channel: fmt.Sprintf("C%d", i)})
		observe(r, chattest.Revision(key, 1))
		observe(r, agent.Event{Session: key, Kind: agent.TurnEnded, Outcome: agent.Done, Text: "the answer " + key})
	}
	waitUntil(t, func() bool { return p.count("reply") == n && p.allShow(StateDone, n) && p.pinsAsked() == n })
	waitUntil(t, func() bool { r.Evict(0); return r.out.inMemory() == 0 })
	if got := p.count("pin"); got != 0 {
		t.Fatalf("%d pins before the budget had a slot", got)
	}
	p.pins.mu.Lock()
	p.pins.hold = time.Time{} // the Retry-After over
	p.pins.mu.Unlock()
	p.pins.kick()
	waitUntil(t, func() bool { return p.count("pin") == n })
	for i := range n {
		raw, _ := boards.Board(context.Background(), fmt.Sprintf("test/%d", i))
		var rec boardRecord
		if err := json.Unmarshal(raw, &rec); err != nil || !rec.Pinned {
			t.Errorf("session %d: the stored board does not say pinned (%v): %s", i, err, raw)
		}
	}
}

// inMemory is how many sessions the deliverer keeps in memory.
func (d *deliverer) inMemory() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.sessions)
}
