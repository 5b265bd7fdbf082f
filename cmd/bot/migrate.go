package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/config"
	"github.com/pinplan/pinplan/etcdstore"
	"github.com/pinplan/pinplan/store"
)

// migrate copies the bbolt file of PINPLAN_DB into the empty etcd prefix
// of PINPLAN_ETCD_ENDPOINTS and PINPLAN_ETCD_PREFIX (DESIGN §14): every
// session's record, history, plan revisions, queued messages, plan board,
// cards and listing, the archived histories a reset kept, and the replies
// not delivered yet. Dedupe keys are not copied (they live minutes). It
// refuses a prefix that holds data, reads everything back to check the
// counts and plan revisions, and leaves the file as it was. Stop every
// pinplan on the file first: the file's lock says so if one still runs.
func migrate(ctx context.Context, cfg *config.Config, to string, stdout io.Writer) error {
	if to != "etcd" {
		return fmt.Errorf("migrate: unknown target %q; the one target is etcd (bot migrate --to etcd)", to)
	}
	if len(cfg.EtcdEndpoints) == 0 {
		return errors.New("migrate: set PINPLAN_ETCD_ENDPOINTS (and PINPLAN_ETCD_PREFIX) to the cluster to copy into")
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
	es, err := etcdstore.New(ctx, cli, etcdstore.Options{Prefix: cfg.EtcdPrefix})
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if empty, err := es.Empty(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	} else if !empty {
		return fmt.Errorf("migrate: %s: %w; name an empty PINPLAN_ETCD_PREFIX", cfg.EtcdPrefix, etcdstore.ErrNotEmpty)
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
			return fmt.Errorf("migrate: session %s: %w (the prefix now holds part of the copy: delete it with `etcdctl del --prefix %s` before trying again)", key, err, cfg.EtcdPrefix)
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
	fmt.Fprintf(stdout, "pinplan: copied %s to etcd %s: %d sessions, %d history entries, %d plan revisions, %d queued messages, %d archives, %d replies not delivered yet; checked; the file is unchanged\n",
		cfg.DB, cfg.EtcdPrefix, c.sessions, c.entries, c.plans, c.queued, c.archives, c.replies)
	return nil
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
	if cp != nil {
		if err := es.Commit(ctx, &agent.Round{Base: 0, Append: hist, Plans: plans, Checkpoint: *cp}); err != nil {
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
		if err := es.PutArchive(ctx, key, uint64(n), old); err != nil {
			return copied{}, err
		}
	}
	// Read back what was written.
	gotCP, gotHist, gotInbox, err := es.Load(ctx, key)
	if err != nil {
		return copied{}, fmt.Errorf("read back: %w", err)
	}
	gotPlans, err := es.Plans(ctx, key)
	if err != nil {
		return copied{}, fmt.Errorf("read back: %w", err)
	}
	if (cp == nil) != (gotCP == nil) || len(gotHist) != len(hist) || len(gotInbox) != len(inbox) || len(gotPlans) != len(plans) {
		return copied{}, fmt.Errorf("read back %d entries, %d plans, %d queued; the file has %d, %d, %d", len(gotHist), len(gotPlans), len(gotInbox), len(hist), len(plans), len(inbox))
	}
	for i := range plans {
		if gotPlans[i].Revision != plans[i].Revision || len(gotPlans[i].Items) != len(plans[i].Items) {
			return copied{}, fmt.Errorf("plan revision %d read back as %d with %d items", plans[i].Revision, gotPlans[i].Revision, len(gotPlans[i].Items))
		}
	}
	if n, _, err := es.Archived(ctx, key, 0); err != nil || n != archives {
		return copied{}, fmt.Errorf("read back %d archives (%v), the file has %d", n, err, archives)
	}
	return copied{entries: len(hist), plans: len(plans), queued: len(inbox), archives: archives}, nil
}
