package main

import (
	"fmt"
	"log/slog"

	discordadapter "github.com/pinplan/pinplan/adapters/discord"
	slackadapter "github.com/pinplan/pinplan/adapters/slack"
	"github.com/pinplan/pinplan/adapters/slack/install"
	"github.com/pinplan/pinplan/adapters/web"
	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/config"
	"github.com/pinplan/pinplan/mcp"
	"github.com/pinplan/pinplan/metrics"
	"github.com/pinplan/pinplan/replica"
)

// inbox is every platform's way in: the router, or with replicas the
// hand-over handler. The console takes it as a web.Handler, Slack as a
// slackadapter.Handler and Discord as a chat.Inbox.
type inbox interface {
	web.Handler
	slackadapter.Handler
}

var (
	_ inbox = (*chat.Router)(nil)
	_ inbox = (*replica.Handler)(nil)
)

// startMCP makes the MCP servers' manager and starts connecting them.
func startMCP(cfg *config.Config, registry *agent.Registry, met *metrics.Metrics, getenv func(string) string, later func(func()), log *slog.Logger) (*mcp.Manager, error) {
	// The Manager adds component=mcp to its lines itself.
	servers := mcp.New(mcp.Options{Servers: mcp.FromConfig(cfg.MCP), ResultBytes: cfg.ToolResultBytes, Timeout: cfg.ToolTimeout,
		StartupTimeout: cfg.MCPStartup, Logger: log, Hooks: met.MCPHooks(), Env: getenv})
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
	// slackInstall is Slack's OAuth v2 install (/slack/install and
	// /slack/oauth_redirect), with SLACK_CLIENT_ID; nil without it.
	slackInstall *install.Flow
	byName       map[string]chat.Platform
}

// newPlatforms makes the console, and Slack and Discord when their
// tokens are set; each is given its inbox when it starts (Main.Start).
// uninstalled is told of a Slack installation deleted by app_uninstalled
// or tokens_revoked, with the teams it served here.
func newPlatforms(cfg *config.Config, st stores, demo bool, modelName string, uninstalled func(id string, teams []string), log *slog.Logger) (platforms, error) {
	ws := web.NewReadModel(st.records, st.sessions)
	console := web.New(web.Options{Store: ws, Usage: ws, DailyBudget: int64(cfg.UserTokens), Demo: demo, Model: modelName, Stream: cfg.Stream, FileBytes: int64(cfg.FileBytes), Logger: log.With("adapter", "web")})
	ps := platforms{console: console, byName: map[string]chat.Platform{"web": console}}
	installs, flow, err := slackInstalls(cfg, st, log)
	if err != nil {
		return ps, err
	}
	if cfg.Slack() {
		opts := slackadapter.Options{
			BotToken: cfg.SlackBotToken.Reveal(), AppToken: cfg.SlackAppToken.Reveal(), SigningSecret: cfg.SlackSigningSecret.Reveal(),
			APIURL: cfg.SlackAPIURL, NativePlan: cfg.SlackPlanBlocks, EditsPerMinute: float64(cfg.SlackEditsPerMin), Stream: cfg.Stream,
			Dedupe: st.chat.Dedupe, Sessions: ws.Listed, Logger: log.With("adapter", "slack"),
		}
		if installs != nil { // many workspaces (DESIGN §14)
			opts.Installations, opts.Refresh, opts.Uninstalled = installs, flow.Refresh, uninstalled
		}
		ps.slack = slackadapter.New(opts)
		ps.byName["slack"] = ps.slack
	}
	if flow != nil {
		flow.Installed = ps.slack.Installed // a reinstall starts fresh at once
		ps.slackInstall = flow
	}
	if cfg.DiscordBotToken != "" {
		dsc, err := discordadapter.New(discordadapter.Options{Token: cfg.DiscordBotToken.Reveal(), APIURL: cfg.DiscordAPIURL,
			ThreadPerTask: cfg.DiscordThreadPerTask, Forums: cfg.DiscordForums, ComponentsV2: cfg.DiscordComponentsV2, Stream: cfg.Stream, Marks: st.marks, Logger: log.With("adapter", "discord"),
			Commands: true, Guild: cfg.DiscordGuild, ApplicationID: cfg.DiscordAppID, Sessions: ws.Listed, Shards: cfg.DiscordShards,
			Identify: identifyLimiter(st, cfg.EtcdPrefix)})
		if err != nil {
			return ps, err
		}
		ps.discord = dsc
		ps.byName["discord"] = dsc
	}
	return ps, nil
}

// slackInstalls makes the installations Slack's OAuth v2 install keeps in
// the store, sealed with PINPLAN_SECRET_KEY, and the install's flow
// (DESIGN §14); nil, nil without SLACK_CLIENT_ID.
func slackInstalls(cfg *config.Config, st stores, log *slog.Logger) (*install.Installations, *install.Flow, error) {
	if cfg.SlackClientID == "" {
		return nil, nil, nil
	}
	seal, err := install.NewSealer(cfg.SecretKey.Reveal())
	if err != nil {
		return nil, nil, fmt.Errorf("PINPLAN_SECRET_KEY: %w", err)
	}
	installs := install.New(st.installs, seal)
	return installs, &install.Flow{ClientID: cfg.SlackClientID, ClientSecret: cfg.SlackClientSecret.Reveal(), RedirectURL: cfg.SlackRedirectURL,
		Scopes: slackadapter.BotScopes, APIURL: cfg.SlackAPIURL, Seal: seal, Once: st.chat.Dedupe.FirstSeen, Installations: installs,
		Logger: log.With("component", "slack-install")}, nil
}

// identifyLimiter shares Discord's identify buckets among the replicas
// on etcd (DESIGN §20); nil without etcd, where the adapter paces its
// own shards.
func identifyLimiter(st stores, prefix string) discordadapter.IdentifyLimiter {
	if st.etcd == nil {
		return nil
	}
	return replica.NewIdentifyBuckets(st.etcd, prefix)
}
