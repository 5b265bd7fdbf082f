package store

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOpenPermissionIsNotDamage: a DB this user may not open is reported
// as a permission problem, never with the advice to restore a backup
// (which would roll back a good file). As root (CI) the mode does not
// stop the open, so the classification is checked on the error the
// kernel gives other users, and on a real chmod where that applies.
func TestOpenPermissionIsNotDamage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pinplan.db")
	msgs := []string{openError(path, time.Second, &fs.PathError{Op: "open", Path: path, Err: syscall.EACCES}).Error()}
	if os.Geteuid() != 0 {
		db, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		if err := os.Chmod(path, 0); err != nil {
			t.Fatal(err)
		}
		if _, err = Open(path, Options{LockTimeout: 100 * time.Millisecond}); err == nil {
			t.Fatal("opened a file of mode 0")
		}
		msgs = append(msgs, err.Error())
	}
	for _, msg := range msgs {
		if strings.Contains(msg, "backup") || strings.Contains(msg, "damaged") || !strings.Contains(msg, "owner and mode") || !strings.Contains(msg, path) {
			t.Errorf("permission error reads %q; want the path and owner/mode advice, no backup advice", msg)
		}
	}
}
