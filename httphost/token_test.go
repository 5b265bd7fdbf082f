package httphost

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConsoleToken: a configured token is used and never called
// generated; without one, a token is generated once, kept beside the
// database with mode 0600, and the same one is returned after.
func TestConsoleToken(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "data", "pinplan.db")
	if tok, generated, err := ConsoleToken("configured-token-123456", db); err != nil || tok != "configured-token-123456" || generated {
		t.Errorf("configured: got %q, %t, %v; want it, not generated", tok, generated, err)
	}
	if _, err := os.Stat(TokenFile(db)); !os.IsNotExist(err) {
		t.Errorf("a configured token wrote %s (%v)", TokenFile(db), err)
	}
	if want := filepath.Join(dir, "data", "web-token"); TokenFile(db) != want {
		t.Errorf("TokenFile = %s, want %s", TokenFile(db), want)
	}
	first, generated, err := ConsoleToken("", db)
	if err != nil || !generated || len(first) != 64 {
		t.Fatalf("generated: got %q, %t, %v; want 64 hex characters", first, generated, err)
	}
	if st, err := os.Stat(TokenFile(db)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("kept token: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	if again, _, err := ConsoleToken("", db); err != nil || again != first {
		t.Errorf("second start: got %q (%v), want the kept %q", again, err, first)
	}
}

// TestBackupFromBotWithoutToken: with no token set and none kept beside
// the database, the backup says what is needed and asks nobody.
func TestBackupFromBotWithoutToken(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "copy.db")
	r := BackupRequest{Addr: "127.0.0.1:1", DB: filepath.Join(dir, "pinplan.db"), File: file}
	err := BackupFromBot(context.Background(), r, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "console token is needed") || !strings.Contains(err.Error(), "PINPLAN_WEB_TOKEN") {
		t.Errorf("got %v, want it to ask for PINPLAN_WEB_TOKEN", err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("%s was written (%v)", file, err)
	}
}
