package main

import (
	"context"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinplan/pinplan/adapters/slack/install"
	"github.com/pinplan/pinplan/adapters/web"
	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/config"
	"github.com/pinplan/pinplan/etcdstore"
	"github.com/pinplan/pinplan/metrics"
	"github.com/pinplan/pinplan/replica"
	"github.com/pinplan/pinplan/store"
)

// stores are the open store, the bbolt file or etcd with this replica, as
// each of its consumers takes it: one typed field for each, set once by
// boltStores or etcdStores.
type stores struct {
	agent    agent.Store
	chat     chat.Options // only its stores: Store, Log, Cards, Listings, FollowUps, Outbox, Dedupe
	records  web.Records
	sessions func(context.Context) ([]web.Session, error)
	marks    chat.MarkStore
	installs install.Store // Slack's installations (DESIGN §14), sealed by install.Installations
	count    metrics.SessionCounter
	ping     func() error

	bolt  *store.DB          // the file, when there is no etcd
	rep   *etcdstore.Replica // with etcd
	takes *replica.Takes     // the sessions rep takes, for the hand-over handler
	es    *etcdstore.Store
	etcd  *clientv3.Client // for the Discord gateway's election
}

func boltStores(db *store.DB) stores {
	return stores{agent: db, chat: chat.Options{Store: db, Log: db, Cards: db, Listings: db, FollowUps: db, Outbox: db, Dedupe: db},
		records: db, marks: db, installs: db, count: db, ping: db.Ping, bolt: db, sessions: listed(db.Sessions)}
}

func etcdStores(es *etcdstore.Store) stores {
	return stores{agent: es, chat: chat.Options{Store: es, Log: es, Cards: es, Listings: es, FollowUps: es, Outbox: es, Dedupe: es},
		records: es, marks: es, installs: es, count: es, ping: es.Ping, es: es, sessions: listed(es.Sessions)}
}

// listed is a store's listing of its sessions as the console reads it
// (store.SessionInfo and etcdstore.SessionInfo are web.Session's shape).
func listed[T ~struct {
	Checkpoint     agent.Checkpoint
	Board, Listing []byte
}](list func(context.Context) ([]T, error)) func(context.Context) ([]web.Session, error) {
	return func(ctx context.Context) ([]web.Session, error) {
		infos, err := list(ctx)
		out := make([]web.Session, len(infos))
		for i, in := range infos {
			out[i] = web.Session(in)
		}
		return out, err
	}
}

// openStores opens etcd (PINPLAN_ETCD_ENDPOINTS) with this replica's
// lease, or else the bbolt file.
func openStores(ctx context.Context, cfg *config.Config, later func(func()), log *slog.Logger) (stores, error) {
	if len(cfg.EtcdEndpoints) == 0 {
		bolt, err := store.Open(cfg.DB, store.Options{LockTimeout: 2 * time.Second, BatchDelay: 2 * time.Millisecond})
		if err != nil {
			return stores{}, err
		}
		later(func() { bolt.Close() })
		return boltStores(bolt), nil
	}
	cli, err := dialEtcd(ctx, cfg)
	if err != nil {
		return stores{}, err
	}
	later(func() { cli.Close() })
	etcdstore.WarnOld(ctx, cli, log)
	takes := &replica.Takes{}
	rep, err := etcdstore.NewReplica(ctx, cli, etcdstore.ReplicaOptions{Prefix: cfg.EtcdPrefix, ID: replicaID(cfg), TTL: cfg.LeaseTTL, Logger: log.With("component", "replica"),
		Platforms: replicaPlatforms(cfg), OnTake: takes.Taken})
	if err != nil {
		return stores{}, err
	}
	// Revoked after the runner and the router stopped (Main closes it
	// earlier, as soon as they have; teardown runs in reverse, and a
	// second Close does nothing): the others take over at once, not
	// after the TTL.
	later(func() {
		if err := rep.Close(); err != nil {
			log.Warn("release the replica's lease", "err", err)
		}
	})
	es, err := etcdstore.New(ctx, cli, etcdstore.Options{Prefix: cfg.EtcdPrefix, Replica: rep})
	if err != nil {
		return stores{}, err
	}
	st := etcdStores(es)
	st.rep, st.takes, st.etcd = rep, takes, cli
	return st, nil
}
