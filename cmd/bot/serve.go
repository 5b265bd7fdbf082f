package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"

	discordadapter "github.com/pinplan/pinplan/adapters/discord"
	slackadapter "github.com/pinplan/pinplan/adapters/slack"
	"github.com/pinplan/pinplan/adapters/web"
	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/config"
	"github.com/pinplan/pinplan/etcdstore"
	"github.com/pinplan/pinplan/httphost"
	"github.com/pinplan/pinplan/mcp"
	"github.com/pinplan/pinplan/replica"
	"github.com/pinplan/pinplan/store"
	"github.com/pinplan/pinplan/tracing"
)

// serve runs until ctx is done, then shuts down in order: stop taking
// events, let sessions reach a checkpoint, finish plan renders, close the
// DB. Every part registers its teardown as it is made; they run in
// reverse, on a clean stop and on an early error alike.
//
// The wiring is built in one pass, every part once: the stores, the
// model and tools, the platforms (the console, Slack, Discord), the
// runner, the router with every platform, and with replicas the
// hand-over handler. The platforms need the way in before the router
// exists, so they are given the intake (a forwarder); it is pointed at
// the router (or the hand-over handler) before the listener, the
// platforms or the replica's watches start, so no event can arrive
// before it is.
func serve(ctx context.Context, cfg *config.Config, demo bool, getenv func(string) string, stdout, stderr io.Writer) (err error) {
	log := newLogger(cfg, stderr)
	ctx, cancel := context.WithCancel(ctx)
	var teardown []func()
	defer func() {
		cancel()
		for i := len(teardown) - 1; i >= 0; i-- {
			teardown[i]()
		}
		if err == nil {
			log.Info("stopped")
		}
	}()
	later := func(f func()) { teardown = append(teardown, f) }
	lost := make(chan error, 1) // a replica's lease ended under it
	traces, err := tracing.New(ctx, tracing.Options{Version: strings.TrimPrefix(version(), "pinplan "), InstanceID: replicaID(cfg), Redact: cfg.Redact}, getenv, log.With("component", "traces"))
	if err != nil {
		return err
	}
	// Flushed last, once the runner and the router made their last spans.
	later(func() {
		shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := traces.Shutdown(shutCtx); err != nil {
			log.Warn("flush traces", "err", err)
		}
	})

	in := &intake{}
	st, err := openStores(ctx, cfg, in.take, later, log)
	if err != nil {
		return err
	}
	db, rep := st.db, st.rep
	token, generated, err := consoleToken(cfg)
	if err != nil {
		return err
	}
	if generated && len(cfg.EtcdEndpoints) > 0 && !cfg.WebOff {
		log.Warn("the console's token was generated for this replica alone (in " + tokenFile(cfg) + "); set one PINPLAN_WEB_TOKEN on every replica, or behind a load balancer each refuses the others' cookies")
	}
	cfg.WebToken = config.Secret(token) // redacted from every log line from here on

	reg := prometheus.NewRegistry()
	m := newMetrics(reg, db)
	m.addCheck(db.Ping)
	if rep != nil {
		replicaMetrics(reg, rep)
	}

	model, tools, modelName := buildModel(cfg, demo, m, log)
	registry, err := agent.NewRegistry(tools...)
	if err != nil {
		return err
	}
	servers, err := startMCP(cfg, registry, m, getenv, later, log)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup // the HTTP server and housekeeping
	later(wg.Wait)

	ps, err := newPlatforms(cfg, in, st, demo, modelName, log)
	if err != nil {
		return err
	}
	console, slk, dsc := ps.console, ps.slack, ps.discord
	var gw *replica.Election // with dsc, before the listener serves
	if dsc != nil {
		gw = replica.NewElection(dsc, st.etcd, rep, cfg.EtcdPrefix, log.With("adapter", "discord"))
		gatewayMetrics(reg, gw)
	}

	hooks := m.boardHooks()
	hooks.Shown = func(th chat.Thread, p chat.Plan) { console.Mirror(th, p) }
	hooks.Undelivered = func(th chat.Thread, text string, err error) {
		m.undelivered.WithLabelValues(th.Platform).Inc()
		console.Undelivered(th, text, err)
	}
	events := &agent.EventService{Logger: log.With("component", "events")}
	runner, err := agent.NewRunner(agent.Options{
		Model: model, Store: db, Tools: registry, ModelName: modelName,
		SystemPrompt: systemPrompt, StaleRounds: cfg.StaleRounds, ReminderRole: cfg.ReminderRole, MaxRounds: cfg.MaxRounds,
		ApprovalTimeout: cfg.ApprovalTimeout, ContextTokens: cfg.ContextTokens, MaxOutputTokens: cfg.MaxOutput, Approvers: cfg.Approvers,
		TurnTokens: int64(cfg.TurnTokens), UserTokens: int64(cfg.UserTokens),
		Events: events, Logger: log.With("component", "agent"), Owners: owners(rep),
		Tracer: traces.Provider, TraceContent: traces.Content,
		Files: &chat.Files{Platforms: ps.byName, MaxBytes: int64(cfg.FileBytes), Vision: cfg.Vision, Logger: log.With("component", "files")},
	})
	if err != nil {
		return err
	}
	var chatRunner chat.Runner = runner
	var fence chat.Fence
	if rep != nil {
		chatRunner, fence = replica.NewRunner(runner, rep, log.With("component", "replica")), rep
	}
	router := chat.NewRouter(chat.Options{Runner: chatRunner, Store: db, Log: db, Cards: db, Listings: db, FollowUps: db, Outbox: db, Platforms: ps.byName, Logger: log.With("component", "chat"), Hooks: hooks,
		Approvers: cfg.Approvers, ThreadContext: cfg.ThreadContext, Fence: fence, Dedupe: db, Tracer: traces.Provider})
	// The way in: the router, or with replicas the session's queue in
	// etcd (replica.Handler.Handle).
	var shared *replica.Handler
	if rep != nil {
		shared = replica.New(ctx, replica.Options{Replica: rep, Store: st.es, Router: router, Runner: runner, Logger: log.With("component", "replica")})
		in.set(shared, shared.Taken)
		// Once the runner, the router and the hand-over queues are at
		// rest, the lease goes: the other replicas take this one's
		// threads at once, not after whatever else the stop waits for
		// (tool servers slow to exit, the HTTP server's last requests).
		later(func() {
			if err := rep.Close(); err != nil {
				log.Warn("release the replica's lease", "err", err)
			}
		})
		later(shared.Wait)
	} else {
		in.set(router, nil)
	}
	// Torn down in reverse: the runner stops publishing, then the router
	// finishes its plan edits and replies.
	later(router.Close)
	// The plan boards and cards in line (the router only queues); the
	// metrics and the console's run state each drain their own
	// subscription, closed once the runner publishes no more.
	events.Follow(router)
	for name, s := range map[string]agent.Subscriber{"metrics": m, "console": web.NewRunStates(console, router)} {
		sub := events.Subscribe(name, 1024)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub.Drain(s)
		}()
		later(sub.Close)
	}
	later(runner.Close) // first: then the subscriptions close, then the router

	host := httphost.New(httphost.Options{Token: token, Logger: log.With("component", "http"),
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		Ready:   func() error { return m.ready() }, ReadyDetail: func() string { return mcpStatus(servers) + replicaStatus(rep) + gw.Status() }})
	if !cfg.WebOff {
		console.Register(host)
	}
	if st.bolt != nil {
		host.Handle("GET /api/backup", backupHandler(st.bolt))
	}
	if slk != nil {
		later(slk.Wait) // after the HTTP server stops: no more events
		if cfg.SlackAppToken == "" {
			// Signed by Slack: neither the console's guard nor its token.
			host.HandlePublic("POST /slack/events", slk.HTTPHandler(ctx))
			host.HandlePublic("POST /slack/interactions", slk.InteractionsHandler(ctx))
			host.HandlePublic("POST /slack/commands", slk.CommandsHandler(ctx))
		}
	}
	ln, err := host.Listen(cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on PINPLAN_HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := host.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	}()
	later(func() {
		shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := host.Shutdown(shutCtx); err != nil {
			log.Warn("http shutdown", "err", err)
		}
	})
	later(console.Close) // end the event streams first, so the shutdown does not wait on them
	if !cfg.ModelConfigured && !demo {
		fmt.Fprintln(stdout, "pinplan: no model configured; set OPENAI_API_KEY or OPENAI_BASE_URL, or run with -demo")
	}
	if cfg.WebOff {
		fmt.Fprintf(stdout, "pinplan: listening on %s (PINPLAN_WEB=off: no console)\n", ln.Addr())
	} else {
		fmt.Fprintf(stdout, "pinplan: web console at %s\n", consoleURL(ln.Addr().String(), token, generated))
	}
	if slk != nil {
		if err := slk.Start(ctx); err != nil {
			return err
		}
		m.addCheck(slk.Ready)
	}
	if gw != nil {
		if err := gw.Start(ctx); err != nil { // here, or on the elected replica
			return err
		}
		later(gw.Stop) // no new messages while sessions wind down
		m.addCheck(gw.Ready)
	}
	m.setReady(nil)
	later(func() { m.setReady(errors.New("shutting down")) })

	var pending int
	if rep == nil {
		if pending, err = router.Resume(ctx); err != nil {
			log.Error("resume undelivered replies", "err", err)
		}
	}
	// A resumed turn may be waiting on an MCP tool (an approval card left
	// open by a crash): give the servers their first try before it looks
	// the tool up. The listener and the platforms are up already.
	mcpCtx, mcpCancel := context.WithTimeout(ctx, cfg.MCPStartup)
	if err := servers.WaitStarted(mcpCtx); err != nil {
		log.Warn("resuming sessions before every MCP server has started", "err", err)
	}
	mcpCancel()
	var n int
	if rep == nil {
		if n, err = runner.Resume(ctx); err != nil {
			log.Error("resume sessions", "err", err)
		}
	} else if n, err = startReplica(ctx, cancel, shared, rep, ps, &wg, lost, log); err != nil {
		return err
	}
	log.Info("pinplan started", "config", cfg.Describe(demo), "resumed", n, "replies_pending", pending, "demo", demo)

	wg.Add(1)
	go func() { // housekeeping: expired dedupe keys, idle boards, retention
		defer wg.Done()
		housekeep(ctx, cfg, st.bolt, router, console, log)
	}()

	<-ctx.Done()
	log.Info("shutting down")
	select {
	case err := <-lost:
		return err
	default:
		return nil
	}
}

// stores are the open store: the bbolt file, or etcd with this replica.
type stores struct {
	db   stateStore
	bolt *store.DB          // the file, when there is no etcd
	rep  *etcdstore.Replica // with etcd
	es   *etcdstore.Store
	etcd *clientv3.Client // for the Discord gateway's election
}

// openStores opens etcd (PINPLAN_ETCD_ENDPOINTS) with this replica's
// lease, or else the bbolt file. onTake runs when the replica takes a
// session.
func openStores(ctx context.Context, cfg *config.Config, onTake func(key string), later func(func()), log *slog.Logger) (stores, error) {
	var st stores
	if len(cfg.EtcdEndpoints) == 0 {
		bolt, err := store.Open(cfg.DB, store.Options{LockTimeout: 2 * time.Second, BatchDelay: 2 * time.Millisecond})
		if err != nil {
			return st, err
		}
		later(func() { bolt.Close() })
		st.bolt, st.db = bolt, bolt
		return st, nil
	}
	cli, err := dialEtcd(ctx, cfg)
	if err != nil {
		return st, err
	}
	later(func() { cli.Close() })
	warnOldEtcd(ctx, cli, log)
	st.etcd = cli
	rep, err := etcdstore.NewReplica(ctx, cli, etcdstore.ReplicaOptions{Prefix: cfg.EtcdPrefix, ID: replicaID(cfg), TTL: cfg.LeaseTTL, Logger: log.With("component", "replica"),
		Platforms: replicaPlatforms(cfg), OnTake: onTake})
	if err != nil {
		return st, err
	}
	// Revoked after the runner and the router stopped (serve closes it
	// earlier, as soon as they have; teardown runs in reverse, and a
	// second Close does nothing): the others take over at once, not
	// after the TTL.
	later(func() {
		if err := rep.Close(); err != nil {
			log.Warn("release the replica's lease", "err", err)
		}
	})
	st.rep = rep
	if st.es, err = etcdstore.New(ctx, cli, etcdstore.Options{Prefix: cfg.EtcdPrefix, Replica: rep}); err != nil {
		return st, err
	}
	st.db = st.es
	return st, nil
}

// startMCP makes the MCP servers' manager and starts connecting them.
func startMCP(cfg *config.Config, registry *agent.Registry, m *metrics, getenv func(string) string, later func(func()), log *slog.Logger) (*mcp.Manager, error) {
	// The Manager adds component=mcp to its lines itself.
	servers := mcp.New(mcp.Options{Servers: mcpServers(cfg), ResultBytes: cfg.ToolResultBytes, Timeout: cfg.ToolTimeout,
		StartupTimeout: cfg.MCPStartup, Logger: log, Hooks: m.mcpHooks(), Env: getenv})
	later(func() { servers.Close() })
	if len(cfg.MCP) > 0 {
		// The servers connect in the background: one slow to start must
		// not hold up the listener or the platforms. A turn that starts
		// meanwhile waits for them up to PINPLAN_MCP_STARTUP_TIMEOUT (the
		// registry asks the Manager). One that fails is logged, reported
		// at /readyz and retried.
		if err := servers.Start(); err != nil {
			return nil, err
		}
		registry.AddSource(servers)
	}
	return servers, nil
}

// platforms are the platforms this process runs, made before the router
// and handed to it whole (byName); none is started yet.
type platforms struct {
	console *web.Console
	slack   *slackadapter.Adapter   // nil without SLACK_BOT_TOKEN
	discord *discordadapter.Adapter // nil without DISCORD_BOT_TOKEN
	byName  map[string]chat.Platform
}

// newPlatforms makes the console, and Slack and Discord when their
// tokens are set, each handing its events to in.
func newPlatforms(cfg *config.Config, in *intake, st stores, demo bool, modelName string, log *slog.Logger) (platforms, error) {
	ws := web.NewReadModel(st.db, sessionsOf(st.bolt, st.es))
	console := web.New(web.Options{Store: ws, Handler: in, Usage: ws, DailyBudget: int64(cfg.UserTokens), Demo: demo, Model: modelName, Stream: cfg.Stream, FileBytes: int64(cfg.FileBytes), Logger: log.With("adapter", "web")})
	ps := platforms{console: console, byName: map[string]chat.Platform{"web": console}}
	if cfg.SlackBotToken != "" {
		ps.slack = slackadapter.New(slackadapter.Options{
			BotToken: cfg.SlackBotToken.Reveal(), AppToken: cfg.SlackAppToken.Reveal(), SigningSecret: cfg.SlackSigningSecret.Reveal(),
			APIURL: cfg.SlackAPIURL, NativePlan: cfg.SlackPlanBlocks, EditsPerMinute: float64(cfg.SlackEditsPerMin), Stream: cfg.Stream,
			Handler: in, Dedupe: st.db, Sessions: ws.Listed, Logger: log.With("adapter", "slack"),
		})
		ps.byName["slack"] = ps.slack
	}
	if cfg.DiscordBotToken != "" {
		dsc, err := discordadapter.New(discordadapter.Options{Token: cfg.DiscordBotToken.Reveal(), APIURL: cfg.DiscordAPIURL,
			ThreadPerTask: cfg.DiscordThreadPerTask, ComponentsV2: cfg.DiscordComponentsV2, Stream: cfg.Stream, Handler: in, Marks: st.db, Logger: log.With("adapter", "discord"),
			Commands: true, Guild: cfg.DiscordGuild, ApplicationID: cfg.DiscordAppID, Sessions: ws.Listed})
		if err != nil {
			return ps, err
		}
		ps.discord = dsc
		ps.byName["discord"] = dsc
	}
	return ps, nil
}

// startReplica starts the replica's part once the platforms are up: the
// watches and the first scan (it returns how many sessions that took),
// the console's view of threads held elsewhere, the shared pace, and a
// stop (an error on lost) when the lease ends under the replica.
func startReplica(ctx context.Context, cancel context.CancelFunc, shared *replica.Handler, rep *etcdstore.Replica, ps platforms, wg *sync.WaitGroup, lost chan<- error, log *slog.Logger) (int, error) {
	n, err := shared.Start(ctx)
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
	wg.Add(1)
	go func() { // the platforms' pace, shared by the live replicas
		defer wg.Done()
		replica.ShareBudgets(ctx, rep, log, sharers...)
	}()
	go func() {
		select {
		case <-rep.Lost():
			err := fmt.Errorf("replica %s: %w; stopping so that a supervisor starts it afresh (its sessions are another replica's now)", rep.ID(), rep.LostErr())
			log.Error("lease lost", "err", err)
			lost <- err
			cancel()
		case <-ctx.Done():
		}
	}()
	return n, nil
}

// inbox is every platform's way in: the router, or with replicas the
// hand-over handler (the console's Handler, Slack's and Discord's
// chat.Inbox, and Slack's own Stop).
type inbox interface {
	web.Handler
	Known(key string) bool
	StopSession(ctx context.Context, c chat.Click) chat.ClickResult
	Tell(ctx context.Context, th chat.Thread, user, text string) error
	Post(ctx context.Context, th chat.Thread, send func(context.Context) error) error
}

var (
	_ inbox = (*chat.Router)(nil)
	_ inbox = (*replica.Handler)(nil)
	_ inbox = (*intake)(nil)
)

// intake is the platforms' way in while they are made before the router
// (serve): it forwards to the inbox, and the replica's takes to the
// hand-over handler, once set. serve sets it before the listener, the
// platforms and the replica's watches start, so every event finds it
// set; it does not change after.
type intake struct {
	to    inbox
	taken func(key string) // with replicas: replica.Handler.Taken
}

func (i *intake) set(to inbox, taken func(key string)) { i.to, i.taken = to, taken }

func (i *intake) take(key string) {
	if i.taken != nil {
		i.taken(key)
	}
}

func (i *intake) Handle(ctx context.Context, in chat.Incoming) error { return i.to.Handle(ctx, in) }
func (i *intake) Known(key string) bool                              { return i.to.Known(key) }
func (i *intake) Click(ctx context.Context, c chat.Click) chat.ClickResult {
	return i.to.Click(ctx, c)
}
func (i *intake) StopSession(ctx context.Context, c chat.Click) chat.ClickResult {
	return i.to.StopSession(ctx, c)
}
func (i *intake) Tell(ctx context.Context, th chat.Thread, user, text string) error {
	return i.to.Tell(ctx, th, user, text)
}
func (i *intake) Post(ctx context.Context, th chat.Thread, send func(context.Context) error) error {
	return i.to.Post(ctx, th, send)
}
func (i *intake) Visible(key string) bool                          { return i.to.Visible(key) }
func (i *intake) Rename(key, title string) (chat.Thread, bool)     { return i.to.Rename(key, title) }
func (i *intake) Delete(ctx context.Context, key, by string) error { return i.to.Delete(ctx, key, by) }
func (i *intake) Cards(key string) []chat.CardInfo                 { return i.to.Cards(key) }
