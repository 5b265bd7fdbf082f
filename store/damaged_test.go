package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/todo"
)

// seedDamageDB writes a store file with sessions (history, plans, queued
// messages, boards), dedupe keys and outbox items, closes it and returns
// its path.
func seedDamageDB(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pinplan.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	text := strings.Repeat("a few words of a long conversation ", 30)
	for i := range 12 {
		key := fmt.Sprintf("web/%d", i)
		base := 0
		for j := range 5 {
			r := round(key, base, text, text)
			r.Plans = []agent.PlanRevision{{Revision: int64(j + 1), Items: []todo.Item{{Content: "step", Status: todo.InProgress}}}}
			r.Checkpoint.Revision = int64(j + 1)
			if err := db.Commit(ctx, r); err != nil {
				t.Fatal(err)
			}
			base += 2
		}
		if _, err := db.Enqueue(ctx, key, agent.Inbound{Text: "and then?"}); err != nil {
			t.Fatal(err)
		}
		if err := db.SaveBoard(ctx, key, []byte(`{"state":"working"}`), false); err != nil {
			t.Fatal(err)
		}
		if _, err := db.FirstSeen(ctx, fmt.Sprintf("event-%d", i), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.AddOutbox(ctx, "web/s00", [][]byte{[]byte("reply one"), []byte("reply two")}); err != nil {
		t.Fatal(err)
	}
	return path
}

// scribble writes random bytes from a fixed seed over pages first to last
// (inclusive) of the file at path, or to its end if last < 0.
func scribble(t testing.TB, path string, first, last int, seed uint64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	// The store lets bbolt pick its page size: the OS's.
	size := int64(os.Getpagesize())
	end := int64(last+1) * size
	if last < 0 || end > st.Size() {
		end = st.Size()
	}
	if int64(first)*size >= end {
		t.Fatalf("%s has %d bytes, no page %d to damage", path, st.Size(), first)
	}
	junk := make([]byte, end-int64(first)*size)
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := range junk {
		junk[i] = byte(rng.Uint32())
	}
	if _, err := f.WriteAt(junk, int64(first)*size); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// storeCall is one exported DB method that runs a bbolt transaction.
type storeCall struct {
	name string
	call func() error
}

func storeCalls(db *DB, dir string) []storeCall {
	ctx := context.Background()
	key := "web/3"
	// everyKey calls f for each session seedDamageDB writes, so that the
	// damage is met wherever it is; it returns the first error.
	everyKey := func(f func(key string) error) func() error {
		return func() error {
			var first error
			for i := range 12 {
				if err := f(fmt.Sprintf("web/%d", i)); err != nil && first == nil {
					first = err
				}
			}
			return first
		}
	}
	return []storeCall{
		{name: "Load", call: everyKey(func(key string) error { _, _, _, err := db.Load(ctx, key); return err })},
		{name: "Inbox", call: everyKey(func(key string) error { _, err := db.Inbox(ctx, key); return err })},
		{name: "Enqueue", call: func() error { _, err := db.Enqueue(ctx, key, agent.Inbound{Text: "more"}); return err }},
		{name: "Commit", call: func() error { return db.Commit(ctx, round(key, 10, "next")) }},
		{name: "Resumable", call: func() error { _, err := db.Resumable(ctx); return err }},
		{name: "UpdateCheckpoint", call: func() error {
			return db.UpdateCheckpoint(ctx, key, func(cp *agent.Checkpoint) error { return nil })
		}},
		{name: "Archive", call: func() error { return db.Archive(ctx, "web/4") }},
		{name: "Archived", call: everyKey(func(key string) error { _, _, err := db.Archived(ctx, key, 1); return err })},
		{name: "FirstSeen", call: func() error { _, err := db.FirstSeen(ctx, "event-new", time.Hour); return err }},
		{name: "PruneDedupe", call: func() error { _, err := db.PruneDedupe(ctx); return err }},
		{name: "AddOutbox", call: func() error { _, err := db.AddOutbox(ctx, "web/s00", [][]byte{[]byte("x")}); return err }},
		{name: "DeleteOutbox", call: func() error { return db.DeleteOutbox(ctx, "web/s00", 1) }},
		{name: "Outbox", call: func() error { return db.Outbox(ctx, func(uint64, []byte) {}) }},
		{name: "DeleteIdle", call: func() error { _, err := db.DeleteIdle(ctx, time.Now().Add(time.Hour)); return err }},
		{name: "Sessions", call: func() error { _, err := db.Sessions(ctx); return err }},
		{name: "Plans", call: everyKey(func(key string) error { _, err := db.Plans(ctx, key); return err })},
		{name: "Board", call: everyKey(func(key string) error { _, err := db.Board(ctx, key); return err })},
		{name: "SaveBoard", call: func() error { return db.SaveBoard(ctx, key, []byte("{}"), false) }},
		{name: "PendingBoards", call: func() error { _, err := db.PendingBoards(ctx); return err }},
		{name: "Cards", call: everyKey(func(key string) error { _, err := db.Cards(ctx, key); return err })},
		{name: "SaveCards", call: func() error { return db.SaveCards(ctx, key, []byte("{}")) }},
		{name: "Listing", call: everyKey(func(key string) error { _, err := db.Listing(ctx, key); return err })},
		{name: "SaveListing", call: func() error { return db.SaveListing(ctx, key, []byte("{}")) }},
		{name: "SessionCount", call: func() error { _, err := db.SessionCount(); return err }},
		{name: "Ping", call: db.Ping},
		{name: "Check", call: db.Check},
		// A hot backup checks the file first: a copy of a damaged one
		// would overwrite a good backup.
		{name: "WriteTo", call: func() error { _, err := db.WriteTo(io.Discard); return err }},
		{name: "Backup", call: func() error { _, err := db.Backup(filepath.Join(dir, "backup.db")); return err }},
	}
}

// callNoPanic runs c and fails the test if it panics.
func callNoPanic(t *testing.T, c storeCall) (err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("%s panicked: %v", c.name, p)
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return c.call()
}

// wantDamaged checks that err is the clear error for a damaged file.
func wantDamaged(t *testing.T, what string, err error, path string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: got no error, want one wrapping ErrCorrupt", what)
		return
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "backup") {
		t.Errorf("%s: got %v, want ErrCorrupt naming %s and saying how to restore a backup", what, err, path)
	}
}

func TestOpenHalfCutFile(t *testing.T) {
	path := seedDamageDB(t)
	backup, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, int64(len(backup)/2)); err != nil {
		t.Fatal(err)
	}
	db, err := Open(path, Options{})
	if err == nil {
		db.Close()
	}
	wantDamaged(t, "open a file cut in half", err, path)
	// The refusal left the file unlocked: the backup copied over it opens.
	if err := os.WriteFile(path, backup, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err = Open(path, Options{LockTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("open the restored backup: %v", err)
	}
	defer db.Close()
	if cp, _, _, err := db.Load(context.Background(), "web/3"); err != nil || cp == nil {
		t.Errorf("load from the restored backup: %+v, %v", cp, err)
	}
}

// compacted returns a compacted copy of the file at path: its pages are
// packed from the start of the file, where a long-used file's are
// scattered among free ones.
func compacted(t testing.TB, path string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "compacted.db")
	if _, _, err := CompactFile(path, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOpenScribbledPages(t *testing.T) {
	for _, tc := range []struct {
		name    string
		compact bool
		seed    uint64
	}{
		{name: "as used", seed: 1},
		{name: "as used", seed: 2},
		{name: "compacted", compact: true, seed: 1},
		{name: "compacted", compact: true, seed: 2},
		{name: "compacted", compact: true, seed: 3},
	} {
		t.Run(fmt.Sprintf("%s seed %d", tc.name, tc.seed), func(t *testing.T) {
			path := seedDamageDB(t)
			if tc.compact {
				path = compacted(t, path)
			}
			scribble(t, path, 2, 4, tc.seed)
			db, err := Open(path, Options{})
			if err != nil {
				wantDamaged(t, "open", err, path)
				return
			}
			// The check did not catch it: every method fails or works, none panics.
			defer db.Close()
			for _, c := range storeCalls(db, t.TempDir()) {
				if err := callNoPanic(t, c); err != nil {
					t.Logf("%s: %v", c.name, err)
				}
			}
		})
	}
}

// TestDamagedWhileOpen damages the file under an open DB, as a failing disk
// would: every method that reads pages returns the clear error.
func TestDamagedWhileOpen(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{name: "random bytes over every data page", damage: func(t *testing.T, path string) { scribble(t, path, 2, -1, 7) }},
		{name: "cut to its meta pages", damage: func(t *testing.T, path string) {
			if err := os.Truncate(path, 2*int64(os.Getpagesize())); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := seedDamageDB(t)
			db, err := Open(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			tc.damage(t, path)
			for _, c := range storeCalls(db, t.TempDir()) {
				wantDamaged(t, c.name, callNoPanic(t, c), path)
			}
		})
	}
}

// freelistPage returns the id of the file's freelist page.
func freelistPage(t testing.TB, path string) int {
	t.Helper()
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, PreLoadFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	id := -1
	b.View(func(tx *bolt.Tx) error {
		for i := 2; int64(i)*int64(os.Getpagesize()) < tx.Size(); i++ {
			if p, err := tx.Page(i); err == nil && p != nil && p.Type == "freelist" {
				id = i
			}
		}
		return nil
	})
	if id < 0 {
		t.Fatalf("%s has no freelist page", path)
	}
	return id
}

// TestOpenDamagedFreelist: bbolt's read-write open panics on a damaged
// freelist page half way through, with the file locked; the check before
// it refuses the file and leaves it unlocked.
func TestOpenDamagedFreelist(t *testing.T) {
	path := seedDamageDB(t)
	id := freelistPage(t, path)
	scribble(t, path, id, id, 5)
	for i := range 2 { // the second open finds the file unlocked
		db, err := Open(path, Options{LockTimeout: 200 * time.Millisecond})
		if err == nil {
			db.Close()
		}
		wantDamaged(t, fmt.Sprintf("open %d", i+1), err, path)
	}
}

// TestDamagedConcurrentWrites: writes that share a batch on a damaged file
// each return the clear error.
func TestDamagedConcurrentWrites(t *testing.T) {
	path := seedDamageDB(t)
	db, err := Open(path, Options{BatchDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	scribble(t, path, 2, -1, 9)
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					errs[i] = fmt.Errorf("panic: %v", p)
				}
			}()
			errs[i] = db.SaveBoard(context.Background(), fmt.Sprintf("web/%d", i), []byte("{}"), false)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		wantDamaged(t, fmt.Sprintf("write %d", i), err, path)
	}
}

// TestStuckWriterFailsFast: after a panic outside the transaction function
// (bbolt committing or rolling back), which may leave bbolt's writer lock
// held, writes and Close return that error at once instead of waiting.
func TestStuckWriterFailsFast(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pinplan.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	commitPanics := func(fn func(*bolt.Tx) error) error { panic("page 9: unexpected type") }
	wantDamaged(t, "the panicking write", db.writeWith(commitPanics, func(*bolt.Tx) error { return nil }), path)
	wantDamaged(t, "a later write", db.SaveBoard(context.Background(), "web/1", []byte("{}"), false), path)
	wantDamaged(t, "Close", db.Close(), path)
	if err := db.Ping(); err != nil {
		t.Errorf("reads go on: Ping = %v", err)
	}
}

// TestCallbackPanicIsNotDamage: a panic in a caller's callback is the
// caller's, not the file's.
func TestCallbackPanicIsNotDamage(t *testing.T) {
	db := openTemp(t)
	ctx := context.Background()
	if _, err := db.AddOutbox(ctx, "web/s00", [][]byte{[]byte("x")}); err != nil {
		t.Fatal(err)
	}
	got := func() (p any) {
		defer func() { p = recover() }()
		db.Outbox(ctx, func(uint64, []byte) { panic("callback bug") })
		return nil
	}()
	if got != "callback bug" {
		t.Errorf("Outbox with a panicking callback: recovered %v, want the callback's panic", got)
	}
	if _, err := db.AddOutbox(ctx, "web/s00", [][]byte{[]byte("y")}); err != nil {
		t.Errorf("a write after the callback's panic: %v", err)
	}
}
