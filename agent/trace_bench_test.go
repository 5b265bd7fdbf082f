package agent_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/store"
)

// BenchmarkTracedRounds measures what tracing costs a round end to end:
// 10-round turns (benchScript) of one session against the loopback fake
// model, with tracing off (no provider, as with no endpoint), recording
// into memory, and exporting over OTLP/HTTP (batched, as cmd/bot does) to
// a loopback receiver that decodes every request. One op is one turn.
// The in-memory store keeps fsync out of the figure; bbolt is the store
// cmd/bot runs.
func BenchmarkTracedRounds(b *testing.B) {
	for _, st := range []string{"mem", "bbolt"} {
		for _, mode := range []string{"off", "recorder", "otlp"} {
			b.Run(fmt.Sprintf("store=%s/tracing=%s", st, mode), func(b *testing.B) { tracedRounds(b, st, mode) })
		}
	}
}

func tracedRounds(b *testing.B, st, mode string) {
	ctx := context.Background()
	fake := &fakeopenai.Server{Respond: fakeopenai.Script(benchScript), NoRecord: true}
	srv := httptest.NewServer(fake)
	b.Cleanup(srv.Close)
	var db agent.Store = &memStore{}
	if st == "bbolt" {
		bolt, err := store.Open(filepath.Join(b.TempDir(), "bench.db"), store.Options{BatchDelay: 2 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { bolt.Close() })
		db = bolt
	}
	var tp trace.TracerProvider
	var received atomic.Int64
	switch mode {
	case "recorder":
		sdk := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
		b.Cleanup(func() { sdk.Shutdown(ctx) })
		tp = sdk
	case "otlp":
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			raw, _ := io.ReadAll(r.Body)
			var req collectortrace.ExportTraceServiceRequest
			if err := proto.Unmarshal(raw, &req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			for _, rs := range req.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					received.Add(int64(len(ss.Spans)))
				}
			}
			out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
			w.Header().Set("Content-Type", "application/x-protobuf")
			w.Write(out)
		}))
		b.Cleanup(recv.Close)
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(recv.URL+"/v1/traces"))
		if err != nil {
			b.Fatal(err)
		}
		sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
		b.Cleanup(func() { sdk.Shutdown(ctx) })
		tp = sdk
	}
	reg, _ := agent.NewRegistry(readTool())
	done := make(chan struct{}, 1)
	runner, err := agent.NewRunner(agent.Options{
		Model: agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: srv.URL + "/v1"}), Store: db, Tools: reg, Tracer: tp,
		Events: publishTo(func(e agent.Event) {
			if e.Kind == agent.TurnEnded {
				done <- struct{}{}
			}
		})})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(runner.Close)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		key := fmt.Sprintf("web/b%d", i)
		if err := runner.Submit(ctx, key, agent.Inbound{Text: key}); err != nil {
			b.Fatal(err)
		}
		<-done
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N*roundsPerTurn)/elapsed.Seconds(), "rounds/s")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N*roundsPerTurn), "ns/round")
	if sdk, ok := tp.(*sdktrace.TracerProvider); ok && mode == "otlp" {
		sdk.ForceFlush(ctx)
		// A turn: invoke_agent, 10 chat, 9 execute_tool.
		b.ReportMetric(float64(received.Load())/float64(b.N), "spans/turn")
	}
}
