package slack

import (
	"testing"

	"github.com/pinplan/pinplan/chat"
)

// TestPostBudgetForgotten: a channel's post budget goes with the last
// session of the channel in memory once it is idle, and stays while it
// is not (a new one would not pace the same).
func TestPostBudgetForgotten(t *testing.T) {
	b := newBudgets(50, 90)
	req := chat.Request{Thread: chat.Thread{Channel: "C1"}, Method: chat.MethodPost}
	p := b.of(req)
	if !p.TryNow(0) {
		t.Fatal("a new budget had no slot")
	}
	b.forget("C1")
	if got := b.of(req); got != p {
		t.Fatal("a budget that spent a slot was dropped")
	}
	b.posts["C1"] = chat.NewBudget(postsPerMinute, postBurst) // its burst back
	b.forget("C1")
	if _, ok := b.posts["C1"]; ok {
		t.Error("an idle budget was kept")
	}
}
