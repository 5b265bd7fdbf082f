package chat

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pinplan/pinplan/agent"
)

// Delivery spans (DESIGN §17): one client span per delivery to a platform
// (a reply, a card, a status, a plan render), saying which operation on
// which platform, for which session (gen_ai.conversation.id, as on the
// agent's spans), how many attempts it took, each retry as an event, and
// the typed outcome it ended with (Classify). Never the text sent.

const tracerName = "github.com/pinplan/pinplan/chat"

const (
	attrPlatform  = attribute.Key("pinplan.platform")
	attrOperation = attribute.Key("pinplan.delivery.operation")
	attrOutcome   = attribute.Key("pinplan.delivery.outcome")
	attrAttempts  = attribute.Key("pinplan.delivery.attempts")
	attrAttempt   = attribute.Key("pinplan.retry.attempt")
	attrWait      = attribute.Key("pinplan.retry.wait_ms")
)

// newTracer is the router's tracer from tp; nil for none or the no-op
// provider, and then deliveries skip the tracing code.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if _, off := tp.(noop.TracerProvider); off || tp == nil {
		return nil
	}
	return tp.Tracer(tracerName, trace.WithSchemaURL(semconv.SchemaURL))
}

// traced runs send, one delivery of op to th (its attempts, or one attempt
// where the caller retries), in a client span, and returns what send did.
func (d *deliverer) traced(ctx context.Context, op string, th Thread, send func(ctx context.Context) (int, error)) (int, error) {
	if d.tracer == nil {
		return send(ctx)
	}
	ctx, span := d.tracer.Start(ctx, "deliver "+op, trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	n, err := send(ctx)
	if span.IsRecording() {
		outcome := deliveryOutcome(ctx, err)
		span.SetAttributes(attrPlatform.String(th.Platform), semconv.GenAIConversationID(th.Key), attrOperation.String(op),
			attrAttempts.Int(n), attrOutcome.String(outcome))
		if err != nil {
			span.SetAttributes(semconv.ErrorTypeKey.String(outcome))
			span.SetStatus(codes.Error, outcome)
		}
	}
	return n, err
}

// deliver is one delivery of op to th, in its span, retried by op's
// policy (policies); since is when the send was first wanted, which a
// policy with a maximum age reads.
func (d *deliverer) deliver(ctx context.Context, op string, th Thread, since time.Time, send func(ctx context.Context) error) (int, error) {
	p := d.policyOf(op)
	var giveUp func() bool
	if p.maxAge > 0 {
		giveUp = func() bool { return d.opts.Now().Sub(since) > p.maxAge }
	}
	return d.traced(ctx, op, th, func(ctx context.Context) (int, error) {
		return sendUntil(ctx, d.backoff(p.max), p.attempts, giveUp, send)
	})
}

// policyOf is op's retry policy (policies); an operation missing from
// the table is a bug, logged, and gets a few attempts.
func (d *deliverer) policyOf(op string) policy {
	p, ok := policies[op]
	if !ok {
		d.opts.Logger.Error("no delivery policy for the operation; a few attempts", "op", op)
		p = policy{max: 10 * time.Second, attempts: 3}
	}
	return p
}

// retried delivers op to th: with n 0 retried by op's policy where it is
// (deliver), for a caller that may wait; with n 1 or more as its n-th
// attempt alone (attempt), for a send on the session's lane, whose waits
// are off the lane (onLane). It returns how long to wait before the next
// attempt (0: none) and the send's error.
func (d *deliverer) retried(ctx context.Context, op string, th Thread, since time.Time, n int, send func(ctx context.Context) error) (time.Duration, error) {
	if n == 0 {
		_, err := d.deliver(ctx, op, th, since, send)
		return 0, err
	}
	return d.attempt(ctx, op, th, since, n, send)
}

// attempt is the n-th attempt (1-based) of a delivery of op to th, in its
// span, for a send that retries off its lane instead of waiting on it: it
// returns the send's error and, when op's policy tries again after it,
// how long to wait first (0: no further attempt).
func (d *deliverer) attempt(ctx context.Context, op string, th Thread, since time.Time, n int, send func(ctx context.Context) error) (time.Duration, error) {
	p := d.policyOf(op)
	_, err := d.traced(ctx, op, th, func(ctx context.Context) (int, error) { return n, send(ctx) })
	if o, _ := Classify(err); err == nil || o != Retry && o != RetryAfter || ctx.Err() != nil {
		return 0, err
	}
	if p.attempts > 0 && n >= p.attempts || p.maxAge > 0 && d.opts.Now().Sub(since) > p.maxAge {
		return 0, err
	}
	return d.backoff(p.max).Wait(n, err), err
}

// deliveryOutcome is the typed outcome of a delivery, for its span.
func deliveryOutcome(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return "delivered"
	case ctx.Err() != nil:
		return "canceled" // shutting down: sent after the restart
	case errors.Is(err, agent.ErrFenced):
		return "fenced" // another replica holds the session now
	}
	o, _ := Classify(err)
	return strings.ReplaceAll(o.String(), " ", "_")
}

// traceRetry records a failed attempt that will be retried as an event of
// the delivery's span.
func traceRetry(ctx context.Context, attempt int, o Outcome, wait time.Duration) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent("retry", trace.WithAttributes(attrAttempt.Int(attempt), semconv.ErrorTypeKey.String(strings.ReplaceAll(o.String(), " ", "_")), attrWait.Int64(wait.Milliseconds())))
}
