package chat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat/chattest"
	"github.com/pinplan/pinplan/todo"
)

// sessionPlatform shows sessions: it records every status move, and
// answers ErrNoSessions when off.
type sessionPlatform struct {
	cardPlatform
	smu    sync.Mutex
	off    bool
	moves  []string // "state" or "state:title"
	status error    // answered by every move when set (after off)
	// transient is how many moves to answer errTransient first.
	transient int
}

func (p *sessionPlatform) Caps() Caps { return testCaps(p) }

func (s *sessionPlatform) SetSessionStatus(_ context.Context, _ Thread, st SessionState, title string) error {
	s.smu.Lock()
	defer s.smu.Unlock()
	if s.off {
		return fmt.Errorf("no sessions here: %w", ErrNoSessions)
	}
	if s.status != nil {
		return s.status
	}
	if s.transient > 0 {
		s.transient--
		return errTransient
	}
	m := string(st)
	if title != "" {
		m += ":" + title
	}
	s.moves = append(s.moves, m)
	return nil
}

func (s *sessionPlatform) recorded() []string {
	s.smu.Lock()
	defer s.smu.Unlock()
	return append([]string(nil), s.moves...)
}

// working returns the working indicator calls, as "on:ref" and "off:ref".
func (s *sessionPlatform) working() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.calls {
		switch c.Op {
		case "working-true":
			out = append(out, "on:"+c.Ref)
		case "working-false":
			out = append(out, "off:"+c.Ref)
		}
	}
	return out
}

// settleStatuses waits for the board, the outbox and the status moves,
// those waiting for their next attempt included.
func settleStatuses(t testing.TB, r *Router, key string) {
	t.Helper()
	settle(t, r, key)
	waitUntil(t, func() bool {
		r.out.movesMu.Lock()
		n := len(r.out.moves[key])
		r.out.movesMu.Unlock()
		return n == 0 && !r.out.lane.Busy(key)
	})
}

func sessionRig(t *testing.T, p *sessionPlatform) (*Router, *decider, Thread) {
	t.Helper()
	run := &decider{}
	r := NewRouter(Options{Runner: run, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, Approvers: []string{"UADMIN"}, RetryDelay: time.Millisecond})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1", ThreadID: "1.1"}
	if err := r.Handle(context.Background(), Incoming{Thread: th, Text: "plan the release\nwith the notes", Author: "ann", AuthorID: "UANN", MessageID: "m1"}); err != nil {
		t.Fatal(err)
	}
	return r, run, th
}

// TestSessionStatusFollowsTheTurn: DESIGN §7's mapping, from the board's
// events: processing (titled on creation), suspended while a card waits,
// processing once decided, active at the end; no working indicator
// besides.
func TestSessionStatusFollowsTheTurn(t *testing.T) {
	p := &sessionPlatform{}
	r, _, th := sessionRig(t, p)
	a := agent.Approval{CallID: "call_1", Tool: "fs__write_file", Requester: "UANN", Deadline: time.Now().Add(time.Hour)}
	d := agent.Decision{Allow: true, By: "UANN"}
	for _, e := range []agent.Event{
		{Kind: agent.TurnStarted, Requester: "UANN"},
		{Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.InProgress)},
		{Kind: agent.ApprovalNeeded, Approval: &a},
		{Kind: agent.ApprovalDecided, Approval: &a, Decision: &d},
		{Kind: agent.TurnEnded, Outcome: agent.Done},
		// The next turn carries no title: the session exists.
		{Kind: agent.TurnStarted, Requester: "UANN"},
		{Kind: agent.TurnEnded, Outcome: agent.Done},
	} {
		e.Session = th.Key
		observe(r, e)
	}
	settleStatuses(t, r, th.Key)
	want := []string{"processing:plan the release", "suspended", "processing", "active", "processing", "active"}
	if got := p.recorded(); !slices.Equal(got, want) {
		t.Errorf("status moves %q, want %q", got, want)
	}
	if w := p.working(); len(w) != 0 {
		t.Errorf("working indicator %q besides the session status, want none", w)
	}
}

// TestNoSessionsFallBackToWorking: where the platform cannot show
// sessions, the turn's start and end show and clear the working
// indicator on the message that started it; the other moves have no
// counterpart. (An indicator whose turn is over before it is sent is not
// shown: TestIndicatorNotShownAfterItsTurn. Here each move is sent before
// the next event.)
func TestNoSessionsFallBackToWorking(t *testing.T) {
	p := &sessionPlatform{off: true}
	r, _, th := sessionRig(t, p)
	a := agent.Approval{CallID: "call_1", Tool: "fs__write_file", Requester: "UANN", Deadline: time.Now().Add(time.Hour)}
	for _, e := range []agent.Event{
		{Kind: agent.TurnStarted, Requester: "UANN"},
		{Kind: agent.ApprovalNeeded, Approval: &a},
		{Kind: agent.TurnEnded, Outcome: agent.Stopped},
	} {
		e.Session, e.Trigger = th.Key, "m1" // every entry of the turn names the message it began on
		observe(r, e)
		settleStatuses(t, r, th.Key)
	}
	settleStatuses(t, r, th.Key)
	if got, want := p.working(), []string{"on:m1", "off:m1"}; !slices.Equal(got, want) {
		t.Errorf("working indicator %q, want %q", got, want)
	}
}

// TestSessionStatusRetriedByThePolicy: a transient failure is retried, a
// permanent one is given up at once.
func TestSessionStatusRetriedByThePolicy(t *testing.T) {
	p := &sessionPlatform{}
	r, _, th := sessionRig(t, p)
	p.smu.Lock()
	p.transient = 2
	p.smu.Unlock()
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnStarted, Requester: "UANN"})
	settleStatuses(t, r, th.Key)
	if got := p.recorded(); !slices.Equal(got, []string{"processing:plan the release"}) {
		t.Errorf("after transient failures: %q, want the move applied once", got)
	}
	p.smu.Lock()
	p.status = fmt.Errorf("gone: %w", ErrUndeliverable)
	p.smu.Unlock()
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnEnded, Outcome: agent.Done})
	settleStatuses(t, r, th.Key) // returns: a permanent failure is not retried
	if w := p.working(); len(w) != 0 {
		t.Errorf("a failed move fell back to the working indicator %q; only ErrNoSessions does", w)
	}
}

// TestResetClosesTheSession: reset closes a session the platform shows;
// one that never had a turn is not created just to be closed.
func TestResetClosesTheSession(t *testing.T) {
	p := &sessionPlatform{}
	r, _, th := sessionRig(t, p)
	if err := r.Handle(context.Background(), Incoming{Thread: th, Text: "reset", AuthorID: "UANN"}); !errors.Is(err, ErrRejected) {
		t.Fatalf("reset: %v", err)
	}
	settleStatuses(t, r, th.Key)
	if got := p.recorded(); len(got) != 0 {
		t.Errorf("reset of a session without a turn moved %q, want nothing", got)
	}
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnStarted, Requester: "UANN"})
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnEnded, Outcome: agent.Done})
	if err := r.Handle(context.Background(), Incoming{Thread: th, Text: "reset", AuthorID: "UANN"}); !errors.Is(err, ErrRejected) {
		t.Fatalf("reset: %v", err)
	}
	settleStatuses(t, r, th.Key)
	if got, want := p.recorded(), []string{"processing:plan the release", "active", "closed"}; !slices.Equal(got, want) {
		t.Errorf("status moves %q, want %q", got, want)
	}
	// The next session in the thread is titled again.
	if err := r.Handle(context.Background(), Incoming{Thread: th, Text: "start over", AuthorID: "UANN", MessageID: "m2"}); err != nil {
		t.Fatal(err)
	}
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnStarted, Requester: "UANN"})
	settleStatuses(t, r, th.Key)
	if got := p.recorded(); got[len(got)-1] != "processing:plan the release" {
		t.Errorf("the new session's first move %q, want it titled (the thread keeps its listing title)", got[len(got)-1])
	}
}

// TestStopSessionMovesTheStatus: the platform's own Stop follows the Stop
// button's rule; someone else's is refused privately and the status goes
// back to what the turn is doing, the requester's stops the turn and
// moves it to active.
func TestStopSessionMovesTheStatus(t *testing.T) {
	p := &sessionPlatform{}
	r, run, th := sessionRig(t, p)
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnStarted, Requester: "UANN"})
	settleStatuses(t, r, th.Key)

	res := r.StopSession(context.Background(), Click{Thread: th, UserID: "UBOB", UserName: "bob"})
	if !strings.Contains(res.Private, "Only <@UANN>") {
		t.Errorf("bob's stop answered %+v, want a private refusal naming the requester", res)
	}
	settleStatuses(t, r, th.Key) // the move reads the session when it is sent
	a := agent.Approval{CallID: "call_1", Tool: "fs__write_file", Requester: "UANN", Deadline: time.Now().Add(time.Hour)}
	observe(r, agent.Event{Session: th.Key, Kind: agent.ApprovalNeeded, Approval: &a})
	settleStatuses(t, r, th.Key)
	r.StopSession(context.Background(), Click{Thread: th, UserID: "UBOB", UserName: "bob"})
	settleStatuses(t, r, th.Key)
	run.mu.Lock()
	bobs := len(run.stops)
	run.mu.Unlock()
	if bobs != 0 {
		t.Fatalf("bob's stops reached the runner %d times", bobs)
	}
	res = r.StopSession(context.Background(), Click{Thread: th, UserID: "UANN", UserName: "ann"})
	if res.Private != "" {
		t.Errorf("the requester's stop answered %q, want it to go through", res.Private)
	}
	settleStatuses(t, r, th.Key)
	run.mu.Lock()
	stops := slices.Clone(run.stops)
	run.mu.Unlock()
	if !slices.Equal(stops, []string{"ann"}) {
		t.Errorf("runner stops %q, want ann's only", stops)
	}
	want := []string{"processing:plan the release", "processing", "suspended", "suspended", "active"}
	if got := p.recorded(); !slices.Equal(got, want) {
		t.Errorf("status moves %q, want %q", got, want)
	}
	// Nothing runs any more: a later Stop is told so and the status is
	// moved to active again (Slack leaves it where the click found it).
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnEnded, Outcome: agent.Stopped, StoppedBy: "ann"})
	res = r.StopSession(context.Background(), Click{Thread: th, UserID: "UANN", UserName: "ann"})
	settleStatuses(t, r, th.Key)
	if !strings.Contains(res.Private, "Nothing is running") {
		t.Errorf("a stop with nothing running answered %+v", res)
	}
	if got := p.recorded(); !slices.Equal(got[len(got)-2:], []string{"active", "active"}) {
		t.Errorf("status moves %q, want the turn's end and the late stop to move it to active", got)
	}
}

// TestStopSessionRacesTheTurnEnd: a refused Stop while the turn ends
// leaves the session active: the move the Stop queues reads what the
// session does when it is sent, not before the turn's own move. The race
// needs the turn to end between the Stop's read and its queueing, so it
// is tried many times (before the fix, most runs caught it within the
// 3,000 tries).
func TestStopSessionRacesTheTurnEnd(t *testing.T) {
	p := &sessionPlatform{}
	r, _, th := sessionRig(t, p)
	ctx := context.Background()
	for i := range 3000 {
		observe(r, agent.Event{Session: th.Key, Kind: agent.TurnStarted, Requester: "UANN"})
		settleStatuses(t, r, th.Key)
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			observe(r, agent.Event{Session: th.Key, Kind: agent.TurnEnded, Outcome: agent.Done})
		}()
		go func() {
			defer wg.Done()
			<-start
			r.StopSession(ctx, Click{Thread: th, UserID: "UBOB", UserName: "bob"})
		}()
		close(start)
		wg.Wait()
		settleStatuses(t, r, th.Key)
		if got := p.recorded(); got[len(got)-1] != string(SessionActive) {
			t.Fatalf("try %d: status moves end %q, want active: the turn ended", i, got[max(len(got)-3, 0):])
		}
	}
}

// stopRunner ends the stopped turn and starts the next one within Stop,
// before the router's StopSession goes on: the worst timing a runner can
// have (its turn ends at once and a queued message's turn starts).
type stopRunner struct {
	decider
	onStop func()
}

func (s *stopRunner) Stop(key, by string) bool {
	s.decider.Stop(key, by)
	if s.onStop != nil {
		s.onStop()
	}
	return true
}

// TestStopSessionThenNextTurn: a Stop that goes through moves the session
// to active, but never after the next turn's processing.
func TestStopSessionThenNextTurn(t *testing.T) {
	p := &sessionPlatform{}
	run := &stopRunner{}
	r := NewRouter(Options{Runner: run, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1", ThreadID: "1.1"}
	ctx := context.Background()
	if err := r.Handle(ctx, Incoming{Thread: th, Text: "plan the release", Author: "ann", AuthorID: "UANN", MessageID: "m1"}); err != nil {
		t.Fatal(err)
	}
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnStarted, Requester: "UANN"})
	settleStatuses(t, r, th.Key)
	run.onStop = func() {
		observe(r, agent.Event{Session: th.Key, Kind: agent.TurnEnded, Outcome: agent.Stopped, StoppedBy: "ann"})
		observe(r, agent.Event{Session: th.Key, Kind: agent.TurnStarted, Requester: "UANN"})
	}
	if res := r.StopSession(ctx, Click{Thread: th, UserID: "UANN", UserName: "ann"}); res.Private != "" {
		t.Fatalf("the requester's stop refused: %q", res.Private)
	}
	settleStatuses(t, r, th.Key)
	got := p.recorded()
	if got[len(got)-1] != string(SessionProcessing) {
		t.Errorf("status moves %q, want the next turn's processing last", got)
	}
	if !slices.Contains(got[1:], string(SessionActive)) {
		t.Errorf("status moves %q, want the stop and the turn's end to move it to active", got)
	}
}

// stoppingReset is a runner whose Reset stops the running turn as the
// agent does: the turn's end is published (and queued on the deliverer)
// before Reset returns.
type stoppingReset struct {
	decider
	r *Router
}

func (s *stoppingReset) Reset(_ context.Context, key, by string) error {
	e := agent.Event{Session: key, Kind: agent.TurnEnded, Outcome: agent.Stopped, StoppedBy: by, Text: "Stopped. The plan is kept as it was."}
	s.Note(e)
	s.r.Observe(e) // not waited for: the agent's Publish only queues it
	return nil
}

// TestResetAfterTheStoppedTurnIsShown: a reset of a running turn shows
// the turn's end, which the agent published while it stopped it, before
// the board starts over: the session's status ends closed, not active
// (the end's move coming after the reset's), and the new session's plan
// gets its own message.
func TestResetAfterTheStoppedTurnIsShown(t *testing.T) {
	p := &sessionPlatform{}
	run := &stoppingReset{}
	r := NewRouter(Options{Runner: run, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond})
	t.Cleanup(r.Close)
	run.r = r
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1", ThreadID: "1.1"}
	if err := r.Handle(context.Background(), Incoming{Thread: th, Text: "plan the release", Author: "ann", AuthorID: "UANN", MessageID: "m1"}); err != nil {
		t.Fatal(err)
	}
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnStarted, Turn: 1, Requester: "UANN"})
	observe(r, agent.Event{Session: th.Key, Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.InProgress)})
	settleStatuses(t, r, th.Key) // the plan is posted: nothing in flight when the reset comes
	if err := r.Handle(context.Background(), Incoming{Thread: th, Text: "reset", Author: "ann", AuthorID: "UANN"}); !errors.Is(err, ErrRejected) {
		t.Fatalf("reset: %v", err)
	}
	settleStatuses(t, r, th.Key)
	if got := p.recorded(); len(got) == 0 || got[len(got)-1] != "closed" {
		t.Errorf("status moves %q, want them to end closed", got)
	}
	if rec, want := r.out.board(th.Key, nil).state(); !rec.Ref.IsZero() || len(want.Items) != 0 {
		t.Errorf("after the reset the board shows %+v on %q, want it started over", want, rec.Ref.ID)
	}
}

// TestStatusRetryHoldsUpNoAnswer: a status move that failed waits for
// its next attempt off the session's lane, so the turn's answer goes out
// meanwhile, and the moves behind it keep their order.
func TestStatusRetryHoldsUpNoAnswer(t *testing.T) {
	p := &sessionPlatform{transient: 1}
	r := NewRouter(Options{Runner: &decider{}, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, Outbox: &chattest.Outbox{},
		RetryDelay: 5 * time.Second}) // the move's next attempt 2.5 to 5 s after its first
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1", ThreadID: "1.1"}
	if err := r.Handle(context.Background(), Incoming{Thread: th, Text: "plan the release", AuthorID: "UANN", MessageID: "m1"}); err != nil {
		t.Fatal(err)
	}
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnStarted, Requester: "UANN", Trigger: "m1"})
	waitUntil(t, func() bool { // the move's first attempt failed
		p.smu.Lock()
		defer p.smu.Unlock()
		return p.transient == 0
	})
	observe(r, chattest.Revision(th.Key, 1))
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnEnded, Outcome: agent.Done, Text: "the answer", Trigger: "m1"})
	waitUntil(t, func() bool { return p.count("reply") == 1 })
	if got := p.recorded(); len(got) != 0 {
		t.Errorf("status moves %q made before the answer: the answer waited for the move's retry", got)
	}
	settleStatuses(t, r, th.Key)
	if got, want := p.recorded(), []string{"processing:plan the release", "active"}; !slices.Equal(got, want) {
		t.Errorf("status moves %q, want %q", got, want)
	}
}
