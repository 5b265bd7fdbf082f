package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	discordadapter "github.com/pinplan/pinplan/adapters/discord"
	"github.com/pinplan/pinplan/etcdstore"
)

// discordGateway puts the Discord gateway where it belongs (DESIGN §14).
// Discord gives a bot one session per shard, so with replicas the
// gateway is held by one of them, elected under <prefix>election/discord
// on the replica's own lease: it holds the gateway exactly as long as it
// is a live replica, and when it dies or loses its lease the key goes
// with the lease and the next in line opens the gateway within the TTL.
// Every replica makes the REST calls of the threads it holds. Without
// etcd the process holds the gateway, as it always did.
type discordGateway struct {
	dsc *discordadapter.Adapter
	cli *clientv3.Client   // nil without etcd
	rep *etcdstore.Replica // nil without etcd
	pfx string             // the election's prefix
	log *slog.Logger

	sess       *concurrency.Session // on the replica's lease; never closed here (Close would revoke it)
	stopClient context.CancelFunc   // ends the election client's context
	held       atomic.Bool          // this process holds the gateway
	wg         sync.WaitGroup       // the campaign and the observer

	mu     sync.Mutex // guards leader
	leader string     // the elected replica's id, as last observed
}

// newDiscordGateway registers pinplan_discord_gateway_leader; start runs
// the gateway or the campaign for it.
func newDiscordGateway(dsc *discordadapter.Adapter, cli *clientv3.Client, rep *etcdstore.Replica, prefix string, reg *prometheus.Registry, log *slog.Logger) *discordGateway {
	g := &discordGateway{dsc: dsc, cli: cli, rep: rep, pfx: prefix + "election/discord", log: log}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pinplan_discord_gateway_leader",
		Help: "1 while this process holds the Discord gateway: the elected replica, or the only process without etcd."},
		func() float64 {
			if g.held.Load() {
				return 1
			}
			return 0
		}))
	return g
}

// start opens the gateway without etcd. With replicas it starts the
// adapter's REST side and campaigns on its own goroutine until ctx ends.
func (g *discordGateway) start(ctx context.Context) error {
	if g.rep == nil {
		if err := g.dsc.Start(ctx); err != nil {
			return err
		}
		g.held.Store(true)
		return nil
	}
	if err := g.dsc.StartREST(ctx); err != nil {
		return err
	}
	// The election talks through the replica's connection with a context
	// of its own: Campaign cleans up on its client's context when ctx
	// ends, and stop ends that context, so that a cluster out of reach
	// cannot hold the shutdown. (Never Close it: that would close the
	// replica's watcher and lessor.)
	cctx, stopClient := context.WithCancel(context.WithoutCancel(ctx))
	ec := clientv3.NewCtxClient(cctx)
	ec.KV, ec.Watcher, ec.Lease = g.cli.KV, g.cli.Watcher, g.cli.Lease
	sess, err := concurrency.NewSession(ec, concurrency.WithLease(g.rep.Lease()), concurrency.WithContext(ctx))
	if err != nil {
		stopClient()
		return fmt.Errorf("discord gateway: join the election %s: %w", g.pfx, err)
	}
	g.sess, g.stopClient = sess, stopClient
	g.log.Info("campaigning for the discord gateway", "election", g.pfx)
	g.wg.Add(2)
	go func() {
		defer g.wg.Done()
		g.campaign(ctx)
	}()
	go func() {
		defer g.wg.Done()
		g.observe(ctx)
	}()
	return nil
}

// stop runs once ctx is done: it waits for the campaign (a leader has
// closed the gateway and resigned by then) and closes the adapter.
func (g *discordGateway) stop() {
	if g.sess != nil {
		giveUp := time.AfterFunc(10*time.Second, g.stopClient) // etcd out of reach: skip the clean-up
		g.wg.Wait()
		giveUp.Stop()
		g.stopClient()
		g.sess.Orphan() // ends the session's keep-alive; the lease is the replica's to revoke
	}
	g.dsc.Close()
	g.held.Store(false)
}

// ready implements the readiness check: only the process holding the
// gateway needs it connected; the others' REST was checked at start.
func (g *discordGateway) ready() error {
	if g.held.Load() {
		return g.dsc.Ready()
	}
	return nil
}

// status is the /readyz line with replicas: whether this replica holds
// the gateway, and if not, who was last seen to.
func (g *discordGateway) status() string {
	if g == nil || g.rep == nil {
		return ""
	}
	if g.held.Load() {
		return fmt.Sprintf("discord gateway: held by this replica (%s)\n", g.rep.ID())
	}
	g.mu.Lock()
	leader := g.leader
	g.mu.Unlock()
	if leader == "" || leader == g.rep.ID() {
		return "discord gateway: not held by this replica (REST only here)\n"
	}
	return fmt.Sprintf("discord gateway: not held by this replica (REST only here); held by replica %s\n", leader)
}

// campaign stands for the gateway until ctx ends or the replica is lost,
// and holds it for each term it wins.
func (g *discordGateway) campaign(ctx context.Context) {
	wait := time.Second
	for g.alive(ctx) {
		e := concurrency.NewElection(g.sess, g.pfx)
		// Blocks until this replica's key is the oldest. On ctx's end it
		// removes the key (not the leader any more, or never).
		if err := e.Campaign(ctx, g.rep.ID()); err != nil {
			if !g.alive(ctx) {
				return
			}
			g.log.Warn("campaign for the discord gateway", "err", err, "retry_in", wait)
			g.sleep(ctx, wait)
			wait = min(2*wait, g.rep.TTL())
			continue
		}
		wait = time.Second
		g.lead(ctx, e)
	}
}

// alive reports whether this replica may still stand: ctx is not done,
// and neither its lease nor the session on it has ended.
func (g *discordGateway) alive(ctx context.Context) bool {
	select {
	case <-ctx.Done():
	case <-g.rep.Lost():
	case <-g.sess.Done():
	default:
		return true
	}
	return false
}

func (g *discordGateway) sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-g.rep.Lost():
	case <-time.After(d):
	}
}

// lead is one term: it opens the gateway (again and again if Discord
// refuses) until the term ends (ctx done, the lease lost, the leader key
// gone), then closes the gateway before it resigns, so that a hand-over
// never has two replicas holding it. (A lease that expired under a
// paused replica elects the next one before the paused one can know.)
func (g *discordGateway) lead(ctx context.Context, e *concurrency.Election) {
	ended := make(chan struct{}) // the term is over, for why
	var why error
	go func() {
		defer close(ended)
		why = g.watchTerm(ctx, e)
	}()
	g.held.Store(true)
	g.log.Info("elected to hold the discord gateway", "key", e.Key())
open:
	for wait := time.Second; ; wait = min(2*wait, time.Minute) {
		err := g.dsc.OpenGateway(ctx)
		if err == nil {
			g.log.Info("discord gateway open on this replica")
			break
		}
		if ctx.Err() != nil {
			break
		}
		g.log.Error("open the discord gateway", "err", err, "retry_in", wait)
		select {
		case <-ended:
			break open
		case <-time.After(wait):
		}
	}
	<-ended
	g.dsc.CloseGateway()
	g.held.Store(false)
	if why != nil {
		g.log.Warn("gave the discord gateway up", "why", why)
		return
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer rcancel()
	if err := e.Resign(rctx); err != nil {
		g.log.Warn("resign the discord gateway", "err", err)
		return
	}
	g.log.Info("resigned the discord gateway")
}

// Why a term ends other than by ctx.
var (
	errLeaseGone     = errors.New("the replica's lease is gone")
	errLeaderKeyGone = errors.New("the leader key is gone")
)

// watchTerm returns when this replica's term ends: nil when ctx is done,
// errLeaseGone when the lease or the session on it ended,
// errLeaderKeyGone when the leader key was deleted (seen by a watch from
// the key's creation, so a key gone before the watch started counts).
func (g *discordGateway) watchTerm(ctx context.Context, e *concurrency.Election) error {
	key, created := e.Key(), e.Rev()
	from := created + 1
	for {
		wctx, cancel := context.WithCancel(ctx)
		wch := g.cli.Watch(wctx, key, clientv3.WithRev(from))
		var why error
		broke := false
		for why == nil && !broke {
			select {
			case <-ctx.Done():
				cancel()
				return nil
			case <-g.rep.Lost():
				why = errLeaseGone
			case <-g.sess.Done():
				why = errLeaseGone
			case wr, ok := <-wch:
				if !ok || wr.Err() != nil {
					broke = true
					break
				}
				for _, ev := range wr.Events {
					if ev.Type == mvccpb.DELETE {
						why = errLeaderKeyGone
					}
				}
			}
		}
		cancel()
		if ctx.Err() != nil {
			return nil // a graceful stop ends the session too: resign
		}
		if why != nil {
			return why
		}
		// The watch broke (compacted, canceled by the server): look at
		// the key itself, and watch on from now.
		resp, err := g.cli.Get(ctx, key)
		if err == nil && (len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != created) {
			return errLeaderKeyGone
		}
		if err == nil {
			from = resp.Header.Revision + 1
		}
		g.sleep(ctx, time.Second)
	}
}

// observe follows who holds the gateway, for /readyz and the log.
func (g *discordGateway) observe(ctx context.Context) {
	e := concurrency.NewElection(g.sess, g.pfx)
	for ctx.Err() == nil {
		for resp := range e.Observe(ctx) { // closed when ctx ends or the watch breaks
			if len(resp.Kvs) == 0 {
				continue
			}
			id := string(resp.Kvs[0].Value)
			g.mu.Lock()
			changed := g.leader != id
			g.leader = id
			g.mu.Unlock()
			if changed {
				g.log.Info("discord gateway leader", "replica", id)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
