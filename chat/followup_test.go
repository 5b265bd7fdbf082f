package chat

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinplan/pinplan/chat/chattest"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// followUpRig is a router whose runner records what reaches the agent.
func followUpRig(t *testing.T) (*Router, *subRunner, *fakePlatform, *fakeClock) {
	t.Helper()
	p := &fakePlatform{}
	run := &subRunner{}
	clock := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	r := NewRouter(Options{Runner: run, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, Now: clock.Now})
	t.Cleanup(r.Close)
	return r, run, p, clock
}

func (s *subRunner) texts() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, in := range s.got {
		out = append(out, in.Text)
	}
	return strings.Join(out, "|")
}

func testThread(id string) Thread {
	return Thread{Platform: "test", Key: "test/C1/" + id, Channel: "C1", ThreadID: id}
}

// TestFollowUpsWaitForTheirSession: follow-ups handled before the first
// message of their thread's session (another replica's, or events out of
// order) wait for it, and reach the agent after it in the order they were
// sent, not the order they arrived. One sent before the session's first
// message was not for pinplan: it is dropped. Nothing is said meanwhile.
func TestFollowUpsWaitForTheirSession(t *testing.T) {
	r, run, p, _ := followUpRig(t)
	ctx := context.Background()
	th := testThread("100.000100")
	for _, f := range []struct{ id, text string }{
		{"100.000300", "second follow-up"},
		{"100.000050", "chatter before the mention"},
		{"100.000200", "first follow-up"},
	} {
		in := Incoming{Thread: th, Text: f.text, AuthorID: "U1", MessageID: f.id, Event: "ev/" + f.id, FollowUp: true}
		if err := r.Handle(ctx, in); err != nil {
			t.Fatalf("Handle(%q) = %v, want it held", f.text, err)
		}
	}
	if got := run.texts(); got != "" {
		t.Fatalf("reached the agent before their session existed: %q", got)
	}
	if r.Known(th.Key) {
		t.Fatal("a held follow-up made a session")
	}
	if err := r.Handle(ctx, Incoming{Thread: th, Text: "the task", AuthorID: "U1", MessageID: "100.000100", Event: "ev/m"}); err != nil {
		t.Fatal(err)
	}
	if got, want := run.texts(), "the task|first follow-up|second follow-up"; got != want {
		t.Errorf("reached the agent: %q, want %q", got, want)
	}
	// A later follow-up goes straight to the session.
	if err := r.Handle(ctx, Incoming{Thread: th, Text: "third follow-up", MessageID: "100.000400", FollowUp: true}); err != nil {
		t.Fatal(err)
	}
	if got, want := run.texts(), "the task|first follow-up|second follow-up|third follow-up"; got != want {
		t.Errorf("reached the agent: %q, want %q", got, want)
	}
	if n := p.count("reply"); n != 0 {
		t.Errorf("%d replies in the thread, want none", n)
	}
}

// TestFollowUpExpires: a follow-up waits FollowUpWait for its session and
// no longer: a thread mentioned only later does not take it, and a thread
// never mentioned hears nothing.
func TestFollowUpExpires(t *testing.T) {
	r, run, p, clock := followUpRig(t)
	ctx := context.Background()
	th, stray := testThread("200.000100"), testThread("300.000100")
	if err := r.Handle(ctx, Incoming{Thread: stray, Text: "people talking", MessageID: "300.000200", FollowUp: true}); err != nil {
		t.Fatal(err)
	}
	if err := r.Handle(ctx, Incoming{Thread: th, Text: "too early", MessageID: "200.000200", FollowUp: true}); err != nil {
		t.Fatal(err)
	}
	clock.Add(FollowUpWait - time.Second)
	if err := r.Handle(ctx, Incoming{Thread: th, Text: "in time", MessageID: "200.000300", FollowUp: true}); err != nil {
		t.Fatal(err)
	}
	clock.Add(2 * time.Second) // "too early" has waited a minute and a second, "in time" two seconds
	if err := r.Handle(ctx, Incoming{Thread: th, Text: "the task", MessageID: "200.000100"}); err != nil {
		t.Fatal(err)
	}
	if got, want := run.texts(), "the task|in time"; got != want {
		t.Errorf("reached the agent: %q, want %q", got, want)
	}
	if r.Known(stray.Key) {
		t.Error("a thread never mentioned has a session")
	}
	if n := p.count("reply"); n != 0 {
		t.Errorf("%d replies, want none", n)
	}
}

// TestFollowUpWaitIsAnOption: Options.FollowUpWait shortens the wait.
func TestFollowUpWaitIsAnOption(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	run := &subRunner{}
	r := NewRouter(Options{Runner: run, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": &fakePlatform{}}, Now: clock.Now, FollowUpWait: time.Second})
	t.Cleanup(r.Close)
	ctx := context.Background()
	th := testThread("400.000100")
	r.Handle(ctx, Incoming{Thread: th, Text: "late", MessageID: "400.000200", FollowUp: true})
	clock.Add(2 * time.Second)
	r.Handle(ctx, Incoming{Thread: th, Text: "the task", MessageID: "400.000100"})
	if got := run.texts(); got != "the task" {
		t.Errorf("reached the agent: %q, want only the task", got)
	}
}
