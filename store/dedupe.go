package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// FirstSeen records an event key for ttl and reports whether this is its
// first sighting. Redelivered events (Slack retries, gateway replays) see
// false and are dropped. Expired keys are pruned as it goes.
func (db *DB) FirstSeen(_ context.Context, key string, ttl time.Duration) (bool, error) {
	now := db.now()
	first := false
	err := db.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bDedupe)
		if raw := b.Get([]byte(key)); len(raw) == 8 && int64(binary.BigEndian.Uint64(raw)) > now.UnixNano() {
			first = false
			return nil
		}
		first = true
		return b.Put([]byte(key), u64(uint64(now.Add(ttl).UnixNano())))
	})
	if err != nil {
		return false, fmt.Errorf("store: dedupe %s: %w", key, err)
	}
	return first, nil
}

// PruneDedupe deletes expired dedupe keys, and the follow-ups that waited
// for a session in vain (HoldFollowUp), and returns how many.
func (db *DB) PruneDedupe(_ context.Context) (int, error) {
	now := uint64(db.now().UnixNano())
	n := 0
	err := db.update(func(tx *bolt.Tx) error {
		n = 0
		if b := tx.Bucket(bFollowUps); b != nil {
			pruned, err := pruneFollowUps(b, nil, db.now())
			if err != nil {
				return err
			}
			n += pruned
		}
		c := tx.Bucket(bDedupe).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(v) != 8 || binary.BigEndian.Uint64(v) <= now {
				if err := c.Delete(); err != nil {
					return err
				}
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: prune dedupe keys: %w", err)
	}
	return n, nil
}
