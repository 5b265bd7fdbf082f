package slack

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/pinplan/pinplan/chat"
)

// TestShareDividesTheWorkspacePace: three replicas each take a third of
// every budget of the workspace, so together they keep to it.
func TestShareDividesTheWorkspacePace(t *testing.T) {
	a := New(Options{EditsPerMinute: 45, AppendsPerMinute: 90})
	post := a.one.budgets.of(chat.Request{Method: chat.MethodPost, Thread: chat.Thread{Channel: "C1"}})
	a.Share(3)
	later := a.one.budgets.of(chat.Request{Method: chat.MethodPost, Thread: chat.Thread{Channel: "C2"}})
	for name, c := range map[string]struct {
		got, want float64
	}{
		"edit":           {a.one.budgets.edit.PerMinute(), 45.0 / 3},
		"pin":            {a.one.budgets.pin.PerMinute(), pinsPerMinute / 3.0},
		"unpin":          {a.one.budgets.unpin.PerMinute(), pinsPerMinute / 3.0},
		"react":          {a.one.budgets.react.PerMinute(), reactsPerMinute / 3.0},
		"unreact":        {a.one.budgets.unreact.PerMinute(), unreactsPerMinute / 3.0},
		"post (earlier)": {post.PerMinute(), postsPerMinute / 3.0},
		"post (later)":   {later.PerMinute(), postsPerMinute / 3.0},
		"append":         {a.one.budgets.appends.PerMinute(), 90.0 / 3},
	} {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s pace = %v a minute, want %v", name, c.got, c.want)
		}
	}
	if got := a.one.budgets.of(chat.Request{Method: chat.MethodAppend}); got != a.one.budgets.appends {
		t.Error("chat.appendStream is not paced by the workspace's append budget")
	}
	a.Share(1)
	if got := a.one.budgets.edit.PerMinute(); math.Abs(got-45) > 1e-9 {
		t.Errorf("back to one replica: edit pace = %v a minute, want the whole budget", got)
	}
	if got := a.one.budgets.appends.PerMinute(); math.Abs(got-90) > 1e-9 {
		t.Errorf("back to one replica: append pace = %v a minute, want the whole budget", got)
	}
}

// TestPostsDoNotWaitBehindEdits: Slack counts chat.postMessage apart from
// chat.update, so with the edit budget spent a plan's first post in
// another thread goes at once.
func TestPostsDoNotWaitBehindEdits(t *testing.T) {
	a := New(Options{EditsPerMinute: 1})
	ctx := context.Background()
	edit := chat.Request{Method: chat.MethodEdit, Thread: chat.Thread{Channel: "C1"}}
	for range editBurst {
		if err := chat.Pace(ctx, a, edit); err != nil {
			t.Fatal(err)
		}
	}
	// The edit budget is spent for a minute now.
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := chat.Pace(tctx, a, edit); err == nil {
		t.Fatal("an edit went with the budget spent")
	}
	tctx2, cancel2 := context.WithTimeout(ctx, 5*time.Second)
	defer cancel2()
	first := func() chat.Priority { return chat.PriorityFirstPost }
	if err := chat.Pace(tctx2, a, chat.Request{Method: chat.MethodPost, Thread: chat.Thread{Channel: "C2"}, Priority: first}); err != nil {
		t.Errorf("a first post waited behind the edits: %v", err)
	}
	if err := chat.Pace(tctx2, a, chat.Request{Method: chat.MethodPin, Thread: chat.Thread{Channel: "C2"}, Priority: first}); err != nil {
		t.Errorf("a pin waited behind the edits: %v", err)
	}
}

// TestUnpinsHaveTheirOwnBudget: Slack counts pins.remove apart from
// pins.add, so with the pin budget spent an unpin still goes at once.
func TestUnpinsHaveTheirOwnBudget(t *testing.T) {
	a := New(Options{})
	ctx := context.Background()
	th := chat.Thread{Channel: "C1"}
	for range pinBurst {
		if err := chat.Pace(ctx, a, chat.Request{Method: chat.MethodPin, Thread: th}); err != nil {
			t.Fatal(err)
		}
	}
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := chat.Pace(tctx, a, chat.Request{Method: chat.MethodPin, Thread: th}); err == nil {
		t.Fatal("a pin went with the pin budget spent")
	}
	tctx2, cancel2 := context.WithTimeout(ctx, 5*time.Second)
	defer cancel2()
	if err := chat.Pace(tctx2, a, chat.Request{Method: chat.MethodUnpin, Thread: th}); err != nil {
		t.Errorf("an unpin waited behind the pins: %v", err)
	}
}

// TestReactionsHaveTheirOwnBudgets: Slack counts reactions.add (Tier 3)
// and reactions.remove (Tier 2) each on its own, so the working indicator
// keeps to both, and neither waits behind the other or behind the edits.
func TestReactionsHaveTheirOwnBudgets(t *testing.T) {
	a := New(Options{EditsPerMinute: 1})
	ctx := context.Background()
	th := chat.Thread{Channel: "C1"}
	for _, c := range []struct {
		method chat.Method
		burst  int
	}{{chat.MethodEdit, editBurst}, {chat.MethodReaction, reactBurst}, {chat.MethodUnreaction, unreactBurst}} {
		for range c.burst {
			tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := chat.Pace(tctx, a, chat.Request{Method: c.method, Thread: th})
			cancel()
			if err != nil {
				t.Fatalf("%s within its burst, with the budgets before it spent: %v", c.method, err)
			}
		}
		tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := chat.Pace(tctx, a, chat.Request{Method: c.method, Thread: th})
		cancel()
		if err == nil {
			t.Errorf("%s went past its burst at once", c.method)
		}
	}
}
