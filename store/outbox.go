package store

import (
	"context"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// The outbox holds replies the chat layer has not delivered yet (it
// implements chat.OutboxStore; store does not import chat).

// AddOutbox implements chat.OutboxStore: the items are stored in one
// transaction, in order, before anything is sent.
// The file keeps one queue for all sessions (outbox/<id>): key is not
// stored, each item names its thread itself.
func (db *DB) AddOutbox(_ context.Context, _ string, items [][]byte) ([]uint64, error) {
	ids := make([]uint64, 0, len(items))
	err := db.update(func(tx *bolt.Tx) error {
		ids = ids[:0]
		b := tx.Bucket(bOutbox)
		for _, it := range items {
			id, err := b.NextSequence()
			if err != nil {
				return err
			}
			if err := b.Put(u64(id), it); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: add to outbox: %w", err)
	}
	return ids, nil
}

// DeleteOutbox implements chat.OutboxStore.
func (db *DB) DeleteOutbox(_ context.Context, _ string, id uint64) error {
	err := db.write(func(tx *bolt.Tx) error { return tx.Bucket(bOutbox).Delete(u64(id)) })
	if err != nil {
		return fmt.Errorf("store: delete outbox item %d: %w", id, err)
	}
	return nil
}

// OutboxOf implements chat.OutboxStore: the file keeps one queue for
// every session (a bbolt file has one process, no replica to hand a
// session to), so it is Outbox, and the caller keeps the session's.
func (db *DB) OutboxOf(ctx context.Context, _ string, f func(id uint64, data []byte)) error {
	return db.Outbox(ctx, f)
}

// Outbox implements chat.OutboxStore: it calls f with every undelivered
// item, oldest first.
func (db *DB) Outbox(_ context.Context, f func(id uint64, data []byte)) error {
	err := db.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bOutbox).ForEach(func(k, v []byte) error {
			if len(k) == 8 {
				callback(func() { f(binary.BigEndian.Uint64(k), append([]byte(nil), v...)) })
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("store: read outbox: %w", err)
	}
	return nil
}
