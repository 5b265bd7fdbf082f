package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/pinplan/pinplan/agent"
)

// SessionInfo is a session as listed for operators.
type SessionInfo struct {
	Checkpoint agent.Checkpoint
	Board      []byte // the chat plan board's record, if any
}

// Sessions lists every session with a checkpoint, in key order.
func (db *DB) Sessions(_ context.Context) ([]SessionInfo, error) {
	var out []SessionInfo
	err := db.bolt.View(func(tx *bolt.Tx) error {
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
	err := db.bolt.View(func(tx *bolt.Tx) error {
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

// Board returns the plan board record of a session (nil if none).
func (db *DB) Board(_ context.Context, key string) ([]byte, error) {
	var out []byte
	err := db.bolt.View(func(tx *bolt.Tx) error {
		if sb := session(tx, key); sb != nil {
			if raw := sb.Get(kBoard); raw != nil {
				out = append([]byte(nil), raw...)
			}
		}
		return nil
	})
	return out, err
}

// SaveBoard stores the plan board record of a session.
func (db *DB) SaveBoard(_ context.Context, key string, data []byte) error {
	err := db.bolt.Batch(func(tx *bolt.Tx) error {
		sb, err := createSession(tx, key)
		if err != nil {
			return err
		}
		return sb.Put(kBoard, data)
	})
	if err != nil {
		return fmt.Errorf("store: save plan board of %s: %w", key, err)
	}
	return nil
}

// FirstSeen records an event key for ttl and reports whether this is its
// first sighting. Redelivered events (Slack retries, gateway replays) see
// false and are dropped. Expired keys are pruned as it goes.
func (db *DB) FirstSeen(_ context.Context, key string, ttl time.Duration) (bool, error) {
	now := db.now()
	first := false
	err := db.bolt.Update(func(tx *bolt.Tx) error {
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

// PruneDedupe deletes expired dedupe keys and returns how many.
func (db *DB) PruneDedupe(_ context.Context) (int, error) {
	now := uint64(db.now().UnixNano())
	n := 0
	err := db.bolt.Update(func(tx *bolt.Tx) error {
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
	return n, err
}

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
