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

// pacedPlatform is fakePlatform with budgets: one edit budget for every
// thread and a budget of posts per channel, as Slack counts them.
type pacedPlatform struct {
	*fakePlatform
	edit  *Budget
	posts *Budget
	pins  *Budget // nil: pins are not paced
	asked []Request
}

func (p *pacedPlatform) Caps() Caps { return testCaps(p) }

func (p *pacedPlatform) Budget(req Request) *Budget {
	p.mu.Lock()
	p.asked = append(p.asked, req)
	p.mu.Unlock()
	switch req.Method {
	case MethodEdit:
		return p.edit
	case MethodPost:
		return p.posts
	case MethodPin, MethodUnpin:
		return p.pins
	}
	return nil
}

// TestReplyWaitsForItsPlanPost: with the plan's first post held up, the
// turn's answer waits for it: the plan message is above its answer in
// the thread (DESIGN §6), never below.
func TestReplyWaitsForItsPlanPost(t *testing.T) {
	release := make(chan struct{})
	p := &fakePlatform{hold: func(op string) {
		if op == "post" {
			<-release
		}
	}}
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: &chattest.Outbox{}})
	t.Cleanup(r.Close)
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, chattest.Revision("test/1", 1))
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Text: "the answer"})
	time.Sleep(200 * time.Millisecond) // time enough for an answer that does not wait
	p.mu.Lock()
	early := fmt.Sprint(p.calls)
	p.mu.Unlock()
	close(release)
	settle(t, r, "test/1")
	var ops []string
	for _, c := range p.calls {
		if c.Op == "post" || c.Op == "reply" {
			ops = append(ops, c.Op)
		}
	}
	if strings.Contains(early, "reply") {
		t.Errorf("before the plan's post: %s; want no answer yet", early)
	}
	if len(ops) != 2 || ops[0] != "post" || ops[1] != "reply" {
		t.Errorf("calls %v; want the plan's post first and the answer last", ops)
	}
}

// TestFinalStatesGoBeforeRevisions: with the edit budget short, boards
// whose run ended get their final edit before boards still working get
// their intermediate one, whichever asked first.
func TestFinalStatesGoBeforeRevisions(t *testing.T) {
	p := &pacedPlatform{fakePlatform: &fakePlatform{}, edit: NewBudget(600, 1), posts: NewBudget(60000, 100)}
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: &chattest.Outbox{}})
	t.Cleanup(r.Close)
	const n = 6
	key := func(i int) string { return fmt.Sprintf("test/%d", i) }
	for i := range n {
		r.out.board(key(i), &Thread{Platform: "test", Key: key(i), Channel: "C1"})
		observe(r, chattest.Revision(key(i), 1))
	}
	for i := range n {
		settle(t, r, key(i)) // every plan posted
	}
	// Spend the edit budget, so that what follows queues.
	p.edit.Wait(context.Background(), nil, time.Time{})
	// Threads 0-2 move on (intermediate revisions), then 3-5 end.
	for i := range 3 {
		observe(r, chattest.Revision(key(i), 2))
	}
	waitUntil(t, func() bool { return p.edit.Waiting() == 3 })
	for i := 3; i < n; i++ {
		observe(r, agent.Event{Session: key(i), Kind: agent.TurnEnded, Outcome: agent.Done})
	}
	for i := range n {
		settle(t, r, key(i))
	}
	var order []string
	for _, c := range p.calls {
		if c.Op == "edit" {
			order = append(order, c.Ref+":"+c.Text)
		}
	}
	// The first edit may have had its slot before the others queued.
	done := 0
	for i, o := range order {
		if o[len(o)-len("done"):] == "done" {
			done++
			continue
		}
		if done < 3 && i > 0 {
			t.Fatalf("edits went %v: an intermediate revision before the final states", order)
		}
	}
	if done != 3 {
		t.Errorf("edits %v: want three final states", order)
	}
}

// pinHeldPlatform is fakePlatform whose pins wait for a budget the test
// opens (gate), as when Slack's Tier 2 pins are short and other threads'
// pins are ahead; posts and edits have room.
type pinHeldPlatform struct {
	*fakePlatform
	gate *Budget // newGate
}

func (p *pinHeldPlatform) Caps() Caps { return testCaps(p) }

func (p *pinHeldPlatform) Budget(req Request) *Budget {
	if req.Method != MethodPin {
		return nil
	}
	return p.gate
}

// TestFinalEditNotHeldBehindPin: a plan whose content moves on while its
// pin waits for the pin budget, or moved on while it was posted, gets its
// edit first and its pin after (DESIGN §6: the final state as soon as
// the edit budget allows), and is pinned all the same.
func TestFinalEditNotHeldBehindPin(t *testing.T) {
	tests := []struct {
		name string
		// moveOn changes the plan after its first post was asked for:
		// posted is closed once the post is under way, release lets it
		// answer.
		moveOn func(r *Router, p *pinHeldPlatform, posted <-chan struct{}, release chan<- struct{})
		want   []string // the plan message's requests, in order
	}{
		{
			name: "the turn ends while the pin waits",
			moveOn: func(r *Router, p *pinHeldPlatform, posted <-chan struct{}, release chan<- struct{}) {
				close(release)
				waitUntil(t, func() bool { return p.gate.Waiting() == 1 })
				observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done})
			},
			want: []string{"post:1:working", "edit:1:done", "pin"},
		},
		{
			name: "the plan moved on during the post",
			moveOn: func(r *Router, p *pinHeldPlatform, posted <-chan struct{}, release chan<- struct{}) {
				<-posted
				observe(r, chattest.Revision("test/1", 2))
				close(release)
			},
			want: []string{"post:1:working", "edit:2:working", "pin"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			posted, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			p := &pinHeldPlatform{gate: newGate(), fakePlatform: &fakePlatform{hold: func(op string) {
				if op == "post" {
					once.Do(func() { close(posted) })
					<-release
				}
			}}}
			r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: &chattest.Outbox{}})
			t.Cleanup(r.Close)
			r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
			observe(r, chattest.Revision("test/1", 1))
			tt.moveOn(r, p, posted, release)
			// The edit lands while the pin budget is still shut.
			deadline := time.Now().Add(10 * time.Second)
			for p.count("edit") == 0 {
				if time.Now().After(deadline) {
					p.mu.Lock()
					t.Fatalf("no edit while the pin waits; calls %v", p.calls)
				}
				time.Sleep(5 * time.Millisecond)
			}
			openGate(p.gate)
			settle(t, r, "test/1")
			var got []string
			p.mu.Lock()
			for _, c := range p.calls {
				switch c.Op {
				case "post", "edit":
					got = append(got, fmt.Sprintf("%s:%d:%s", c.Op, c.Rev, c.Text))
				case "pin", "unpin":
					got = append(got, c.Op)
				}
			}
			p.mu.Unlock()
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("plan requests %v, want %v", got, tt.want)
			}
			if _, ref := r.out.board("test/1", nil).Shown(); ref.IsZero() {
				t.Error("no plan message recorded")
			}
		})
	}
}

// TestPostAfterAWaitShowsTheNewest: a first post that waited for its
// budget shows the plan as it is when the slot comes, not as it was when
// the wait began; no edit follows for the revisions in between.
func TestPostAfterAWaitShowsTheNewest(t *testing.T) {
	p := &pacedPlatform{fakePlatform: &fakePlatform{}, edit: NewBudget(60000, 100), posts: NewBudget(60, 1)}
	p.posts.Wait(context.Background(), nil, time.Time{}) // spent: the next post waits about a second
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: &chattest.Outbox{}})
	t.Cleanup(r.Close)
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, chattest.Revision("test/1", 1))
	waitUntil(t, func() bool { return p.posts.Waiting() == 1 })
	observe(r, chattest.Revision("test/1", 2))
	observe(r, chattest.Revision("test/1", 3))
	settle(t, r, "test/1")
	var got []string
	for _, c := range p.calls {
		if c.Op == "post" || c.Op == "edit" {
			got = append(got, fmt.Sprintf("%s r%d", c.Op, c.Rev))
		}
	}
	if strings.Join(got, ",") != "post r3" {
		t.Errorf("plan requests %v, want one post of revision 3", got)
	}
}

// TestNewPlanNotHeldBehindUnpin: after a reset, the next task's plan is
// posted, and its answer delivered, while the unpin of the old message
// still waits for the pin budget: tidying up comes last (the soak lost
// answers to this when pins were paced and unpins went first).
func TestNewPlanNotHeldBehindUnpin(t *testing.T) {
	p := &pacedPlatform{fakePlatform: &fakePlatform{}, edit: NewBudget(60000, 100), posts: NewBudget(60000, 100), pins: NewBudget(60000, 100)}
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: &chattest.Outbox{}})
	t.Cleanup(r.Close)
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, chattest.Revision("test/1", 1))
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Text: "first answer"})
	settle(t, r, "test/1")
	p.pins.Hold(time.Hour) // no pin or unpin from here on
	r.out.board("test/1", nil).reset(0)
	observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 1, Plan: items("a new task"), At: time.Now()})
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Text: "second answer"})
	waitUntil(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.calls {
			if c.Op == "reply" && c.Text == "second answer" {
				return true
			}
		}
		return false
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	var ops []string
	for _, c := range p.calls {
		ops = append(ops, c.Op)
	}
	if strings.Count(strings.Join(ops, ","), "post") != 2 || strings.Contains(strings.Join(ops, ","), "unpin") {
		t.Errorf("calls %v; want the new plan posted and answered while the unpin waits", ops)
	}
}

// TestPostInDoubtEditedBeforeItsPin: after a restart, a plan whose post
// was in doubt is posted again and edited to the newest plan while its
// pin still waits for the pin budget (the soak left plans on their first
// revision when the pin went first).
func TestPostInDoubtEditedBeforeItsPin(t *testing.T) {
	boards, logs := &chattest.Boards{}, &chattest.Log{}
	want := Plan{Items: plan(2, todo.Completed).Items(), Revision: 2, State: StateDone}
	began := time.Now().Add(-time.Minute)
	savedBoard(t, boards, logs, boardRecord{Thread: Thread{Platform: "test", Key: "test/1", Channel: "C1"}, Posting: &began}, &want)
	p := &pacedPlatform{fakePlatform: &fakePlatform{}, edit: NewBudget(60000, 100), posts: NewBudget(60000, 100), pins: NewBudget(60000, 100)}
	p.pins.Hold(time.Hour)
	r := NewRouter(Options{Store: boards, Log: logs, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: &chattest.Outbox{}})
	t.Cleanup(r.Close)
	if _, err := r.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.edits > 0
	})
	pins := p.count("pin")
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.shown) != 1 || pins != 0 {
		t.Fatalf("calls %+v; want one post and its edit, the pin still waiting", p.calls)
	}
	for _, got := range p.shown {
		if got.Revision != 2 || got.State != StateDone {
			t.Errorf("the message shows revision %d %s, want 2 done", got.Revision, got.State)
		}
	}
}

// TestAnswerAfterItsFinalState: with the edit budget spent (a card and
// the revisions used it up) and posts free, the turn's answer waits for
// the edit that shows the plan's final state: no one reads the answer
// under a plan that still says working (DESIGN §6). The final edit goes
// first among the edits waiting, and the answer follows it at once.
func TestAnswerAfterItsFinalState(t *testing.T) {
	p := &pacedPlatform{fakePlatform: &fakePlatform{}, edit: NewBudget(120, 1), posts: NewBudget(60000, 100)}
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: &chattest.Outbox{}})
	t.Cleanup(r.Close)
	for _, key := range []string{"test/1", "test/2"} {
		r.out.board(key, &Thread{Platform: "test", Key: key, Channel: "C1"})
		observe(r, chattest.Revision(key, 1))
		settle(t, r, key)
	}
	p.edit.Wait(context.Background(), nil, time.Time{}) // the burst is spent
	observe(r, chattest.Revision("test/2", 2))          // another thread's revision waits first
	waitUntil(t, func() bool { return p.edit.Waiting() == 1 })
	observe(r, chattest.Revision("test/1", 2))
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Text: "the answer"})
	settle(t, r, "test/1")
	settle(t, r, "test/2")

	p.mu.Lock()
	var order []string
	for _, c := range p.calls {
		switch c.Op {
		case "edit", "reply":
			order = append(order, fmt.Sprintf("%s:%s:%d:%s", c.Op, c.Ref, c.Rev, c.Text))
		}
	}
	p.mu.Unlock()
	final := slices.IndexFunc(order, func(o string) bool { return o == "edit:m1:2:done" })
	answer := slices.IndexFunc(order, func(o string) bool { return strings.HasPrefix(o, "reply:") })
	if final < 0 || answer < 0 || answer < final {
		t.Fatalf("calls %v; want the final state's edit before the answer", order)
	}
	if other := slices.IndexFunc(order, func(o string) bool { return o == "edit:m2:2:working" }); other >= 0 && other < final {
		t.Errorf("calls %v; want the final state an answer waits for before another thread's revision", order)
	}
}

// TestAnswerNotHeldByABoardBackingOff: when the platform fails the edit
// of the final state and the board backs off before it tries again, the
// answer waiting for that edit goes on: it is not held for a plan the
// platform will not show soon.
func TestAnswerNotHeldByABoardBackingOff(t *testing.T) {
	p := &fakePlatform{editErr: func(int) error { return errors.New("503 from the platform") }}
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Minute, Outbox: &chattest.Outbox{}})
	t.Cleanup(r.Close)
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, chattest.Revision("test/1", 1))
	waitUntil(t, func() bool { return p.count("post") == 1 })
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Text: "the answer"})
	waitUntil(t, func() bool { return p.count("reply") == 1 })
}
