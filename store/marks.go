package store

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Marks implements chat.MarkStore: the read marks saved under name, or
// nil.
func (db *DB) Marks(_ context.Context, name string) ([]byte, error) {
	var out []byte
	err := db.view(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bMarks); b != nil { // a read-only file from before marks
			out = bytes.Clone(b.Get([]byte(name)))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: read marks %s: %w", name, err)
	}
	return out, nil
}

// SaveMarks implements chat.MarkStore.
func (db *DB) SaveMarks(_ context.Context, name string, data []byte) error {
	err := db.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bMarks)
		if err != nil {
			return err
		}
		return b.Put([]byte(name), data)
	})
	if err != nil {
		return fmt.Errorf("store: save marks %s: %w", name, err)
	}
	return nil
}

// EachMarks calls f with every name's saved marks (migrate copies them).
func (db *DB) EachMarks(_ context.Context, f func(name string, data []byte)) error {
	err := db.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bMarks)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			f(string(k), bytes.Clone(v))
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("store: list marks: %w", err)
	}
	return nil
}
