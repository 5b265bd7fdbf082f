package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/fakeslack"
)

// latency is a histogram's count and quantiles, in seconds (null with no
// observations).
type latency struct {
	Count float64  `json:"count"`
	P50   *float64 `json:"p50_s"`
	P99   *float64 `json:"p99_s"`
}

func latencyOf(h *histogram) latency {
	l := latency{Count: h.Total()}
	if l.Count > 0 {
		p50, p99 := h.Quantile(0.5), h.Quantile(0.99)
		l.P50, l.P99 = &p50, &p99
	}
	return l
}

func (l latency) String() string {
	if l.P50 == nil {
		return "no observations"
	}
	return fmt.Sprintf("p50 %s, p99 %s (%.0f observations)", seconds(*l.P50), seconds(*l.P99), l.Count)
}

func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}

// runMemory is one run of a slot: its RSS and goroutines while it lived.
type runMemory struct {
	Slot          int     `json:"slot"`
	Run           int     `json:"run"`
	PID           int     `json:"pid"`
	FromS         float64 `json:"from_s"`
	ToS           float64 `json:"to_s"`
	RSSFirstKB    int64   `json:"rss_first_kb"`
	RSSLastKB     int64   `json:"rss_last_kb"`
	RSSMaxKB      int64   `json:"rss_max_kb"`
	GoroutinesMax int     `json:"goroutines_max"`
}

// growth is RSS growth over the window the issue sets (minute 10 to the
// end of the load, scaled to -duration: from a sixth of it), for a slot
// whose one run lived through it.
type growth struct {
	Slot      int      `json:"slot"`
	FromS     float64  `json:"from_s"`
	ToS       float64  `json:"to_s"`
	RSSFromKB int64    `json:"rss_from_kb"`
	RSSToKB   int64    `json:"rss_to_kb"`
	Percent   *float64 `json:"percent"`
	// The anonymous part alone (heap and stacks): RSS also counts the
	// pages of the mapped bbolt file, which grow with the file.
	AnonFromKB  int64    `json:"anon_from_kb,omitempty"`
	AnonToKB    int64    `json:"anon_to_kb,omitempty"`
	AnonPercent *float64 `json:"anon_percent,omitempty"`
	// The heap goal (twice the heap the last collection found live):
	// how the Go heap itself moved, without the garbage between
	// collections that RSS also holds.
	GoalFromKB  int64    `json:"heap_goal_from_kb,omitempty"`
	GoalToKB    int64    `json:"heap_goal_to_kb,omitempty"`
	GoalPercent *float64 `json:"heap_goal_percent,omitempty"`
	Note        string   `json:"note,omitempty"`
}

type report struct {
	Command     string         `json:"command"`
	Mode        string         `json:"mode"`
	Flags       map[string]any `json:"flags"`
	GoVersion   string         `json:"go_version"`
	Started     time.Time      `json:"started"`
	WallSeconds float64        `json:"wall_s"` // load and drain
	Threads     struct {
		Planned    int            `json:"planned"`
		Started    int            `json:"started"`
		Finished   int            `json:"finished"`
		Stuck      int            `json:"stuck"` // gave up waiting for something
		ByKind     map[string]int `json:"by_kind"`
		ByPlatform map[string]int `json:"by_platform"`
		Turns      int            `json:"turns"`
	} `json:"threads"`
	Tally    tally        `json:"tally"`
	Problems []string     `json:"problems"` // the first of what went wrong, thread by thread
	PlansOff []planResult `json:"plans_not_on_last_revision"`
	Faults   struct {
		Slack500Injected   int64 `json:"slack_500_injected"`
		Slack500Answered   int   `json:"slack_500_answered"`
		Slack429Answered   int   `json:"slack_429_answered"`
		Discord500Injected int64 `json:"discord_500_injected"`
		Discord500Answered int   `json:"discord_500_answered"`
		Discord429Answered int   `json:"discord_429_answered"`
		SlackCalls         int   `json:"slack_calls"`
		DiscordCalls       int   `json:"discord_calls"`
		Model500           int64 `json:"model_500"`
		ModelSlow          int64 `json:"model_slow"`
		Bursts429          int64 `json:"bursts_429"`
		GatewayDrops       int64 `json:"discord_gateway_drops"`
		SocketRefreshes    int64 `json:"slack_socket_refreshes"`
		Kills              int   `json:"kills"`
		Starts             int   `json:"starts"`
		UnexpectedExits    int   `json:"unexpected_exits"`
	} `json:"faults"`
	RevisionToEdit map[string]latency `json:"revision_to_edit"`
	ReplyDelivery  map[string]latency `json:"reply_delivery"`
	CPU            struct {
		Seconds           float64 `json:"seconds"`
		Rounds            float64 `json:"model_rounds"`
		PerThousandRounds float64 `json:"seconds_per_1000_rounds"`
		RunsScraped       int     `json:"runs_scraped"`
	} `json:"cpu"`
	Memory     []runMemory `json:"memory_by_run"`
	Growth     []growth    `json:"rss_growth"`
	Goroutines struct {
		Source     string        `json:"source"`
		IdleBefore []slotReading `json:"idle_before"`
		IdleAfter  []slotReading `json:"idle_after"`
		Max        int           `json:"max"`
		// Dumps are slot 0's goroutines, grouped by stack, idle before
		// the load and after the drain: what stayed.
		Dumps []string `json:"dumps,omitempty"`
		// SlackPlans and SlackPlansUnpinned: the Slack threads with a
		// plan message, and those whose newest plan message is not
		// pinned at the end. pins.add is Slack's Tier 2 (18 a minute for
		// the workspace, shared by the replicas); a pin still waiting
		// for it holds its plan board's goroutine (issue #41).
		SlackPlans         int `json:"slack_plans"`
		SlackPlansUnpinned int `json:"slack_plans_unpinned"`
	} `json:"goroutines"`
	Violations struct {
		Slack   int `json:"slack"`
		Discord int `json:"discord"`
		// SlackRetryAfter counts the Slack calls sent after a 429 was
		// answered and before its Retry-After ended: they fail the run.
		SlackRetryAfter int `json:"slack_retry_after"`
		// SlackInFlightAt429 counts the calls inside a Retry-After that
		// were on their way before its 429 was answered: not violations.
		SlackInFlightAt429 int            `json:"slack_in_flight_at_429"`
		InFlightExamples   []string       `json:"in_flight_examples"`
		ByKind             map[string]int `json:"by_kind"`
		Examples           []string       `json:"examples"`
	} `json:"violations"`
	SoakCPUSeconds float64 `json:"soak_cpu_s"` // the soak's own, fakes included, for a shared machine
	DiscordMissed  int     `json:"discord_events_missed"`
	Undelivered    float64 `json:"replies_undelivered_metric"`
	ModelOverruns  int     `json:"model_requests_past_script"`
	// RetentionDeleted is how many sessions the bots' retention deleted
	// (-retention), from their logs.
	RetentionDeleted int      `json:"sessions_deleted_by_retention"`
	Samples          []sample `json:"samples"`
	Events           []event  `json:"events"`
	Files            struct {
		Report string `json:"report"`
		Plot   string `json:"plot"`
		Logs   string `json:"logs"`
	} `json:"files"`
}

func buildReport(cfg config, mode string, start time.Time, wall time.Duration, threads []*thread, turns []turnResult, replies []replyResult, plans []planResult,
	sup *supervisor, flt *faults, slack *fakeslack.Server, dc *fakediscord.Server, before, after []slotReading) *report {
	r := &report{Command: "go run ./cmd/soak " + strings.Join(cfg.args, " "), Mode: mode, GoVersion: runtime.Version(), Started: start, WallSeconds: wall.Seconds()}
	r.Flags = map[string]any{"threads": cfg.threads, "duration": cfg.duration.String(), "replicas": cfg.replicas, "kill_every": cfg.killEvery.String(),
		"discord": cfg.discordShare, "platform_500": cfg.platform500, "model_500": cfg.model500, "model_slow": cfg.modelSlow, "seed": cfg.seed,
		"slack_edits_per_minute": cfg.slackEditsPerMin, "lease_ttl": cfg.leaseTTL.String(), "retention": cfg.retention.String(), "godebug": cfg.godebug}
	r.countThreads(threads)
	r.accountFor(turns, replies, plans)
	r.countFaults(flt, slack, dc)
	r.readSupervisor(sup)
	r.Memory = memoryByRun(r.Samples)
	r.Growth = rssGrowth(r.Samples, cfg.replicas, cfg.duration, cfg.sampleEvery)
	r.countGoroutines(cfg.out, sup.schedtrace, threads, slack, before, after)
	r.RetentionDeleted = retentionDeletes(sup.logDir)
	r.countViolations(slack, dc)
	if ticks, err := readCPUTicks(os.Getpid()); err == nil {
		r.SoakCPUSeconds = float64(ticks) / clockTicks
	}
	r.DiscordMissed = dc.Missed()
	return r
}

// countThreads counts the threads started, finished and stuck, by kind
// and platform; a stuck one is a problem.
func (r *report) countThreads(threads []*thread) {
	r.Threads.Planned = len(threads)
	r.Threads.ByKind, r.Threads.ByPlatform = map[string]int{}, map[string]int{}
	for _, th := range threads {
		th.mu.Lock()
		if th.started {
			r.Threads.Started++
			r.Threads.ByKind[th.Kind]++
			r.Threads.ByPlatform[th.Platform]++
		}
		if th.finished && th.stuck == "" {
			r.Threads.Finished++
		}
		if th.stuck != "" {
			r.Threads.Stuck++
			r.Problems = appendCapped(r.Problems, fmt.Sprintf("%s (%s, %s: %s): gave up waiting for %s", th.Name, th.Platform, th.Kind, th.summary(), th.stuck))
		}
		r.ModelOverruns += th.overrun
		th.mu.Unlock()
	}
}

// accountFor tallies what the threads were given: an answer lost, twice or
// after a stop, replies missing and plans not on their last revision
// are problems.
func (r *report) accountFor(turns []turnResult, replies []replyResult, plans []planResult) {
	r.Threads.Turns = len(turns)
	r.Tally = account(turns, replies, plans)
	for _, t := range turns {
		switch {
		case t.Want && t.Answers == 0:
			r.Problems = appendCapped(r.Problems, fmt.Sprintf("%s (%s): answer lost", t.Tag, t.Platform))
		case t.Answers > 1:
			r.Problems = appendCapped(r.Problems, fmt.Sprintf("%s (%s): answered %d times", t.Tag, t.Platform, t.Answers))
		case t.Stopped && t.Answers > 0:
			r.Problems = appendCapped(r.Problems, fmt.Sprintf("%s (%s): answered though stopped", t.Tag, t.Platform))
		}
	}
	for _, rr := range replies {
		if rr.Got != rr.Sent {
			r.Problems = appendCapped(r.Problems, fmt.Sprintf("%s: %d %q sent, %d replies", rr.Thread, rr.Sent, rr.Word, rr.Got))
		}
	}
	r.PlansOff = []planResult{}
	for _, p := range plans {
		if !p.OK && len(r.PlansOff) < 20 {
			r.PlansOff = append(r.PlansOff, p)
		}
	}
}

// countFaults counts the faults injected and the fakes' calls and error
// answers.
func (r *report) countFaults(flt *faults, slack *fakeslack.Server, dc *fakediscord.Server) {
	for _, c := range slack.Calls("") {
		r.Faults.SlackCalls++
		switch c.Status {
		case 500:
			r.Faults.Slack500Answered++
		case 429:
			r.Faults.Slack429Answered++
		}
	}
	for _, c := range dc.Calls("") {
		r.Faults.DiscordCalls++
		switch c.Status {
		case 500:
			r.Faults.Discord500Answered++
		case 429:
			r.Faults.Discord429Answered++
		}
	}
	r.Faults.Slack500Injected, r.Faults.Discord500Injected = flt.slack500.Load(), flt.discord500.Load()
	r.Faults.Model500, r.Faults.ModelSlow = flt.model500s.Load(), flt.modelSlows.Load()
	r.Faults.Bursts429, r.Faults.GatewayDrops, r.Faults.SocketRefreshes = flt.bursts.Load(), flt.drops.Load(), flt.refreshes.Load()
}

// readSupervisor takes the supervisor's samples and events (kills,
// starts and exits counted) and the bots' metrics: latencies, CPU per
// model round, replies undelivered.
func (r *report) readSupervisor(sup *supervisor) {
	sup.mu.Lock()
	r.Samples = append([]sample(nil), sup.samples...)
	r.Events = append([]event(nil), sup.events...)
	sup.mu.Unlock()
	for _, e := range r.Events {
		switch e.What {
		case "kill":
			r.Faults.Kills++
		case "start":
			r.Faults.Starts++
		case "exit":
			r.Faults.UnexpectedExits++
		}
	}

	rte, del, rounds, ticks, scraped := sup.totals()
	r.RevisionToEdit, r.ReplyDelivery = map[string]latency{}, map[string]latency{}
	var rteAll, delAll *histogram
	for _, pl := range []string{"slack", "discord"} {
		r.RevisionToEdit[pl], r.ReplyDelivery[pl] = latencyOf(rte[pl]), latencyOf(del[pl])
		rteAll, delAll = mergeHist(rteAll, rte[pl]), mergeHist(delAll, del[pl])
	}
	r.RevisionToEdit["all"], r.ReplyDelivery["all"] = latencyOf(rteAll), latencyOf(delAll)
	r.CPU.Seconds, r.CPU.Rounds, r.CPU.RunsScraped = float64(ticks)/clockTicks, rounds, scraped
	if rounds > 0 {
		r.CPU.PerThousandRounds = r.CPU.Seconds / rounds * 1000
	}
	r.Undelivered = sup.counter("pinplan_replies_undelivered_total")
}

// countGoroutines reports the goroutines idle before and after, their
// peak in the samples, the dumps of slot 0 in out and the Slack plans
// left unpinned.
func (r *report) countGoroutines(out string, schedtrace bool, threads []*thread, slack *fakeslack.Server, before, after []slotReading) {
	r.Goroutines.Source = "go_goroutines at /metrics"
	if schedtrace {
		r.Goroutines.Source = "GODEBUG=schedtrace=10000,scheddetail=1 (the bot's /metrics has no go_goroutines): live goroutines, runtime ones included"
	}
	r.Goroutines.IdleBefore, r.Goroutines.IdleAfter = before, after
	r.Goroutines.SlackPlans, r.Goroutines.SlackPlansUnpinned = unpinnedPlans(threads, slack)
	for _, name := range []string{"goroutines-0-before.txt", "goroutines-0-after.txt"} {
		if path := filepath.Join(out, name); fileExists(path) {
			r.Goroutines.Dumps = append(r.Goroutines.Dumps, path)
		}
	}
	for _, s := range r.Samples {
		r.Goroutines.Max = max(r.Goroutines.Max, s.Goroutines)
	}
}

// countViolations reads what the fakes hold against the bot.
func (r *report) countViolations(slack *fakeslack.Server, dc *fakediscord.Server) {
	sv, dv := slack.Violations(), dc.Violations()
	r.Violations.Slack, r.Violations.Discord = len(sv), len(dv)
	r.Violations.ByKind = classifyViolations(slack, sv, dv)
	for _, v := range sv {
		if strings.Contains(v, "before Retry-After ended") {
			r.Violations.SlackRetryAfter++
		}
	}
	inFlight := slack.InFlightAtRetryAfter()
	r.Violations.SlackInFlightAt429 = len(inFlight)
	r.Violations.InFlightExamples = inFlight[:min(len(inFlight), 10)]
	for _, v := range append(sv, dv...) {
		if len(r.Violations.Examples) < 10 {
			r.Violations.Examples = append(r.Violations.Examples, v)
		}
	}
}

// verdict is the run's failure (wrapping errVerdict), nil if it passed:
// an answer lost or duplicated, or a Slack call sent against a 429's
// Retry-After (README: a Retry-After is always waited out). path is the
// report's file, named in the error.
func (r *report) verdict(path string) error {
	if r.Tally.Lost > 0 || r.Tally.Duplicated > 0 || r.Violations.SlackRetryAfter > 0 {
		return fmt.Errorf("%w: %d lost, %d duplicated, %d Slack calls sent inside a 429's Retry-After (report %s)",
			errVerdict, r.Tally.Lost, r.Tally.Duplicated, r.Violations.SlackRetryAfter, path)
	}
	return nil
}

func appendCapped(list []string, s string) []string {
	if len(list) >= 50 {
		return list
	}
	return append(list, s)
}

func memoryByRun(samples []sample) []runMemory {
	byRun := map[[2]int]*runMemory{}
	var keys [][2]int
	for _, s := range samples {
		k := [2]int{s.Slot, s.Run}
		m := byRun[k]
		if m == nil {
			m = &runMemory{Slot: s.Slot, Run: s.Run, PID: s.PID, FromS: s.T, RSSFirstKB: s.RSSKB, GoroutinesMax: -1}
			byRun[k] = m
			keys = append(keys, k)
		}
		m.ToS, m.RSSLastKB = s.T, s.RSSKB
		m.RSSMaxKB = max(m.RSSMaxKB, s.RSSKB)
		m.GoroutinesMax = max(m.GoroutinesMax, s.Goroutines)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	out := make([]runMemory, len(keys))
	for i, k := range keys {
		out[i] = *byRun[k]
	}
	return out
}

// rssGrowth compares, for each slot, the median RSS at the start of the
// window (a sixth of the load in: minute 10 of an hour) and at its end,
// each over w (a sixtieth of the load, at least three samples), when one
// run of the slot lived through it.
func rssGrowth(samples []sample, slots int, load, every time.Duration) []growth {
	from, to := load.Seconds()/6, load.Seconds()
	w := max(load.Seconds()/60, 3*every.Seconds())
	var out []growth
	for slot := range slots {
		g := growth{Slot: slot, FromS: from, ToS: to}
		var head, tail, anonHead, anonTail, goalHead, goalTail []float64
		runs := map[int]bool{}
		for _, s := range samples {
			if s.Slot != slot || s.T < from || s.T > to {
				continue
			}
			runs[s.Run] = true
			if s.T <= from+w {
				head = append(head, float64(s.RSSKB))
				if s.AnonKB > 0 {
					anonHead = append(anonHead, float64(s.AnonKB))
				}
				if s.NextGCKB > 0 {
					goalHead = append(goalHead, float64(s.NextGCKB))
				}
			}
			if s.T >= to-w {
				tail = append(tail, float64(s.RSSKB))
				if s.AnonKB > 0 {
					anonTail = append(anonTail, float64(s.AnonKB))
				}
				if s.NextGCKB > 0 {
					goalTail = append(goalTail, float64(s.NextGCKB))
				}
			}
		}
		switch {
		case len(runs) > 1:
			g.Note = "killed within the window: no one process to compare (see memory_by_run)"
		case len(head) == 0 || len(tail) == 0:
			g.Note = "no samples at both ends of the window"
		default:
			g.RSSFromKB, g.RSSToKB = int64(median(head)), int64(median(tail))
			p := (median(tail) - median(head)) / median(head) * 100
			g.Percent = &p
			if len(anonHead) > 0 && len(anonTail) > 0 {
				g.AnonFromKB, g.AnonToKB = int64(median(anonHead)), int64(median(anonTail))
				a := (median(anonTail) - median(anonHead)) / median(anonHead) * 100
				g.AnonPercent = &a
			}
			if len(goalHead) > 0 && len(goalTail) > 0 {
				g.GoalFromKB, g.GoalToKB = int64(median(goalHead)), int64(median(goalTail))
				h := (median(goalTail) - median(goalHead)) / median(goalHead) * 100
				g.GoalPercent = &h
			}
		}
		out = append(out, g)
	}
	return out
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// write saves report.json and the plot in dir.
func (r *report) write(dir string) error {
	r.Files.Report = filepath.Join(dir, "report.json")
	r.Files.Plot = filepath.Join(dir, "rss-goroutines.png")
	r.Files.Logs = filepath.Join(dir, "logs")
	f, err := os.Create(r.Files.Plot)
	if err != nil {
		return err
	}
	if err := plot(f, r.Samples, r.Events); err != nil {
		f.Close()
		return fmt.Errorf("plot: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(r.Files.Report, append(b, '\n'), 0o644)
}

// print writes the summary.
func (r *report) print(w io.Writer) {
	t := r.Tally
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	p("")
	p("== soak: %s, %s", r.Mode, r.Command)
	p("threads: %d started of %d (%d finished, %d gave up waiting), %d turns; by kind %v; by platform %v",
		r.Threads.Started, r.Threads.Planned, r.Threads.Finished, r.Threads.Stuck, r.Threads.Turns, r.Threads.ByKind, r.Threads.ByPlatform)
	p("answers: %d of %d delivered exactly once; %d lost, %d duplicate copies; stops: %d sent, %d answered anyway",
		t.AnswersOnce, t.AnswersWanted, t.AnswersLost, t.AnswersDuplicated, t.StopsSent, t.StopsIgnored)
	p("control replies (stop, reset): %d wanted, %d lost, %d duplicated", t.RepliesWanted, t.RepliesLost, t.RepliesDuplicated)
	p("plans: %d of %d end on the last revision the model wrote (and say done or stopped)", t.PlansOnLast, t.PlansChecked)
	p("LOST %d, DUPLICATED %d", t.Lost, t.Duplicated)
	f := r.Faults
	p("faults: Slack %d of %d calls answered 500 and %d 429; Discord %d of %d answered 500 and %d 429; model %d 500s, %d slow; %d 429 bursts, %d gateway drops, %d Socket Mode refreshes; %d kills, %d starts, %d unexpected exits",
		f.Slack500Answered, f.SlackCalls, f.Slack429Answered, f.Discord500Answered, f.DiscordCalls, f.Discord429Answered, f.Model500, f.ModelSlow, f.Bursts429, f.GatewayDrops, f.SocketRefreshes, f.Kills, f.Starts, f.UnexpectedExits)
	p("revision->edit: all %s; slack %s; discord %s", r.RevisionToEdit["all"], r.RevisionToEdit["slack"], r.RevisionToEdit["discord"])
	p("reply delivery: all %s; slack %s; discord %s", r.ReplyDelivery["all"], r.ReplyDelivery["slack"], r.ReplyDelivery["discord"])
	p("CPU: %.1f s over %.0f model rounds = %.2f s per 1,000 rounds (%d runs read)", r.CPU.Seconds, r.CPU.Rounds, r.CPU.PerThousandRounds, r.CPU.RunsScraped)
	for _, g := range r.Growth {
		if g.Percent != nil {
			p("RSS slot %d: %.1f MiB at %s, %.1f MiB at %s: %+.1f%%", g.Slot, float64(g.RSSFromKB)/1024, seconds(g.FromS), float64(g.RSSToKB)/1024, seconds(g.ToS), *g.Percent)
			if g.AnonPercent != nil {
				p("  of it anonymous (heap, stacks; not the mapped file): %.1f -> %.1f MiB: %+.1f%%", float64(g.AnonFromKB)/1024, float64(g.AnonToKB)/1024, *g.AnonPercent)
			}
			if g.GoalPercent != nil {
				p("  Go heap goal (twice the heap live at the last collection): %.1f -> %.1f MiB: %+.1f%%", float64(g.GoalFromKB)/1024, float64(g.GoalToKB)/1024, *g.GoalPercent)
			}
		} else {
			p("RSS slot %d: %s", g.Slot, g.Note)
		}
	}
	for _, e := range r.Events {
		if e.What != "start" {
			p("  %s slot %d (pid %d) at %s: %s", e.What, e.Slot, e.PID, seconds(e.T), e.Note)
		}
	}
	for _, m := range r.Memory {
		p("  run slot %d #%d (pid %d) %s-%s: RSS %.1f -> %.1f MiB (max %.1f), goroutines max %d", m.Slot, m.Run, m.PID, seconds(m.FromS), seconds(m.ToS),
			float64(m.RSSFirstKB)/1024, float64(m.RSSLastKB)/1024, float64(m.RSSMaxKB)/1024, m.GoroutinesMax)
	}
	p("goroutines (%s): idle before %v, idle after %v, max %d", r.Goroutines.Source, readings(r.Goroutines.IdleBefore), readings(r.Goroutines.IdleAfter), r.Goroutines.Max)
	p("  Slack plans whose newest message is not pinned at the end: %d of %d (pins.add, Tier 2, is 18 a minute for the workspace; a pin still waiting for it costs no goroutine); dumps %v",
		r.Goroutines.SlackPlansUnpinned, r.Goroutines.SlackPlans, r.Goroutines.Dumps)
	p("protocol violations: Slack %d, Discord %d %v; Discord events missed %d; undelivered replies (metric) %.0f; model requests past a script %d",
		r.Violations.Slack, r.Violations.Discord, r.Violations.ByKind, r.DiscordMissed, r.Undelivered, r.ModelOverruns)
	p("  Slack calls sent inside a 429's Retry-After %d (the run fails on any); on their way when the 429 was answered %d (not violations)",
		r.Violations.SlackRetryAfter, r.Violations.SlackInFlightAt429)
	for _, v := range r.Violations.Examples {
		p("  violation: %s", v)
	}
	for _, s := range r.Problems {
		p("  problem: %s", s)
	}
	for _, pl := range r.PlansOff {
		p("  plan %s: %s (revision %d, %q)", pl.Thread, pl.Why, pl.Revision, pl.GotState)
	}
	if cfg := r.Flags["retention"]; cfg != nil && cfg != "0s" {
		p("retention (PINPLAN_RETENTION=%v): %d idle sessions deleted", cfg, r.RetentionDeleted)
	}
	p("the soak's own CPU (fakes and drivers): %.1f s", r.SoakCPUSeconds)
	p("report %s, plot %s, logs %s", r.Files.Report, r.Files.Plot, r.Files.Logs)
}

func readings(rs []slotReading) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("slot %d: %d", r.Slot, r.Goroutines))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// classifyViolations counts the fakes' violations by kind; a Slack call
// made before Retry-After ended is named by its method and, for
// chat.update, by the message it edited (a plan or an approval card).
func classifyViolations(slack *fakeslack.Server, slackV, discordV []string) map[string]int {
	out := map[string]int{}
	var updates []fakeslack.Call
	for _, v := range slackV {
		method, rest, ok := strings.Cut(v, " at ")
		if !ok || !strings.Contains(v, "before Retry-After ended") {
			kind, _, _ := strings.Cut(v, ":")
			out["slack "+kind]++
			continue
		}
		kind := "slack " + method + " before Retry-After"
		if method == "chat.update" {
			if updates == nil {
				updates = slack.Calls("chat.update")
			}
			at, _, _ := strings.Cut(rest, ",")
			kind += " (" + editedKind(slack, updates, at) + ")"
		}
		out[kind]++
	}
	for _, v := range discordV {
		kind, _, _ := strings.Cut(v, ":")
		out["discord "+kind]++
	}
	return out
}

// editedKind finds the chat.update made at `at` (time.StampMilli) and
// says what it edited.
func editedKind(slack *fakeslack.Server, calls []fakeslack.Call, at string) string {
	for _, c := range calls {
		if c.At.Format(time.StampMilli) != at {
			continue
		}
		for _, m := range slack.Messages(c.Params["channel"]) {
			if m.TS != c.Params["ts"] {
				continue
			}
			switch {
			case strings.Contains(m.Text, "Approval needed"):
				return "approval card"
			case footerRE.MatchString(m.Text):
				return "plan"
			}
			return "other message"
		}
	}
	return "unknown message"
}

var deletedLine = regexp.MustCompile(`msg="deleted idle sessions" count=(\d+)`)

// retentionDeletes adds up the sessions the bots' logs in dir say their
// retention deleted.
func retentionDeletes(dir string) int {
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, m := range deletedLine.FindAllSubmatch(b, -1) {
			k, _ := strconv.Atoi(string(m[1]))
			n += k
		}
	}
	return n
}

// unpinnedPlans counts the Slack threads with a plan message and, of
// them, those whose newest plan message is not pinned.
func unpinnedPlans(threads []*thread, slack *fakeslack.Server) (plans, unpinned int) {
	sp := &slackPlatform{s: slack}
	pinned := map[string]map[string]bool{} // by channel
	for _, th := range threads {
		th.mu.Lock()
		started := th.started
		th.mu.Unlock()
		if !started || th.Platform != "slack" {
			continue
		}
		newest := ""
		for _, m := range sp.messages(th) {
			if m.Plan {
				newest = m.ID
			}
		}
		if newest == "" {
			continue
		}
		if pinned[th.Channel] == nil {
			pinned[th.Channel] = map[string]bool{}
			for _, ts := range slack.Pinned(th.Channel) {
				pinned[th.Channel][ts] = true
			}
		}
		plans++
		if !pinned[th.Channel][newest] {
			unpinned++
		}
	}
	return plans, unpinned
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
