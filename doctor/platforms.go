package doctor

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/pinplan/pinplan/config"
)

// manifestScopes are the bot scopes slack-app-manifest.yaml asks for
// (TestManifestScopes keeps them equal), with what pinplan loses
// without each; needed ones fail the check.
var manifestScopes = []struct {
	name   string
	needed bool
	lost   string
}{
	{"app_mentions:read", true, "mentions of the bot are not delivered"},
	{"channels:history", true, "follow-ups in threads of public channels are not heard"},
	{"groups:history", false, "follow-ups in threads of private channels are not heard"},
	{"im:history", false, "direct messages are not heard"},
	{"mpim:history", false, "group direct messages are not heard"},
	{"chat:write", true, "the bot cannot post its plan or answers"},
	{"assistant:write", false, "no agent session status or Slack Stop button; a reaction shows the bot working instead"},
	{"pins:write", false, "the plan message is not pinned"},
	{"reactions:write", false, "no working indicator where agent sessions are off"},
	{"users:read", false, "people are named by id, not display name"},
	{"files:read", false, "attached files are not given to the model"},
	{"commands", false, "the /pinplan command does not work"},
}

// slackCall calls a Slack Web API method with token and returns the
// decoded answer and the token's scopes (X-OAuth-Scopes).
func (d *doctor) slackCall(ctx context.Context, method, token string) (map[string]any, string, error) {
	return d.slackForm(ctx, method, token, nil)
}

// slackForm is slackCall with form values; token "" sends none.
func (d *doctor) slackForm(ctx context.Context, method, token string, form url.Values) (map[string]any, string, error) {
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.cfg.SlackAPIURL+method, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := d.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("no answer from Slack at %s: %w", config.RedactURL(d.cfg.SlackAPIURL), err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out); err != nil {
		return nil, "", fmt.Errorf("the answer to %s (HTTP %d) is not JSON: is SLACK_API_URL Slack's Web API (https://slack.com/api/)?", method, resp.StatusCode)
	}
	return out, resp.Header.Get("X-OAuth-Scopes"), nil
}

// slackRefusal says what a Slack error code on a token means.
func slackRefusal(code, key string) string {
	switch code {
	case "invalid_auth", "not_authed":
		return fmt.Sprintf("Slack does not know this token (%s): copy %s again from the app's settings", code, key)
	case "token_revoked", "token_expired", "account_inactive":
		return fmt.Sprintf("the token no longer works (%s): reinstall the app to the workspace and copy the new token into %s", code, key)
	case "not_allowed_token_type":
		return fmt.Sprintf("the token is of the wrong kind for this (%s): check what %s holds", code, key)
	}
	return "Slack refused the call: " + code
}

// slack checks the bot token with auth.test, its scopes against the
// manifest's, and the app-level token with apps.connections.open (which
// hands out a Socket Mode URL and connects nothing).
func (d *doctor) slack(ctx context.Context) {
	d.tokenRows("slack")
	switch {
	case d.cfg.SlackClientID != "":
		d.slackApp(ctx)
	case d.cfg.SlackBotToken == "":
		d.r.add("slack", "tokens", Skipped, "SLACK_BOT_TOKEN", "not set: Slack does not run")
		return
	case d.bad["SLACK_BOT_TOKEN"]:
		d.r.add("slack", "auth.test", Skipped, "SLACK_BOT_TOKEN", "not asked: fix the token's shape first")
	default:
		d.slackBot(ctx)
	}
	switch {
	case d.cfg.SlackAppToken == "":
		if d.cfg.SlackSigningSecret != "" {
			d.r.add("slack", "Events API", OK, "SLACK_SIGNING_SECRET", "set; only Slack's requests can tell whether it is right")
		}
	case d.bad["SLACK_APP_TOKEN"]:
		d.r.add("slack", "Socket Mode", Skipped, "SLACK_APP_TOKEN", "not asked: fix the token's shape first")
	default:
		out, _, err := d.slackCall(ctx, "apps.connections.open", d.cfg.SlackAppToken.Reveal())
		switch {
		case err != nil:
			d.r.add("slack", "Socket Mode", Failed, "SLACK_API_URL", err.Error())
		case out["ok"] != true:
			code, _ := out["error"].(string)
			d.r.add("slack", "Socket Mode", Failed, "SLACK_APP_TOKEN", slackRefusal(code, "SLACK_APP_TOKEN")+" (Basic Information -> App-Level Tokens, scope connections:write; Socket Mode on)")
		default:
			d.r.add("slack", "Socket Mode", OK, "SLACK_APP_TOKEN", "apps.connections.open gives a connection URL")
		}
	}
}

// slackApp checks the OAuth app's credentials (many workspaces, DESIGN
// §14): oauth.v2.access with a code Slack never issued answers
// invalid_code when the client id and secret are right, and names the
// one that is wrong otherwise. No installation is made or read.
func (d *doctor) slackApp(ctx context.Context) {
	out, _, err := d.slackForm(ctx, "oauth.v2.access", "", url.Values{"client_id": {d.cfg.SlackClientID},
		"client_secret": {d.cfg.SlackClientSecret.Reveal()}, "code": {"pinplan-doctor-check"}, "redirect_uri": {d.cfg.SlackRedirectURL}})
	code, _ := out["error"].(string)
	switch {
	case err != nil:
		d.r.add("slack", "OAuth app", Failed, "SLACK_API_URL", err.Error())
	case code == "invalid_code":
		d.r.add("slack", "OAuth app", OK, "SLACK_CLIENT_ID", "Slack takes the client id and secret; install workspaces at /slack/install (sends them back to "+d.cfg.SlackRedirectURL+")")
	case code == "invalid_client_id":
		d.r.add("slack", "OAuth app", Failed, "SLACK_CLIENT_ID", "Slack knows no app with this client id (Basic Information -> App Credentials)")
	case code == "bad_client_secret":
		d.r.add("slack", "OAuth app", Failed, "SLACK_CLIENT_SECRET", "the client secret is not this app's (Basic Information -> App Credentials)")
	case code == "bad_redirect_uri":
		d.r.add("slack", "OAuth app", Failed, "SLACK_REDIRECT_URL", "Slack does not list this redirect URL for the app (OAuth & Permissions -> Redirect URLs)")
	default:
		d.r.add("slack", "OAuth app", Warning, "SLACK_CLIENT_ID", "Slack answered "+cmp.Or(code, "ok")+" to a code it never issued; the credentials were not confirmed")
	}
}

func (d *doctor) slackBot(ctx context.Context) {
	out, scopes, err := d.slackCall(ctx, "auth.test", d.cfg.SlackBotToken.Reveal())
	if err != nil {
		d.r.add("slack", "auth.test", Failed, "SLACK_API_URL", err.Error())
		return
	}
	if out["ok"] != true {
		code, _ := out["error"].(string)
		d.r.add("slack", "auth.test", Failed, "SLACK_BOT_TOKEN", slackRefusal(code, "SLACK_BOT_TOKEN")+" (OAuth & Permissions -> Bot User OAuth Token)")
		return
	}
	str := func(k string) string { s, _ := out[k].(string); return s }
	team := str("team_id")
	if str("team") != "" {
		team = str("team") + " (" + team + ")"
	}
	d.r.add("slack", "auth.test", OK, "SLACK_BOT_TOKEN", fmt.Sprintf("bot %s (%s) in team %s", str("user"), str("user_id"), team))
	if scopes == "" {
		d.r.add("slack", "scopes", Warning, "", "Slack did not say the token's scopes (no X-OAuth-Scopes header), so they were not checked")
		return
	}
	granted := strings.Split(strings.ReplaceAll(scopes, " ", ""), ",")
	var missingNeeded, missing, lost []string
	for _, s := range manifestScopes {
		if slices.Contains(granted, s.name) {
			continue
		}
		lost = append(lost, s.name+": "+s.lost)
		if s.needed {
			missingNeeded = append(missingNeeded, s.name)
		} else {
			missing = append(missing, s.name)
		}
	}
	const fix = "the app's scopes (slack-app-manifest.yaml), then reinstall the app"
	switch {
	case len(missingNeeded) > 0:
		d.r.add("slack", "scopes", Failed, fix, "missing "+strings.Join(append(missingNeeded, missing...), ", ")+"; "+strings.Join(lost, "; "))
	case len(missing) > 0:
		d.r.add("slack", "scopes", Warning, fix, "missing "+strings.Join(missing, ", ")+"; "+strings.Join(lost, "; "))
	default:
		d.r.add("slack", "scopes", OK, "", fmt.Sprintf("all %d that slack-app-manifest.yaml asks for", len(manifestScopes)))
	}
}

// Discord's application flags for the Message Content intent (Application
// resource, application flags): GATEWAY_MESSAGE_CONTENT for an app in 100
// or more servers, _LIMITED for one in fewer, set by the toggle on the
// Developer Portal's Bot page.
const (
	appFlagMessageContent        = 1 << 18
	appFlagMessageContentLimited = 1 << 19
)

// discordGet calls Discord's REST API (v9, as discordgo does) with the
// bot token.
func (d *doctor) discordGet(ctx context.Context, path string, v any) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.cfg.DiscordAPIURL+"/api/v9/"+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bot "+d.cfg.DiscordBotToken.Reveal())
	resp, err := d.opts.HTTPClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("no answer from Discord at %s: %w", config.RedactURL(d.cfg.DiscordAPIURL), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v); err != nil {
		return resp.StatusCode, fmt.Errorf("the answer to GET /%s is not JSON: is DISCORD_API_URL Discord's (https://discord.com)?", path)
	}
	return resp.StatusCode, nil
}

// discord checks the bot token with GET /users/@me and the Message
// Content intent with the application's flags.
func (d *doctor) discord(ctx context.Context) {
	d.tokenRows("discord")
	switch {
	case d.cfg.DiscordBotToken == "":
		d.r.add("discord", "token", Skipped, "DISCORD_BOT_TOKEN", "not set: Discord does not run")
		return
	case d.bad["DISCORD_BOT_TOKEN"]:
		d.r.add("discord", "users/@me", Skipped, "DISCORD_BOT_TOKEN", "not asked: fix the token's shape first")
		return
	}
	var me struct {
		ID       string `json:"id"`
		Username string `json:"username"`
		Bot      bool   `json:"bot"`
	}
	status, err := d.discordGet(ctx, "users/@me", &me)
	switch {
	case err != nil:
		d.r.add("discord", "users/@me", Failed, "DISCORD_API_URL", err.Error())
		return
	case status == http.StatusUnauthorized:
		d.r.add("discord", "users/@me", Failed, "DISCORD_BOT_TOKEN", "Discord does not know this token (401): reset it (Developer Portal -> Bot -> Reset Token) and copy it whole")
		return
	case status != http.StatusOK:
		d.r.add("discord", "users/@me", Failed, "DISCORD_BOT_TOKEN", fmt.Sprintf("Discord answered HTTP %d", status))
		return
	case !me.Bot:
		d.r.add("discord", "users/@me", Failed, "DISCORD_BOT_TOKEN", fmt.Sprintf("the token is %s's, a user's, not a bot's: give the bot's (Developer Portal -> Bot -> Reset Token)", me.Username))
		return
	}
	d.r.add("discord", "users/@me", OK, "DISCORD_BOT_TOKEN", fmt.Sprintf("bot %s (%s)", me.Username, me.ID))
	var app struct {
		Flags  int `json:"flags"`
		Guilds int `json:"approximate_guild_count"`
	}
	status, err = d.discordGet(ctx, "applications/@me", &app)
	if err != nil || status != http.StatusOK {
		if err == nil {
			err = fmt.Errorf("HTTP %d", status)
		}
		d.r.add("discord", "Message Content intent", Warning, "", "not checked: GET /applications/@me: "+err.Error())
		return
	}
	if app.Flags&(appFlagMessageContent|appFlagMessageContentLimited) == 0 {
		d.r.add("discord", "Message Content intent", Warning, "Developer Portal -> Bot -> Message Content Intent",
			"not enabled: pinplan answers mentions, DMs and /pinplan, but follow-ups in a thread without a mention are not heard")
	} else {
		d.r.add("discord", "Message Content intent", OK, "", "enabled")
	}
	if app.Guilds == 0 {
		d.r.add("discord", "servers", Warning, "", "the bot is in no server yet: `pinplan invite` prints the link that adds it")
	}
}
