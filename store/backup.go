package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// WriteTo writes a consistent copy of the database to w while it stays in
// use (a hot backup). The file is checked first, in the same transaction:
// a backup of a damaged file would overwrite a good older one, so it is
// refused with an error wrapping ErrCorrupt and nothing is written.
func (db *DB) WriteTo(w io.Writer) (int64, error) {
	var n int64
	err := db.view(func(tx *bolt.Tx) error {
		if err := checkTx(db.path, tx); err != nil {
			return err
		}
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	return n, err
}

// Backup writes a hot backup to path through a temporary file and a rename,
// so path is either the old file or a complete new one.
func (db *DB) Backup(path string) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".pinplan-backup-*")
	if err != nil {
		return 0, fmt.Errorf("store: backup to %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	n, err := db.WriteTo(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return 0, fmt.Errorf("store: backup to %s: %w", path, err)
	}
	return n, nil
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
// wrapping ErrCorrupt that names the first problems found.
func (db *DB) Check() error {
	if err := db.view(func(tx *bolt.Tx) error { return checkTx(db.path, tx) }); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}
