package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	bolt "go.etcd.io/bbolt"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/todo"
)

func openTemp(t testing.TB) *DB {
	t.Helper()
	db, err := Open(filepath.Join(t.TempDir(), "sub", "pinplan.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func round(key string, base int, texts ...string) *agent.Round {
	r := &agent.Round{Base: base}
	for _, s := range texts {
		r.Append = append(r.Append, agent.Entry{Message: openai.ChatCompletionMessage{Role: "user", Content: s}})
	}
	r.Checkpoint = agent.Checkpoint{Key: key, State: agent.Running, HistoryLen: base + len(texts)}
	return r
}

func TestCommitLoadAndIdempotence(t *testing.T) {
	ctx := context.Background()
	db := openTemp(t)
	in, err := db.Enqueue(ctx, "web/1", agent.Inbound{Text: "hello"})
	if err != nil || in.ID != 1 {
		t.Fatalf("Enqueue = %+v, %v", in, err)
	}
	r := round("web/1", 0, "hello", "answer")
	r.Drained = []uint64{in.ID}
	r.Plans = []agent.PlanRevision{{Revision: 1, Items: []todo.Item{{Content: "a", Status: todo.Pending}}}}
	r.Checkpoint.Revision = 1
	for i := 0; i < 2; i++ { // a repeated commit (as Batch may run it) changes nothing
		if err := db.Commit(ctx, r); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	cp, hist, inbox, err := db.Load(ctx, "web/1")
	if err != nil {
		t.Fatal(err)
	}
	if cp.HistoryLen != 2 || len(hist) != 2 || hist[1].Message.Content != "answer" || len(inbox) != 0 || cp.Revision != 1 {
		t.Errorf("got cp=%+v hist=%d inbox=%d", cp, len(hist), len(inbox))
	}
	// A round that does not follow the stored history is refused whole.
	if err := db.Commit(ctx, round("web/1", 5, "x")); !errors.Is(err, ErrConflict) {
		t.Errorf("out-of-order commit: got %v, want ErrConflict", err)
	}
	if err := db.Commit(ctx, round("web/1", 2, "next")); err != nil {
		t.Fatal(err)
	}
	keys, err := db.Resumable(ctx)
	if err != nil || len(keys) != 1 || keys[0] != "web/1" {
		t.Errorf("Resumable = %v, %v", keys, err)
	}
	plans, err := db.Plans(ctx, "web/1")
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) != 1 {
		t.Errorf("plans = %d, want 1", len(plans))
	}
	if err := db.Check(); err != nil {
		t.Errorf("Check: %v", err)
	}
}

func TestResumableIncludesQueued(t *testing.T) {
	ctx := context.Background()
	db := openTemp(t)
	r := round("web/idle", 0, "x")
	r.Checkpoint.State = agent.Idle
	if err := db.Commit(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Enqueue(ctx, "web/queued", agent.Inbound{Text: "waiting"}); err != nil {
		t.Fatal(err)
	}
	keys, err := db.Resumable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != "web/queued" {
		t.Errorf("Resumable = %v, want [web/queued]", keys)
	}
}

func TestLockedFileNamesIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locked.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	start := time.Now()
	_, err = Open(path, Options{LockTimeout: 200 * time.Millisecond})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Fatalf("second open: %v, want ErrLocked naming %s", err, path)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("second open hung for %s", time.Since(start))
	}
}

func TestCorruptFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "corrupt.db")
	if err := os.WriteFile(path, []byte(strings.Repeat("not a bbolt file ", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, Options{})
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("corrupt file: got %v, want an error naming it", err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new.db")
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		m, err := tx.CreateBucketIfNotExists(bMeta)
		if err != nil {
			return err
		}
		return m.Put(kSchema, []byte("99"))
	})
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "schema version 99") {
		t.Errorf("got %v, want a schema version error", err)
	}
}

func TestDedupe(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	db, err := Open(filepath.Join(t.TempDir(), "d.db"), Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i, want := range []bool{true, false, false} {
		if got, err := db.FirstSeen(ctx, "slack/Ev1", time.Hour); err != nil || got != want {
			t.Errorf("sighting %d: got %t, %v; want %t", i, got, err, want)
		}
	}
	now = now.Add(2 * time.Hour)
	if n, err := db.PruneDedupe(ctx); err != nil || n != 1 {
		t.Errorf("pruned %d, %v; want 1", n, err)
	}
	if got, err := db.FirstSeen(ctx, "slack/Ev1", time.Hour); err != nil || !got {
		t.Errorf("expired key: first sighting %t, %v; want true", got, err)
	}
}

func TestBackupAndBoard(t *testing.T) {
	ctx := context.Background()
	db := openTemp(t)
	if err := db.Commit(ctx, round("web/b", 0, "kept")); err != nil {
		t.Fatal(err)
	}
	if err := db.SaveBoard(ctx, "web/b", []byte(`{"ref":"m1"}`), false); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "backup.db")
	if n, err := db.Backup(dst); err != nil || n == 0 {
		t.Fatalf("Backup = %d, %v", n, err)
	}
	copyDB, err := Open(dst, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer copyDB.Close()
	_, hist, _, err := copyDB.Load(ctx, "web/b")
	if err != nil {
		t.Fatal(err)
	}
	board, err := copyDB.Board(ctx, "web/b")
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 1 || string(board) != `{"ref":"m1"}` {
		t.Errorf("backup lost data: hist=%d board=%s", len(hist), board)
	}
	if err := copyDB.Check(); err != nil {
		t.Error(err)
	}
	infos, err := db.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Checkpoint.Key != "web/b" || string(infos[0].Board) != `{"ref":"m1"}` {
		t.Errorf("Sessions = %+v", infos)
	}
}

func TestOutboxKeepsOrderAcrossReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "outbox.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := db.AddOutbox(ctx, "web/s00", [][]byte{[]byte("one"), []byte("two"), []byte("three")})
	if err != nil || len(ids) != 3 || ids[0] >= ids[1] || ids[1] >= ids[2] {
		t.Fatalf("AddOutbox = %v, %v; want three increasing ids", ids, err)
	}
	if err := db.DeleteOutbox(ctx, "web/s00", ids[1]); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got []string
	if err := db.Outbox(ctx, func(_ uint64, data []byte) { got = append(got, string(data)) }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "one,three" {
		t.Errorf("outbox after reopen = %q, want [one three]", got)
	}
}

// TestConcurrentCommits runs lone and concurrent commits (the Update and
// the Batch paths of write) with conflicting rounds among them: every
// session ends with its whole history in order and each conflict is
// refused alone.
func TestConcurrentCommits(t *testing.T) {
	ctx := context.Background()
	db, err := Open(filepath.Join(t.TempDir(), "c.db"), Options{BatchDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// Lone: the Update path.
	if err := db.Commit(ctx, round("web/lone", 0, "a")); err != nil {
		t.Fatal(err)
	}
	if err := db.Commit(ctx, round("web/lone", 3, "x")); !errors.Is(err, ErrConflict) {
		t.Errorf("lone out-of-order commit: got %v, want ErrConflict", err)
	}
	const sessions, rounds = 16, 25
	var wg sync.WaitGroup
	errs := make(chan error, 2*sessions*rounds)
	for s := range sessions {
		key := fmt.Sprintf("web/c%d", s)
		wg.Go(func() {
			for i := range rounds {
				if err := db.Commit(ctx, round(key, 2*i, fmt.Sprintf("q%d", i), fmt.Sprintf("a%d", i))); err != nil {
					errs <- fmt.Errorf("%s round %d: %w", key, i, err)
					return
				}
				// A stale round (a second process, a bug) in the same batch
				// is refused and does not take the others down.
				if err := db.Commit(ctx, round(key, 2*i+7, "stale")); !errors.Is(err, ErrConflict) {
					errs <- fmt.Errorf("%s stale round %d: got %v, want ErrConflict", key, i, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for s := range sessions {
		key := fmt.Sprintf("web/c%d", s)
		cp, hist, _, err := db.Load(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if cp == nil || cp.HistoryLen != 2*rounds || len(hist) != 2*rounds {
			t.Fatalf("%s: record %+v, %d entries; want %d", key, cp, len(hist), 2*rounds)
		}
		for i, e := range hist {
			want := fmt.Sprintf("q%d", i/2)
			if i%2 == 1 {
				want = fmt.Sprintf("a%d", i/2)
			}
			if e.Message.Content != want {
				t.Errorf("%s entry %d = %q, want %q", key, i, e.Message.Content, want)
			}
		}
	}
	if n := db.writes.Load(); n != 0 {
		t.Errorf("%d writes still counted in flight", n)
	}
	if err := db.Check(); err != nil {
		t.Error(err)
	}
}

// TestUpdateCheckpointCompareAndSet: the read, fn and the write are one
// transaction, so concurrent updates all land; an error from fn writes
// nothing and reaches the caller; the history length is Commit's.
func TestUpdateCheckpointCompareAndSet(t *testing.T) {
	ctx := context.Background()
	db := openTemp(t)
	var got *agent.Checkpoint
	if err := db.UpdateCheckpoint(ctx, "web/none", func(cp *agent.Checkpoint) error { got = cp; return nil }); err != nil || got != nil {
		t.Fatalf("no record: fn got %+v, err %v; want nil, nil", got, err)
	}
	if err := db.Commit(ctx, round("web/1", 0, "hello")); err != nil {
		t.Fatal(err)
	}
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			err := db.UpdateCheckpoint(ctx, "web/1", func(cp *agent.Checkpoint) error {
				if cp.Decisions == nil {
					cp.Decisions = map[string]agent.Decision{}
				}
				cp.Decisions[fmt.Sprint("call_", i)] = agent.Decision{Allow: true}
				return nil
			})
			if err != nil {
				t.Errorf("update %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	sentinel := errors.New("refused")
	for _, tc := range []struct {
		name string
		fn   func(*agent.Checkpoint) error
		want error
	}{
		{name: "fn refuses", fn: func(cp *agent.Checkpoint) error { cp.State = agent.Idle; return sentinel }, want: sentinel},
		{name: "history length changed", fn: func(cp *agent.Checkpoint) error { cp.HistoryLen++; return nil }, want: ErrConflict},
		{name: "key changed", fn: func(cp *agent.Checkpoint) error { cp.Key = "web/2"; return nil }, want: ErrConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := db.UpdateCheckpoint(ctx, "web/1", tc.fn); !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
	cp, _, _, err := db.Load(ctx, "web/1")
	if err != nil {
		t.Fatal(err)
	}
	if len(cp.Decisions) != n || cp.State != agent.Running || cp.HistoryLen != 1 || cp.Key != "web/1" {
		t.Errorf("got %d decisions, state %s, history %d, key %s; want %d, running, 1, web/1", len(cp.Decisions), cp.State, cp.HistoryLen, cp.Key, n)
	}
}
