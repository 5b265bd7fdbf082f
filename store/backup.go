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
// use (a hot backup).
func (db *DB) WriteTo(w io.Writer) (int64, error) {
	var n int64
	err := db.bolt.View(func(tx *bolt.Tx) error {
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
	return db.bolt.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bMeta) == nil {
			return errors.New("store: meta bucket missing")
		}
		return nil
	})
}

// Check runs bbolt's consistency check and returns every problem found.
func (db *DB) Check() error {
	var errs []error
	err := db.bolt.View(func(tx *bolt.Tx) error {
		for e := range tx.Check() {
			errs = append(errs, e)
		}
		return nil
	})
	return errors.Join(append(errs, err)...)
}
