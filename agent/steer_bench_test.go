package agent_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/adapters/web"
	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/store"
	"github.com/pinplan/pinplan/todo"
)

// steerEnv is a console session rig whose turns' first plans wait for
// Start (PINPLAN_PLAN_APPROVAL=ask): the model writes a three-item plan,
// then answers once its next request carries a person's change.
type steerEnv struct {
	router  *chat.Router
	waiting chan agent.Event // a plan waiting for Start
	edited  chan time.Time   // a plan edit that shows a person's change
	asked   chan time.Time   // a model request that carries a person's change
}

func newSteerEnv(b *testing.B) *steerEnv {
	env := &steerEnv{waiting: make(chan agent.Event, 1000), edited: make(chan time.Time, 1000), asked: make(chan time.Time, 1000)}
	fake := &fakeopenai.Server{NoRecord: true, Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case last.Role == openai.ChatMessageRoleUser && strings.Contains(last.Content, "[plan change]"):
			env.asked <- time.Now()
			return fakeopenai.Reply{Content: "done"}
		case last.Role == openai.ChatMessageRoleTool:
			return fakeopenai.Reply{Content: "done"}
		}
		return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: todo.ToolName, Arguments: `{"todos":[{"content":"a","status":"in_progress"},{"content":"b","status":"pending"},{"content":"c","status":"pending"}]}`}}}
	}}
	srv := httptest.NewServer(fake)
	b.Cleanup(srv.Close)
	db, err := store.Open(filepath.Join(b.TempDir(), "bench.db"), store.Options{BatchDelay: 2 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	events := &agent.EventService{}
	runner, err := agent.NewRunner(agent.Options{Model: agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: srv.URL + "/v1", Concurrency: 64}),
		Store: db, Events: events, PlanApproval: true})
	if err != nil {
		b.Fatal(err)
	}
	hooks := &chat.Hooks{RevisionToEdit: func(_ string, d time.Duration) {}}
	env.router = chat.NewRouter(chat.Options{Runner: runner, Store: db, Log: db, Cards: db, Listings: db, FollowUps: db, Outbox: db,
		Platforms: map[string]chat.Platform{"web": web.New(web.Options{})}, Hooks: hooks})
	events.Follow(env.router)
	events.Follow(agent.SubscriberFunc(func(e agent.Event) {
		if e.Kind == agent.ApprovalNeeded && e.Approval != nil && e.Approval.Plan && e.Seq != 0 {
			env.waiting <- e
		}
	}))
	// The edit that shows a change: the one after the change's event.
	changed := make(chan struct{}, 1000)
	events.Follow(agent.SubscriberFunc(func(e agent.Event) {
		if e.Kind == agent.PlanChanged && e.Steer != nil {
			changed <- struct{}{}
		}
	}))
	hooks.RevisionToEdit = func(string, time.Duration) {
		select {
		case <-changed:
			env.edited <- time.Now()
		default:
		}
	}
	b.Cleanup(func() {
		runner.Close()
		env.router.Close()
	})
	return env
}

// BenchmarkSteerClick measures, one session at a time, a person's Skip
// on the pinned plan (chat.Router.Click: the change queued in bbolt) to
// the plan edit that shows it, and the plan's Start press to the model's
// next request, which carries the change. BenchmarkClickToToolStart is
// the approval card's equivalent; run both in one command to compare.
func BenchmarkSteerClick(b *testing.B) {
	env := newSteerEnv(b)
	ctx := context.Background()
	var toEdit, toRequest []time.Duration
	for i := 0; i < b.N; i++ {
		key := fmt.Sprintf("web/steer%d", i)
		th := chat.Thread{Platform: "web", Key: key, Channel: key}
		if err := env.router.Handle(ctx, chat.Incoming{Thread: th, Text: "plan it", AuthorID: "U1"}); err != nil {
			b.Fatal(err)
		}
		w := <-env.waiting
		env.router.Flush(key) // the plan shows its wait for Start
		start := time.Now()
		res := env.router.Click(ctx, chat.Click{Thread: th, Button: chat.ItemButton(chat.ActionSkip, chat.Plan{Revision: w.Revision}, todo.Item{Content: "b"}), UserID: "U1", UserName: "ann"})
		if !strings.Contains(res.Private, "skipped") {
			b.Fatalf("skip: %+v", res)
		}
		toEdit = append(toEdit, (<-env.edited).Sub(start))
		start = time.Now()
		if res := env.router.Click(ctx, chat.Click{Thread: th, Button: chat.ButtonID(chat.ActionStart, w.Approval.CallID), UserID: "U1", UserName: "ann"}); res.Plan == nil {
			b.Fatalf("start: %+v", res)
		}
		toRequest = append(toRequest, (<-env.asked).Sub(start))
	}
	for _, m := range []struct {
		name string
		lat  []time.Duration
	}{{"skip-to-edit", toEdit}, {"start-to-request", toRequest}} {
		slices.Sort(m.lat)
		b.ReportMetric(float64(m.lat[len(m.lat)/2].Microseconds()), m.name+"-p50-µs")
		b.ReportMetric(float64(m.lat[len(m.lat)*99/100].Microseconds()), m.name+"-p99-µs")
	}
}
