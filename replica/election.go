package replica

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/etcdstore"
)

// Gateway is what the election needs of a platform's gateway (the
// Discord adapter): the whole adapter started at once without etcd, or
// its REST side at start and each of its shards opened and closed as
// terms begin and end. Either start gives it the inbox its events go to.
type Gateway interface {
	Start(ctx context.Context, in chat.Inbox) error     // REST and every shard, without etcd
	StartREST(ctx context.Context, in chat.Inbox) error // REST only, with replicas; learns the shard count
	ShardCount() int
	OpenShard(ctx context.Context, shard int) error
	CloseShard(shard int)
	Close()
	Ready() error
}

// Election puts each shard of the Discord gateway where it belongs
// (DESIGN §14, §20). Discord gives a bot one session per shard, so with
// replicas each shard is held by one of them, elected under
// <prefix>election/discord/<shard>-of-<count> on the replica's own
// lease: it holds the shard exactly as long as it is a live replica, and
// when it dies or loses its lease the key goes with the lease and the
// next in line opens the shard within the TTL. Every replica stands for
// every shard, so the oldest one standing holds them all and the next
// takes them over one by one; shards are not spread (moving a held shard
// costs an IDENTIFY and a gap to catch up). The count is in the key:
// replicas that disagree on it (PINPLAN_DISCORD_SHARDS set on some, or
// GET /gateway/bot's count changed between their starts) then each hold
// a whole set, whose events the dedupe takes once, rather than a mix of
// shards of two counts that misses guilds. Every replica makes the REST
// calls of the threads it holds. Without etcd the process holds every
// shard.
type Election struct {
	gw  Gateway
	cli *clientv3.Client   // nil without etcd
	rep *etcdstore.Replica // nil without etcd
	pfx string             // the elections' prefix (key)
	log *slog.Logger

	sess       *concurrency.Session // on the replica's lease; never closed here (Close would revoke it)
	stopClient context.CancelFunc   // ends the election client's context
	wg         sync.WaitGroup       // the campaigns and the observers

	mu      sync.Mutex     // guards held and leaders, and shards until Start returns
	held    map[int]bool   // the shards this process holds now
	leaders map[int]string // each shard's elected replica id, as last observed
	shards  int            // the shard count, set by Start before the campaigns
}

// NewElection returns the election for gw under <prefix>election/discord
// (cli and rep nil: no etcd, this process holds every shard); Start runs
// the gateway or the campaigns for its shards.
func NewElection(gw Gateway, cli *clientv3.Client, rep *etcdstore.Replica, prefix string, log *slog.Logger) *Election {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Election{gw: gw, cli: cli, rep: rep, pfx: prefix + "election/discord", log: log, held: map[int]bool{}, leaders: map[int]string{}}
}

// Held reports whether this process holds a shard of the gateway now.
func (g *Election) Held() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.held) > 0
}

// HeldShards lists the shards this process holds now, in order.
func (g *Election) HeldShards() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]int, 0, len(g.held))
	for i := range g.shards {
		if g.held[i] {
			out = append(out, i)
		}
	}
	return out
}

func (g *Election) setHeld(shard int, v bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if v {
		g.held[shard] = true
	} else {
		delete(g.held, shard)
	}
}

// Start opens every shard without etcd. With replicas it starts the
// adapter's REST side and campaigns for each shard on goroutines of its
// own until ctx ends. The gateway's events go to in.
func (g *Election) Start(ctx context.Context, in chat.Inbox) error {
	if g.rep == nil {
		if err := g.gw.Start(ctx, in); err != nil {
			return err
		}
		g.mu.Lock()
		g.shards = g.gw.ShardCount()
		for i := range g.shards {
			g.held[i] = true
		}
		g.mu.Unlock()
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
	n := g.gw.ShardCount()
	g.mu.Lock()
	g.shards = n
	g.mu.Unlock()
	g.log.Info("campaigning for the discord gateway", "election", g.pfx, "shards", n)
	for shard := range n {
		g.wg.Add(2)
		go func() {
			defer g.wg.Done()
			g.campaign(ctx, shard)
		}()
		go func() {
			defer g.wg.Done()
			g.observe(ctx, shard)
		}()
	}
	return nil
}

// Stop runs once ctx is done: it waits for the campaigns (a leader has
// closed its shards and resigned by then) and closes the adapter.
func (g *Election) Stop() {
	if g.sess != nil {
		giveUp := time.AfterFunc(10*time.Second, g.stopClient) // etcd out of reach: skip the clean-up
		g.wg.Wait()
		giveUp.Stop()
		g.stopClient()
		g.sess.Orphan() // ends the session's keep-alive; the lease is the replica's to revoke
	}
	g.gw.Close()
	g.mu.Lock()
	clear(g.held)
	g.mu.Unlock()
}

// Ready implements the readiness check: only a process holding shards
// needs them connected; the others' REST was checked at start.
func (g *Election) Ready() error {
	if g.Held() {
		return g.gw.Ready()
	}
	return nil
}

// Status is the /readyz text with replicas: for each shard whether this
// replica holds it, and if not, who was last seen to. With one shard it
// is one line about "the discord gateway".
func (g *Election) Status() string {
	if g == nil || g.rep == nil {
		return ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var b strings.Builder
	for i := range g.shards {
		name := "discord gateway: "
		if g.shards > 1 {
			name = fmt.Sprintf("discord gateway: shard %d of %d ", i, g.shards)
		}
		switch leader := g.leaders[i]; {
		case g.held[i]:
			fmt.Fprintf(&b, "%sheld by this replica (%s)\n", name, g.rep.ID())
		case leader == "" || leader == g.rep.ID():
			fmt.Fprintf(&b, "%snot held by this replica (REST only here)\n", name)
		default:
			fmt.Fprintf(&b, "%snot held by this replica (REST only here); held by replica %s\n", name, leader)
		}
	}
	return b.String()
}

// key is the election prefix of shard: <shard>-of-<count> under pfx.
func (g *Election) key(shard int) string {
	return g.pfx + "/" + strconv.Itoa(shard) + "-of-" + strconv.Itoa(g.shards)
}

// campaign stands for a shard until ctx ends or the replica is lost,
// and holds it for each term it wins.
func (g *Election) campaign(ctx context.Context, shard int) {
	wait := time.Second
	for g.alive(ctx) {
		e := concurrency.NewElection(g.sess, g.key(shard))
		// Blocks until this replica's key is the oldest. On ctx's end it
		// removes the key (not the leader any more, or never).
		if err := e.Campaign(ctx, g.rep.ID()); err != nil {
			if !g.alive(ctx) {
				return
			}
			g.log.Warn("campaign for the discord gateway", "shard", shard, "err", err, "retry_in", wait)
			g.sleep(ctx, wait)
			wait = min(2*wait, g.rep.TTL())
			continue
		}
		wait = time.Second
		g.lead(ctx, e, shard)
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

// lead is one term of a shard: it opens the shard (again and again if
// Discord refuses) until the term ends (ctx done, the lease lost, the
// leader key gone), then closes the shard before it resigns, so that a
// hand-over never has two replicas holding it. (A lease that expired
// under a paused replica elects the next one before the paused one can
// know.) The opening is bounded by the term: a shard still waiting for
// its identify bucket when the term ends never dials.
func (g *Election) lead(ctx context.Context, e *concurrency.Election, shard int) {
	term, endTerm := context.WithCancel(ctx)
	defer endTerm()
	ended := make(chan struct{}) // the term is over, for why
	var why error
	go func() {
		defer close(ended)
		why = g.watchTerm(ctx, e)
		endTerm()
	}()
	g.setHeld(shard, true)
	g.log.Info("elected to hold the discord gateway", "shard", shard, "key", e.Key())
	for wait := time.Second; ; wait = min(2*wait, time.Minute) {
		err := g.gw.OpenShard(term, shard)
		if err == nil {
			g.log.Info("discord gateway open on this replica", "shard", shard)
			break
		}
		if term.Err() != nil {
			break
		}
		g.log.Error("open the discord gateway", "shard", shard, "err", err, "retry_in", wait)
		g.sleep(term, wait)
		if term.Err() != nil {
			break
		}
	}
	<-ended
	g.gw.CloseShard(shard)
	g.setHeld(shard, false)
	if why != nil {
		g.log.Warn("gave the discord gateway up", "shard", shard, "why", why)
		return
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer rcancel()
	if err := e.Resign(rctx); err != nil {
		g.log.Warn("resign the discord gateway", "shard", shard, "err", err)
		return
	}
	g.log.Info("resigned the discord gateway", "shard", shard)
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

// observe follows who holds a shard, for /readyz and the log.
func (g *Election) observe(ctx context.Context, shard int) {
	e := concurrency.NewElection(g.sess, g.key(shard))
	for ctx.Err() == nil {
		for resp := range e.Observe(ctx) { // closed when ctx ends or the watch breaks
			if len(resp.Kvs) == 0 {
				continue
			}
			id := string(resp.Kvs[0].Value)
			g.mu.Lock()
			changed := g.leaders[shard] != id
			g.leaders[shard] = id
			g.mu.Unlock()
			if changed {
				g.log.Info("discord gateway leader", "shard", shard, "replica", id)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// IdentifyBuckets shares the Discord gateway's identify buckets among
// replicas (it implements discord.IdentifyLimiter): each replica paces
// the shards it holds, and two replicas holding shards of one bucket
// would each identify in it. A bucket is taken by creating
// <prefix>identify/discord/<bucket> on a lease of its own that outlives
// Discord's 5 s window; who finds it taken waits for it to go.
//
// The key is kept alive until the shard's READY (release), then lives a
// full lease TTL more (the window and a second): a slow dial (TCP, TLS,
// HELLO) cannot let another replica's IDENTIFY reach Discord within a
// window of this one's. A release never called (a dial that never reaches
// READY) stops the keep-alive after hold.
type IdentifyBuckets struct {
	cli    *clientv3.Client
	pfx    string
	window time.Duration // Discord's 5 s; tests shorten it
	hold   time.Duration // a bucket is kept at most this long awaiting READY
}

// identifyHold bounds how long a bucket waits for its shard's READY: the
// gateway dialer's 45 s handshake, HELLO and READY, with room.
const identifyHold = time.Minute

// NewIdentifyBuckets returns the buckets under prefix on cli.
func NewIdentifyBuckets(cli *clientv3.Client, prefix string) *IdentifyBuckets {
	return &IdentifyBuckets{cli: cli, pfx: prefix + "identify/discord/", window: 5 * time.Second, hold: identifyHold}
}

// WaitIdentify implements discord.IdentifyLimiter: it returns once
// bucket is this replica's to identify in, held until release and a
// window after; at once on a nil *IdentifyBuckets. buckets
// (max_concurrency) is in the key, so that a count Discord changed does
// not share keys with the old one.
func (b *IdentifyBuckets) WaitIdentify(ctx context.Context, bucket, buckets int) (release func(), err error) {
	if b == nil { // no etcd: the adapter's own pacing is all there is
		return func() {}, nil
	}
	key := b.pfx + strconv.Itoa(buckets) + "/" + strconv.Itoa(bucket)
	// A lease expires no sooner than its TTL, in whole seconds: one
	// more than the window, for the IDENTIFY's own way to Discord.
	ttl := int64((b.window+time.Second-1)/time.Second) + 1
	for {
		lease, err := b.cli.Grant(ctx, ttl)
		if err != nil {
			return nil, fmt.Errorf("discord identify bucket %s: %w", key, err)
		}
		resp, err := b.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, "", clientv3.WithLease(lease.ID))).Commit()
		if err == nil && resp.Succeeded {
			return b.keep(lease.ID), nil
		}
		b.cli.Revoke(context.WithoutCancel(ctx), lease.ID) // unused; it would expire anyway
		if err != nil {
			return nil, fmt.Errorf("discord identify bucket %s: %w", key, err)
		}
		if err := b.waitGone(ctx, key, resp.Header.Revision); err != nil {
			return nil, err
		}
	}
}

// keep keeps a bucket's lease alive until the returned release is called
// (more than once is fine) or b.hold has passed; release then renews it
// once, so that it expires a full TTL (the window and a second) after
// the READY at the soonest.
func (b *IdentifyBuckets) keep(lease clientv3.LeaseID) (release func()) {
	ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(b.hold, identifyHold))
	done := make(chan struct{})
	ch, err := b.cli.KeepAlive(ctx, lease)
	if err != nil {
		close(done) // the lease lives its TTL from the grant, as before
	} else {
		go func() {
			defer close(done)
			for range ch { // closed when ctx ends or the lease is gone
			}
		}()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer rcancel()
			// Failing (etcd away), the lease lapses at most a TTL after
			// its last renewal, as without a hold.
			_, _ = b.cli.KeepAliveOnce(rctx, lease)
		})
	}
}

// waitGone returns when key is deleted after rev, or after a window at
// most (a watch that breaks is not waited on), or ctx's error.
func (b *IdentifyBuckets) waitGone(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithTimeout(ctx, b.window+time.Second)
	defer cancel()
	for wr := range b.cli.Watch(wctx, key, clientv3.WithRev(rev+1)) {
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return nil
			}
		}
		if wr.Err() != nil {
			// Compacted past rev, or canceled by the server: look again
			// shortly.
			select {
			case <-wctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
			break
		}
	}
	return context.Cause(ctx)
}
