package chat

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat/chattest"
)

// gatedPacer records what it is asked to pace; requests of the methods
// in gated wait for gate, which the test opens (or never does), as when
// that budget is short. Everything else has room.
type gatedPacer struct {
	gate  *Budget // newGate
	gated []Method

	amu   sync.Mutex
	asked []Request
}

func (g *gatedPacer) Budget(req Request) *Budget {
	g.amu.Lock()
	g.asked = append(g.asked, req)
	g.amu.Unlock()
	if !slices.Contains(g.gated, req.Method) {
		return nil
	}
	return g.gate
}

func (g *gatedPacer) methods() []Method {
	g.amu.Lock()
	defer g.amu.Unlock()
	var ms []Method
	for _, r := range g.asked {
		ms = append(ms, r.Method)
	}
	return ms
}

// waitAsked waits until a request of method m was asked for.
func (g *gatedPacer) waitAsked(t *testing.T, m Method) {
	t.Helper()
	waitUntil(t, func() bool { return slices.Contains(g.methods(), m) })
}

// gatedReactions is fakePlatform whose working indicator waits for its
// budgets (reactions.add, reactions.remove on Slack).
type gatedReactions struct {
	*fakePlatform
	gatedPacer
}

func (p *gatedReactions) Caps() Caps { return testCaps(p) }

func newGatedReactions() *gatedReactions {
	return &gatedReactions{fakePlatform: &fakePlatform{}, gatedPacer: gatedPacer{gate: newGate(), gated: []Method{MethodReaction, MethodUnreaction}}}
}

func (p *gatedReactions) ops(prefix string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ops []string
	for _, c := range p.calls {
		if len(c.Op) >= len(prefix) && c.Op[:len(prefix)] == prefix {
			ops = append(ops, c.Op+":"+c.Ref)
		}
	}
	return ops
}

// TestIndicatorWaitsForItsBudgetAlone: the working indicator keeps to
// the platform's reaction budgets, and while it waits for a slot the
// session's plan and answer go out: a short reaction budget never holds
// the session's lane. An indicator whose slot comes after its turn ended
// is not shown; one whose slot is there is.
func TestIndicatorWaitsForItsBudgetAlone(t *testing.T) {
	p := newGatedReactions()
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: &chattest.Outbox{}})
	t.Cleanup(r.Close)
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnStarted, Trigger: "msg-1"})
	p.waitAsked(t, MethodReaction) // waiting for its slot
	observe(r, chattest.Revision("test/1", 1))
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Text: "the answer", Trigger: "msg-1"})
	settle(t, r, "test/1")
	waitUntil(t, func() bool { return p.count("reply") == 1 })
	if p.count("post") != 1 {
		t.Fatalf("with the indicator waiting: %d plan posts, want 1", p.count("post"))
	}
	if got := p.ops("working"); len(got) != 0 {
		t.Fatalf("indicator calls %v before its budget had a slot", got)
	}
	openGate(p.gate)
	settleStatuses(t, r, "test/1")
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnStarted, Trigger: "msg-2"})
	waitUntil(t, func() bool { return len(p.ops("working")) == 2 }) // shown while its turn runs
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Trigger: "msg-2"})
	settleStatuses(t, r, "test/1")
	want := []string{"working-false:msg-1", "working-true:msg-2", "working-false:msg-2"}
	if got := p.ops("working"); !slices.Equal(got, want) {
		t.Errorf("indicator calls %v, want %v (msg-1's slot came after its turn)", got, want)
	}
	if !slices.Contains(p.methods(), MethodUnreaction) {
		t.Errorf("asked to pace %v, want the clearing counted as an unreaction", p.methods())
	}
}

// TestIndicatorNotShownAfterItsTurn: an indicator whose turn is over
// before its budget gives it a slot is not shown, whether it waited for
// the slot or behind another move; every clearing is sent (clearing what
// is not shown changes nothing), in order.
func TestIndicatorNotShownAfterItsTurn(t *testing.T) {
	p := newGatedReactions()
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: &chattest.Outbox{}})
	t.Cleanup(r.Close)
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	for i, msg := range []string{"msg-1", "msg-2"} {
		observe(r, agent.Event{Session: "test/1", Kind: agent.TurnStarted, Trigger: msg})
		if i == 0 {
			p.waitAsked(t, MethodReaction) // msg-1's indicator waits for its slot
		}
		observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Trigger: msg})
	}
	settle(t, r, "test/1")
	openGate(p.gate)
	settleStatuses(t, r, "test/1")
	if got, want := p.ops("working"), []string{"working-false:msg-1", "working-false:msg-2"}; !slices.Equal(got, want) {
		t.Errorf("indicator calls %v, want %v (both turns were over before a slot came)", got, want)
	}
}

// TestCardLeftToTheNextDelivererAtShutdown: a card still waiting for its
// budget when the router shuts down is left to the next start: not
// reported in the thread as a card that could not be posted, the cursor
// kept before its entry, and posted by the next router.
func TestCardLeftToTheNextDelivererAtShutdown(t *testing.T) {
	p := &pacedCards{gatedPacer: gatedPacer{gate: newGate(), gated: []Method{MethodPost}}} // never opened
	boards, ob, logs := &chattest.Boards{}, &chattest.Outbox{}, &chattest.Log{}
	r := NewRouter(Options{Runner: &decider{}, Store: boards, Log: logs, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: ob})
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	r.out.board(th.Key, &th)
	a := agent.Approval{CallID: "call_1", Tool: "fs__write_file", Server: "fs", Arguments: "{}", Requester: "UANN", Deadline: time.Now().Add(time.Hour)}
	e := logs.Append(th.Key, agent.Event{Kind: agent.ApprovalNeeded, Turn: 1, Approval: &a})
	r.Observe(e)
	p.waitAsked(t, MethodPost)
	r.Close()
	if p.posts != 0 || ob.Len() != 0 {
		t.Errorf("after a shutdown during the card's wait: %d cards posted, %d replies stored; want 0 and 0", p.posts, ob.Len())
	}
	if seq, err := logs.Delivered(t.Context(), th.Key); err != nil || seq >= e.Seq {
		t.Errorf("cursor %d (%v) after the shutdown, want it before the card's entry %d", seq, err, e.Seq)
	}

	up := &pacedCards{}
	r2 := NewRouter(Options{Runner: &decider{}, Store: boards, Log: logs, Platforms: map[string]Platform{"test": up}, RetryDelay: time.Millisecond, Outbox: ob})
	t.Cleanup(r2.Close)
	if _, err := r2.Resume(t.Context()); err != nil {
		t.Fatal(err)
	}
	r2.ResumeSession(t.Context(), th.Key)
	waitFor(t, "the card posted by the next start", func() bool {
		up.cmu.Lock()
		defer up.cmu.Unlock()
		return up.posts == 1
	})
	if ob.Len() != 0 {
		t.Errorf("%d replies stored, want none", ob.Len())
	}
}

// pacedCards is cardPlatform recording what it was asked to pace.
type pacedCards struct {
	cardPlatform
	gatedPacer
}

func (p *pacedCards) Caps() Caps { return testCaps(p) }

// TestCardsKeepToTheBudgets: a card's post counts in its channel's posts
// and its edits in the edits, each a final state (a card waits for
// someone; its decision is what the thread waits to see).
func TestCardsKeepToTheBudgets(t *testing.T) {
	p := &pacedCards{}
	r := NewRouter(Options{Runner: &decider{}, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond})
	t.Cleanup(r.Close)
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	a := agent.Approval{CallID: "call_1", Tool: "fs__write_file", Server: "fs", Arguments: "{}", Requester: "UANN", Deadline: time.Now().Add(time.Hour)}
	observe(r, agent.Event{Session: "test/1", Kind: agent.ApprovalNeeded, Approval: &a})
	observe(r, agent.Event{Session: "test/1", Kind: agent.ApprovalDecided, Approval: &a, Decision: &agent.Decision{Allow: true, By: "UANN"}})
	settle(t, r, "test/1")
	p.amu.Lock()
	defer p.amu.Unlock()
	var posts, edits int
	for _, req := range p.asked {
		if req.Priority == nil || req.Priority() != PriorityFinal {
			continue
		}
		switch req.Method {
		case MethodPost:
			posts++
		case MethodEdit:
			edits++
		}
	}
	if p.posts != 1 || posts != 1 || edits != 1 {
		t.Errorf("%d cards posted; paced %d card posts and %d card edits as final states, want 1 each (asked %d)", p.posts, posts, edits, len(p.asked))
	}
}

// TestCardHoldsTheCursorUntilSent: a card waiting on the session's lane
// for its budget keeps the stored cursor before its entry, and the
// turn's answer after it waits; once it is posted (and closed) the
// cursor passes both and the answer goes.
func TestCardHoldsTheCursorUntilSent(t *testing.T) {
	p := &pacedCards{gatedPacer: gatedPacer{gate: newGate(), gated: []Method{MethodPost}}}
	logs := &chattest.Log{}
	r := NewRouter(Options{Runner: &decider{}, Store: &chattest.Boards{}, Log: logs, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: &chattest.Outbox{}})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	r.out.board(th.Key, &th)
	a := agent.Approval{CallID: "call_1", Tool: "fs__write_file", Server: "fs", Arguments: "{}", Requester: "UANN", Deadline: time.Now().Add(time.Hour)}
	var card agent.Event
	for _, e := range []agent.Event{
		{Kind: agent.TurnStarted, Turn: 1},
		{Kind: agent.ApprovalNeeded, Turn: 1, Approval: &a},
		{Kind: agent.ApprovalDecided, Turn: 1, Approval: &a, Decision: &agent.Decision{Allow: true, By: "UANN"}},
		{Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done, Text: "the answer"},
	} {
		e = logs.Append(th.Key, e)
		if e.Kind == agent.ApprovalNeeded {
			card = e
		}
		observe(r, e)
	}
	p.waitAsked(t, MethodPost)
	r.out.Flush(th.Key) // every entry applied, the cursor stored as far as it may go
	if seq, err := logs.Delivered(t.Context(), th.Key); err != nil || seq >= card.Seq {
		t.Errorf("cursor stored at %d (%v) while the card waits, want it before the card's entry %d", seq, err, card.Seq)
	}
	held := make(chan int)
	r.out.delivery.Add(th.Key, func() { held <- len(r.out.session(th.Key, nil).cursor.held) })
	if n := <-held; n != 1 {
		t.Errorf("%d answers held behind the card, want 1", n)
	}
	openGate(p.gate)
	waitFor(t, "the answer after the card", func() bool { return p.count("reply") == 1 })
	r.out.Flush(th.Key)
	if seq, _ := logs.Delivered(t.Context(), th.Key); seq != card.Seq+2 {
		t.Errorf("cursor stored at %d once the card is sent, want %d", seq, card.Seq+2)
	}
	p.cmu.Lock()
	posts := p.posts
	p.cmu.Unlock()
	if posts != 1 || p.card("card1").Open() {
		t.Errorf("%d cards posted, card %+v: want one, closed", posts, p.card("card1"))
	}
}

// TestFencedCardOwesNothing: a card another replica holds the session
// for now (the fence answers fenced) is left to that replica: this
// one's cursor owes it nothing, and the answers after it are not held
// here for ever.
func TestFencedCardOwesNothing(t *testing.T) {
	p := &pacedCards{}
	logs := &chattest.Log{}
	r := NewRouter(Options{Runner: &decider{}, Store: &chattest.Boards{}, Log: logs, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond,
		Outbox: &chattest.Outbox{}, Fence: &fenceAfter{}})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	s := r.out.session(th.Key, &th)
	a := agent.Approval{CallID: "call_1", Tool: "fs__write_file", Server: "fs", Arguments: "{}", Requester: "UANN", Deadline: time.Now().Add(time.Hour)}
	for _, e := range []agent.Event{
		{Kind: agent.TurnStarted, Turn: 1},
		{Kind: agent.ApprovalNeeded, Turn: 1, Approval: &a},
		{Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Stopped, Text: "stopped"},
	} {
		observe(r, logs.Append(th.Key, e))
	}
	r.out.waitLane(th.Key)
	r.out.Flush(th.Key) // the cards' outcomes, back on the deliverer
	done := make(chan struct{})
	var owed, held int
	r.out.delivery.Add(th.Key, func() {
		owed, held = len(s.cursor.owed), len(s.cursor.held)
		close(done)
	})
	<-done
	if owed != 0 || held != 0 {
		t.Errorf("after the fenced card: %d entries owed, %d answers held, want 0 and 0", owed, held)
	}
	p.cmu.Lock()
	posts := p.posts
	p.cmu.Unlock()
	if posts != 0 {
		t.Errorf("%d cards posted past the fence, want 0", posts)
	}
}

// failFirstCards is cardPlatform whose first card post fails as a 5xx
// does (tried again after a backoff).
type failFirstCards struct {
	cardPlatform
	tries atomic.Int32
}

func (p *failFirstCards) Caps() Caps { return testCaps(p) }

func (p *failFirstCards) PostCard(ctx context.Context, th Thread, card Card) (MessageRef, error) {
	if p.tries.Add(1) == 1 {
		return MessageRef{}, errTransient
	}
	return p.cardPlatform.PostCard(ctx, th, card)
}

// TestArchiveDropsACardWaitingToRetry: a card whose post failed and waits
// for its next attempt when the session is reset is not posted after the
// reset: its approval went with the session, and the entry owes nothing.
func TestArchiveDropsACardWaitingToRetry(t *testing.T) {
	p := &failFirstCards{}
	logs := &chattest.Log{}
	r := NewRouter(Options{Runner: &decider{}, Store: &chattest.Boards{}, Log: logs, Platforms: map[string]Platform{"test": p},
		RetryDelay: 300 * time.Millisecond, Outbox: &chattest.Outbox{}})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	s := r.out.session(th.Key, &th)
	a := agent.Approval{CallID: "call_1", Tool: "fs__write_file", Server: "fs", Arguments: "{}", Requester: "UANN", Deadline: time.Now().Add(time.Hour)}
	observe(r, logs.Append(th.Key, agent.Event{Kind: agent.ApprovalNeeded, Turn: 1, Approval: &a}))
	waitUntil(t, func() bool { return p.tries.Load() == 1 }) // failed; the next attempt waits
	r.out.archived(t.Context(), s, "ann", false)
	waitUntil(t, func() bool { // the dropped attempt's turn came, and paid its entry
		owed := make(chan int)
		r.out.delivery.Add(th.Key, func() { owed <- len(s.cursor.owed) })
		return <-owed == 0
	})
	if n := p.tries.Load(); n != 1 {
		t.Errorf("%d card posts tried, want only the first, before the reset", n)
	}
	if cards := r.Cards(th.Key); len(cards) != 0 {
		t.Errorf("cards after the reset %+v, want none", cards)
	}
}
