// Command soak is pinplan's load run (issue #19): it builds the bot, runs
// it (one process on a bbolt file, or -replicas N processes on an
// embedded etcd) against the loopback fakes of Slack, Discord and an
// OpenAI-compatible model, with the reference MCP filesystem server as
// its tools, and plays -threads conversations spread over -duration:
// plans with several todo_write revisions, tool calls, approval cards
// clicked after a delay, follow-ups, stops and resets, under platform
// 500s, 429 bursts, Discord gateway drops, model 500s and slow answers,
// and a kill -9 every -kill-every. Then it reports whether every answer
// arrived exactly once and every plan ended on its last revision, with
// RSS, goroutines, latencies and CPU, as JSON and a PNG plot. It exits 1
// when anything was lost or duplicated, or a Slack call was sent inside
// a 429's Retry-After.
//
//	go run ./cmd/soak -threads 100 -duration 100s -kill-every 40s -drop-every 60s   # the short form CI runs
//	go run ./cmd/soak -replicas 3                 # an hour, three replicas
//
// Everything is on loopback and ends by itself. It is a command, not a
// package: nothing imports it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, errVerdict):
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	case err != nil:
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
}

// errVerdict is the run's failure: something lost or duplicated, or a
// call sent against a Retry-After.
var errVerdict = errors.New("the run failed")

// config is the run's flags.
type config struct {
	threads          int
	duration         time.Duration
	replicas         int
	killEvery        time.Duration
	restartAfter     time.Duration
	discordShare     float64
	platform500      float64
	model500         float64
	modelSlow        float64
	modelSlowMax     time.Duration
	burstEvery       time.Duration
	burstFor         time.Duration
	dropEvery        time.Duration
	refreshEvery     time.Duration
	sampleEvery      time.Duration
	drain            time.Duration
	wait             time.Duration
	park             time.Duration
	leaseTTL         time.Duration
	slackEditsPerMin int
	slackChannels    int
	seed             uint64
	out              string
	bot              string
	mcp              string
	godebug          string
	retention        time.Duration
	args             []string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.threads, "threads", 1000, "conversations to play, their starts spread over the first 80% of -duration")
	fs.DurationVar(&c.duration, "duration", time.Hour, "how long the load and the faults last; then the run drains (at most -drain) and reports")
	fs.IntVar(&c.replicas, "replicas", 1, "bot processes: 1 runs one on a bbolt file, more run replicas on an embedded etcd")
	fs.DurationVar(&c.killEvery, "kill-every", 5*time.Minute, "kill -9 the process (with replicas: one of them, never replica 0, whose memory is the run's to watch) this often; 0 never")
	fs.DurationVar(&c.restartAfter, "restart-after", 10*time.Second, "with replicas: how long a killed replica stays down (one process is started again at once)")
	fs.Float64Var(&c.discordShare, "discord", 0.15, "share of the threads on Discord; the rest are on Slack")
	fs.Float64Var(&c.platform500, "platform-500", 0.05, "share of Slack Web API and Discord REST calls answered 500")
	fs.Float64Var(&c.model500, "model-500", 0.05, "share of model requests answered 500")
	fs.Float64Var(&c.modelSlow, "model-slow", 0.05, "share of model requests answered slowly (up to -model-slow-max)")
	fs.DurationVar(&c.modelSlowMax, "model-slow-max", 4*time.Second, "the slowest of the slow model answers")
	fs.DurationVar(&c.burstEvery, "burst-every", 2*time.Minute, "a 429 burst this often (the first at half of it); 0 none")
	fs.DurationVar(&c.burstFor, "burst-for", 15*time.Second, "how long a 429 burst lasts")
	fs.DurationVar(&c.dropEvery, "drop-every", 90*time.Second, "drop the Discord gateway connections this often; 0 never")
	fs.DurationVar(&c.refreshEvery, "refresh-every", 100*time.Second, "Slack asks Socket Mode clients to reconnect this often; 0 never")
	fs.DurationVar(&c.sampleEvery, "sample", 10*time.Second, "how often RSS, goroutines, CPU and /metrics are read")
	fs.DurationVar(&c.drain, "drain", 5*time.Minute, "after -duration, the longest wait for the threads to finish")
	fs.DurationVar(&c.wait, "wait", 3*time.Minute, "the longest a thread waits for one thing (an answer, a card) before it gives up")
	fs.DurationVar(&c.park, "park", 25*time.Second, "how long the model holds the request a stop is sent into")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", 10*time.Second, "PINPLAN_LEASE_TTL of the replicas")
	fs.IntVar(&c.slackEditsPerMin, "slack-edits-per-minute", 600, "PINPLAN_SLACK_EDITS_PER_MINUTE: the fake workspace carries the load of many real ones, whose Tier 3 (45) would turn the run into a backlog")
	fs.IntVar(&c.slackChannels, "slack-channels", 16, "Slack channels the threads are spread over (Slack takes one message a second per channel)")
	fs.Uint64Var(&c.seed, "seed", 1, "the workload's seed: the same seed plays the same threads")
	fs.StringVar(&c.out, "out", "", "folder for report.json, the plot and the bots' logs (default: a new folder under the system's temporary folder)")
	fs.StringVar(&c.bot, "bot", "", "a bot binary to run (default: go build ./cmd/bot)")
	fs.DurationVar(&c.retention, "retention", 0, "PINPLAN_RETENTION of the one process (at least 1m): finished threads' sessions are deleted from the bbolt file after this long idle, as a deployment that keeps days of threads would; 0 keeps every session")
	fs.StringVar(&c.godebug, "godebug", "", "GODEBUG for the bots, such as memprofilerate=4096 for finer heap profiles (it changes what it measures: use it beside, not as, the measured run)")
	fs.StringVar(&c.mcp, "mcp", ".ci/node/node_modules/.bin/mcp-server-filesystem", "the reference MCP filesystem server (installed by .ci/run), relative to the module root")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./cmd/soak [flags]\n\n%s\n\nflags:\n", usageText)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	switch {
	case c.threads < 1:
		return c, errors.New("-threads must be at least 1")
	case c.duration < 10*time.Second:
		return c, errors.New("-duration must be at least 10s")
	case c.replicas < 1:
		return c, errors.New("-replicas must be at least 1")
	case c.sampleEvery < time.Second:
		return c, errors.New("-sample must be at least 1s")
	case c.slackChannels < 1:
		return c, errors.New("-slack-channels must be at least 1")
	case c.retention != 0 && c.retention < time.Minute:
		return c, errors.New("-retention must be 0 or at least 1m")
	case c.retention != 0 && c.replicas > 1:
		return c, errors.New("-retention is for one process on bbolt: the replicas' etcd store has no retention")
	}
	c.args = args
	return c, nil
}

const usageText = `Runs the bot against loopback fakes of Slack, Discord and the model, with
the reference MCP filesystem server, plays -threads conversations under
faults and a kill -9 every -kill-every, and reports: answers delivered
exactly once, plans on their last revision, lost and duplicated, Slack
calls sent inside a 429's Retry-After (exit 1 unless all three are 0),
RSS and goroutines over time (report.json and a PNG), p50/p99 of
revision->edit and reply delivery, CPU per 1,000 model rounds.

  go run ./cmd/soak -threads 100 -duration 100s -kill-every 40s -drop-every 60s   # CI's short form
  go run ./cmd/soak                                             # one process, an hour
  go run ./cmd/soak -replicas 3                                 # three replicas, an hour`
