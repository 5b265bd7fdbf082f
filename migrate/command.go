package migrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinplan/pinplan/config"
	"github.com/pinplan/pinplan/etcdstore"
	"github.com/pinplan/pinplan/store"
)

// Run is `bot migrate -to etcd`: it copies the bbolt file of PINPLAN_DB
// into the empty etcd prefix of PINPLAN_ETCD_ENDPOINTS and
// PINPLAN_ETCD_PREFIX (DESIGN §14), which dial connects to: every
// session's record, history, plan revisions, queued messages, plan
// board, cards and listing, the archived histories a reset kept, the
// replies not delivered yet, and the adapters' read marks (so that the
// first replica on etcd fetches what Discord sent while pinplan was
// stopped for the move). Dedupe keys are not copied: pinplan is stopped
// for the move, so every event it took was acknowledged and is not sent
// again, and the marks saved as it stopped are exact (a Discord message
// handed on before them is not fetched again). It refuses a prefix that
// holds data (pinplan's, or another application's), reads everything
// back to check the counts and plan revisions, and leaves the file as it
// was. Stop every pinplan on the file first: the file's lock says so if
// one still runs.
//
// The prefix is marked first and unmarked last (DESIGN §14): a copy cut
// off (kill -9, a lost connection) leaves a prefix replicas refuse, and
// Run again on it starts over.
func Run(ctx context.Context, cfg *config.Config, to string, dial func(context.Context) (*clientv3.Client, error), w io.Writer) error {
	if to != "etcd" {
		return fmt.Errorf("migrate: unknown target %q; the one target is etcd (bot migrate --to etcd)", to)
	}
	if len(cfg.EtcdEndpoints) == 0 {
		return errors.New("migrate: set PINPLAN_ETCD_ENDPOINTS (and PINPLAN_ETCD_PREFIX) to the cluster to copy into")
	}
	if err := store.Exists("migrate", cfg.DB); err != nil {
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
	cli, err := dial(ctx)
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
		fmt.Fprintf(w, "pinplan: %s held the partial copy of an interrupted migrate; cleared it, copying again\n", cfg.EtcdPrefix)
	}
	c, err := Sessions(ctx, db, es)
	if err != nil {
		return fmt.Errorf("migrate: %w (%s holds part of the copy, marked so that replicas refuse it: run migrate again to start over)", err, cfg.EtcdPrefix)
	}
	replies, err := Outbox(ctx, db, es)
	if err != nil {
		return fmt.Errorf("migrate: replies not delivered yet: %w", err)
	}
	marks, err := Marks(ctx, db, es)
	if err != nil {
		return fmt.Errorf("migrate: read marks: %w", err)
	}
	if err := es.EndMigrate(ctx); err != nil {
		return fmt.Errorf("migrate: the copy is complete, but: %w; run migrate again", err)
	}
	read := "no read marks"
	if len(marks) > 0 {
		read = "read marks of " + strings.Join(marks, ", ")
	}
	fmt.Fprintf(w, "pinplan: copied %s to etcd %s: %d sessions, %d history entries, %d plan revisions, %d queued messages, %d archives, %d replies not delivered yet, %s; checked; the file is unchanged\n",
		cfg.DB, cfg.EtcdPrefix, c.Sessions, c.Entries, c.Plans, c.Queued, c.Archives, replies, read)
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
