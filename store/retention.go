package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/pinplan/pinplan/agent"
)

// Retain deletes from the store the sessions idle for longer than
// retention (DeleteIdle) and tells deleted of each, with the time the
// deletion began (chat.Router.Deleted drops it from memory and from what
// the platforms keep, unless it is in use again since). It returns the
// keys deleted; on an error, those deleted before it.
func (db *DB) Retain(ctx context.Context, retention time.Duration, deleted func(key string, since time.Time)) ([]string, error) {
	began := time.Now()
	keys, err := db.DeleteIdle(ctx, began.Add(-retention))
	for _, k := range keys {
		deleted(k, began)
	}
	return keys, err
}

// RetentionEvery is how many housekeeping minutes apart Retain runs (0:
// never): every ten minutes, or every half of a shorter retention (at
// least every minute), so that a session outlives its retention by at
// most about half of it. Each run reads every session's record once.
func RetentionEvery(retention time.Duration) int {
	if retention <= 0 {
		return 0
	}
	return max(1, min(10, int(retention/2/time.Minute)))
}

// deleteChunk bounds the sessions one DeleteIdle transaction deletes, so
// that retention does not hold the writer lock against commits for long.
const deleteChunk = 64

// DeleteIdle deletes every session idle since before olderThan, whole
// (record, chat's plan board, approval cards and listing records, history,
// plan revisions, inbox, and the archives kept by reset, which renews the
// record's Updated), and returns the deleted keys in key order. On an error it returns the keys deleted so
// far.
//
// A session is idle when:
//   - its inbox is empty, and
//   - its record's state is idle (never running, waiting for an approval,
//     or a state this version does not know) and its Updated is before
//     olderThan (a record without Updated, or one that cannot be read, is
//     kept: its age is unknown), and
//   - its log has nothing past its delivery cursor (everything the agent
//     did has been shown in the thread; see Log and SaveDelivered), and
//   - its plan board record, if any, can be read.
//
// Whether a turn runs is the agent's record's to say: retention reads no
// state or footer of chat's records.
//
// A session without a record is kept while it has queued messages. With
// only a board record, it is deleted when the board's own timestamps are
// all before olderThan, and kept when it has none (its age is unknown). A
// session bucket with nothing in it holds no state and is deleted.
//
// The cards and listing records decide nothing: they hold no run state (a
// card waiting for a decision goes with a record that is waiting) and no time, so they go with their session,
// and a session with only them (no record, board or queued message: no
// turn can run) is deleted like an empty one.
//
// Outbox items are not touched: they carry their thread themselves and
// delivery drops them when they fail for good.
//
// Candidates are found in a read transaction and deleted in write
// transactions of at most deleteChunk sessions, each checking again that
// the session is still idle, so a session that became busy meanwhile stays.
func (db *DB) DeleteIdle(ctx context.Context, olderThan time.Time) ([]string, error) {
	var candidates []string
	err := db.view(func(tx *bolt.Tx) error {
		sessions := tx.Bucket(bSessions)
		return sessions.ForEachBucket(func(k []byte) error {
			if idleSince(sessions.Bucket(k), olderThan) {
				candidates = append(candidates, string(k))
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: find idle sessions: %w", err)
	}
	var deleted []string
	for len(candidates) > 0 {
		if err := ctx.Err(); err != nil {
			return deleted, fmt.Errorf("store: delete idle sessions: %w", context.Cause(ctx))
		}
		chunk := candidates[:min(deleteChunk, len(candidates))]
		candidates = candidates[len(chunk):]
		var done []string
		err := db.update(func(tx *bolt.Tx) error {
			done = done[:0]
			sessions := tx.Bucket(bSessions)
			for _, key := range chunk {
				sb := sessions.Bucket([]byte(key))
				if sb == nil || !idleSince(sb, olderThan) {
					continue
				}
				if err := sessions.DeleteBucket([]byte(key)); err != nil {
					return fmt.Errorf("session %s: %w", key, err)
				}
				if err := unmark(tx, key); err != nil {
					return fmt.Errorf("session %s: %w", key, err)
				}
				done = append(done, key)
			}
			return nil
		})
		if err != nil {
			return deleted, fmt.Errorf("store: delete idle sessions: %w", err)
		}
		deleted = append(deleted, done...)
	}
	return deleted, nil
}

// idleSince reports whether the session in sb may be deleted by retention
// with the cutoff olderThan (see DeleteIdle).
func idleSince(sb *bolt.Bucket, olderThan time.Time) bool {
	if ib := sb.Bucket(bInbox); ib != nil {
		if k, _ := ib.Cursor().First(); k != nil {
			return false
		}
	}
	if undelivered(sb) {
		return false // the thread has not been shown all the agent did
	}
	var boardAge time.Time
	if raw := sb.Get(kBoard); raw != nil {
		updated, ok := boardUpdated(raw)
		if !ok {
			return false
		}
		boardAge = updated
	}
	raw := sb.Get(kRecord)
	if raw == nil {
		if sb.Get(kBoard) == nil {
			return true // nothing stored that a turn or a board resumes
		}
		return !boardAge.IsZero() && boardAge.Before(olderThan)
	}
	var rec struct {
		State   agent.RunState `json:"state"`
		Updated time.Time      `json:"updated"`
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		return false
	}
	return rec.State == agent.Idle && !rec.Updated.IsZero() && rec.Updated.Before(olderThan)
}

// boardView is the part of the chat plan board's record (chat.boardRecord,
// JSON) that retention reads of a session with no agent record: how old
// its plan contents are. Whether a turn runs is the agent's record's to
// say, and what is left to show the log's (undelivered). The record is
// chat's and store may not import chat, so these field names mirror
// chat's; the retention test writes records in that shape. Want is read
// from records written before the board's content was folded from the
// log, which kept it.
type boardView struct {
	Shown struct {
		Updated time.Time `json:"updated"`
	} `json:"shown"`
	Want *struct {
		Updated time.Time `json:"updated"`
	} `json:"want"`
}

// boardUpdated returns the newer of a board record's contents' times; ok
// is false when the record cannot be read.
func boardUpdated(raw []byte) (updated time.Time, ok bool) {
	var v boardView
	if err := json.Unmarshal(raw, &v); err != nil {
		return time.Time{}, false
	}
	updated = v.Shown.Updated
	if v.Want != nil && v.Want.Updated.After(updated) {
		updated = v.Want.Updated
	}
	return updated, true
}
