// Package migrate copies pinplan's bbolt file into an empty etcd prefix
// (bot migrate -to etcd, DESIGN §14): each session, read back and
// compared as it is copied, the replies not delivered yet, and the
// adapters' read marks. Run is the command: it opens both stores, marks
// the prefix around the copy and reports. cmd/bot calls it.
package migrate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/etcdstore"
	"github.com/pinplan/pinplan/store"
)

// Outbox copies the replies not delivered yet and returns how many.
// Unreadable items are dropped, as delivery drops them.
func Outbox(ctx context.Context, db *store.DB, es *etcdstore.Store) (int, error) {
	var n int
	var outErr error
	err := db.Outbox(ctx, func(_ uint64, data []byte) {
		var it struct {
			Thread struct {
				Key string `json:"key"`
			} `json:"thread"`
		}
		if outErr != nil || json.Unmarshal(data, &it) != nil || it.Thread.Key == "" {
			return
		}
		if _, outErr = es.AddOutbox(ctx, it.Thread.Key, [][]byte{data}); outErr == nil {
			n++
		}
	})
	return n, errors.Join(err, outErr)
}

// Marks copies the adapters' read marks and returns whose they are.
func Marks(ctx context.Context, db *store.DB, es *etcdstore.Store) ([]string, error) {
	var marks []string
	var outErr error
	err := db.EachMarks(ctx, func(name string, data []byte) {
		if outErr == nil {
			outErr = es.SaveMarks(ctx, name, data)
			marks = append(marks, name)
		}
	})
	return marks, errors.Join(err, outErr)
}

// Counts are what was copied of the sessions.
type Counts struct{ Sessions, Entries, Plans, Queued, Archives int }

// Sessions copies every session (Session) and returns the sums. An error
// names the session.
func Sessions(ctx context.Context, db *store.DB, es *etcdstore.Store) (Counts, error) {
	infos, err := db.Sessions(ctx)
	if err != nil {
		return Counts{}, err
	}
	keys, err := db.PendingBoards(ctx)
	if err != nil {
		return Counts{}, err
	}
	pending := make(map[string]bool, len(keys))
	for _, k := range keys {
		pending[k] = true
	}
	var c Counts
	for _, in := range infos {
		key := in.Checkpoint.Key
		n, err := Session(ctx, db, es, key, pending[key])
		if err != nil {
			return c, fmt.Errorf("session %s: %w", key, err)
		}
		c.Sessions++
		c.Entries += n.Entries
		c.Plans += n.Plans
		c.Queued += n.Queued
		c.Archives += n.Archives
	}
	return c, nil
}

// Session copies one session and reads it back: its record, history,
// plan revisions, the log past its delivery cursor and the cursor,
// queued messages, plan board (with work left if pendingBoard, as the
// file's index says), cards and listing, and the archived histories a
// reset kept.
func Session(ctx context.Context, db *store.DB, es *etcdstore.Store, key string, pendingBoard bool) (Counts, error) {
	cp, hist, inbox, err := db.Load(ctx, key)
	if err != nil {
		return Counts{}, err
	}
	plans, err := db.Plans(ctx, key)
	if err != nil {
		return Counts{}, err
	}
	// The session's log past its delivery cursor goes with the record,
	// and the cursor after it: the first replica to take the session
	// shows what the bot had not shown yet, and nothing again.
	delivered, err := db.Delivered(ctx, key)
	if err != nil {
		return Counts{}, err
	}
	tail, err := db.Log(ctx, key, delivered)
	if err != nil {
		return Counts{}, err
	}
	if cp != nil {
		if err := es.Commit(ctx, &agent.Round{Base: 0, Append: hist, Plans: plans, Log: tail, Checkpoint: *cp}); err != nil {
			return Counts{}, err
		}
	}
	if delivered > 0 {
		if err := es.SaveDelivered(ctx, key, delivered); err != nil {
			return Counts{}, err
		}
	}
	for _, in := range inbox {
		if _, err := es.Enqueue(ctx, key, in); err != nil {
			return Counts{}, err
		}
	}
	for _, rec := range []struct {
		load func(context.Context, string) ([]byte, error)
		save func(context.Context, string, []byte) error
	}{{db.Board, func(ctx context.Context, key string, data []byte) error {
		return es.SaveBoard(ctx, key, data, pendingBoard)
	}}, {db.Cards, es.SaveCards}, {db.Listing, es.SaveListing}} {
		data, err := rec.load(ctx, key)
		if err != nil {
			return Counts{}, err
		}
		if data != nil {
			if err := rec.save(ctx, key, data); err != nil {
				return Counts{}, err
			}
		}
	}
	archives, _, err := db.Archived(ctx, key, 0)
	if err != nil {
		return Counts{}, err
	}
	for n := 1; n <= archives; n++ {
		_, old, err := db.Archived(ctx, key, uint64(n))
		if err != nil {
			return Counts{}, err
		}
		rec, oldPlans, err := db.ArchivedState(ctx, key, uint64(n))
		if err != nil {
			return Counts{}, err
		}
		if err := es.PutArchive(ctx, key, uint64(n), rec, old, oldPlans); err != nil {
			return Counts{}, err
		}
	}
	if err := readBack(ctx, db, es, key, archives); err != nil {
		return Counts{}, fmt.Errorf("read back: %w", err)
	}
	return Counts{Sessions: 1, Entries: len(hist), Plans: len(plans), Queued: len(inbox), Archives: archives}, nil
}

// check is one comparison of readBack: what the file has (a) and what
// etcd has (b).
type check struct {
	what string
	a, b any
}

// readBack reads the session from both stores and compares everything,
// as JSON, byte for byte: the record, every history entry, plan revision
// and queued message (their text: the ids are the new store's), the
// chat records, and each archive's record, history and plans.
func readBack(ctx context.Context, db *store.DB, es *etcdstore.Store, key string, archives int) error {
	same := func(what string, a, b any) error {
		ja, err := json.Marshal(a)
		if err != nil {
			return err
		}
		jb, err := json.Marshal(b)
		if err != nil {
			return err
		}
		if !bytes.Equal(ja, jb) {
			return fmt.Errorf("%s differs: the file has %.200s, etcd %.200s", what, ja, jb)
		}
		return nil
	}
	cp, hist, inbox, err := db.Load(ctx, key)
	if err != nil {
		return err
	}
	gotCP, gotHist, gotInbox, err := es.Load(ctx, key)
	if err != nil {
		return err
	}
	for i := range inbox {
		inbox[i].ID = 0
	}
	for i := range gotInbox {
		gotInbox[i].ID = 0
	}
	plans, err := db.Plans(ctx, key)
	if err != nil {
		return err
	}
	gotPlans, err := es.Plans(ctx, key)
	if err != nil {
		return err
	}
	checks := []check{{"the record", cp, gotCP}, {"the history", hist, gotHist}, {"the queued messages", inbox, gotInbox}, {"the plan revisions", plans, gotPlans}}
	for _, rec := range []struct {
		what string
		a, b func(context.Context, string) ([]byte, error)
	}{{"the plan board", db.Board, es.Board}, {"the cards", db.Cards, es.Cards}, {"the listing", db.Listing, es.Listing}} {
		a, err := rec.a(ctx, key)
		if err != nil {
			return err
		}
		b, err := rec.b(ctx, key)
		if err != nil {
			return err
		}
		checks = append(checks, check{rec.what, string(a), string(b)})
	}
	archived, err := archiveChecks(ctx, db, es, key, archives)
	if err != nil {
		return err
	}
	checks = append(checks, archived...)
	for _, c := range checks {
		if err := same(c.what, c.a, c.b); err != nil {
			return err
		}
	}
	return nil
}

// archiveChecks are readBack's comparisons of a session's archives.
func archiveChecks(ctx context.Context, db *store.DB, es *etcdstore.Store, key string, archives int) ([]check, error) {
	gotArchives, _, err := es.Archived(ctx, key, 0)
	if err != nil {
		return nil, err
	}
	checks := []check{{"the number of archives", archives, gotArchives}}
	for n := uint64(1); n <= uint64(archives); n++ {
		_, a, err := db.Archived(ctx, key, n)
		if err != nil {
			return nil, err
		}
		_, b, err := es.Archived(ctx, key, n)
		if err != nil {
			return nil, err
		}
		ra, pa, err := db.ArchivedState(ctx, key, n)
		if err != nil {
			return nil, err
		}
		rb, pb, err := es.ArchivedState(ctx, key, n)
		if err != nil {
			return nil, err
		}
		what := fmt.Sprintf("archive %d", n)
		checks = append(checks, check{what + "'s history", a, b}, check{what + "'s record", string(ra), string(rb)}, check{what + "'s plans", pa, pb})
	}
	return checks, nil
}
