package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDefaults(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.DB != "./data/pinplan.db" || c.HTTPAddr != "127.0.0.1:8080" || c.StaleRounds != 3 ||
		c.ReminderRole != "system" || c.MaxRounds != 25 || c.SlackAPIURL != "https://slack.com/api/" ||
		c.DiscordAPIURL != "https://discord.com" || c.OpenAIBaseURL != "https://api.openai.com/v1" || c.ModelConfigured {
		t.Errorf("defaults: %+v", c)
	}
	if c.SlackBotToken != "" || c.DiscordBotToken != "" {
		t.Errorf("chat tokens set by default: slack %q, discord %q", c.SlackBotToken, c.DiscordBotToken)
	}
}

func TestErrorsNameTheKey(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		key  string
	}{
		{"stale", map[string]string{"PINPLAN_STALE_ROUNDS": "zero"}, "PINPLAN_STALE_ROUNDS"},
		{"role", map[string]string{"PINPLAN_REMINDER_ROLE": "assistant"}, "PINPLAN_REMINDER_ROLE"},
		{"rounds", map[string]string{"PINPLAN_MAX_ROUNDS": "0"}, "PINPLAN_MAX_ROUNDS"},
		{"url", map[string]string{"OPENAI_BASE_URL": "localhost:11434"}, "OPENAI_BASE_URL"},
		{"bool", map[string]string{"PINPLAN_DISCORD_THREAD_PER_TASK": "yes please"}, "PINPLAN_DISCORD_THREAD_PER_TASK"},
		{"addr", map[string]string{"PINPLAN_HTTP_ADDR": "0.0.0.0:8080"}, "PINPLAN_WEB_TOKEN"},
		{"slack half", map[string]string{"SLACK_BOT_TOKEN": "xoxb-1"}, "SLACK_APP_TOKEN"},
		{"slack swapped", map[string]string{"SLACK_BOT_TOKEN": "xapp-1-A1-2-abc", "SLACK_APP_TOKEN": "xoxb-1-2-abc"}, "swapped"},
		{"slack app token", map[string]string{"SLACK_BOT_TOKEN": "xoxb-1-2-abc", "SLACK_APP_TOKEN": "xoxb-1-2-abc"}, "xapp-"},
		{"timeout", map[string]string{"PINPLAN_MODEL_TIMEOUT": "-1s"}, "PINPLAN_MODEL_TIMEOUT"},
		{"web", map[string]string{"PINPLAN_WEB": "disabled"}, "PINPLAN_WEB"},
		{"oauth key", oauthWithout("PINPLAN_SECRET_KEY"), "PINPLAN_SECRET_KEY"},
		{"oauth short key", with(oauthWithout(""), "PINPLAN_SECRET_KEY", "too-short"), "PINPLAN_SECRET_KEY"},
		{"oauth redirect", oauthWithout("SLACK_REDIRECT_URL"), "SLACK_REDIRECT_URL"},
		{"oauth secret", oauthWithout("SLACK_CLIENT_SECRET"), "SLACK_CLIENT_SECRET"},
		{"oauth id", oauthWithout("SLACK_CLIENT_ID"), "SLACK_CLIENT_ID"},
		{"oauth events", oauthWithout("SLACK_APP_TOKEN"), "SLACK_APP_TOKEN"},
		{"oauth and a token", with(oauthWithout(""), "SLACK_BOT_TOKEN", "xoxb-1-2-abc"), "set one"},
		{"forums", map[string]string{"PINPLAN_DISCORD_FORUMS": "1, two words"}, "PINPLAN_DISCORD_FORUMS"},
		{"shards", map[string]string{"PINPLAN_DISCORD_SHARDS": "-1"}, "PINPLAN_DISCORD_SHARDS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(env(tt.env))
			if err == nil || !strings.Contains(err.Error(), tt.key) {
				t.Errorf("got %v, want an error naming %s", err, tt.key)
			}
		})
	}
}

func TestNonLoopbackWithToken(t *testing.T) {
	c, err := Load(env(map[string]string{"PINPLAN_HTTP_ADDR": "0.0.0.0:8080", "PINPLAN_WEB_TOKEN": "s3cret-token"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != "0.0.0.0:8080" {
		t.Errorf("addr = %s", c.HTTPAddr)
	}
}

func TestFileAndEnvPrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pinplan.toml")
	os.WriteFile(path, []byte("pinplan_db = \"/tmp/from-file.db\"\npinplan_stale_rounds = 5\nopenai_model = \"file-model\"\n"), 0o600)
	c, err := Load(env(map[string]string{"PINPLAN_CONFIG": path, "OPENAI_MODEL": "env-model"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.DB != "/tmp/from-file.db" || c.StaleRounds != 5 || c.OpenAIModel != "env-model" {
		t.Errorf("got db=%s stale=%d model=%s", c.DB, c.StaleRounds, c.OpenAIModel)
	}
	os.WriteFile(path, []byte("pinplan_bogus = 1\n"), 0o600)
	if _, err := Load(env(map[string]string{"PINPLAN_CONFIG": path})); err == nil || !strings.Contains(err.Error(), "pinplan_bogus") {
		t.Errorf("unknown key: got %v", err)
	}
}

func TestSecretsNeverPrinted(t *testing.T) {
	const tok = "xoxb-very-secret-value"
	c, err := Load(env(map[string]string{"SLACK_BOT_TOKEN": tok, "SLACK_APP_TOKEN": "xapp-another-secret", "OPENAI_API_KEY": "sk-abcdef123456",
		"PINPLAN_WEB_TOKEN": "web-token-secret", "DISCORD_BOT_TOKEN": "discord-secret-value", "SLACK_SIGNING_SECRET": "signing-secret-value"}))
	if err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(c)
	for _, out := range []string{c.String(), fmt.Sprintf("%v", c), fmt.Sprintf("%+v", *c), fmt.Sprintf("%#v", *c), string(j)} {
		for _, s := range c.Secrets() {
			if strings.Contains(out, s) {
				t.Errorf("secret printed in %q", out)
			}
		}
	}
	if got := c.Redact("auth failed for " + tok); strings.Contains(got, tok) {
		t.Errorf("Redact left the token: %s", got)
	}
	if len(c.Secrets()) != 6 {
		t.Errorf("Secrets() has %d values, want the 6 set", len(c.Secrets()))
	}
	if c.SlackBotToken.Reveal() != tok {
		t.Error("Reveal lost the value")
	}
}

func TestToolSettings(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.ToolResultBytes != 16384 || c.ToolTimeout != 120*time.Second || c.ApprovalTimeout != 30*time.Minute ||
		c.ThreadContext != 30 || c.Approvers != nil || c.MCP != nil {
		t.Errorf("defaults: bytes=%d timeout=%s approval=%s context=%d approvers=%q mcp=%v",
			c.ToolResultBytes, c.ToolTimeout, c.ApprovalTimeout, c.ThreadContext, c.Approvers, c.MCP)
	}
	c, err = Load(env(map[string]string{
		"PINPLAN_TOOL_RESULT_BYTES": "4096", "PINPLAN_TOOL_TIMEOUT": "5s", "PINPLAN_APPROVERS": " U024BE7LH, 80351110224678912 ,U024BE7LH",
		"PINPLAN_APPROVAL_TIMEOUT": "10m", "PINPLAN_THREAD_CONTEXT": "0",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.ToolResultBytes != 4096 || c.ToolTimeout != 5*time.Second || c.ApprovalTimeout != 10*time.Minute || c.ThreadContext != 0 ||
		!slices.Equal(c.Approvers, []string{"U024BE7LH", "80351110224678912"}) {
		t.Errorf("got bytes=%d timeout=%s approval=%s context=%d approvers=%q", c.ToolResultBytes, c.ToolTimeout, c.ApprovalTimeout, c.ThreadContext, c.Approvers)
	}

	path := writeFile(t, "pinplan_approvers = [\"U1\", \"U2\"]\npinplan_tool_timeout = \"90s\"\n")
	c, err = Load(env(map[string]string{"PINPLAN_CONFIG": path}))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Approvers, []string{"U1", "U2"}) || c.ToolTimeout != 90*time.Second {
		t.Errorf("from file: approvers=%q timeout=%s, want [U1 U2] 1m30s", c.Approvers, c.ToolTimeout)
	}
}

func TestToolSettingErrorsNameTheKey(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		key  string
	}{
		{"bytes word", map[string]string{"PINPLAN_TOOL_RESULT_BYTES": "lots"}, "PINPLAN_TOOL_RESULT_BYTES"},
		{"bytes small", map[string]string{"PINPLAN_TOOL_RESULT_BYTES": "10"}, "PINPLAN_TOOL_RESULT_BYTES"},
		{"tool timeout", map[string]string{"PINPLAN_TOOL_TIMEOUT": "0s"}, "PINPLAN_TOOL_TIMEOUT"},
		{"tool timeout unit", map[string]string{"PINPLAN_TOOL_TIMEOUT": "120"}, "PINPLAN_TOOL_TIMEOUT"},
		{"approval timeout", map[string]string{"PINPLAN_APPROVAL_TIMEOUT": "soon"}, "PINPLAN_APPROVAL_TIMEOUT"},
		{"approvers empty item", map[string]string{"PINPLAN_APPROVERS": "U1,,U2"}, "PINPLAN_APPROVERS"},
		{"approvers space", map[string]string{"PINPLAN_APPROVERS": "U1 U2"}, "PINPLAN_APPROVERS"},
		{"context negative", map[string]string{"PINPLAN_THREAD_CONTEXT": "-1"}, "PINPLAN_THREAD_CONTEXT"},
		{"context huge", map[string]string{"PINPLAN_THREAD_CONTEXT": "5000"}, "PINPLAN_THREAD_CONTEXT"},
		{"budget small", map[string]string{"PINPLAN_CONTEXT_TOKENS": "100"}, "PINPLAN_CONTEXT_TOKENS"},
		{"budget word", map[string]string{"PINPLAN_CONTEXT_TOKENS": "lots"}, "PINPLAN_CONTEXT_TOKENS"},
		{"file bytes tiny", map[string]string{"PINPLAN_FILE_BYTES": "10"}, "PINPLAN_FILE_BYTES"},
		{"retention word", map[string]string{"PINPLAN_RETENTION": "forever"}, "PINPLAN_RETENTION"},
		{"retention negative", map[string]string{"PINPLAN_RETENTION": "-1h"}, "PINPLAN_RETENTION"},
		{"retention tiny", map[string]string{"PINPLAN_RETENTION": "5s"}, "PINPLAN_RETENTION"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(env(tt.env))
			if err == nil || !strings.Contains(err.Error(), tt.key) {
				t.Errorf("got %v, want an error naming %s", err, tt.key)
			}
		})
	}
}

func writeFile(t testing.TB, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pinplan.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const mcpExample = `
[mcp.fs]
command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"]
env = { LOG_LEVEL = "warn", GITHUB_TOKEN = "${GH_TOKEN}" }
policy = "ask"
tools = { read_text_file = "allow", move_file = "deny" }

[mcp.tracker]
url = "https://mcp.example.com/mcp"
headers = { Authorization = "Bearer ${TRACKER_TOKEN}", X-Team = "core" }
`

func TestMCPServers(t *testing.T) {
	const tracker, gh = "trk-0123456789abcdef", "ghp_secretsecret"
	c, err := Load(env(map[string]string{"PINPLAN_CONFIG": writeFile(t, mcpExample), "TRACKER_TOKEN": tracker, "GH_TOKEN": gh}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.MCP) != 2 {
		t.Fatalf("got %d servers, want 2", len(c.MCP))
	}
	fs, tr := c.MCP[0], c.MCP[1]
	if fs.Name != "fs" || !slices.Equal(fs.Command, []string{"npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"}) ||
		fs.URL != "" || fs.Policy != "ask" || fs.Env["LOG_LEVEL"] != "warn" || fs.Env["GITHUB_TOKEN"].Reveal() != gh ||
		fs.Tools["read_text_file"] != "allow" || fs.Tools["move_file"] != "deny" || len(fs.Tools) != 2 || fs.Headers != nil {
		t.Errorf("fs: got %+v", fs)
	}
	if tr.Name != "tracker" || tr.URL != "https://mcp.example.com/mcp" || tr.Command != nil || tr.Policy != "" ||
		tr.Headers["Authorization"].Reveal() != "Bearer "+tracker || tr.Headers["X-Team"].Reveal() != "core" || tr.Env != nil {
		t.Errorf("tracker: got %+v", tr)
	}
	for _, want := range []string{tracker, "Bearer " + tracker, gh} {
		if !slices.Contains(c.Secrets(), want) {
			t.Errorf("Secrets() lacks %q", want)
		}
		if got := c.Redact("401 for " + want); strings.Contains(got, want) {
			t.Errorf("Redact left %q: %s", want, got)
		}
	}
	j, _ := json.Marshal(c)
	for _, out := range []string{c.String(), fmt.Sprintf("%v", c), fmt.Sprintf("%+v", *c), fmt.Sprintf("%#v", *c), string(j)} {
		for _, s := range []string{tracker, gh} {
			if strings.Contains(out, s) {
				t.Errorf("secret %q printed in %q", s, out)
			}
		}
	}
	if !strings.Contains(c.String(), "mcp=fs,tracker") {
		t.Errorf("String() = %q, want it to list mcp=fs,tracker", c.String())
	}
}

func TestMCPErrorsNameTheKey(t *testing.T) {
	tests := []struct {
		name string
		file string
		want string
	}{
		{"unknown key", "[mcp.fs]\ncomand = [\"x\"]\n", "PINPLAN_CONFIG: mcp.fs.comand: unknown key"},
		{"bad name", "[mcp.Files]\ncommand = [\"x\"]\n", "mcp.Files: a server name must match"},
		{"long name", "[mcp.abcdefghijklmnopqrstu]\ncommand = [\"x\"]\n", "mcp.abcdefghijklmnopqrstu:"},
		{"neither", "[mcp.fs]\npolicy = \"ask\"\n", "mcp.fs: needs command"},
		{"both", "[mcp.fs]\ncommand = [\"x\"]\nurl = \"http://127.0.0.1:1/mcp\"\n", "mcp.fs.url: cannot be set with command"},
		{"command string", "[mcp.fs]\ncommand = \"npx server\"\n", "mcp.fs.command: must be a non-empty array of strings"},
		{"command empty", "[mcp.fs]\ncommand = []\n", "mcp.fs.command:"},
		{"command number", "[mcp.fs]\ncommand = [\"x\", 1]\n", "mcp.fs.command:"},
		{"url scheme", "[mcp.t]\nurl = \"ftp://example.com\"\n", "mcp.t.url: must be an http or https URL"},
		{"policy", "[mcp.fs]\ncommand = [\"x\"]\npolicy = \"maybe\"\n", `mcp.fs.policy: must be one of allow, ask, deny, got "maybe"`},
		{"tool policy", "[mcp.fs]\ncommand = [\"x\"]\ntools = { write_file = \"yes\" }\n", "mcp.fs.tools.write_file: must be one of"},
		{"tools not table", "[mcp.fs]\ncommand = [\"x\"]\ntools = [\"a\"]\n", "mcp.fs.tools: must be a table"},
		{"env on http", "[mcp.t]\nurl = \"http://127.0.0.1:1/mcp\"\nenv = { A = \"b\" }\n", "mcp.t.env: is for command servers"},
		{"headers on stdio", "[mcp.fs]\ncommand = [\"x\"]\nheaders = { A = \"b\" }\n", "mcp.fs.headers: is for url servers"},
		{"env number", "[mcp.fs]\ncommand = [\"x\"]\nenv = { A = 1 }\n", "mcp.fs.env.A: must be a string"},
		{"env name", "[mcp.fs]\ncommand = [\"x\"]\nenv = { \"A=B\" = \"c\" }\n", "mcp.fs.env.A=B: is not a valid environment variable name"},
		{"header name", "[mcp.t]\nurl = \"http://127.0.0.1:1/mcp\"\nheaders = { \"Bad Header\" = \"c\" }\n", "mcp.t.headers.Bad Header: is not a valid HTTP header name"},
		{"unset var", "[mcp.t]\nurl = \"http://127.0.0.1:1/mcp\"\nheaders = { Authorization = \"Bearer ${NOPE_TOKEN}\" }\n", "mcp.t.headers.Authorization: refers to ${NOPE_TOKEN}, which is not set"},
		{"malformed var", "[mcp.t]\nurl = \"http://127.0.0.1:1/mcp\"\nheaders = { Authorization = \"Bearer ${1X}\" }\n", "mcp.t.headers.Authorization: has a malformed ${VAR}"},
		{"line break", "[mcp.t]\nurl = \"http://127.0.0.1:1/mcp\"\nheaders = { X-A = \"a\\r\\nX-B: b\" }\n", "mcp.t.headers.X-A: must not contain a line break"},
		{"server not table", "[mcp]\nfs = \"npx\"\n", "mcp.fs: must be a table"},
		{"mcp not table", "mcp = 1\n", "PINPLAN_CONFIG: mcp: must be a table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(env(map[string]string{"PINPLAN_CONFIG": writeFile(t, tt.file)}))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestMCPHeaderValueNotInError(t *testing.T) {
	// A wrong type of header value is reported without echoing it.
	_, err := Load(env(map[string]string{"PINPLAN_CONFIG": writeFile(t, "[mcp.t]\nurl = \"http://127.0.0.1:1/mcp\"\nheaders = { Authorization = [\"Bearer abc123secret\"] }\n")}))
	if err == nil || strings.Contains(err.Error(), "abc123secret") || !strings.Contains(err.Error(), "mcp.t.headers.Authorization") {
		t.Errorf("got %v, want an error naming mcp.t.headers.Authorization without the value", err)
	}
}

func TestMCPURLCredentialsNotInError(t *testing.T) {
	// A URL refused for its scheme is quoted without its credentials.
	_, err := Load(env(map[string]string{"PINPLAN_CONFIG": writeFile(t, "[mcp.t]\nurl = \"ftp://user:pw@example.com/mcp?api_key=SECRET\"\n")}))
	if err == nil || strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "pw") || !strings.Contains(err.Error(), "example.com/mcp") {
		t.Errorf("got %v, want an error quoting the URL without its password and query values", err)
	}
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://api.openai.com/v1", "https://api.openai.com/v1"},
		{"https://user:pw@host/v1?api_key=SECRET&v=2", "https://***@host/v1?api_key=***&v=***"},
		{"https://token@host/v1", "https://***@host/v1"},
	}
	for _, tt := range tests {
		if got := RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestBudgetAndRetention(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.ContextTokens != 32000 || c.Retention != 0 {
		t.Errorf("defaults: context %d, retention %s; want 32000 and 0", c.ContextTokens, c.Retention)
	}
	c, err = Load(env(map[string]string{"PINPLAN_CONTEXT_TOKENS": "8000", "PINPLAN_RETENTION": "720h"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.ContextTokens != 8000 || c.Retention != 720*time.Hour {
		t.Errorf("got context %d, retention %s", c.ContextTokens, c.Retention)
	}
}

// TestFileBudgetAndRetention is issue #14, defect 5: the file refused these
// two keys as unknown though the environment took them.
func TestFileBudgetAndRetention(t *testing.T) {
	path := writeFile(t, "pinplan_context_tokens = 9000\npinplan_retention = \"720h\"\n")
	c, err := Load(env(map[string]string{"PINPLAN_CONFIG": path}))
	if err != nil {
		t.Fatal(err)
	}
	if c.ContextTokens != 9000 || c.Retention != 720*time.Hour {
		t.Errorf("got context %d, retention %s; want 9000 and 720h0m0s", c.ContextTokens, c.Retention)
	}
}

// settingSamples holds a valid, non-default value for every key, and the
// keys it needs beside it (a Slack app token needs the bot token).
var settingSamples = map[string]struct {
	value string
	with  map[string]string
}{
	"PINPLAN_DB":                      {value: "/tmp/sample/pinplan.db"},
	"DISCORD_APPLICATION_ID":          {value: "123456789012345678"},
	"PINPLAN_DISCORD_GUILD":           {value: "223456789012345678"},
	"PINPLAN_DISCORD_FORUMS":          {value: "323456789012345678,423456789012345678"},
	"PINPLAN_DISCORD_SHARDS":          {value: "4"},
	"SLACK_CLIENT_ID":                 {value: "333.444", with: oauthWithout("SLACK_CLIENT_ID")},
	"SLACK_CLIENT_SECRET":             {value: "another-client-secret", with: oauthWithout("SLACK_CLIENT_SECRET")},
	"SLACK_REDIRECT_URL":              {value: "https://other.example/slack/oauth_redirect", with: oauthWithout("SLACK_REDIRECT_URL")},
	"PINPLAN_SECRET_KEY":              {value: "another-key-of-32-characters-or-more", with: oauthWithout("PINPLAN_SECRET_KEY")},
	"PINPLAN_MCP_STARTUP_TIMEOUT":     {value: "3s"},
	"PINPLAN_TURN_TOKENS":             {value: "50000"},
	"PINPLAN_USER_TOKENS_PER_DAY":     {value: "2000000"},
	"PINPLAN_MAX_OUTPUT_TOKENS":       {value: "4096"},
	"PINPLAN_MODEL_RESPONSE_BYTES":    {value: "65536"},
	"PINPLAN_DISCORD_COMPONENTS_V2":   {value: "false"},
	"PINPLAN_ETCD_ENDPOINTS":          {value: "https://etcd-1:2379,etcd-2:2379"},
	"PINPLAN_ETCD_PREFIX":             {value: "/team/", with: map[string]string{"PINPLAN_ETCD_ENDPOINTS": "etcd:2379"}},
	"PINPLAN_LEASE_TTL":               {value: "5s"},
	"PINPLAN_ETCD_CA":                 {value: "/etc/etcd/ca.pem"},
	"PINPLAN_ETCD_CERT":               {value: "/etc/etcd/c.pem", with: map[string]string{"PINPLAN_ETCD_KEY": "/etc/etcd/k.pem"}},
	"PINPLAN_ETCD_KEY":                {value: "/etc/etcd/k.pem", with: map[string]string{"PINPLAN_ETCD_CERT": "/etc/etcd/c.pem"}},
	"PINPLAN_ETCD_USERNAME":           {value: "pinplan"},
	"PINPLAN_ETCD_PASSWORD":           {value: "pw-0123", with: map[string]string{"PINPLAN_ETCD_USERNAME": "pinplan"}},
	"PINPLAN_REPLICA_ID":              {value: "replica-a"},
	"PINPLAN_HTTP_ADDR":               {value: "127.0.0.1:9090"},
	"PINPLAN_WEB_TOKEN":               {value: "tok-0123456789"},
	"PINPLAN_WEB":                     {value: "off"},
	"OPENAI_API_KEY":                  {value: "sk-sample-0123"},
	"OPENAI_BASE_URL":                 {value: "http://localhost:11434/v1"},
	"OPENAI_MODEL":                    {value: "llama3"},
	"PINPLAN_STREAM":                  {value: "true"},
	"PINPLAN_MODEL_TIMEOUT":           {value: "30s"},
	"PINPLAN_MODEL_RETRIES":           {value: "2"},
	"PINPLAN_MODEL_CONCURRENCY":       {value: "3"},
	"PINPLAN_MAX_ROUNDS":              {value: "10"},
	"PINPLAN_STALE_ROUNDS":            {value: "5"},
	"PINPLAN_REMINDER_ROLE":           {value: "user"},
	"SLACK_BOT_TOKEN":                 {value: "xoxb-sample", with: map[string]string{"SLACK_APP_TOKEN": "xapp-sample"}},
	"SLACK_APP_TOKEN":                 {value: "xapp-sample", with: map[string]string{"SLACK_BOT_TOKEN": "xoxb-sample"}},
	"SLACK_SIGNING_SECRET":            {value: "sign-sample", with: map[string]string{"SLACK_BOT_TOKEN": "xoxb-sample"}},
	"SLACK_API_URL":                   {value: "https://slack.example.com/api/"},
	"PINPLAN_SLACK_PLAN_BLOCKS":       {value: "true"},
	"PINPLAN_SLACK_EDITS_PER_MINUTE":  {value: "20"},
	"DISCORD_BOT_TOKEN":               {value: "discord-sample"},
	"DISCORD_API_URL":                 {value: "https://discord.example.com"},
	"PINPLAN_DISCORD_THREAD_PER_TASK": {value: "true"},
	"PINPLAN_LOG_LEVEL":               {value: "debug"},
	"PINPLAN_DEMO_DELAY":              {value: "1s"},
	"PINPLAN_TOOL_RESULT_BYTES":       {value: "4096"},
	"PINPLAN_TOOL_TIMEOUT":            {value: "5s"},
	"PINPLAN_APPROVERS":               {value: "U024BE7LH,80351110224678912"},
	"PINPLAN_APPROVAL_TIMEOUT":        {value: "10m"},
	"PINPLAN_PLAN_APPROVAL":           {value: "ask"},
	"PINPLAN_THREAD_CONTEXT":          {value: "0"},
	"PINPLAN_CONTEXT_TOKENS":          {value: "9000"},
	"PINPLAN_FILE_BYTES":              {value: "65536"},
	"PINPLAN_MODEL_VISION":            {value: "true"},
	"PINPLAN_RETENTION":               {value: "720h"},
}

// oauthWithout is a valid many-workspaces Slack setup without key, which
// the sample sets.
func oauthWithout(key string) map[string]string {
	m := map[string]string{"SLACK_APP_TOKEN": "xapp-sample", "SLACK_CLIENT_ID": "111.222", "SLACK_CLIENT_SECRET": "client-secret-sample", "SLACK_REDIRECT_URL": "https://pinplan.example/slack/oauth_redirect", "PINPLAN_SECRET_KEY": "0123456789abcdef0123456789abcdef"}
	delete(m, key)
	return m
}

// with returns m with key set to v.
func with(m map[string]string, key, v string) map[string]string {
	m[key] = v
	return m
}

// TestEverySettingTakesEffect: each key of the list takes effect from the
// environment and, in lower case, from the file (docs/settings.md is
// generated from the same list: TestSettingsReference).
func TestEverySettingTakesEffect(t *testing.T) {
	for _, k := range keys {
		t.Run(k, func(t *testing.T) {
			s, ok := settingSamples[k]
			if !ok {
				t.Fatalf("no sample value for %s: add a valid, non-default one to settingSamples", k)
			}
			without, errWithout := Load(env(s.with))
			check := func(source string, c *Config, err error) {
				t.Helper()
				if err != nil {
					t.Errorf("%s %s=%q: got %v, want it accepted", source, k, s.value, err)
					return
				}
				if errWithout == nil && reflect.DeepEqual(c, without) {
					t.Errorf("%s %s=%q: took no effect", source, k, s.value)
				}
			}

			e := maps.Clone(s.with)
			if e == nil {
				e = map[string]string{}
			}
			e[k] = s.value
			c, err := Load(env(e))
			check("env", c, err)

			f := maps.Clone(s.with)
			if f == nil {
				f = map[string]string{}
			}
			f["PINPLAN_CONFIG"] = writeFile(t, strings.ToLower(k)+" = "+tomlValue(s.value)+"\n")
			c, err = Load(env(f))
			check("file", c, err)
		})
	}
}

// tomlValue writes v as a TOML integer or boolean where it reads as one, so
// the file is tested with its native types too, and as a string otherwise.
func tomlValue(v string) string {
	if _, err := strconv.Atoi(v); err == nil || v == "true" || v == "false" {
		return v
	}
	return strconv.Quote(v)
}

func TestWeb(t *testing.T) {
	tests := []struct {
		name, value string
		off         bool
	}{
		{"default", "", false},
		{"on", "on", false},
		{"off", "off", true},
		{"false", "false", true},
		{"upper", "OFF", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(env(map[string]string{"PINPLAN_WEB": tt.value}))
			if err != nil {
				t.Fatal(err)
			}
			if c.WebOff != tt.off {
				t.Errorf("PINPLAN_WEB=%q: got WebOff %t, want %t", tt.value, c.WebOff, tt.off)
			}
			want := "web=on"
			if tt.off {
				want = "web=off"
			}
			if !strings.Contains(c.String(), want) {
				t.Errorf("String() = %q, want it to contain %s", c.String(), want)
			}
		})
	}
	c, err := Load(env(map[string]string{"PINPLAN_CONFIG": writeFile(t, "pinplan_web = \"off\"\n")}))
	if err != nil || !c.WebOff {
		t.Errorf("pinplan_web = \"off\" in the file: got %v, WebOff %t; want it off", err, c != nil && c.WebOff)
	}
}

// TestDescribeSaysWhatRuns: the startup line names the scripted model
// under -demo (not OPENAI_MODEL's default) and the etcd prefix when the
// store is on etcd (not PINPLAN_DB, which is then unused).
func TestDescribeSaysWhatRuns(t *testing.T) {
	c, err := Load(env(map[string]string{}))
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Describe(true); !strings.Contains(d, "model=demo") || strings.Contains(d, "base_url") || strings.Contains(d, DefaultModel) {
		t.Errorf("Describe(demo) = %q, want the demo model and no base_url", d)
	}
	if d := c.Describe(false); !strings.Contains(d, "model=none") {
		t.Errorf("Describe with no model configured = %q, want model=none", d)
	}
	c, err = Load(env(map[string]string{"PINPLAN_ETCD_ENDPOINTS": "http://u:pw@etcd-1:2379", "PINPLAN_ETCD_PREFIX": "/team/"}))
	if err != nil {
		t.Fatal(err)
	}
	d := c.Describe(false)
	if !strings.Contains(d, "store=etcd") || !strings.Contains(d, "prefix=/team/") || strings.Contains(d, "db=") || strings.Contains(d, "pw") {
		t.Errorf("Describe on etcd = %q, want store=etcd and the prefix, no db= and no password", d)
	}
}

// TestURLWithoutSchemeShownAsTyped: OPENAI_BASE_URL=localhost:11434/v1
// used to be reported as "localhost://"; the error shows what was typed
// and the URL that was probably meant, and still hides userinfo.
func TestURLWithoutSchemeShownAsTyped(t *testing.T) {
	_, err := Load(env(map[string]string{"OPENAI_BASE_URL": "localhost:11434/v1"}))
	if err == nil || !strings.Contains(err.Error(), `"localhost:11434/v1"`) || !strings.Contains(err.Error(), `http://localhost:11434/v1`) {
		t.Errorf("err = %v, want the value as typed and http://localhost:11434/v1 suggested", err)
	}
	_, err = Load(env(map[string]string{"OPENAI_BASE_URL": "user:s3cretpw@host:1/v1"}))
	if err == nil || strings.Contains(err.Error(), "s3cretpw") {
		t.Errorf("err = %v, want an error without the password", err)
	}
}
