package store

import (
	"context"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/pinplan/pinplan/agent"
)

var bArchive = []byte("archive")

// Archive implements agent.Store: in one transaction, the session's
// history, plan revisions and record move to
// sessions/<key>/archive/<n>/ and the session starts afresh (the record
// agent.Checkpoint.Reset gives, empty history and plans). Queued messages
// stay queued. The plan board, approval cards and listing records are the
// chat layer's (its reset starts the board and the cards over and keeps
// the listing): Archive leaves them as they are.
func (db *DB) Archive(_ context.Context, key string) error {
	err := db.update(func(tx *bolt.Tx) error {
		sb := session(tx, key)
		if sb == nil {
			return nil
		}
		ar, err := sb.CreateBucketIfNotExists(bArchive)
		if err != nil {
			return err
		}
		n, err := ar.NextSequence()
		if err != nil {
			return err
		}
		dst, err := ar.CreateBucket(u64(n))
		if err != nil {
			return err
		}
		var old agent.Checkpoint
		if raw := sb.Get(kRecord); raw != nil {
			if err := dst.Put(kRecord, append([]byte(nil), raw...)); err != nil {
				return err
			}
			if err := json.Unmarshal(raw, &old); err != nil {
				old = agent.Checkpoint{} // an unreadable record is archived as it was
			}
		}
		for _, name := range [][]byte{bHistory, bPlans} {
			if err := moveBucket(sb, dst, name); err != nil {
				return err
			}
		}
		now := db.now()
		old.Key = key
		fresh := old.Reset(now)
		raw, err := json.Marshal(fresh)
		if err != nil {
			return err
		}
		if err := mark(tx, bResumable, key, resumable(sb, fresh.State)); err != nil {
			return err
		}
		return sb.Put(kRecord, raw)
	})
	if err != nil {
		return fmt.Errorf("store: archive session %s: %w", key, err)
	}
	return nil
}

// moveBucket copies the bucket name of src into dst and leaves an empty
// one in src.
func moveBucket(src, dst *bolt.Bucket, name []byte) error {
	from := src.Bucket(name)
	to, err := dst.CreateBucket(name)
	if err != nil {
		return err
	}
	if from != nil {
		if err := from.ForEach(func(k, v []byte) error { return to.Put(append([]byte(nil), k...), append([]byte(nil), v...)) }); err != nil {
			return err
		}
		if err := src.DeleteBucket(name); err != nil {
			return err
		}
	}
	_, err = src.CreateBucket(name)
	return err
}

// Archived returns how many times the session was reset and the history
// of archive n (1-based), for audit.
func (db *DB) Archived(_ context.Context, key string, n uint64) (int, []agent.Entry, error) {
	count := 0
	var hist []agent.Entry
	err := db.view(func(tx *bolt.Tx) error {
		sb := session(tx, key)
		if sb == nil || sb.Bucket(bArchive) == nil {
			return nil
		}
		ar := sb.Bucket(bArchive)
		count = 0
		if err := ar.ForEachBucket(func([]byte) error { count++; return nil }); err != nil {
			return err
		}
		b := ar.Bucket(u64(n))
		if b == nil || b.Bucket(bHistory) == nil {
			return nil
		}
		return b.Bucket(bHistory).ForEach(func(_, v []byte) error {
			var e agent.Entry
			if err := json.Unmarshal(v, &e); err != nil {
				return err
			}
			hist = append(hist, e)
			return nil
		})
	})
	if err != nil {
		return 0, nil, fmt.Errorf("store: archives of %s: %w", key, err)
	}
	return count, hist, nil
}

// ArchivedState returns archive n's record (as stored) and plan
// revisions, for migrate; nil and none if the session has no archive n.
func (db *DB) ArchivedState(_ context.Context, key string, n uint64) ([]byte, []agent.PlanRevision, error) {
	var rec []byte
	var plans []agent.PlanRevision
	err := db.view(func(tx *bolt.Tx) error {
		sb := session(tx, key)
		if sb == nil || sb.Bucket(bArchive) == nil {
			return nil
		}
		b := sb.Bucket(bArchive).Bucket(u64(n))
		if b == nil {
			return nil
		}
		if raw := b.Get(kRecord); raw != nil {
			rec = append([]byte(nil), raw...)
		}
		if pb := b.Bucket(bPlans); pb != nil {
			return pb.ForEach(func(_, v []byte) error {
				var p agent.PlanRevision
				if err := json.Unmarshal(v, &p); err != nil {
					return err
				}
				plans = append(plans, p)
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store: archive %d of %s: %w", n, key, err)
	}
	return rec, plans, nil
}
