package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/store"
	"github.com/pinplan/pinplan/todo"
)

func isSummaryCall(req *openai.ChatCompletionRequest) bool {
	return len(req.Messages) > 0 && strings.Contains(req.Messages[0].Content, "running summary")
}

var longPlan = []todo.Item{{Content: "answer every question", Status: todo.InProgress}, {Content: "keep notes", Status: todo.Pending}}

// chatty answers each turn; the first turn writes a plan first.
func chatty(summaries *atomic.Int32) func(*openai.ChatCompletionRequest) fakeopenai.Reply {
	return func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		if isSummaryCall(req) {
			summaries.Add(1)
			return fakeopenai.Reply{Content: "The user asked a long series of questions; each was answered."}
		}
		last := req.Messages[len(req.Messages)-1]
		if last.Role == openai.ChatMessageRoleUser && strings.Contains(last.Content, "question 01 ") {
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{call(todo.ToolName, todo.Encode(longPlan))}}
		}
		return fakeopenai.Reply{Content: "answered: " + strings.Repeat("detail ", 60)}
	}
}

func longMessage(i int) string {
	return fmt.Sprintf("question %02d %s", i, strings.Repeat("lorem ipsum dolor sit amet ", 120))[:3000]
}

func budgetHarness(t testing.TB, fake *fakeopenai.Server, db *store.DB, tokens int, tools ...agent.Tool) *harness {
	t.Helper()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	model := agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: srv.URL + "/v1", APIKey: "sk-test", Timeout: 5 * time.Second, BaseBackoff: time.Millisecond})
	reg, err := agent.NewRegistry(tools...)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{fake: fake, db: db, events: map[string]chan agent.Event{}, model: model}
	h.runner, err = agent.NewRunner(agent.Options{Model: model, Store: db, Tools: reg, ModelName: "fake", ContextTokens: tokens, MaxRounds: 200,
		Events: publishTo(func(e agent.Event) { h.ch(e.Session) <- e })})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.runner.Close)
	return h
}

func openDB(t testing.TB) (*store.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.db")
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

func TestLongThreadStaysInTheWindow(t *testing.T) {
	var summaries atomic.Int32
	fake := &fakeopenai.Server{ContextWindow: 8000}
	fake.Respond = chatty(&summaries)
	db, _ := openDB(t)
	h := budgetHarness(t, fake, db, 8000)
	for i := 1; i <= 26; i++ {
		h.send(t, "web/long", longMessage(i))
		events := h.waitEnd(t, "web/long")
		if end := events[len(events)-1]; end.Outcome != agent.Done {
			t.Fatalf("turn %d: outcome %s (%v): %q", i, end.Outcome, end.Err, end.Text)
		}
	}
	if n := fake.Rejected(); n != 0 {
		t.Errorf("%d requests exceeded the window", n)
	}
	if summaries.Load() == 0 {
		t.Error("26 turns of 3,000 characters fit 8,000 tokens without a summary: the test proves nothing")
	}
	reqs := fake.Requests()
	last := reqs[len(reqs)-1]
	var all strings.Builder
	for _, m := range last.Messages {
		all.WriteString(m.Content + "\n")
	}
	if !strings.Contains(all.String(), todo.NewSnapshot(longPlan).String()) {
		t.Error("the last request lacks the plan snapshot, byte for byte")
	}
	if !strings.Contains(all.String(), longMessage(26)) {
		t.Error("the last request lacks the newest message")
	}
	_, hist, _, err := h.db.Load(context.Background(), "web/long")
	if err != nil {
		t.Fatal(err)
	}
	users := 0
	for _, e := range hist {
		if e.Message.Role == openai.ChatMessageRoleUser {
			users++
		}
	}
	if users != 26 {
		t.Errorf("stored history has %d user messages, want all 26", users)
	}
}

func TestSummaryIsCheckpointed(t *testing.T) {
	var summaries atomic.Int32
	fake := &fakeopenai.Server{ContextWindow: 8000}
	fake.Respond = chatty(&summaries)
	db, _ := openDB(t)
	h := budgetHarness(t, fake, db, 8000)
	i := 0
	for summaries.Load() == 0 && i < 26 {
		i++
		h.send(t, "web/sum", longMessage(i))
		h.waitEnd(t, "web/sum")
	}
	if summaries.Load() != 1 {
		t.Fatalf("%d summary calls after %d turns, want 1", summaries.Load(), i)
	}
	cp, _, _, err := db.Load(context.Background(), "web/sum")
	if err != nil || cp.Summary == nil || cp.Summary.Through == 0 {
		t.Fatalf("summary not in the checkpoint: %+v, %v", cp, err)
	}
	h.runner.Close() // a restart: the summary comes back from the store
	h2 := budgetHarness(t, fake, db, 8000)
	h2.send(t, "web/sum", "a short follow-up")
	if events := h2.waitEnd(t, "web/sum"); events[len(events)-1].Outcome != agent.Done {
		t.Fatal("follow-up after restart failed")
	}
	if summaries.Load() != 1 {
		t.Errorf("%d summary calls after the restart, want still 1", summaries.Load())
	}
}

func TestContextErrorCompactsHarderOnce(t *testing.T) {
	var summaries atomic.Int32
	// The server's window is smaller than the budget pinplan was given.
	fake := &fakeopenai.Server{ContextWindow: 5000}
	fake.Respond = chatty(&summaries)
	db, _ := openDB(t)
	h := budgetHarness(t, fake, db, 9000)
	for i := 1; i <= 8; i++ {
		h.send(t, "web/hard", longMessage(i))
		events := h.waitEnd(t, "web/hard")
		if end := events[len(events)-1]; end.Outcome != agent.Done {
			t.Fatalf("turn %d: outcome %s: %q", i, end.Outcome, end.Text)
		}
	}
	if fake.Rejected() == 0 {
		t.Error("no request was rejected: the recovery path was not exercised")
	}
}

func TestModelFailuresSayWhatToDo(t *testing.T) {
	unreachable := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return "http://" + addr + "/v1"
	}
	tests := []struct {
		name   string
		status int
		code   string
		want   string
	}{
		{"bad key", 401, "invalid_api_key", "OPENAI_API_KEY"},
		{"unknown model", 404, "model_not_found", "OPENAI_MODEL"},
		{"context too long", 400, "context_length_exceeded", "reset"},
		{"server down", 0, "", "could not be reached"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := unreachable()
			if tt.status != 0 {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(tt.status)
					fmt.Fprintf(w, `{"error":{"message":"injected: maximum context length exceeded","type":"invalid_request_error","code":%q}}`, tt.code)
				}))
				t.Cleanup(srv.Close)
				base = srv.URL + "/v1"
			}
			db, _ := openDB(t)
			model := agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: base, APIKey: "sk-test", Timeout: 2 * time.Second, BaseBackoff: time.Millisecond, Retries: 1})
			events := make(chan agent.Event, 100)
			r, err := agent.NewRunner(agent.Options{Model: model, Store: db, ModelName: "gpt-x", Events: publishTo(func(e agent.Event) { events <- e })})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if err := r.Submit(context.Background(), "web/f", agent.Inbound{Text: "hi"}); err != nil {
				t.Fatal(err)
			}
			timeout := time.After(20 * time.Second)
			for {
				select {
				case e := <-events:
					if e.Kind != agent.TurnEnded {
						continue
					}
					if e.Outcome != agent.Failed || !strings.Contains(e.Text, tt.want) {
						t.Errorf("got %s %q, want failed mentioning %q", e.Outcome, e.Text, tt.want)
					}
					return
				case <-timeout:
					t.Fatal("no TurnEnded")
				}
			}
		})
	}
}

func TestNoUsageReported(t *testing.T) {
	var summaries atomic.Int32
	fake := &fakeopenai.Server{ContextWindow: 8000, NoUsage: true}
	fake.Respond = chatty(&summaries)
	db, _ := openDB(t)
	h := budgetHarness(t, fake, db, 8000)
	for i := 1; i <= 12; i++ {
		h.send(t, "web/nousage", longMessage(i))
		if events := h.waitEnd(t, "web/nousage"); events[len(events)-1].Outcome != agent.Done {
			t.Fatalf("turn %d failed", i)
		}
	}
	// Without usage pinplan cannot learn how the server counts until the
	// server says a request was too long; after that one correction (the
	// turn still succeeds) it stays within the window.
	if fake.Rejected() > 1 {
		t.Errorf("%d requests rejected with no usage reported, want at most the first", fake.Rejected())
	}
}

func TestResetStartsFresh(t *testing.T) {
	release := make(chan struct{})
	fake := &fakeopenai.Server{}
	fake.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		if last := req.Messages[len(req.Messages)-1]; strings.Contains(last.Content, "slow") {
			<-release
		}
		return fakeopenai.Reply{Content: "ok"}
	}
	db, _ := openDB(t)
	h := budgetHarness(t, fake, db, 32000)
	defer close(release)
	for _, text := range []string{"first topic", "second topic"} {
		h.send(t, "web/reset", text)
		h.waitEnd(t, "web/reset")
	}
	// A reset during a running turn stops it first.
	h.send(t, "web/reset", "slow task")
	waitRequests(t, fake, 3)
	if err := h.runner.Reset(context.Background(), "web/reset", "ann"); err != nil {
		t.Fatal(err)
	}
	h.send(t, "web/reset", "brand new")
	var last agent.Event
	for last.Kind != agent.TurnEnded || last.Outcome != agent.Done {
		events := h.waitEnd(t, "web/reset")
		last = events[len(events)-1]
	}
	reqs := fake.Requests()
	msgs := reqs[len(reqs)-1].Messages
	for _, m := range msgs {
		if strings.Contains(m.Content, "topic") || strings.Contains(m.Content, "slow") {
			t.Errorf("the request after reset carries earlier history: %q", m.Content)
		}
	}
	if len(msgs) != 2 || msgs[1].Content != "brand new" {
		t.Errorf("request after reset: %+v, want the system prompt and the new message", msgs)
	}
	n, archived, err := db.Archived(context.Background(), "web/reset", 1)
	if err != nil || n != 1 || len(archived) < 4 {
		t.Errorf("archive: %d archives, %d entries, %v; want the earlier history kept", n, len(archived), err)
	}
}

func TestDamagedSummaryIsRebuilt(t *testing.T) {
	var summaries atomic.Int32
	fake := &fakeopenai.Server{ContextWindow: 8000}
	fake.Respond = chatty(&summaries)
	db, _ := openDB(t)
	h := budgetHarness(t, fake, db, 8000)
	for i := 1; summaries.Load() == 0 && i <= 26; i++ {
		h.send(t, "web/dmg", longMessage(i))
		h.waitEnd(t, "web/dmg")
	}
	h.runner.Close()
	// Damage the stored summary: it claims more history than exists.
	cp, hist, _, err := db.Load(context.Background(), "web/dmg")
	if err != nil || cp.Summary == nil {
		t.Fatalf("no summary to damage: %v", err)
	}
	cp.Summary.Through = len(hist) + 50
	if err := db.Commit(context.Background(), &agent.Round{Base: len(hist), Checkpoint: *cp}); err != nil {
		t.Fatal(err)
	}
	before := summaries.Load()
	h2 := budgetHarness(t, fake, db, 8000)
	h2.send(t, "web/dmg", longMessage(30))
	if events := h2.waitEnd(t, "web/dmg"); events[len(events)-1].Outcome != agent.Done {
		t.Fatalf("turn after a damaged summary failed: %q", events[len(events)-1].Text)
	}
	if summaries.Load() == before {
		t.Error("the damaged summary was not rebuilt")
	}
	if fake.Rejected() != 0 {
		t.Errorf("%d requests exceeded the window", fake.Rejected())
	}
}

func TestSummaryCallFitsTheWindowWithCJK(t *testing.T) {
	var summaries atomic.Int32
	fake := &fakeopenai.Server{ContextWindow: 6000}
	fake.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		if isSummaryCall(req) {
			summaries.Add(1)
			return fakeopenai.Reply{Content: "很长的对话，每个问题都已回答。"}
		}
		return fakeopenai.Reply{Content: "已回答：" + strings.Repeat("细节", 200)}
	}
	db, _ := openDB(t)
	h := budgetHarness(t, fake, db, 6000)
	for i := 1; i <= 20; i++ {
		h.send(t, "web/cjk", fmt.Sprintf("问题 %02d %s", i, strings.Repeat("这是一个很长的中文问题", 90)))
		if events := h.waitEnd(t, "web/cjk"); events[len(events)-1].Outcome != agent.Done {
			t.Fatalf("turn %d failed: %q", i, events[len(events)-1].Text)
		}
	}
	if summaries.Load() == 0 {
		t.Fatal("no summary was needed: the test proves nothing")
	}
	if n := fake.Rejected(); n != 0 {
		t.Errorf("%d requests (summary calls included) exceeded the window", n)
	}
}

// storeHarness runs a runner with an 8,000-token context on st, a store
// over db, with opts besides.
func storeHarness(t *testing.T, fake *fakeopenai.Server, db *store.DB, st agent.Store, opts agent.Options) *harness {
	t.Helper()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	model := agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: srv.URL + "/v1", APIKey: "sk-test", Timeout: 5 * time.Second, BaseBackoff: time.Millisecond})
	h := &harness{fake: fake, db: db, events: map[string]chan agent.Event{}, model: model}
	opts.Model, opts.Store, opts.ModelName, opts.ContextTokens, opts.MaxRounds = model, st, "fake", 8000, 200
	opts.Events = publishTo(func(e agent.Event) { h.ch(e.Session) <- e })
	var err error
	if h.runner, err = agent.NewRunner(opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.runner.Close)
	return h
}

// summaryRefusing is the bbolt store refusing the first commit that
// saves a summary, as a store that fails for a moment does.
type summaryRefusing struct {
	*store.DB
	refused atomic.Bool
}

func (s *summaryRefusing) Commit(ctx context.Context, r *agent.Round) error {
	if r.Checkpoint.Summary != nil && s.refused.CompareAndSwap(false, true) {
		return errors.New("store: commit: write failed")
	}
	return s.DB.Commit(ctx, r)
}

// TestUnsavedSummaryEndsTheTurn: a summary the store refuses to save
// ends the turn on its last saved state, with nothing more asked of the
// model; before, the round went on over the ended turn (a model request,
// its text in the thread after the ending, tools run).
func TestUnsavedSummaryEndsTheTurn(t *testing.T) {
	var summaries atomic.Int32
	fake := &fakeopenai.Server{ContextWindow: 8000}
	fake.Respond = chatty(&summaries)
	db, _ := openDB(t)
	st := &summaryRefusing{DB: db}
	h := storeHarness(t, fake, db, st, agent.Options{})
	for i := 1; i < 27 && summaries.Load() == 0; i++ {
		before := len(fake.Requests())
		h.send(t, "web/sum", longMessage(i))
		events := h.waitEnd(t, "web/sum")
		if summaries.Load() == 0 {
			continue
		}
		end := events[len(events)-1]
		if end.Outcome != agent.Failed || !strings.Contains(end.Text, "could not save") || end.Seq == 0 {
			t.Errorf("the turn whose summary was not saved ended %s (%q, seq %d), want failed, said, in the log", end.Outcome, end.Text, end.Seq)
		}
		time.Sleep(500 * time.Millisecond) // a round going on over the ended turn would ask the model by now
		if n := len(fake.Requests()) - before; n != 1 {
			t.Errorf("%d model requests in the turn whose summary was not saved, want the summary's alone", n)
		}
	}
	if summaries.Load() == 0 {
		t.Fatal("no summary was made")
	}
}

// reserveCounting is the bbolt store counting reservations.
type reserveCounting struct {
	*store.DB
	reserves atomic.Int32
}

func (s *reserveCounting) Reserve(ctx context.Context, person, day string, need, want, budget int64) (int64, int64, error) {
	if need > 0 {
		s.reserves.Add(1)
	}
	return s.DB.Reserve(ctx, person, day, need, want, budget)
}

// TestSummaryIsReserved: a summary request is reserved against the
// requester's day like the round's own (DESIGN §18: every request's cost
// is reserved before it is made), and the day is charged what the two
// used, no more and no less.
func TestSummaryIsReserved(t *testing.T) {
	var summaries atomic.Int32
	fake := &fakeopenai.Server{ContextWindow: 8000}
	fake.Respond = chatty(&summaries)
	db, _ := openDB(t)
	st := &reserveCounting{DB: db}
	h := storeHarness(t, fake, db, st, agent.Options{UserTokens: 10_000_000})
	const key = "slack/T1/C1/1.1"
	for i := 1; i < 27 && summaries.Load() == 0; i++ {
		before := st.reserves.Load()
		if err := h.runner.Submit(context.Background(), key, agent.Inbound{Text: longMessage(i), AuthorID: "U1"}); err != nil {
			t.Fatal(err)
		}
		events := h.waitEnd(t, key)
		if end := events[len(events)-1]; end.Outcome != agent.Done {
			t.Fatalf("turn %d ended %s: %q", i, end.Outcome, end.Text)
		}
		if summaries.Load() > 0 {
			if n := st.reserves.Load() - before; n != 2 {
				t.Errorf("%d reservations in the turn that summarised, want 2 (the summary's and the round's)", n)
			}
		}
	}
	if summaries.Load() == 0 {
		t.Fatal("no summary was made")
	}
	cp, _, _, err := db.Load(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := db.Spent(context.Background(), "slack/U1", agent.Day(time.Now())); err != nil || n != cp.Usage.Tokens() {
		t.Errorf("the day's count = %d, %v; want the %d tokens the session's requests used", n, err, cp.Usage.Tokens())
	}
}
