package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"image/png"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/todo"
)

func TestQuantile(t *testing.T) {
	// 100 observations: 50 under 0.1 s, 40 in (0.1, 0.2], 9 in (0.2, 0.4], 1 over 0.4.
	h := &histogram{Bounds: []float64{0.1, 0.2, 0.4, math.Inf(1)}, Counts: []float64{50, 90, 99, 100}}
	tests := []struct {
		name string
		h    *histogram
		q    float64
		want float64
	}{
		{"median at a bucket's top", h, 0.5, 0.1},
		{"inside the first bucket, from 0", h, 0.25, 0.05},
		{"inside a middle bucket", h, 0.7, 0.15},
		{"p99 at the top of the third", h, 0.99, 0.4},
		{"in +Inf: the highest finite bound", h, 0.999, 0.4},
		{"one bucket", &histogram{Bounds: []float64{1, math.Inf(1)}, Counts: []float64{4, 4}}, 0.5, 0.5},
		{"empty buckets skipped", &histogram{Bounds: []float64{0.1, 0.2, 0.4, math.Inf(1)}, Counts: []float64{0, 0, 10, 10}}, 0.5, 0.3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.h.Quantile(tt.q); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
			}
		})
	}
	if got := (&histogram{}).Quantile(0.5); !math.IsNaN(got) {
		t.Errorf("Quantile of no observations = %v, want NaN", got)
	}
	if l := latencyOf(nil); l.P50 != nil || l.Count != 0 {
		t.Errorf("latencyOf(nil) = %+v, want no quantiles", l)
	}
}

func TestParseAndMergeMetrics(t *testing.T) {
	text := `# HELP pinplan_reply_delivery_seconds Time from an answer to the platform accepting it.
# TYPE pinplan_reply_delivery_seconds histogram
pinplan_reply_delivery_seconds_bucket{platform="slack",le="0.001"} 3
pinplan_reply_delivery_seconds_bucket{platform="slack",le="0.002"} 5
pinplan_reply_delivery_seconds_bucket{platform="slack",le="+Inf"} 6
pinplan_reply_delivery_seconds_sum{platform="slack"} 1.5
pinplan_reply_delivery_seconds_count{platform="slack"} 6
pinplan_reply_delivery_seconds_bucket{le="0.001",platform="discord"} 1
pinplan_reply_delivery_seconds_bucket{le="0.002",platform="discord"} 1
pinplan_reply_delivery_seconds_bucket{le="+Inf",platform="discord"} 2
pinplan_model_rounds_total 41
pinplan_mcp_calls_total{outcome="ok",server="fs",tool="write_file"} 2
pinplan_mcp_calls_total{outcome="ok",server="fs",tool="read_text_file"} 3
go_goroutines 57
`
	s := parseMetrics(text)
	if got := s.values["pinplan_model_rounds_total"]; got != 41 {
		t.Errorf("rounds = %v, want 41", got)
	}
	if got := s.values["go_goroutines"]; got != 57 {
		t.Errorf("go_goroutines = %v, want 57", got)
	}
	if got := s.sumPrefix("pinplan_mcp_calls_total"); got != 5 {
		t.Errorf("mcp calls over their labels = %v, want 5", got)
	}
	slack := s.hists[`pinplan_reply_delivery_seconds{platform="slack"}`]
	if slack == nil || slack.Total() != 6 || len(slack.Bounds) != 3 || !math.IsInf(slack.Bounds[2], 1) {
		t.Fatalf("slack histogram = %+v, want 3 buckets and 6 observations", slack)
	}
	all := s.histPrefix("pinplan_reply_delivery_seconds")
	if got, want := all.Counts, []float64{4, 6, 8}; !equalFloats(got, want) {
		t.Errorf("merged counts = %v, want %v", got, want)
	}
	// Two runs of one process add up, bucket by bucket.
	twice := mergeHist(mergeHist(nil, slack), slack)
	if got, want := twice.Counts, []float64{6, 10, 12}; !equalFloats(got, want) {
		t.Errorf("two runs' counts = %v, want %v", got, want)
	}
	if slack.Counts[0] != 3 {
		t.Error("merging changed its input")
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAccount(t *testing.T) {
	tests := []struct {
		name    string
		turns   []turnResult
		replies []replyResult
		plans   []planResult
		want    tally
	}{
		{
			name:  "every answer once",
			turns: []turnResult{{Tag: "t0m1", Want: true, Answers: 1}, {Tag: "t1m1", Want: true, Answers: 1}},
			want:  tally{AnswersWanted: 2, AnswersOnce: 2},
		},
		{
			name:  "a lost answer and a doubled one",
			turns: []turnResult{{Tag: "t0m1", Want: true, Answers: 0}, {Tag: "t1m1", Want: true, Answers: 3}, {Tag: "t2m1", Want: true, Answers: 1}},
			want:  tally{AnswersWanted: 3, AnswersOnce: 1, AnswersLost: 1, AnswersDuplicated: 2, Lost: 1, Duplicated: 2},
		},
		{
			name: "stopped turns want no answer",
			turns: []turnResult{{Tag: "t0m1", Stopped: true, Answers: 0}, {Tag: "t1m1", Stopped: true, Answers: 1},
				{Tag: "t2m1", Stopped: true, Answers: 2}},
			want: tally{StopsSent: 3, StopsIgnored: 2, AnswersDuplicated: 1, Duplicated: 1},
		},
		{
			name:    "control replies",
			replies: []replyResult{{Word: "stop", Sent: 1, Got: 1}, {Word: "reset", Sent: 1, Got: 0}, {Word: "reset", Sent: 1, Got: 2}},
			want:    tally{RepliesWanted: 3, RepliesLost: 1, RepliesDuplicated: 1, Lost: 1, Duplicated: 1},
		},
		{
			name:  "a plan off its last revision is lost",
			plans: []planResult{{Thread: "t0", OK: true}, {Thread: "t1", OK: false}},
			want:  tally{PlansChecked: 2, PlansOnLast: 1, PlansOff: 1, Lost: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := account(tt.turns, tt.replies, tt.plans); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCheckPlan(t *testing.T) {
	want := []todo.Item{{Content: "t0001 read the notes", Status: todo.Completed}, {Content: "t0001 draft the change", Status: todo.InProgress}, {Content: "t0001 ship it", Status: todo.Pending}}
	slackText := "Plan · 1/3 done\n✅ t0001 read the notes\n↳ fs__read_text_file\n⏸️ t0001 draft the change\n⬜ t0001 ship it\nUpdated 2026-01-01 10:00:00 UTC · revision 3 · stopped by ann · 2 open items left"
	discordText := "### Plan · 1/3 done\n✅ ~~t0001 read the notes~~\n🔄 **t0001 draft the change**\n⬜ t0001 ship it\n-# Updated 2026-01-01 10:00:00 UTC · revision 3 · done"
	// A steerable plan on Discord numbers its items (DESIGN §19).
	numbered := "### Plan · 1/3 done\n✅ 1. ~~t0001 read the notes~~\n🔄 2. **t0001 draft the change**\n⬜ 3. t0001 ship it\n-# Updated 2026-01-01 10:00:00 UTC · revision 3 · done"
	older := "Plan · 0/3 done\n🔄 t0001 read the notes\n⬜ t0001 draft the change\n⬜ t0001 ship it\nUpdated 2026-01-01 09:59:00 UTC · revision 2 · working"
	tests := []struct {
		name   string
		msgs   []botMsg
		state  string
		ok     bool
		gotRev int
	}{
		{"slack, stopped", []botMsg{{Text: slackText, Plan: true}}, "stopped", true, 3},
		{"discord, done", []botMsg{{Text: discordText, Plan: true}}, "done", true, 3},
		{"discord, numbered", []botMsg{{Text: numbered, Plan: true}}, "done", true, 3},
		{"stopped wanted, done shown", []botMsg{{Text: discordText, Plan: true}}, "stopped", false, 3},
		{"an older revision", []botMsg{{Text: older, Plan: true}}, "done", false, 2},
		{"the newest plan message counts", []botMsg{{Text: older, Plan: true}, {Text: "a reply", Reply: true}, {Text: discordText, Plan: true}}, "done", true, 3},
		{"no plan message", []botMsg{{Text: "a reply", Reply: true}}, "done", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := checkPlan("t0001", tt.msgs, want, tt.state)
			if r.OK != tt.ok || r.Revision != tt.gotRev {
				t.Errorf("got ok %v revision %d (%s), want ok %v revision %d", r.OK, r.Revision, r.Why, tt.ok, tt.gotRev)
			}
		})
	}
}

func TestModelRepliesByStep(t *testing.T) {
	threads := newThreads(20, time.Minute, 0.2, 4, 7, t.TempDir())
	m := &model{threads: map[string]*thread{}}
	var th *thread
	for _, x := range threads {
		m.threads[x.Name] = x
		if x.Kind == kindPlan && th == nil {
			th = x
		}
	}
	if th == nil {
		t.Fatal("no plan thread in the seed's 20")
	}
	tr := th.Turns[0]
	req := &openai.ChatCompletionRequest{Messages: []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: "system"},
		{Role: openai.ChatMessageRoleUser, Content: "ann: " + tr.Text},
	}}
	var last todo.Item
	for step := range len(tr.Replies) {
		r := m.respond(req)
		if again := m.respond(req); again.Content != r.Content || len(again.ToolCalls) != len(r.ToolCalls) {
			t.Fatalf("step %d: a request sent again got another reply", step)
		}
		msg := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: r.Content}
		for _, c := range r.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{ID: "c", Function: openai.FunctionCall{Name: c.Name, Arguments: c.Arguments}})
		}
		req.Messages = append(req.Messages, msg)
		if len(r.ToolCalls) > 0 {
			req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: "c", Content: "ok"})
			if r.ToolCalls[0].Name == todo.ToolName {
				items, _ := todo.Parse(r.ToolCalls[0].Arguments)
				last = items[len(items)-1]
			}
		}
	}
	if got := req.Messages[len(req.Messages)-1].Content; got != tr.Marker+": all done, see the plan above." {
		t.Errorf("the turn ends with %q, want its answer", got)
	}
	if last.Status != todo.Completed || th.lastPlan[len(th.lastPlan)-1] != last {
		t.Errorf("last revision %+v, recorded %+v: want the last written, all completed", last, th.lastPlan)
	}
}

func TestLiveG(t *testing.T) {
	tests := []struct {
		line       string
		live, read bool
	}{
		{"  G1: status=4(chan receive) m=nil lockedm=nil", true, true},
		{"  G17: status=6() m=nil lockedm=nil", false, true},
		{"  G18: status=4100(select) m=nil lockedm=nil", true, true}, // 0x1004, being scanned
		{"  G19: status=11() m=nil lockedm=nil", false, true},
		{"  Gx: garbled", false, false},
	}
	for _, tt := range tests {
		if live, ok := liveG(tt.line); live != tt.live || ok != tt.read {
			t.Errorf("liveG(%q) = %v, %v; want %v, %v", tt.line, live, ok, tt.live, tt.read)
		}
	}
}

func TestPlotIsPNG(t *testing.T) {
	var samples []sample
	for i := range 40 {
		samples = append(samples, sample{T: float64(i * 10), Slot: i % 2, Run: i / 20, RSSKB: int64(30000 + 50*i), Goroutines: 40 + i%5})
	}
	samples = append(samples, sample{T: 5, Slot: 0, RSSKB: 31000, Goroutines: -1})
	var buf bytes.Buffer
	if err := plot(&buf, samples, []event{{T: 200, What: "kill"}}); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("the plot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != plotW || b.Dy() != plotH {
		t.Errorf("size %v, want %dx%d", b, plotW, plotH)
	}
	coloured := 0
	for y := 0; y < plotH; y += 2 {
		for x := 0; x < plotW; x += 2 {
			r, g, b, _ := img.At(x, y).RGBA()
			if r != g || g != b {
				coloured++
			}
		}
	}
	if coloured < 100 {
		t.Errorf("%d coloured pixels: the lines are missing", coloured)
	}
	// No samples at all still draws the axes.
	buf.Reset()
	if err := plot(&buf, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&buf); err != nil {
		t.Errorf("the empty plot is not a PNG: %v", err)
	}
}

func TestRSSGrowth(t *testing.T) {
	var samples []sample
	for i := 0; i <= 60; i++ { // one sample a minute of an hour's load, slot 0 growing 5 MB
		samples = append(samples, sample{T: float64(i * 60), Slot: 0, RSSKB: int64(100000 + 100*i), AnonKB: int64(40000 + 10*i), NextGCKB: int64(8000 + 2*i)})
		run := 0
		if i > 30 {
			run = 1
		}
		samples = append(samples, sample{T: float64(i * 60), Slot: 1, Run: run, RSSKB: 90000})
	}
	g := rssGrowth(samples, 2, time.Hour, time.Minute)
	if g[0].Percent == nil {
		t.Fatalf("slot 0: %s", g[0].Note)
	}
	// Medians over three minutes at minute 10 (10..13 → 101150) and the end (57..60 → 105850).
	if want := (105850.0 - 101150) / 101150 * 100; math.Abs(*g[0].Percent-want) > 0.01 {
		t.Errorf("slot 0 growth %.3f%%, want %.3f%%", *g[0].Percent, want)
	}
	// The anonymous part on its own: 10..13 → 40115, 57..60 → 40585.
	if want := (40585.0 - 40115) / 40115 * 100; g[0].AnonPercent == nil || math.Abs(*g[0].AnonPercent-want) > 0.01 {
		t.Errorf("slot 0 anonymous growth %v, want %.3f%%", g[0].AnonPercent, want)
	}
	// The heap goal: 10..13 → 8023, 57..60 → 8117.
	if want := (8117.0 - 8023) / 8023 * 100; g[0].GoalPercent == nil || math.Abs(*g[0].GoalPercent-want) > 0.01 {
		t.Errorf("slot 0 heap goal growth %v, want %.3f%%", g[0].GoalPercent, want)
	}
	if g[1].Percent != nil || g[1].GoalPercent != nil {
		t.Errorf("slot 1 was killed in the window, yet got growth %v, heap goal %v", g[1].Percent, g[1].GoalPercent)
	}
}

func TestRetentionDeletes(t *testing.T) {
	dir := t.TempDir()
	logs := map[string]string{
		"bot-slot0.log": `time=2026-12-01T22:49:43.371Z level=INFO msg="pinplan started" resumed=0
time=2026-12-01T22:51:43.371Z level=INFO msg="deleted idle sessions" count=12 retention=2m0s
time=2026-12-01T22:52:43.371Z level=INFO msg="deleted idle sessions" count=3 retention=2m0s
`,
		"bot-slot1.log": `time=2026-12-01T22:53:43.371Z level=INFO msg="deleted idle sessions" count=5 retention=2m0s
time=2026-12-01T22:53:43.371Z level=WARN msg="delete idle sessions" err="store: closed"
`,
	}
	for name, text := range logs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if got := retentionDeletes(dir); got != 20 {
		t.Errorf("retentionDeletes = %d, want 20 (12+3+5)", got)
	}
}

// TestScanFromTheFakes posts what a bot would into the real fakes (an
// answer twice, one never, a plan on its last revision and one not) and
// checks the accounting reads them so.
func TestScanFromTheFakes(t *testing.T) {
	slack := &fakeslack.Server{}
	ss := httptest.NewServer(slack)
	defer ss.Close()
	dc := &fakediscord.Server{}
	dc.AddChannel("DC0002", 0, "G1")
	ds := httptest.NewServer(dc)
	defer ds.Close()

	postSlack := func(channel, thread, text, blocks string) {
		t.Helper()
		form := url.Values{"token": {"xoxb-test"}, "channel": {channel}, "thread_ts": {thread}, "text": {text}}
		if blocks != "" {
			form.Set("blocks", blocks)
		}
		resp, err := http.PostForm(ss.URL+"/api/chat.postMessage", form)
		if err != nil {
			t.Fatal(err)
		}
		var out struct{ OK bool }
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if !out.OK {
			t.Fatalf("chat.postMessage %q was refused", text)
		}
	}
	postDiscord := func(channel string, body map[string]any) {
		t.Helper()
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, ds.URL+"/api/v9/channels/"+channel+"/messages", bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bot test")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("post to Discord: %s", resp.Status)
		}
	}
	sent := func(tag string) *turn {
		return &turn{Tag: tag, Marker: "ANSWER " + tag, sent: true, ParkStep: -1, CardStep: -1}
	}
	items := []todo.Item{{Content: "t0001 read the notes", Status: todo.Completed}, {Content: "t0001 ship it", Status: todo.Completed}}
	one := &thread{Name: "t0001", Platform: "slack", Channel: "C01", Root: "1700000000.000100", started: true,
		Turns: []*turn{sent("t0001m1"), sent("t0001m2")}, lastPlan: items, hasPlan: true, resets: 1}
	two := &thread{Name: "t0002", Platform: "discord", Channel: "DC0002", started: true,
		Turns: []*turn{sent("t0002m1")}, lastPlan: []todo.Item{{Content: "t0002 ship it", Status: todo.Completed}}, hasPlan: true}

	section := `[{"type":"section","text":{"type":"mrkdwn","text":"plan"}}]`
	postSlack("C01", one.Root, "Plan · 2/2 done\n✅ t0001 read the notes\n✅ t0001 ship it\nUpdated 2026-01-01 10:00:00 UTC · revision 4 · done", section)
	postSlack("C01", one.Root, "ANSWER t0001m1: all done, see the plan above.", "")
	postSlack("C01", one.Root, "Started fresh: the earlier conversation and plan are archived.", "")
	postSlack("C01", one.Root, "ANSWER t0001m2: all done, see the plan above.", "")
	postSlack("C01", one.Root, "ANSWER t0001m2: all done, see the plan above.", "") // sent twice
	postSlack("C01", "1700000009.000100", "ANSWER t0001m1: another thread's", "")   // not this thread
	postDiscord("DC0002", map[string]any{"embeds": []any{map[string]any{"title": "Plan · 0/1 done", "description": "🔄 **t0002 ship it**",
		"footer": map[string]any{"text": "Updated 2026-01-01 10:00:00 UTC · revision 1 · working"}}}})
	// t0002m1 is never answered, and its plan stays on revision 1.

	platforms := map[string]platform{"slack": &slackPlatform{s: slack}, "discord": &discordPlatform{s: dc}}
	turns, replies, plans := scan([]*thread{one, two}, platforms)
	got := account(turns, replies, plans)
	want := tally{AnswersWanted: 3, AnswersOnce: 1, AnswersLost: 1, AnswersDuplicated: 1, RepliesWanted: 1,
		PlansChecked: 2, PlansOnLast: 1, PlansOff: 1, Lost: 2, Duplicated: 1}
	if got != want {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if len(plans) != 2 || !plans[0].OK || plans[1].OK || plans[1].Revision != 1 {
		t.Errorf("plans %+v: want t0001 on its last revision and t0002 not", plans)
	}

	// The Slack plan is not pinned yet, then it is (the Discord one is
	// not counted).
	if n, unpinned := unpinnedPlans([]*thread{one, two}, slack); n != 1 || unpinned != 1 {
		t.Errorf("%d Slack plans, %d unpinned; want 1 and 1", n, unpinned)
	}
	var planTS string
	for _, m := range slack.Messages("C01") {
		if strings.HasPrefix(m.Text, "Plan ·") {
			planTS = m.TS
		}
	}
	resp, err := http.PostForm(ss.URL+"/api/pins.add", url.Values{"token": {"xoxb-test"}, "channel": {"C01"}, "timestamp": {planTS}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n, unpinned := unpinnedPlans([]*thread{one, two}, slack); n != 1 || unpinned != 0 {
		t.Errorf("after pins.add: %d Slack plans, %d unpinned; want 1 and 0", n, unpinned)
	}
}

// TestVerdictOnRetryAfter: a Slack call sent after a 429 was answered,
// inside its Retry-After, fails the run (README: a Retry-After is always
// waited out); one already on its way when the 429 was answered does not.
func TestVerdictOnRetryAfter(t *testing.T) {
	slack := &fakeslack.Server{}
	ss := httptest.NewServer(slack)
	defer ss.Close()
	dc := &fakediscord.Server{}
	slack.Limit("chat.update", 1, time.Minute)
	update := func() int {
		t.Helper()
		resp, err := http.PostForm(ss.URL+"/api/chat.update", url.Values{"token": {"xoxb-test"}, "channel": {"C1"}, "ts": {"1.000001"}, "text": {"x"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	update()
	// One on its way: held by the fake while another call is answered 429.
	slack.Delay("chat.update", 300*time.Millisecond, 1)
	held := make(chan int, 1)
	go func() {
		resp, err := http.PostForm(ss.URL+"/api/chat.update", url.Values{"token": {"xoxb-test"}, "channel": {"C1"}, "ts": {"1.000001"}, "text": {"x"}})
		if err != nil {
			held <- 0
			return
		}
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	deadline := time.Now().Add(5 * time.Second)
	for slack.Held("chat.update") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the call on its way was never held")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if status := update(); status != http.StatusTooManyRequests {
		t.Fatalf("chat.update past the limit: HTTP %d, want 429", status)
	}
	<-held
	r := &report{}
	r.countViolations(slack, dc)
	if err := r.verdict("report.json"); err != nil {
		t.Errorf("verdict with only a call in flight at the 429: %v, want a pass", err)
	}

	update() // sent after the 429 came back
	r = &report{}
	r.countViolations(slack, dc)
	err := r.verdict("report.json")
	if !errors.Is(err, errVerdict) || !strings.Contains(err.Error(), "Retry-After") {
		t.Errorf("verdict with a call sent against a Retry-After: %v, want a failure that says so", err)
	}
}
