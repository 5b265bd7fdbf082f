// Package doctor runs pinplan's settings' checks without serving
// (`pinplan doctor`, DESIGN §8): every setting's value and the tokens'
// shapes, Slack's and Discord's answers to the tokens, the model
// server's abilities, each MCP server's start and tools, and the store.
// Each check is a row of one table that says what to change. It reads
// and never writes: the bbolt file is opened read-only, an etcd prefix
// only read, and no secret is printed.
//
// It imports config, agent, todo, mcp, store and etcdstore; no adapter
// (it asks Slack and Discord over plain HTTP, as their APIs document).
// Only cmd/bot imports it.
package doctor

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pinplan/pinplan/config"
)

// Status is a check's outcome.
type Status int

const (
	OK      Status = iota
	Skipped        // not configured, or not checked because an earlier check failed
	Warning        // works, with less than pinplan can do
	Failed         // pinplan cannot work this way: the exit status is 1
)

func (s Status) String() string {
	switch s {
	case OK:
		return "ok"
	case Skipped:
		return "skipped"
	case Warning:
		return "warning"
	}
	return "FAILED"
}

// Check is one row of the report.
type Check struct {
	Area    string // settings, slack, discord, model, mcp, store
	Name    string
	Status  Status
	Setting string // the setting to change; "" when there is none
	Detail  string
}

// Report is every check, in the order they ran.
type Report struct {
	Checks []Check
	redact func(string) string
}

// Failed counts the checks that failed.
func (r *Report) Failed() int {
	n := 0
	for _, c := range r.Checks {
		if c.Status == Failed {
			n++
		}
	}
	return n
}

func (r *Report) add(area, name string, st Status, setting, detail string) {
	r.Checks = append(r.Checks, Check{Area: area, Name: name, Status: st, Setting: setting, Detail: detail})
}

// Write prints the report as one table, then a line that sums it up.
// Every secret of the settings is redacted from it.
func (r *Report) Write(w io.Writer) error {
	redact := r.redact
	if redact == nil {
		redact = func(s string) string { return s }
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AREA\tCHECK\tRESULT\tSETTING\tDETAIL")
	warnings := 0
	for _, c := range r.Checks {
		if c.Status == Warning {
			warnings++
		}
		setting := c.Setting
		if setting == "" {
			setting = "-"
		}
		detail := strings.Join(strings.Fields(redact(c.Detail)), " ")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Area, redact(c.Name), c.Status, redact(setting), detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var err error
	switch failed := r.Failed(); {
	case failed > 0:
		_, err = fmt.Fprintf(w, "\n%s failed, %s: change the settings named above and run `pinplan doctor` again.\n", count(failed, "check"), count(warnings, "warning"))
	case warnings > 0:
		_, err = fmt.Fprintf(w, "\nNothing needed failed; %s: pinplan will run with less than it can do.\n", count(warnings, "warning"))
	default:
		_, err = fmt.Fprintln(w, "\nEverything checked works.")
	}
	return err
}

func count(n int, what string) string {
	switch n {
	case 0:
		return "no " + what + "s"
	case 1:
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// Options tunes Run; the zero value checks the real services.
type Options struct {
	// HTTPClient asks Slack, Discord and the model server; nil means
	// http.DefaultClient. Each request is bounded by Timeout.
	HTTPClient *http.Client
	// Timeout bounds one check (a request, a server's start); 0 means 30s.
	Timeout time.Duration
	// EtcdTimeout bounds reaching etcd; 0 means 5s.
	EtcdTimeout time.Duration
	// Env is what an MCP server started over stdio inherits (mcp.Options.Env);
	// nil means os.Getenv.
	Env func(string) string
}

// Run checks the settings of environ (os.Environ's KEY=value entries, a
// PINPLAN_CONFIG file among them) and returns the report.
func Run(ctx context.Context, environ []string, opts Options) *Report {
	if opts.HTTPClient == nil {
		opts.HTTPClient = http.DefaultClient
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.EtcdTimeout <= 0 {
		opts.EtcdTimeout = 5 * time.Second
	}
	if opts.Env == nil {
		opts.Env = os.Getenv
	}
	r := &Report{}
	cfg, problems, err := config.Diagnose(config.Lookup(environ))
	if err != nil {
		r.add("settings", "PINPLAN_CONFIG", Failed, "PINPLAN_CONFIG", err.Error()+"; nothing else was checked")
		return r
	}
	r.redact = cfg.Redact
	d := &doctor{cfg: cfg, opts: opts, r: r, bad: map[string]bool{}, tokens: map[string][]Check{}}
	d.settings(problems, environ)
	d.slack(ctx)
	d.discord(ctx)
	d.model(ctx)
	d.mcp(ctx)
	d.store(ctx)
	return r
}

// doctor is one run's state.
type doctor struct {
	cfg  *config.Config
	opts Options
	r    *Report
	bad  map[string]bool // keys config found invalid: their checks are skipped
	// tokens are the rows of the platforms' token shapes, by area, shown
	// first among that platform's rows.
	tokens map[string][]Check
}

// tokenRows adds the platform's token shape rows.
func (d *doctor) tokenRows(area string) {
	d.r.Checks = append(d.r.Checks, d.tokens[area]...)
}

// settings reports the values config refused, the tokens' shapes among
// them, and the PINPLAN_ names that are no setting.
func (d *doctor) settings(problems []config.Problem, environ []string) {
	for _, p := range problems {
		d.bad[p.Key] = true
	}
	valid := len(problems) == 0
	if d.bad["SLACK_BOT_TOKEN"] && d.bad["SLACK_APP_TOKEN"] && strings.HasPrefix(string(d.cfg.SlackBotToken), "xapp-") && strings.HasPrefix(string(d.cfg.SlackAppToken), "xoxb-") {
		d.tokens["slack"] = append(d.tokens["slack"], Check{Area: "slack", Name: "token shapes", Status: Failed, Setting: "SLACK_BOT_TOKEN, SLACK_APP_TOKEN",
			Detail: "swapped: SLACK_BOT_TOKEN holds the app-level token (xapp-) and SLACK_APP_TOKEN the bot token (xoxb-); swap their values"})
		problems = dropKeys(problems, "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN")
	}
	shown := map[string]bool{}
	for _, p := range problems {
		area, name := "settings", "value"
		switch {
		case strings.HasPrefix(p.Key, "SLACK_"):
			area, name = "slack", "token shape"
		case strings.HasPrefix(p.Key, "DISCORD_"):
			area, name = "discord", "token shape"
		}
		if shown[p.Key+p.Message] {
			continue
		}
		shown[p.Key+p.Message] = true
		if area == "settings" {
			d.r.add(area, name, Failed, p.Key, p.Message)
		} else {
			d.tokens[area] = append(d.tokens[area], Check{Area: area, Name: name, Status: Failed, Setting: p.Key, Detail: p.Message})
		}
	}
	for _, tok := range []struct {
		key, area string
		val       config.Secret
		shape     string
	}{
		{"SLACK_BOT_TOKEN", "slack", d.cfg.SlackBotToken, "a bot token (xoxb-)"},
		{"SLACK_APP_TOKEN", "slack", d.cfg.SlackAppToken, "an app-level token (xapp-)"},
		{"DISCORD_BOT_TOKEN", "discord", d.cfg.DiscordBotToken, "given alone, without \"Bot \""},
	} {
		if tok.val != "" && !d.bad[tok.key] {
			d.tokens[tok.area] = append(d.tokens[tok.area], Check{Area: tok.area, Name: "token shape", Status: OK, Setting: tok.key, Detail: tok.shape + ", no spaces or quotes in it"})
		}
	}
	for _, u := range config.UnknownEnv(environ) {
		d.r.add("settings", "unknown name", Warning, u.Name, u.String())
	}
	if valid {
		d.r.add("settings", "values", OK, "", "every setting has a valid value")
	}
}

func dropKeys(problems []config.Problem, keys ...string) []config.Problem {
	var out []config.Problem
	for _, p := range problems {
		keep := true
		for _, k := range keys {
			keep = keep && p.Key != k
		}
		if keep {
			out = append(out, p)
		}
	}
	return out
}
