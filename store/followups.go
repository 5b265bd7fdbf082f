package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bFollowUps holds the follow-ups that wait for their thread's session
// (chat.FollowUpStore): followups/<session key>\x00<order> is the expiry,
// unix nanoseconds as u64, then the follow-up's bytes (chat's). The
// bucket is made by the first hold.
var bFollowUps = []byte("followups")

func followUpPrefix(key string) []byte { return append([]byte(key), 0) }

// HoldFollowUp implements chat.FollowUpStore: in one transaction, a
// session with a record or a plan board holds nothing (false), else the
// follow-up is kept until ttl has passed. The session's expired ones go.
func (db *DB) HoldFollowUp(_ context.Context, key, order string, data []byte, ttl time.Duration) (bool, error) {
	now := db.now()
	held := false
	err := db.update(func(tx *bolt.Tx) error {
		held = false
		if sb := session(tx, key); sb != nil && (sb.Get(kRecord) != nil || sb.Get(kBoard) != nil) {
			return nil
		}
		b, err := tx.CreateBucketIfNotExists(bFollowUps)
		if err != nil {
			return err
		}
		if _, err := pruneFollowUps(b, followUpPrefix(key), now); err != nil {
			return err
		}
		v := append(u64(uint64(now.Add(ttl).UnixNano())), data...)
		held = true
		return b.Put(append(followUpPrefix(key), order...), v)
	})
	if err != nil {
		return false, fmt.Errorf("store: hold a follow-up of %s: %w", key, err)
	}
	return held, nil
}

// TakeFollowUps implements chat.FollowUpStore. A session with none (most
// of them) costs a read, not a write.
func (db *DB) TakeFollowUps(_ context.Context, key string) ([][]byte, error) {
	now := uint64(db.now().UnixNano())
	var out [][]byte
	found := false
	err := db.view(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bFollowUps); b != nil {
			k, _ := b.Cursor().Seek(followUpPrefix(key))
			found = k != nil && bytes.HasPrefix(k, followUpPrefix(key))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: take the follow-ups of %s: %w", key, err)
	}
	if !found {
		return nil, nil
	}
	err = db.update(func(tx *bolt.Tx) error {
		out = nil
		b := tx.Bucket(bFollowUps)
		if b == nil {
			return nil
		}
		prefix := followUpPrefix(key)
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Seek(prefix) {
			if len(v) >= 8 && binary.BigEndian.Uint64(v) > now {
				out = append(out, append([]byte(nil), v[8:]...))
			}
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: take the follow-ups of %s: %w", key, err)
	}
	return out, nil
}

// pruneFollowUps deletes the expired follow-ups under prefix (all of them
// for an empty prefix) and returns how many.
func pruneFollowUps(b *bolt.Bucket, prefix []byte, now time.Time) (int, error) {
	n := uint64(now.UnixNano())
	var expired [][]byte
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if len(v) < 8 || binary.BigEndian.Uint64(v) <= n {
			expired = append(expired, append([]byte(nil), k...))
		}
	}
	for _, k := range expired {
		if err := b.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(expired), nil
}
