package main

import (
	"context"
	"log/slog"

	discordadapter "github.com/pinplan/pinplan/adapters/discord"
	slackadapter "github.com/pinplan/pinplan/adapters/slack"
	"github.com/pinplan/pinplan/adapters/web"
	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/config"
	"github.com/pinplan/pinplan/mcp"
	"github.com/pinplan/pinplan/metrics"
	"github.com/pinplan/pinplan/replica"
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
	byName  map[string]chat.Platform
}

// newPlatforms makes the console, and Slack and Discord when their
// tokens are set, each handing its events to in.
func newPlatforms(cfg *config.Config, in *intake, st stores, demo bool, modelName string, log *slog.Logger) (platforms, error) {
	ws := web.NewReadModel(st.records, st.sessions)
	console := web.New(web.Options{Store: ws, Handler: in, Usage: ws, DailyBudget: int64(cfg.UserTokens), Demo: demo, Model: modelName, Stream: cfg.Stream, FileBytes: int64(cfg.FileBytes), Logger: log.With("adapter", "web")})
	ps := platforms{console: console, byName: map[string]chat.Platform{"web": console}}
	if cfg.SlackBotToken != "" {
		ps.slack = slackadapter.New(slackadapter.Options{
			BotToken: cfg.SlackBotToken.Reveal(), AppToken: cfg.SlackAppToken.Reveal(), SigningSecret: cfg.SlackSigningSecret.Reveal(),
			APIURL: cfg.SlackAPIURL, NativePlan: cfg.SlackPlanBlocks, EditsPerMinute: float64(cfg.SlackEditsPerMin), Stream: cfg.Stream,
			Handler: in, Dedupe: st.chat.Dedupe, Sessions: ws.Listed, Logger: log.With("adapter", "slack"),
		})
		ps.byName["slack"] = ps.slack
	}
	if cfg.DiscordBotToken != "" {
		dsc, err := discordadapter.New(discordadapter.Options{Token: cfg.DiscordBotToken.Reveal(), APIURL: cfg.DiscordAPIURL,
			ThreadPerTask: cfg.DiscordThreadPerTask, ComponentsV2: cfg.DiscordComponentsV2, Stream: cfg.Stream, Handler: in, Marks: st.marks, Logger: log.With("adapter", "discord"),
			Commands: true, Guild: cfg.DiscordGuild, ApplicationID: cfg.DiscordAppID, Sessions: ws.Listed})
		if err != nil {
			return ps, err
		}
		ps.discord = dsc
		ps.byName["discord"] = dsc
	}
	return ps, nil
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
// (Main.build): it forwards to the inbox, and the replica's takes to the
// hand-over handler, once set. build sets it before the listener, the
// platforms and the replica's watches start, so every event finds it
// set; it does not change after. It stays while the adapters take their
// inbox when they are made and the router takes the platforms when it
// is: one of the two must come later.
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
