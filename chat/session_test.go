package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat/chattest"
)

// oldBoardRecord is a board record as pinplan wrote it before the approval
// cards and the listing had records of their own: the thread's "title",
// "cards" and "hidden" are in it. Its turn waits on one open card, id.
func oldBoardRecord(id string, hidden bool) string {
	plan := `{"items":[{"content":"write the notes","status":"in_progress"}],"revision":1,"state":"waiting for approval","updated":"2025-06-01T12:00:00Z","stoppable":true}`
	return fmt.Sprintf(`{"thread":{"platform":"test","key":"test/1","channel":"C1","title":"plan the release"},`+
		`"ref":{"channel":"C1","id":"m1"},"pinned":true,"shown":%s,"trigger":"msg-1","indicated":"msg-1",`+
		`"requester":"UANN","starter":"UANN","running":true,`+
		`"cards":{%q:{"call_id":"call_1","ref":{"channel":"C1","id":"card1"},"card":{"id":%q,"tool":"fs__write_file","server":"fs","arguments":"{\"path\":\"x\"}","requester":"UANN","deadline":"2099-01-01T00:00:00Z"}}},`+
		`"want":%s,"hidden":%t}`, plan, id, id, plan, hidden)
}

// migrationRig stores an old board record (and, if given, a cards record
// saved by a move a crash cut short) and returns a router on those stores.
func migrationRig(t *testing.T, old string, cardsRec string) (*Router, *cardPlatform, *decider, *chattest.Boards, *chattest.Cards, *chattest.Listings) {
	t.Helper()
	ctx := context.Background()
	boards, cards, listings := &chattest.Boards{}, &chattest.Cards{}, &chattest.Listings{}
	if err := boards.SaveBoard(ctx, "test/1", []byte(old), BoardPending([]byte(old))); err != nil {
		t.Fatal(err)
	}
	if cardsRec != "" {
		if err := cards.SaveCards(ctx, "test/1", []byte(cardsRec)); err != nil {
			t.Fatal(err)
		}
	}
	p := &cardPlatform{}
	p.cards = map[string]Card{"card1": {}}
	run := &decider{}
	r := NewRouter(Options{Runner: run, Store: boards, Cards: cards, Listings: listings, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond})
	t.Cleanup(r.Close)
	return r, p, run, boards, cards, listings
}

// TestOldBoardRecordMovesCardsAndListing: after an upgrade, a board record
// written with the cards and the listing in it keeps working: its card
// takes a click, and the cards and the listing move to their own records,
// which a restart reads.
func TestOldBoardRecordMovesCardsAndListing(t *testing.T) {
	ctx := context.Background()
	id := cardID("test/1", agent.Approval{CallID: "call_1"})
	old := oldBoardRecord(id, false)
	// The console lists a session no router has loaded yet from the old
	// record.
	if title, hidden := DecodeListing(nil, []byte(old)); title != "plan the release" || hidden {
		t.Errorf("old record listed as %q, hidden %t; want %q, shown", title, hidden, "plan the release")
	}
	r, p, run, boards, cards, listings := migrationRig(t, old, "")
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}

	res := r.Click(ctx, Click{Thread: th, Button: ButtonID(ActionAllow, id), UserID: "UANN", UserName: "ann"})
	if res.Card == nil || res.Card.Outcome != "Allowed once" || res.Card.Tool != "fs__write_file" {
		t.Fatalf("click on the old record's card: %+v, want it allowed once", res)
	}
	if len(run.decisions) != 1 || run.decisions[0].By != "UANN" {
		t.Fatalf("decisions %+v, want UANN's one", run.decisions)
	}
	if got, ok := r.Thread(th.Key); !ok || got.Title != "plan the release" || !r.Visible(th.Key) {
		t.Errorf("thread %+v (visible %t), want it listed as %q", got, r.Visible(th.Key), "plan the release")
	}
	// The plan message stays the board's (who may stop is the agent's).
	if rec, _ := r.Board(th.Key).state(); rec.Ref.ID != "m1" {
		t.Errorf("board after the move: %+v", rec)
	}
	settle(t, r, th.Key)

	// Stored: the board record without what moved, the cards and the
	// listing in their records.
	raw, _ := boards.Board(ctx, th.Key)
	var board map[string]json.RawMessage
	if err := json.Unmarshal(raw, &board); err != nil {
		t.Fatal(err)
	}
	var thread map[string]any
	_ = json.Unmarshal(board["thread"], &thread)
	if _, ok := board["cards"]; ok || board["hidden"] != nil || thread["title"] != nil {
		t.Errorf("board record still holds cards or listing: %s", raw)
	}
	var cr cardsRecord
	raw, _ = cards.Cards(ctx, th.Key)
	if err := json.Unmarshal(raw, &cr); err != nil || cr.Cards[id].Card.Outcome != "Allowed once" || cr.Cards[id].Ref.ID != "card1" || cr.Cards[id].CallID != "call_1" {
		t.Errorf("cards record %s (%v), want the decided card", raw, err)
	}
	listing, _ := listings.Listing(ctx, th.Key)
	if title, hidden := DecodeListing(listing, nil); title != "plan the release" || hidden {
		t.Errorf("listing record %s, want the title", listing)
	}
	if p.posts != 0 {
		t.Errorf("%d cards posted, want none: the old card is the one", p.posts)
	}

	// A restart reads the new records: the card is decided.
	r.Close()
	r2 := NewRouter(Options{Runner: &decider{}, Store: boards, Cards: cards, Listings: listings, Platforms: map[string]Platform{"test": p}})
	t.Cleanup(r2.Close)
	if res := r2.Click(ctx, Click{Thread: th, Button: ButtonID(ActionDeny, id), UserID: "UANN"}); res.Private == "" || res.Card != nil {
		t.Errorf("click after the restart: %+v, want a private note that it was decided", res)
	}
	if got, _ := r2.Thread(th.Key); got.Title != "plan the release" {
		t.Errorf("title after the restart %q", got.Title)
	}
}

// TestOldHiddenBoardRecordStaysHidden: a session deleted from the console
// before the listing had a record of its own stays deleted, and a message
// to it brings it back under a new title, as before.
func TestOldHiddenBoardRecordStaysHidden(t *testing.T) {
	ctx := context.Background()
	old := oldBoardRecord(cardID("test/1", agent.Approval{CallID: "call_1"}), true)
	if _, hidden := DecodeListing(nil, []byte(old)); !hidden {
		t.Error("old deleted record listed")
	}
	r, _, _, boards, _, listings := migrationRig(t, old, "")
	if r.Visible("test/1") {
		t.Error("old deleted session visible after the move")
	}
	listing, _ := listings.Listing(ctx, "test/1")
	board, _ := boards.Board(ctx, "test/1")
	if _, hidden := DecodeListing(listing, board); !hidden {
		t.Errorf("listing %s with board %s: not hidden", listing, board)
	}
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	if err := r.Handle(ctx, Incoming{Thread: th, Text: "start over", AuthorID: "UANN"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.Thread(th.Key); !r.Visible(th.Key) || got.Title != "start over" {
		t.Errorf("after a new message: visible %t, title %q; want visible, %q", r.Visible(th.Key), got.Title, "start over")
	}
	settle(t, r, th.Key)
}

// TestCutShortMoveKeepsTheNewRecord: a crash after the cards record was
// saved and before the board record was saved without them leaves both;
// the cards record (which every later change wrote) wins.
func TestCutShortMoveKeepsTheNewRecord(t *testing.T) {
	ctx := context.Background()
	id := cardID("test/1", agent.Approval{CallID: "call_1"})
	decidedRec := fmt.Sprintf(`{"cards":{%q:{"call_id":"call_1","ref":{"channel":"C1","id":"card1"},"card":{"id":%q,"tool":"fs__write_file","requester":"UANN","outcome":"Denied","by":"ann"}}}}`, id, id)
	r, _, run, boards, _, _ := migrationRig(t, oldBoardRecord(id, false), decidedRec)
	res := r.Click(ctx, Click{Thread: Thread{Platform: "test", Key: "test/1", Channel: "C1"}, Button: ButtonID(ActionAllow, id), UserID: "UANN"})
	if res.Private == "" || len(run.decisions) != 0 {
		t.Errorf("click on a card the cards record has decided: %+v, %d decisions; want a private note", res, len(run.decisions))
	}
	settle(t, r, "test/1")
	if raw, _ := boards.Board(ctx, "test/1"); containsKey(t, raw, "cards") {
		t.Errorf("board record still holds the cards: %s", raw)
	}
}

func containsKey(t *testing.T, raw []byte, key string) bool {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	_, ok := m[key]
	return ok
}

func TestDecodeListing(t *testing.T) {
	tests := []struct {
		name           string
		listing, board string
		title          string
		hidden         bool
	}{
		{name: "listing record", listing: `{"title":"new","hidden":true}`, board: `{"thread":{"title":"old"}}`, title: "new", hidden: true},
		{name: "listing record wins over the board's old fields", listing: `{"title":"new"}`, board: `{"thread":{"title":"old"},"hidden":true}`, title: "new"},
		{name: "old board record", board: `{"thread":{"key":"k","title":"old"},"hidden":true}`, title: "old", hidden: true},
		{name: "new board record without listing", board: `{"thread":{"key":"k"}}`},
		{name: "nothing"},
		{name: "unreadable listing", listing: `{not json`, board: `{"thread":{"title":"old"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var listing, board []byte
			if tt.listing != "" {
				listing = []byte(tt.listing)
			}
			if tt.board != "" {
				board = []byte(tt.board)
			}
			title, hidden := DecodeListing(listing, board)
			if title != tt.title || hidden != tt.hidden {
				t.Errorf("got %q, hidden %t; want %q, %t", title, hidden, tt.title, tt.hidden)
			}
		})
	}
}

// TestFencedRecordSaveSaidOnce: a record save refused because another
// replica holds the session now is a normal failover: said once at INFO,
// never as an error; any other failed save is an error each time.
func TestFencedRecordSaveSaidOnce(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	fenced := fmt.Errorf("etcdstore: save cards: %w", agent.ErrFenced)
	fail := fenced
	rec := &record[cardsRecord]{what: "approval cards", log: log, ctx: context.Background(), save: func(context.Context, []byte) error { return fail }}
	for range 3 {
		rec.update(func(*cardsRecord) {})
	}
	out := buf.String()
	if n := strings.Count(out, "level=INFO"); n != 1 || strings.Contains(out, "level=ERROR") {
		t.Errorf("three fenced saves logged:\n%s\nwant one INFO line and no error", out)
	}
	buf.Reset()
	fail = errors.New("etcdserver: request timed out")
	rec.update(func(*cardsRecord) {})
	if !strings.Contains(buf.String(), "level=ERROR") {
		t.Errorf("a failed save logged %q, want an error", buf.String())
	}
}
