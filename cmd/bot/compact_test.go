package main

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/adapters/web"
	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/chat/chattest"
	"github.com/pinplan/pinplan/store"
	"github.com/pinplan/pinplan/todo"
)

// TestRetentionWaitsForDelivery checks store.DeleteIdle against the log
// and cursor the real chat deliverer keeps: a session the agent left idle
// long ago is kept while its log has entries the thread was not shown,
// and deleted once the deliverer has applied them all. What the plan
// message shows is not read.
func TestRetentionWaitsForDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := store.Open(filepath.Join(t.TempDir(), "pinplan.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	console := web.New(web.Options{})
	t.Cleanup(console.Close)
	router := chat.NewRouter(chat.Options{Runner: &chattest.Runner{}, Store: db, Log: db, Cards: db, Listings: db, FollowUps: db, Outbox: db, Platforms: map[string]chat.Platform{"web": console}})
	t.Cleanup(router.Close)

	const key = "web/r1"
	cutoff := time.Now()
	old := cutoff.Add(-30 * 24 * time.Hour)
	th := chat.Thread{Platform: "web", Key: key, Channel: "r1"}
	if err := router.Handle(ctx, chat.Incoming{Thread: th, Text: "plan the release", MessageID: "m1"}); err != nil {
		t.Fatal(err)
	}
	plan := []todo.Item{{Content: "write the notes", Status: todo.Completed}}
	entries := []agent.LogEntry{
		{Seq: 1, Kind: agent.TurnStarted, Turn: 1, At: old},
		{Seq: 2, Kind: agent.PlanChanged, Plan: plan, Revision: 1, At: old},
		{Seq: 3, Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done, Plan: plan, Revision: 1, At: old},
	}
	// The session's record: a turn that ended long ago, its entries
	// committed with it.
	r := &agent.Round{
		Append:     []agent.Entry{{Message: openai.ChatCompletionMessage{Role: "user", Content: "plan the release"}}},
		Log:        entries,
		Checkpoint: agent.Checkpoint{Key: key, State: agent.Idle, HistoryLen: 1, Updated: old, Turns: 1, LogSeq: 3},
	}
	if err := db.Commit(ctx, r); err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= len(entries); i++ {
		if i > 0 {
			router.Observe(entries[i-1].Event(key))
			router.Flush(key)
		}
		got, err := db.DeleteIdle(ctx, cutoff)
		if err != nil {
			t.Fatal(err)
		}
		if deleted, want := slices.Contains(got, key), i == len(entries); deleted != want {
			n, _ := db.Delivered(ctx, key)
			t.Fatalf("after %d of %d entries delivered: deleted %t, want %t (cursor %d)", i, len(entries), deleted, want, n)
		}
	}
}

// forgetfulConsole is the console, noting which threads it is told to
// forget.
type forgetfulConsole struct {
	*web.Console
	forgot []string
}

func (c *forgetfulConsole) Forget(th chat.Thread) {
	c.forgot = append(c.forgot, th.Key)
	c.Console.Forget(th)
}

// Caps declares the console's capabilities with this Forget in its place.
func (c *forgetfulConsole) Caps() chat.Caps {
	caps := c.Console.Caps()
	caps.Forget = c
	return caps
}

// TestRetentionForgetsWhatPlatformsKeep checks housekeeping's retention
// step end to end: a session idle past the retention leaves the store,
// and the platforms are told to forget it, though the router still had
// it in memory (a retention shorter than the ten-minute eviction).
func TestRetentionForgetsWhatPlatformsKeep(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(filepath.Join(t.TempDir(), "pinplan.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	console := &forgetfulConsole{Console: web.New(web.Options{})}
	t.Cleanup(console.Close)
	router := chat.NewRouter(chat.Options{Runner: &chattest.Runner{}, Store: db, Log: db, Cards: db, Listings: db, FollowUps: db, Outbox: db, Platforms: map[string]chat.Platform{"web": console}})
	t.Cleanup(router.Close)

	const key = "web/r2"
	old := time.Now().Add(-2 * time.Hour)
	th := chat.Thread{Platform: "web", Key: key, Channel: "r2"}
	if err := router.Handle(ctx, chat.Incoming{Thread: th, Text: "plan the release", MessageID: "m1"}); err != nil {
		t.Fatal(err)
	}
	if err := db.Commit(ctx, &agent.Round{
		Append:     []agent.Entry{{Message: openai.ChatCompletionMessage{Role: "user", Content: "plan the release"}}},
		Checkpoint: agent.Checkpoint{Key: key, State: agent.Idle, HistoryLen: 1, Updated: old},
	}); err != nil {
		t.Fatal(err)
	}
	router.Observe(agent.Event{Session: key, Kind: agent.TurnEnded, Outcome: agent.Done, At: old})
	router.Flush(key)

	if _, err := db.Retain(ctx, time.Hour, router.Deleted); err != nil {
		t.Fatal(err)
	}
	if n, err := db.SessionCount(); err != nil || n != 0 {
		t.Fatalf("after retention the store holds %d sessions (%v), want none", n, err)
	}
	if !slices.Equal(console.forgot, []string{key}) {
		t.Errorf("the console was told to forget %q, want the deleted session", console.forgot)
	}
}
