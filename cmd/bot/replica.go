package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/config"
	"github.com/pinplan/pinplan/etcdstore"
	"github.com/pinplan/pinplan/replica"
)

// dialEtcd connects to the cluster of PINPLAN_ETCD_ENDPOINTS with the TLS
// and auth settings, and checks that it answers.
func dialEtcd(ctx context.Context, cfg *config.Config) (*clientv3.Client, error) {
	cc := clientv3.Config{Endpoints: cfg.EtcdEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		Username: cfg.EtcdUsername, Password: cfg.EtcdPassword.Reveal(), DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 3 * time.Second}
	if cfg.EtcdCA != "" || cfg.EtcdCert != "" {
		tc, setting, err := etcdstore.ClientTLS(cfg.EtcdCA, cfg.EtcdCert, cfg.EtcdKey)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", setting, err)
		}
		cc.TLS = tc
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("etcd at %v: %w", cfg.EtcdEndpoints, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Get(pctx, cfg.EtcdPrefix+"meta/schema"); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd at %v does not answer: %w", cfg.EtcdEndpoints, err)
	}
	return cli, nil
}

// warnOldEtcd warns when the cluster runs etcd older than 3.5: Debian 12
// ships 3.4, which answers every call pinplan makes, but the tests run
// the etcd of go.mod (3.7), and 3.4 is out of support. The first member
// that answers speaks for the cluster.
func warnOldEtcd(ctx context.Context, cli *clientv3.Client, log *slog.Logger) {
	for _, ep := range cli.Endpoints() {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, ep)
		cancel()
		if err != nil {
			continue
		}
		if etcdstore.Before35(st.Version) {
			log.Warn("etcd is older than 3.5: it answers pinplan's calls, but only 3.5 and later are supported and tested; upgrade when you can", "etcd_version", st.Version, "endpoint", config.RedactURL(ep))
		} else {
			log.Debug("etcd version", "etcd_version", st.Version)
		}
		return
	}
}

// replicaID is PINPLAN_REPLICA_ID, or the host name and pid.
func replicaID(cfg *config.Config) string {
	if cfg.ReplicaID != "" {
		return cfg.ReplicaID
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// replicaPlatforms are the platforms this process runs: the console
// always, Slack and Discord when their tokens are set. A replica takes
// only sessions of these (DESIGN §14).
func replicaPlatforms(cfg *config.Config) []string {
	platforms := []string{"web"}
	if cfg.Slack() {
		platforms = append(platforms, "slack")
	}
	if cfg.DiscordBotToken != "" {
		platforms = append(platforms, "discord")
	}
	return platforms
}

// owners is the runner's Owners: the replica, or none without etcd.
func owners(rep *etcdstore.Replica) agent.Owners {
	if rep == nil {
		return nil
	}
	return rep
}

// startReplica starts the replica's part once the platforms are up: the
// watches and the first scan (it returns how many sessions that took),
// the console's view of threads held elsewhere, the shared pace, and a
// stop (an error on lost) when the lease ends under the replica.
func (m *Main) startReplica(ctx context.Context) (int, error) {
	rep, ps, log := m.st.rep, m.ps, m.log
	n, err := m.shared.Start(ctx)
	if err != nil {
		return 0, err
	}
	replica.Follow(ctx, rep, ps.console)
	var sharers []replica.Sharer
	if ps.slack != nil {
		sharers = append(sharers, ps.slack)
		replica.ShareHolds(ctx, rep, log.With("component", "replica"), ps.slack)
	}
	if ps.discord != nil {
		sharers = append(sharers, ps.discord)
	}
	m.wg.Go(func() { replica.ShareBudgets(ctx, rep, log, sharers...) }) // the platforms' pace, shared by the live replicas
	go func() {
		select {
		case <-rep.Lost():
			err := fmt.Errorf("replica %s: %w; stopping so that a supervisor starts it afresh (its sessions are another replica's now)", rep.ID(), rep.LostErr())
			log.Error("lease lost", "err", err)
			m.lost <- err
			m.cancel()
		case <-ctx.Done():
		}
	}()
	return n, nil
}
