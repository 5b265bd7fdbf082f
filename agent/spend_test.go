package agent_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/store"
	"github.com/pinplan/pinplan/todo"
)

// spendHarness is a harness whose runner has o's budgets, approvers and
// clock; the model, store and events are the harness's.
func spendHarness(t *testing.T, fake *fakeopenai.Server, o agent.Options, tools ...agent.Tool) *harness {
	t.Helper()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	db, err := store.Open(filepath.Join(t.TempDir(), "pinplan.db"), store.Options{BatchDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	reg, err := agent.NewRegistry(tools...)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{fake: fake, db: db, events: map[string]chan agent.Event{}}
	o.Model = agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: srv.URL + "/v1", APIKey: "sk-test", Timeout: 5 * time.Second})
	o.Store, o.Tools, o.ModelName = db, reg, "fake"
	o.Events = publishTo(func(e agent.Event) { h.ch(e.Session) <- e })
	if h.runner, err = agent.NewRunner(o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.runner.Close)
	return h
}

// used is a reply's reported usage: prompt and completion tokens.
func used(prompt, completion int) *openai.Usage {
	return &openai.Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
}

func ended(t *testing.T, seen []agent.Event) agent.Event {
	t.Helper()
	e := seen[len(seen)-1]
	if e.Kind != agent.TurnEnded {
		t.Fatalf("last event %+v, want TurnEnded", e)
	}
	return e
}

// A turn that keeps calling tools stops before the request that would
// pass PINPLAN_TURN_TOKENS, counting that request's estimated prompt: two
// rounds of 400 tokens leave 200 of a 1,000 budget, less than the next
// request needs, so no third request is made. The plan stays as the model
// wrote it.
func TestTurnBudgetStopsBeforeTheRequestThatWouldPassIt(t *testing.T) {
	plan := todo.Encode([]todo.Item{{Content: "read the logs", Status: todo.InProgress}, {Content: "fix it", Status: todo.Pending}})
	var next atomic.Bool // the next turn: answer
	fake := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		if next.Load() {
			return fakeopenai.Reply{Content: "done", Usage: used(300, 100)}
		}
		if len(req.Messages) < 4 {
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{call(todo.ToolName, plan)}, Usage: used(300, 100)}
		}
		return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{call("read_file", `{"path":"log"}`)}, Usage: used(300, 100)}
	}}
	h := spendHarness(t, fake, agent.Options{TurnTokens: 1000}, readTool())
	h.send(t, "web/tb", "find the bug")
	e := ended(t, h.waitEnd(t, "web/tb"))
	if e.Outcome != agent.TurnBudget {
		t.Fatalf("outcome %s %q, want %s", e.Outcome, e.Text, agent.TurnBudget)
	}
	for _, want := range []string{"budget of 1,000 tokens", "used 800", "PINPLAN_TURN_TOKENS"} {
		if !strings.Contains(e.Text, want) {
			t.Errorf("message %q does not say %q", e.Text, want)
		}
	}
	if n := len(fake.Requests()); n != 2 {
		t.Errorf("model requests = %d, want 2 (the third would pass the budget)", n)
	}
	cp, hist, _, err := h.db.Load(context.Background(), "web/tb")
	if err != nil {
		t.Fatal(err)
	}
	if cp.State != agent.Idle || cp.Ended == nil || cp.Ended.Outcome != agent.TurnBudget || cp.Ended.Text != e.Text {
		t.Errorf("stored end %+v in state %s, want the budget's", cp.Ended, cp.State)
	}
	if cp.Revision != 1 || len(cp.Plan) != 2 || cp.Plan[0].Status != todo.InProgress || cp.Plan[1].Status != todo.Pending {
		t.Errorf("plan after the stop: revision %d %+v, want revision 1 as written", cp.Revision, cp.Plan)
	}
	if last := hist[len(hist)-1].Message; last.Role != openai.ChatMessageRoleTool {
		t.Errorf("last history entry %+v, want the second round's tool result", last)
	}
	// The next turn has a budget of its own.
	next.Store(true)
	h.send(t, "web/tb", "go on")
	if e := ended(t, h.waitEnd(t, "web/tb")); e.Outcome != agent.Done {
		t.Errorf("next turn: %s %q, want done", e.Outcome, e.Text)
	}
}

// A person over PINPLAN_USER_TOKENS_PER_DAY is answered with the budget,
// what they used and when it resets, with no model request, in any of
// their sessions; an approver too. Someone else, and the console's
// operator (no user id), go on; the next UTC day they do too.
func TestDailyBudgetRefusesWithoutAModelRequest(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 18, 29, 30, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	fake := &fakeopenai.Server{Respond: func(*openai.ChatCompletionRequest) fakeopenai.Reply {
		return fakeopenai.Reply{Content: "answered", Usage: used(900, 100)}
	}}
	h := spendHarness(t, fake, agent.Options{UserTokens: 1000, Approvers: []string{"U1"}, Now: clock})
	say := func(key, user, text string) agent.Event {
		t.Helper()
		if err := h.runner.Submit(context.Background(), key, agent.Inbound{Text: text, Author: "name of " + user, AuthorID: user}); err != nil {
			t.Fatal(err)
		}
		return ended(t, h.waitEnd(t, key))
	}
	if e := say("slack/T1/C1/1.0", "U1", "first task"); e.Outcome != agent.Done {
		t.Fatalf("first turn: %s %q", e.Outcome, e.Text)
	}
	if n, err := h.db.Spent(context.Background(), "slack/U1", "2026-03-01"); err != nil || n != 1000 {
		t.Fatalf("U1's tokens today = %d, %v; want the 1,000 the model reported", n, err)
	}
	e := say("slack/T1/C2/2.0", "U1", "second task") // another session, the same person
	if e.Outcome != agent.DayBudget {
		t.Fatalf("over the budget: %s %q, want %s", e.Outcome, e.Text, agent.DayBudget)
	}
	for _, want := range []string{"used 1,000 of your 1,000 tokens for today", "did not start", "resets at 00:00 UTC (2026-03-02), in 5 h 31 min"} {
		if !strings.Contains(e.Text, want) {
			t.Errorf("refusal %q does not say %q", e.Text, want)
		}
	}
	if n := len(fake.Requests()); n != 1 {
		t.Errorf("model requests = %d, want 1: the refused message made none", n)
	}
	cp, hist, inbox, err := h.db.Load(context.Background(), "slack/T1/C2/2.0")
	if err != nil || cp.Ended == nil || cp.Ended.Outcome != agent.DayBudget || len(inbox) != 0 || len(hist) != 1 {
		t.Errorf("refused session: cp %+v, %d history, %d queued, %v; want the end stored and the message taken in", cp, len(hist), len(inbox), err)
	}
	if e := say("slack/T1/C3/3.0", "U2", "someone else"); e.Outcome != agent.Done {
		t.Errorf("U2: %s %q, want done", e.Outcome, e.Text)
	}
	if e := say("web/console", "", "the operator"); e.Outcome != agent.Done {
		t.Errorf("console: %s %q, want done", e.Outcome, e.Text)
	}
	mu.Lock()
	now = time.Date(2026, 3, 2, 0, 0, 1, 0, time.UTC)
	mu.Unlock()
	if e := say("slack/T1/C2/2.0", "U1", "a new day"); e.Outcome != agent.Done {
		t.Errorf("the next day: %s %q, want done", e.Outcome, e.Text)
	}
}

// A turn that would pass its requester's daily budget stops before that
// request; what it used counts once per round, whether the round's
// commit was one write or an intent record and then the results.
func TestDailyBudgetStopsARunningTurn(t *testing.T) {
	fake := &fakeopenai.Server{Respond: func(*openai.ChatCompletionRequest) fakeopenai.Reply {
		return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{call("deploy", `{}`)}, Usage: used(300, 100)}
	}}
	deploy := agent.Tool{Name: "deploy", Run: func(context.Context, *agent.ToolEnv, string) (string, error) { return "deployed", nil }}
	h := spendHarness(t, fake, agent.Options{UserTokens: 1000}, deploy)
	if err := h.runner.Submit(context.Background(), "discord/7", agent.Inbound{Text: "deploy", AuthorID: "D1"}); err != nil {
		t.Fatal(err)
	}
	e := ended(t, h.waitEnd(t, "discord/7"))
	if e.Outcome != agent.DayBudget || !strings.Contains(e.Text, "used 800 of your 1,000 tokens") || !strings.Contains(e.Text, "stopped this turn") {
		t.Fatalf("end %s %q, want the daily budget's stop after 800 tokens", e.Outcome, e.Text)
	}
	if n := len(fake.Requests()); n != 2 {
		t.Errorf("model requests = %d, want 2", n)
	}
	day := agent.Day(time.Now())
	n, err := h.db.Spent(context.Background(), "discord/D1", day)
	cp, _, _, _ := h.db.Load(context.Background(), "discord/7")
	if err != nil || n != 800 || cp.Usage.Tokens() != 800 {
		t.Errorf("charged %d (%v), session usage %d; want 800 each", n, err, cp.Usage.Tokens())
	}
}
