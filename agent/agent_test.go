package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/goleak"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/store"
	"github.com/pinplan/pinplan/todo"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type harness struct {
	fake   *fakeopenai.Server
	db     *store.DB
	runner *agent.Runner
	model  *agent.OpenAIModel

	mu     sync.Mutex // guards events
	events map[string]chan agent.Event
}

func (h *harness) ch(key string) chan agent.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.events[key]
	if !ok {
		c = make(chan agent.Event, 1000)
		h.events[key] = c
	}
	return c
}

type harnessOpts struct {
	stream  bool
	retries int
	timeout time.Duration
	tools   []agent.Tool
	role    string
	db      *store.DB
	// approvalTimeout: 0 keeps the runner's default.
	approvalTimeout time.Duration
	approvers       []string
	owners          agent.Owners
	files           agent.FileReader
	planApproval    bool
}

func newHarness(t *testing.T, fake *fakeopenai.Server, o harnessOpts) *harness {
	t.Helper()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	db := o.db
	if db == nil {
		var err error
		db, err = store.Open(filepath.Join(t.TempDir(), "pinplan.db"), store.Options{BatchDelay: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
	}
	if o.timeout == 0 {
		o.timeout = 5 * time.Second
	}
	model := agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: srv.URL + "/v1", APIKey: "sk-test", Stream: o.stream,
		Timeout: o.timeout, Retries: o.retries, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Second})
	reg, err := agent.NewRegistry(o.tools...)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{fake: fake, db: db, events: map[string]chan agent.Event{}, model: model}
	h.runner, err = agent.NewRunner(agent.Options{Model: model, Store: db, Tools: reg, ModelName: "fake", ReminderRole: o.role, ApprovalTimeout: o.approvalTimeout, Approvers: o.approvers, Owners: o.owners, Files: o.files, PlanApproval: o.planApproval,
		Events: publishTo(func(e agent.Event) { h.ch(e.Session) <- e })})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.runner.Close)
	return h
}

// publishTo is an event service with f as its one subscriber.
func publishTo(f func(agent.Event)) *agent.EventService {
	ev := &agent.EventService{}
	ev.Follow(agent.SubscriberFunc(f))
	return ev
}

func (h *harness) send(t testing.TB, key, text string) {
	t.Helper()
	if err := h.runner.Submit(context.Background(), key, agent.Inbound{Text: text}); err != nil {
		t.Fatal(err)
	}
}

// waitEnd waits for the session's next TurnEnded event and returns the
// events of that session seen on the way.
func (h *harness) waitEnd(t testing.TB, key string) []agent.Event {
	t.Helper()
	var seen []agent.Event
	timeout := time.After(20 * time.Second)
	for {
		select {
		case e := <-h.ch(key):
			seen = append(seen, e)
			if e.Kind == agent.TurnEnded {
				return seen
			}
		case <-timeout:
			t.Fatalf("no TurnEnded for %s; saw %+v", key, seen)
		}
	}
}

func readTool() agent.Tool {
	return agent.Tool{Name: "read_file", Description: "Read a file.", Idempotent: true,
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}},
		Run: func(_ context.Context, _ *agent.ToolEnv, args string) (string, error) {
			return "contents of " + args, nil
		}}
}

func call(name, args string) fakeopenai.Call { return fakeopenai.Call{Name: name, Arguments: args} }

func toolResults(req openai.ChatCompletionRequest) map[string]string {
	out := map[string]string{}
	for _, m := range req.Messages {
		if m.Role == openai.ChatMessageRoleTool {
			out[m.ToolCallID] = m.Content
		}
	}
	return out
}

func lastToolResult(t *testing.T, req openai.ChatCompletionRequest) string {
	t.Helper()
	m := req.Messages[len(req.Messages)-1]
	if m.Role != openai.ChatMessageRoleTool {
		t.Fatalf("last message is %s, want a tool result", m.Role)
	}
	return m.Content
}

func TestTodoWriteResults(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%t", stream), func(t *testing.T) {
			good := `{"todos":[{"content":"  读取 <code> & test ","status":"in_progress"},{"content":"ship 🚀","status":"pending"}]}`
			fake := &fakeopenai.Server{Respond: fakeopenai.Script(func(string) []fakeopenai.Reply {
				return []fakeopenai.Reply{
					{ToolCalls: []fakeopenai.Call{call("todo_write", good)}},
					{ToolCalls: []fakeopenai.Call{call("todo_write", `{"todos":[{"content":"x","status":"done"}]}`)}},
					{ToolCalls: []fakeopenai.Call{call("todo_write", `{"todos":[`)}},
					{ToolCalls: []fakeopenai.Call{call("no_such_tool", `{}`)}},
					{Content: "all set"},
				}
			})}
			h := newHarness(t, fake, harnessOpts{stream: stream})
			h.send(t, "web/a", "plan it")
			events := h.waitEnd(t, "web/a")
			reqs := fake.Requests()
			if len(reqs) != 5 {
				t.Fatalf("got %d requests, want 5", len(reqs))
			}
			want := `{"todos":[{"content":"\u8bfb\u53d6 <code> & test","status":"in_progress"},{"content":"ship \ud83d\ude80","status":"pending"}]}`
			if got := lastToolResult(t, reqs[1]); got != want {
				t.Errorf("accepted result = %s, want %s", got, want)
			}
			for i, code := range map[int]string{2: "invalid_arguments", 3: "invalid_json", 4: "unknown_tool"} {
				var res struct {
					Error struct{ Code, Message string } `json:"error"`
				}
				got := lastToolResult(t, reqs[i])
				if err := json.Unmarshal([]byte(got), &res); err != nil || res.Error.Code != code || res.Error.Message == "" {
					t.Errorf("request %d result = %s, want error code %s", i, got, code)
				}
			}
			if !strings.Contains(lastToolResult(t, reqs[2]), "todos[0].status") {
				t.Errorf("invalid_arguments message does not name the path: %s", lastToolResult(t, reqs[2]))
			}
			plans, err := h.db.Plans(context.Background(), "web/a")
			if err != nil {
				t.Fatal(err)
			}
			if len(plans) != 1 || todo.Encode(plans[0].Items) != want || plans[0].Revision != 1 {
				t.Errorf("stored plans = %+v, want exactly revision 1", plans)
			}
			var kinds []agent.EventKind
			for _, e := range events {
				if e.Kind != agent.TextDelta && e.Kind != agent.TextDone { // streamed text: TestStreamedTextEvents
					kinds = append(kinds, e.Kind)
				}
			}
			// The round with the call to an unknown tool also reports that
			// call as evidence (DESIGN §15).
			wantKinds := []agent.EventKind{agent.TurnStarted, agent.PlanChanged, agent.EvidenceChanged, agent.TurnEnded}
			if fmt.Sprint(kinds) != fmt.Sprint(wantKinds) {
				t.Errorf("events = %v, want %v", kinds, wantKinds)
			}
			if reqs[0].Tools == nil || !strings.Contains(reqs[0].Messages[0].Content, todo.PromptAddendum) {
				t.Error("first request lacks the tools or the prompt addendum")
			}
		})
	}
}

func TestToolSchemaOffered(t *testing.T) {
	fake := &fakeopenai.Server{}
	h := newHarness(t, fake, harnessOpts{})
	h.send(t, "web/s", "hi")
	h.waitEnd(t, "web/s")
	req := fake.Requests()[0]
	var def *openai.FunctionDefinition
	for _, tl := range req.Tools {
		if tl.Function.Name == "todo_write" {
			def = tl.Function
		}
	}
	if def == nil || def.Description != todo.ToolDescription {
		t.Fatalf("todo_write not offered as specified: %+v", req.Tools)
	}
	got, _ := json.Marshal(def.Parameters)
	var norm any
	raw, _ := json.Marshal(todo.ArgumentsSchema())
	json.Unmarshal(raw, &norm)
	want, _ := json.Marshal(norm)
	if string(got) != string(want) {
		t.Errorf("schema sent = %s, want %s", got, want)
	}
}

func TestSessionsAreIsolated(t *testing.T) {
	fake := &fakeopenai.Server{Respond: fakeopenai.Script(func(first string) []fakeopenai.Reply {
		return []fakeopenai.Reply{
			{ToolCalls: []fakeopenai.Call{call("todo_write", fmt.Sprintf(`{"todos":[{"content":"plan of %s","status":"pending"}]}`, first))}},
			{Content: "answer for " + first},
		}
	})}
	h := newHarness(t, fake, harnessOpts{})
	h.send(t, "web/one", "alpha")
	h.send(t, "web/two", "beta")
	h.waitEnd(t, "web/one")
	h.waitEnd(t, "web/two")
	for _, req := range fake.Requests() {
		b, _ := json.Marshal(req.Messages)
		if strings.Contains(string(b), "alpha") == strings.Contains(string(b), "beta") {
			t.Errorf("request mixes or lacks sessions: %s", b)
		}
	}
	for key, word := range map[string]string{"web/one": "alpha", "web/two": "beta"} {
		plans, _ := h.db.Plans(context.Background(), key)
		if len(plans) != 1 || plans[0].Items[0].Content != "plan of "+word {
			t.Errorf("%s plans = %+v", key, plans)
		}
	}
}

func reminderCount(req openai.ChatCompletionRequest) int {
	n := 0
	for _, m := range req.Messages {
		if m.Content == todo.ReminderText {
			n++
		}
	}
	return n
}

func TestStaleReminder(t *testing.T) {
	for _, role := range []string{"system", "user"} {
		t.Run(role, func(t *testing.T) {
			read := call("read_file", `{"path":"a"}`)
			fake := &fakeopenai.Server{Respond: fakeopenai.Script(func(string) []fakeopenai.Reply {
				return []fakeopenai.Reply{
					{ToolCalls: []fakeopenai.Call{read}},                                     // -> request 2, stale 1
					{ToolCalls: []fakeopenai.Call{read, read, read}},                         // three calls, one round: stale 2
					{ToolCalls: []fakeopenai.Call{read}},                                     // stale 3
					{ToolCalls: []fakeopenai.Call{read}},                                     // request 4 carried the reminder; stale 1
					{ToolCalls: []fakeopenai.Call{read}},                                     // stale 2
					{ToolCalls: []fakeopenai.Call{call("todo_write", `{"todos":[]}`), read}}, // reset to 0
					{ToolCalls: []fakeopenai.Call{read}},
					{ToolCalls: []fakeopenai.Call{read}},
					{Content: "done"},
				}
			})}
			h := newHarness(t, fake, harnessOpts{tools: []agent.Tool{readTool()}, role: role})
			h.send(t, "web/r", "go")
			h.waitEnd(t, "web/r")
			reqs := fake.Requests()
			if len(reqs) != 9 {
				t.Fatalf("got %d requests, want 9", len(reqs))
			}
			for i, req := range reqs {
				want := 0
				if i == 3 {
					want = 1
				}
				if got := reminderCount(req); got != want {
					t.Errorf("request %d has %d reminders, want %d", i+1, got, want)
				}
			}
			last := reqs[3].Messages[len(reqs[3].Messages)-1]
			if last.Content != todo.ReminderText || last.Role != role {
				t.Errorf("request 4 ends with %s %q, want the %s reminder", last.Role, last.Content, role)
			}
			_, hist, _, err := h.db.Load(context.Background(), "web/r")
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range hist {
				if e.Message.Content == todo.ReminderText {
					t.Error("reminder stored in history")
				}
			}
			cp, _, _, _ := h.db.Load(context.Background(), "web/r")
			if cp.Stale != 2 || cp.State != agent.Idle || cp.Revision != 1 {
				t.Errorf("checkpoint stale=%d state=%s rev=%d, want 2 idle 1", cp.Stale, cp.State, cp.Revision)
			}
		})
	}
}

func TestParallelCallsAnsweredInOrder(t *testing.T) {
	fake := &fakeopenai.Server{Respond: fakeopenai.Script(func(string) []fakeopenai.Reply {
		return []fakeopenai.Reply{
			{ToolCalls: []fakeopenai.Call{
				{ID: "c1", Name: "todo_write", Arguments: `{"todos":[{"content":"a","status":"pending"}]}`},
				{ID: "c2", Name: "read_file", Arguments: `{"path":"x"}`},
				{ID: "c3", Name: "todo_write", Arguments: `{"todos":[{"content":"a","status":"completed"}]}`},
			}},
			{Content: "ok"},
		}
	})}
	h := newHarness(t, fake, harnessOpts{tools: []agent.Tool{readTool()}, stream: true})
	fake.Fail(fakeopenai.Fault{StreamIndexZero: true})
	h.send(t, "web/p", "go")
	events := h.waitEnd(t, "web/p")
	req := fake.Requests()[1]
	n := len(req.Messages)
	var ids []string
	for _, m := range req.Messages[n-3:] {
		ids = append(ids, m.ToolCallID)
	}
	if strings.Join(ids, ",") != "c1,c2,c3" {
		t.Errorf("tool results in order %v, want c1,c2,c3", ids)
	}
	if len(req.Messages[n-4].ToolCalls) != 3 {
		t.Errorf("rebuilt %d tool calls from index-0 stream, want 3", len(req.Messages[n-4].ToolCalls))
	}
	var revs []int64
	for _, e := range events {
		if e.Kind == agent.PlanChanged {
			revs = append(revs, e.Revision)
		}
	}
	if fmt.Sprint(revs) != "[1 2]" {
		t.Errorf("published revisions %v, want [1 2]", revs)
	}
}

func TestMessagesDuringTurnJoinIt(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	fake := &fakeopenai.Server{}
	fake.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		n := 0
		for _, m := range req.Messages {
			if m.Role == openai.ChatMessageRoleAssistant {
				n++
			}
		}
		if n == 0 {
			once.Do(func() { <-release })
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{call("todo_write", `{"todos":[{"content":"a","status":"pending"}]}`)}}
		}
		return fakeopenai.Reply{Content: "done"}
	}
	h := newHarness(t, fake, harnessOpts{})
	h.send(t, "web/q", "first")
	waitRequests(t, fake, 1)
	h.send(t, "web/q", "second")
	h.send(t, "web/q", "third")
	close(release)
	h.waitEnd(t, "web/q")
	reqs := fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("got %d requests, want 2 (one turn)", len(reqs))
	}
	msgs := reqs[1].Messages
	if msgs[len(msgs)-2].Content != "second" || msgs[len(msgs)-1].Content != "third" {
		t.Errorf("queued messages not appended before the next request: %+v", msgs[len(msgs)-3:])
	}
}

func TestModelFaults(t *testing.T) {
	tests := []struct {
		name   string
		stream bool
		faults []fakeopenai.Fault
	}{
		{"429 retry-after", false, []fakeopenai.Fault{{Status: 429, RetryAfter: "0.2"}}},
		{"500s", false, []fakeopenai.Fault{{Status: 500}, {Status: 502}}},
		{"timeout", false, []fakeopenai.Fault{{Delay: 2 * time.Second}}},
		{"cut stream", true, []fakeopenai.Fault{{CutStream: true}}},
		{"malformed body", false, []fakeopenai.Fault{{Malformed: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeopenai.Server{Respond: fakeopenai.Script(func(string) []fakeopenai.Reply {
				return []fakeopenai.Reply{{ToolCalls: []fakeopenai.Call{call("todo_write", `{"todos":[{"content":"a","status":"pending"}]}`)}}, {Content: "fine"}}
			})}
			h := newHarness(t, fake, harnessOpts{stream: tt.stream, retries: 3, timeout: 500 * time.Millisecond})
			fake.Fail(tt.faults...)
			start := time.Now()
			h.send(t, "web/f", "go")
			events := h.waitEnd(t, "web/f")
			end := events[len(events)-1]
			if end.Outcome != agent.Done {
				t.Fatalf("outcome %s (%v), want done after retries", end.Outcome, end.Err)
			}
			if got, want := len(fake.Requests()), len(tt.faults)+2; got != want {
				t.Errorf("requests = %d, want %d", got, want)
			}
			if tt.name == "429 retry-after" && time.Since(start) < 200*time.Millisecond {
				t.Errorf("Retry-After of 0.2s not honoured: turn took %s", time.Since(start))
			}
			// Exhausted retries: a clear failure, then the session still works.
			fake.Fail(tt.faults[0], tt.faults[0], tt.faults[0], tt.faults[0])
			h.send(t, "web/f", "again")
			events = h.waitEnd(t, "web/f")
			end = events[len(events)-1]
			if end.Outcome != agent.Failed || end.Text == "" || end.Err == nil {
				t.Fatalf("outcome %s %q %v, want failed with a message", end.Outcome, end.Text, end.Err)
			}
			cp, _, inbox, _ := h.db.Load(context.Background(), "web/f")
			if cp.State != agent.Idle || len(inbox) != 0 || cp.Revision != 1 {
				t.Errorf("after failure: state %s inbox %d revision %d", cp.State, len(inbox), cp.Revision)
			}
			h.send(t, "web/f", "third time")
			events = h.waitEnd(t, "web/f")
			if end := events[len(events)-1]; end.Outcome != agent.Done {
				t.Errorf("session unusable after failure: %s %v", end.Outcome, end.Err)
			}
			reqs := fake.Requests()
			last := reqs[len(reqs)-1]
			b, _ := json.Marshal(last.Messages)
			if !strings.Contains(string(b), "again") || !strings.Contains(string(b), "third time") {
				t.Errorf("history lost the failed turn's message: %s", b)
			}
		})
	}
}

func TestRetryAfterBeyondCapFailsAtOnce(t *testing.T) {
	fake := &fakeopenai.Server{}
	h := newHarness(t, fake, harnessOpts{retries: 3})
	fake.Fail(fakeopenai.Fault{Status: 429, RetryAfter: "3600"})
	h.send(t, "web/ra", "go")
	events := h.waitEnd(t, "web/ra")
	end := events[len(events)-1]
	if end.Outcome != agent.Failed || !strings.Contains(end.Err.Error(), "retry after 1h0m0s") {
		t.Errorf("outcome %s, err %v", end.Outcome, end.Err)
	}
	if n := len(fake.Requests()); n != 1 {
		t.Errorf("%d requests: retried before the server's Retry-After", n)
	}
}

func TestSubmitDuringShutdownIsKept(t *testing.T) {
	fake := &fakeopenai.Server{}
	h := newHarness(t, fake, harnessOpts{})
	h.runner.Close()
	if err := h.runner.Submit(context.Background(), "web/late", agent.Inbound{Text: "arrived late"}); err != nil {
		t.Fatal(err)
	}
	keys, _ := h.db.Resumable(context.Background())
	if len(keys) != 1 || keys[0] != "web/late" || len(fake.Requests()) != 0 {
		t.Errorf("resumable %v, requests %d: the late message must wait for the next process", keys, len(fake.Requests()))
	}
}

// The intent record written before a non-idempotent tool runs is a full
// checkpoint: the pending message, and the stale counter as the request
// that carried the reminder left it.
func TestPendingRecordBeforeNonIdempotentTool(t *testing.T) {
	read := call("read_file", `{}`)
	fake := &fakeopenai.Server{Respond: fakeopenai.Script(func(string) []fakeopenai.Reply {
		return []fakeopenai.Reply{{ToolCalls: []fakeopenai.Call{read}}, {ToolCalls: []fakeopenai.Call{read}}, {ToolCalls: []fakeopenai.Call{read}},
			{ToolCalls: []fakeopenai.Call{call("deploy", `{}`)}}, {Content: "deployed"}}
	})}
	var seen *agent.Checkpoint
	var h *harness
	deploy := agent.Tool{Name: "deploy", Run: func(ctx context.Context, _ *agent.ToolEnv, _ string) (string, error) {
		seen, _, _, _ = h.db.Load(ctx, "web/pend")
		return "ok", nil
	}}
	h = newHarness(t, fake, harnessOpts{tools: []agent.Tool{readTool(), deploy}})
	h.send(t, "web/pend", "ship it")
	h.waitEnd(t, "web/pend")
	if reminderCount(fake.Requests()[3]) != 1 {
		t.Fatal("the 4th request should carry the reminder")
	}
	if seen == nil || seen.Pending == nil || len(seen.Pending.ToolCalls) != 1 || seen.Stale != 0 || seen.State != agent.Running {
		t.Errorf("checkpoint while deploy ran: %+v", seen)
	}
	cp, _, _, _ := h.db.Load(context.Background(), "web/pend")
	if cp.Pending != nil || cp.Stale != 1 {
		t.Errorf("after the round: pending %v, stale %d (want nil, 1)", cp.Pending, cp.Stale)
	}
}

func TestMaxRounds(t *testing.T) {
	fake := &fakeopenai.Server{Respond: func(*openai.ChatCompletionRequest) fakeopenai.Reply {
		return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{call("read_file", `{}`)}}
	}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	db, err := store.Open(filepath.Join(t.TempDir(), "p.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	reg, err := agent.NewRegistry(readTool())
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan agent.Event, 100)
	r, err := agent.NewRunner(agent.Options{Model: agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: srv.URL}), Store: db, Tools: reg, MaxRounds: 4,
		Events: publishTo(func(e agent.Event) { events <- e })})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Submit(context.Background(), "web/m", agent.Inbound{Text: "loop"}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(20 * time.Second)
	for ended := false; !ended; {
		select {
		case e := <-events:
			if e.Kind != agent.TurnEnded {
				continue
			}
			ended = true
			if e.Outcome != agent.Limited || !strings.Contains(e.Text, "PINPLAN_MAX_ROUNDS") {
				t.Errorf("outcome %s %q", e.Outcome, e.Text)
			}
		case <-timeout:
			t.Fatal("no TurnEnded after 20s")
		}
	}
	if n := len(fake.Requests()); n != 4 {
		t.Errorf("requests = %d, want 4", n)
	}
}

func TestInterruptedNonIdempotentTool(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "p.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A previous process committed the intent to call "deploy" and died.
	pending := openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{
		{ID: "d1", Type: "function", Function: openai.FunctionCall{Name: "deploy", Arguments: `{}`}},
		{ID: "t1", Type: "function", Function: openai.FunctionCall{Name: "todo_write", Arguments: `{"todos":[{"content":"deploy","status":"in_progress"}]}`}},
	}}
	err = db.Commit(context.Background(), &agent.Round{
		Append:     []agent.Entry{{Message: openai.ChatCompletionMessage{Role: "user", Content: "deploy it"}}},
		Checkpoint: agent.Checkpoint{Key: "web/d", State: agent.Running, HistoryLen: 1, Pending: &pending},
	})
	if err != nil {
		t.Fatal(err)
	}
	var deploys int
	deploy := agent.Tool{Name: "deploy", Run: func(context.Context, *agent.ToolEnv, string) (string, error) { deploys++; return "deployed", nil }}
	fake := &fakeopenai.Server{}
	h := newHarness(t, fake, harnessOpts{db: db, tools: []agent.Tool{deploy}})
	if n, err := h.runner.Resume(context.Background()); err != nil || n != 1 {
		t.Fatalf("Resume = %d, %v", n, err)
	}
	events := h.waitEnd(t, "web/d")
	if !events[0].Resumed {
		t.Error("first event does not say resumed")
	}
	if deploys != 0 {
		t.Errorf("non-idempotent tool ran again %d times", deploys)
	}
	res := toolResults(fake.Requests()[0])
	if !strings.Contains(res["d1"], `"code":"interrupted"`) {
		t.Errorf("deploy result = %s, want interrupted", res["d1"])
	}
	if !strings.HasPrefix(res["t1"], `{"todos":`) {
		t.Errorf("idempotent todo_write not re-run: %s", res["t1"])
	}
}

func TestStopEndsTurn(t *testing.T) {
	fake := &fakeopenai.Server{}
	h := newHarness(t, fake, harnessOpts{timeout: 10 * time.Second})
	fake.Fail(fakeopenai.Fault{Delay: 5 * time.Second})
	h.send(t, "web/stop", "long task")
	waitRequests(t, fake, 1)
	start := time.Now()
	if !h.runner.Stop("web/stop", "ann") {
		t.Fatal("Stop found no running session")
	}
	events := h.waitEnd(t, "web/stop")
	end := events[len(events)-1]
	if end.Outcome != agent.Stopped || time.Since(start) > 3*time.Second {
		t.Errorf("outcome %s after %s, want stopped at once", end.Outcome, time.Since(start))
	}
	cp, hist, inbox, _ := h.db.Load(context.Background(), "web/stop")
	if cp.State != agent.Idle || len(inbox) != 0 || len(hist) != 1 || hist[0].Message.Content != "long task" {
		t.Errorf("after stop: state %s, inbox %d, history %+v", cp.State, len(inbox), hist)
	}
	h.send(t, "web/stop", "next")
	if events := h.waitEnd(t, "web/stop"); events[len(events)-1].Outcome != agent.Done {
		t.Error("session unusable after stop")
	}
}

// gate is an agent.Owners whose Take waits until the test lets it go, as
// a replica's does while it takes a session over.
type gate struct {
	entered chan struct{}
	release chan struct{}
}

func (g *gate) Take(ctx context.Context, key string) (bool, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.release
	return true, nil
}

// TestStopBeforeTheTurnStarts: a stop that comes while the session's work
// is queued or loading (no turn context yet) stops the turn that work
// starts, rather than being told it worked and doing nothing.
func TestStopBeforeTheTurnStarts(t *testing.T) {
	fake := &fakeopenai.Server{}
	g := &gate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	h := newHarness(t, fake, harnessOpts{timeout: 10 * time.Second, owners: g})
	fake.Fail(fakeopenai.Fault{Delay: 5 * time.Second})
	h.send(t, "web/early", "long task")
	<-g.entered
	if !h.runner.Stop("web/early", "ann") {
		t.Fatal("Stop found nothing to stop while the session's work was starting")
	}
	start := time.Now()
	close(g.release)
	events := h.waitEnd(t, "web/early")
	if end := events[len(events)-1]; end.Outcome != agent.Stopped || end.StoppedBy != "ann" || time.Since(start) > 3*time.Second {
		t.Errorf("outcome %s by %q after %s, want stopped by ann at once", end.Outcome, end.StoppedBy, time.Since(start))
	}
}
