package chat

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat/chattest"
	"github.com/pinplan/pinplan/todo"
)

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value.String()
	}
	return m
}

// TestDeliverySpans: each delivery is one client span with its operation,
// attempts, retries and typed outcome; the text sent is never in it.
func TestDeliverySpans(t *testing.T) {
	p := &fakePlatform{
		replyErr: func(n int) error {
			switch n {
			case 1:
				return errTransient
			case 2:
				return nil
			}
			return fmt.Errorf("test: unknown channel: %w", ErrUndeliverable)
		},
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: &chattest.Outbox{}, Tracer: tp})
	t.Cleanup(r.Close)
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnStarted})
	observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.InProgress, todo.Pending)})
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Text: "the s3cret answer", Plan: plan(1, todo.Completed, todo.Completed)})
	settle(t, r, "test/1")
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Text: "one nobody can read"})
	settle(t, r, "test/1")

	var replies, plans []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "deliver reply":
			replies = append(replies, s)
		case "deliver plan":
			plans = append(plans, s)
		}
		if s.SpanKind() != trace.SpanKindClient {
			t.Errorf("%s: kind %v, want client", s.Name(), s.SpanKind())
		}
		for _, kv := range s.Attributes() {
			if v := kv.Value.String(); v == "the s3cret answer" || v == "one nobody can read" {
				t.Errorf("%s: %s carries the text sent", s.Name(), kv.Key)
			}
		}
	}
	if len(replies) != 2 {
		t.Fatalf("got %d reply spans, want 2", len(replies))
	}
	ok, refused := spanAttrs(replies[0]), spanAttrs(replies[1])
	want := map[attribute.Key]string{"pinplan.platform": "test", "gen_ai.conversation.id": "test/1", "pinplan.delivery.operation": "reply",
		"pinplan.delivery.attempts": "2", "pinplan.delivery.outcome": "delivered"}
	for k, v := range want {
		if ok[k] != v {
			t.Errorf("delivered reply: %s = %q, want %q", k, ok[k], v)
		}
	}
	if ev := replies[0].Events(); len(ev) != 1 || ev[0].Name != "retry" {
		t.Errorf("delivered reply's events %v, want one retry", ev)
	}
	if refused["pinplan.delivery.outcome"] != "permanent" || refused["error.type"] != "permanent" || replies[1].Status().Code != codes.Error {
		t.Errorf("refused reply: outcome %q, error.type %q, status %v; want permanent, an error", refused["pinplan.delivery.outcome"], refused["error.type"], replies[1].Status())
	}
	if len(plans) == 0 {
		t.Fatal("no plan delivery span")
	}
	if a := spanAttrs(plans[0]); a["pinplan.delivery.operation"] != "plan" || a["pinplan.delivery.outcome"] != "delivered" || a["gen_ai.conversation.id"] != "test/1" {
		t.Errorf("plan delivery attributes %v", a)
	}
}
