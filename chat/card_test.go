package chat

import (
	"context"
	"encoding/json"
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

// cardPlatform is a fakePlatform that shows cards.
type cardPlatform struct {
	fakePlatform
	cmu   sync.Mutex
	cards map[string]Card
	posts int
}

func (p *cardPlatform) Caps() Caps { return testCaps(p) }

func (c *cardPlatform) PostCard(_ context.Context, th Thread, card Card) (MessageRef, error) {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	c.posts++
	id := fmt.Sprintf("card%d", c.posts)
	if c.cards == nil {
		c.cards = map[string]Card{}
	}
	c.cards[id] = card
	return MessageRef{Channel: th.Channel, ID: id}, nil
}

func (c *cardPlatform) EditCard(_ context.Context, _ Thread, ref MessageRef, card Card) error {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	c.cards[ref.ID] = card
	return nil
}

func (c *cardPlatform) card(id string) Card {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	return c.cards[id]
}

// decider is a chat.Runner that records decisions and stops.
type decider struct {
	chattest.Runner
	mu        sync.Mutex
	decisions []agent.Decision
	stops     []string
}

func (d *decider) Decide(_ context.Context, _, callID string, dec agent.Decision) (agent.Approval, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.decisions) > 0 {
		return agent.Approval{}, agent.ErrNotPending
	}
	d.decisions = append(d.decisions, dec)
	return agent.Approval{CallID: callID}, nil
}

func (d *decider) Stop(_, by string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stops = append(d.stops, by)
	return true
}

func cardRig(t *testing.T) (*Router, *cardPlatform, *decider) {
	t.Helper()
	p := &cardPlatform{}
	run := &decider{}
	r := NewRouter(Options{Runner: run, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, Approvers: []string{"UADMIN"}, RetryDelay: time.Millisecond})
	t.Cleanup(r.Close)
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnStarted, Requester: "UANN"})
	return r, p, run
}

func TestApprovalCardAndClicks(t *testing.T) {
	r, p, run := cardRig(t)
	a := agent.Approval{CallID: "call_1", Tool: "fs__write_file", Server: "fs", Arguments: "{ \"path\" : \"x\" }", Requester: "UANN", Deadline: time.Now().Add(time.Hour)}
	observe(r, agent.Event{Session: "test/1", Kind: agent.ApprovalNeeded, Approval: &a})
	observe(r, agent.Event{Session: "test/1", Kind: agent.ApprovalNeeded, Approval: &a}) // announced again after a restart
	settle(t, r, "test/1")
	if p.posts != 1 {
		t.Fatalf("%d cards posted, want 1", p.posts)
	}
	card := p.card("card1")
	if card.Tool != "fs__write_file" || card.Server != "fs" || card.Arguments != `{"path":"x"}` || !card.Open() {
		t.Errorf("card = %+v", card)
	}
	if got := r.out.board("test/1", nil).want.State; got != StateWaiting {
		t.Errorf("plan state %q, want waiting for approval", got)
	}
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	click := func(action, id, user string) ClickResult {
		return r.Click(context.Background(), Click{Thread: th, Button: ButtonID(action, id), UserID: user, UserName: strings.ToLower(user)})
	}
	if res := click(ActionAllow, card.ID, "UEVE"); res.Private == "" || res.Card != nil {
		t.Errorf("someone else's click: %+v, want a private refusal", res)
	}
	if res := click(ActionAllow, "nope", "UANN"); res.Private == "" {
		t.Errorf("click on a card of another thread: %+v", res)
	}
	if len(run.decisions) != 0 {
		t.Fatal("a refused click reached the runner")
	}
	res := click(ActionAlways, card.ID, "UANN")
	if res.Card == nil || res.Card.Outcome != "Always allowed here" || res.Card.By != "uann" || res.Card.Open() {
		t.Fatalf("requester's click: %+v", res)
	}
	if d := run.decisions[0]; !d.Allow || !d.Always || d.By != "UANN" {
		t.Errorf("decision %+v", d)
	}
	if res := click(ActionDeny, card.ID, "UADMIN"); res.Private == "" || !strings.Contains(res.Private, "already decided") {
		t.Errorf("click on a decided card: %+v", res)
	}
	// The runner's event does not edit the card a second time.
	observe(r, agent.Event{Session: "test/1", Kind: agent.ApprovalDecided, Approval: &a, Decision: &agent.Decision{Allow: true, Always: true}})
	settle(t, r, "test/1")
	if got := r.out.board("test/1", nil).want.State; got != StateWorking {
		t.Errorf("plan state %q after the decision, want working", got)
	}
}

func TestApprovalTimeoutEditsCard(t *testing.T) {
	r, p, _ := cardRig(t)
	a := agent.Approval{CallID: "call_9", Tool: "fs__write_file", Requester: "UANN"}
	observe(r, agent.Event{Session: "test/1", Kind: agent.ApprovalNeeded, Approval: &a})
	observe(r, agent.Event{Session: "test/1", Kind: agent.ApprovalDecided, Approval: &a, Decision: &agent.Decision{Reason: agent.ReasonTimeout, At: time.Now()}})
	settle(t, r, "test/1")
	if got := p.card("card1"); got.Open() || !strings.Contains(got.Outcome, "no decision in time") {
		t.Errorf("card after the deadline: %+v", got)
	}
}

func TestStopButtonAndActivity(t *testing.T) {
	r, p, run := cardRig(t)
	observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.InProgress)})
	observe(r, agent.Event{Session: "test/1", Kind: agent.ToolStarted, Tool: "fs__read_text_file"})
	settle(t, r, "test/1")
	shown := p.plan("m1")
	if !shown.Stoppable || shown.Activity != "running fs__read_text_file" || !strings.Contains(shown.Footer(), "running fs__read_text_file") {
		t.Errorf("plan while a tool runs: %+v (%s)", shown, shown.Footer())
	}
	observe(r, agent.Event{Session: "test/1", Kind: agent.ToolEnded, Tool: "fs__read_text_file"})
	settle(t, r, "test/1")
	if got := p.plan("m1"); got.Activity != "" {
		t.Errorf("activity %q after the tool returned", got.Activity)
	}
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	if res := r.Click(context.Background(), Click{Thread: th, Button: ButtonID(ActionStop, "test/1"), UserID: "UEVE", UserName: "eve"}); res.Private == "" {
		t.Errorf("Stop by someone else: %+v", res)
	}
	res := r.Click(context.Background(), Click{Thread: th, Button: ButtonID(ActionStop, "test/1"), UserID: "UADMIN", UserName: "admin"})
	if res.Plan == nil || res.Plan.Stoppable || len(run.stops) != 1 || run.stops[0] != "admin" {
		t.Errorf("Stop by an approver: %+v, stops %v", res, run.stops)
	}
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Stopped, StoppedBy: "admin"})
	settle(t, r, "test/1")
	got := p.plan("m1")
	if got.Stoppable || !strings.Contains(got.Footer(), "stopped by admin") {
		t.Errorf("after stop: stoppable %t footer %q", got.Stoppable, got.Footer())
	}
}

func TestButtonIDs(t *testing.T) {
	for _, tt := range []struct {
		in     string
		action string
		ok     bool
	}{
		{ButtonID(ActionAllow, "abc"), ActionAllow, true},
		{ButtonID(ActionStop, "discord/1"), ActionStop, true},
		{"pinplan:explode:abc", "", false},
		{"pinplan:allow:", "", false},
		{"other", "", false},
	} {
		action, _, ok := ParseButtonID(tt.in)
		if action != tt.action || ok != tt.ok {
			t.Errorf("ParseButtonID(%q) = %q, %t; want %q, %t", tt.in, action, ok, tt.action, tt.ok)
		}
	}
	if n := len(ButtonID(ActionAlways, cardID("discord/123456789012345678", agent.Approval{CallID: "call_abcdefghijklmnopqrstuvwxyz0123456789", Turn: 1 << 40}))); n > 100 {
		t.Errorf("button id of %d characters, Discord allows 100", n)
	}
}

func TestResetTakesThePlanDown(t *testing.T) {
	r, p, _ := cardRig(t)
	observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.InProgress)})
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done})
	settle(t, r, "test/1")
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	if err := r.Handle(context.Background(), Incoming{Thread: th, Text: "reset", Author: "ann", AuthorID: "UANN"}); !errors.Is(err, ErrRejected) {
		t.Fatalf("reset: %v, want it answered in the thread", err)
	}
	settle(t, r, "test/1")
	if p.count("unpin") != 1 {
		t.Errorf("calls %+v, want the plan message unpinned", p.calls)
	}
	if _, ref := r.out.board("test/1", nil).Shown(); !ref.IsZero() {
		t.Errorf("board still points at %s after reset", ref.ID)
	}
	// The next plan gets a new message.
	observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.Pending)})
	settle(t, r, "test/1")
	if p.count("post") != 2 {
		t.Errorf("%d plan posts, want a new message after reset", p.count("post"))
	}
}

func TestReusedCallIDsGetTheirOwnCards(t *testing.T) {
	r, p, _ := cardRig(t)
	for turn := int64(1); turn <= 2; turn++ {
		a := agent.Approval{CallID: "call_0", Tool: "fs__write_file", Requester: "UANN", Turn: turn}
		observe(r, agent.Event{Session: "test/1", Kind: agent.ApprovalNeeded, Approval: &a})
		observe(r, agent.Event{Session: "test/1", Kind: agent.ApprovalDecided, Approval: &a, Decision: &agent.Decision{Allow: true, ByName: "ann", At: time.Now()}})
	}
	settle(t, r, "test/1")
	if p.posts != 2 {
		t.Errorf("%d cards for two turns that reused call_0, want 2", p.posts)
	}
}

// refusingCards cannot post cards: the channel refuses them for good.
type refusingCards struct{ cardPlatform }

func (p *refusingCards) Caps() Caps { return testCaps(p) }

func (*refusingCards) PostCard(context.Context, Thread, Card) (MessageRef, error) {
	return MessageRef{}, fmt.Errorf("slack: post approval card: channel_not_found: %w", ErrUndeliverable)
}

func TestUnpostableCardIsSaidInWords(t *testing.T) {
	p := &refusingCards{}
	r := NewRouter(Options{Runner: &decider{}, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond})
	t.Cleanup(r.Close)
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	a := agent.Approval{CallID: "c1", Tool: "fs__write_file", Requester: "UANN", Deadline: time.Now().Add(time.Hour)}
	observe(r, agent.Event{Session: "test/1", Kind: agent.ApprovalNeeded, Approval: &a})
	settle(t, r, "test/1")
	var said []string
	for _, c := range p.calls {
		if c.Op == "reply" {
			said = append(said, c.Text)
		}
	}
	if len(said) != 1 || !strings.Contains(said[0], "fs__write_file") || !strings.Contains(said[0], "stop") {
		t.Errorf("replies %q, want one saying the card could not be posted and how to stop", said)
	}
}

// landingCards posts every card, but the first attempt's answer is lost
// (a timeout after Slack took it); it records what each attempt was told.
type landingCards struct {
	cardPlatform
	keys  []string
	maybe []bool
}

func (p *landingCards) Caps() Caps { return testCaps(p) }

func (l *landingCards) PostCard(ctx context.Context, th Thread, card Card) (MessageRef, error) {
	_, maybe := SentMaybe(ctx)
	l.cmu.Lock()
	l.keys, l.maybe = append(l.keys, SendKey(ctx)), append(l.maybe, maybe)
	first := len(l.keys) == 1
	l.cmu.Unlock()
	ref, _ := l.cardPlatform.PostCard(ctx, th, card)
	if first {
		return MessageRef{}, context.DeadlineExceeded
	}
	return ref, nil
}

// TestCardPostInDoubtIsLookedFor: a card's post whose answer was lost may
// have landed; the next attempt carries the same key and says so, and so
// does the next process's, for a card recorded but never known posted
// (the replica killed between Slack's answer and the card's ref stored).
func TestCardPostInDoubtIsLookedFor(t *testing.T) {
	p := &landingCards{}
	store, cards := &chattest.Boards{}, &chattest.Cards{}
	r := NewRouter(Options{Runner: &decider{}, Store: store, Cards: cards, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond})
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	a := agent.Approval{CallID: "c1", Tool: "fs__write_file", Requester: "UANN", Deadline: time.Now().Add(time.Hour)}
	observe(r, agent.Event{Session: "test/1", Kind: agent.ApprovalNeeded, Approval: &a})
	waitFor(t, "the post's second attempt, after its backoff", func() bool {
		p.cmu.Lock()
		defer p.cmu.Unlock()
		return len(p.keys) >= 2
	})
	settle(t, r, "test/1")
	r.Close()
	if len(p.keys) != 2 || p.keys[0] == "" || p.keys[1] != p.keys[0] {
		t.Fatalf("send keys %q, want one key on both attempts", p.keys)
	}
	if p.maybe[0] || !p.maybe[1] {
		t.Errorf("SentMaybe per attempt %v, want [false true]", p.maybe)
	}

	// The next process finds the card recorded without its ref.
	raw, err := cards.Cards(context.Background(), "test/1")
	if err != nil {
		t.Fatal(err)
	}
	var rec cardsRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	for id, cr := range rec.Cards {
		cr.Ref = MessageRef{}
		rec.Cards[id] = cr
	}
	raw, _ = json.Marshal(rec)
	if err := cards.SaveCards(context.Background(), "test/1", raw); err != nil {
		t.Fatal(err)
	}
	p2 := &landingCards{}
	r2 := NewRouter(Options{Runner: &decider{}, Store: store, Cards: cards, Platforms: map[string]Platform{"test": p2}, RetryDelay: time.Millisecond})
	t.Cleanup(r2.Close)
	r2.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r2, agent.Event{Session: "test/1", Kind: agent.ApprovalNeeded, Approval: &a})
	settle(t, r2, "test/1")
	if len(p2.keys) == 0 || p2.keys[0] != p.keys[0] || !p2.maybe[0] {
		t.Errorf("after a restart: keys %q, SentMaybe %v; want %q and true from the first attempt", p2.keys, p2.maybe, p.keys[0])
	}
}

// laneCards is cardPlatform whose cards count among the requests in
// flight, and which records the order of its posts.
type laneCards struct {
	cardPlatform
	omu   sync.Mutex
	order []string
}

func (p *laneCards) Caps() Caps { return testCaps(p) }

func (p *laneCards) note(op string) {
	p.omu.Lock()
	defer p.omu.Unlock()
	p.order = append(p.order, op)
}

func (p *laneCards) PostPlan(ctx context.Context, th Thread, pl Plan) (MessageRef, error) {
	p.note("plan")
	return p.cardPlatform.PostPlan(ctx, th, pl)
}

func (p *laneCards) Reply(ctx context.Context, th Thread, replyTo, text string) error {
	p.note("reply")
	return p.cardPlatform.Reply(ctx, th, replyTo, text)
}

func (p *laneCards) PostCard(ctx context.Context, th Thread, card Card) (MessageRef, error) {
	p.enter("card")
	defer p.leave()
	p.note("card")
	return p.cardPlatform.PostCard(ctx, th, card)
}

func (p *laneCards) EditCard(ctx context.Context, th Thread, ref MessageRef, card Card) error {
	p.enter("card edit")
	defer p.leave()
	p.note("card edit")
	return p.cardPlatform.EditCard(ctx, th, ref, card)
}

// TestCardsOnTheSessionsLane: a session's approval cards go on its one
// lane with its plan and its answer (DESIGN §1): one request in flight
// for the session at a time, the plan's post before the card that came
// after it, the card's decision before the turn's answer.
func TestCardsOnTheSessionsLane(t *testing.T) {
	p := &laneCards{}
	p.hold = func(string) { time.Sleep(20 * time.Millisecond) } // each request takes a while
	logs := &chattest.Log{}
	r := NewRouter(Options{Runner: &decider{}, Store: &chattest.Boards{}, Log: logs, Outbox: &chattest.Outbox{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	r.out.board(th.Key, &th)
	a := agent.Approval{CallID: "call_1", Tool: "fs__write_file", Server: "fs", Arguments: "{}", Requester: "UANN", Deadline: time.Now().Add(time.Hour)}
	for _, e := range []agent.Event{
		{Kind: agent.TurnStarted, Turn: 1},
		{Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.InProgress)},
		{Kind: agent.ApprovalNeeded, Turn: 1, Approval: &a},
		{Kind: agent.ApprovalDecided, Turn: 1, Approval: &a, Decision: &agent.Decision{Allow: true, By: "UANN"}},
		{Kind: agent.PlanChanged, Revision: 2, Plan: plan(2, todo.Completed)},
		{Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done, Text: "the answer"},
	} {
		observe(r, logs.Append(th.Key, e))
	}
	settle(t, r, th.Key)
	waitFor(t, "the answer", func() bool { return p.count("reply") == 1 })
	p.mu.Lock()
	maxIn := p.maxIn
	p.mu.Unlock()
	if maxIn != 1 {
		t.Errorf("%d of the session's requests in flight at once, want 1", maxIn)
	}
	p.omu.Lock()
	order := slices.Clone(p.order)
	p.omu.Unlock()
	if want := []string{"plan", "card", "card edit", "reply"}; !slices.Equal(order, want) {
		t.Errorf("posts and card edits %q, want %q", order, want)
	}
	if got := p.card("card1"); got.Open() {
		t.Errorf("card %+v still open after its decision", got)
	}
}
