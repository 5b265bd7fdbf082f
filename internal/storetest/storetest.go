// Package storetest is the contract suite of pinplan's stores: one set of
// tests that store (bbolt) and etcdstore both pass (DESIGN §14). Each
// store's own tests call Run with a function that opens an empty one.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/todo"
)

// Store is everything the suite checks: agent.Store and the records,
// outbox and dedupe the chat layer keeps in it.
type Store interface {
	agent.Store
	Plans(ctx context.Context, key string) ([]agent.PlanRevision, error)
	Archived(ctx context.Context, key string, n uint64) (int, []agent.Entry, error)
	Board(ctx context.Context, key string) ([]byte, error)
	SaveBoard(ctx context.Context, key string, data []byte, pending bool) error
	Cards(ctx context.Context, key string) ([]byte, error)
	SaveCards(ctx context.Context, key string, data []byte) error
	Listing(ctx context.Context, key string) ([]byte, error)
	SaveListing(ctx context.Context, key string, data []byte) error
	PendingBoards(ctx context.Context) ([]string, error)
	AddOutbox(ctx context.Context, key string, items [][]byte) ([]uint64, error)
	DeleteOutbox(ctx context.Context, key string, id uint64) error
	Outbox(ctx context.Context, f func(id uint64, data []byte)) error
	FirstSeen(ctx context.Context, key string, ttl time.Duration) (bool, error)
	Marks(ctx context.Context, name string) ([]byte, error)
	SaveMarks(ctx context.Context, name string, data []byte) error
	HoldFollowUp(ctx context.Context, key, order string, data []byte, ttl time.Duration) (bool, error)
	TakeFollowUps(ctx context.Context, key string) ([][]byte, error)
	SpentOn(ctx context.Context, day string) ([]agent.Spend, error)
	Log(ctx context.Context, key string, after int64) ([]agent.LogEntry, error)
	Delivered(ctx context.Context, key string) (int64, error)
	SaveDelivered(ctx context.Context, key string, seq int64) error
	Undelivered(ctx context.Context) ([]string, error)
	Installation(ctx context.Context, id string) ([]byte, error)
	UpdateInstallation(ctx context.Context, id string, fn func(cur []byte) ([]byte, error)) error
	Installations(ctx context.Context) ([]string, error)
}

// Open returns an empty store for one test. Writes for a session key are
// made as its owner: a fenced store takes the key first (see Own).
type Open func(t *testing.T) Store

// Run runs the contract suite; own, when not nil, is called with each
// session key before the suite writes for it (a fenced store must hold it).
func Run(t *testing.T, open Open, own func(t *testing.T, s Store, key string)) {
	if own == nil {
		own = func(*testing.T, Store, string) {}
	}
	tests := []struct {
		name string
		f    func(t *testing.T, s Store, own func(string))
	}{
		{"CommitLoadAndRepeat", testCommitLoad},
		{"ConflictingRoundRefused", testConflict},
		{"BigRound", testBigRound},
		{"InboxOrderAndDrain", testInbox},
		{"DrainMany", testDrainMany},
		{"Resumable", testResumable},
		{"UpdateCheckpoint", testUpdateCheckpoint},
		{"GuardedRoundRefusedAfterAChange", testGuarded},
		{"ConcurrentUpdates", testConcurrentUpdates},
		{"Archive", testArchive},
		{"ChatRecords", testChatRecords},
		{"Outbox", testOutbox},
		{"FirstSeen", testFirstSeen},
		{"EnqueueOnce", testEnqueueOnce},
		{"Marks", testMarks},
		{"FollowUpsWaitForTheirSession", testFollowUps},
		{"FollowUpsExpire", testFollowUpsExpire},
		{"SpendPerPersonAndDay", testSpend},
		{"ReserveHoldsTheBudget", testReserve},
		{"LogWrittenWithTheRound", testLog},
		{"LogCompactedBehindTheCursor", testLogCompacted},
		{"IndexesOfWorkLeft", testIndexes},
		{"Installations", testInstallations},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			tt.f(t, s, func(key string) { own(t, s, key) })
		})
	}
}

func user(text string) agent.Entry {
	return agent.Entry{Message: openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: text}}
}

// Round returns a round appending texts to key's history at base.
func Round(key string, base int, texts ...string) *agent.Round {
	r := &agent.Round{Base: base}
	for _, s := range texts {
		r.Append = append(r.Append, user(s))
	}
	r.Checkpoint = agent.Checkpoint{Key: key, State: agent.Running, HistoryLen: base + len(texts)}
	return r
}

func texts(hist []agent.Entry) []string {
	out := make([]string, len(hist))
	for i, e := range hist {
		out[i] = e.Message.Content
	}
	return out
}

func testCommitLoad(t *testing.T, s Store, own func(string)) {
	ctx := context.Background()
	own("web/one")
	if cp, hist, inbox, err := s.Load(ctx, "web/one"); err != nil || cp != nil || len(hist) != 0 || len(inbox) != 0 {
		t.Fatalf("Load of a new session = %v, %d, %d, %v; want nothing", cp, len(hist), len(inbox), err)
	}
	in, err := s.Enqueue(ctx, "web/one", agent.Inbound{Text: "hello", Author: "Ann"})
	if err != nil || in.ID == 0 {
		t.Fatalf("Enqueue = %+v, %v", in, err)
	}
	r := Round("web/one", 0, "hello", "answer")
	r.Drained = []uint64{in.ID}
	r.Plans = []agent.PlanRevision{{Revision: 1, Items: []todo.Item{{Content: "a", Status: todo.Pending}}}}
	r.Checkpoint.Revision = 1
	for i := range 2 { // a repeated commit changes nothing
		if err := s.Commit(ctx, r); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	cp, hist, inbox, err := s.Load(ctx, "web/one")
	if err != nil {
		t.Fatal(err)
	}
	if cp == nil || cp.HistoryLen != 2 || !slices.Equal(texts(hist), []string{"hello", "answer"}) || len(inbox) != 0 || cp.Revision != 1 {
		t.Fatalf("after commit: cp=%+v hist=%v inbox=%d", cp, texts(hist), len(inbox))
	}
	next := Round("web/one", 2, "next")
	next.Checkpoint.Revision = 2
	next.Plans = []agent.PlanRevision{{Revision: 2, Items: []todo.Item{{Content: "a", Status: todo.Completed}}}}
	if err := s.Commit(ctx, next); err != nil {
		t.Fatal(err)
	}
	plans, err := s.Plans(ctx, "web/one")
	if err != nil || len(plans) != 2 || plans[0].Revision != 1 || plans[1].Items[0].Status != todo.Completed {
		t.Fatalf("Plans = %+v, %v; want revisions 1 and 2", plans, err)
	}
}

func testConflict(t *testing.T, s Store, own func(string)) {
	ctx := context.Background()
	own("web/c")
	if err := s.Commit(ctx, Round("web/c", 3, "x")); err == nil {
		t.Fatal("a first round at base 3 was accepted")
	}
	if err := s.Commit(ctx, Round("web/c", 0, "a", "b")); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, Round("web/c", 5, "x")); err == nil {
		t.Fatal("a round at base 5 after 2 entries was accepted")
	}
	_, hist, _, err := s.Load(ctx, "web/c")
	if err != nil || !slices.Equal(texts(hist), []string{"a", "b"}) {
		t.Fatalf("after the refused round: %v, %v; want [a b]", texts(hist), err)
	}
}

// testBigRound commits a round bigger than one etcd transaction may be
// (more than 128 operations, more than 1.5 MiB): it lands whole.
func testBigRound(t *testing.T, s Store, own func(string)) {
	ctx := context.Background()
	own("web/big")
	var ts []string
	for i := range 300 {
		ts = append(ts, fmt.Sprintf("%03d %s", i, strings.Repeat("x", 8000)))
	}
	r := Round("web/big", 0, ts...)
	for rev := int64(1); rev <= 40; rev++ {
		r.Plans = append(r.Plans, agent.PlanRevision{Revision: rev, Items: []todo.Item{{Content: fmt.Sprint("step ", rev), Status: todo.InProgress}}})
	}
	r.Checkpoint.Revision = 40
	if err := s.Commit(ctx, r); err != nil {
		t.Fatalf("commit of 300 entries (2.4 MB) and 40 plans: %v", err)
	}
	cp, hist, _, err := s.Load(ctx, "web/big")
	if err != nil || cp.HistoryLen != 300 || len(hist) != 300 || !strings.HasPrefix(hist[299].Message.Content, "299 ") {
		t.Fatalf("Load = %d entries, %v", len(hist), err)
	}
	plans, err := s.Plans(ctx, "web/big")
	if err != nil || len(plans) != 40 {
		t.Fatalf("Plans = %d, %v; want 40", len(plans), err)
	}
}

func testInbox(t *testing.T, s Store, own func(string)) {
	ctx := context.Background()
	own("web/in")
	var ids []uint64
	for _, text := range []string{"one", "two", "three"} {
		in, err := s.Enqueue(ctx, "web/in", agent.Inbound{Text: text})
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) > 0 && in.ID <= ids[len(ids)-1] {
			t.Fatalf("ids %v then %d: want increasing", ids, in.ID)
		}
		ids = append(ids, in.ID)
	}
	inbox, err := s.Inbox(ctx, "web/in")
	if err != nil || len(inbox) != 3 || inbox[0].Text != "one" || inbox[2].Text != "three" || inbox[1].ID != ids[1] {
		t.Fatalf("Inbox = %+v, %v", inbox, err)
	}
	r := Round("web/in", 0, "one", "two")
	r.Drained = ids[:2]
	if err := s.Commit(ctx, r); err != nil {
		t.Fatal(err)
	}
	inbox, err = s.Inbox(ctx, "web/in")
	if err != nil || len(inbox) != 1 || inbox[0].Text != "three" {
		t.Fatalf("Inbox after draining two = %+v, %v", inbox, err)
	}
}

// testDrainMany commits a round that takes in 200 queued messages (more
// than etcd's 128 operations as single deletes): it lands, and a message
// queued meanwhile stays.
func testDrainMany(t *testing.T, s Store, own func(string)) {
	ctx := context.Background()
	own("web/many")
	var ids []uint64
	var ts []string
	for i := range 200 {
		in, err := s.Enqueue(ctx, "web/many", agent.Inbound{Text: fmt.Sprint("m", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
		ts = append(ts, in.Text)
	}
	late, err := s.Enqueue(ctx, "web/many", agent.Inbound{Text: "late"})
	if err != nil {
		t.Fatal(err)
	}
	r := Round("web/many", 0, ts...)
	r.Drained = append(ids[100:], ids[:100]...) // in any order
	if err := s.Commit(ctx, r); err != nil {
		t.Fatalf("a round draining 200 messages: %v", err)
	}
	inbox, err := s.Inbox(ctx, "web/many")
	if err != nil || len(inbox) != 1 || inbox[0].ID != late.ID {
		t.Fatalf("inbox after the round = %+v, %v; want only the late message", inbox, err)
	}
}

func testResumable(t *testing.T, s Store, own func(string)) {
	ctx := context.Background()
	for _, k := range []string{"web/idle", "web/run", "web/wait", "web/queued"} {
		own(k)
	}
	idle := Round("web/idle", 0, "a")
	idle.Checkpoint.State = agent.Idle
	wait := Round("web/wait", 0, "a")
	wait.Checkpoint.State = agent.Waiting
	for _, r := range []*agent.Round{idle, Round("web/run", 0, "a"), wait} {
		if err := s.Commit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Enqueue(ctx, "web/queued", agent.Inbound{Text: "later"}); err != nil {
		t.Fatal(err)
	}
	keys, err := s.Resumable(ctx)
	slices.Sort(keys)
	if err != nil || !slices.Equal(keys, []string{"web/queued", "web/run", "web/wait"}) {
		t.Fatalf("Resumable = %v, %v; want queued, run, wait", keys, err)
	}
}

var errNo = errors.New("no")

func testUpdateCheckpoint(t *testing.T, s Store, own func(string)) {
	ctx := context.Background()
	own("web/u")
	if err := s.UpdateCheckpoint(ctx, "web/u", func(cp *agent.Checkpoint) error {
		if cp != nil {
			t.Errorf("fn got %+v for a session without a record", cp)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, Round("web/u", 0, "a")); err != nil {
		t.Fatal(err)
	}
	err := s.UpdateCheckpoint(ctx, "web/u", func(cp *agent.Checkpoint) error {
		cp.State = agent.Waiting
		return errNo
	})
	if !errors.Is(err, errNo) {
		t.Fatalf("fn's error: got %v, want it wrapped", err)
	}
	if cp, _, _, _ := s.Load(ctx, "web/u"); cp.State != agent.Running {
		t.Fatalf("state after a refused update = %s, want running (nothing written)", cp.State)
	}
	if err := s.UpdateCheckpoint(ctx, "web/u", func(cp *agent.Checkpoint) error { cp.HistoryLen = 9; return nil }); err == nil {
		t.Fatal("an update of HistoryLen was accepted")
	}
	if err := s.UpdateCheckpoint(ctx, "web/u", func(cp *agent.Checkpoint) error { cp.State = agent.Waiting; return nil }); err != nil {
		t.Fatal(err)
	}
	if cp, _, _, _ := s.Load(ctx, "web/u"); cp.State != agent.Waiting {
		t.Fatalf("state = %s, want waiting", cp.State)
	}
}

// testGuarded: a round made while its turn waits (Round.Guard) is
// written only over the checkpoint it read: after a decision changed the
// stored one (Checkpoint.Changed) it is ErrChanged and nothing of it is
// written; made again on the new checkpoint it lands. An unguarded
// round is written as before.
func testGuarded(t *testing.T, s Store, own func(string)) {
	ctx := context.Background()
	own("web/g")
	if err := s.Commit(ctx, Round("web/g", 0, "a")); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateCheckpoint(ctx, "web/g", func(cp *agent.Checkpoint) error { cp.Changed++; return nil }); err != nil {
		t.Fatal(err)
	}
	stale := Round("web/g", 1, "b")
	stale.Guard = true
	if err := s.Commit(ctx, stale); !errors.Is(err, agent.ErrChanged) {
		t.Fatalf("a guarded round over a changed checkpoint: %v, want ErrChanged", err)
	}
	if _, hist, _, _ := s.Load(ctx, "web/g"); !slices.Equal(texts(hist), []string{"a"}) {
		t.Fatalf("history after the refused round: %v, want [a]", texts(hist))
	}
	fresh := Round("web/g", 1, "b")
	fresh.Guard, fresh.Checkpoint.Changed = true, 1
	if err := s.Commit(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, Round("web/g", 2, "c")); err != nil {
		t.Fatalf("an unguarded round: %v", err)
	}
	if _, hist, _, _ := s.Load(ctx, "web/g"); !slices.Equal(texts(hist), []string{"a", "b", "c"}) {
		t.Fatalf("history: %v, want [a b c]", texts(hist))
	}
}

// testConcurrentUpdates runs updates from several goroutines: each one's
// change lands (none overwrites another's).
func testConcurrentUpdates(t *testing.T, s Store, own func(string)) {
	ctx := context.Background()
	own("web/cc")
	if err := s.Commit(ctx, Round("web/cc", 0, "a")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			err := s.UpdateCheckpoint(ctx, "web/cc", func(cp *agent.Checkpoint) error {
				cp.Grants = append(cp.Grants, agent.Grant{Tool: fmt.Sprint("t", i)})
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	cp, _, _, err := s.Load(ctx, "web/cc")
	if err != nil || len(cp.Grants) != 8 {
		t.Fatalf("grants after 8 concurrent updates = %d, %v; want 8", len(cp.Grants), err)
	}
}

func testArchive(t *testing.T, s Store, own func(string)) {
	ctx := context.Background()
	own("web/a")
	var ts []string
	for i := range 200 { // more than one etcd transaction holds
		ts = append(ts, fmt.Sprint("m", i))
	}
	r := Round("web/a", 0, ts...)
	r.Checkpoint.Turns = 3
	r.Checkpoint.Revision = 1
	r.Plans = []agent.PlanRevision{{Revision: 1, Items: []todo.Item{{Content: "a", Status: todo.Pending}}}}
	if err := s.Commit(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, "web/a", agent.Inbound{Text: "queued"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Archive(ctx, "web/a"); err != nil {
		t.Fatal(err)
	}
	cp, hist, inbox, err := s.Load(ctx, "web/a")
	if err != nil || cp.HistoryLen != 0 || len(hist) != 0 || cp.State != agent.Idle || cp.Turns != 3 || len(inbox) != 1 {
		t.Fatalf("after reset: cp=%+v hist=%d inbox=%d err=%v; want fresh, turns kept, message still queued", cp, len(hist), len(inbox), err)
	}
	if plans, _ := s.Plans(ctx, "web/a"); len(plans) != 0 {
		t.Fatalf("plans after reset = %d, want 0", len(plans))
	}
	n, old, err := s.Archived(ctx, "web/a", 1)
	if err != nil || n != 1 || len(old) != 200 || old[199].Message.Content != "m199" {
		t.Fatalf("Archived = %d, %d entries, %v; want 1 archive of 200", n, len(old), err)
	}
	if err := s.Commit(ctx, Round("web/a", 0, "fresh")); err != nil {
		t.Fatalf("a round after reset: %v", err)
	}
}

func testChatRecords(t *testing.T, s Store, own func(string)) {
	ctx := context.Background()
	own("web/r1")
	own("web/r2")
	for _, f := range []struct {
		name string
		save func(context.Context, string, []byte) error
		load func(context.Context, string) ([]byte, error)
	}{{"board", func(ctx context.Context, key string, data []byte) error { return s.SaveBoard(ctx, key, data, false) }, s.Board},
		{"cards", s.SaveCards, s.Cards}, {"listing", s.SaveListing, s.Listing}} {
		if got, err := f.load(ctx, "web/r1"); err != nil || got != nil {
			t.Fatalf("%s of a new session = %q, %v; want nil", f.name, got, err)
		}
		if err := f.save(ctx, "web/r1", []byte(f.name+" 1")); err != nil {
			t.Fatal(err)
		}
		if err := f.save(ctx, "web/r1", []byte(f.name+" 2")); err != nil {
			t.Fatal(err)
		}
		if got, err := f.load(ctx, "web/r1"); err != nil || string(got) != f.name+" 2" {
			t.Fatalf("%s = %q, %v", f.name, got, err)
		}
	}
	if err := s.SaveBoard(ctx, "web/r2", []byte("b2"), true); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Board(ctx, "web/r2"); err != nil || string(got) != "b2" {
		t.Fatalf("board of web/r2 = %q, %v", got, err)
	}
	if keys, err := s.PendingBoards(ctx); err != nil || !slices.Equal(keys, []string{"web/r2"}) {
		t.Fatalf("PendingBoards = %q, %v; want web/r2 alone", keys, err)
	}
}

// testIndexes: what a start lists (Resumable, Undelivered,
// PendingBoards) follows the writes that change it, in the same write:
// a message queued, a turn running and ending, log entries past the
// cursor and the cursor reaching them, a board saved with work left and
// then without.
func testIndexes(t *testing.T, s Store, own func(string)) {
	ctx := context.Background()
	const key = "web/idx"
	own(key)
	want := func(what string, list func(context.Context) ([]string, error), in bool) {
		t.Helper()
		keys, err := list(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := slices.Contains(keys, key); got != in {
			t.Fatalf("%s = %q; want %s in it: %t", what, keys, key, in)
		}
	}
	want("Resumable of a new session", s.Resumable, false)
	in, err := s.Enqueue(ctx, key, agent.Inbound{Text: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	want("Resumable with a message queued", s.Resumable, true)

	r := Round(key, 0, "hello")
	r.Drained = []uint64{in.ID}
	r.Log = []agent.LogEntry{{Seq: 1, Kind: agent.TurnStarted, Turn: 1}}
	r.Checkpoint.LogSeq = 1
	if err := s.Commit(ctx, r); err != nil {
		t.Fatal(err)
	}
	want("Resumable while the turn runs", s.Resumable, true)
	want("Undelivered with an entry past the cursor", s.Undelivered, true)

	r = Round(key, 1, "done")
	r.Checkpoint.State = agent.Idle
	r.Log = []agent.LogEntry{{Seq: 2, Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done}}
	r.Checkpoint.LogSeq = 2
	if err := s.Commit(ctx, r); err != nil {
		t.Fatal(err)
	}
	want("Resumable once the turn ended, nothing queued", s.Resumable, false)
	if err := s.SaveDelivered(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	want("Undelivered with the cursor one short", s.Undelivered, true)
	if err := s.SaveDelivered(ctx, key, 2); err != nil {
		t.Fatal(err)
	}
	want("Undelivered with the cursor at the end", s.Undelivered, false)

	if err := s.UpdateCheckpoint(ctx, key, func(cp *agent.Checkpoint) error { cp.State = agent.Waiting; return nil }); err != nil {
		t.Fatal(err)
	}
	want("Resumable while it waits for an approval", s.Resumable, true)
	if err := s.UpdateCheckpoint(ctx, key, func(cp *agent.Checkpoint) error { cp.State = agent.Idle; return nil }); err != nil {
		t.Fatal(err)
	}
	want("Resumable once the wait is over", s.Resumable, false)

	if err := s.SaveBoard(ctx, key, []byte("{}"), true); err != nil {
		t.Fatal(err)
	}
	want("PendingBoards with work left", s.PendingBoards, true)
	if err := s.SaveBoard(ctx, key, []byte("{}"), false); err != nil {
		t.Fatal(err)
	}
	want("PendingBoards once it is done", s.PendingBoards, false)
}

func testOutbox(t *testing.T, s Store, own func(string)) {
	ctx := context.Background()
	own("web/o")
	ids, err := s.AddOutbox(ctx, "web/o", [][]byte{[]byte("one"), []byte("two"), []byte("three")})
	if err != nil || len(ids) != 3 || ids[0] >= ids[1] || ids[1] >= ids[2] {
		t.Fatalf("AddOutbox = %v, %v; want three increasing ids", ids, err)
	}
	if err := s.DeleteOutbox(ctx, "web/o", ids[1]); err != nil {
		t.Fatal(err)
	}
	var items [][]byte
	if err := s.Outbox(ctx, func(_ uint64, d []byte) { items = append(items, d) }); err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(items, [][]byte{[]byte("one"), []byte("three")}, bytes.Equal) {
		t.Fatalf("Outbox = %q; want one, three", items)
	}
}

func testFirstSeen(t *testing.T, s Store, _ func(string)) {
	ctx := context.Background()
	first, err := s.FirstSeen(ctx, "slack/Ev1", time.Hour)
	if err != nil || !first {
		t.Fatalf("first sighting = %v, %v", first, err)
	}
	again, err := s.FirstSeen(ctx, "slack/Ev1", time.Hour)
	if err != nil || again {
		t.Fatalf("second sighting = %v, %v; want false", again, err)
	}
	if other, _ := s.FirstSeen(ctx, "slack/Ev2", time.Hour); !other {
		t.Fatal("another event was taken for a repeat")
	}
}

// testEnqueueOnce: a message with an Event is queued once; the second
// Enqueue of it is agent.ErrDuplicate and queues nothing, and the Event
// is a dedupe key like FirstSeen's, both ways.
func testEnqueueOnce(t *testing.T, s Store, own func(string)) {
	ctx := context.Background()
	own("web/once")
	if _, err := s.Enqueue(ctx, "web/once", agent.Inbound{Text: "hi", Event: "discord/msg/1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, "web/once", agent.Inbound{Text: "hi", Event: "discord/msg/1"}); !errors.Is(err, agent.ErrDuplicate) {
		t.Fatalf("the second Enqueue of an event = %v, want agent.ErrDuplicate", err)
	}
	if first, err := s.FirstSeen(ctx, "discord/msg/1", time.Hour); err != nil || first {
		t.Fatalf("FirstSeen of a queued event = %v, %v; want seen", first, err)
	}
	if first, err := s.FirstSeen(ctx, "discord/msg/2", time.Hour); err != nil || !first {
		t.Fatalf("FirstSeen = %v, %v", first, err)
	}
	if _, err := s.Enqueue(ctx, "web/once", agent.Inbound{Text: "two", Event: "discord/msg/2"}); !errors.Is(err, agent.ErrDuplicate) {
		t.Fatalf("Enqueue of an event FirstSeen took = %v, want agent.ErrDuplicate", err)
	}
	if _, err := s.Enqueue(ctx, "web/once", agent.Inbound{Text: "three"}); err != nil {
		t.Fatal(err) // no Event: no dedupe
	}
	inbox, err := s.Inbox(ctx, "web/once")
	if err != nil || len(inbox) != 2 || inbox[0].Text != "hi" || inbox[1].Text != "three" {
		t.Fatalf("Inbox = %+v, %v; want hi and three", inbox, err)
	}
	// A refused message creates no session.
	if _, err := s.Enqueue(ctx, "web/never", agent.Inbound{Text: "x", Event: "discord/msg/1"}); !errors.Is(err, agent.ErrDuplicate) {
		t.Fatalf("Enqueue = %v, want agent.ErrDuplicate", err)
	}
	if cp, hist, inbox, err := s.Load(ctx, "web/never"); err != nil || cp != nil || len(hist) != 0 || len(inbox) != 0 {
		t.Fatalf("Load of the refused session = %v, %d, %d, %v; want nothing", cp, len(hist), len(inbox), err)
	}
}

// testMarks: read marks are kept by name, replaced whole, and need no
// session (they are saved by whichever process holds the gateway).
func testMarks(t *testing.T, s Store, _ func(string)) {
	ctx := context.Background()
	if got, err := s.Marks(ctx, "discord"); err != nil || got != nil {
		t.Fatalf("Marks of a name never saved = %q, %v; want nil", got, err)
	}
	for _, v := range []string{`{"a":1}`, `{"b":2}`} {
		if err := s.SaveMarks(ctx, "discord", []byte(v)); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Marks(ctx, "discord"); err != nil || string(got) != v {
			t.Fatalf("Marks = %q, %v; want %s", got, err, v)
		}
	}
	if got, err := s.Marks(ctx, "slack"); err != nil || got != nil {
		t.Fatalf("Marks of another name = %q, %v; want nil", got, err)
	}
}

// own is called once per session key first (a fenced store takes it).
// BenchRounds commits b.N rounds spread over sessions sessions committing
// at once (each a user message and an answer, a plan revision every
// other round), the shape of a busy deployment, and reports rounds/s.
func BenchRounds(b *testing.B, s Store, sessions int, own func(key string)) {
	ctx := context.Background()
	keys := make([]string, sessions)
	for i := range keys {
		keys[i] = fmt.Sprintf("slack/T1/C%03d/1700000000.000100", i)
		if own != nil {
			own(keys[i])
		}
	}
	per := b.N/sessions + 1
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for _, key := range keys {
		wg.Go(func() {
			for i := range per {
				r := Round(key, 2*i, fmt.Sprint("message ", i), strings.Repeat("answer ", 40))
				if i%2 == 0 {
					r.Checkpoint.Revision = int64(i/2 + 1)
					r.Plans = []agent.PlanRevision{{Revision: r.Checkpoint.Revision, Items: []todo.Item{{Content: "step one", Status: todo.InProgress}, {Content: "step two", Status: todo.Pending}}}}
				} else {
					r.Checkpoint.Revision = int64(i/2 + 1)
				}
				if err := s.Commit(ctx, r); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(per*sessions)/time.Since(start).Seconds(), "rounds/s")
}

// testFollowUps: follow-ups of a thread without a session are held and
// taken once, in their order (not the order they came in); one order is
// held once; a session with a plan board holds none (DESIGN §14).
func testFollowUps(t *testing.T, s Store, own func(string)) {
	ctx := context.Background()
	const key, other = "slack/T1/C1/1.000100", "slack/T1/C1/2.000100"
	for _, f := range []struct{ order, data string }{
		{"3", "third"}, {"1", "first"}, {"2", "second, sent twice"}, {"2", "second"},
	} {
		held, err := s.HoldFollowUp(ctx, key, f.order, []byte(f.data), time.Hour)
		if err != nil || !held {
			t.Fatalf("HoldFollowUp(%s) = %v, %v; want held", f.order, held, err)
		}
	}
	if held, err := s.HoldFollowUp(ctx, other, "1", []byte("elsewhere"), time.Hour); err != nil || !held {
		t.Fatalf("HoldFollowUp in another thread = %v, %v; want held", held, err)
	}
	got, err := s.TakeFollowUps(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if g := string(bytes.Join(got, []byte("|"))); g != "first|second|third" {
		t.Errorf("taken %q, want first|second|third", g)
	}
	if again, err := s.TakeFollowUps(ctx, key); err != nil || len(again) != 0 {
		t.Errorf("taken again = %q, %v; want nothing", again, err)
	}
	own(other)
	if err := s.SaveBoard(ctx, other, []byte("board"), false); err != nil {
		t.Fatal(err)
	}
	if held, err := s.HoldFollowUp(ctx, other, "2", []byte("for the session"), time.Hour); err != nil || held {
		t.Errorf("HoldFollowUp for a session with a board = %v, %v; want not held", held, err)
	}
	if got, err := s.TakeFollowUps(ctx, other); err != nil || string(bytes.Join(got, []byte("|"))) != "elsewhere" {
		t.Errorf("the other thread's follow-ups = %q, %v; want the one held before its board", got, err)
	}
}

// testFollowUpsExpire: a follow-up no session took within its ttl is not
// taken.
func testFollowUpsExpire(t *testing.T, s Store, _ func(string)) {
	ctx := context.Background()
	const key = "slack/T1/C1/3.000100"
	if held, err := s.HoldFollowUp(ctx, key, "1", []byte("expired"), time.Millisecond); err != nil || !held {
		t.Fatalf("HoldFollowUp = %v, %v", held, err)
	}
	if held, err := s.HoldFollowUp(ctx, key, "2", []byte("in time"), time.Hour); err != nil || !held {
		t.Fatalf("HoldFollowUp = %v, %v", held, err)
	}
	time.Sleep(20 * time.Millisecond) // past the first one's millisecond
	got, err := s.TakeFollowUps(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if g := string(bytes.Join(got, []byte("|"))); g != "in time" {
		t.Errorf("taken %q, want only the one in time", g)
	}
}

// testSpend: a round's Spend is added to its person's UTC day in the
// round's commit (DESIGN §18), across sessions; a refused round adds
// nothing; rounds of one person committed at once from many sessions all
// count.
func testSpend(t *testing.T, s Store, own func(string)) {
	ctx := context.Background()
	const d1, d2 = "2026-03-01", "2026-03-02"
	keys := []string{"slack/T1/C1/1.0", "discord/42", "web/big"}
	for i := range 6 {
		keys = append(keys, fmt.Sprint("web/p", i))
	}
	for _, k := range keys {
		own(k)
	}
	if n, err := s.Spent(ctx, "slack/U1", d1); err != nil || n != 0 {
		t.Fatalf("Spent before any round = %d, %v; want 0", n, err)
	}
	charge := func(r *agent.Round, person, day string, tokens int64) *agent.Round {
		r.Spend = &agent.Spend{Person: person, Day: day, Tokens: tokens}
		return r
	}
	for i, r := range []*agent.Round{
		charge(Round(keys[0], 0, "a"), "slack/U1", d1, 100),
		charge(Round(keys[1], 0, "b"), "slack/U1", d1, 50), // another session, the same person
		charge(Round(keys[0], 1, "c"), "slack/U2", d1, 7),
		charge(Round(keys[1], 1, "d"), "slack/U1", d2, 5), // the next day
		Round(keys[0], 2, "no model request"),
	} {
		if err := s.Commit(ctx, r); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	if err := s.Commit(ctx, charge(Round(keys[0], 9, "x"), "slack/U1", d1, 1000)); err == nil {
		t.Fatal("a round at base 9 after 3 entries was accepted")
	}
	// A round too big for one etcd transaction charges once, with its
	// last part.
	var big []string
	for i := range 300 {
		big = append(big, fmt.Sprintf("%03d %s", i, strings.Repeat("x", 8000)))
	}
	if err := s.Commit(ctx, charge(Round(keys[2], 0, big...), "discord/9", d1, 3)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		person, day string
		want        int64
	}{{"slack/U1", d1, 150}, {"slack/U2", d1, 7}, {"slack/U1", d2, 5}, {"discord/9", d1, 3}, {"slack/U3", d1, 0}} {
		if n, err := s.Spent(ctx, c.person, c.day); err != nil || n != c.want {
			t.Errorf("Spent(%s, %s) = %d, %v; want %d", c.person, c.day, n, err, c.want)
		}
	}
	var wg sync.WaitGroup
	for _, k := range keys[3:] {
		wg.Go(func() {
			for i := range 5 {
				if err := s.Commit(ctx, charge(Round(k, i, "m"), "slack/U3", d1, 3)); err != nil {
					t.Errorf("%s round %d: %v", k, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n, err := s.Spent(ctx, "slack/U3", d1); err != nil || n != 90 {
		t.Errorf("Spent after 30 rounds of 3 tokens in 6 sessions at once = %d, %v; want 90", n, err)
	}
	got, err := s.SpentOn(ctx, d1)
	want := []agent.Spend{{Person: "discord/9", Day: d1, Tokens: 3}, {Person: "slack/U1", Day: d1, Tokens: 150}, {Person: "slack/U2", Day: d1, Tokens: 7}, {Person: "slack/U3", Day: d1, Tokens: 90}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("SpentOn(%s) = %+v, %v; want %+v", d1, got, err, want)
	}
	if got, err := s.SpentOn(ctx, "2026-02-28"); err != nil || len(got) != 0 {
		t.Errorf("SpentOn a day with nothing = %+v, %v; want none", got, err)
	}
}

// testReserve: reservations of one person's day made at once (parallel
// threads, replicas) never pass the budget together; a reservation is
// shrunk to what is left, refused below need with the day's count, given
// back by a negative settlement, and the count never goes below 0
// (DESIGN §18).
func testReserve(t *testing.T, s Store, own func(string)) {
	ctx := context.Background()
	const person, day, budget = "slack/U9", "2026-03-03", 2000
	var wg sync.WaitGroup
	var mu sync.Mutex
	var granted []int64
	refused := 0
	for range 24 {
		wg.Go(func() {
			n, spent, err := s.Reserve(ctx, person, day, 300, 1900, budget)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, agent.ErrOverBudget):
				refused++
				if spent+300 <= budget {
					t.Errorf("refused with %d spent: 300 more fit %d", spent, budget)
				}
			case err != nil:
				t.Errorf("Reserve: %v", err)
			default:
				granted = append(granted, n)
			}
		})
	}
	wg.Wait()
	sum := int64(0)
	for _, n := range granted {
		sum += n
	}
	// 1900, then the 100 left is less than the 300 needed.
	if sum > budget || len(granted) != 1 || granted[0] != 1900 || refused != 23 {
		t.Fatalf("24 reservations at once: granted %v (sum %d of %d), %d refused; want [1900] and 23 refused", granted, sum, budget, refused)
	}
	// The request used 700: the round's commit settles with -1200.
	own("web/reserve")
	r := Round("web/reserve", 0, "answer")
	r.Spend = &agent.Spend{Person: person, Day: day, Tokens: 700 - 1900}
	if err := s.Commit(ctx, r); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Spent(ctx, person, day); err != nil || n != 700 {
		t.Fatalf("Spent after settling = %d, %v; want 700", n, err)
	}
	// 1300 left: a want of 1900 is shrunk to it.
	if n, spent, err := s.Reserve(ctx, person, day, 300, 1900, budget); err != nil || n != 1300 || spent != 700 {
		t.Fatalf("Reserve with 1300 left = %d, %d, %v; want 1300, 700", n, spent, err)
	}
	if _, spent, err := s.Reserve(ctx, person, day, 1, 1, budget); !errors.Is(err, agent.ErrOverBudget) || spent != budget {
		t.Fatalf("Reserve on a full day = %d, %v; want ErrOverBudget with %d", spent, err, budget)
	}
	// A reservation no commit settles is given back; never below 0.
	if _, _, err := s.Reserve(ctx, person, day, -5000, -5000, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Spent(ctx, person, day); err != nil || n != 0 {
		t.Fatalf("Spent after giving back more than was charged = %d, %v; want 0", n, err)
	}
}

// testLog: a round's log entries are written with it, read back in
// order from any point, kept as they were across a repeated commit and
// a reset, and the delivery cursor is the session's own.
func testLog(t *testing.T, s Store, own func(string)) {
	own("web/log")
	own("web/other")
	logWritten(t, s)
	logCursor(t, s)
	logAfterReset(t, s)
}

// logWritten commits three entries to web/log in two rounds (the first
// twice) and reads them back, whole and after a sequence number.
func logWritten(t *testing.T, s Store) {
	t.Helper()
	ctx := context.Background()
	if got, err := s.Log(ctx, "web/log", 0); err != nil || len(got) != 0 {
		t.Fatalf("Log of a new session = %v, %v; want none", got, err)
	}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	entry := func(seq int64, kind agent.EventKind) agent.LogEntry {
		return agent.LogEntry{Seq: seq, Kind: kind, Turn: 1, Text: fmt.Sprint("entry ", seq), At: at,
			Plan: []todo.Item{{Content: "draft", Status: todo.InProgress}}, Revision: seq}
	}
	r := Round("web/log", 0, "task")
	r.Log = []agent.LogEntry{entry(1, agent.TurnStarted), entry(2, agent.PlanChanged)}
	r.Checkpoint.LogSeq = 2
	if err := s.Commit(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, r); err != nil { // repeated, as db.Batch may
		t.Fatal(err)
	}
	r = Round("web/log", 1, "answer")
	r.Log = []agent.LogEntry{entry(3, agent.TurnEnded)}
	r.Checkpoint.LogSeq = 3
	if err := s.Commit(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, err := s.Log(ctx, "web/log", 0)
	if err != nil || len(got) != 3 {
		t.Fatalf("Log = %d entries, %v; want 3", len(got), err)
	}
	for i, e := range got {
		want := entry(int64(i+1), []agent.EventKind{agent.TurnStarted, agent.PlanChanged, agent.TurnEnded}[i])
		if e.Seq != want.Seq || e.Kind != want.Kind || e.Text != want.Text || !e.At.Equal(at) || len(e.Plan) != 1 || e.Plan[0] != want.Plan[0] {
			t.Errorf("entry %d = %+v, want %+v", i+1, e, want)
		}
	}
	if got, err := s.Log(ctx, "web/log", 2); err != nil || len(got) != 1 || got[0].Seq != 3 {
		t.Errorf("Log after 2 = %+v, %v; want entry 3", got, err)
	}
	if got, err := s.Log(ctx, "web/other", 0); err != nil || len(got) != 0 {
		t.Errorf("another session's log = %+v, %v; want none", got, err)
	}
}

// logCursor moves web/log's cursor to 2 of its 3 entries: the session is
// left undelivered, and the entries behind the cursor are compacted.
func logCursor(t *testing.T, s Store) {
	t.Helper()
	ctx := context.Background()
	if n, err := s.Delivered(ctx, "web/log"); err != nil || n != 0 {
		t.Errorf("Delivered before any = %d, %v; want 0", n, err)
	}
	if err := s.SaveDelivered(ctx, "web/log", 2); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Delivered(ctx, "web/log"); err != nil || n != 2 {
		t.Errorf("Delivered = %d, %v; want 2", n, err)
	}
	if n, err := s.Delivered(ctx, "web/other"); err != nil || n != 0 {
		t.Errorf("another session's cursor = %d, %v; want 0", n, err)
	}
	if keys, err := s.Undelivered(ctx); err != nil || !slices.Equal(keys, []string{"web/log"}) {
		t.Errorf("Undelivered with the cursor at 2 of 3 = %q, %v; want web/log", keys, err)
	}
	// Entries the cursor passed are compacted to what the thread's
	// plan is folded from: of 1 and 2, both with a plan, the last with a
	// plan stays, and so does 1, the last turn's start; 3 is past the
	// cursor.
	if got, err := s.Log(ctx, "web/log", 0); err != nil || len(got) != 3 {
		t.Errorf("Log with the cursor at 2 = %+v, %v; want entries 1 to 3", got, err)
	}
}

// logAfterReset archives web/log: a reset keeps the log, its numbering
// and its cursor.
func logAfterReset(t *testing.T, s Store) {
	t.Helper()
	ctx := context.Background()
	if err := s.Archive(ctx, "web/log"); err != nil {
		t.Fatal(err)
	}
	cp, _, _, err := s.Load(ctx, "web/log")
	if err != nil || cp == nil || cp.LogSeq != 3 {
		t.Fatalf("after a reset the record's LogSeq = %+v, %v; want 3", cp, err)
	}
	if got, err := s.Log(ctx, "web/log", 0); err != nil || len(got) != 3 {
		t.Errorf("after a reset Log = %d entries, %v; want 3", len(got), err)
	}
	if n, err := s.Delivered(ctx, "web/log"); err != nil || n != 2 {
		t.Errorf("after a reset Delivered = %d, %v; want 2", n, err)
	}
	if err := s.SaveDelivered(ctx, "web/log", 3); err != nil {
		t.Fatal(err)
	}
	if keys, err := s.Undelivered(ctx); err != nil || len(keys) != 0 {
		t.Errorf("Undelivered with everything delivered = %q, %v; want none", keys, err)
	}
}

// testLogCompacted: a session's log does not grow with its turns once
// delivered (DESIGN §1): five turns of 40 revisions of a 20-item plan,
// each with an approval, keep behind the cursor only the last plan
// revision and the approval still open, at most 32 KB; what is past the
// cursor is all still there.
func testLogCompacted(t *testing.T, s Store, own func(string)) {
	ctx := context.Background()
	const key = "web/long"
	own(key)
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var items []todo.Item
	for i := range 20 {
		items = append(items, todo.Item{Content: fmt.Sprintf("step %02d of a long plan, written out as a model writes it", i), Status: todo.Pending})
	}
	var seq int64
	next := func(kind agent.EventKind, turn int64) agent.LogEntry {
		seq++
		return agent.LogEntry{Seq: seq, Kind: kind, Turn: turn, Plan: items, Revision: seq, At: at}
	}
	base := 0
	for turn := int64(1); turn <= 5; turn++ {
		r := Round(key, base, fmt.Sprint("turn ", turn))
		base++
		r.Log = append(r.Log, next(agent.TurnStarted, turn))
		for range 40 {
			r.Log = append(r.Log, next(agent.PlanChanged, turn))
		}
		need := next(agent.ApprovalNeeded, turn)
		need.Approval = &agent.Approval{CallID: "call_1", Turn: turn, Tool: "fs__write_file"}
		r.Log = append(r.Log, need)
		if turn < 5 {
			done := next(agent.ApprovalDecided, turn)
			done.Approval, done.Decision = need.Approval, &agent.Decision{Allow: true}
			r.Log = append(r.Log, done, next(agent.TurnEnded, turn))
		}
		r.Checkpoint.LogSeq = seq
		if err := s.Commit(ctx, r); err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
	}
	all, err := s.Log(ctx, key, 0)
	if err != nil || int64(len(all)) != seq {
		t.Fatalf("Log before delivery = %d entries, %v; want %d", len(all), err, seq)
	}
	before := 0
	for _, e := range all {
		raw, _ := json.Marshal(e)
		before += len(raw)
	}
	// Delivered up to the last turn's open approval, the last entry but
	// one plan revision more, written now.
	r := Round(key, base, "late revision")
	r.Log = []agent.LogEntry{next(agent.PlanChanged, 5)}
	r.Checkpoint.LogSeq = seq
	if err := s.Commit(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveDelivered(ctx, key, seq-1); err != nil {
		t.Fatal(err)
	}
	kept, err := s.Log(ctx, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []agent.EventKind
	size := 0
	for _, e := range kept {
		kinds = append(kinds, e.Kind)
		raw, _ := json.Marshal(e)
		size += len(raw)
	}
	if want := []agent.EventKind{agent.ApprovalDecided, agent.TurnEnded, agent.TurnStarted, agent.PlanChanged, agent.ApprovalNeeded, agent.PlanChanged}; !slices.Equal(kinds, want) || kept[5].Seq != seq {
		t.Errorf("the log after delivery keeps %v (%d entries), want the last decision, the last turn's end and start, its last revision, the open approval (the last entry with a plan behind the cursor) and the undelivered revision", kinds, len(kept))
	}
	t.Logf("the log of 5 turns x 40 revisions of a 20-item plan: %d entries, %d bytes before delivery; %d entries, %d bytes kept once delivered", len(all), before, len(kept), size)
	if size > 32<<10 {
		t.Errorf("the delivered log of 5 turns x 40 revisions keeps %d bytes, want at most 32 KB", size)
	}
	if got, err := s.Log(ctx, key, seq-1); err != nil || len(got) != 1 || got[0].Seq != seq {
		t.Errorf("Log past the cursor = %+v, %v; want the undelivered revision", got, err)
	}
}

// BenchBudget measures what the daily budget's check costs a model
// request (DESIGN §18): "spent" reads the person's day, as the check did
// before reservations; "reserve" is the reservation made now, one
// transaction that reads the day and charges it (its settlement rides in
// the round's commit, which wrote a Spend before as well). Compare the
// two in one run: the difference is the latency a reservation adds to
// each request.
func BenchBudget(b *testing.B, s Store) {
	ctx := context.Background()
	const day = "2026-03-04"
	b.Run("spent", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := s.Spent(ctx, fmt.Sprint("slack/U", i%24), day); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reserve", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, _, err := s.Reserve(ctx, fmt.Sprint("slack/U", i%24), day, 300, 1900, 1<<40); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// testInstallations: Slack installations (DESIGN §14) are kept by id,
// listed, changed by compare-and-set (refreshes from several goroutines,
// as from several replicas, each see the last one's record, so exactly
// one writes each new value), deleted by an update to nil, and an error
// from the update writes nothing.
func testInstallations(t *testing.T, s Store, _ func(string)) {
	ctx := context.Background()
	if got, err := s.Installation(ctx, "T1"); err != nil || got != nil {
		t.Fatalf("a missing installation: %q, %v", got, err)
	}
	for _, id := range []string{"T2", "E1", "T1"} {
		if err := s.UpdateInstallation(ctx, id, func(cur []byte) ([]byte, error) {
			if cur != nil {
				t.Errorf("%s: fn got %q for a new installation", id, cur)
			}
			return []byte("v0 " + id), nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if ids, err := s.Installations(ctx); err != nil || !slices.Equal(ids, []string{"E1", "T1", "T2"}) {
		t.Fatalf("installations %v, %v; want [E1 T1 T2]", ids, err)
	}
	// Eight refreshers race to move T1 from v0 to v1: one does, the
	// others find v1 and leave it.
	var wg sync.WaitGroup
	var wrote atomic.Int32
	for range 8 {
		wg.Go(func() {
			err := s.UpdateInstallation(ctx, "T1", func(cur []byte) ([]byte, error) {
				if string(cur) != "v0 T1" {
					return cur, nil // refreshed already
				}
				wrote.Add(1)
				return []byte("v1 T1"), nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got, _ := s.Installation(ctx, "T1"); string(got) != "v1 T1" {
		t.Errorf("T1 after the refreshes: %q", got)
	}
	if n := wrote.Load(); n < 1 {
		t.Errorf("no refresher wrote")
	}
	// No update is lost: eight adds of one each, at once, make eight.
	for range 8 {
		wg.Go(func() {
			err := s.UpdateInstallation(ctx, "E1", func(cur []byte) ([]byte, error) {
				return append(cur, '+'), nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got, _ := s.Installation(ctx, "E1"); string(got) != "v0 E1++++++++" {
		t.Errorf("E1 after eight concurrent updates: %q, want eight +", got)
	}
	errNope := errors.New("nope")
	if err := s.UpdateInstallation(ctx, "T2", func([]byte) ([]byte, error) { return []byte("x"), errNope }); !errors.Is(err, errNope) {
		t.Errorf("fn's error: %v", err)
	}
	if got, _ := s.Installation(ctx, "T2"); string(got) != "v0 T2" {
		t.Errorf("T2 after a failed update: %q", got)
	}
	if err := s.UpdateInstallation(ctx, "T2", func([]byte) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if ids, _ := s.Installations(ctx); !slices.Equal(ids, []string{"E1", "T1"}) {
		t.Errorf("installations after deleting T2: %v", ids)
	}
}
