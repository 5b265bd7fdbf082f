package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/pinplan/pinplan/agent"
)

// bLog holds a session's log (agent.LogEntry) by number, sessions/<key>/log;
// kDelivered how far the chat layer has delivered it.
var (
	bLog       = []byte("log")
	kDelivered = []byte("delivered")
)

// Log returns the entries of session key's log numbered above after,
// oldest first (none for a session without a log).
func (db *DB) Log(_ context.Context, key string, after int64) ([]agent.LogEntry, error) {
	var out []agent.LogEntry
	err := db.view(func(tx *bolt.Tx) error {
		sb := session(tx, key)
		if sb == nil || sb.Bucket(bLog) == nil {
			return nil
		}
		c := sb.Bucket(bLog).Cursor()
		for k, v := c.Seek(u64(uint64(after + 1))); k != nil; k, v = c.Next() {
			var e agent.LogEntry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("entry %d: %w", binary.BigEndian.Uint64(k), err)
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: log of %s: %w", key, err)
	}
	return out, nil
}

// Delivered returns the number of the last entry of session key's log the
// chat layer has delivered (SaveDelivered), 0 for none.
func (db *DB) Delivered(_ context.Context, key string) (int64, error) {
	var n int64
	err := db.view(func(tx *bolt.Tx) error {
		if sb := session(tx, key); sb != nil {
			n = delivered(sb)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: delivered of %s: %w", key, err)
	}
	return n, nil
}

// SaveDelivered stores the delivery cursor of session key's log, as
// given: the deliverer moves it only forward.
func (db *DB) SaveDelivered(_ context.Context, key string, seq int64) error {
	err := db.write(func(tx *bolt.Tx) error {
		sb, err := createSession(tx, key)
		if err != nil {
			return err
		}
		if err := compactLog(sb, seq); err != nil {
			return err
		}
		if err := sb.Put(kDelivered, u64(uint64(seq))); err != nil {
			return err
		}
		return mark(tx, bUndelivered, key, undelivered(sb))
	})
	if err != nil {
		return fmt.Errorf("store: save delivered of %s: %w", key, err)
	}
	return nil
}

func delivered(sb *bolt.Bucket) int64 {
	if raw := sb.Get(kDelivered); len(raw) == 8 {
		return int64(binary.BigEndian.Uint64(raw))
	}
	return 0
}

// undelivered reports whether the session in sb has log entries past its
// delivery cursor.
func undelivered(sb *bolt.Bucket) bool {
	lb := sb.Bucket(bLog)
	if lb == nil {
		return false
	}
	k, _ := lb.Cursor().Last()
	return k != nil && int64(binary.BigEndian.Uint64(k)) > delivered(sb)
}

// putLog writes a round's log entries (encoded) in sb.
func putLog(sb *bolt.Bucket, entries []agent.LogEntry, raw [][]byte) error {
	if len(entries) == 0 {
		return nil
	}
	lb, err := sb.CreateBucketIfNotExists(bLog)
	if err != nil {
		return err
	}
	for i, e := range entries {
		if err := lb.Put(u64(uint64(e.Seq)), raw[i]); err != nil {
			return err
		}
	}
	return nil
}

// Undelivered lists the sessions whose log goes past its delivery
// cursor, in key order, from their index: what a process that stopped
// left to show.
func (db *DB) Undelivered(_ context.Context) ([]string, error) {
	var keys []string
	err := db.view(func(tx *bolt.Tx) error {
		keys = listIndex(tx, bUndelivered)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: list undelivered sessions: %w", err)
	}
	return keys, nil
}

// compactLog deletes the entries of the session's log up to seq that
// nothing needs any more (agent.Compactable), in the cursor's write: the
// log keeps the last plan revision and open approvals behind the cursor,
// not every turn's entries.
func compactLog(sb *bolt.Bucket, seq int64) error {
	lb := sb.Bucket(bLog)
	if lb == nil {
		return nil
	}
	var passed []agent.LogEntry
	c := lb.Cursor()
	for k, v := c.First(); k != nil && int64(binary.BigEndian.Uint64(k)) <= seq; k, v = c.Next() {
		var e agent.LogEntry
		if json.Unmarshal(v, &e) != nil {
			continue // left as it is: the cursor is what this write is for
		}
		e.Seq = int64(binary.BigEndian.Uint64(k))
		passed = append(passed, e)
	}
	for _, n := range agent.Compactable(passed) {
		if err := lb.Delete(u64(uint64(n))); err != nil {
			return err
		}
	}
	return nil
}
