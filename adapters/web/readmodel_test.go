package web

import (
	"context"
	"encoding/json"
	"maps"
	"path/filepath"
	"testing"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/chat/chattest"
	"github.com/pinplan/pinplan/store"
)

// TestConsoleListsSessions: the console's read model lists sessions by
// their listing record: each under its title, and a deleted one not at
// all.
func TestConsoleListsSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := store.Open(filepath.Join(t.TempDir(), "pinplan.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	console := New(Options{})
	t.Cleanup(console.Close)
	router := chat.NewRouter(chat.Options{Runner: &chattest.Runner{}, Store: db, Log: db, Cards: db, Listings: db, FollowUps: db, Outbox: db, Platforms: map[string]chat.Platform{"web": console}})
	t.Cleanup(router.Close)
	for _, key := range []string{"web/new", "web/del"} {
		if err := router.Handle(ctx, chat.Incoming{Thread: chat.Thread{Platform: "web", Key: key, Channel: key[len("web/"):]}, Text: "plan " + key}); err != nil {
			t.Fatal(err)
		}
	}
	if err := router.Delete(ctx, "web/del", "op"); err != nil {
		t.Fatal(err)
	}

	sessions := func(ctx context.Context) ([]Session, error) {
		infos, err := db.Sessions(ctx)
		out := make([]Session, len(infos))
		for i, in := range infos {
			out[i] = Session{Checkpoint: in.Checkpoint, Board: in.Board, Listing: in.Listing}
		}
		return out, err
	}
	sums, err := NewReadModel(db, sessions).Threads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range sums {
		got[s.Key] = s.Title
	}
	if want := map[string]string{"web/new": "plan web/new"}; !maps.Equal(got, want) {
		t.Errorf("listed %q, want %q", got, want)
	}
	if router.Visible("web/del") {
		t.Error("the deleted session is visible")
	}
}

// TestRunStatesShowTurns: the run-state subscriber shows each turn's
// state and pill, for the threads the router knows, and nothing for an
// event that does not change them or a session it does not know.
func TestRunStatesShowTurns(t *testing.T) {
	t.Parallel()
	console := New(Options{})
	t.Cleanup(console.Close)
	shown := make(chan []byte, 16)
	console.mu.Lock()
	console.clients[shown] = struct{}{}
	console.mu.Unlock()
	th := chat.Thread{Platform: "slack", Key: "slack/T1/C1/1.1", Channel: "C1"}
	rs := NewRunStates(console, knownThreads{th.Key: th})
	for _, tt := range []struct {
		e    agent.Event
		want string // state/status, "" for nothing shown
	}{
		{agent.Event{Session: th.Key, Kind: agent.TurnStarted}, "running/working"},
		{agent.Event{Session: th.Key, Kind: agent.ApprovalNeeded}, "waiting/waiting for approval"},
		{agent.Event{Session: th.Key, Kind: agent.PlanChanged}, ""},
		{agent.Event{Session: th.Key, Kind: agent.ApprovalDecided}, "running/working"},
		{agent.Event{Session: th.Key, Kind: agent.TurnEnded, Outcome: agent.Done}, "idle/done"},
		{agent.Event{Session: th.Key, Kind: agent.TurnEnded, Outcome: agent.Stopped}, "idle/stopped"},
		{agent.Event{Session: th.Key, Kind: agent.TurnStarted, Resumed: true}, "running/resumed after restart"},
		{agent.Event{Session: "web/unknown", Kind: agent.TurnStarted}, ""},
	} {
		rs.Observe(tt.e)
		got := ""
		select {
		case raw := <-shown:
			var e event
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatal(err)
			}
			if e.Type != "state" || e.Thread != th.Key {
				t.Errorf("after %+v: shown %s", tt.e, raw)
			}
			got = e.State + "/" + e.Status
		default:
		}
		if got != tt.want {
			t.Errorf("after kind %v of %s: shown %q, want %q", tt.e.Kind, tt.e.Session, got, tt.want)
		}
	}
}

type knownThreads map[string]chat.Thread

func (k knownThreads) Thread(key string) (chat.Thread, bool) {
	th, ok := k[key]
	return th, ok
}
