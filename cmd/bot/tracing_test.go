package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// otlpSpan is one span as a collector received it, decoded from the
// OTLP protobuf the bot sent.
type otlpSpan struct {
	TraceID, SpanID, Parent string
	Name                    string
	Attrs                   map[string]string
	Events                  []string
	Resource                map[string]string
}

// otlpReceiver is a loopback OTLP/HTTP trace receiver: POST /v1/traces
// with an ExportTraceServiceRequest in protobuf, as a collector takes it.
type otlpReceiver struct {
	*httptest.Server
	mu       sync.Mutex // guards spans, requests and headers
	spans    []otlpSpan
	requests int
	headers  []http.Header
	other    atomic.Int32 // requests to any other path (metrics, logs)
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	rc := &otlpReceiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *otlpReceiver) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		rc.other.Add(1)
		http.NotFound(w, r)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "content type "+ct, http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		return
	}
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []otlpSpan
	for _, rs := range req.ResourceSpans {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := otlpSpan{TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId), Parent: hex.EncodeToString(s.ParentSpanId),
					Name: s.Name, Attrs: attrMap(s.Attributes), Resource: res}
				for _, e := range s.Events {
					sp.Events = append(sp.Events, e.Name)
				}
				got = append(got, sp)
			}
		}
	}
	rc.mu.Lock()
	rc.spans = append(rc.spans, got...)
	rc.requests++
	rc.headers = append(rc.headers, r.Header.Clone())
	rc.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// attrMap renders OTLP attributes as strings: arrays as [a b].
func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.Key] = anyValue(kv.Value)
	}
	return m
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.Values {
			parts = append(parts, anyValue(e))
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return v.String()
}

func (rc *otlpReceiver) all() []otlpSpan {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]otlpSpan(nil), rc.spans...)
}

// waitSpans waits until cond holds for the spans received, and fails
// with the names of all that came.
func (rc *otlpReceiver) waitSpans(t *testing.T, what string, cond func([]otlpSpan) bool) []otlpSpan {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		spans := rc.all()
		if cond(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			var names []string
			for _, s := range spans {
				names = append(names, s.Name+" "+s.Attrs["gen_ai.conversation.id"])
			}
			sort.Strings(names)
			t.Fatalf("timed out waiting for %s; received %d spans:\n%s", what, len(spans), strings.Join(names, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// find returns the spans named name (a prefix) with the attributes want.
func find(spans []otlpSpan, name string, want map[string]string) []otlpSpan {
	var out []otlpSpan
next:
	for _, s := range spans {
		if !strings.HasPrefix(s.Name, name) {
			continue
		}
		for k, v := range want {
			if s.Attrs[k] != v {
				continue next
			}
		}
		out = append(out, s)
	}
	return out
}

func children(spans []otlpSpan, parent otlpSpan) []otlpSpan {
	var out []otlpSpan
	for _, s := range spans {
		if s.TraceID == parent.TraceID && s.Parent == parent.SpanID {
			out = append(out, s)
		}
	}
	return out
}

// clockThenAnswer asks for current_time and answers once it has it.
func clockThenAnswer(req *openai.ChatCompletionRequest) fakeopenai.Reply {
	if last := req.Messages[len(req.Messages)-1]; last.Role == openai.ChatMessageRoleTool {
		return fakeopenai.Reply{Content: "it is " + last.Content}
	}
	return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: "current_time", Arguments: "{}"}}}
}

// tracedEnv is the bot's environment for the trace tests: the console, a
// fake model, and (with rc) the receiver as the OTLP endpoint, batches
// sent every 50 ms.
func tracedEnv(t *testing.T, model *fakeopenai.Server, db string, rc *otlpReceiver) map[string]string {
	t.Helper()
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)
	env := map[string]string{"PINPLAN_DB": db, "PINPLAN_HTTP_ADDR": "127.0.0.1:0", "OPENAI_BASE_URL": srv.URL + "/v1",
		"OPENAI_API_KEY": "sk-tracetest-secret", "OPENAI_MODEL": "fake-model", "PINPLAN_LOG_LEVEL": "info",
		"OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_EXPORTER_OTLP_HEADERS": "x-pinplan-test=yes"}
	if rc != nil {
		env["OTEL_EXPORTER_OTLP_ENDPOINT"] = rc.URL
	}
	return env
}

func goroutines(t *testing.T, p *botProc) string {
	t.Helper()
	resp, err := http.Get(p.URL + "/debug/pprof/goroutine?debug=2")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("goroutine profile: %s", resp.Status)
	}
	return string(b)
}

// TestTracesOverOTLP: with the endpoint set, a turn with a tool call
// reaches a collector as invoke_agent with chat and execute_tool children
// carrying gen_ai.* attributes and the session key, and the reply's
// delivery as a client span of its own.
func TestTracesOverOTLP(t *testing.T) {
	t.Parallel()
	rc := newOTLPReceiver(t)
	env := tracedEnv(t, &fakeopenai.Server{Respond: clockThenAnswer}, filepath.Join(t.TempDir(), "bot.db"), rc)
	p := startBot(t, env, botBinary)
	out, err := postJSON(context.Background(), p.URL+"/api/threads", map[string]string{"text": "what time is it, privately"})
	if err != nil {
		t.Fatal(err)
	}
	key := out["key"].(string)
	spans := rc.waitSpans(t, "the turn and its reply", func(spans []otlpSpan) bool {
		return len(find(spans, "invoke_agent", map[string]string{"gen_ai.conversation.id": key, "pinplan.turn.state": "idle"})) == 1 &&
			len(find(spans, "deliver reply", map[string]string{"gen_ai.conversation.id": key})) == 1
	})
	turn := find(spans, "invoke_agent", map[string]string{"gen_ai.conversation.id": key})[0]
	if turn.Name != "invoke_agent pinplan" || turn.Parent != "" {
		t.Errorf("turn span %q with parent %q, want invoke_agent pinplan, a root", turn.Name, turn.Parent)
	}
	for k, v := range map[string]string{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "pinplan", "pinplan.platform": "web",
		"pinplan.turn.outcome": "done", "gen_ai.request.model": "fake-model"} {
		if turn.Attrs[k] != v {
			t.Errorf("invoke_agent: %s = %q, want %q", k, turn.Attrs[k], v)
		}
	}
	if turn.Resource["service.name"] != "pinplan" || turn.Resource["service.version"] == "" {
		t.Errorf("resource %v, want service.name pinplan and a version", turn.Resource)
	}
	kids := children(spans, turn)
	chats := find(kids, "chat fake-model", map[string]string{"gen_ai.operation.name": "chat", "gen_ai.request.model": "fake-model", "gen_ai.conversation.id": key})
	tools := find(kids, "execute_tool current_time", map[string]string{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "current_time",
		"pinplan.tool.outcome": "ok", "gen_ai.conversation.id": key})
	if len(chats) != 2 || len(tools) != 1 {
		t.Fatalf("invoke_agent's children: %d chat, %d execute_tool (of %d), want 2 and 1", len(chats), len(tools), len(kids))
	}
	for _, c := range chats {
		if c.Attrs["gen_ai.usage.input_tokens"] == "" || c.Attrs["gen_ai.usage.output_tokens"] == "" || c.Attrs["gen_ai.response.finish_reasons"] == "" {
			t.Errorf("chat span without usage or finish reasons: %v", c.Attrs)
		}
	}
	if tools[0].Attrs["gen_ai.tool.call.id"] == "" {
		t.Error("execute_tool without gen_ai.tool.call.id")
	}
	reply := find(spans, "deliver reply", map[string]string{"gen_ai.conversation.id": key})[0]
	if reply.Attrs["pinplan.delivery.outcome"] != "delivered" || reply.Attrs["pinplan.platform"] != "web" {
		t.Errorf("reply delivery span %v", reply.Attrs)
	}
	// No text without the content switch; never the API key.
	for _, s := range spans {
		for k, v := range s.Attrs {
			if strings.Contains(v, "privately") || strings.Contains(v, "sk-tracetest-secret") {
				t.Errorf("%s: %s = %q", s.Name, k, v)
			}
		}
	}
	rc.mu.Lock()
	h := rc.headers[0]
	rc.mu.Unlock()
	if h.Get("X-Pinplan-Test") != "yes" {
		t.Errorf("export without OTEL_EXPORTER_OTLP_HEADERS's header: %v", h)
	}
	if g := goroutines(t, p); !strings.Contains(g, "sdk/trace.(*batchSpanProcessor).processQueue") {
		t.Error("no batch span processor runs with an endpoint set")
	}
}

// TestTraceSurvivesKill: a turn killed (kill -9) in the middle and resumed
// by the next process shows as one trace, its parts from both processes.
func TestTraceSurvivesKill(t *testing.T) {
	t.Parallel()
	rc := newOTLPReceiver(t)
	model := &fakeopenai.Server{Respond: clockThenAnswer}
	model.Fail(fakeopenai.Fault{}, fakeopenai.Fault{Delay: 5 * time.Minute}) // the second request hangs
	db := filepath.Join(t.TempDir(), "bot.db")
	env := tracedEnv(t, model, db, rc)
	first := startBot(t, env, botBinary)
	out, err := postJSON(context.Background(), first.URL+"/api/threads", map[string]string{"text": "what time is it"})
	if err != nil {
		t.Fatal(err)
	}
	key := out["key"].(string)
	// Killed once the first round's spans were exported and the second
	// request is in flight.
	before := rc.waitSpans(t, "the first round's spans", func(spans []otlpSpan) bool {
		return len(find(spans, "execute_tool current_time", map[string]string{"gen_ai.conversation.id": key})) == 1
	})
	waitFor(t, 30*time.Second, "the second model request", func() bool { return len(model.Requests()) >= 2 })
	first.kill()
	ran := find(before, "execute_tool current_time", map[string]string{"gen_ai.conversation.id": key})[0]

	second := startBot(t, env, botBinary)
	after := rc.waitSpans(t, "the resumed turn", func(spans []otlpSpan) bool {
		return len(find(spans, "invoke_agent", map[string]string{"gen_ai.conversation.id": key, "pinplan.turn.state": "idle"})) == 1
	})
	resumed := find(after, "invoke_agent", map[string]string{"gen_ai.conversation.id": key, "pinplan.turn.state": "idle"})[0]
	if resumed.Attrs["pinplan.turn.resumed_from"] != "running" || resumed.Attrs["pinplan.turn.outcome"] != "done" {
		t.Errorf("resumed turn span %v, want resumed from running, done", resumed.Attrs)
	}
	if resumed.TraceID != ran.TraceID {
		t.Fatalf("the resumed turn is in trace %s, the part before the kill in %s: want one trace", resumed.TraceID, ran.TraceID)
	}
	if resumed.Parent != ran.Parent {
		t.Errorf("the resumed part's parent is %s, want the turn's first span %s", resumed.Parent, ran.Parent)
	}
	if resumed.Resource["service.instance.id"] == ran.Resource["service.instance.id"] {
		t.Errorf("both processes are service.instance.id %q", ran.Resource["service.instance.id"])
	}
	if n := len(find(children(after, resumed), "chat ", nil)); n != 1 {
		t.Errorf("the resumed part has %d chat spans, want 1 (the request re-sent)", n)
	}
	// Every span of this session's turn is in the one trace.
	for _, s := range after {
		if s.Attrs["gen_ai.conversation.id"] == key && !strings.HasPrefix(s.Name, "deliver ") && s.TraceID != ran.TraceID {
			t.Errorf("%s is in trace %s, want %s", s.Name, s.TraceID, ran.TraceID)
		}
	}
	second.stop(t)
}

// TestNoTracesWithoutEndpoint: with no trace endpoint, even with the
// other OTLP variables set (and other signals' endpoints at the
// receiver), nothing is sent and no exporter or batch processor runs.
func TestNoTracesWithoutEndpoint(t *testing.T) {
	t.Parallel()
	rc := newOTLPReceiver(t)
	env := tracedEnv(t, &fakeopenai.Server{Respond: clockThenAnswer}, filepath.Join(t.TempDir(), "bot.db"), nil)
	env["OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"] = rc.URL + "/v1/metrics"
	env["OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"] = rc.URL + "/v1/logs"
	env["OTEL_SERVICE_NAME"] = "pinplan-test"
	env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"
	p := startBot(t, env, botBinary)
	out, err := postJSON(context.Background(), p.URL+"/api/threads", map[string]string{"text": "what time is it"})
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimPrefix(out["key"].(string), "web/")
	waitFor(t, 30*time.Second, "the answer", func() bool {
		var th map[string]any
		getJSON(t, p.URL+"/api/threads/"+id, &th)
		return bytes.Contains([]byte(fmt.Sprint(th)), []byte("it is "))
	})
	// A batch would have gone out within 50 ms; give it ten times that.
	time.Sleep(500 * time.Millisecond)
	rc.mu.Lock()
	n := rc.requests
	rc.mu.Unlock()
	if n != 0 || rc.other.Load() != 0 {
		t.Errorf("the receiver got %d trace and %d other requests, want none", n, rc.other.Load())
	}
	g := goroutines(t, p)
	for _, s := range []string{"go.opentelemetry.io/otel/sdk/trace", "otlptrace"} {
		if strings.Contains(g, s) {
			t.Errorf("a goroutine of %s runs with no endpoint", s)
		}
	}
	if strings.Contains(p.stderr.String(), "exporting traces") {
		t.Error("the bot says it exports traces with no endpoint")
	}
}

// grpcReceiver is a loopback OTLP/gRPC trace receiver.
type grpcReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex // guards spans
	spans []otlpSpan
}

// Export implements collectortrace.TraceServiceServer.
func (g *grpcReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				g.spans = append(g.spans, otlpSpan{Name: s.Name, Attrs: attrMap(s.Attributes)})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// TestTracesOverGRPC: OTEL_EXPORTER_OTLP_PROTOCOL=grpc sends the same
// spans over OTLP/gRPC.
func TestTracesOverGRPC(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recv := &grpcReceiver{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, recv)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	env := tracedEnv(t, &fakeopenai.Server{Respond: clockThenAnswer}, filepath.Join(t.TempDir(), "bot.db"), nil)
	env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = "http://" + ln.Addr().String()
	env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
	p := startBot(t, env, botBinary)
	out, err := postJSON(context.Background(), p.URL+"/api/threads", map[string]string{"text": "what time is it"})
	if err != nil {
		t.Fatal(err)
	}
	key := out["key"].(string)
	waitFor(t, 60*time.Second, "the turn's spans over gRPC", func() bool {
		recv.mu.Lock()
		defer recv.mu.Unlock()
		return len(find(recv.spans, "invoke_agent", map[string]string{"gen_ai.conversation.id": key, "pinplan.turn.state": "idle"})) == 1 &&
			len(find(recv.spans, "execute_tool current_time", map[string]string{"gen_ai.conversation.id": key})) == 1
	})
}
