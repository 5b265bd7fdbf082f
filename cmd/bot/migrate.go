package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/config"
	"github.com/pinplan/pinplan/etcdstore"
	"github.com/pinplan/pinplan/store"
)

// migrate copies the bbolt file of PINPLAN_DB into the empty etcd prefix
// of PINPLAN_ETCD_ENDPOINTS and PINPLAN_ETCD_PREFIX (DESIGN §14): every
// session's record, history, plan revisions, queued messages, plan board,
// cards and listing, the archived histories a reset kept, the replies
// not delivered yet, and the adapters' read marks (so that the first
// replica on etcd fetches what Discord sent while pinplan was stopped for
// the move). Dedupe keys are not copied: pinplan is stopped for the
// move, so every event it took was acknowledged and is not sent again,
// and the marks saved as it stopped are exact (a Discord message handed
// on before them is not fetched again). It
// refuses a prefix that holds data (pinplan's, or another application's),
// reads everything back to check the counts and plan revisions, and
// leaves the file as it was. Stop every pinplan on the file first: the
// file's lock says so if one still runs.
//
// The prefix is marked first and unmarked last (DESIGN §14): a copy cut
// off (kill -9, a lost connection) leaves a prefix replicas refuse, and
// migrate run again on it starts over.
func migrate(ctx context.Context, cfg *config.Config, to string, stdout io.Writer) error {
	if to != "etcd" {
		return fmt.Errorf("migrate: unknown target %q; the one target is etcd (bot migrate --to etcd)", to)
	}
	if len(cfg.EtcdEndpoints) == 0 {
		return errors.New("migrate: set PINPLAN_ETCD_ENDPOINTS (and PINPLAN_ETCD_PREFIX) to the cluster to copy into")
	}
	if err := dbExists("migrate", cfg); err != nil {
		return err
	}
	db, err := store.Open(cfg.DB, store.Options{LockTimeout: 500 * time.Millisecond, ReadOnly: true})
	if errors.Is(err, store.ErrLocked) {
		return fmt.Errorf("migrate: %s is in use; stop pinplan first: %w", cfg.DB, err)
	}
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer db.Close()
	cli, err := dialEtcd(ctx, cfg)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer cli.Close()
	es, err := etcdstore.New(ctx, cli, etcdstore.Options{Prefix: cfg.EtcdPrefix, Migrate: true})
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	restarted, err := es.BeginMigrate(ctx)
	if errors.Is(err, etcdstore.ErrNotEmpty) {
		return fmt.Errorf("migrate: %s: %w; name an empty PINPLAN_ETCD_PREFIX, or, if nothing under it is needed (no replica runs on it), clear it with `%s` and run migrate again", cfg.EtcdPrefix, err, clearCommand(cfg))
	}
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if restarted {
		fmt.Fprintf(stdout, "pinplan: %s held the partial copy of an interrupted migrate; cleared it, copying again\n", cfg.EtcdPrefix)
	}
	infos, err := db.Sessions(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var c struct{ sessions, entries, plans, queued, archives, replies int }
	for _, in := range infos {
		key := in.Checkpoint.Key
		n, err := copySession(ctx, db, es, key)
		if err != nil {
			return fmt.Errorf("migrate: session %s: %w (%s holds part of the copy, marked so that replicas refuse it: run migrate again to start over)", key, err, cfg.EtcdPrefix)
		}
		c.sessions++
		c.entries += n.entries
		c.plans += n.plans
		c.queued += n.queued
		c.archives += n.archives
	}
	var outErr error
	err = db.Outbox(ctx, func(_ uint64, data []byte) {
		var it struct {
			Thread struct {
				Key string `json:"key"`
			} `json:"thread"`
		}
		if outErr != nil || json.Unmarshal(data, &it) != nil || it.Thread.Key == "" {
			return // unreadable items are dropped by delivery too
		}
		if _, outErr = es.AddOutbox(ctx, it.Thread.Key, [][]byte{data}); outErr == nil {
			c.replies++
		}
	})
	if err = errors.Join(err, outErr); err != nil {
		return fmt.Errorf("migrate: replies not delivered yet: %w", err)
	}
	var marks []string
	err = db.EachMarks(ctx, func(name string, data []byte) {
		if outErr == nil {
			outErr = es.SaveMarks(ctx, name, data)
			marks = append(marks, name)
		}
	})
	if err = errors.Join(err, outErr); err != nil {
		return fmt.Errorf("migrate: read marks: %w", err)
	}
	if err := es.EndMigrate(ctx); err != nil {
		return fmt.Errorf("migrate: the copy is complete, but: %w; run migrate again", err)
	}
	read := "no read marks"
	if len(marks) > 0 {
		read = "read marks of " + strings.Join(marks, ", ")
	}
	fmt.Fprintf(stdout, "pinplan: copied %s to etcd %s: %d sessions, %d history entries, %d plan revisions, %d queued messages, %d archives, %d replies not delivered yet, %s; checked; the file is unchanged\n",
		cfg.DB, cfg.EtcdPrefix, c.sessions, c.entries, c.plans, c.queued, c.archives, c.replies, read)
	return nil
}

// clearCommand is the etcdctl command that deletes everything under the
// prefix, with the endpoints (their secrets redacted) and, when the
// cluster needs them, the TLS and user flags left for the operator to
// fill in.
func clearCommand(cfg *config.Config) string {
	eps := make([]string, len(cfg.EtcdEndpoints))
	for i, e := range cfg.EtcdEndpoints {
		eps[i] = config.RedactURL(e)
	}
	cmd := "etcdctl --endpoints=" + strings.Join(eps, ",")
	if cfg.EtcdCA != "" {
		cmd += " --cacert=" + cfg.EtcdCA
	}
	if cfg.EtcdCert != "" {
		cmd += " --cert=" + cfg.EtcdCert + " --key=" + cfg.EtcdKey
	}
	if cfg.EtcdUsername != "" {
		cmd += " --user=" + cfg.EtcdUsername
	}
	return cmd + " del --prefix " + cfg.EtcdPrefix
}

type copied struct{ entries, plans, queued, archives int }

// copySession copies one session and reads it back.
func copySession(ctx context.Context, db *store.DB, es *etcdstore.Store, key string) (copied, error) {
	cp, hist, inbox, err := db.Load(ctx, key)
	if err != nil {
		return copied{}, err
	}
	plans, err := db.Plans(ctx, key)
	if err != nil {
		return copied{}, err
	}
	// The session's log past its delivery cursor goes with the record,
	// and the cursor after it: the first replica to take the session
	// shows what the bot had not shown yet, and nothing again.
	delivered, err := db.Delivered(ctx, key)
	if err != nil {
		return copied{}, err
	}
	tail, err := db.Log(ctx, key, delivered)
	if err != nil {
		return copied{}, err
	}
	if cp != nil {
		if err := es.Commit(ctx, &agent.Round{Base: 0, Append: hist, Plans: plans, Log: tail, Checkpoint: *cp}); err != nil {
			return copied{}, err
		}
	}
	if delivered > 0 {
		if err := es.SaveDelivered(ctx, key, delivered); err != nil {
			return copied{}, err
		}
	}
	for _, in := range inbox {
		if _, err := es.Enqueue(ctx, key, in); err != nil {
			return copied{}, err
		}
	}
	for _, rec := range []struct {
		load func(context.Context, string) ([]byte, error)
		save func(context.Context, string, []byte) error
	}{{db.Board, es.SaveBoard}, {db.Cards, es.SaveCards}, {db.Listing, es.SaveListing}} {
		data, err := rec.load(ctx, key)
		if err != nil {
			return copied{}, err
		}
		if data != nil {
			if err := rec.save(ctx, key, data); err != nil {
				return copied{}, err
			}
		}
	}
	archives, _, err := db.Archived(ctx, key, 0)
	if err != nil {
		return copied{}, err
	}
	for n := 1; n <= archives; n++ {
		_, old, err := db.Archived(ctx, key, uint64(n))
		if err != nil {
			return copied{}, err
		}
		rec, oldPlans, err := db.ArchivedState(ctx, key, uint64(n))
		if err != nil {
			return copied{}, err
		}
		if err := es.PutArchive(ctx, key, uint64(n), rec, old, oldPlans); err != nil {
			return copied{}, err
		}
	}
	if err := readBack(ctx, db, es, key, archives); err != nil {
		return copied{}, fmt.Errorf("read back: %w", err)
	}
	return copied{entries: len(hist), plans: len(plans), queued: len(inbox), archives: archives}, nil
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
	gotArchives, _, err := es.Archived(ctx, key, 0)
	if err != nil {
		return err
	}
	checks = append(checks, check{"the number of archives", archives, gotArchives})
	for n := uint64(1); n <= uint64(archives); n++ {
		_, a, err := db.Archived(ctx, key, n)
		if err != nil {
			return err
		}
		_, b, err := es.Archived(ctx, key, n)
		if err != nil {
			return err
		}
		ra, pa, err := db.ArchivedState(ctx, key, n)
		if err != nil {
			return err
		}
		rb, pb, err := es.ArchivedState(ctx, key, n)
		if err != nil {
			return err
		}
		what := fmt.Sprintf("archive %d", n)
		checks = append(checks, check{what + "'s history", a, b}, check{what + "'s record", string(ra), string(rb)}, check{what + "'s plans", pa, pb})
	}
	for _, c := range checks {
		if err := same(c.what, c.a, c.b); err != nil {
			return err
		}
	}
	return nil
}
