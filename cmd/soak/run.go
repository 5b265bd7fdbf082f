package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/internal/fakeslack"
)

const webToken = "soak-console-token-0123456789abcdef"

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	// The run ends by itself: the load, the drain, and room to start,
	// stop and report.
	ctx, cancel := context.WithTimeout(ctx, cfg.duration+cfg.drain+10*time.Minute)
	defer cancel()
	say := func(format string, a ...any) {
		fmt.Fprintf(stdout, "soak: "+format+"\n", a...)
	}

	root, err := moduleRoot()
	if err != nil {
		return err
	}
	if cfg.out, err = outputDir(cfg.out); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "pinplan-soak-work-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	binary, err := botBinary(ctx, cfg.bot, root, work, say)
	if err != nil {
		return err
	}
	mcpPath, err := mcpServer(cfg.mcp, root)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 10 * time.Second}
	schedtrace, err := needSchedtrace(ctx, binary, work, client, getenv)
	if err != nil {
		return err
	}

	flt := &faults{platform500: cfg.platform500, model500: cfg.model500, modelSlow: cfg.modelSlow, modelSlowMax: cfg.modelSlowMax,
		rng: rand.New(rand.NewPCG(cfg.seed, 0xfa017))}
	files, err := writeFiles(work)
	if err != nil {
		return err
	}
	threads := newThreads(cfg.threads, cfg.duration*8/10, cfg.discordShare, cfg.slackChannels, cfg.seed, files)
	fk := startFakes(threads, flt, cfg.park)
	defer fk.Close()
	base, err := botEnv(cfg, fk, getenv, mcpPath, files, work)
	if err != nil {
		return err
	}
	mode, closeStore, err := startStore(cfg, base, work)
	if err != nil {
		return err
	}
	defer closeStore()
	sup := &supervisor{binary: binary, env: slotEnv(cfg.replicas, base, work), logDir: filepath.Join(cfg.out, "logs"), token: webToken, schedtrace: schedtrace,
		client: client, origin: time.Now(), live: make([]*botProc, cfg.replicas)}
	defer sup.stopAll(15 * time.Second)

	say("%s, %d threads over %s, output in %s", mode, cfg.threads, cfg.duration, cfg.out)
	sk := &soak{cfg: cfg, say: say, stdout: stdout, client: client, threads: threads, flt: flt, fk: fk, sup: sup}
	baseline, err := sk.startBots(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	say("started; idle goroutines %v", baseline)
	d, wall, after, err := sk.exercise(ctx, start)
	if err != nil {
		return err
	}
	return sk.report(mode, start, wall, d, baseline, after)
}

// startStore is the bots' store, as the report's mode names it: each
// process's own bbolt file, or, for several replicas, an embedded etcd
// it adds to base, closed by stop.
func startStore(cfg config, base map[string]string, work string) (mode string, stop func(), err error) {
	if cfg.replicas <= 1 {
		return "one process on bbolt", func() {}, nil
	}
	etcd, err := startEtcd(filepath.Join(work, "etcd"))
	if err != nil {
		return "", nil, err
	}
	base["PINPLAN_ETCD_ENDPOINTS"] = etcd.Endpoint
	base["PINPLAN_ETCD_PREFIX"] = "/pinplan/"
	base["PINPLAN_LEASE_TTL"] = cfg.leaseTTL.String()
	return fmt.Sprintf("%d replicas on an embedded etcd", cfg.replicas), etcd.Close, nil
}

// outputDir makes the run's output folder (out, or a new temporary one)
// with an empty logs folder in it, and returns its absolute path.
func outputDir(out string) (string, error) {
	var err error
	if out == "" {
		if out, err = os.MkdirTemp("", "pinplan-soak-"); err != nil {
			return "", err
		}
	} else if out, err = filepath.Abs(out); err != nil {
		return "", err
	}
	os.RemoveAll(filepath.Join(out, "logs")) // an earlier run's, replaced
	if err := os.MkdirAll(filepath.Join(out, "logs"), 0o755); err != nil {
		return "", err
	}
	return out, nil
}

// botBinary is the bot to run: bot, or ./cmd/bot built into work.
func botBinary(ctx context.Context, bot, root, work string, say func(string, ...any)) (string, error) {
	if bot != "" {
		return bot, nil
	}
	binary := filepath.Join(work, "bot")
	say("building ./cmd/bot")
	build := exec.CommandContext(ctx, "go", "build", "-o", binary, "./cmd/bot")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/bot: %v\n%s", err, out)
	}
	return binary, nil
}

// mcpServer is the path of the reference MCP filesystem server, mcp,
// taken from root if relative, which must be installed.
func mcpServer(mcp, root string) (string, error) {
	if !filepath.IsAbs(mcp) {
		mcp = filepath.Join(root, mcp)
	}
	if _, err := os.Stat(mcp); err != nil {
		return "", fmt.Errorf("the reference MCP filesystem server is not installed (%v): run .ci/run, or name it with -mcp", err)
	}
	return mcp, nil
}

// writeFiles makes the folder the bots' MCP server serves, with the
// file the threads read, and returns its path.
func writeFiles(work string) (string, error) {
	files := filepath.Join(work, "files")
	if err := os.MkdirAll(files, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(files, "notes.txt"), []byte("release on friday\n"), 0o644); err != nil {
		return "", err
	}
	return files, nil
}

// botEnv writes the bots' config file (the MCP server on files) and
// returns the environment every bot shares: the fakes, the tokens and
// the run's settings.
func botEnv(cfg config, fk *fakes, getenv func(string) string, mcpPath, files, work string) (map[string]string, error) {
	toml := fmt.Sprintf("[mcp.fs]\ncommand = [%q, %q]\ntools = { read_text_file = \"allow\", list_directory = \"allow\", write_file = \"ask\" }\n", mcpPath, files)
	tomlPath := filepath.Join(work, "pinplan.toml")
	if err := os.WriteFile(tomlPath, []byte(toml), 0o600); err != nil {
		return nil, err
	}
	base := map[string]string{
		"PATH": getenv("PATH"), "HOME": getenv("HOME"),
		"PINPLAN_HTTP_ADDR": "127.0.0.1:0", "PINPLAN_WEB_TOKEN": webToken,
		"OPENAI_BASE_URL": fk.ms.URL + "/v1", "OPENAI_API_KEY": "sk-soak",
		"SLACK_BOT_TOKEN": "xoxb-soak", "SLACK_APP_TOKEN": "xapp-soak", "SLACK_API_URL": fk.ss.URL + "/api/",
		"DISCORD_BOT_TOKEN": "OTAwMDAwMDAwMDAwMDAwMDAx.fake.token", "DISCORD_API_URL": fk.ds.URL,
		"PINPLAN_CONFIG": tomlPath, "PINPLAN_LOG_LEVEL": "info",
		"PINPLAN_SLACK_EDITS_PER_MINUTE": fmt.Sprint(cfg.slackEditsPerMin),
	}
	if cfg.godebug != "" {
		base["GODEBUG"] = cfg.godebug
	}
	if cfg.retention > 0 {
		base["PINPLAN_RETENTION"] = cfg.retention.String()
	}
	return base, nil
}

// slotEnv is the environment of a slot's bot: base, with one bbolt file
// for the one process, or a replica id for each of several replicas.
func slotEnv(replicas int, base map[string]string, work string) func(slot int) map[string]string {
	return func(slot int) map[string]string {
		e := map[string]string{}
		for k, v := range base {
			e[k] = v
		}
		if replicas > 1 {
			e["PINPLAN_REPLICA_ID"] = fmt.Sprint("r", slot)
			e["PINPLAN_DB"] = filepath.Join(work, fmt.Sprintf("unused-%d.db", slot))
		} else {
			e["PINPLAN_DB"] = filepath.Join(work, "pinplan.db")
		}
		return e
	}
}

// soak is one run once its fakes and bots are set up: what the load, the
// drain and the report share.
type soak struct {
	cfg     config
	say     func(format string, a ...any)
	stdout  io.Writer
	client  *http.Client
	threads []*thread
	flt     *faults
	fk      *fakes
	sup     *supervisor
}

// startBots starts every slot and waits until each is ready (its MCP
// server and its Socket Mode connection), the Discord gateway is
// connected, and every process has counted its goroutines idle: the
// baseline it returns. The supervisor's times count from then.
func (sk *soak) startBots(ctx context.Context) ([]slotReading, error) {
	slack, sup := sk.fk.slack, sk.sup
	for slot := range sk.cfg.replicas {
		before := slack.Connected()
		p, err := sup.start(ctx, slot)
		if err != nil {
			return nil, fmt.Errorf("start slot %d: %w", slot, err)
		}
		if err := waitReady(ctx, sk.client, p, webToken, 60*time.Second, "mcp fs: ready"); err != nil {
			return nil, fmt.Errorf("slot %d: the MCP server: %w", slot, err)
		}
		if err := waitUntil(ctx, 30*time.Second, func() bool { return slack.Connected() > before }); err != nil {
			return nil, fmt.Errorf("slot %d: no Socket Mode connection: %w", slot, err)
		}
	}
	if err := waitUntil(ctx, 30*time.Second, func() bool { return sk.fk.dc.Connected() > 0 }); err != nil {
		return nil, fmt.Errorf("no Discord gateway connection: %w", err)
	}
	// The idle baseline: every process has counted its goroutines since
	// it was ready.
	readyAt := time.Now()
	if err := waitUntil(ctx, 30*time.Second, func() bool { return sup.goroutinesSince(ctx, readyAt) }); err != nil {
		return nil, fmt.Errorf("no goroutine count from the bots: %w", err)
	}
	baseline := sup.snapshot(ctx)
	if err := sup.goroutineDump(ctx, 0, filepath.Join(sk.cfg.out, "goroutines-0-before.txt")); err != nil {
		sk.say("no goroutine dump: %v", err)
	}
	sup.mu.Lock()
	sup.origin = time.Now()
	sup.mu.Unlock()
	return baseline, nil
}

// exercise runs the load from start: faults, kills, samples and the
// threads' drivers; then the drain, until the bots are quiet. It returns
// the driver, the time from start and the goroutines idle again. Every
// goroutine is waited for on the way out.
func (sk *soak) exercise(ctx context.Context, start time.Time) (d *driver, wall time.Duration, after []slotReading, err error) {
	cfg := sk.cfg
	var wg sync.WaitGroup
	defer wg.Wait()
	loadCtx, endLoad := context.WithTimeout(ctx, cfg.duration)
	defer endLoad()
	sampleCtx, endSamples := context.WithCancel(ctx)
	defer endSamples()
	sk.flt.on.Store(true)
	sk.background(&wg, loadCtx, sampleCtx, start)
	killed := make(chan struct{})
	go func() { defer close(killed); killer(loadCtx, ctx, sk.sup, cfg, sk.inFlight) }()
	defer func() { endLoad(); <-killed }()

	driveCtx, endDrive := context.WithCancel(ctx)
	d = &driver{platforms: map[string]platform{"slack": &slackPlatform{s: sk.fk.slack}, "discord": &discordPlatform{s: sk.fk.dc}}, timeout: cfg.wait, poll: time.Second}
	var drivers sync.WaitGroup
	defer func() { endDrive(); drivers.Wait() }()
	for _, th := range sk.threads {
		if sleepCtx(loadCtx, time.Until(start.Add(th.Start))) != nil {
			break
		}
		drivers.Add(1)
		go func() {
			defer drivers.Done()
			d.run(driveCtx, th)
		}()
	}
	<-loadCtx.Done()
	sk.flt.on.Store(false)
	<-killed // a replica it killed last is started again
	if ctx.Err() != nil {
		return nil, 0, nil, context.Cause(ctx)
	}
	sk.say("load over after %s; draining (at most %s)", time.Since(start).Round(time.Second), cfg.drain)
	if err := sk.drain(ctx, &drivers, endDrive); err != nil {
		return nil, 0, nil, err
	}
	for slot := range cfg.replicas { // a replica killed at the end is back for the last readings
		if sk.sup.proc(slot) == nil {
			sk.sup.start(ctx, slot)
		}
	}
	// Quiet: nothing new from the bots for 5 s (a duplicate would show by
	// then), at most 60 s.
	quiet(ctx, sk.fk.slack, sk.fk.dc, 5*time.Second, 60*time.Second)
	wall = time.Since(start)
	after = sk.idleAgain(ctx)
	endSamples()
	wg.Wait()
	return d, wall, after, nil
}

// background starts, in wg, what runs beside the load: the sampler (until
// sampleCtx ends), the faults and the progress lines (until loadCtx
// ends), and slot 0's heap profiles at the ends of the memory window
// (rssGrowth).
func (sk *soak) background(wg *sync.WaitGroup, loadCtx, sampleCtx context.Context, start time.Time) {
	cfg := sk.cfg
	wg.Add(3)
	go func() { defer wg.Done(); sk.sup.sampler(sampleCtx, cfg.sampleEvery) }()
	go func() {
		defer wg.Done()
		sk.flt.loop(loadCtx, sk.fk.slack, sk.fk.dc, cfg.burstEvery, cfg.burstFor, cfg.dropEvery, cfg.refreshEvery)
	}()
	go func() { defer wg.Done(); progress(loadCtx, sk.stdout, sk.threads, start, cfg.duration) }()
	wg.Go(func() {
		for _, at := range []struct {
			d    time.Duration
			name string
		}{{cfg.duration / 6, "from"}, {cfg.duration, "to"}} {
			if sleepCtx(sampleCtx, time.Until(start.Add(at.d))) != nil {
				return
			}
			path := filepath.Join(cfg.out, "heap-0-"+at.name+".pb.gz")
			if err := sk.sup.heapProfile(sampleCtx, 0, path); err != nil {
				sk.say("no heap profile %s: %v", path, err)
			}
		}
	})
}

// inFlight counts the threads under way.
func (sk *soak) inFlight() int {
	n := 0
	for _, th := range sk.threads {
		th.mu.Lock()
		if th.started && !th.finished {
			n++
		}
		th.mu.Unlock()
	}
	return n
}

// drain waits for the drivers for at most cfg.drain; then those still
// waiting are ended (endDrive) and counted as they are.
func (sk *soak) drain(ctx context.Context, drivers *sync.WaitGroup, endDrive context.CancelFunc) error {
	drained := make(chan struct{})
	go func() { drivers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(sk.cfg.drain):
		sk.say("drain time is up; threads still waiting are counted as they are")
		endDrive()
		<-drained
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return nil
}

// report accounts for every thread, stops the bots, writes the report
// and its plot to cfg.out and prints it; it fails the run when something
// was lost or delivered twice, or a Slack call was sent inside a
// Retry-After.
func (sk *soak) report(mode string, start time.Time, wall time.Duration, d *driver, baseline, after []slotReading) error {
	turns, replies, plans := scan(sk.threads, d.platforms)
	rep := buildReport(sk.cfg, mode, start, wall, sk.threads, turns, replies, plans, sk.sup, sk.flt, sk.fk.slack, sk.fk.dc, baseline, after)
	sk.sup.stopAll(15 * time.Second)
	if err := rep.write(sk.cfg.out); err != nil {
		return err
	}
	rep.print(sk.stdout)
	return rep.verdict(filepath.Join(sk.cfg.out, "report.json"))
}

// idleAgain counts the goroutines once more, idle again after the
// quiet, and dumps slot 0's.
func (sk *soak) idleAgain(ctx context.Context) []slotReading {
	idleAt := time.Now()
	waitUntil(ctx, 30*time.Second, func() bool { return sk.sup.goroutinesSince(ctx, idleAt) })
	after := sk.sup.snapshot(ctx)
	if err := sk.sup.goroutineDump(ctx, 0, filepath.Join(sk.cfg.out, "goroutines-0-after.txt")); err != nil {
		sk.say("no goroutine dump: %v", err)
	}
	return after
}

// killer kills a slot every cfg.killEvery until load ends: the one
// process, started again at once, or a replica other than 0, started
// again after cfg.restartAfter. inFlight counts the threads under way,
// for the kill's event.
func killer(load, ctx context.Context, sup *supervisor, cfg config, inFlight func() int) {
	if cfg.killEvery <= 0 {
		return
	}
	t := time.NewTicker(cfg.killEvery)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-load.Done():
			return
		case <-t.C:
		}
		if end, ok := load.Deadline(); ok && time.Until(end) < 5*time.Second {
			return // nothing left of the load to see the kill in
		}
		slot, pause := 0, time.Duration(0)
		if cfg.replicas > 1 {
			slot, pause = 1+n%(cfg.replicas-1), cfg.restartAfter
		}
		sup.kill(ctx, slot, fmt.Sprintf("SIGKILL with %d threads under way", inFlight()))
		if sleepCtx(ctx, pause) != nil {
			return
		}
		if _, err := sup.start(ctx, slot); err != nil {
			sup.logEvent(slot, 0, "exit", "start after the kill failed: "+err.Error())
		}
	}
}

// progress prints a line a minute while the load runs.
func progress(ctx context.Context, w io.Writer, threads []*thread, start time.Time, total time.Duration) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		started, finished := 0, 0
		for _, th := range threads {
			th.mu.Lock()
			if th.started {
				started++
			}
			if th.finished {
				finished++
			}
			th.mu.Unlock()
		}
		fmt.Fprintf(w, "soak: %s of %s: %d threads started, %d finished\n", time.Since(start).Round(time.Second), total, started, finished)
	}
}

// quiet waits until neither fake has taken a call for d, at most max.
func quiet(ctx context.Context, slack *fakeslack.Server, dc *fakediscord.Server, d, max time.Duration) {
	deadline := time.Now().Add(max)
	last, lastAt := -1, time.Now()
	for time.Now().Before(deadline) {
		n := len(slack.Calls("chat.")) + len(dc.Calls("messages"))
		if n != last {
			last, lastAt = n, time.Now()
		} else if time.Since(lastAt) >= d {
			return
		}
		if sleepCtx(ctx, 500*time.Millisecond) != nil {
			return
		}
	}
}

func waitUntil(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", d)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// moduleRoot is the folder of go.mod, from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/pinplan/pinplan") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run the soak from inside the pinplan module (no go.mod of github.com/pinplan/pinplan above the working directory)")
		}
		dir = parent
	}
}

// needSchedtrace starts the bot once on its own (a temporary database,
// no platform, no model) and reads its /metrics: without go_goroutines,
// goroutines are counted from the runtime's scheduler trace.
func needSchedtrace(ctx context.Context, binary, work string, client *http.Client, getenv func(string) string) (bool, error) {
	dir := filepath.Join(work, "probe")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	env := map[string]string{"PATH": getenv("PATH"), "HOME": getenv("HOME"),
		"PINPLAN_DB": filepath.Join(dir, "probe.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0", "PINPLAN_WEB_TOKEN": webToken}
	p, err := startBot(ctx, binary, env,
		filepath.Join(dir, "probe.log"), false, -1, 0)
	if err != nil {
		return false, fmt.Errorf("probe the bot: %w", err)
	}
	defer p.kill()
	s, err := fetchMetrics(ctx, client, p.url, webToken)
	if err != nil {
		return false, fmt.Errorf("probe the bot's /metrics: %w", err)
	}
	_, has := s.values["go_goroutines"]
	return !has, nil
}

// fakes are the loopback fakes of the run, each served behind the front
// that injects its faults.
// inFlightGrace is the fake Slack's InFlightGrace: the bot edits several
// plans at once, each on a connection of its own, and the calls that
// reach the fake just after a 429 went out on another connection were
// sent before the bot read it (the soak and the bot share two loaded
// cores, so that trip takes milliseconds). A call on the 429's own
// connection, or later than this, is sent against it and fails the run.
const inFlightGrace = 25 * time.Millisecond

type fakes struct {
	slack      *fakeslack.Server
	dc         *fakediscord.Server
	ss, ds, ms *httptest.Server // Slack, Discord and the model
}

func startFakes(threads []*thread, flt *faults, park time.Duration) *fakes {
	f := &fakes{slack: &fakeslack.Server{InFlightGrace: inFlightGrace}, dc: &fakediscord.Server{HeartbeatInterval: 5 * time.Second}}
	f.slack.AddUser(slackUser, "ann")
	byName := map[string]*thread{}
	for _, th := range threads {
		byName[th.Name] = th
		if th.Platform == "discord" {
			f.dc.AddChannel(th.Channel, 0, "G1")
		}
	}
	m := &model{threads: byName}
	f.ss = httptest.NewServer(flt.slackFront(f.slack))
	f.ds = httptest.NewServer(flt.discordFront(f.dc))
	f.ms = httptest.NewServer(&modelFront{fake: &fakeopenai.Server{Respond: m.respond, NoRecord: true}, model: m, faults: flt, parkFor: park})
	return f
}

// Close closes the fakes' connections, then their servers.
func (f *fakes) Close() {
	f.slack.Close()
	f.ss.Close()
	f.dc.Close()
	f.ds.Close()
	f.ms.Close()
}
