package store

import (
	"context"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/pinplan/pinplan/agent"
)

// SessionInfo is a session as listed for operators.
type SessionInfo struct {
	Checkpoint agent.Checkpoint
	Board      []byte // the chat plan board's record, if any
	Listing    []byte // chat's record of how the session is listed, if any
}

// Sessions lists every session with a checkpoint, in key order.
func (db *DB) Sessions(_ context.Context) ([]SessionInfo, error) {
	var out []SessionInfo
	err := db.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bSessions).ForEachBucket(func(k []byte) error {
			sb := tx.Bucket(bSessions).Bucket(k)
			info := SessionInfo{Checkpoint: agent.Checkpoint{Key: string(k), State: agent.Idle}}
			if raw := sb.Get(kRecord); raw != nil {
				if err := json.Unmarshal(raw, &info.Checkpoint); err != nil {
					return fmt.Errorf("record of %s: %w", k, err)
				}
			}
			if raw := sb.Get(kBoard); raw != nil {
				info.Board = append([]byte(nil), raw...)
			}
			if raw := sb.Get(kListing); raw != nil {
				info.Listing = append([]byte(nil), raw...)
			}
			out = append(out, info)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: list sessions: %w", err)
	}
	return out, nil
}

// Plans returns every plan revision of a session, oldest first.
func (db *DB) Plans(_ context.Context, key string) ([]agent.PlanRevision, error) {
	var out []agent.PlanRevision
	err := db.view(func(tx *bolt.Tx) error {
		sb := session(tx, key)
		if sb == nil {
			return nil
		}
		return sb.Bucket(bPlans).ForEach(func(_, v []byte) error {
			var p agent.PlanRevision
			if err := json.Unmarshal(v, &p); err != nil {
				return err
			}
			out = append(out, p)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: plans of %s: %w", key, err)
	}
	return out, nil
}

// Board implements chat.BoardStore: the plan board record of a session
// (nil if none).
func (db *DB) Board(_ context.Context, key string) ([]byte, error) {
	return db.chatRecord(key, kBoard, "plan board")
}

// SaveBoard implements chat.BoardStore: the record, and whether it has
// work left in the index of such boards.
func (db *DB) SaveBoard(_ context.Context, key string, data []byte, pending bool) error {
	err := db.write(func(tx *bolt.Tx) error {
		sb, err := createSession(tx, key)
		if err != nil {
			return err
		}
		if err := mark(tx, bPendingBoards, key, pending); err != nil {
			return err
		}
		return sb.Put(kBoard, data)
	})
	if err != nil {
		return fmt.Errorf("store: save plan board of %s: %w", key, err)
	}
	return nil
}

// PendingBoards implements chat.BoardStore, from the index of boards
// saved with work left.
func (db *DB) PendingBoards(_ context.Context) ([]string, error) {
	var keys []string
	err := db.view(func(tx *bolt.Tx) error {
		keys = listIndex(tx, bPendingBoards)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: list plan boards with work left: %w", err)
	}
	return keys, nil
}

// Cards implements chat.CardStore: the approval cards record of a session
// (nil if none).
func (db *DB) Cards(_ context.Context, key string) ([]byte, error) {
	return db.chatRecord(key, kCards, "approval cards")
}

// SaveCards implements chat.CardStore.
func (db *DB) SaveCards(_ context.Context, key string, data []byte) error {
	return db.saveChatRecord(key, kCards, "approval cards", data)
}

// Listing implements chat.ListingStore: the listing record of a session
// (nil if none).
func (db *DB) Listing(_ context.Context, key string) ([]byte, error) {
	return db.chatRecord(key, kListing, "listing")
}

// SaveListing implements chat.ListingStore.
func (db *DB) SaveListing(_ context.Context, key string, data []byte) error {
	return db.saveChatRecord(key, kListing, "listing", data)
}

// chatRecord returns the value at sessions/<key>/<name>, one of the
// records the chat package keeps of a session (opaque bytes); nil if none.
func (db *DB) chatRecord(key string, name []byte, what string) ([]byte, error) {
	var out []byte
	err := db.view(func(tx *bolt.Tx) error {
		if sb := session(tx, key); sb != nil {
			if raw := sb.Get(name); raw != nil {
				out = append([]byte(nil), raw...)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: %s of %s: %w", what, key, err)
	}
	return out, nil
}

// saveChatRecord stores data at sessions/<key>/<name> (see chatRecord).
func (db *DB) saveChatRecord(key string, name []byte, what string, data []byte) error {
	err := db.write(func(tx *bolt.Tx) error {
		sb, err := createSession(tx, key)
		if err != nil {
			return err
		}
		return sb.Put(name, data)
	})
	if err != nil {
		return fmt.Errorf("store: save %s of %s: %w", what, key, err)
	}
	return nil
}

// SessionCount returns the number of sessions (as Sessions lists them)
// without reading their records: it counts the keys of the sessions bucket
// with a cursor, which touches only that bucket's pages. (Bucket.Stats is
// no shortcut: it walks every page of every nested bucket, and its BucketN
// and KeyN include each session's history, plans and inbox buckets and
// their keys.)
func (db *DB) SessionCount() (int, error) {
	n := 0
	err := db.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bSessions).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v == nil { // a nested bucket: a session
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: count sessions: %w", err)
	}
	return n, nil
}
