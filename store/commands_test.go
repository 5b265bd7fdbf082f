package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
)

// seededFile returns the path of a new database in a temp dir holding
// one session with a finished turn, closed.
func seededFile(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "data", "pinplan.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &agent.Round{
		Append:     []agent.Entry{{Message: openai.ChatCompletionMessage{Role: "user", Content: "plan the release"}}},
		Checkpoint: agent.Checkpoint{Key: "web/t1", State: agent.Idle, HistoryLen: 1},
	}
	if err := db.Commit(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCompact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name    string
		running bool   // the bot holds the database
		out     string // existing content of OUT; "" for none
		wantErr error
		wantMsg string // in the error or the output
	}{
		{name: "writes a compacted copy", wantMsg: "compacted"},
		{name: "refused while the bot runs", running: true, wantErr: ErrLocked, wantMsg: "is pinplan running?"},
		{name: "refuses to overwrite", out: "an earlier copy", wantErr: ErrExists, wantMsg: "already exists"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := seededFile(t)
			out := filepath.Join(t.TempDir(), "compacted.db")
			if tt.out != "" {
				if err := os.WriteFile(out, []byte(tt.out), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tt.running {
				db, err := Open(path, Options{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
			}
			var stdout bytes.Buffer
			err := Compact(ctx, path, out, &stdout)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tt.wantMsg) {
					t.Errorf("error %q does not say %q", err, tt.wantMsg)
				}
				if stdout.Len() != 0 {
					t.Errorf("printed %q on failure", stdout.String())
				}
				got, rerr := os.ReadFile(out)
				switch {
				case tt.out == "" && !errors.Is(rerr, os.ErrNotExist):
					t.Errorf("refused compaction left %s (%v)", out, rerr)
				case tt.out != "" && string(got) != tt.out:
					t.Errorf("%s now holds %q, want it untouched", out, got)
				}
				return
			}
			if msg := stdout.String(); !strings.Contains(msg, tt.wantMsg) || !strings.Contains(msg, out) || !strings.Contains(msg, path) {
				t.Errorf("output %q does not name both files", msg)
			}
			db, err := Open(out, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			_, hist, _, err := db.Load(ctx, "web/t1")
			if err != nil || len(hist) != 1 || hist[0].Message.Content != "plan the release" {
				t.Errorf("copy holds %d entries (%v), want the session's one", len(hist), err)
			}
		})
	}
}

// TestCommandsRefuseAMissingFile: backup and compact on a PINPLAN_DB that
// is not there say so and create nothing (opening it would make an
// empty database).
func TestCommandsRefuseAMissingFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nope.db")
	var out bytes.Buffer
	for name, err := range map[string]error{
		"backup":  BackupFile(path, filepath.Join(dir, "copy.db"), &out),
		"compact": Compact(context.Background(), path, filepath.Join(dir, "small.db"), &out),
	} {
		if err == nil || !strings.Contains(err.Error(), name+": "+path+" does not exist") {
			t.Errorf("%s: got %v, want it to say %s does not exist", name, err, path)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 || out.Len() != 0 {
		t.Errorf("left %d files and printed %q, want nothing", len(entries), out.String())
	}
	if err := Exists("backup", seededFile(t)); err != nil {
		t.Errorf("Exists on a database: %v", err)
	}
}

// TestBackupFile: without a running bot the backup is the file's own
// copy; with one holding the file it is ErrLocked, for the caller to ask
// that bot.
func TestBackupFile(t *testing.T) {
	path := seededFile(t)
	file := filepath.Join(t.TempDir(), "copy.db")
	var out bytes.Buffer
	if err := BackupFile(path, file, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "to "+file) {
		t.Errorf("output %q does not name %s", out.String(), file)
	}
	db, err := Open(file, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, hist, _, err := db.Load(context.Background(), "web/t1"); err != nil || len(hist) != 1 {
		t.Errorf("the backup holds %d entries (%v), want the session's one", len(hist), err)
	}
	// db holds file now, as a running bot would.
	t.Cleanup(func() { db.Close() })
	out.Reset()
	if err := BackupFile(file, filepath.Join(t.TempDir(), "again.db"), &out); !errors.Is(err, ErrLocked) || out.Len() != 0 {
		t.Errorf("backup of a held file: %v, printed %q; want ErrLocked and nothing", err, out.String())
	}
}

// TestRetain: the sessions idle past the retention are deleted, and each
// is passed on with the time the deletion began; the others stay.
func TestRetain(t *testing.T) {
	ctx := context.Background()
	db := openTemp(t)
	now := time.Now()
	for key, updated := range map[string]time.Time{"web/old": now.Add(-2 * time.Hour), "web/new": now.Add(-time.Minute)} {
		if err := db.Commit(ctx, &agent.Round{
			Append:     []agent.Entry{{Message: openai.ChatCompletionMessage{Role: "user", Content: "plan"}}},
			Checkpoint: agent.Checkpoint{Key: key, State: agent.Idle, HistoryLen: 1, Updated: updated},
		}); err != nil {
			t.Fatal(err)
		}
	}
	var told []string
	var since time.Time
	keys, err := db.Retain(ctx, time.Hour, func(key string, at time.Time) { told, since = append(told, key), at })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keys, []string{"web/old"}) || !slices.Equal(told, keys) {
		t.Fatalf("deleted %q and told %q, want web/old for both", keys, told)
	}
	if since.Before(now) || time.Since(since) > time.Minute {
		t.Errorf("told since %s, want when the deletion began (after %s)", since, now)
	}
	if n, err := db.SessionCount(); err != nil || n != 1 {
		t.Errorf("%d sessions left (%v), want web/new", n, err)
	}
}

// TestRetentionEvery checks how often housekeeping deletes idle sessions:
// every ten minutes for a long retention, every half of a short one, never
// more than once a minute, and never without a retention.
func TestRetentionEvery(t *testing.T) {
	for _, c := range []struct {
		retention time.Duration
		want      int
	}{
		{0, 0},
		{time.Minute, 1},
		{2 * time.Minute, 1},
		{5 * time.Minute, 2},
		{20 * time.Minute, 10},
		{720 * time.Hour, 10},
	} {
		if got := RetentionEvery(c.retention); got != c.want {
			t.Errorf("RetentionEvery(%s) = %d minutes, want %d", c.retention, got, c.want)
		}
	}
}
