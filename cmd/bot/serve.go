package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pinplan/pinplan/adapters/web"
	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/cli"
	"github.com/pinplan/pinplan/config"
	"github.com/pinplan/pinplan/httphost"
	"github.com/pinplan/pinplan/mcp"
	"github.com/pinplan/pinplan/metrics"
	"github.com/pinplan/pinplan/replica"
	"github.com/pinplan/pinplan/tracing"
)

// Main is the bot that serve runs, as wtf's cmd/wtfd has it: build makes
// every part once, each after the parts it needs (the traces, the
// stores, the metrics, the model and tools, the platforms, the runner,
// the router with every platform, the hand-over handler with replicas,
// the HTTP host with the console's routes on the inbox); Start starts
// them, giving Slack and Discord the inbox as they start; Close tears
// down, in reverse, what was built, on a clean stop and on an early
// error alike.
type Main struct {
	cfg    *config.Config
	demo   bool
	getenv func(string) string
	stdout io.Writer
	log    *slog.Logger
	cancel context.CancelFunc
	lost   chan error // a replica's lease ended under it

	teardown []func()
	wg       sync.WaitGroup // the HTTP server, housekeeping, the event drains

	traces         *tracing.Tracing
	st             stores
	token          string
	tokenGenerated bool
	ready          *httphost.Readiness
	reg            *prometheus.Registry
	metrics        *metrics.Metrics
	servers        *mcp.Manager
	ps             platforms
	gw             *replica.Election // with Discord
	runner         *agent.Runner
	router         *chat.Router
	shared         *replica.Handler // with replicas
	in             inbox            // the router, or with replicas shared
	host           *httphost.Host
}

// serve runs until ctx is done, then shuts down in order: stop taking
// events, let sessions reach a checkpoint, finish plan renders, close the
// DB.
func serve(ctx context.Context, cfg *config.Config, demo bool, getenv func(string) string, stdout, stderr io.Writer) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	m := &Main{cfg: cfg, demo: demo, getenv: getenv, stdout: stdout, log: newLogger(cfg, stderr), cancel: cancel, lost: make(chan error, 1)}
	defer func() {
		cancel()
		m.Close()
		if err == nil {
			m.log.Info("stopped")
		}
	}()
	if err := m.build(ctx); err != nil {
		return err
	}
	if err := m.Start(ctx); err != nil && ctx.Err() == nil {
		return err // a stop during the start (a gateway still opening) is a clean one
	}
	<-ctx.Done()
	m.log.Info("shutting down")
	select {
	case err := <-m.lost:
		return err
	default:
		return nil
	}
}

// later registers a part's teardown; Close runs them in reverse.
func (m *Main) later(f func()) { m.teardown = append(m.teardown, f) }

// Close tears down every part built, in reverse.
func (m *Main) Close() {
	for i := len(m.teardown) - 1; i >= 0; i-- {
		m.teardown[i]()
	}
	m.teardown = nil
}

// build makes every part; nothing is started.
func (m *Main) build(ctx context.Context) error {
	cfg, log := m.cfg, m.log
	var err error
	m.traces, err = tracing.New(ctx, tracing.Options{Version: strings.TrimPrefix(cli.Version(), "pinplan "), InstanceID: replicaID(cfg), Redact: cfg.Redact},
		m.getenv, log.With("component", "traces"))
	if err != nil {
		return err
	}
	m.later(func() { // flushed last, once the runner and the router made their last spans
		shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := m.traces.Shutdown(shutCtx); err != nil {
			log.Warn("flush traces", "err", err)
		}
	})
	if m.st, err = openStores(ctx, cfg, m.later, log); err != nil {
		return err
	}
	if m.token, m.tokenGenerated, err = httphost.ConsoleToken(cfg.WebToken.Reveal(), cfg.DB); err != nil {
		return err
	}
	if m.tokenGenerated && len(cfg.EtcdEndpoints) > 0 && !cfg.WebOff {
		log.Warn("the console's token was generated for this replica alone (in " + httphost.TokenFile(cfg.DB) + "); set one PINPLAN_WEB_TOKEN on every replica, or behind a load balancer each refuses the others' cookies")
	}
	cfg.WebToken = config.Secret(m.token) // redacted from every log line from here on
	m.ready = httphost.NewReadiness()
	m.ready.Add(m.st.ping)
	m.reg = prometheus.NewRegistry()
	m.metrics = metrics.New(m.reg, m.st.count)
	if m.st.rep != nil {
		metrics.Replica(m.reg, m.st.rep)
	}
	model, tools, modelName := buildModel(cfg, m.demo, m.metrics, log)
	registry, err := agent.NewRegistry(tools...)
	if err != nil {
		return err
	}
	if m.servers, err = startMCP(cfg, registry, m.metrics, m.getenv, m.later, log); err != nil {
		return err
	}
	m.later(m.wg.Wait)
	if m.ps, err = newPlatforms(cfg, m.st, m.demo, modelName, m.slackUninstalled, log); err != nil {
		return err
	}
	if m.ps.discord != nil { // before the listener serves
		m.gw = replica.NewElection(m.ps.discord, m.st.etcd, m.st.rep, cfg.EtcdPrefix, log.With("adapter", "discord"))
		metrics.Gateway(m.reg, m.gw)
	}
	if err := m.buildTurns(ctx, model, registry, modelName); err != nil {
		return err
	}
	m.buildHost(ctx)
	return nil
}

// buildTurns makes the runner, the router with every
// platform, and with replicas the hand-over handler; the router follows
// the runner's events, the metrics and the console's run states
// subscribe to them.
func (m *Main) buildTurns(ctx context.Context, model agent.Model, registry *agent.Registry, modelName string) error {
	cfg, log := m.cfg, m.log
	events := &agent.EventService{Logger: log.With("component", "events")}
	var err error
	m.runner, err = agent.NewRunner(agent.Options{
		Model: model, Store: m.st.agent, Tools: registry, ModelName: modelName,
		SystemPrompt: systemPrompt, StaleRounds: cfg.StaleRounds, ReminderRole: cfg.ReminderRole, MaxRounds: cfg.MaxRounds,
		ApprovalTimeout: cfg.ApprovalTimeout, PlanApproval: cfg.PlanApproval, ContextTokens: cfg.ContextTokens, MaxOutputTokens: cfg.MaxOutput, Approvers: cfg.Approvers,
		TurnTokens: int64(cfg.TurnTokens), UserTokens: int64(cfg.UserTokens),
		Events: events, Logger: log.With("component", "agent"), Owners: owners(m.st.rep),
		Tracer: m.traces.Provider, TraceContent: m.traces.Content,
		Files: &chat.Files{Platforms: m.ps.byName, MaxBytes: int64(cfg.FileBytes), Vision: cfg.Vision, Logger: log.With("component", "files")},
	})
	if err != nil {
		return err
	}
	opts := m.st.chat // the store's parts
	opts.Runner, opts.Platforms, opts.Logger, opts.Tracer = m.runner, m.ps.byName, log.With("component", "chat"), m.traces.Provider
	opts.Hooks, opts.Approvers, opts.ThreadContext = m.boardHooks(), cfg.Approvers, cfg.ThreadContext
	if m.st.rep != nil {
		opts.Runner, opts.Fence = replica.NewRunner(m.runner, m.st.rep, log.With("component", "replica")), m.st.rep
	}
	m.router = chat.NewRouter(opts)
	m.in = m.router
	if m.st.rep != nil { // the way in: the session's queue in etcd
		m.shared = replica.New(ctx, replica.Options{Replica: m.st.rep, Store: m.st.es, Router: m.router, Runner: m.runner, Takes: m.st.takes, Logger: log.With("component", "replica")})
		m.in = m.shared
		// Once the runner, the router and the hand-over queues are at
		// rest, the lease goes: the other replicas take this one's
		// threads at once, not after whatever else the stop waits for.
		m.later(m.releaseLease)
		m.later(m.shared.Wait)
	}
	m.later(m.router.Close)
	events.Follow(m.router) // in line: it only queues, and sees every event in order
	watchers := []*agent.Subscription{events.Subscribe("metrics", 1024), events.Subscribe("console", 1024)}
	metrics.Dropped(m.reg, watchers...)
	for i, s := range []agent.Subscriber{m.metrics, web.NewRunStates(m.ps.console, m.router)} {
		m.wg.Go(func() { watchers[i].Drain(s) })
		m.later(watchers[i].Close)
	}
	m.later(m.runner.Close) // first: then the subscriptions end, then the router
	return nil
}

// boardHooks count the plan boards' and replies' deliveries, and show on
// the console the plans and failed replies of every platform.
func (m *Main) boardHooks() *chat.Hooks {
	hooks := m.metrics.BoardHooks()
	hooks.Shown = m.ps.console.Mirror
	hooks.Undelivered = func(th chat.Thread, text string, err error) {
		m.metrics.Undelivered(th.Platform)
		m.ps.console.Undelivered(th, text, err)
	}
	return hooks
}

func (m *Main) releaseLease() {
	if err := m.st.rep.Close(); err != nil {
		m.log.Warn("release the replica's lease", "err", err)
	}
}

// buildHost makes the HTTP host and mounts the console (on the inbox),
// the backup and Slack's signed endpoints on it.
func (m *Main) buildHost(ctx context.Context) {
	cfg := m.cfg
	m.host = httphost.New(httphost.Options{Token: m.token, Logger: m.log.With("component", "http"),
		// Uncompressed: the series are a few kilobytes, and a gzip
		// writer holds about a megabyte of the bot's memory per scrape.
		Metrics: promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{DisableCompression: true}),
		Ready:   m.ready.Check, ReadyDetail: func() string { return m.servers.StatusText() + replica.Status(m.st.rep) + m.gw.Status() }})
	if !cfg.WebOff {
		m.ps.console.Register(m.host, m.in)
	}
	if m.st.bolt != nil {
		m.host.Handle("GET /api/backup", httphost.BackupHandler(m.st.bolt))
	}
	if f := m.ps.slackInstall; f != nil {
		// Slack's OAuth v2 install: public pages, its state signed and
		// bound to the browser's cookie (install.Flow).
		m.host.HandlePublic("GET /slack/install", http.HandlerFunc(f.Install))
		m.host.HandlePublic("GET /slack/oauth_redirect", http.HandlerFunc(f.Redirect))
	}
	if slk := m.ps.slack; slk != nil {
		m.later(slk.Wait) // after the HTTP server stops: no more events
		if cfg.SlackAppToken == "" {
			// Signed by Slack: neither the console's guard nor its token.
			// Served once Slack has started (Main.Start).
			m.host.HandlePublic("POST /slack/events", slk.HTTPHandler(ctx))
			m.host.HandlePublic("POST /slack/interactions", slk.InteractionsHandler(ctx))
			m.host.HandlePublic("POST /slack/commands", slk.CommandsHandler(ctx))
		}
	}
}

// Start starts what build made: the platforms with the inbox, the
// listener, the sessions left running (resumed), the replica's watches
// and the housekeeping.
func (m *Main) Start(ctx context.Context) error {
	cfg, log := m.cfg, m.log
	ln, err := m.host.Listen(cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on PINPLAN_HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
	}
	if err := m.startSlack(ctx); err != nil { // before its endpoints are served: they hand events to the inbox
		ln.Close()
		return err
	}
	m.wg.Go(func() {
		if err := m.host.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	})
	m.later(func() {
		shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := m.host.Shutdown(shutCtx); err != nil {
			log.Warn("http shutdown", "err", err)
		}
	})
	m.later(m.ps.console.Close) // end the event streams first, so the shutdown does not wait on them
	m.greet(ln.Addr().String())
	if err := m.startDiscord(ctx); err != nil { // after the console is served: a gateway may take a while to open
		return err
	}
	m.ready.Set(nil)
	m.later(func() { m.ready.Set(errors.New("shutting down")) })
	n, pending, err := m.resume(ctx)
	if err != nil {
		return err
	}
	log.Info("pinplan started", "config", cfg.Describe(m.demo), "resumed", n, "replies_pending", pending, "demo", m.demo)
	m.wg.Go(func() { housekeep(ctx, cfg, m.st.bolt, m.router, m.ps.console, log) })
	return nil
}

// startSlack connects Slack with the inbox its events go to.
func (m *Main) startSlack(ctx context.Context) error {
	if slk := m.ps.slack; slk != nil {
		if err := slk.Start(ctx, m.in); err != nil {
			return err
		}
		m.ready.Add(slk.Ready)
	}
	return nil
}

// startDiscord opens Discord's gateway here, or on the replica elected
// to hold it.
func (m *Main) startDiscord(ctx context.Context) error {
	if m.gw != nil {
		if err := m.gw.Start(ctx, m.in); err != nil {
			return err
		}
		m.later(m.gw.Stop) // no new messages while sessions wind down
		m.ready.Add(m.gw.Ready)
	}
	return nil
}

// greet prints where the console is, and what to set when no model is.
func (m *Main) greet(addr string) {
	if !m.cfg.ModelConfigured && !m.demo {
		fmt.Fprintln(m.stdout, "pinplan: no model configured; set OPENAI_API_KEY or OPENAI_BASE_URL, or run with -demo")
	}
	if m.cfg.WebOff {
		fmt.Fprintf(m.stdout, "pinplan: listening on %s (PINPLAN_WEB=off: no console)\n", addr)
	} else {
		fmt.Fprintf(m.stdout, "pinplan: web console at %s\n", httphost.ConsoleURL(addr, m.token, m.tokenGenerated))
	}
}

// resume delivers the replies left undelivered and resumes the sessions
// left running, or with replicas starts the replica's part, which takes
// them. It returns the sessions resumed and the replies pending.
func (m *Main) resume(ctx context.Context) (n, pending int, err error) {
	if m.st.rep == nil {
		if pending, err = m.router.Resume(ctx); err != nil {
			m.log.Error("resume undelivered replies", "err", err)
		}
	}
	// A resumed turn may be waiting on an MCP tool (an approval card left
	// open by a crash): give the servers their first try before it looks
	// the tool up. The listener and the platforms are up already.
	mcpCtx, mcpCancel := context.WithTimeout(ctx, m.cfg.MCPStartup)
	if err := m.servers.WaitStarted(mcpCtx); err != nil {
		m.log.Warn("resuming sessions before every MCP server has started", "err", err)
	}
	mcpCancel()
	if m.st.rep != nil {
		n, err = m.startReplica(ctx)
		return n, pending, err
	}
	if n, err = m.runner.Resume(ctx); err != nil {
		m.log.Error("resume sessions", "err", err)
	}
	return n, pending, nil
}

// slackUninstalled stops the turns (running here, or waiting on any
// replica) of the Slack teams an installation served once it is
// uninstalled (DESIGN §14); the adapter drops their sends.
func (m *Main) slackUninstalled(id string, teams []string) {
	if m.runner == nil || len(teams) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	infos, err := m.st.sessions(ctx)
	if err != nil {
		m.log.Error("stop the sessions of an uninstalled Slack workspace", "installation", id, "err", err)
		return
	}
	stopped := 0
	for _, key := range turnsOf(infos, teams) {
		if m.runner.Stop(key, "the workspace's uninstall") {
			stopped++
		}
	}
	m.log.Info("Slack workspace uninstalled: its sessions stopped", "installation", id, "teams", teams, "stopped", stopped)
}

// turnsOf are the sessions of the Slack teams whose turn runs or waits:
// the ones to stop. A session with no turn is left alone: with replicas
// a stop of a session another replica holds is a request kept until
// that session is taken, which would stop its next turn, after a
// reinstall too.
func turnsOf(infos []web.Session, teams []string) []string {
	var out []string
	for _, in := range infos {
		if c := in.Checkpoint; c.State.InTurn() && slices.ContainsFunc(teams, func(team string) bool { return strings.HasPrefix(c.Key, "slack/"+team+"/") }) {
			out = append(out, c.Key)
		}
	}
	return out
}
