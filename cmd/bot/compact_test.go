package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/adapters/web"
	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/chat/chattest"
	"github.com/pinplan/pinplan/config"
	"github.com/pinplan/pinplan/store"
	"github.com/pinplan/pinplan/todo"
)

// compactConfig returns a configuration whose PINPLAN_DB is a new
// database in a temp dir holding one session with a finished turn.
func compactConfig(t testing.TB) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "data", "pinplan.db")
	cfg, err := config.Load(func(k string) string {
		if k == "PINPLAN_DB" {
			return path
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &agent.Round{
		Append:     []agent.Entry{{Message: openai.ChatCompletionMessage{Role: "user", Content: "plan the release"}}},
		Checkpoint: agent.Checkpoint{Key: "web/t1", State: agent.Idle, HistoryLen: 1},
	}
	if err := db.Commit(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestCompactCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name    string
		running bool   // the bot holds the database
		out     string // existing content of OUT; "" for none
		wantErr error
		wantMsg string // in the error or the output
	}{
		{name: "writes a compacted copy", wantMsg: "compacted"},
		{name: "refused while the bot runs", running: true, wantErr: store.ErrLocked, wantMsg: "is pinplan running?"},
		{name: "refuses to overwrite", out: "an earlier copy", wantErr: store.ErrExists, wantMsg: "already exists"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := compactConfig(t)
			out := filepath.Join(t.TempDir(), "compacted.db")
			if tt.out != "" {
				if err := os.WriteFile(out, []byte(tt.out), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tt.running {
				db, err := store.Open(cfg.DB, store.Options{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
			}
			var stdout bytes.Buffer
			err := compact(ctx, cfg, out, &stdout)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tt.wantMsg) {
					t.Errorf("error %q does not say %q", err, tt.wantMsg)
				}
				if stdout.Len() != 0 {
					t.Errorf("printed %q on failure", stdout.String())
				}
				got, rerr := os.ReadFile(out)
				switch {
				case tt.out == "" && !errors.Is(rerr, os.ErrNotExist):
					t.Errorf("refused compaction left %s (%v)", out, rerr)
				case tt.out != "" && string(got) != tt.out:
					t.Errorf("%s now holds %q, want it untouched", out, got)
				}
				return
			}
			if msg := stdout.String(); !strings.Contains(msg, tt.wantMsg) || !strings.Contains(msg, out) || !strings.Contains(msg, cfg.DB) {
				t.Errorf("output %q does not name both files", msg)
			}
			db, err := store.Open(out, store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			_, hist, _, err := db.Load(ctx, "web/t1")
			if err != nil || len(hist) != 1 || hist[0].Message.Content != "plan the release" {
				t.Errorf("copy holds %d entries (%v), want the session's one", len(hist), err)
			}
		})
	}
}

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

// TestRetentionEvery checks how often housekeeping deletes idle sessions:
// every ten minutes for a long retention, every half of a short one, never
// more than once a minute, and never without a retention.
func TestRetentionEvery(t *testing.T) {
	for _, c := range []struct {
		retention time.Duration
		want      int
	}{
		{0, 0},
		{time.Minute, 1},
		{2 * time.Minute, 1},
		{5 * time.Minute, 2},
		{20 * time.Minute, 10},
		{720 * time.Hour, 10},
	} {
		if got := retentionEvery(c.retention); got != c.want {
			t.Errorf("retentionEvery(%s) = %d minutes, want %d", c.retention, got, c.want)
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
	router.Board(key).Wait()

	retain(ctx, db, router, time.Hour, slog.New(slog.DiscardHandler))
	if n, err := db.SessionCount(); err != nil || n != 0 {
		t.Fatalf("after retention the store holds %d sessions (%v), want none", n, err)
	}
	if !slices.Equal(console.forgot, []string{key}) {
		t.Errorf("the console was told to forget %q, want the deleted session", console.forgot)
	}
}
