package store

import (
	"encoding/json"

	bolt "go.etcd.io/bbolt"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/boardrec"
)

// The indexes of the sessions with work left, one bucket each, keyed by
// session: a start visits the sessions they list, so its cost grows with
// those, not with the stored sessions. Every write that changes what
// they say changes them in the same transaction.
var (
	// bUndelivered: the session's log goes past its delivery cursor.
	bUndelivered = []byte("undelivered")
	// bResumable: the session is running or waiting for an approval, or
	// has messages queued.
	bResumable = []byte("resumable")
	// bPendingBoards: the session's plan board was last saved with work
	// left (chat.BoardStore.SaveBoard's pending).
	bPendingBoards = []byte("pending_boards")
)

var indexes = [][]byte{bUndelivered, bResumable, bPendingBoards}

// mark puts key in the index bucket name, or with in false takes it out.
func mark(tx *bolt.Tx, name []byte, key string, in bool) error {
	b := tx.Bucket(name)
	if in {
		return b.Put([]byte(key), []byte{})
	}
	return b.Delete([]byte(key))
}

// unmark takes key out of every index (its session is deleted).
func unmark(tx *bolt.Tx, key string) error {
	for _, name := range indexes {
		if err := mark(tx, name, key, false); err != nil {
			return err
		}
	}
	return nil
}

// resumable reports whether the session in sb, whose record says state,
// is one a start resumes: running, waiting, or with messages queued.
func resumable(sb *bolt.Bucket, state agent.RunState) bool {
	if ib := sb.Bucket(bInbox); ib != nil {
		if k, _ := ib.Cursor().First(); k != nil {
			return true
		}
	}
	return state.InTurn()
}

// listIndex returns the keys of the index bucket name, in key order.
func listIndex(tx *bolt.Tx, name []byte) []string {
	var keys []string
	b := tx.Bucket(name)
	if b == nil {
		return nil // a file opened read-only before its indexes were built
	}
	b.ForEach(func(k, _ []byte) error {
		keys = append(keys, string(k))
		return nil
	})
	return keys
}

// buildIndexes fills the indexes from the sessions, for a file written
// before they were kept (schema 1): the one time a start reads every
// session. A board counts as having work left unless its record shows
// the content it wants, pinned, with nothing to unpin or restore.
func buildIndexes(tx *bolt.Tx) error {
	sessions := tx.Bucket(bSessions)
	return sessions.ForEachBucket(func(k []byte) error {
		sb := sessions.Bucket(k)
		key := string(k)
		var state agent.RunState
		if raw := sb.Get(kRecord); raw != nil {
			var cp struct {
				State agent.RunState `json:"state"`
			}
			_ = json.Unmarshal(raw, &cp) // unreadable: resumed if queued, and said so then
			state = cp.State
		}
		if err := mark(tx, bResumable, key, resumable(sb, state)); err != nil {
			return err
		}
		if err := mark(tx, bUndelivered, key, undelivered(sb)); err != nil {
			return err
		}
		raw := sb.Get(kBoard)
		return mark(tx, bPendingBoards, key, raw != nil && boardrec.Pending(raw))
	})
}
