package agent_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/store"
	"github.com/pinplan/pinplan/todo"
)

// traced is a runner whose spans a recorder keeps.
type traced struct {
	runner *agent.Runner
	rec    *tracetest.SpanRecorder
	db     *store.DB
	events chan agent.Event
}

type tracedOpts struct {
	tools   []agent.Tool
	content func(string) string
	db      *store.DB
	retries int
	tracer  bool // false: no Options.Tracer
}

func newTraced(t *testing.T, fake *fakeopenai.Server, o tracedOpts) *traced {
	t.Helper()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	if o.db == nil {
		db, err := store.Open(filepath.Join(t.TempDir(), "pinplan.db"), store.Options{BatchDelay: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		o.db = db
	}
	reg, err := agent.NewRegistry(o.tools...)
	if err != nil {
		t.Fatal(err)
	}
	tr := &traced{rec: tracetest.NewSpanRecorder(), db: o.db, events: make(chan agent.Event, 1000)}
	opts := agent.Options{
		Model: agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: srv.URL + "/v1", APIKey: "sk-test", Timeout: 5 * time.Second,
			Retries: o.retries, BaseBackoff: time.Millisecond, MaxBackoff: time.Second}),
		Store: o.db, Tools: reg, ModelName: "fake", TraceContent: o.content,
		Events: publishTo(func(e agent.Event) { tr.events <- e }),
	}
	if o.tracer {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tr.rec))
		t.Cleanup(func() { tp.Shutdown(context.Background()) })
		opts.Tracer = tp
	}
	tr.runner, err = agent.NewRunner(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.runner.Close)
	return tr
}

func (tr *traced) wait(t *testing.T, kind agent.EventKind) agent.Event {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case e := <-tr.events:
			if e.Kind == kind {
				return e
			}
		case <-timeout:
			t.Fatalf("no event of kind %d", kind)
		}
	}
}

// ended returns the spans ended so far, waiting until there are at least
// n named like name (a prefix).
func (tr *traced) ended(t *testing.T, name string, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		spans := tr.rec.Ended()
		if len(named(spans, name)) >= n || time.Now().After(deadline) {
			if got := len(named(spans, name)); got < n {
				t.Fatalf("got %d ended spans named %q, want %d; all: %v", got, name, n, names(spans))
			}
			return spans
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func named(spans []sdktrace.ReadOnlySpan, prefix string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if strings.HasPrefix(s.Name(), prefix) {
			out = append(out, s)
		}
	}
	return out
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// wantAttrs checks s has each of want, compared as strings (Value.String).
func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[string]string) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		if g, ok := got[attribute.Key(k)]; !ok || g.String() != v {
			t.Errorf("%s: %s = %q, want %q", s.Name(), k, g.String(), v)
		}
	}
}

func childrenOf(spans []sdktrace.ReadOnlySpan, parent sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Parent().SpanID() == parent.SpanContext().SpanID() && s.SpanContext().TraceID() == parent.SpanContext().TraceID() {
			out = append(out, s)
		}
	}
	return out
}

// planThenRead plans, reads a file, and answers.
func planThenRead(string) []fakeopenai.Reply {
	return []fakeopenai.Reply{
		{ToolCalls: []fakeopenai.Call{call(todo.ToolName, todo.Encode([]todo.Item{{Content: "read it", Status: todo.InProgress}, {Content: "say it", Status: todo.Pending}}))}},
		{ToolCalls: []fakeopenai.Call{call("read_file", `{"path":"s3cret.txt"}`)}},
		{Content: "done"},
	}
}

func TestTraceOfATurn(t *testing.T) {
	tr := newTraced(t, &fakeopenai.Server{Respond: fakeopenai.Script(planThenRead)}, tracedOpts{tools: []agent.Tool{readTool()}, tracer: true})
	ctx := context.Background()
	const key = "web/t1"
	if err := tr.runner.Submit(ctx, key, agent.Inbound{Text: "read my s3cret file", Author: "ann", AuthorID: "U1"}); err != nil {
		t.Fatal(err)
	}
	tr.wait(t, agent.TurnEnded)
	spans := tr.ended(t, "invoke_agent", 1)

	turns := named(spans, "invoke_agent ")
	if len(turns) != 1 {
		t.Fatalf("got %d invoke_agent spans, want 1: %v", len(turns), names(spans))
	}
	turn := turns[0]
	if turn.Parent().IsValid() {
		t.Errorf("invoke_agent has parent %v, want a root", turn.Parent())
	}
	wantAttrs(t, turn, map[string]string{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "pinplan", "gen_ai.conversation.id": key,
		"gen_ai.request.model": "fake", "user.id": "U1", "pinplan.platform": "web", "pinplan.turn": "1", "pinplan.turn.state": "idle", "pinplan.turn.outcome": "done"})
	if _, ok := attrs(turn)["pinplan.turn.resumed_from"]; ok {
		t.Errorf("a turn that started here says it resumed")
	}

	kids := childrenOf(spans, turn)
	chats, tools := named(kids, "chat fake"), named(kids, "execute_tool ")
	if len(chats) != 3 || len(tools) != 2 || len(kids) != 5 {
		t.Fatalf("invoke_agent's children: %v, want 3 chat fake and 2 execute_tool", names(kids))
	}
	for i, c := range chats {
		if c.SpanKind() != trace.SpanKindClient {
			t.Errorf("chat span kind %v, want client", c.SpanKind())
		}
		finish := `["tool_calls"]`
		if i == 2 {
			finish = `["stop"]`
		}
		wantAttrs(t, c, map[string]string{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "fake",
			"gen_ai.conversation.id": key, "gen_ai.response.finish_reasons": finish, "server.address": "127.0.0.1"})
		a := attrs(c)
		if a["gen_ai.usage.input_tokens"].AsInt64() <= 0 || a["gen_ai.usage.output_tokens"].AsInt64() <= 0 {
			t.Errorf("chat span usage: in %v, out %v, want both > 0", a["gen_ai.usage.input_tokens"].String(), a["gen_ai.usage.output_tokens"].String())
		}
	}
	plan, read := tools[0], tools[1]
	if plan.Name() != "execute_tool todo_write" || read.Name() != "execute_tool read_file" {
		t.Fatalf("tool spans %q, %q", plan.Name(), read.Name())
	}
	wantAttrs(t, plan, map[string]string{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "todo_write", "pinplan.tool.outcome": "ok",
		"pinplan.plan.revision": "1", "pinplan.plan.changed": "true", "pinplan.plan.items": "2", "pinplan.plan.pending": "1", "pinplan.plan.in_progress": "1", "pinplan.plan.completed": "0"})
	wantAttrs(t, read, map[string]string{"gen_ai.tool.name": "read_file", "gen_ai.tool.type": "function", "pinplan.tool.outcome": "ok", "gen_ai.conversation.id": key})
	if id := attrs(read)["gen_ai.tool.call.id"].AsString(); id == "" {
		t.Error("execute_tool has no gen_ai.tool.call.id")
	}
	// Without the content switch, no text: not the message, the
	// arguments or the result.
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result":
				t.Errorf("%s records %s without the content switch", s.Name(), kv.Key)
			}
			if strings.Contains(kv.Value.String(), "s3cret") {
				t.Errorf("%s: %s carries the message's text: %q", s.Name(), kv.Key, kv.Value.String())
			}
		}
	}

	// The trace context is kept with the checkpoint.
	cp, _, _, err := tr.db.Load(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	sc := turn.SpanContext()
	if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; cp.Trace != want {
		t.Errorf("checkpoint trace %q, want %q", cp.Trace, want)
	}
}

func TestTraceContentOnlyWhenAsked(t *testing.T) {
	redact := strings.NewReplacer("s3cret", "[redacted]").Replace
	tr := newTraced(t, &fakeopenai.Server{Respond: fakeopenai.Script(planThenRead)}, tracedOpts{tools: []agent.Tool{readTool()}, tracer: true, content: redact})
	if err := tr.runner.Submit(context.Background(), "web/t2", agent.Inbound{Text: "read my s3cret file", Author: "ann", AuthorID: "U1"}); err != nil {
		t.Fatal(err)
	}
	tr.wait(t, agent.TurnEnded)
	spans := tr.ended(t, "invoke_agent", 1)
	chats := named(spans, "chat ")
	if len(chats) != 3 {
		t.Fatalf("got %d chat spans, want 3", len(chats))
	}
	in := attrs(chats[0])["gen_ai.input.messages"].AsString()
	if !strings.Contains(in, `"role":"user","parts":[{"type":"text","content":"ann: read my [redacted] file"}]`) {
		t.Errorf("first request's gen_ai.input.messages = %s", in)
	}
	out := attrs(chats[2])["gen_ai.output.messages"].AsString()
	if out != `[{"role":"assistant","parts":[{"type":"text","content":"done"}],"finish_reason":"stop"}]` {
		t.Errorf("last answer's gen_ai.output.messages = %s", out)
	}
	read := named(spans, "execute_tool read_file")[0]
	wantAttrs(t, read, map[string]string{"gen_ai.tool.call.arguments": `{"path":"[redacted].txt"}`, "gen_ai.tool.call.result": `contents of {"path":"[redacted].txt"}`})
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.String(), "s3cret") {
				t.Errorf("%s: %s was not passed through TraceContent: %q", s.Name(), kv.Key, kv.Value.String())
			}
		}
	}
}

// TestTraceApprovalWait: a turn that waits for a person goes on in its
// trace; the call's span starts when the card asked, with the wait as its
// child saying who decided and how.
func TestTraceApprovalWait(t *testing.T) {
	var runs atomic.Int32
	tr := newTraced(t, &fakeopenai.Server{Respond: writeOnce}, tracedOpts{tools: []agent.Tool{writeTool(&runs)}, tracer: true})
	ctx := context.Background()
	const key = "slack/T1/C1/1.0"
	if err := tr.runner.Submit(ctx, key, agent.Inbound{Text: "write the notes", Author: "ann", AuthorID: "U1"}); err != nil {
		t.Fatal(err)
	}
	need := tr.wait(t, agent.ApprovalNeeded)
	first := tr.ended(t, "invoke_agent", 1)
	time.Sleep(20 * time.Millisecond) // a wait the trace shows
	if _, err := tr.runner.Decide(ctx, key, need.Approval.CallID, agent.Decision{Allow: true, By: "U2", ByName: "bob"}); err != nil {
		t.Fatal(err)
	}
	tr.wait(t, agent.TurnEnded)
	spans := tr.ended(t, "invoke_agent", 2)

	turns := named(spans, "invoke_agent ")
	if len(turns) != 2 {
		t.Fatalf("got %d invoke_agent spans, want 2: %v", len(turns), names(spans))
	}
	paused, went := turns[0], turns[1]
	if paused.SpanContext().SpanID() != named(first, "invoke_agent")[0].SpanContext().SpanID() {
		t.Fatal("spans ended out of order")
	}
	wantAttrs(t, paused, map[string]string{"pinplan.turn.state": "waiting", "pinplan.platform": "slack"})
	wantAttrs(t, went, map[string]string{"pinplan.turn.state": "idle", "pinplan.turn.outcome": "done", "pinplan.turn.resumed_from": "waiting", "gen_ai.conversation.id": key})
	if went.Parent().SpanID() != paused.SpanContext().SpanID() || went.SpanContext().TraceID() != paused.SpanContext().TraceID() {
		t.Errorf("the part after the decision has parent %v, want the turn's first span %v", went.Parent(), paused.SpanContext())
	}
	tools := named(childrenOf(spans, went), "execute_tool fs__write_file")
	if len(tools) != 1 {
		t.Fatalf("the part after the decision has children %v, want execute_tool fs__write_file", names(childrenOf(spans, went)))
	}
	call := tools[0]
	wantAttrs(t, call, map[string]string{"gen_ai.tool.type": "extension", "pinplan.tool.server": "fs", "pinplan.tool.outcome": "ok", "gen_ai.tool.call.id": need.Approval.CallID})
	waits := childrenOf(spans, call)
	if len(waits) != 1 || waits[0].Name() != "approval fs__write_file" {
		t.Fatalf("execute_tool's children %v, want one approval span", names(waits))
	}
	wait := waits[0]
	wantAttrs(t, wait, map[string]string{"pinplan.approval.decision": "allow_once", "pinplan.approval.decided_by": "U2"})
	if !wait.StartTime().Equal(need.Approval.Asked) || !call.StartTime().Equal(need.Approval.Asked) {
		t.Errorf("the wait starts %v and the call %v, want both when the card asked, %v", wait.StartTime(), call.StartTime(), need.Approval.Asked)
	}
	if d := wait.EndTime().Sub(wait.StartTime()); d < 20*time.Millisecond {
		t.Errorf("the wait lasted %v, want the time until the decision", d)
	}
	if wait.EndTime().After(went.StartTime().Add(time.Second)) || wait.EndTime().Before(paused.EndTime()) {
		t.Errorf("the wait ends at %v, want between the pause (%v) and the run after it (%v)", wait.EndTime(), paused.EndTime(), went.StartTime())
	}
}

// TestTraceResumedTurn: a turn a runner left running (its process
// stopped in the middle) is resumed by the next in the same trace.
func TestTraceResumedTurn(t *testing.T) {
	var n atomic.Int32
	fake := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		if n.Add(1) == 1 {
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{call("read_file", `{"path":"a"}`)}}
		}
		return fakeopenai.Reply{Content: "done"}
	}}
	fake.Fail(fakeopenai.Fault{}, fakeopenai.Fault{Delay: time.Minute}) // the second request hangs
	first := newTraced(t, fake, tracedOpts{tools: []agent.Tool{readTool()}, tracer: true})
	ctx := context.Background()
	const key = "web/t3"
	if err := first.runner.Submit(ctx, key, agent.Inbound{Text: "read a", AuthorID: "U1"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(fake.Requests()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	first.runner.Close() // the request in flight is abandoned; the turn stays running
	before := first.ended(t, "invoke_agent", 1)
	stopped := named(before, "invoke_agent")[0]
	wantAttrs(t, stopped, map[string]string{"pinplan.turn.state": "running"})

	second := newTraced(t, fake, tracedOpts{tools: []agent.Tool{readTool()}, tracer: true, db: first.db})
	if _, err := second.runner.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	second.wait(t, agent.TurnEnded)
	after := second.ended(t, "invoke_agent", 1)
	resumed := named(after, "invoke_agent")[0]
	wantAttrs(t, resumed, map[string]string{"pinplan.turn.resumed_from": "running", "pinplan.turn.outcome": "done"})
	if resumed.SpanContext().TraceID() != stopped.SpanContext().TraceID() || resumed.Parent().SpanID() != stopped.SpanContext().SpanID() {
		t.Errorf("resumed turn's span: trace %s parent %s, want trace %s parent %s", resumed.SpanContext().TraceID(), resumed.Parent().SpanID(),
			stopped.SpanContext().TraceID(), stopped.SpanContext().SpanID())
	}
	if !resumed.Parent().IsRemote() {
		t.Error("the resumed part's parent is not marked remote")
	}
	if len(named(childrenOf(after, resumed), "chat ")) != 1 {
		t.Errorf("resumed part's children %v, want one chat", names(childrenOf(after, resumed)))
	}
}

// TestTraceModelRetry: a retried model request is one chat span with the
// retry as an event.
func TestTraceModelRetry(t *testing.T) {
	fake := &fakeopenai.Server{}
	fake.Fail(fakeopenai.Fault{Status: 503})
	tr := newTraced(t, fake, tracedOpts{tracer: true, retries: 2})
	if err := tr.runner.Submit(context.Background(), "web/t4", agent.Inbound{Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	tr.wait(t, agent.TurnEnded)
	spans := tr.ended(t, "invoke_agent", 1)
	chats := named(spans, "chat ")
	if len(chats) != 1 {
		t.Fatalf("got %d chat spans, want 1", len(chats))
	}
	ev := chats[0].Events()
	if len(ev) != 1 || ev[0].Name != "retry" {
		t.Fatalf("chat span events %v, want one retry", ev)
	}
	got := map[attribute.Key]string{}
	for _, kv := range ev[0].Attributes {
		got[kv.Key] = kv.Value.String()
	}
	if got["error.type"] != "503" || got["pinplan.retry.attempt"] != "1" {
		t.Errorf("retry event attributes %v", got)
	}
}

// TestTraceOff: without a tracer nothing is kept with the checkpoint.
func TestTraceOff(t *testing.T) {
	tr := newTraced(t, &fakeopenai.Server{Respond: fakeopenai.Script(planThenRead)}, tracedOpts{tools: []agent.Tool{readTool()}})
	ctx := context.Background()
	if err := tr.runner.Submit(ctx, "web/t5", agent.Inbound{Text: "read"}); err != nil {
		t.Fatal(err)
	}
	tr.wait(t, agent.TurnEnded)
	cp, _, _, err := tr.db.Load(ctx, "web/t5")
	if err != nil {
		t.Fatal(err)
	}
	if cp.Trace != "" {
		t.Errorf("checkpoint trace %q without a tracer, want none", cp.Trace)
	}
}

// TestTraceSteer: a person's change of the plan is a span of its own,
// naming the change, who made it and on which revision.
func TestTraceSteer(t *testing.T) {
	fake := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		if len(req.Messages) > 0 && req.Messages[len(req.Messages)-1].Role == openai.ChatMessageRoleTool {
			return fakeopenai.Reply{Content: "done"}
		}
		return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{call("todo_write", `{"todos":[{"content":"a","status":"completed"},{"content":"b","status":"pending"}]}`)}}
	}}
	tr := newTraced(t, fake, tracedOpts{tracer: true})
	ctx := context.Background()
	if err := tr.runner.Submit(ctx, "web/tr", agent.Inbound{Text: "go"}); err != nil {
		t.Fatal(err)
	}
	tr.wait(t, agent.TurnEnded)
	if err := tr.runner.Steer(ctx, "web/tr", agent.Steer{Action: agent.SteerSkip, Item: "b", Revision: 1, By: "ann", ByID: "U1"}); err != nil {
		t.Fatal(err)
	}
	spans := named(tr.ended(t, "plan_change", 1), "plan_change")
	wantAttrs(t, spans[0], map[string]string{"pinplan.plan.change": "skip", "pinplan.plan.changed_by": "ann", "gen_ai.conversation.id": "web/tr", "user.id": "U1"})
	if got := attrs(spans[0])["pinplan.plan.revision"]; got.AsInt64() != 1 {
		t.Errorf("revision %v, want 1", got)
	}
}
