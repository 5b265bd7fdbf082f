package agent

import (
	"context"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pinplan/pinplan/todo"
)

// instantModel answers at once: what is left to measure is the code
// around the request.
type instantModel struct{}

func (instantModel) Complete(context.Context, openai.ChatCompletionRequest) (Reply, error) {
	return Reply{Message: openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: "ok"}}, nil
}

// BenchmarkTraceCodePaths measures what the tracing code costs one round
// (a chat span around the model request, an execute_tool span around one
// tool call), with an instant model and tool so nothing else is in the
// figure: untraced is the same calls with no tracing code at all; noop is
// the runner as cmd/bot builds it with no endpoint; sdk is a real
// provider that samples and records every span (exporting nothing).
// One op is one round.
func BenchmarkTraceCodePaths(b *testing.B) {
	ctx := context.Background()
	req := openai.ChatCompletionRequest{Model: "gpt-4o-mini"}
	tc := openai.ToolCall{ID: "call_1", Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "read_file", Arguments: `{"path":"x"}`}}
	work := todo.Restore(nil, 0, 0)
	const out = "contents"
	var model Model = instantModel{}
	reg, _ := NewRegistry()
	b.Run("untraced", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			model.Complete(ctx, req)
		}
	})
	round := func(b *testing.B, r *Runner) {
		b.ReportAllocs()
		for b.Loop() {
			r.complete(ctx, req)
			_, span := r.traceTool(ctx, tc, Decision{}, false)
			r.traceToolEnd(span, tc, out, work, 0)
		}
	}
	b.Run("noop", func(b *testing.B) {
		round(b, &Runner{opts: Options{Model: model, Tools: reg}, tracer: newTracer(noop.NewTracerProvider())})
	})
	b.Run("sdk", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider()
		defer tp.Shutdown(ctx)
		round(b, &Runner{opts: Options{Model: model, Tools: reg}, tracer: newTracer(tp)})
	})
}
