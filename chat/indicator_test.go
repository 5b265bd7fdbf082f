package chat

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat/chattest"
)

// gatedReactions is fakePlatform whose working indicator waits for a
// reaction budget the test opens (gate), as when Slack's reactions.add is
// short; everything else has room. It records what it was asked to pace.
type gatedReactions struct {
	*fakePlatform
	gate chan struct{}

	amu   sync.Mutex
	asked []Request
}

func (p *gatedReactions) Pace(ctx context.Context, req Request) error {
	p.amu.Lock()
	p.asked = append(p.asked, req)
	p.amu.Unlock()
	if req.Method != MethodReaction && req.Method != MethodUnreaction {
		return nil
	}
	select {
	case <-p.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *gatedReactions) methods() []Method {
	p.amu.Lock()
	defer p.amu.Unlock()
	var ms []Method
	for _, r := range p.asked {
		ms = append(ms, r.Method)
	}
	return ms
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
// the deliverer.
func TestIndicatorWaitsForItsBudgetAlone(t *testing.T) {
	p := &gatedReactions{fakePlatform: &fakePlatform{}, gate: make(chan struct{})}
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: &chattest.Outbox{}})
	t.Cleanup(r.Close)
	b := r.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	b.update(func(rec *boardRecord) { rec.Trigger = "msg-1" })
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnStarted})
	observe(r, chattest.Revision("test/1", 1))
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Text: "the answer"})
	settle(t, r, "test/1")
	if p.count("post") != 1 || p.count("reply") != 1 {
		t.Fatalf("with the indicator waiting: %d plan posts and %d replies, want 1 each", p.count("post"), p.count("reply"))
	}
	if got := p.ops("working"); len(got) != 0 {
		t.Fatalf("indicator calls %v before its budget had a slot", got)
	}
	if !slices.Contains(p.methods(), MethodReaction) {
		t.Fatalf("asked to pace %v, want the indicator's reaction among them", p.methods())
	}
	close(p.gate)
	settleStatuses(t, r, "test/1")
	if got, want := p.ops("working"), []string{"working-true:msg-1", "working-false:msg-1"}; !slices.Equal(got, want) {
		t.Errorf("indicator calls %v, want %v", got, want)
	}
	if !slices.Contains(p.methods(), MethodUnreaction) {
		t.Errorf("asked to pace %v, want the clearing counted as an unreaction", p.methods())
	}
}

// TestIndicatorNotShownAfterItsTurn: an indicator still waiting for its
// budget when its turn is over is not shown, and so not cleared either;
// the one already on its way is shown and cleared.
func TestIndicatorNotShownAfterItsTurn(t *testing.T) {
	p := &gatedReactions{fakePlatform: &fakePlatform{}, gate: make(chan struct{})}
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: &chattest.Outbox{}})
	t.Cleanup(r.Close)
	b := r.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	for _, msg := range []string{"msg-1", "msg-2"} {
		b.update(func(rec *boardRecord) { rec.Trigger = msg })
		observe(r, agent.Event{Session: "test/1", Kind: agent.TurnStarted})
		observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done})
	}
	settle(t, r, "test/1")
	close(p.gate) // msg-1's indicator was waiting; the rest queued behind it
	settleStatuses(t, r, "test/1")
	if got, want := p.ops("working"), []string{"working-true:msg-1", "working-false:msg-1"}; !slices.Equal(got, want) {
		t.Errorf("indicator calls %v, want %v (nothing for the turn over before its indicator's turn)", got, want)
	}
}

// pacedCards is cardPlatform recording what it was asked to pace.
type pacedCards struct {
	cardPlatform
	amu   sync.Mutex
	asked []Request
}

func (p *pacedCards) Pace(_ context.Context, req Request) error {
	p.amu.Lock()
	defer p.amu.Unlock()
	p.asked = append(p.asked, req)
	return nil
}

// TestCardsKeepToTheBudgets: a card's post counts in its channel's posts
// and its edits in the edits, each a final state (a card waits for
// someone; its decision is what the thread waits to see).
func TestCardsKeepToTheBudgets(t *testing.T) {
	p := &pacedCards{}
	r := NewRouter(Options{Runner: &decider{}, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond})
	t.Cleanup(r.Close)
	r.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
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
