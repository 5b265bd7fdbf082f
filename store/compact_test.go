package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
)

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func TestCompactFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := filepath.Join(dir, "pinplan.db")
	db, err := Open(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// 200 sessions with some history; then retention deletes all but one.
	long := strings.Repeat("a tool result of some size. ", 100)
	cutoff := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	for i := range 200 {
		key := fmt.Sprintf("web/c%03d", i)
		r := round(key, 0, long, long, long, long)
		r.Checkpoint.State, r.Checkpoint.Updated = agent.Idle, cutoff.Add(-time.Hour)
		if i == 7 {
			r.Checkpoint.Updated = cutoff.Add(time.Hour)
		}
		if err := db.Commit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.SaveBoard(ctx, "web/c007", []byte(`{"ref":"m7"}`), false); err != nil {
		t.Fatal(err)
	}
	if err := db.SaveCards(ctx, "web/c007", []byte(`{"cards":{}}`)); err != nil {
		t.Fatal(err)
	}
	if err := db.SaveListing(ctx, "web/c007", []byte(`{"title":"seven"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Enqueue(ctx, "web/c007", agent.Inbound{Text: "queued"}); err != nil {
		t.Fatal(err)
	}
	outIDs, err := db.AddOutbox(ctx, "web/s00", [][]byte{[]byte("reply one"), []byte("reply two")})
	if err != nil {
		t.Fatal(err)
	}
	// Retention keeps web/c007 (recent, and a message is queued).
	deleted, err := db.DeleteIdle(ctx, cutoff)
	if err != nil || len(deleted) != 199 {
		t.Fatalf("DeleteIdle deleted %d, %v; want 199", len(deleted), err)
	}

	dst := filepath.Join(dir, "compacted.db")
	// While the database is open (a running bot), compaction is refused.
	if _, _, err := CompactFile(src, dst); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), src) {
		t.Errorf("compact of an open database: got %v, want ErrLocked naming %s", err, src)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused compaction left %s: %v", dst, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	before, after, err := CompactFile(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	if before != fileSize(t, src) || after != fileSize(t, dst) {
		t.Errorf("sizes %d, %d; files are %d, %d", before, after, fileSize(t, src), fileSize(t, dst))
	}
	t.Logf("compacted %d bytes into %d", before, after)
	if after*4 > before {
		t.Errorf("compacted %d bytes into %d; want less than a quarter after deleting 199 of 200 sessions", before, after)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".pinplan-compact-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}

	// The copy has everything that was kept, and its sequences go on.
	cp, err := Open(dst, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	if err := cp.Check(); err != nil {
		t.Errorf("Check of the copy: %v", err)
	}
	got, hist, inbox, err := cp.Load(ctx, "web/c007")
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || len(hist) != 4 || hist[3].Message.Content != long || len(inbox) != 1 || inbox[0].Text != "queued" {
		t.Errorf("kept session in the copy: record %v, %d entries, inbox %+v", got != nil, len(hist), inbox)
	}
	if board, err := cp.Board(ctx, "web/c007"); err != nil || string(board) != `{"ref":"m7"}` {
		t.Errorf("board in the copy = %q, %v", board, err)
	}
	if cards, err := cp.Cards(ctx, "web/c007"); err != nil || string(cards) != `{"cards":{}}` {
		t.Errorf("cards in the copy = %q, %v", cards, err)
	}
	if listing, err := cp.Listing(ctx, "web/c007"); err != nil || string(listing) != `{"title":"seven"}` {
		t.Errorf("listing in the copy = %q, %v", listing, err)
	}
	if n, err := cp.SessionCount(); err != nil || n != 1 {
		t.Errorf("sessions in the copy = %d, %v; want 1", n, err)
	}
	var out []string
	if err := cp.Outbox(ctx, func(_ uint64, b []byte) { out = append(out, string(b)) }); err != nil || strings.Join(out, ",") != "reply one,reply two" {
		t.Errorf("outbox in the copy = %q, %v", out, err)
	}
	ids, err := cp.AddOutbox(ctx, "web/s00", [][]byte{[]byte("reply three")})
	if err != nil || ids[0] <= outIDs[1] {
		t.Errorf("outbox id after compaction = %v, %v; want above %d (the bucket sequence is kept)", ids, err, outIDs[1])
	}
	in, err := cp.Enqueue(ctx, "web/c007", agent.Inbound{Text: "next"})
	if err != nil || in.ID != 2 {
		t.Errorf("inbox id after compaction = %d, %v; want 2", in.ID, err)
	}
}

func TestCompactFileRefuses(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "pinplan.db")
	db, err := Open(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(dir, "existing.db")
	if err := os.WriteFile(existing, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		src     string
		dst     string
		wantErr error
	}{
		{name: "existing destination", src: src, dst: existing, wantErr: ErrExists},
		{name: "destination is the source", src: src, dst: src, wantErr: ErrExists},
		{name: "missing source", src: filepath.Join(dir, "missing.db"), dst: filepath.Join(dir, "out1.db"), wantErr: os.ErrNotExist},
		{name: "missing destination folder", src: src, dst: filepath.Join(dir, "no", "such", "out.db"), wantErr: os.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := CompactFile(tt.src, tt.dst); !errors.Is(err, tt.wantErr) {
				t.Errorf("got %v, want %v", err, tt.wantErr)
			}
		})
	}
	if b, err := os.ReadFile(existing); err != nil || string(b) != "keep me" {
		t.Errorf("existing destination now holds %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("compaction of a missing source created it: %v", err)
	}
}
