package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/etcdstore"
)

// Gateway is what the election needs of a platform's gateway (the
// Discord adapter): the whole adapter started at once without etcd, or
// its REST side at start and its gateway opened and closed as terms
// begin and end. Either start gives it the inbox its events go to.
type Gateway interface {
	Start(ctx context.Context, in chat.Inbox) error     // REST and gateway, without etcd
	StartREST(ctx context.Context, in chat.Inbox) error // REST only, with replicas
	OpenGateway(ctx context.Context) error
	CloseGateway()
	Close()
	Ready() error
}

// Election puts the Discord gateway where it belongs (DESIGN §14).
// Discord gives a bot one session per shard, so with replicas the
// gateway is held by one of them, elected under <prefix>election/discord
// on the replica's own lease: it holds the gateway exactly as long as it
// is a live replica, and when it dies or loses its lease the key goes
// with the lease and the next in line opens the gateway within the TTL.
// Every replica makes the REST calls of the threads it holds. Without
// etcd the process holds the gateway, as it always did.
type Election struct {
	gw  Gateway
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

// NewElection returns the election for gw under <prefix>election/discord
// (cli and rep nil: no etcd, this process holds the gateway); Start runs
// the gateway or the campaign for it.
func NewElection(gw Gateway, cli *clientv3.Client, rep *etcdstore.Replica, prefix string, log *slog.Logger) *Election {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Election{gw: gw, cli: cli, rep: rep, pfx: prefix + "election/discord", log: log}
}

// Held reports whether this process holds the gateway now.
func (g *Election) Held() bool { return g.held.Load() }

// Start opens the gateway without etcd. With replicas it starts the
// adapter's REST side and campaigns on its own goroutine until ctx ends.
// The gateway's events go to in.
func (g *Election) Start(ctx context.Context, in chat.Inbox) error {
	if g.rep == nil {
		if err := g.gw.Start(ctx, in); err != nil {
			return err
		}
		g.held.Store(true)
		return nil
	}
	if err := g.gw.StartREST(ctx, in); err != nil {
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

// Stop runs once ctx is done: it waits for the campaign (a leader has
// closed the gateway and resigned by then) and closes the adapter.
func (g *Election) Stop() {
	if g.sess != nil {
		giveUp := time.AfterFunc(10*time.Second, g.stopClient) // etcd out of reach: skip the clean-up
		g.wg.Wait()
		giveUp.Stop()
		g.stopClient()
		g.sess.Orphan() // ends the session's keep-alive; the lease is the replica's to revoke
	}
	g.gw.Close()
	g.held.Store(false)
}

// Ready implements the readiness check: only the process holding the
// gateway needs it connected; the others' REST was checked at start.
func (g *Election) Ready() error {
	if g.held.Load() {
		return g.gw.Ready()
	}
	return nil
}

// Status is the /readyz line with replicas: whether this replica holds
// the gateway, and if not, who was last seen to.
func (g *Election) Status() string {
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
func (g *Election) campaign(ctx context.Context) {
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
func (g *Election) alive(ctx context.Context) bool {
	select {
	case <-ctx.Done():
	case <-g.rep.Lost():
	case <-g.sess.Done():
	default:
		return true
	}
	return false
}

func (g *Election) sleep(ctx context.Context, d time.Duration) {
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
func (g *Election) lead(ctx context.Context, e *concurrency.Election) {
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
		err := g.gw.OpenGateway(ctx)
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
	g.gw.CloseGateway()
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
func (g *Election) watchTerm(ctx context.Context, e *concurrency.Election) error {
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
func (g *Election) observe(ctx context.Context) {
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
