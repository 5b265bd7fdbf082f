// Package store keeps pinplan's state in one embedded bbolt file: sessions
// with their checkpoints, ordered conversation history, every plan
// revision, inboxes, platform message refs and event-dedupe keys.
//
// It implements the storage interfaces its consumers declare (agent.Store,
// and the chat package's) and imports only agent and todo of pinplan's
// packages. cmd/bot opens it and hands it to them.
//
// Layout (schema 1):
//
//	meta/schema                       "1"
//	sessions/<key>/record             agent.Checkpoint as JSON
//	sessions/<key>/board              opaque bytes owned by the chat plan board
//	sessions/<key>/cards              opaque bytes: chat's approval cards of the session
//	sessions/<key>/listing            opaque bytes: how chat lists the session (title, deleted)
//	sessions/<key>/history/<u64>      agent.Entry as JSON, in order
//	sessions/<key>/plans/<u64 rev>    agent.PlanRevision as JSON
//	sessions/<key>/inbox/<u64 id>     agent.Inbound as JSON
//	sessions/<key>/archive/<u64 n>/   a reset's record, history and plans
//	dedupe/<key>                      expiry, unix nanoseconds as u64
//	outbox/<u64 id>                   a reply not yet delivered, opaque bytes owned by chat
//	marks/<name>                      an adapter's read marks, opaque bytes (chat.MarkStore)
//	followups/<key>\x00<order>        a follow-up waiting for its thread's session: expiry, then chat's bytes
//	spend/<day>/<person>              tokens charged to a person on a UTC day, u64 (spend.go)
package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/pinplan/pinplan/agent"
)

// SchemaVersion is the layout version this code reads and writes.
const SchemaVersion = 2

// ErrLocked means another process holds the database file.
var ErrLocked = errors.New("database file is locked by another process")

// ErrConflict means a commit does not follow the stored history.
var ErrConflict = errors.New("commit does not follow the stored session")

var (
	bMeta     = []byte("meta")
	bSessions = []byte("sessions")
	bDedupe   = []byte("dedupe")
	bOutbox   = []byte("outbox")
	bMarks    = []byte("marks")
	bHistory  = []byte("history")
	bPlans    = []byte("plans")
	bInbox    = []byte("inbox")
	kRecord   = []byte("record")
	kBoard    = []byte("board")
	kCards    = []byte("cards")
	kListing  = []byte("listing")
	kSchema   = []byte("schema")
)

// Options tunes Open.
type Options struct {
	// LockTimeout bounds the wait for another process's file lock.
	LockTimeout time.Duration
	// BatchDelay is how long a commit waits for others to share its fsync
	// when other writes are in flight; a lone commit does not wait.
	BatchDelay time.Duration
	Now        func() time.Time
	// ReadOnly opens an existing file for reading only (migrate): it is
	// left exactly as it was, and every write fails.
	ReadOnly bool
}

// DB is the pinplan database. It is safe for concurrent use.
type DB struct {
	bolt *bolt.DB
	path string
	// fileID is FileID(path) when the file was opened: the identity of
	// the file bbolt holds, which a backup checks it asked the right bot for.
	fileID string
	now    func() time.Time
	// writes counts the calls of write in flight (running or waiting in
	// a batch); a write that finds none runs at once.
	writes atomic.Int64
	// stuck is set when damage met while bbolt committed or rolled back
	// may have left its writer lock held (see writeWith).
	stuck atomic.Pointer[error]
}

var _ agent.Store = (*DB)(nil)

// openError says what failed to open the file at path and what to do:
// another pinplan holds it, it is damaged (restore a backup), or this
// user may not use it (restoring would not help: check owner and mode).
func openError(path string, lockTimeout time.Duration, err error) error {
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return fmt.Errorf("store: open %s: %w (waited %s; is another pinplan running with this PINPLAN_DB?)", path, ErrLocked, lockTimeout)
	case errors.Is(err, ErrCorrupt):
		return fmt.Errorf("store: %w", err)
	case errors.Is(err, fs.ErrPermission):
		// Not damage: restoring a backup would not help, and would lose
		// what the file holds. Say whose the file is.
		return fmt.Errorf("store: open %s: %w; the file (or its folder) is not readable and writable by this user: check its owner and mode (pinplan creates it 0600 as the user it runs as)", path, err)
	case err != nil:
		return fmt.Errorf("store: open %s: %w (if the file is damaged, restore it from a backup made with `bot backup`)", path, err)
	}
	return nil
}

// Open opens or creates the database at path, creating its folder.
func Open(path string, opts Options) (*DB, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = 2 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("store: create folder for %s: %w", path, err)
		}
	}
	// A damaged file fails here, once, rather than in a session later.
	err := precheck(path, opts.LockTimeout)
	var b *bolt.DB
	if err == nil {
		b, err = openBolt(path, &bolt.Options{Timeout: opts.LockTimeout, ReadOnly: opts.ReadOnly})
	}
	if err != nil {
		return nil, openError(path, opts.LockTimeout, err)
	}
	if opts.BatchDelay > 0 {
		b.MaxBatchDelay = opts.BatchDelay
	}
	id, err := FileID(path)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	db := &DB{bolt: b, path: path, fileID: id, now: opts.Now}
	migrate := db.migrate
	if opts.ReadOnly {
		migrate = db.checkSchema
	}
	if err := migrate(); err != nil {
		b.Close()
		if errors.Is(err, ErrCorrupt) {
			return nil, fmt.Errorf("store: %w", err)
		}
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	return db, nil
}

// Close closes the file. After damage that may have left bbolt's writer
// lock held (see writeWith), bbolt could not close it without waiting
// forever: Close returns that error and the file stays open until the
// process ends.
func (db *DB) Close() error {
	if stuck := db.stuck.Load(); stuck != nil {
		return *stuck
	}
	return db.bolt.Close()
}

func (db *DB) migrate() error {
	return db.update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bMeta)
		if err != nil {
			return err
		}
		v := SchemaVersion
		if raw := meta.Get(kSchema); raw != nil {
			if v, err = strconv.Atoi(string(raw)); err != nil {
				return fmt.Errorf("schema version %q is not a number", raw)
			}
		}
		if v > SchemaVersion {
			return fmt.Errorf("schema version %d is newer than this pinplan understands (%d); upgrade pinplan", v, SchemaVersion)
		}
		for _, name := range append([][]byte{bSessions, bDedupe, bOutbox, bMarks}, indexes...) {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		// Migrations from older versions, one step per version.
		if v < 2 && meta.Get(kSchema) != nil {
			if err := buildIndexes(tx); err != nil {
				return fmt.Errorf("build the indexes of sessions with work left: %w", err)
			}
		}
		return meta.Put(kSchema, []byte(strconv.Itoa(SchemaVersion)))
	})
}

// checkSchema refuses a file this version cannot read, without writing.
func (db *DB) checkSchema() error {
	return db.view(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bMeta)
		if meta == nil || tx.Bucket(bSessions) == nil || tx.Bucket(bOutbox) == nil {
			return errors.New("not a pinplan database (no meta, sessions or outbox bucket)")
		}
		v, err := strconv.Atoi(string(meta.Get(kSchema)))
		if err != nil || v > SchemaVersion {
			return fmt.Errorf("schema version %q is not one this pinplan reads (%d); upgrade pinplan", meta.Get(kSchema), SchemaVersion)
		}
		return nil
	})
}

func u64(n uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return b[:]
}

func session(tx *bolt.Tx, key string) *bolt.Bucket {
	return tx.Bucket(bSessions).Bucket([]byte(key))
}

func createSession(tx *bolt.Tx, key string) (*bolt.Bucket, error) {
	sb, err := tx.Bucket(bSessions).CreateBucketIfNotExists([]byte(key))
	if err != nil {
		return nil, err
	}
	for _, name := range [][]byte{bHistory, bPlans, bInbox} {
		if _, err := sb.CreateBucketIfNotExists(name); err != nil {
			return nil, err
		}
	}
	return sb, nil
}

// Load implements agent.Store.
func (db *DB) Load(_ context.Context, key string) (*agent.Checkpoint, []agent.Entry, []agent.Inbound, error) {
	var cp *agent.Checkpoint
	var hist []agent.Entry
	var inbox []agent.Inbound
	err := db.view(func(tx *bolt.Tx) error {
		sb := session(tx, key)
		if sb == nil {
			return nil
		}
		if raw := sb.Get(kRecord); raw != nil {
			cp = new(agent.Checkpoint)
			if err := json.Unmarshal(raw, cp); err != nil {
				return fmt.Errorf("record: %w", err)
			}
		}
		if err := sb.Bucket(bHistory).ForEach(func(_, v []byte) error {
			var e agent.Entry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("history entry: %w", err)
			}
			hist = append(hist, e)
			return nil
		}); err != nil {
			return err
		}
		var err error
		inbox, err = readInbox(sb)
		return err
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("store: load session %s: %w", key, err)
	}
	if cp != nil && cp.HistoryLen != len(hist) {
		return nil, nil, nil, fmt.Errorf("store: load session %s: record says %d history entries, found %d", key, cp.HistoryLen, len(hist))
	}
	return cp, hist, inbox, nil
}

func readInbox(sb *bolt.Bucket) ([]agent.Inbound, error) {
	var inbox []agent.Inbound
	err := sb.Bucket(bInbox).ForEach(func(_, v []byte) error {
		var in agent.Inbound
		if err := json.Unmarshal(v, &in); err != nil {
			return fmt.Errorf("inbox entry: %w", err)
		}
		inbox = append(inbox, in)
		return nil
	})
	return inbox, err
}

// Inbox implements agent.Store.
func (db *DB) Inbox(_ context.Context, key string) ([]agent.Inbound, error) {
	var inbox []agent.Inbound
	err := db.view(func(tx *bolt.Tx) error {
		sb := session(tx, key)
		if sb == nil {
			return nil
		}
		var err error
		inbox, err = readInbox(sb)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: inbox of %s: %w", key, err)
	}
	return inbox, nil
}

// Enqueue implements agent.Store.
func (db *DB) Enqueue(_ context.Context, key string, in agent.Inbound) (agent.Inbound, error) {
	err := db.update(func(tx *bolt.Tx) error {
		sb, err := createSession(tx, key)
		if err != nil {
			return err
		}
		if in.Event != "" {
			dd := tx.Bucket(bDedupe)
			now := db.now()
			if raw := dd.Get([]byte(in.Event)); len(raw) == 8 && int64(binary.BigEndian.Uint64(raw)) > now.UnixNano() {
				return agent.ErrDuplicate
			}
			if err := dd.Put([]byte(in.Event), u64(uint64(now.Add(agent.EventTTL).UnixNano()))); err != nil {
				return err
			}
		}
		ib := sb.Bucket(bInbox)
		if in.ID, err = ib.NextSequence(); err != nil {
			return err
		}
		raw, err := json.Marshal(in)
		if err != nil {
			return err
		}
		if err := mark(tx, bResumable, key, true); err != nil {
			return err
		}
		return ib.Put(u64(in.ID), raw)
	})
	if err != nil {
		return in, fmt.Errorf("store: enqueue for %s: %w", key, err)
	}
	return in, nil
}

// Commit implements agent.Store: the round in one bbolt transaction (see
// write: at once when no other write is in flight, else shared with the
// concurrent ones through db.Batch).
func (db *DB) Commit(_ context.Context, r *agent.Round) error {
	fn, err := commitTx(r)
	if err == nil {
		err = db.write(fn)
	}
	if err != nil {
		return fmt.Errorf("store: commit round of %s: %w", r.Checkpoint.Key, err)
	}
	return nil
}

// commitTx encodes a round and returns the transaction function that
// writes it. The function only puts precomputed bytes at fixed keys and
// deletes fixed keys, so running it twice (as Batch may) writes the same
// state, and adds the round's Spend, which a rolled-back first run did
// not; it refuses a round that does not follow the stored record.
func commitTx(r *agent.Round) (func(*bolt.Tx) error, error) {
	key := r.Checkpoint.Key
	record, err := json.Marshal(r.Checkpoint)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	entries := make([][]byte, len(r.Append))
	for i, e := range r.Append {
		if entries[i], err = json.Marshal(e); err != nil {
			return nil, fmt.Errorf("encode history: %w", err)
		}
	}
	logged := make([][]byte, len(r.Log))
	for i, e := range r.Log {
		if logged[i], err = json.Marshal(e); err != nil {
			return nil, fmt.Errorf("encode log: %w", err)
		}
	}
	plans := make([][]byte, len(r.Plans))
	for i, p := range r.Plans {
		if plans[i], err = json.Marshal(p); err != nil {
			return nil, fmt.Errorf("encode plan: %w", err)
		}
	}
	return func(tx *bolt.Tx) error {
		sb, err := createSession(tx, key)
		if err != nil {
			return err
		}
		if raw := sb.Get(kRecord); raw != nil {
			var cur struct {
				HistoryLen int   `json:"history_len"`
				Changed    int64 `json:"changed"`
			}
			if err := json.Unmarshal(raw, &cur); err != nil {
				return fmt.Errorf("record: %w", err)
			}
			if cur.HistoryLen != r.Base && cur.HistoryLen != r.Checkpoint.HistoryLen {
				return fmt.Errorf("%w: stored history has %d entries, round starts at %d", ErrConflict, cur.HistoryLen, r.Base)
			}
			if r.Guard && cur.Changed != r.Checkpoint.Changed {
				return agent.ErrChanged
			}
		} else if r.Base != 0 {
			return fmt.Errorf("%w: no record, round starts at %d", ErrConflict, r.Base)
		}
		hb := sb.Bucket(bHistory)
		for i, raw := range entries {
			if err := hb.Put(u64(uint64(r.Base+i)), raw); err != nil {
				return err
			}
		}
		pb := sb.Bucket(bPlans)
		for i, raw := range plans {
			if err := pb.Put(u64(uint64(r.Plans[i].Revision)), raw); err != nil {
				return err
			}
		}
		ib := sb.Bucket(bInbox)
		for _, id := range r.Drained {
			if err := ib.Delete(u64(id)); err != nil {
				return err
			}
		}
		if err := putLog(sb, r.Log, logged); err != nil {
			return err
		}
		if err := addSpend(tx, r.Spend); err != nil {
			return err
		}
		if err := mark(tx, bUndelivered, key, undelivered(sb)); err != nil {
			return err
		}
		if err := mark(tx, bResumable, key, resumable(sb, r.Checkpoint.State)); err != nil {
			return err
		}
		return sb.Put(kRecord, record)
	}, nil
}

// write runs fn in a write transaction. A lone write runs at once in its
// own Update: waiting MaxBatchDelay for company that is not coming would
// cost a lone session's round several times the fsync (BENCHMARKS.md).
// When another write is in flight or waiting, fn joins db.Batch, so that
// concurrent sessions share fsyncs. fn must be idempotent: Batch may run it
// twice.
func (db *DB) write(fn func(*bolt.Tx) error) error {
	n := db.writes.Add(1)
	defer db.writes.Add(-1)
	if n == 1 {
		return db.writeWith(db.bolt.Update, fn)
	}
	return db.writeWith(db.bolt.Batch, fn)
}

// Resumable implements agent.Store, from the index of resumable
// sessions.
func (db *DB) Resumable(_ context.Context) ([]string, error) {
	var keys []string
	err := db.view(func(tx *bolt.Tx) error {
		keys = listIndex(tx, bResumable)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: list resumable sessions: %w", err)
	}
	return keys, nil
}

// UpdateCheckpoint implements agent.Store: the read, fn and the write are
// one bbolt write transaction, so no other write of the record comes
// between them. It refuses a change of the record's key or history length
// (those are Commit's) with ErrConflict.
func (db *DB) UpdateCheckpoint(_ context.Context, key string, fn func(*agent.Checkpoint) error) error {
	err := db.update(func(tx *bolt.Tx) error {
		sb := session(tx, key)
		var raw []byte
		if sb != nil {
			raw = sb.Get(kRecord)
		}
		if raw == nil {
			return fn(nil)
		}
		var cp agent.Checkpoint
		if err := json.Unmarshal(raw, &cp); err != nil {
			return fmt.Errorf("record: %w", err)
		}
		storedKey, storedLen := cp.Key, cp.HistoryLen
		if err := fn(&cp); err != nil {
			return err
		}
		if cp.Key != storedKey || cp.HistoryLen != storedLen {
			return fmt.Errorf("%w: an update may not change the record's key or history length", ErrConflict)
		}
		out, err := json.Marshal(cp)
		if err != nil {
			return err
		}
		if err := mark(tx, bResumable, key, resumable(sb, cp.State)); err != nil {
			return err
		}
		return sb.Put(kRecord, out)
	})
	if err != nil {
		return fmt.Errorf("store: update checkpoint of %s: %w", key, err)
	}
	return nil
}
