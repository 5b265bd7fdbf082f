package store

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/pinplan/pinplan/agent"
)

// boardRecordJSON is a plan board record in the shape the chat package
// writes (chat.boardRecord), with the given wanted and shown footers.
// want "" leaves Want out, as a record saved before any update has it.
func boardRecordJSON(key, shownState string, shownAt time.Time, wantState string, wantAt time.Time, stoppable bool) string {
	plan := func(state string, at time.Time, stop bool) string {
		s := fmt.Sprintf(`{"items":[{"content":"write the fix","status":"in_progress"}],"revision":2,"state":%q,"updated":%q`, state, at.Format(time.RFC3339Nano))
		if stop {
			s += `,"stoppable":true`
		}
		return s + "}"
	}
	rec := fmt.Sprintf(`{"thread":{"platform":"web","key":%q,"channel":%q},"ref":{"channel":%q,"id":"m1"},"pinned":true,"shown":%s,"trigger":"t1"`,
		key, key, key, plan(shownState, shownAt, false))
	if wantState != "" {
		rec += `,"want":` + plan(wantState, wantAt, stoppable)
	}
	return rec + "}"
}

// sessionSpec is one session to store before retention runs.
type sessionSpec struct {
	name    string
	record  agent.RunState // "" for no record
	updated time.Time
	raw     string    // a record to store as is, instead of record
	inbox   bool      // a queued message
	board   string    // a board record; "" for none
	chat    bool      // chat's cards and listing records
	empty   bool      // only the session's (empty) bucket
	resetAt time.Time // when set, the session was reset (archived) then
	logged  int64     // entries of the session's log, committed with its record
	shown   int64     // its delivery cursor
	deleted bool      // what retention should do
}

// seedSession stores s under key; clock is db's Now, set to s.resetAt
// while the session is archived.
func seedSession(t testing.TB, db *DB, clock *time.Time, key string, s sessionSpec) {
	t.Helper()
	ctx := context.Background()
	if s.record != "" {
		r := round(key, 0, "task", "answer")
		r.Plans = []agent.PlanRevision{{Revision: 1}}
		r.Checkpoint.State, r.Checkpoint.Updated, r.Checkpoint.Revision = s.record, s.updated, 1
		for seq := int64(1); seq <= s.logged; seq++ {
			r.Log = append(r.Log, agent.LogEntry{Seq: seq, Kind: agent.PlanChanged, At: s.updated})
		}
		r.Checkpoint.LogSeq = s.logged
		if err := db.Commit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if s.shown > 0 {
		if err := db.SaveDelivered(ctx, key, s.shown); err != nil {
			t.Fatal(err)
		}
	}
	if !s.resetAt.IsZero() {
		saved := *clock
		*clock = s.resetAt
		err := db.Archive(ctx, key)
		*clock = saved
		if err != nil {
			t.Fatal(err)
		}
	}
	if s.inbox {
		if _, err := db.Enqueue(ctx, key, agent.Inbound{Text: "queued"}); err != nil {
			t.Fatal(err)
		}
	}
	if s.board != "" {
		if err := db.SaveBoard(ctx, key, []byte(s.board), false); err != nil {
			t.Fatal(err)
		}
	}
	if s.chat {
		if err := db.SaveCards(ctx, key, []byte(`{"cards":{"c1":{"call_id":"call_1","card":{"id":"c1","outcome":"Denied"}}}}`)); err != nil {
			t.Fatal(err)
		}
		if err := db.SaveListing(ctx, key, []byte(`{"title":"plan the release"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if s.raw != "" || s.empty {
		err := db.bolt.Update(func(tx *bolt.Tx) error {
			sb, err := createSession(tx, key)
			if err != nil || s.raw == "" {
				return err
			}
			return sb.Put(kRecord, []byte(s.raw))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestDeleteIdle(t *testing.T) {
	ctx := context.Background()
	cutoff := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	old, recent := cutoff.Add(-48*time.Hour), cutoff.Add(time.Minute)
	tests := []sessionSpec{
		{name: "idle old", record: agent.Idle, updated: old, deleted: true},
		{name: "idle old with finished board", record: agent.Idle, updated: old, board: boardRecordJSON("k", "done", old, "done", old, false), deleted: true},
		{name: "idle old board shows working but wants done", record: agent.Idle, updated: old, board: boardRecordJSON("k", "working", old, "done", old, false), deleted: true},
		{name: "idle old board stopped", record: agent.Idle, updated: old, board: boardRecordJSON("k", "stopped", old, "stopped", old, false), deleted: true},
		{name: "idle old board without want", record: agent.Idle, updated: old, board: boardRecordJSON("k", "failed", old, "", time.Time{}, false), deleted: true},
		{name: "idle recent", record: agent.Idle, updated: recent},
		{name: "idle updated exactly at the cutoff", record: agent.Idle, updated: cutoff},
		{name: "idle without updated time", record: agent.Idle},
		{name: "running old", record: agent.Running, updated: old},
		{name: "waiting for approval old", record: agent.Waiting, updated: old},
		{name: "unknown state old", record: "paused", updated: old},
		{name: "idle old with queued message", record: agent.Idle, updated: old, inbox: true},
		// What a plan message shows decides nothing: the agent's record
		// says whether a turn runs, the log whether all of it was shown.
		{name: "idle old, log not all shown", record: agent.Idle, updated: old, logged: 3, shown: 2, board: boardRecordJSON("k", "done", old, "done", old, false)},
		{name: "idle old, log never shown", record: agent.Idle, updated: old, logged: 1},
		{name: "idle old, log shown", record: agent.Idle, updated: old, logged: 3, shown: 3, deleted: true},
		{name: "idle old board wants working, log shown", record: agent.Idle, updated: old, logged: 2, shown: 2, board: boardRecordJSON("k", "done", old, "working", old, true), deleted: true},
		{name: "running old, log shown", record: agent.Running, updated: old, logged: 2, shown: 2},
		{name: "idle old board unreadable", record: agent.Idle, updated: old, board: "{not json"},
		{name: "record unreadable", raw: "{not json"},
		{name: "record without state", raw: fmt.Sprintf(`{"updated":%q}`, old.Format(time.RFC3339))},
		{name: "queued message only", inbox: true},
		{name: "board only old", board: boardRecordJSON("k", "done", old, "done", old, false), deleted: true},
		{name: "board only new want", board: boardRecordJSON("k", "done", old, "done", recent, false)},
		{name: "board only new shown", board: boardRecordJSON("k", "done", recent, "", time.Time{}, false)},
		{name: "board only without times", board: `{"thread":{"platform":"web","key":"k","channel":"k"},"ref":{"channel":"","id":""},"pinned":false,"shown":{"items":null,"revision":0,"state":"","updated":"0001-01-01T00:00:00Z"},"trigger":"t1"}`},
		{name: "board only old with queued message", board: boardRecordJSON("k", "done", old, "done", old, false), inbox: true},
		{name: "empty session bucket", empty: true, deleted: true},
		{name: "idle old with cards and listing", record: agent.Idle, updated: old, board: boardRecordJSON("k", "done", old, "done", old, false), chat: true, deleted: true},
		{name: "idle recent with cards and listing", record: agent.Idle, updated: recent, board: boardRecordJSON("k", "done", old, "done", old, false), chat: true},
		{name: "board only old with cards and listing", board: boardRecordJSON("k", "done", old, "done", old, false), chat: true, deleted: true},
		{name: "board only without times with cards and listing", board: `{"thread":{"platform":"web","key":"k","channel":"k"},"trigger":"t1"}`, chat: true},
		{name: "cards and listing only", chat: true, deleted: true},
		{name: "reset long ago, archive and all", record: agent.Idle, updated: old.Add(-time.Hour), resetAt: old, deleted: true},
		{name: "reset recently", record: agent.Idle, updated: old, resetAt: recent},
	}
	clock := cutoff
	path := t.TempDir() + "/retention.db"
	db, err := Open(path, Options{Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	keyOf := func(i int) string { return fmt.Sprintf("web/s%02d", i) }
	var want []string
	for i, tt := range tests {
		seedSession(t, db, &clock, keyOf(i), tt)
		if tt.deleted {
			want = append(want, keyOf(i))
		}
	}
	// State outside the sessions survives retention.
	if _, err := db.AddOutbox(ctx, "web/s00", [][]byte{[]byte(`{"thread":{"key":"web/s00"},"text":"reply"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.FirstSeen(ctx, "slack/Ev1", 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	type snapshot struct {
		cp    *agent.Checkpoint
		hist  []agent.Entry
		inbox []agent.Inbound
		board []byte
		cards []byte
		list  []byte
		plans []agent.PlanRevision
	}
	load := func(key string) (s snapshot, err error) {
		s.cp, s.hist, s.inbox, err = db.Load(ctx, key)
		if err == nil {
			s.board, err = db.Board(ctx, key)
		}
		if err == nil {
			s.cards, err = db.Cards(ctx, key)
		}
		if err == nil {
			s.list, err = db.Listing(ctx, key)
		}
		if err == nil {
			s.plans, err = db.Plans(ctx, key)
		}
		return s, err
	}
	before := map[string]snapshot{}
	for i, tt := range tests {
		if tt.raw == "" && !tt.deleted {
			s, err := load(keyOf(i))
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			before[keyOf(i)] = s
		}
	}

	got, err := db.DeleteIdle(ctx, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("deleted %q, want %q", got, want)
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := keyOf(i)
			if gotDeleted := slices.Contains(got, key); gotDeleted != tt.deleted {
				t.Fatalf("deleted %t, want %t", gotDeleted, tt.deleted)
			}
			exists := false
			if err := db.bolt.View(func(tx *bolt.Tx) error { exists = session(tx, key) != nil; return nil }); err != nil {
				t.Fatal(err)
			}
			if exists == tt.deleted {
				t.Fatalf("session bucket exists %t after retention, want %t", exists, !tt.deleted)
			}
			b, ok := before[key]
			if !ok {
				return
			}
			a, err := load(key)
			if err != nil {
				t.Fatal(err)
			}
			if (a.cp == nil) != (b.cp == nil) || len(a.hist) != len(b.hist) || len(a.inbox) != len(b.inbox) || string(a.board) != string(b.board) || len(a.plans) != len(b.plans) {
				t.Errorf("kept session changed: got record %v, %d entries, %d queued, board %q, %d plans; want record %v, %d, %d, %q, %d",
					a.cp != nil, len(a.hist), len(a.inbox), a.board, len(a.plans), b.cp != nil, len(b.hist), len(b.inbox), b.board, len(b.plans))
			}
			if string(a.cards) != string(b.cards) || string(a.list) != string(b.list) {
				t.Errorf("kept session's chat records changed: got cards %q, listing %q; want %q, %q", a.cards, a.list, b.cards, b.list)
			}
		})
	}
	n := 0
	if err := db.Outbox(ctx, func(uint64, []byte) { n++ }); err != nil || n != 1 {
		t.Errorf("outbox has %d items (%v), want 1", n, err)
	}
	if first, err := db.FirstSeen(ctx, "slack/Ev1", time.Hour); err != nil || first {
		t.Errorf("dedupe key lost: first sighting %t, %v; want false", first, err)
	}
	if err := db.Check(); err != nil {
		t.Errorf("Check after retention: %v", err)
	}
	// A second pass finds nothing more to do.
	if again, err := db.DeleteIdle(ctx, cutoff); err != nil || len(again) != 0 {
		t.Errorf("second pass deleted %q, %v; want nothing", again, err)
	}
}

func TestDeleteIdleManySessionsAndCancel(t *testing.T) {
	ctx := context.Background()
	db := openTemp(t)
	cutoff := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	clock := time.Now()
	const n = 3*deleteChunk + 5 // several write transactions
	var want []string
	for i := range n {
		key := fmt.Sprintf("web/m%04d", i)
		spec := sessionSpec{record: agent.Idle, updated: cutoff.Add(-time.Hour)}
		if i%3 == 0 {
			spec.record = agent.Running
		} else {
			want = append(want, key)
		}
		seedSession(t, db, &clock, key, spec)
	}
	cancelled, cancel := context.WithCancelCause(ctx)
	cancel(fmt.Errorf("shutting down"))
	if got, err := db.DeleteIdle(cancelled, cutoff); err == nil || len(got) != 0 {
		t.Errorf("cancelled: deleted %d, %v; want none and an error", len(got), err)
	}
	got, err := db.DeleteIdle(ctx, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("deleted %d sessions, want %d (%q...)", len(got), len(want), want[:3])
	}
	if c, err := db.SessionCount(); err != nil || c != n-len(want) {
		t.Errorf("SessionCount = %d, %v; want %d", c, err, n-len(want))
	}
}

func TestSessionCount(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		sessions int
		rounds   int // rounds per session: enough makes its buckets non-inline
		inboxes  int // extra sessions with only a queued message
		boards   int // extra sessions with only a board record
	}{
		{name: "empty"},
		{name: "one session", sessions: 1, rounds: 1},
		{name: "small inline sessions", sessions: 20, rounds: 1, inboxes: 3, boards: 2},
		{name: "large sessions", sessions: 30, rounds: 40},
		{name: "many sessions", sessions: 2000, rounds: 1, inboxes: 10, boards: 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := openTemp(t)
			err := db.bolt.Update(func(tx *bolt.Tx) error {
				for i := range tt.sessions {
					key := fmt.Sprintf("web/c%05d", i)
					for j := range tt.rounds {
						fn, err := commitTx(round(key, j, fmt.Sprintf("message %d of a long enough text to fill pages", j)))
						if err != nil {
							return err
						}
						if err := fn(tx); err != nil {
							return err
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for i := range tt.inboxes {
				if _, err := db.Enqueue(ctx, fmt.Sprintf("web/i%d", i), agent.Inbound{Text: "x"}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range tt.boards {
				if err := db.SaveBoard(ctx, fmt.Sprintf("web/b%d", i), []byte(`{}`), false); err != nil {
					t.Fatal(err)
				}
			}
			got, err := db.SessionCount()
			if err != nil {
				t.Fatal(err)
			}
			want := tt.sessions + tt.inboxes + tt.boards
			if got != want {
				t.Errorf("SessionCount = %d, want %d", got, want)
			}
			list, err := db.Sessions(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != got {
				t.Errorf("SessionCount = %d, but Sessions lists %d", got, len(list))
			}
		})
	}
}
