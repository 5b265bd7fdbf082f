package slack

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/todo"
)

// TestRetryAfterHoldsTheMethod: Slack's Retry-After is for the method in
// the workspace, not for the one message: after chat.update is refused
// with 429 for one thread's plan, an edit of another thread's plan (or a
// card) waits it out instead of being refused again. Found by the soak
// (cmd/soak): "chat.update before Retry-After ended".
func TestRetryAfterHoldsTheMethod(t *testing.T) {
	a, fake := testAdapter(t, false)
	ctx := context.Background()
	p := chat.Plan{Revision: 1, Updated: time.Now(), Items: []todo.Item{{Content: "a", Status: todo.Pending}}}
	var refs []chat.MessageRef
	var threads []chat.Thread
	for _, ch := range []string{"C1", "C2"} {
		th := chat.Thread{Platform: "slack", Key: "slack/T1/" + ch + "/1.1", Channel: ch, ThreadID: "1.1"}
		ref, err := a.PostPlan(ctx, th, p)
		if err != nil {
			t.Fatal(err)
		}
		threads, refs = append(threads, th), append(refs, ref)
	}
	fake.Limit("chat.update", 1, 2*time.Second)
	if err := a.EditPlan(ctx, threads[0], refs[0], p); err != nil {
		t.Fatal(err)
	}
	err := a.EditPlan(ctx, threads[0], refs[0], p)
	var rl *chat.RateLimitError
	if !errors.As(err, &rl) {
		t.Fatalf("second edit within the window: %v, want a rate limit", err)
	}
	start := time.Now()
	if err := a.EditPlan(ctx, threads[1], refs[1], p); err != nil {
		t.Fatalf("the other thread's edit after the 429: %v, want it to wait and land", err)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("the other thread's edit waited %s; Retry-After was %s", waited, rl.RetryAfter)
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("violations: %v", v)
	}
}

// TestPostRetryAfterHoldsTheChannel: Slack limits chat.postMessage per
// channel, so a 429 for one channel's post holds that channel's posts
// only: another channel's reply goes at once, the same channel's waits
// out the Retry-After.
func TestPostRetryAfterHoldsTheChannel(t *testing.T) {
	a, fake := testAdapter(t, false)
	ctx := context.Background()
	th := func(ch string) chat.Thread {
		return chat.Thread{Platform: "slack", Key: "slack/T1/" + ch + "/1.1", Channel: ch, ThreadID: "1.1"}
	}
	fake.LimitPerChannel("chat.postMessage", 1, 2*time.Second)
	if err := a.Reply(ctx, th("C1"), "", "first"); err != nil {
		t.Fatal(err)
	}
	var rl *chat.RateLimitError
	if err := a.Reply(ctx, th("C1"), "", "second"); !errors.As(err, &rl) {
		t.Fatalf("second post in C1 within the window: %v, want a rate limit", err)
	}
	start := time.Now()
	if err := a.Reply(ctx, th("C2"), "", "elsewhere"); err != nil {
		t.Fatalf("a post in C2 after C1's 429: %v", err)
	}
	if waited := time.Since(start); waited >= rl.RetryAfter/2 {
		t.Errorf("a post in C2 waited %s behind C1's Retry-After of %s", waited, rl.RetryAfter)
	}
	start = time.Now()
	if err := a.Reply(ctx, th("C1"), "", "third"); err != nil {
		t.Fatalf("C1's post after its Retry-After: %v", err)
	}
	if waited := time.Since(start); waited < rl.RetryAfter/2 {
		t.Errorf("C1's next post waited only %s; Retry-After was %s", waited, rl.RetryAfter)
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("violations: %v", v)
	}
}

// roundTripFunc is an http.RoundTripper of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestRetryAfterLengthenedWhileWaiting: a call waiting out a Retry-After
// whose end another 429 moved later meanwhile waits for the new end, not
// the one it read first. Found by the soak: a chat.update sent 24 µs
// before a lengthened Retry-After ended.
func TestRetryAfterLengthenedWhileWaiting(t *testing.T) {
	sent := make(chan time.Time, 1)
	ht := &heldTransport{now: time.Now, until: map[string]time.Time{}, base: roundTripFunc(func(*http.Request) (*http.Response, error) {
		sent <- time.Now()
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	})}
	req, err := http.NewRequest(http.MethodPost, "https://slack.com/api/chat.update", nil)
	if err != nil {
		t.Fatal(err)
	}
	key := budgetKey(req)
	ht.mu.Lock()
	ht.until[key] = time.Now().Add(50 * time.Millisecond)
	ht.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := ht.RoundTrip(req)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // the call waits for the first end
	later := time.Now().Add(300 * time.Millisecond)
	ht.mu.Lock()
	ht.until[key] = later // another call's 429
	ht.mu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if at := <-sent; at.Before(later) {
		t.Errorf("sent %s before the lengthened Retry-After ended", later.Sub(at))
	}
}
