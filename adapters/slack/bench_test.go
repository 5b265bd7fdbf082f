package slack

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/chat/chattest"
	"github.com/pinplan/pinplan/internal/fakeslack"
)

type nopHandler struct{}

func (nopHandler) Handle(context.Context, chat.Incoming) error { return nil }
func (nopHandler) Known(string) bool                           { return false }
func (nopHandler) StopSession(context.Context, chat.Click) chat.ClickResult {
	return chat.ClickResult{}
}
func (nopHandler) Rename(string, string) (chat.Thread, bool) { return chat.Thread{}, false }
func (nopHandler) Click(context.Context, chat.Click) chat.ClickResult {
	return chat.ClickResult{Private: "no"}
}
func (nopHandler) Tell(context.Context, chat.Thread, string, string) error { return nil }
func (nopHandler) Post(ctx context.Context, _ chat.Thread, send func(context.Context) error) error {
	return send(ctx)
}

// rig is the real adapter and plan board against the fake Slack.
func rig(b *testing.B, editsPerMinute float64) (*fakeslack.Server, *chat.Router) {
	fake := &fakeslack.Server{}
	srv := httptest.NewServer(fake)
	b.Cleanup(srv.Close)
	a := New(Options{BotToken: "xoxb-bench", APIURL: srv.URL + "/api/", EditsPerMinute: editsPerMinute})
	r := chat.NewRouter(chat.Options{Runner: &chattest.Runner{}, Store: &chattest.Boards{}, Platforms: map[string]chat.Platform{"slack": a}})
	b.Cleanup(r.Close)
	return fake, r
}

func start(r *chat.Router, key string) {
	// Handle records the thread for the session (the runner is not needed).
	th := chat.Thread{Platform: "slack", Key: key, Channel: "C1", ThreadID: "1.1"}
	r.Handle(context.Background(), chat.Incoming{Thread: th, Text: "bench"})
}

// BenchmarkRevisionToUpdate measures the time from a committed revision
// (the event's time) to its chat.update reaching the fake Slack, with no
// rate pressure, one revision at a time.
func BenchmarkRevisionToUpdate(b *testing.B) { revisionToUpdate(b, nil) }

// BenchmarkRevisionToUpdateWithEvidence is BenchmarkRevisionToUpdate with
// evidence under the plan's items (DESIGN §15): the completed item has
// three reads, the one in progress a read and a denied write.
func BenchmarkRevisionToUpdateWithEvidence(b *testing.B) {
	read := agent.Call{Tool: "fs__read_text_file", Server: "fs", Outcome: agent.OutcomeOK, Args: `{"path":"/srv/docs/notes.txt"}`}
	write := agent.Call{Tool: "fs__write_file", Server: "fs", Outcome: agent.OutcomeDenied, Approver: "ann", Args: `{"path":"/srv/docs/out.txt"}`}
	revisionToUpdate(b, func(ev *agent.Event) {
		items := ev.Plan.Items()
		ev.Evidence = agent.Evidence{
			items[0].Content: {Calls: []agent.Call{read, read, read}},
			items[1].Content: {Calls: []agent.Call{read, write}},
		}
		ev.Calls, ev.Approvals = 5, 1
	})
}

// revisionToUpdate measures a revision's way to its chat.update, p50 and
// p99, and the size of the update's blocks.
func revisionToUpdate(b *testing.B, evidence func(*agent.Event)) {
	fake, r := rig(b, 1e6)
	start(r, "slack/T1/C1/1.1")
	r.Observe(chattest.Revision("slack/T1/C1/1.1", 1))
	r.Flush("slack/T1/C1/1.1")
	var lat []time.Duration
	blocks := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ev := chattest.Revision("slack/T1/C1/1.1", int64(i+2))
		if evidence != nil {
			evidence(&ev)
		}
		r.Observe(ev)
		r.Flush("slack/T1/C1/1.1")
		calls := fake.Calls("chat.update")
		last := calls[len(calls)-1]
		if !strings.Contains(last.Params["blocks"], fmt.Sprintf("revision %d ", i+2)) {
			b.Fatalf("update %d carries the wrong revision", i+2)
		}
		lat = append(lat, last.At.Sub(ev.At))
		blocks = len(last.Params["blocks"])
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(blocks), "blocks-B")
}

// BenchmarkBurstUnderTier3 sends bursts of 100 revisions against a fake
// enforcing 50 chat.update calls a minute, at the default pace (45 a
// minute), and reports edits per burst; every burst must end on its last
// revision with no call inside a Retry-After.
func BenchmarkBurstUnderTier3(b *testing.B) {
	const bursts = 20
	for i := 0; i < b.N; i++ {
		fake, r := rig(b, 45)
		fake.Limit("chat.update", 50, time.Minute)
		key := "slack/T1/C1/1.1"
		start(r, key)
		rev := int64(0)
		correct := 0
		for k := 0; k < bursts; k++ {
			for j := 0; j < 100; j++ {
				rev++
				r.Observe(chattest.Revision(key, rev))
			}
			r.Flush(key)
			msgs := fake.Messages("C1")
			if len(msgs) == 1 && strings.Contains(msgs[0].Blocks, fmt.Sprintf("revision %d ", rev)) {
				correct++
			}
		}
		if v := fake.Violations(); len(v) > 0 {
			b.Fatalf("Retry-After ignored: %v", v)
		}
		edits := len(fake.Calls("chat.update"))
		b.ReportMetric(float64(edits)/bursts, "edits/100-revisions")
		b.ReportMetric(float64(correct), "bursts-ending-on-last-of-20")
	}
}

// flaky answers 500 to a share of chat.postMessage calls, at random, and
// passes everything else to the fake Slack.
type flaky struct {
	next  http.Handler
	share float64
	mu    sync.Mutex // guards rng
	rng   *rand.Rand
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	fail := strings.HasSuffix(r.URL.Path, "/chat.postMessage") && f.rng.Float64() < f.share
	f.mu.Unlock()
	if fail {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	f.next.ServeHTTP(w, r)
}

// BenchmarkReplyDeliveryFlaky measures reply delivery through the outbox
// (answer published to message accepted by the fake Slack) while 10% of
// chat.postMessage calls answer HTTP 500, with the router's default retry
// delay (1 s, doubling, jittered). Every reply must arrive exactly once.
func BenchmarkReplyDeliveryFlaky(b *testing.B) {
	fake := &fakeslack.Server{}
	srv := httptest.NewServer(&flaky{next: fake, share: 0.1, rng: rand.New(rand.NewPCG(1, 2))})
	b.Cleanup(srv.Close)
	a := New(Options{BotToken: "xoxb-bench", APIURL: srv.URL + "/api/"})
	r := chat.NewRouter(chat.Options{Runner: &chattest.Runner{}, Store: &chattest.Boards{}, Platforms: map[string]chat.Platform{"slack": a}})
	b.Cleanup(r.Close)
	key := "slack/T1/C1/1.1"
	start(r, key)
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		text := fmt.Sprintf("answer %d", i)
		at := time.Now()
		r.Observe(agent.Event{Session: key, Kind: agent.TurnEnded, Outcome: agent.Done, Text: text, At: at})
		deadline := time.Now().Add(time.Minute)
		for {
			n := 0
			for _, m := range fake.Messages("C1") {
				if m.Text == text {
					n++
				}
			}
			if n > 1 {
				b.Fatalf("%q delivered %d times", text, n)
			}
			if n == 1 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%q not delivered in a minute", text)
			}
			time.Sleep(100 * time.Microsecond)
		}
		lat = append(lat, time.Since(at))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
