package store

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestBackupUnderWriteLoad: hot backups taken while writers commit never
// call a healthy DB damaged, and each backup file opens and checks clean.
// Writers that commit while a backup's read transaction is open free
// pages that the backup's snapshot still reaches; a check that reads the
// live freelist takes them for "reachable freed".
func TestBackupUnderWriteLoad(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "pinplan.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	var stop atomic.Bool
	var wg sync.WaitGroup
	writeErrs := make([]error, 8)
	for w := range writeErrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("web/w%d", w)
			text := strings.Repeat("a line of a thread under load ", 20)
			base := 0
			for i := 0; !stop.Load(); i++ {
				if err := db.Commit(ctx, round(key, base, text, text)); err != nil {
					writeErrs[w] = err
					return
				}
				base += 2
				// Boards rewritten in place free their old pages at every commit.
				board := bytes.Repeat([]byte{byte('a' + i%26)}, 200+(i*37)%3000)
				if err := db.SaveBoard(ctx, key, board, false); err != nil {
					writeErrs[w] = err
					return
				}
			}
		}()
	}

	dir := t.TempDir()
	for i := range 12 {
		dst := filepath.Join(dir, fmt.Sprintf("backup-%d.db", i))
		if _, err := db.Backup(dst); err != nil {
			t.Errorf("backup %d under write load: got %v, want none", i, err)
			continue
		}
		copyDB, err := Open(dst, Options{ReadOnly: true})
		if err != nil {
			t.Errorf("backup %d: open: %v", i, err)
			continue
		}
		if err := copyDB.Check(); err != nil {
			t.Errorf("backup %d: check of the copy: %v", i, err)
		}
		copyDB.Close()
		var buf bytes.Buffer
		if _, err := db.WriteTo(&buf); err != nil {
			t.Errorf("streamed backup %d under write load: got %v, want none", i, err)
		} else if buf.Len() == 0 {
			t.Errorf("streamed backup %d: empty", i)
		}
	}
	stop.Store(true)
	wg.Wait()
	for w, err := range writeErrs {
		if err != nil {
			t.Errorf("writer %d: %v", w, err)
		}
	}
}
