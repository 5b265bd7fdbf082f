package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	discordadapter "github.com/pinplan/pinplan/adapters/discord"
	slackadapter "github.com/pinplan/pinplan/adapters/slack"
	"github.com/pinplan/pinplan/adapters/web"
	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/config"
	"github.com/pinplan/pinplan/etcdstore"
	"github.com/pinplan/pinplan/internal/serial"
	"github.com/pinplan/pinplan/store"
)

// dialEtcd connects to the cluster of PINPLAN_ETCD_ENDPOINTS with the TLS
// and auth settings, and checks that it answers.
func dialEtcd(ctx context.Context, cfg *config.Config) (*clientv3.Client, error) {
	cc := clientv3.Config{Endpoints: cfg.EtcdEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		Username: cfg.EtcdUsername, Password: cfg.EtcdPassword.Reveal(), DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 3 * time.Second}
	if cfg.EtcdCA != "" || cfg.EtcdCert != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.EtcdCA != "" {
			pem, err := os.ReadFile(cfg.EtcdCA)
			if err != nil {
				return nil, fmt.Errorf("PINPLAN_ETCD_CA: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("PINPLAN_ETCD_CA: %s holds no PEM certificate", cfg.EtcdCA)
			}
		}
		if cfg.EtcdCert != "" {
			cert, err := tls.LoadX509KeyPair(cfg.EtcdCert, cfg.EtcdKey)
			if err != nil {
				return nil, fmt.Errorf("PINPLAN_ETCD_CERT, PINPLAN_ETCD_KEY: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
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
	if cfg.SlackBotToken != "" {
		platforms = append(platforms, "slack")
	}
	if cfg.DiscordBotToken != "" {
		platforms = append(platforms, "discord")
	}
	return platforms
}

// replicas is the glue between the router, the runner and the replica's
// ownership of sessions (DESIGN §14). Every event an adapter decodes, on
// whichever replica, goes to the session's queue in etcd (P fwd/K/, in
// the order the replicas received them); the replica that holds the
// session handles them in that order through its router, so one
// replica's router runs each session. Clicks are decided where they
// arrive (a compare-and-set on the checkpoint), and the holder hears of
// them through its watch.
type replicas struct {
	ctx    context.Context
	rep    *etcdstore.Replica
	st     *etcdstore.Store
	router *chat.Router
	runner *agent.Runner
	log    *slog.Logger
	pumps  serial.Queue  // handed-over events, per session
	takers chan struct{} // bounds the takeovers under way
	wg     sync.WaitGroup
}

var (
	_ chat.Inbox      = (*replicas)(nil)
	_ chat.CardSource = (*replicas)(nil)
	_ web.Handler     = (*replicas)(nil)
)

// handed is an event in a session's queue in etcd: a message, or a
// change of how the session is listed (renamed, deleted), which only its
// holder may write.
type handed struct {
	Message *chat.Incoming `json:"message,omitempty"`
	Rename  *string        `json:"rename,omitempty"` // the new title
	Delete  *string        `json:"delete,omitempty"` // who deleted it
}

// Handle implements chat.Inbox: the message joins its session's queue,
// and the session is taken if no replica holds it.
func (x *replicas) Handle(ctx context.Context, in chat.Incoming) error {
	in.Sync = false // the holder answers in the thread, wherever that is
	if held, err := x.held(ctx, in); err != nil || held {
		return err // a thread that may not be pinplan's hears nothing
	}
	if err := x.hand(ctx, in.Thread.Key, handed{Message: &in}); err != nil {
		return &chat.Rejection{Reason: "I couldn't accept your message right now (the bot's database is unavailable). Please send it again in a moment.", Refused: true}
	}
	return nil
}

// hand puts ev at the end of the session's queue and takes the session if
// nobody holds it.
func (x *replicas) hand(ctx context.Context, key string, ev handed) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if err := x.rep.Forward(ctx, key, data); err != nil {
		x.log.Error("hand an event over to its session", "session", key, "err", err)
		return err
	}
	held, err := x.rep.TryTake(ctx, key)
	if err != nil {
		x.log.Warn("take the session", "session", key, "err", err)
	}
	if held {
		x.pump(key)
	}
	return nil
}

// Rename renames the session (the console, Slack's title change): at
// once when this replica holds it, else through its holder.
func (x *replicas) Rename(key, title string) (chat.Thread, bool) {
	if x.rep.Holds(key) {
		return x.router.Rename(key, title)
	}
	th, ok := x.thread(key)
	if !ok {
		return chat.Thread{}, false
	}
	if err := x.hand(x.ctx, key, handed{Rename: &title}); err != nil {
		return chat.Thread{}, false
	}
	if t := chat.Shorten(strings.Join(strings.Fields(title), " "), 80); t != "" {
		th.Title = t
	}
	return th, true
}

// Delete deletes the session as reset does (the console): at once when
// this replica holds it, else through its holder.
func (x *replicas) Delete(ctx context.Context, key, by string) error {
	if x.rep.Holds(key) {
		return x.router.Delete(ctx, key, by)
	}
	if _, ok := x.thread(key); !ok {
		return errors.New("chat: no such session")
	}
	return x.hand(ctx, key, handed{Delete: &by})
}

// Visible reports whether the console lists the session, from its
// records as they are now.
func (x *replicas) Visible(key string) bool {
	if !x.rep.Holds(key) {
		x.router.Forget(key)
		defer x.router.Forget(key)
	}
	return x.router.Visible(key)
}

// Cards implements chat.CardSource from the session's records as they
// are now: the console lists a thread's approval cards on every replica.
func (x *replicas) Cards(key string) []chat.CardInfo {
	if !x.rep.Holds(key) {
		x.router.Forget(key)
	}
	return x.router.Cards(key)
}

// thread returns the session's thread from its records as they are now.
func (x *replicas) thread(key string) (chat.Thread, bool) {
	x.router.Forget(key)
	defer x.router.Forget(key)
	return x.router.Thread(key)
}

// StopSession is Slack's own Stop (agent_session_stopped) with replicas:
// decided here by the Stop rule, from the records as they are now; a
// stop goes to the holder (replicaRunner.Stop).
func (x *replicas) StopSession(ctx context.Context, c chat.Click) chat.ClickResult {
	if !x.rep.Holds(c.Thread.Key) {
		x.router.Forget(c.Thread.Key)
		defer x.router.Forget(c.Thread.Key)
	}
	return x.router.StopSession(ctx, c)
}

// Known implements chat.Inbox from the cluster's records.
func (x *replicas) Known(key string) bool {
	if x.rep.Holds(key) {
		return x.router.Known(key)
	}
	ctx, cancel := context.WithTimeout(x.ctx, 5*time.Second)
	defer cancel()
	ok, err := x.st.Known(ctx, key)
	if err != nil {
		x.log.Warn("look a session up", "session", key, "err", err)
	}
	return ok
}

// Click implements chat.Inbox: decided here, from the records as they
// are now (the router forgets what it read for a session it does not
// hold).
func (x *replicas) Click(ctx context.Context, c chat.Click) chat.ClickResult {
	key := c.Thread.Key
	if x.rep.Holds(key) {
		return x.router.Click(ctx, c)
	}
	x.router.Forget(key)
	defer x.router.Forget(key)
	return x.router.Click(ctx, c)
}

// pump handles the session's handed-over events in order, on its queue.
func (x *replicas) pump(key string) {
	x.pumps.Kick(key, func() { x.drain(key) })
}

func (x *replicas) drain(key string) {
	ctx := x.ctx
	for ctx.Err() == nil && x.rep.Holds(key) {
		queued, err := x.rep.Queued(ctx, key)
		if err != nil {
			x.log.Error("read handed-over events", "session", key, "err", err)
			return
		}
		if len(queued) == 0 {
			return
		}
		for _, h := range queued {
			var ev handed
			err := json.Unmarshal(h.Data, &ev)
			switch {
			case err != nil:
				x.log.Error("unreadable handed-over event; dropped", "session", key, "err", err)
			case ev.Message != nil:
				err = x.router.Handle(etcdstore.WithConsumed(ctx, h.Key), *ev.Message)
				if err != nil && !errors.Is(err, chat.ErrRejected) {
					// Neither queued nor answered (no such platform here):
					// it stays first in the queue for a holder that can.
					x.log.Error("could not handle a handed-over message; it stays queued", "session", key, "err", err)
					return
				}
			case ev.Rename != nil:
				x.router.Rename(key, *ev.Rename)
			case ev.Delete != nil:
				err = x.router.Delete(ctx, key, *ev.Delete)
			}
			if err != nil && !errors.Is(err, chat.ErrRejected) {
				x.log.Error("handle a handed-over event", "session", key, "err", err)
			}
			// A message the router queued took its event along (WithConsumed);
			// a command or a refusal did not.
			if err := x.rep.Done(ctx, key, h); err != nil {
				x.log.Warn("remove a handled event", "session", key, "err", err)
				return
			}
		}
	}
}

// taken runs when this replica takes a session: the router reads its
// records afresh and finishes what the last holder left (plan edits,
// replies), the runner resumes its turn, and its queued events are
// handled.
func (x *replicas) taken(key string) {
	x.router.ResumeSession(x.ctx, key)
	x.runner.Wake(key)
	x.pump(key)
	if by, ok, err := x.rep.PendingStop(x.ctx, key); err != nil {
		x.log.Warn("look for a stop asked of the last holder", "session", key, "err", err)
	} else if ok {
		x.stop(key, by) // the runner holds it for the turn it is resuming
	}
}

// orphaned runs when a session's holder went away: the session is taken
// if it has work (a turn running or waiting, queued messages or events,
// replies or plan edits not delivered, a board that says a turn runs). Takeovers run a few at a time,
// off the watch, so that a replica that held many sessions is replaced
// within the TTL.
func (x *replicas) orphaned(key string) {
	x.takers <- struct{}{}
	x.wg.Go(func() {
		defer func() { <-x.takers }()
		if !x.rep.Runs(key) || !x.hasWork(key) {
			return
		}
		if _, err := x.rep.TryTake(x.ctx, key); err != nil {
			x.log.Warn("take an orphaned session", "session", key, "err", err)
		}
	})
}

// hasWork reads the session's state and queues in one request.
func (x *replicas) hasWork(key string) bool {
	g, err := x.st.Glance(x.ctx, key)
	if err != nil || g.Unknown {
		return true // let the taker look
	}
	return g.State == agent.Running || g.State == agent.Waiting || g.Inbox > 0 || g.Handed > 0 || g.Outbox > 0 || chat.BoardPending(g.Board) || chat.BoardRunning(g.Board)
}

// stop applies a stop asked of this replica (by another one, for a
// session it holds) and removes the request.
func (x *replicas) stop(key, by string) {
	x.runner.Stop(key, by)
	x.rep.StopDone(x.ctx, key)
}

// scan takes every session with work that no live replica holds, and
// goes over the sessions this replica holds as a watch would have (their
// handed-over events, a decision made elsewhere, a stop asked): at start,
// and when a watch may have missed events.
func (x *replicas) scan() int {
	ctx := x.ctx
	for _, key := range x.rep.HeldKeys() {
		x.pump(key)
		x.runner.Wake(key)
		if by, ok, err := x.rep.PendingStop(ctx, key); err == nil && ok {
			x.stop(key, by)
		}
	}
	var keys []string
	add := func(ks []string, err error) {
		if err != nil {
			x.log.Error("look for sessions with work", "err", err)
		}
		keys = append(keys, ks...)
	}
	add(x.st.Resumable(ctx))
	add(x.rep.QueuedKeys(ctx))
	add(x.st.OutboxKeys(ctx))
	var boards []string
	err := x.st.Boards(ctx, func(key string, data []byte) {
		if chat.BoardPending(data) || chat.BoardRunning(data) { // BoardRunning: a turn's end cut off
			boards = append(boards, key)
		}
	})
	add(boards, err)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	n := 0
	for _, key := range keys {
		if ok, err := x.rep.TryTake(ctx, key); err != nil {
			x.log.Warn("take a session", "session", key, "err", err)
		} else if ok {
			n++
		}
	}
	return n
}

// replicaRunner is the runner as the router sees it with replicas: a stop
// for a session another replica holds is passed to that one.
type replicaRunner struct {
	*agent.Runner
	rep *etcdstore.Replica
	log *slog.Logger
}

func (r replicaRunner) Stop(key, by string) bool {
	if r.rep.Holds(key) {
		return r.Runner.Stop(key, by)
	}
	if r.Runner.StopWaiting(key, by) { // a checkpoint update, fine anywhere
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.rep.RequestStop(ctx, key, by); err != nil {
		r.log.Error("pass a stop on to the session's replica", "session", key, "err", err)
		return false
	}
	return true
}

// replicaMetrics registers the replica's gauges and counters.
func replicaMetrics(reg *prometheus.Registry, rep *etcdstore.Replica) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pinplan_replica_sessions_owned", Help: "Sessions this replica holds."}, func() float64 { return float64(rep.Owned()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pinplan_replica_takeovers_total", Help: "Sessions this replica took (first messages and failovers)."}, func() float64 { return float64(rep.Takeovers.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pinplan_replica_fenced_writes_total", Help: "Writes and sends refused because another replica holds the session now."}, func() float64 { return float64(rep.Fenced.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pinplan_replicas", Help: "Live replicas sharing the etcd prefix."}, func() float64 { return float64(rep.Replicas()) }),
	)
}

// owners is the runner's Owners: the replica, or none without etcd.
func owners(rep *etcdstore.Replica) agent.Owners {
	if rep == nil {
		return nil
	}
	return rep
}

// stateStore is what serve needs of the store: a *store.DB, or an
// *etcdstore.Store for replicas.
type stateStore interface {
	agent.Store
	chat.BoardStore
	chat.CardStore
	chat.ListingStore
	chat.OutboxStore
	chat.Deduper
	chat.MarkStore
	chat.BoardLister
	Plans(ctx context.Context, key string) ([]agent.PlanRevision, error)
	SpentOn(ctx context.Context, day string) ([]agent.Spend, error)
	SessionCount() (int, error)
	Ping() error
}

// sessionInfo is a session as the console lists it, from either store.
type sessionInfo struct {
	Checkpoint     agent.Checkpoint
	Board, Listing []byte
}

// sessionsOf returns the listing function of whichever store is open.
func sessionsOf(bolt *store.DB, es *etcdstore.Store) func(context.Context) ([]sessionInfo, error) {
	if es != nil {
		return func(ctx context.Context) ([]sessionInfo, error) {
			infos, err := es.Sessions(ctx)
			out := make([]sessionInfo, len(infos))
			for i, in := range infos {
				out[i] = sessionInfo{in.Checkpoint, in.Board, in.Listing}
			}
			return out, err
		}
	}
	return func(ctx context.Context) ([]sessionInfo, error) {
		infos, err := bolt.Sessions(ctx)
		out := make([]sessionInfo, len(infos))
		for i, in := range infos {
			out[i] = sessionInfo{in.Checkpoint, in.Board, in.Listing}
		}
		return out, err
	}
}

// replicaStatus is the replica's lines for /readyz: the platforms it
// runs (it takes only their sessions), its id, lease and how many
// sessions it holds (etcd's health is the store's check).
func replicaStatus(rep *etcdstore.Replica) string {
	if rep == nil {
		return ""
	}
	platforms := "every platform"
	if p := rep.Platforms(); p != nil {
		platforms = strings.Join(p, ", ")
	}
	state := "held"
	select {
	case <-rep.Lost():
		state = "lost"
	default:
	}
	return fmt.Sprintf("replica %s: platforms %s\nreplica %s: lease %x %s (ttl %s), %d sessions held, %d replicas live\n",
		rep.ID(), platforms, rep.ID(), int64(rep.Lease()), state, rep.TTL(), rep.Owned(), rep.Replicas())
}

// sharer is a platform whose pacing budget replicas share.
type sharer interface{ Share(n int) }

// shareBudgets gives each platform's pace an even share among the live
// replicas (DESIGN §14: Slack's Tier 3 per workspace and Discord's
// per-channel edits are the bot's, not each replica's), following the
// count as replicas come and go, until ctx ends.
func shareBudgets(ctx context.Context, rep *etcdstore.Replica, slk *slackadapter.Adapter, dsc *discordadapter.Adapter, log *slog.Logger) {
	var platforms []sharer
	if slk != nil {
		platforms = append(platforms, slk)
	}
	if dsc != nil {
		platforms = append(platforms, dsc)
	}
	if len(platforms) == 0 {
		return
	}
	last := 0
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if n := rep.Replicas(); n != last {
			for _, p := range platforms {
				p.Share(n)
			}
			log.Info("platform pace shared", "replicas", n)
			last = n
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// followElsewhere keeps the console live for the threads other replicas
// run (DESIGN §14): their plan boards' shown content and run state, and
// the answers they commit, from etcd watches.
func followElsewhere(ctx context.Context, rep *etcdstore.Replica, console *web.Console) {
	rep.Follow(ctx, "board", func(_ string, v []byte) {
		th, shown, ok := chat.DecodeBoard(v)
		if !ok || len(shown.Items) == 0 {
			return
		}
		if th.Platform == "web" {
			console.EditPlan(ctx, th, chat.MessageRef{}, shown)
		} else {
			console.Mirror(th, shown)
		}
		state := "idle"
		switch shown.State {
		case chat.StateWorking, chat.StateResumed:
			state = "running"
		case chat.StateWaiting:
			state = "waiting"
		}
		console.SetState(th, state, string(shown.State))
	})
	rep.Follow(ctx, "hist", func(key string, v []byte) {
		var e agent.Entry
		if json.Unmarshal(v, &e) != nil || e.Message.Role != openai.ChatMessageRoleAssistant || e.Message.Content == "" || len(e.Message.ToolCalls) > 0 {
			return
		}
		platform, _, _ := strings.Cut(key, "/")
		if platform != "web" {
			return // other platforms' answers are in their own threads
		}
		console.Reply(ctx, chat.Thread{Platform: platform, Key: key}, "", e.Message.Content)
	})
}
