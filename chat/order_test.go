package chat

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat/chattest"
)

// pacedPlatform is fakePlatform with budgets: one edit budget for every
// thread and a budget of posts per channel, as Slack counts them.
type pacedPlatform struct {
	*fakePlatform
	edit  *Budget
	posts *Budget
	asked []Request
}

func (p *pacedPlatform) Pace(ctx context.Context, req Request) error {
	p.mu.Lock()
	p.asked = append(p.asked, req)
	p.mu.Unlock()
	switch req.Method {
	case MethodEdit:
		return p.edit.Wait(ctx, req.Priority, req.Since)
	case MethodPost:
		return p.posts.Wait(ctx, req.Priority, req.Since)
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
	r.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	r.Observe(chattest.Revision("test/1", 1))
	r.Observe(agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Text: "the answer"})
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
		r.board(key(i), &Thread{Platform: "test", Key: key(i), Channel: "C1"})
		r.Observe(chattest.Revision(key(i), 1))
	}
	for i := range n {
		settle(t, r, key(i)) // every plan posted
	}
	// Spend the edit budget, so that what follows queues.
	p.edit.Wait(context.Background(), nil, time.Time{})
	// Threads 0-2 move on (intermediate revisions), then 3-5 end.
	for i := range 3 {
		r.Observe(chattest.Revision(key(i), 2))
	}
	waitUntil(t, func() bool { return p.edit.Waiting() == 3 })
	for i := 3; i < n; i++ {
		r.Observe(agent.Event{Session: key(i), Kind: agent.TurnEnded, Outcome: agent.Done})
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
