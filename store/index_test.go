package store

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/pinplan/pinplan/agent"
)

// TestIndexesBuiltForAnOlderFile: a file written before the indexes of
// sessions with work left were kept (schema 1) gets them on its first
// open: a session with a message queued, one with its log past its
// cursor and one whose board was not pinned are listed; a finished one
// is not.
func TestIndexesBuiltForAnOlderFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "pinplan.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Enqueue(ctx, "web/queued", agent.Inbound{Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	r := round("web/logged", 0, "hello")
	r.Checkpoint.State = agent.Idle
	r.Log = []agent.LogEntry{{Seq: 1, Kind: agent.TurnEnded, Turn: 1}}
	r.Checkpoint.LogSeq = 1
	if err := db.Commit(ctx, r); err != nil {
		t.Fatal(err)
	}
	done := round("web/done", 0, "hello")
	done.Checkpoint.State = agent.Idle
	if err := db.Commit(ctx, done); err != nil {
		t.Fatal(err)
	}
	for key, board := range map[string]string{
		"web/unpinned": `{"ref":{"id":"m1"},"pinned":false,"shown":{"revision":1},"want":{"revision":1}}`,
		"web/done":     `{"ref":{"id":"m2"},"pinned":true,"shown":{"revision":1},"want":{"revision":1}}`,
	} {
		if err := db.SaveBoard(ctx, key, []byte(board), false); err != nil { // as schema 1 kept it: no index
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// Back to schema 1: no indexes.
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		for _, name := range indexes {
			if err := tx.DeleteBucket(name); err != nil {
				return err
			}
		}
		return tx.Bucket(bMeta).Put(kSchema, []byte("1"))
	})
	b.Close()
	if err != nil {
		t.Fatal(err)
	}

	db, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []struct {
		name string
		list func(context.Context) ([]string, error)
		want []string
	}{
		{"Resumable", db.Resumable, []string{"web/queued"}},
		{"Undelivered", db.Undelivered, []string{"web/logged"}},
		{"PendingBoards", db.PendingBoards, []string{"web/unpinned"}},
	} {
		if got, err := c.list(ctx); err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s = %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}
