package doctor_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/doctor"
	"github.com/pinplan/pinplan/internal/etcdtest"
	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/store"
)

// Secrets of the test settings: none may appear in a report.
const (
	slackBot     = "xoxb-1-2-secretslackbot"
	slackApp     = "xapp-1-A1-2-secretslackapp"
	discordToken = "OTAwMDAwMDAwMDAwMDAwMDAx.secretdiscord.zz"
	openAIKey    = "sk-secretopenai"
	mcpToken     = "secretmcpheader"
)

var secrets = []string{"secretslackbot", "secretslackapp", "secretdiscord", "secretopenai", "secretmcpheader"}

// planTodos are the arguments of the call the fake model makes.
const planTodos = `{"todos":[{"content":"Read the settings","status":"in_progress"},{"content":"Write the report","status":"pending"}]}`

// planner answers as a model that calls tools: a todo_write call when
// asked for one with tools offered, else a word.
func planner(req *openai.ChatCompletionRequest) fakeopenai.Reply {
	last := req.Messages[len(req.Messages)-1]
	if len(req.Tools) > 0 && strings.Contains(last.Content, "todo_write") {
		return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: "todo_write", Arguments: planTodos}}}
	}
	return fakeopenai.Reply{Content: "hello"}
}

// world is the fakes a report is made against.
type world struct {
	slack   *fakeslack.Server
	discord *fakediscord.Server
	model   *fakeopenai.Server
	env     map[string]string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{slack: &fakeslack.Server{}, discord: &fakediscord.Server{Token: discordToken}, model: &fakeopenai.Server{Respond: planner, Vision: true}}
	w.discord.AddChannel("C1", 0, "G1")
	serve := func(h http.Handler) string {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	w.env = map[string]string{
		"SLACK_BOT_TOKEN": slackBot, "SLACK_APP_TOKEN": slackApp, "SLACK_API_URL": serve(w.slack) + "/api/",
		"DISCORD_BOT_TOKEN": discordToken, "DISCORD_API_URL": serve(w.discord),
		"OPENAI_API_KEY": openAIKey, "OPENAI_BASE_URL": serve(w.model) + "/v1", "OPENAI_MODEL": "test-model",
		"PINPLAN_MODEL_VISION": "true",
		"PINPLAN_DB":           filepath.Join(t.TempDir(), "pinplan.db"),
	}
	return w
}

// run makes the report of env and checks that it shows no secret.
func run(t *testing.T, env map[string]string, opts doctor.Options) (*doctor.Report, string) {
	t.Helper()
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep := doctor.Run(ctx, environ, opts)
	var out bytes.Buffer
	if err := rep.Write(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	for _, s := range secrets {
		if strings.Contains(out.String(), s) {
			t.Errorf("the report shows a secret (%s):\n%s", s, out.String())
		}
	}
	return rep, out.String()
}

// row returns the check of area and name, failing the test without one.
func row(t *testing.T, rep *doctor.Report, out, area, name string) doctor.Check {
	t.Helper()
	for _, c := range rep.Checks {
		if c.Area == area && c.Name == name {
			return c
		}
	}
	t.Fatalf("no %s %q check in the report:\n%s", area, name, out)
	return doctor.Check{}
}

// want checks a row's status and that its detail and setting say what.
func want(t *testing.T, rep *doctor.Report, out, area, name string, st doctor.Status, says ...string) {
	t.Helper()
	c := row(t, rep, out, area, name)
	if c.Status != st {
		t.Errorf("%s %s: got %s (%s), want %s\n%s", area, name, c.Status, c.Detail, st, out)
	}
	for _, s := range says {
		if !strings.Contains(c.Detail+" "+c.Setting, s) {
			t.Errorf("%s %s: got %q (setting %q), want it to say %q", area, name, c.Detail, c.Setting, s)
		}
	}
}

// mcpServer is a streamable-HTTP MCP server with one tool, which wants
// the bearer token mcpToken.
func mcpServer(t *testing.T) string {
	t.Helper()
	srv := sdk.NewServer(&sdk.Implementation{Name: "doctortest", Version: "1"}, nil)
	type in struct {
		Message string `json:"message"`
	}
	sdk.AddTool(srv, &sdk.Tool{Name: "echo", Description: "Echoes the message."},
		func(_ context.Context, _ *sdk.CallToolRequest, in in) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: in.Message}}}, nil, nil
		})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+mcpToken {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// TestAllGood: with every service answering as pinplan needs, every
// check passes, and none shows a secret.
func TestAllGood(t *testing.T) {
	w := newWorld(t)
	file := filepath.Join(t.TempDir(), "pinplan.toml")
	toml := "[mcp.echo]\nurl = \"" + mcpServer(t) + "\"\nheaders = { Authorization = \"Bearer " + mcpToken + "\" }\n"
	if err := os.WriteFile(file, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	w.env["PINPLAN_CONFIG"] = file
	rep, out := run(t, w.env, doctor.Options{})
	if n := rep.Failed(); n != 0 {
		t.Errorf("got %d failed checks, want none:\n%s", n, out)
	}
	for _, c := range rep.Checks {
		if c.Status != doctor.OK {
			t.Errorf("%s %s: got %s (%s), want ok", c.Area, c.Name, c.Status, c.Detail)
		}
	}
	want(t, rep, out, "slack", "auth.test", doctor.OK, "UBOT", "T1")
	want(t, rep, out, "slack", "scopes", doctor.OK)
	want(t, rep, out, "slack", "Socket Mode", doctor.OK)
	want(t, rep, out, "discord", "users/@me", doctor.OK, fakediscord.BotID)
	want(t, rep, out, "discord", "Message Content intent", doctor.OK, "enabled")
	want(t, rep, out, "model", "plain answer", doctor.OK, "hello")
	want(t, rep, out, "model", "streaming", doctor.OK)
	want(t, rep, out, "model", "tool call", doctor.OK, "2 items")
	want(t, rep, out, "model", "tool result", doctor.OK)
	want(t, rep, out, "model", "streamed tool call", doctor.OK)
	want(t, rep, out, "model", "usage", doctor.OK, "plain and streamed")
	want(t, rep, out, "model", "vision", doctor.OK)
	want(t, rep, out, "model", "dialect", doctor.OK, "OpenAI's shape")
	want(t, rep, out, "mcp", "echo", doctor.OK, "1 tool: echo")
	want(t, rep, out, "store", "bbolt file", doctor.OK, "does not exist yet")
	if !strings.Contains(out, "Everything checked works.") {
		t.Errorf("the report does not end with its sum:\n%s", out)
	}
	if _, err := os.Stat(w.env["PINPLAN_DB"]); err == nil {
		t.Error("doctor created the database file")
	}
}

// TestTokens: a token of the wrong shape, and the two Slack tokens given
// each for the other, fail by their keys, and nothing is asked with
// them; a Slack app without a needed scope fails, one without an
// optional scope or a Discord app without the Message Content intent
// warns.
func TestTokens(t *testing.T) {
	tests := []struct {
		name   string
		change func(w *world)
		area   string
		check  string
		status doctor.Status
		says   []string
	}{
		{"bad bot token shape", func(w *world) { w.env["SLACK_BOT_TOKEN"] = "hello-secretslackbot" }, "slack", "token shape", doctor.Failed, []string{"SLACK_BOT_TOKEN", "xoxb-"}},
		{"Bot prefix on Discord's token", func(w *world) { w.env["DISCORD_BOT_TOKEN"] = "Bot " + discordToken }, "discord", "token shape", doctor.Failed, []string{"DISCORD_BOT_TOKEN", `"Bot "`}},
		{"swapped pair", func(w *world) { w.env["SLACK_BOT_TOKEN"], w.env["SLACK_APP_TOKEN"] = slackApp, slackBot }, "slack", "token shapes", doctor.Failed, []string{"swapped", "SLACK_BOT_TOKEN, SLACK_APP_TOKEN"}},
		{"a token Slack does not know", func(w *world) {
			w.env["SLACK_BOT_TOKEN"] = "xoxb-secretslackbot"
			w.slack.Fail("auth.test", "invalid_auth")
		}, "slack", "auth.test", doctor.Failed, []string{"invalid_auth", "SLACK_BOT_TOKEN"}},
		{"a token Discord does not know", func(w *world) { w.discord.Token = "another" }, "discord", "users/@me", doctor.Failed, []string{"401", "DISCORD_BOT_TOKEN"}},
		{"without chat:write", func(w *world) { w.slack.Scopes = []string{"app_mentions:read", "channels:history"} }, "slack", "scopes", doctor.Failed, []string{"chat:write", "reinstall"}},
		{"without files:read", func(w *world) { w.slack.NoFilesRead = true }, "slack", "scopes", doctor.Warning, []string{"files:read", "attached files"}},
		{"without the Message Content intent", func(w *world) { w.discord.DenyIntents = fakediscord.IntentMessageContent }, "discord", "Message Content intent", doctor.Warning, []string{"not enabled", "Developer Portal"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			tt.change(w)
			rep, out := run(t, w.env, doctor.Options{})
			want(t, rep, out, tt.area, tt.check, tt.status, tt.says...)
			if failed := rep.Failed() > 0; failed != (tt.status == doctor.Failed) {
				t.Errorf("got %d failed checks, want failed %v:\n%s", rep.Failed(), tt.status == doctor.Failed, out)
			}
		})
	}
	t.Run("nothing asked with a bad shape", func(t *testing.T) {
		w := newWorld(t)
		w.env["SLACK_BOT_TOKEN"], w.env["SLACK_APP_TOKEN"] = slackApp, slackBot
		rep, out := run(t, w.env, doctor.Options{})
		want(t, rep, out, "slack", "auth.test", doctor.Skipped)
		want(t, rep, out, "slack", "Socket Mode", doctor.Skipped)
		if calls := len(w.slack.Calls("auth.test")) + len(w.slack.Calls("apps.connections.open")); calls != 0 {
			t.Errorf("got %d calls to Slack with swapped tokens, want none", calls)
		}
	})
}

// TestModels: a server that cannot call tools fails the tool call with
// the settings to try; one that refuses stream_options (Azure) streams
// once pinplan sends none, and says so; a model without vision fails
// with PINPLAN_MODEL_VISION on.
func TestModels(t *testing.T) {
	t.Run("no tool calls", func(t *testing.T) {
		w := newWorld(t)
		w.model.Dialect, w.model.NoTools = fakeopenai.VLLM, true
		rep, out := run(t, w.env, doctor.Options{})
		want(t, rep, out, "model", "plain answer", doctor.OK)
		want(t, rep, out, "model", "tool call", doctor.Failed, "OPENAI_MODEL", "--enable-auto-tool-choice", "llama-server --jinja")
		want(t, rep, out, "model", "dialect", doctor.OK, "vLLM")
		if rep.Failed() == 0 {
			t.Error("a model without tool calls failed nothing")
		}
	})
	t.Run("answers in text", func(t *testing.T) {
		w := newWorld(t)
		w.model.Respond = func(*openai.ChatCompletionRequest) fakeopenai.Reply {
			return fakeopenai.Reply{Content: "Sure, here is a plan: read, then write."}
		}
		rep, out := run(t, w.env, doctor.Options{})
		want(t, rep, out, "model", "tool call", doctor.Failed, "answered in text", "OPENAI_MODEL")
	})
	t.Run("refuses stream_options", func(t *testing.T) {
		w := newWorld(t)
		w.model.Dialect = fakeopenai.Azure
		rep, out := run(t, w.env, doctor.Options{})
		want(t, rep, out, "model", "streaming", doctor.OK)
		want(t, rep, out, "model", "streamed tool call", doctor.OK)
		want(t, rep, out, "model", "dialect", doctor.OK, "Azure", "refused stream_options")
		if rep.Failed() != 0 {
			t.Errorf("got %d failed checks, want none:\n%s", rep.Failed(), out)
		}
		w.env["PINPLAN_STREAM"] = "true"
		rep, out = run(t, w.env, doctor.Options{})
		want(t, rep, out, "model", "usage", doctor.Warning, "streamed answers carry no usage", "PINPLAN_STREAM")
	})
	t.Run("needs its reasoning back", func(t *testing.T) {
		w := newWorld(t)
		w.model.Dialect = fakeopenai.DeepSeek
		rep, out := run(t, w.env, doctor.Options{})
		want(t, rep, out, "model", "tool result", doctor.OK)
	})
	t.Run("no vision", func(t *testing.T) {
		w := newWorld(t)
		w.model.Vision = false
		rep, out := run(t, w.env, doctor.Options{})
		want(t, rep, out, "model", "vision", doctor.Failed, "PINPLAN_MODEL_VISION")
	})
	t.Run("wrong key", func(t *testing.T) {
		w := newWorld(t)
		w.model.Respond = nil
		w.model.Fail(fakeopenai.Fault{Status: http.StatusUnauthorized})
		rep, out := run(t, w.env, doctor.Options{})
		want(t, rep, out, "model", "plain answer", doctor.Failed, "OPENAI_API_KEY")
	})
}

// TestStores: the bbolt file opens read-only; a running bot's lock is a
// warning that says so; etcd reachable gives its version and the
// prefix, and an unreachable one fails by PINPLAN_ETCD_ENDPOINTS.
func TestStores(t *testing.T) {
	t.Run("bbolt file", func(t *testing.T) {
		w := newWorld(t)
		db, err := store.Open(w.env["PINPLAN_DB"], store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		rep, out := run(t, w.env, doctor.Options{})
		want(t, rep, out, "store", "bbolt file", doctor.OK, "opens")
	})
	t.Run("bbolt file of a running bot", func(t *testing.T) {
		w := newWorld(t)
		db, err := store.Open(w.env["PINPLAN_DB"], store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		rep, out := run(t, w.env, doctor.Options{})
		want(t, rep, out, "store", "bbolt file", doctor.Warning, "locked by a running pinplan", "PINPLAN_DB")
	})
	t.Run("etcd", func(t *testing.T) {
		e := etcdtest.Start(t)
		w := newWorld(t)
		w.env["PINPLAN_ETCD_ENDPOINTS"] = e.Endpoint
		w.env["PINPLAN_ETCD_PREFIX"] = "/doctor/"
		rep, out := run(t, w.env, doctor.Options{})
		want(t, rep, out, "store", "etcd", doctor.OK, "reachable", "etcd 3.")
		want(t, rep, out, "store", "etcd prefix", doctor.OK, "/doctor/ is empty")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := e.Client(t).Put(ctx, "/doctor/other", "x"); err != nil {
			t.Fatal(err)
		}
		rep, out = run(t, w.env, doctor.Options{})
		want(t, rep, out, "store", "etcd prefix", doctor.Failed, "not pinplan's", "PINPLAN_ETCD_PREFIX")
	})
	t.Run("unreachable etcd", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens there now
		w := newWorld(t)
		w.env["PINPLAN_ETCD_ENDPOINTS"] = "http://" + addr
		rep, out := run(t, w.env, doctor.Options{EtcdTimeout: time.Second})
		want(t, rep, out, "store", "etcd", doctor.Failed, "does not answer", "PINPLAN_ETCD_ENDPOINTS")
	})
}

// TestMCPServerThatDoesNotStart: a configured server whose command is
// not there fails by its table in PINPLAN_CONFIG.
func TestMCPServerThatDoesNotStart(t *testing.T) {
	w := newWorld(t)
	file := filepath.Join(t.TempDir(), "pinplan.toml")
	if err := os.WriteFile(file, []byte("[mcp.gone]\ncommand = [\""+filepath.Join(t.TempDir(), "no-such-server")+"\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.env["PINPLAN_CONFIG"] = file
	rep, out := run(t, w.env, doctor.Options{Timeout: 5 * time.Second})
	want(t, rep, out, "mcp", "gone", doctor.Failed, "[mcp.gone] in PINPLAN_CONFIG")
}

// TestSlackOAuthApp: with the OAuth app of many workspaces, the doctor
// checks its client id and secret at oauth.v2.access with a code Slack
// never issued: right ones pass, a wrong secret or id is named.
func TestSlackOAuthApp(t *testing.T) {
	w := newWorld(t)
	w.slack.App = &fakeslack.App{ClientID: "1111.2222", ClientSecret: "app-client-secret", RedirectURL: "https://pinplan.test/slack/oauth_redirect"}
	delete(w.env, "SLACK_BOT_TOKEN")
	w.env["SLACK_CLIENT_ID"], w.env["SLACK_CLIENT_SECRET"] = "1111.2222", "app-client-secret"
	w.env["SLACK_REDIRECT_URL"], w.env["PINPLAN_SECRET_KEY"] = "https://pinplan.test/slack/oauth_redirect", "0123456789abcdef0123456789abcdef-doctor"
	rep, out := run(t, w.env, doctor.Options{})
	want(t, rep, out, "slack", "OAuth app", doctor.OK, "SLACK_CLIENT_ID", "/slack/install")
	if strings.Contains(out, "app-client-secret") || strings.Contains(out, "0123456789abcdef0123456789abcdef-doctor") {
		t.Errorf("the report shows the client secret or the secret key:\n%s", out)
	}

	w.env["SLACK_CLIENT_SECRET"] = "another-secret"
	rep, out = run(t, w.env, doctor.Options{})
	want(t, rep, out, "slack", "OAuth app", doctor.Failed, "SLACK_CLIENT_SECRET")
	w.env["SLACK_CLIENT_ID"], w.env["SLACK_CLIENT_SECRET"] = "9999.0000", "app-client-secret"
	rep, out = run(t, w.env, doctor.Options{})
	want(t, rep, out, "slack", "OAuth app", doctor.Failed, "SLACK_CLIENT_ID")
}
