package store

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// bInstallations keeps the Slack installations (DESIGN §14), by id: the
// adapter's records, opaque here (their tokens encrypted by it).
var bInstallations = []byte("installations")

// Installation returns installation id's record, nil if there is none.
func (db *DB) Installation(_ context.Context, id string) ([]byte, error) {
	var out []byte
	err := db.view(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bInstallations); b != nil {
			out = bytes.Clone(b.Get([]byte(id)))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: read installation %s: %w", id, err)
	}
	return out, nil
}

// UpdateInstallation changes installation id's record by compare-and-set,
// in one write transaction: fn gets the record (nil when there is none)
// and returns the new one, nil to delete it. An error from fn writes
// nothing and is returned wrapped. So two replicas refreshing one token
// cannot both write: the second's fn sees the first's record.
func (db *DB) UpdateInstallation(_ context.Context, id string, fn func(cur []byte) ([]byte, error)) error {
	err := db.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bInstallations)
		if err != nil {
			return err
		}
		next, err := fn(bytes.Clone(b.Get([]byte(id))))
		switch {
		case err != nil:
			return err
		case next == nil:
			return b.Delete([]byte(id))
		}
		return b.Put([]byte(id), next)
	})
	if err != nil {
		return fmt.Errorf("store: update installation %s: %w", id, err)
	}
	return nil
}

// Installations lists the ids of the stored installations, in order.
func (db *DB) Installations(_ context.Context) ([]string, error) {
	var ids []string
	err := db.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bInstallations)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			ids = append(ids, string(k))
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: list installations: %w", err)
	}
	return ids, nil
}
