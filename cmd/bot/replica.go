package main

import (
	"context"
	"fmt"
	"os"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/config"
	"github.com/pinplan/pinplan/etcdstore"
	"github.com/pinplan/pinplan/replica"
)

// dialEtcd connects to the cluster of PINPLAN_ETCD_ENDPOINTS with the TLS
// and auth settings, and checks that it answers.
func dialEtcd(ctx context.Context, cfg *config.Config) (*clientv3.Client, error) {
	return etcdstore.Dial(ctx, etcdstore.DialOptions{Endpoints: cfg.EtcdEndpoints, Username: cfg.EtcdUsername, Password: cfg.EtcdPassword.Reveal(),
		CA: cfg.EtcdCA, Cert: cfg.EtcdCert, Key: cfg.EtcdKey, Prefix: cfg.EtcdPrefix})
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
