package web

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/chat/chattest"
	"github.com/pinplan/pinplan/store"
)

// TestConsoleListsOldAndNewBoardRecords: the console's read model lists sessions by
// their listing record, and a session whose board record was written
// before the listing had a record of its own (its title and "deleted" in
// the board record) is listed as before, whether or not a router has
// loaded it since.
func TestConsoleListsOldAndNewBoardRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := store.Open(filepath.Join(t.TempDir(), "pinplan.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	old := func(key, title string, hidden bool) {
		t.Helper()
		rec, _ := json.Marshal(map[string]any{
			"thread": map[string]string{"platform": "web", "key": key, "channel": key[len("web/"):], "title": title},
			"ref":    map[string]string{"channel": "", "id": ""},
			"shown":  map[string]any{"items": nil, "revision": 0, "state": "", "updated": "0001-01-01T00:00:00Z"},
			"hidden": hidden,
		})
		if err := db.SaveBoard(ctx, key, rec, false); err != nil {
			t.Fatal(err)
		}
	}
	old("web/old", "an old title", false)
	old("web/gone", "an old deleted one", true)
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
	listed := func(when string, want map[string]string) {
		t.Helper()
		sums, err := NewReadModel(db, sessions).Threads(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, s := range sums {
			got[s.Key] = s.Title
		}
		if len(got) != len(want) {
			t.Errorf("%s: listed %q, want %q", when, got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s listed as %q, want %q (all: %q)", when, k, got[k], v, got)
			}
		}
	}
	want := map[string]string{"web/old": "an old title", "web/new": "plan web/new"}
	listed("before the old records are loaded", want)
	// Loading moves the old records' title and "deleted" to the listing
	// record; the console lists them the same.
	for _, key := range []string{"web/old", "web/gone"} {
		router.Board(key).Wait()
	}
	listed("after the old records are loaded", want)
	if router.Visible("web/gone") {
		t.Error("the old deleted session is visible")
	}
	if listing, _ := db.Listing(ctx, "web/old"); string(listing) != `{"title":"an old title"}` {
		t.Errorf("listing record of web/old %s", listing)
	}
	board, _ := db.Board(ctx, "web/old")
	if title, hidden := chat.DecodeListing(nil, board); title != "" || hidden {
		t.Errorf("board record of web/old still says title %q, hidden %t: %s", title, hidden, board)
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
