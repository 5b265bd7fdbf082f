package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// ErrExists means the destination of a compacted copy already exists.
var ErrExists = errors.New("file already exists")

const (
	// compactLockTimeout is how long CompactFile waits for the source's
	// file lock: a running bot holds it for good, so waiting longer
	// only delays the refusal.
	compactLockTimeout = 500 * time.Millisecond
	// compactTxSize bounds the bytes copied per destination transaction.
	compactTxSize = 4 << 20
)

// Compact is `bot compact`: it writes a compacted copy of the database
// at path to out, offline. bbolt never shrinks its file, so space freed
// by retention comes back only through a copy. The bot must be stopped
// (it holds the file lock), and out must not exist; the operator swaps
// the files, as what Compact prints on w says.
func Compact(ctx context.Context, path, out string, w io.Writer) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	if err := Exists("compact", path); err != nil {
		return err
	}
	before, after, err := CompactFile(path, out)
	switch {
	case errors.Is(err, ErrLocked):
		return fmt.Errorf("compact: %s: %w; is pinplan running? Stop it, then run `bot compact` again", path, ErrLocked)
	case errors.Is(err, ErrExists):
		return fmt.Errorf("compact: %s: %w; name a file that does not exist yet", out, ErrExists)
	case err != nil:
		return fmt.Errorf("compact: %w", err)
	}
	fmt.Fprintf(w, "pinplan: compacted %s (%d bytes) into %s (%d bytes)\n", path, before, out, after)
	fmt.Fprintf(w, "pinplan: to use it, with the bot stopped, move %s over %s (keep the old file until the bot has started on the new one)\n", out, path)
	return nil
}

// CompactFile writes a compacted copy of the database at src to dst (bbolt
// Compact: every bucket, key, value and bucket sequence, pages filled) and
// returns both files' sizes. It is offline: it opens src read-only and
// fails with ErrLocked while another process (a running bot) has it open.
// It never overwrites: dst must not exist (ErrExists), and the copy is
// written to a temporary file beside dst and linked to dst only when
// complete and synced, so dst is absent or whole.
func CompactFile(src, dst string) (before, after int64, err error) {
	if _, err := os.Lstat(dst); err == nil {
		return 0, 0, fmt.Errorf("store: compact to %s: %w", dst, ErrExists)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, 0, fmt.Errorf("store: compact to %s: %w", dst, err)
	}
	st, err := os.Stat(src)
	if err != nil {
		return 0, 0, fmt.Errorf("store: compact %s: %w", src, err)
	}
	from, err := openBolt(src, &bolt.Options{ReadOnly: true, Timeout: compactLockTimeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return 0, 0, fmt.Errorf("store: compact %s: %w (is pinplan running with this PINPLAN_DB? stop it first)", src, ErrLocked)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("store: compact %s: %w", src, err)
	}
	defer from.Close()
	// A damaged source is refused before anything is copied.
	if err := (&DB{bolt: from, path: src}).Check(); err != nil {
		return 0, 0, fmt.Errorf("store: compact: %w", err)
	}

	tmp, err := os.CreateTemp(filepath.Dir(dst), ".pinplan-compact-*")
	if err != nil {
		return 0, 0, fmt.Errorf("store: compact to %s: %w", dst, err)
	}
	tmpName := tmp.Name()
	tmp.Close()
	defer os.Remove(tmpName)
	// Commits skip the fsync (NoSync); one Sync at the end makes the copy
	// durable before it gets its name.
	to, err := bolt.Open(tmpName, 0o600, &bolt.Options{Timeout: compactLockTimeout, NoSync: true})
	if err != nil {
		return 0, 0, fmt.Errorf("store: compact to %s: %w", dst, err)
	}
	err = compact(to, from, src)
	if err == nil {
		err = to.Sync()
	}
	if cerr := to.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// Link, unlike Rename, fails when dst appeared meanwhile.
		err = os.Link(tmpName, dst)
	}
	if errors.Is(err, fs.ErrExist) {
		err = ErrExists
	}
	if err != nil {
		return 0, 0, fmt.Errorf("store: compact %s to %s: %w", src, dst, err)
	}
	out, err := os.Stat(dst)
	if err != nil {
		return 0, 0, fmt.Errorf("store: compact %s to %s: %w", src, dst, err)
	}
	return st.Size(), out.Size(), nil
}

// compact is bolt.Compact with damage it meets in src (which Check did
// not catch) an error rather than a panic.
func compact(to, from *bolt.DB, src string) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = damaged(src, p)
		}
	}()
	return bolt.Compact(to, from, compactTxSize)
}
