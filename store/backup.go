package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Exists refuses the command cmd on a database file that is not there
// (opening it would create an empty one, and back that up or compact
// it): a wrong PINPLAN_DB or folder must say so.
func Exists(cmd, path string) error {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %s does not exist; set PINPLAN_DB to the bot's database (or run from the folder the bot runs in)", cmd, path)
	}
	return nil
}

// BackupFile is `bot backup` when no bot runs on the database at path:
// it writes a hot backup of it to file (DB.Backup) and says so on w. It
// returns ErrLocked when a running bot holds the file: ask that one
// (httphost.BackupFromBot).
func BackupFile(path, file string, w io.Writer) error {
	if err := Exists("backup", path); err != nil {
		return err
	}
	db, err := Open(path, Options{LockTimeout: 500 * time.Millisecond})
	if err != nil {
		return err
	}
	defer db.Close()
	n, err := db.Backup(file)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "pinplan: wrote %d bytes to %s\n", n, file)
	return nil
}

// FileID names the file at path by its identity on this machine (device
// and inode, else its absolute path with links resolved): two paths give
// the same FileID exactly when they name the same file. `bot backup`
// compares it with the running bot's (DB.FileID) before it writes what
// that bot sends.
func FileID(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if id := fileID(fi); id != "" {
		return id, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	return "path=" + abs, nil
}

// FileID is the FileID of the file the database was opened from, read
// when it was opened.
func (db *DB) FileID() string { return db.fileID }

// WriteTo writes a consistent copy of the database to w while it stays in
// use (a hot backup). The copy is written to a temporary file beside the
// database and checked there first: a backup of a damaged file would
// overwrite a good older one, so it is refused with an error wrapping
// ErrCorrupt and nothing is written to w.
func (db *DB) WriteTo(w io.Writer) (int64, error) {
	tmp, err := db.checkedCopy(filepath.Dir(db.path))
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return 0, fmt.Errorf("store: backup: %w", err)
	}
	return io.Copy(w, tmp)
}

// Backup writes a hot backup to path through a temporary file and a rename,
// so path is either the old file or a complete new one. The copy is
// checked before the rename (see WriteTo).
func (db *DB) Backup(path string) (int64, error) {
	tmp, err := db.checkedCopy(filepath.Dir(path))
	if err != nil {
		return 0, fmt.Errorf("store: backup to %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	st, err := tmp.Stat()
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return 0, fmt.Errorf("store: backup to %s: %w", path, err)
	}
	return st.Size(), nil
}

// checkedCopy writes a copy of the database to a new temporary file in
// dir (mode 0600: it holds every thread's history), synced, and checks
// the copy in full (see checkTx). The check reads the copy, never the
// live file: bbolt's check compares a snapshot's pages with the live
// freelist, which holds pages that writers committing since the snapshot
// have freed, so under write load it would call a healthy file damaged.
// The copy is the snapshot alone; damage found in it is the live file's
// (it is a page-for-page copy), and is reported naming the live file.
// The caller removes and closes the file.
func (db *DB) checkedCopy(dir string) (*os.File, error) {
	tmp, err := os.CreateTemp(dir, ".pinplan-backup-*")
	if err != nil {
		return nil, err
	}
	err = db.view(func(tx *bolt.Tx) error {
		// A file cut short is found here: bbolt would copy what is left
		// and fail on the end of the file with a bare EOF.
		if err := checkLength(db.path, tx); err != nil {
			return err
		}
		_, err := tx.WriteTo(tmp)
		return err
	})
	if err == nil {
		err = tmp.Sync()
	}
	if err == nil {
		err = checkCopy(tmp.Name(), db.path)
	}
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, err
	}
	return tmp, nil
}

// checkCopy checks the file at copyPath, a copy of the database at live
// that nothing else has open, in full; damage is reported naming live.
func checkCopy(copyPath, live string) error {
	b, err := openBolt(copyPath, &bolt.Options{ReadOnly: true})
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			return damaged(live, fmt.Sprintf("its copy does not open: %v", err))
		}
		return err
	}
	defer b.Close()
	return (&DB{bolt: b, path: live}).view(func(tx *bolt.Tx) error { return checkTxAs(live, copyPath, tx) })
}

// Ping reports whether the database is open and readable.
func (db *DB) Ping() error {
	err := db.view(func(tx *bolt.Tx) error {
		if tx.Bucket(bMeta) == nil {
			return errors.New("meta bucket missing")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	return nil
}

// Check checks the whole file (see checkTx); a damaged one is an error
// wrapping ErrCorrupt that names the first problems found. It is for a
// file no one writes to while it runs (opened read-only, as compact
// does): under writers, a backup checks its copy instead.
func (db *DB) Check() error {
	if err := db.view(func(tx *bolt.Tx) error { return checkTx(db.path, tx) }); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}
