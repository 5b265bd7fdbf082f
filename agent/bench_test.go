package agent_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pinplan/pinplan/adapters/web"
	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/store"
	"github.com/pinplan/pinplan/todo"
)

// benchScript is a 10-round turn: plan revisions between tool rounds.
func benchScript(string) []fakeopenai.Reply {
	plan := func(done int) fakeopenai.Reply {
		items := make([]todo.Item, 4)
		for i := range items {
			items[i] = todo.Item{Content: fmt.Sprintf("step %d", i), Status: todo.Pending}
			if i < done {
				items[i].Status = todo.Completed
			}
		}
		return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: todo.ToolName, Arguments: todo.Encode(items)}}}
	}
	read := fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: "read_file", Arguments: `{"path":"x"}`}}}
	return []fakeopenai.Reply{plan(0), read, plan(1), read, plan(2), read, plan(3), read, plan(4), {Content: "done"}}
}

const roundsPerTurn = 10

type benchEnv struct {
	runner *agent.Runner
	db     *store.DB
	done   chan string
	router *chat.Router
}

func newBenchEnv(b *testing.B, withRouter bool) *benchEnv {
	fake := &fakeopenai.Server{Respond: fakeopenai.Script(benchScript), NoRecord: true}
	srv := httptest.NewServer(fake)
	b.Cleanup(srv.Close)
	db, err := store.Open(filepath.Join(b.TempDir(), "bench.db"), store.Options{BatchDelay: 2 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	reg, _ := agent.NewRegistry(readTool())
	env := &benchEnv{db: db, done: make(chan string, 100000)}
	events := &agent.EventService{}
	env.runner, err = agent.NewRunner(agent.Options{
		Model: agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: srv.URL + "/v1", Concurrency: 64}), Store: db, Tools: reg,
		Events: events})
	if err != nil {
		b.Fatal(err)
	}
	if withRouter {
		console := web.New(web.Options{})
		env.router = chat.NewRouter(chat.Options{Runner: env.runner, Store: db, Log: db, Cards: db, Listings: db, FollowUps: db, Platforms: map[string]chat.Platform{"web": console}})
		events.Follow(env.router)
	}
	events.Follow(agent.SubscriberFunc(func(e agent.Event) {
		if e.Kind == agent.TurnEnded {
			env.done <- e.Session
		}
	}))
	b.Cleanup(func() {
		env.runner.Close()
		if env.router != nil {
			env.router.Close()
		}
	})
	return env
}

// BenchmarkRounds measures checkpointed model rounds per second with 1, 10
// and 100 concurrent sessions against a zero-latency loopback fake model
// (HTTP, JSON, bbolt fsync per batch included). One op is one 10-round turn
// of every session.
func BenchmarkRounds(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			env := newBenchEnv(b, false)
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				for s := 0; s < n; s++ {
					// A fresh session per turn keeps every turn at 10 rounds.
					key := fmt.Sprintf("web/b%d-%d", i, s)
					if err := env.runner.Submit(ctx, key, agent.Inbound{Text: key}); err != nil {
						b.Fatal(err)
					}
				}
				for s := 0; s < n; s++ {
					<-env.done
				}
			}
			b.ReportMetric(float64(b.N*n*roundsPerTurn)/time.Since(start).Seconds(), "rounds/s")
		})
	}
}

// BenchmarkIdleSessionMemory measures heap held per idle session (one
// finished turn) after a GC: with its plan board loaded in the router, and
// with idle boards evicted as cmd/bot does after ten minutes.
func BenchmarkIdleSessionMemory(b *testing.B) {
	for _, evict := range []bool{false, true} {
		b.Run(fmt.Sprintf("evicted=%t", evict), func(b *testing.B) { idleMemory(b, 10000, evict) })
	}
}

func idleMemory(b *testing.B, sessions int, evict bool) {
	for i := 0; i < b.N; i++ {
		env := newBenchEnv(b, true)
		ctx := context.Background()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var wg sync.WaitGroup
		for s := 0; s < sessions; s++ {
			key := fmt.Sprintf("web/idle%d-%d", i, s)
			th := chat.Thread{Platform: "web", Key: key, Channel: key}
			if err := env.router.Handle(ctx, chat.Incoming{Thread: th, Text: "task " + key}); err != nil {
				b.Fatal(err)
			}
		}
		for s := 0; s < sessions; s++ {
			<-env.done
		}
		wg.Wait()
		for s := 0; s < sessions; s++ {
			env.router.Flush(fmt.Sprintf("web/idle%d-%d", i, s))
		}
		if evict {
			env.router.Evict(0)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(sessions), "heap-bytes/idle-session")
	}
}

// approvalEnv is a runner and router whose model always calls a tool that
// asks for approval first; toolStarted receives the time a call started.
type approvalEnv struct {
	runner      *agent.Runner
	router      *chat.Router
	needed      chan agent.Event
	toolStarted chan time.Time
}

func newApprovalEnv(b *testing.B) *approvalEnv {
	fake := &fakeopenai.Server{NoRecord: true, Respond: writeOnce}
	srv := httptest.NewServer(fake)
	b.Cleanup(srv.Close)
	db, err := store.Open(filepath.Join(b.TempDir(), "bench.db"), store.Options{BatchDelay: 2 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	env := &approvalEnv{needed: make(chan agent.Event, 100000), toolStarted: make(chan time.Time, 100000)}
	tool := agent.Tool{Name: "fs__write_file", Server: "fs", Ask: true, Parameters: map[string]any{"type": "object"},
		Run: func(context.Context, *agent.ToolEnv, string) (string, error) {
			env.toolStarted <- time.Now()
			return "written", nil
		}}
	reg, err := agent.NewRegistry(tool)
	if err != nil {
		b.Fatal(err)
	}
	events := &agent.EventService{}
	env.runner, err = agent.NewRunner(agent.Options{
		Model: agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: srv.URL + "/v1", Concurrency: 64}), Store: db, Tools: reg,
		Events: events})
	if err != nil {
		b.Fatal(err)
	}
	console := web.New(web.Options{})
	env.router = chat.NewRouter(chat.Options{Runner: env.runner, Store: db, Log: db, Cards: db, Listings: db, FollowUps: db, Outbox: db, Platforms: map[string]chat.Platform{"web": console}})
	events.Follow(env.router)
	events.Follow(agent.SubscriberFunc(func(e agent.Event) {
		if e.Kind == agent.ApprovalNeeded {
			env.needed <- e
		}
	}))
	b.Cleanup(func() {
		env.runner.Close()
		env.router.Close()
	})
	return env
}

// BenchmarkWaitingSessions measures what 1,000 sessions cost while each
// waits on an approval card: heap after a GC and goroutines, per session.
func BenchmarkWaitingSessions(b *testing.B) {
	const sessions = 1000
	for i := 0; i < b.N; i++ {
		env := newApprovalEnv(b)
		ctx := context.Background()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		goroutines := runtime.NumGoroutine()
		for s := 0; s < sessions; s++ {
			key := fmt.Sprintf("web/wait%d-%d", i, s)
			th := chat.Thread{Platform: "web", Key: key, Channel: key}
			if err := env.router.Handle(ctx, chat.Incoming{Thread: th, Text: "write " + key, AuthorID: "U1"}); err != nil {
				b.Fatal(err)
			}
		}
		for s := 0; s < sessions; s++ {
			<-env.needed
		}
		for s := 0; s < sessions; s++ {
			env.router.Flush(fmt.Sprintf("web/wait%d-%d", i, s))
		}
		time.Sleep(100 * time.Millisecond) // let session goroutines finish exiting
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/sessions, "heap-bytes/waiting-session")
		b.ReportMetric(float64(runtime.NumGoroutine()-goroutines)/sessions, "goroutines/waiting-session")
	}
}

// BenchmarkClickToToolStart measures the time from a press of Allow once
// (chat.Router.Click: the decision committed to bbolt) to the approved
// tool's start, one session at a time.
func BenchmarkClickToToolStart(b *testing.B) {
	env := newApprovalEnv(b)
	ctx := context.Background()
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		key := fmt.Sprintf("web/click%d", i)
		th := chat.Thread{Platform: "web", Key: key, Channel: key}
		if err := env.router.Handle(ctx, chat.Incoming{Thread: th, Text: "write", AuthorID: "U1"}); err != nil {
			b.Fatal(err)
		}
		e := <-env.needed
		id := ""
		for deadline := time.Now().Add(10 * time.Second); id == "" && time.Now().Before(deadline); {
			id = cardIDOf(env.router, key, e.Approval.CallID)
		}
		start := time.Now()
		res := env.router.Click(ctx, chat.Click{Thread: th, Button: chat.ButtonID(chat.ActionAllow, id), UserID: "U1", UserName: "ann"})
		if res.Card == nil {
			b.Fatalf("click: %+v", res)
		}
		lat = append(lat, (<-env.toolStarted).Sub(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// cardIDOf finds the id of the card for callID once the board has it.
func cardIDOf(r *chat.Router, key, callID string) string {
	for _, c := range r.Cards(key) {
		if c.CallID == callID {
			return c.ID
		}
	}
	return ""
}

// BenchmarkRoundsStores runs 100 concurrent sessions' 10-round turns with
// the bbolt store and with memStore, in the same run: the ratio is what
// durable checkpoints cost at that concurrency.
func BenchmarkRoundsStores(b *testing.B) {
	const n = 100
	for _, name := range []string{"bbolt", "memory"} {
		b.Run(name, func(b *testing.B) {
			fake := &fakeopenai.Server{Respond: fakeopenai.Script(benchScript), NoRecord: true}
			srv := httptest.NewServer(fake)
			b.Cleanup(srv.Close)
			var st agent.Store = &memStore{}
			if name == "bbolt" {
				db, err := store.Open(filepath.Join(b.TempDir(), "bench.db"), store.Options{BatchDelay: 2 * time.Millisecond})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { db.Close() })
				st = db
			}
			reg, _ := agent.NewRegistry(readTool())
			done := make(chan string, 100000)
			r, err := agent.NewRunner(agent.Options{Model: agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: srv.URL + "/v1", Concurrency: 64}),
				Store: st, Tools: reg, Events: publishTo(func(e agent.Event) {
					if e.Kind == agent.TurnEnded {
						done <- e.Session
					}
				})})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(r.Close)
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				for s := 0; s < n; s++ {
					key := fmt.Sprintf("web/%s%d-%d", name, i, s)
					if err := r.Submit(ctx, key, agent.Inbound{Text: key}); err != nil {
						b.Fatal(err)
					}
				}
				for s := 0; s < n; s++ {
					<-done
				}
			}
			b.ReportMetric(float64(b.N*n*roundsPerTurn)/time.Since(start).Seconds(), "rounds/s")
		})
	}
}
