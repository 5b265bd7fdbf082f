// Package config loads and validates pinplan's settings from the environment
// and an optional TOML file named by PINPLAN_CONFIG. It imports nothing of
// pinplan's; cmd/bot is its only importer.
//
// A key set in the environment wins over the same key in the file. Keys in
// the file are the environment names in lower case (pinplan_db = "...").
// Every error names the key, and secrets never appear in String, %v, %#v,
// JSON or errors.
package config

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/BurntSushi/toml"
)

// Secret is a token or key. Every way of printing it prints "[redacted]".
type Secret string

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString keeps %#v from printing the value.
func (s Secret) GoString() string { return strconv.Quote(s.String()) }

// MarshalText keeps JSON and TOML encoders from printing the value.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Reveal returns the secret itself, for the one place that sends it.
func (s Secret) Reveal() string { return string(s) }

// Config is every setting of DESIGN.md §9 plus the few pinplan adds.
type Config struct {
	DB       string // PINPLAN_DB
	HTTPAddr string // PINPLAN_HTTP_ADDR
	WebToken Secret // PINPLAN_WEB_TOKEN: the console's token; empty lets cmd/bot generate one beside the DB, but a non-loopback HTTPAddr needs it set
	WebOff   bool   // PINPLAN_WEB=off: serve no web console (a Slack-only deployment)

	OpenAIKey        Secret        // OPENAI_API_KEY
	OpenAIBaseURL    string        // OPENAI_BASE_URL
	OpenAIModel      string        // OPENAI_MODEL
	ModelConfigured  bool          // OPENAI_API_KEY or OPENAI_BASE_URL was set
	Stream           bool          // PINPLAN_STREAM: stream model responses (SSE) and Slack answers (chat.startStream)
	ModelTimeout     time.Duration // PINPLAN_MODEL_TIMEOUT: one model request
	ModelRetries     int           // PINPLAN_MODEL_RETRIES: retries after the first try
	ModelConcurrency int           // PINPLAN_MODEL_CONCURRENCY: model calls in flight, process-wide
	MaxRounds        int           // PINPLAN_MAX_ROUNDS: model rounds per turn
	StaleRounds      int           // PINPLAN_STALE_ROUNDS
	ReminderRole     string        // PINPLAN_REMINDER_ROLE: system or user
	ResponseBytes    int           // PINPLAN_MODEL_RESPONSE_BYTES: longest model response read, streamed or not

	SlackBotToken      Secret // SLACK_BOT_TOKEN
	SlackAppToken      Secret // SLACK_APP_TOKEN: Socket Mode when set
	SlackSigningSecret Secret // SLACK_SIGNING_SECRET: Events API over HTTP
	SlackAPIURL        string // SLACK_API_URL
	SlackPlanBlocks    bool   // PINPLAN_SLACK_PLAN_BLOCKS: native plan/task-card blocks
	SlackEditsPerMin   int    // PINPLAN_SLACK_EDITS_PER_MINUTE: plan posts and edits per minute
	// Many workspaces (DESIGN §14): with SlackClientID and
	// SlackClientSecret the bot installs by OAuth v2 and keeps each
	// workspace's installation in the store, its tokens sealed with
	// SecretKey.
	SlackClientID     string // SLACK_CLIENT_ID
	SlackClientSecret Secret // SLACK_CLIENT_SECRET
	SlackRedirectURL  string // SLACK_REDIRECT_URL: https://<host>/slack/oauth_redirect, as in the app's settings
	SecretKey         Secret // PINPLAN_SECRET_KEY: seals installations' tokens at rest

	DiscordBotToken      Secret   // DISCORD_BOT_TOKEN
	DiscordAPIURL        string   // DISCORD_API_URL
	DiscordThreadPerTask bool     // PINPLAN_DISCORD_THREAD_PER_TASK
	DiscordComponentsV2  bool     // PINPLAN_DISCORD_COMPONENTS_V2: the plan as a Components V2 container
	DiscordAppID         string   // DISCORD_APPLICATION_ID: for `bot invite` when the token's first part is not the id
	DiscordGuild         string   // PINPLAN_DISCORD_GUILD: register /pinplan for this server only (shows at once)
	DiscordForums        []string // PINPLAN_DISCORD_FORUMS: forum channel ids whose every new post is a task (DESIGN §20)
	DiscordShards        int      // PINPLAN_DISCORD_SHARDS: gateway shards (0: as /gateway/bot says)

	LogLevel string // PINPLAN_LOG_LEVEL: debug, info, warn, error

	ToolResultBytes int           // PINPLAN_TOOL_RESULT_BYTES: longest tool result given to the model
	ToolTimeout     time.Duration // PINPLAN_TOOL_TIMEOUT: one MCP tool call
	Approvers       []string      // PINPLAN_APPROVERS: platform user ids who may decide any approval
	ApprovalTimeout time.Duration // PINPLAN_APPROVAL_TIMEOUT: an undecided approval card is denied after this
	PlanApproval    bool          // PINPLAN_PLAN_APPROVAL=ask: a turn's first plan waits for Start (DESIGN §19)
	ThreadContext   int           // PINPLAN_THREAD_CONTEXT: earlier thread messages quoted on first mention (0: none)
	MCPStartup      time.Duration // PINPLAN_MCP_STARTUP_TIMEOUT: how long a turn waits for MCP servers still connecting

	ContextTokens int           // PINPLAN_CONTEXT_TOKENS: the model's context budget for one request
	MaxOutput     int           // PINPLAN_MAX_OUTPUT_TOKENS: max_tokens of every model request (0: 15% of PINPLAN_CONTEXT_TOKENS)
	FileBytes     int           // PINPLAN_FILE_BYTES: the most an attached file may be to be given to the model
	Vision        bool          // PINPLAN_MODEL_VISION: the model takes images (attached images given as image parts)
	TurnTokens    int           // PINPLAN_TURN_TOKENS: tokens one turn may use (0: no budget)
	UserTokens    int           // PINPLAN_USER_TOKENS_PER_DAY: tokens one person may use per UTC day (0: no budget)
	Retention     time.Duration // PINPLAN_RETENTION: sessions idle for longer are deleted; 0 keeps them

	// Replicas on etcd (DESIGN §14): with EtcdEndpoints set the store is
	// on etcd instead of the bbolt file, and several processes share it.
	EtcdEndpoints []string      // PINPLAN_ETCD_ENDPOINTS: comma separated
	EtcdPrefix    string        // PINPLAN_ETCD_PREFIX: every key lives under it
	LeaseTTL      time.Duration // PINPLAN_LEASE_TTL: the replica's lease; a dead owner's threads move after it
	EtcdCA        string        // PINPLAN_ETCD_CA: CA file for the cluster's TLS
	EtcdCert      string        // PINPLAN_ETCD_CERT: client certificate file
	EtcdKey       string        // PINPLAN_ETCD_KEY: client key file
	EtcdUsername  string        // PINPLAN_ETCD_USERNAME
	EtcdPassword  Secret        // PINPLAN_ETCD_PASSWORD
	ReplicaID     string        // PINPLAN_REPLICA_ID: this process among the replicas

	// MCP lists the [mcp.<name>] tables of the PINPLAN_CONFIG file, sorted
	// by name (DESIGN.md §12).
	MCP []MCPServer

	DemoDelay time.Duration // PINPLAN_DEMO_DELAY: pause per round of the -demo model
}

// DefaultModel is the model used when OPENAI_MODEL is not set.
const DefaultModel = "gpt-4.1-mini"

// Load reads the settings through getenv (os.Getenv in main), applies
// defaults and validates them. The error names the offending key.
func Load(getenv func(string) string) (*Config, error) {
	return load(getenv, nil)
}

// Problem is one invalid setting: its key and what is wrong with it,
// never a secret's value.
type Problem struct {
	Key, Message string
}

func (p Problem) Error() string { return "config: " + p.Key + " " + p.Message }

// Diagnose reads the settings as Load does but goes on past invalid
// values, for `pinplan doctor`, which reports them all at once: it
// returns the settings as read (an invalid value as given, or its
// default) with every problem found, in the order Load meets them; Load
// fails with the first. err is a PINPLAN_CONFIG file that could not be
// read or parsed, after which nothing else is read.
func Diagnose(getenv func(string) string) (*Config, []Problem, error) {
	return loadAll(getenv, nil)
}

// load is Load; with notes non-nil it also records, for each key read,
// the default it applied and what it accepts (the settings reference).
func load(getenv func(string) string, notes map[string]note) (*Config, error) {
	c, problems, err := loadAll(getenv, notes)
	if err != nil {
		return nil, err
	}
	if len(problems) > 0 {
		return nil, problems[0]
	}
	return c, nil
}

// loadAll is Diagnose, with load's notes.
func loadAll(getenv func(string) string, notes map[string]note) (*Config, []Problem, error) {
	file, servers, err := readConfigFile(getenv)
	if err != nil {
		return nil, nil, err
	}
	l := loader{getenv: getenv, file: file, notes: notes}
	c := l.read()
	c.MCP = servers
	c.ModelConfigured = l.str("OPENAI_API_KEY", "") != "" || l.str("OPENAI_BASE_URL", "") != ""
	if !strings.HasSuffix(c.SlackAPIURL, "/") {
		c.SlackAPIURL += "/"
	}
	c.DiscordAPIURL = strings.TrimRight(c.DiscordAPIURL, "/")
	checkTokens(&l, c)
	checkSlack(&l, c)
	if c.MaxOutput > c.ContextTokens/2 {
		l.fail("PINPLAN_MAX_OUTPUT_TOKENS", fmt.Sprintf("is %d, more than half of PINPLAN_CONTEXT_TOKENS (%d): the prompt would have too little room", c.MaxOutput, c.ContextTokens))
	}
	if len(c.EtcdEndpoints) > 0 {
		checkEtcd(&l, c)
	}
	if err := checkAddr(c.HTTPAddr, c.WebToken); err != nil {
		l.fail("PINPLAN_HTTP_ADDR", err.Error())
	}
	return c, l.problems, nil
}

// readConfigFile reads the PINPLAN_CONFIG file, when one is named: its
// settings by key and its [mcp.<name>] tables.
func readConfigFile(getenv func(string) string) (map[string]string, []MCPServer, error) {
	path := getenv("PINPLAN_CONFIG")
	if path == "" {
		return map[string]string{}, nil, nil
	}
	file, mcp, err := readFile(path)
	if err != nil {
		return nil, nil, err
	}
	servers, err := parseMCP(mcp, getenv)
	if err != nil {
		return nil, nil, err
	}
	return file, servers, nil
}

// read reads every setting with its default, each checked alone; what
// must hold between settings is checked after.
func (l *loader) read() *Config {
	return &Config{
		DB:       l.str("PINPLAN_DB", "./data/pinplan.db"),
		HTTPAddr: l.str("PINPLAN_HTTP_ADDR", "127.0.0.1:8080"),
		WebToken: l.secret("PINPLAN_WEB_TOKEN"),
		WebOff:   !l.onOff("PINPLAN_WEB", true),

		OpenAIKey:        l.secret("OPENAI_API_KEY"),
		OpenAIBaseURL:    l.url("OPENAI_BASE_URL", "https://api.openai.com/v1"),
		OpenAIModel:      l.str("OPENAI_MODEL", DefaultModel),
		Stream:           l.boolean("PINPLAN_STREAM", false),
		ModelTimeout:     l.duration("PINPLAN_MODEL_TIMEOUT", 120*time.Second),
		ModelRetries:     l.integer("PINPLAN_MODEL_RETRIES", 4, 0, 20),
		ModelConcurrency: l.integer("PINPLAN_MODEL_CONCURRENCY", 8, 1, 1024),
		MaxRounds:        l.integer("PINPLAN_MAX_ROUNDS", 25, 1, 1000),
		StaleRounds:      l.integer("PINPLAN_STALE_ROUNDS", 3, 1, 1000),
		ReminderRole:     l.oneOf("PINPLAN_REMINDER_ROLE", "system", "system", "user"),
		ResponseBytes:    l.integer("PINPLAN_MODEL_RESPONSE_BYTES", 4<<20, 4096, 1<<30),

		SlackBotToken:      l.secret("SLACK_BOT_TOKEN"),
		SlackAppToken:      l.secret("SLACK_APP_TOKEN"),
		SlackSigningSecret: l.secret("SLACK_SIGNING_SECRET"),
		SlackAPIURL:        l.url("SLACK_API_URL", "https://slack.com/api/"),
		SlackPlanBlocks:    l.boolean("PINPLAN_SLACK_PLAN_BLOCKS", false),
		SlackEditsPerMin:   l.integer("PINPLAN_SLACK_EDITS_PER_MINUTE", 45, 1, 600),
		SlackClientID:      l.str("SLACK_CLIENT_ID", ""),
		SlackClientSecret:  l.secret("SLACK_CLIENT_SECRET"),
		SlackRedirectURL:   l.optionalURL("SLACK_REDIRECT_URL"),
		SecretKey:          l.secret("PINPLAN_SECRET_KEY"),

		DiscordBotToken:      l.secret("DISCORD_BOT_TOKEN"),
		DiscordAPIURL:        l.url("DISCORD_API_URL", "https://discord.com"),
		DiscordThreadPerTask: l.boolean("PINPLAN_DISCORD_THREAD_PER_TASK", false),
		DiscordComponentsV2:  l.boolean("PINPLAN_DISCORD_COMPONENTS_V2", true),
		DiscordAppID:         l.str("DISCORD_APPLICATION_ID", ""),
		DiscordGuild:         l.str("PINPLAN_DISCORD_GUILD", ""),
		DiscordForums:        l.ids("PINPLAN_DISCORD_FORUMS", "channel"),
		DiscordShards:        l.integer("PINPLAN_DISCORD_SHARDS", 0, 0, 65536),

		LogLevel: l.oneOf("PINPLAN_LOG_LEVEL", "info", "debug", "info", "warn", "error"),

		DemoDelay: l.duration("PINPLAN_DEMO_DELAY", 700*time.Millisecond),

		ToolResultBytes: l.integer("PINPLAN_TOOL_RESULT_BYTES", 16384, 256, 16<<20),
		ToolTimeout:     l.duration("PINPLAN_TOOL_TIMEOUT", 120*time.Second),
		Approvers:       l.ids("PINPLAN_APPROVERS", "user"),
		ApprovalTimeout: l.duration("PINPLAN_APPROVAL_TIMEOUT", 30*time.Minute),
		PlanApproval:    l.oneOf("PINPLAN_PLAN_APPROVAL", "off", "off", "ask") == "ask",
		ThreadContext:   l.integer("PINPLAN_THREAD_CONTEXT", 30, 0, 1000),
		MCPStartup:      l.duration("PINPLAN_MCP_STARTUP_TIMEOUT", 10*time.Second),
		ContextTokens:   l.integer("PINPLAN_CONTEXT_TOKENS", 32000, 2000, 10_000_000),
		MaxOutput:       l.integer("PINPLAN_MAX_OUTPUT_TOKENS", 0, 0, 10_000_000),
		FileBytes:       l.integer("PINPLAN_FILE_BYTES", 256<<10, 1024, 16<<20),
		Vision:          l.boolean("PINPLAN_MODEL_VISION", false),
		TurnTokens:      l.integer("PINPLAN_TURN_TOKENS", 0, 0, 1<<40),
		UserTokens:      l.integer("PINPLAN_USER_TOKENS_PER_DAY", 0, 0, 1<<40),
		Retention:       l.durationOrZero("PINPLAN_RETENTION"),

		EtcdEndpoints: l.endpoints("PINPLAN_ETCD_ENDPOINTS"),
		EtcdPrefix:    l.str("PINPLAN_ETCD_PREFIX", "/pinplan/"),
		LeaseTTL:      l.duration("PINPLAN_LEASE_TTL", 10*time.Second),
		EtcdCA:        l.str("PINPLAN_ETCD_CA", ""),
		EtcdCert:      l.str("PINPLAN_ETCD_CERT", ""),
		EtcdKey:       l.str("PINPLAN_ETCD_KEY", ""),
		EtcdUsername:  l.str("PINPLAN_ETCD_USERNAME", ""),
		EtcdPassword:  l.secret("PINPLAN_ETCD_PASSWORD"),
		ReplicaID:     l.str("PINPLAN_REPLICA_ID", ""),
	}
}

// Slack reports whether Slack runs: with one workspace's bot token, or
// with the OAuth app that installs many (DESIGN §14).
func (c *Config) Slack() bool { return c.SlackBotToken != "" || c.SlackClientID != "" }

// checkSlack refuses a Slack bot token without a way to receive events,
// and a way to receive them without the bot token or the OAuth app
// that installs workspaces; the OAuth app needs its secret, its
// redirect URL and the key that seals the tokens it stores.
func checkSlack(l *loader, c *Config) {
	oauth := c.SlackClientID != "" || c.SlackClientSecret != ""
	if (c.SlackBotToken != "" || oauth) && c.SlackAppToken == "" && c.SlackSigningSecret == "" {
		key := "SLACK_BOT_TOKEN"
		if c.SlackBotToken == "" {
			key = "SLACK_CLIENT_ID"
		}
		l.fail(key, "is set, but neither SLACK_APP_TOKEN (Socket Mode) nor SLACK_SIGNING_SECRET (Events API) is")
	}
	if (c.SlackAppToken != "" || c.SlackSigningSecret != "") && c.SlackBotToken == "" && !oauth {
		l.fail("SLACK_BOT_TOKEN", "must be set with SLACK_APP_TOKEN or SLACK_SIGNING_SECRET (or SLACK_CLIENT_ID and SLACK_CLIENT_SECRET, to install in many workspaces)")
	}
	if !oauth {
		return
	}
	if c.SlackBotToken != "" {
		l.fail("SLACK_BOT_TOKEN", "and SLACK_CLIENT_ID are both set: set one. With the OAuth app, install the bot token's workspace too, at https://<your host>/slack/install, and unset SLACK_BOT_TOKEN")
	}
	switch {
	case c.SlackClientID == "":
		l.fail("SLACK_CLIENT_ID", "must be set with SLACK_CLIENT_SECRET (Basic Information -> App Credentials)")
	case c.SlackClientSecret == "":
		l.fail("SLACK_CLIENT_SECRET", "must be set with SLACK_CLIENT_ID (Basic Information -> App Credentials)")
	}
	if c.SlackRedirectURL == "" {
		l.fail("SLACK_REDIRECT_URL", "must be set with SLACK_CLIENT_ID: the https://<your host>/slack/oauth_redirect URL listed in the app's OAuth & Permissions -> Redirect URLs")
	}
	if len(c.SecretKey) < 32 {
		l.fail("PINPLAN_SECRET_KEY", "must be set with SLACK_CLIENT_ID, at least 32 characters (e.g. `openssl rand -base64 32`): it seals the workspaces' tokens in the store")
	}
}

// checkEtcd settles the etcd settings when PINPLAN_ETCD_ENDPOINTS is set:
// the prefix ends in a slash, the lease is whole seconds, and what only
// the bbolt file or only a full set of credentials means is refused.
func checkEtcd(l *loader, c *Config) {
	if !strings.HasSuffix(c.EtcdPrefix, "/") {
		c.EtcdPrefix += "/"
	}
	if c.LeaseTTL < 2*time.Second || c.LeaseTTL%time.Second != 0 {
		l.fail("PINPLAN_LEASE_TTL", "must be whole seconds, at least 2s (etcd leases count in seconds)")
	}
	if (c.EtcdCert == "") != (c.EtcdKey == "") {
		l.fail("PINPLAN_ETCD_CERT", "and PINPLAN_ETCD_KEY must be set together")
	}
	if c.Retention > 0 {
		l.fail("PINPLAN_RETENTION", "is for the bbolt file; with PINPLAN_ETCD_ENDPOINTS leave it unset (retention on etcd is not built yet)")
	}
	if c.EtcdPassword != "" && c.EtcdUsername == "" {
		l.fail("PINPLAN_ETCD_USERNAME", "must be set with PINPLAN_ETCD_PASSWORD")
	}
}

// checkTokens refuses a platform token of the wrong shape at load, by the
// key that holds it and never printing it: found here, it is a sentence
// naming the key; found by the first call, a bare "invalid_auth" or a
// 401. A token's ends are trimmed (str); what is left holds no
// whitespace, no invisible character and no quotes. Slack's tokens say
// what they are: a bot token starts xoxb-, an app-level token (Socket
// Mode) xapp-, a user token xoxp-. Discord's token is given alone: the
// "Bot " of its Authorization header is pinplan's to add.
func checkTokens(l *loader, c *Config) {
	if p, _, ok := strings.Cut(string(c.DiscordBotToken), " "); ok && (strings.EqualFold(p, "Bot") || strings.EqualFold(p, "Bearer")) {
		l.fail("DISCORD_BOT_TOKEN", fmt.Sprintf("starts with %q: give the token alone (Developer Portal -> Bot -> Reset Token); pinplan adds \"Bot \" itself", p+" "))
	}
	for _, t := range []struct {
		key string
		val Secret
	}{{"SLACK_BOT_TOKEN", c.SlackBotToken}, {"SLACK_APP_TOKEN", c.SlackAppToken}, {"SLACK_SIGNING_SECRET", c.SlackSigningSecret}, {"DISCORD_BOT_TOKEN", c.DiscordBotToken}} {
		v := string(t.val)
		switch {
		case strings.ContainsFunc(v, unicode.IsSpace):
			l.fail(t.key, "has a space or a line break inside it: copy it again, whole and alone")
		case strings.ContainsFunc(v, func(r rune) bool { return unicode.Is(unicode.Cf, r) || unicode.IsControl(r) }):
			l.fail(t.key, "has an invisible character in it (such as a zero-width space): copy it again, or type it")
		case strings.ContainsAny(v, "\"'`"):
			l.fail(t.key, "has quotes in it: give the value without them")
		}
	}
	switch bot := string(c.SlackBotToken); {
	case bot == "" || strings.HasPrefix(bot, "xoxb-"):
	case strings.HasPrefix(bot, "xapp-"):
		l.fail("SLACK_BOT_TOKEN", "is an app-level token (xapp-); the bot token starts with xoxb- (OAuth & Permissions). Are SLACK_BOT_TOKEN and SLACK_APP_TOKEN swapped?")
	case strings.HasPrefix(bot, "xoxp-"):
		l.fail("SLACK_BOT_TOKEN", "is a user token (xoxp-); pinplan posts as its bot, whose token starts with xoxb- (OAuth & Permissions -> Bot User OAuth Token)")
	default:
		l.fail("SLACK_BOT_TOKEN", "must be a bot token, which starts with xoxb- (OAuth & Permissions -> Bot User OAuth Token)")
	}
	if c.SlackAppToken != "" && !strings.HasPrefix(string(c.SlackAppToken), "xapp-") {
		l.fail("SLACK_APP_TOKEN", "must be an app-level token, which starts with xapp- (Basic Information -> App-Level Tokens, scope connections:write). Are SLACK_BOT_TOKEN and SLACK_APP_TOKEN swapped?")
	}
}

// Unknown is a name in the environment that looks like one of pinplan's
// settings (PINPLAN_...) and is none: a typo the process would otherwise
// ignore in silence, where the file refuses the same name.
type Unknown struct {
	Name    string
	Suggest string // the nearest setting's name, "" when none is near
}

func (u Unknown) String() string {
	if u.Suggest == "" {
		return u.Name + " is not a setting of pinplan's; it is ignored"
	}
	return fmt.Sprintf("%s is not a setting of pinplan's; it is ignored (did you mean %s?)", u.Name, u.Suggest)
}

// UnknownEnv returns the PINPLAN_ names of environ (os.Environ's
// KEY=value form) that are no setting, in their order: the caller warns
// of them; they do not stop the process.
func UnknownEnv(environ []string) []Unknown {
	var out []Unknown
	seen := map[string]bool{}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "PINPLAN_") || name == "PINPLAN_CONFIG" || slices.Contains(keys, name) || seen[name] {
			continue
		}
		seen[name] = true
		out = append(out, Unknown{Name: name, Suggest: nearest(name, keys)})
	}
	return out
}

// nearest returns the name of names closest to name by edit distance,
// when it is near enough to be a typo of it (at most 3 edits, and fewer
// than half its length); otherwise "".
func nearest(name string, names []string) string {
	best, bestD := "", 4
	for _, n := range names {
		if d := editDistance(name, n); d < bestD && d*2 < len(n) {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes (the
// names compared are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Loopback reports whether addr's host is a loopback address or localhost.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func checkAddr(addr string, token Secret) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%q is not host:port: %v", addr, err)
	}
	if !Loopback(addr) && token == "" {
		return fmt.Errorf("%q is not a loopback address; set PINPLAN_WEB_TOKEN to serve the web console beyond this machine", addr)
	}
	return nil
}

// Secrets returns every non-empty secret value, for redacting text.
func (c *Config) Secrets() []string {
	var out []string
	secrets := []Secret{c.WebToken, c.OpenAIKey, c.SlackBotToken, c.SlackAppToken, c.SlackSigningSecret, c.DiscordBotToken, c.EtcdPassword}
	for _, srv := range c.MCP {
		secrets = append(secrets, srv.secretValues()...)
	}
	for _, s := range secrets {
		if len(s) >= 4 && !slices.Contains(out, string(s)) {
			out = append(out, string(s))
		}
	}
	return out
}

// Redact replaces every secret value in s with "[redacted]".
func (c *Config) Redact(s string) string {
	for _, v := range c.Secrets() {
		s = strings.ReplaceAll(s, v, "[redacted]")
	}
	return s
}

func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

// String lists the settings with secrets redacted.
func (c *Config) String() string { return c.Describe(false) }

// Describe is String for the startup line: what runs, as run. With demo
// the model is the scripted demo, whatever OPENAI_* say; with etcd the
// store is the etcd prefix, not the bbolt file.
func (c *Config) Describe(demo bool) string {
	names := make([]string, len(c.MCP))
	for i, s := range c.MCP {
		names[i] = s.Name
	}
	web := "on"
	if c.WebOff {
		web = "off"
	}
	db := "db=" + c.DB
	if len(c.EtcdEndpoints) > 0 {
		eps := make([]string, len(c.EtcdEndpoints))
		for i, e := range c.EtcdEndpoints {
			eps[i] = RedactURL(e)
		}
		db = fmt.Sprintf("store=etcd etcd=%s prefix=%s", strings.Join(eps, ","), c.EtcdPrefix)
	}
	model := fmt.Sprintf("model=%s base_url=%s openai_key=%s", c.OpenAIModel, RedactURL(c.OpenAIBaseURL), c.OpenAIKey)
	switch {
	case demo:
		model = "model=demo (scripted, -demo)"
	case !c.ModelConfigured:
		model = "model=none (set OPENAI_API_KEY or OPENAI_BASE_URL)"
	}
	return fmt.Sprintf("%s http=%s web=%s %s stream=%t slack=%t discord=%t mcp=%s",
		db, c.HTTPAddr, web, model, c.Stream,
		c.Slack(), c.DiscordBotToken != "", strings.Join(names, ","))
}

// RedactURL keeps a URL's scheme, host and path and replaces its user
// info, each query value and its fragment with "***" (mcp has the same
// rule for the URLs in its logs). Text that does not parse as a URL is cut
// to its scheme.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if scheme, _, ok := strings.Cut(raw, "://"); ok {
			return scheme + "://***"
		}
		return "***"
	}
	var b strings.Builder
	if u.Opaque != "" {
		// No "//": "localhost:11434/v1" parses as scheme "localhost".
		// Show it as typed, less anything before an "@".
		b.WriteString(u.Scheme + ":")
		if _, after, ok := cutLast(u.Opaque, "@"); ok {
			b.WriteString("***@" + after)
		} else {
			b.WriteString(u.Opaque)
		}
		return b.String()
	}
	if u.Scheme != "" {
		b.WriteString(u.Scheme + "://")
	}
	if u.User != nil {
		b.WriteString("***@")
	}
	b.WriteString(u.Host)
	b.WriteString(u.EscapedPath())
	if u.RawQuery != "" || u.ForceQuery {
		b.WriteByte('?')
		for i, pair := range strings.Split(u.RawQuery, "&") {
			if i > 0 {
				b.WriteByte('&')
			}
			key, _, _ := strings.Cut(pair, "=")
			b.WriteString(key + "=***")
		}
	}
	if u.Fragment != "" {
		b.WriteString("#***")
	}
	return b.String()
}

// readFile reads the TOML file: the settings by their environment name, and
// the raw [mcp] table for parseMCP.
func readFile(path string) (map[string]string, any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: PINPLAN_CONFIG: %w", err)
	}
	raw := map[string]any{}
	if err := toml.Unmarshal(b, &raw); err != nil {
		return nil, nil, fmt.Errorf("config: PINPLAN_CONFIG %s: %w", path, err)
	}
	mcp, hasMCP := raw["mcp"]
	delete(raw, "mcp")
	known := map[string]bool{}
	for _, k := range keys {
		known[strings.ToLower(k)] = true
	}
	names := make([]string, 0, len(raw))
	for k := range raw {
		names = append(names, k)
	}
	sort.Strings(names)
	out := map[string]string{}
	for _, k := range names {
		if !known[k] {
			hint := ""
			if n := nearest(strings.ToUpper(k), keys); n != "" {
				hint = fmt.Sprintf(" (did you mean %s?)", strings.ToLower(n))
			}
			return nil, nil, fmt.Errorf("config: %s: unknown key %q%s", path, k, hint)
		}
		switch v := raw[k].(type) {
		case string:
			out[strings.ToUpper(k)] = v
		case bool, int64, float64:
			out[strings.ToUpper(k)] = fmt.Sprint(v)
		case []any:
			// A list setting (pinplan_approvers = ["U1", "U2"]) is the same
			// as its comma-separated form.
			items, ok := stringList(v)
			if !ok || k != "pinplan_approvers" {
				return nil, nil, fmt.Errorf("config: %s: key %q: expected a string, number or boolean", path, k)
			}
			out[strings.ToUpper(k)] = strings.Join(items, ",")
		default:
			return nil, nil, fmt.Errorf("config: %s: key %q: expected a string, number or boolean", path, k)
		}
	}
	if !hasMCP {
		mcp = nil
	}
	return out, mcp, nil
}

type loader struct {
	getenv func(string) string
	file   map[string]string
	notes  map[string]note // nil but for the settings reference
	// problems are the invalid settings found, in order.
	problems []Problem
}

// note is what the loader applies to one key: its default as the
// reference shows it ("" when there is none) and the values it accepts.
type note struct{ def, accepts string }

func (l *loader) note(key, def, accepts string) {
	if l.notes != nil {
		l.notes[key] = note{def, accepts}
	}
}

// showDuration writes d as a person would (2m, not 2m0s).
func showDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func (l *loader) fail(key, msg string) {
	l.problems = append(l.problems, Problem{Key: key, Message: msg})
}

func (l *loader) str(key, def string) string {
	if !slices.Contains(keys, key) {
		panic("config: " + key + " is read but missing from keys, so the file would refuse it")
	}
	if _, ok := l.notes[key]; !ok {
		l.note(key, def, "text") // a typed reader notes its own after
	}
	if v := strings.TrimSpace(l.getenv(key)); v != "" {
		return v
	}
	if v := strings.TrimSpace(l.file[key]); v != "" {
		return v
	}
	return def
}

// secret reads a token, key or password: never printed.
func (l *loader) secret(key string) Secret {
	v := l.str(key, "")
	l.note(key, "", "a secret (never printed)")
	return Secret(v)
}

func (l *loader) url(key, def string) string {
	v := l.str(key, def)
	l.note(key, def, "an http or https URL")
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		hint := ""
		if !strings.Contains(v, "://") {
			hint = fmt.Sprintf(" (did you mean %q?)", "http://"+RedactURL("http://" + v)[len("http://"):])
		}
		l.fail(key, fmt.Sprintf("must be an http or https URL, got %q%s", RedactURL(v), hint))
	}
	return v
}

// optionalURL reads an http or https URL that has no default: "" when
// unset.
func (l *loader) optionalURL(key string) string {
	if l.str(key, "") == "" {
		l.note(key, "", "an http or https URL")
		return ""
	}
	return l.url(key, "")
}

func (l *loader) boolean(key string, def bool) bool {
	v := l.str(key, "")
	l.note(key, strconv.FormatBool(def), "`true` or `false`")
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		l.fail(key, fmt.Sprintf("must be true or false, got %q", v))
	}
	return b
}

// onOff reads a switch: on or off (true and false are taken too).
func (l *loader) onOff(key string, def bool) bool {
	v := l.str(key, "")
	l.note(key, map[bool]string{true: "on", false: "off"}[def], "`on` or `off`")
	switch strings.ToLower(v) {
	case "":
		return def
	case "on", "true":
		return true
	case "off", "false":
		return false
	default:
		l.fail(key, fmt.Sprintf("must be on or off, got %q", v))
		return def
	}
}

func (l *loader) integer(key string, def, min, max int) int {
	v := l.str(key, "")
	l.note(key, strconv.Itoa(def), fmt.Sprintf("a whole number, %d to %d", min, max))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		l.fail(key, fmt.Sprintf("must be a whole number from %d to %d, got %q", min, max, v))
	}
	return n
}

func (l *loader) duration(key string, def time.Duration) time.Duration {
	v := l.str(key, "")
	l.note(key, showDuration(def), "a duration (`90s`, `10m`)")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		l.fail(key, fmt.Sprintf("must be a positive duration such as 90s, got %q", v))
	}
	return d
}

// durationOrZero reads a duration where 0 (the default) means "never".
func (l *loader) durationOrZero(key string) time.Duration {
	v := l.str(key, "")
	l.note(key, "0", "`0` or a duration of at least `1m` (`720h`)")
	if v == "" || v == "0" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		l.fail(key, fmt.Sprintf("must be 0 (keep forever) or a positive duration such as 720h, got %q", v))
	}
	if d > 0 && d < time.Minute {
		l.fail(key, fmt.Sprintf("must be at least 1m, got %q", v))
	}
	return d
}

// endpoints reads a comma-separated list of etcd endpoints: http:// or
// https:// URLs, or host:port.
func (l *loader) endpoints(key string) []string {
	v := l.str(key, "")
	l.note(key, "", "comma-separated `host:port` or URLs")
	if v == "" {
		return nil
	}
	var out []string
	for _, e := range strings.Split(v, ",") {
		e = strings.TrimSpace(e)
		hostport := e
		if u, err := url.Parse(e); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
			hostport = u.Host
		}
		if _, port, err := net.SplitHostPort(hostport); err != nil || port == "" {
			l.fail(key, fmt.Sprintf("must be comma-separated endpoints (https://etcd-1:2379,etcd-2:2379), got %q", RedactURL(e)))
			return nil
		}
		out = append(out, e)
	}
	return out
}

// ids reads a comma-separated list of platform ids of what (user,
// channel).
func (l *loader) ids(key, what string) []string {
	v := l.str(key, "")
	l.note(key, "", "comma-separated "+what+" ids")
	if v == "" {
		return nil
	}
	var out []string
	for _, id := range strings.Split(v, ",") {
		id = strings.TrimSpace(id)
		if id == "" || strings.ContainsFunc(id, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r == '"' || r == '\'' }) {
			l.fail(key, fmt.Sprintf("must be comma-separated %s ids (U024BE7LH,123456789012345678), got %q", what, v))
			return nil
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

func (l *loader) oneOf(key, def string, allowed ...string) string {
	v := l.str(key, def)
	l.note(key, def, "`"+strings.Join(allowed, "`, `")+"`")
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	l.fail(key, fmt.Sprintf("must be one of %s, got %q", strings.Join(allowed, ", "), v))
	return def
}
