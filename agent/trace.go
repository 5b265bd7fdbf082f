package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	openai "github.com/sashabaranov/go-openai"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pinplan/pinplan/todo"
)

// The turns' traces (DESIGN §17) follow the OpenTelemetry GenAI semantic
// conventions of semconv v1.41.0 (development status): an invoke_agent
// span for the part of a turn one run works on, a chat span per model
// request, an execute_tool span per tool call with the wait for a
// person's decision as its child. The attributes pinplan adds are named
// pinplan.*. Message text, tool arguments and results are recorded only
// with Options.TraceContent.
//
// A turn that pauses for an approval, or resumes after a restart or a
// takeover, goes on in the trace it began in: the W3C traceparent of its
// first invoke_agent span is kept in the checkpoint (Checkpoint.Trace),
// and each later part is a child of it, so one trace shows the gap.

// tracerName is the instrumentation scope of the agent's spans.
const tracerName = "github.com/pinplan/pinplan/agent"

// agentName is gen_ai.agent.name.
const agentName = "pinplan"

// pinplan's own attributes.
const (
	attrPlatform     = attribute.Key("pinplan.platform")
	attrTurn         = attribute.Key("pinplan.turn")
	attrResumedFrom  = attribute.Key("pinplan.turn.resumed_from")
	attrSinceSaved   = attribute.Key("pinplan.turn.since_checkpoint_ms")
	attrState        = attribute.Key("pinplan.turn.state")
	attrOutcome      = attribute.Key("pinplan.turn.outcome")
	attrToolServer   = attribute.Key("pinplan.tool.server")
	attrToolOutcome  = attribute.Key("pinplan.tool.outcome")
	attrDecision     = attribute.Key("pinplan.approval.decision")
	attrDecidedBy    = attribute.Key("pinplan.approval.decided_by")
	attrPlanRevision = attribute.Key("pinplan.plan.revision")
	attrPlanChanged  = attribute.Key("pinplan.plan.changed")
	attrPlanItems    = attribute.Key("pinplan.plan.items")
	attrPlanPending  = attribute.Key("pinplan.plan.pending")
	attrPlanDoing    = attribute.Key("pinplan.plan.in_progress")
	attrPlanDone     = attribute.Key("pinplan.plan.completed")
	attrRetryAttempt = attribute.Key("pinplan.retry.attempt")
	attrRetryWait    = attribute.Key("pinplan.retry.wait_ms")
	attrSteerAction  = attribute.Key("pinplan.plan.change")
	attrSteerBy      = attribute.Key("pinplan.plan.changed_by")
)

// newTracer is the runner's tracer from tp; nil for none or the no-op
// provider, and then every tracing path is skipped at its first branch:
// no endpoint, no cost (BENCHMARKS.md).
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if _, off := tp.(noop.TracerProvider); off || tp == nil {
		return nil
	}
	return tp.Tracer(tracerName, trace.WithSchemaURL(semconv.SchemaURL))
}

// noSpan is the span of a call that is not traced.
var noSpan = trace.SpanFromContext(context.Background())

// turnSpan is the invoke_agent span a run's turn context carries.
type turnSpan struct {
	span trace.Span
	key  string
}

type turnSpanKey struct{}

// traceTurn starts the invoke_agent span of the part of s's turn this run
// works on and returns the turn context carrying it, with endTurn wrapped
// to end the span too. from is the state the turn was stored in when this
// run picked it up ("" for a turn this run starts): a started turn begins
// a trace, whose context s.cp.Trace keeps from its first commit on; any
// other part is a child of that context. A run's second call keeps the
// span of its first.
func (r *Runner) traceTurn(ctx context.Context, s *session, from RunState, endTurn func()) (context.Context, func()) {
	if r.tracer == nil || ctx.Value(turnSpanKey{}) != nil {
		return ctx, endTurn
	}
	attrs := []attribute.KeyValue{
		semconv.GenAIOperationNameInvokeAgent,
		semconv.GenAIAgentName(agentName),
		semconv.GenAIConversationID(s.key),
		attrPlatform.String(platformOf(s.key)),
		attrTurn.Int64(s.cp.Turns),
	}
	if r.opts.ModelName != "" {
		attrs = append(attrs, semconv.GenAIRequestModel(r.opts.ModelName))
	}
	if s.cp.Requester != "" {
		attrs = append(attrs, semconv.UserID(s.cp.Requester))
	}
	if from != "" {
		attrs = append(attrs, attrResumedFrom.String(string(from)))
		if !s.cp.Updated.IsZero() {
			attrs = append(attrs, attrSinceSaved.Int64(r.opts.Now().Sub(s.cp.Updated).Milliseconds()))
		}
		if sc := parseTraceparent(s.cp.Trace); sc.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	ctx, span := r.tracer.Start(ctx, "invoke_agent "+agentName, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	if from == "" {
		s.cp.Trace = traceparent(span.SpanContext())
	}
	ctx = context.WithValue(ctx, turnSpanKey{}, turnSpan{span: span, key: s.key})
	return ctx, func() {
		if span.IsRecording() {
			// How this part left the turn: ended, paused for a decision,
			// or still running (a shutdown, a lost lease, a failed save).
			span.SetAttributes(attrState.String(string(s.cp.State)))
			if e := s.cp.Ended; s.cp.State == Idle && e != nil && e.Turn == s.cp.Turns {
				span.SetAttributes(attrOutcome.String(string(e.Outcome)))
				if e.Outcome == Failed {
					span.SetStatus(codes.Error, e.Text)
				}
			}
		}
		span.End()
		endTurn()
	}
}

// platformOf is the platform a session key names first (chat.Thread.Key:
// "slack/T1/C1/...").
func platformOf(key string) string {
	p, _, _ := strings.Cut(key, "/")
	return p
}

// traceparent is sc as a W3C traceparent header value, "" when invalid.
func traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
	return c.Get("traceparent")
}

// parseTraceparent reads what traceparent wrote; invalid on anything else.
func parseTraceparent(v string) trace.SpanContext {
	if v == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": v})
	return trace.SpanContextFromContext(ctx)
}

// complete is one model request, in its chat span.
func (r *Runner) complete(ctx context.Context, req openai.ChatCompletionRequest) (Reply, error) {
	reply, err := r.completeTraced(ctx, req)
	if err == nil && reply.Usage.PromptTokens == 0 && reply.Usage.CompletionTokens == 0 {
		// The server sends no usage: the budgets charge an estimate
		// (DESIGN §18), said once in the log.
		if r.noUsage.CompareAndSwap(false, true) {
			r.opts.Logger.Warn("the model server sends no usage: charging an estimate of each request's tokens to the budgets", "model", req.Model)
		}
		reply.Usage.PromptTokens = estimate(req)
		reply.Usage.CompletionTokens = estimateMessage(reply.Message)
		reply.Usage.TotalTokens = reply.Usage.PromptTokens + reply.Usage.CompletionTokens
		reply.Estimated = true
	}
	return reply, err
}

func (r *Runner) completeTraced(ctx context.Context, req openai.ChatCompletionRequest) (Reply, error) {
	if r.tracer == nil {
		return r.opts.Model.Complete(ctx, req)
	}
	name := "chat"
	if req.Model != "" {
		name += " " + req.Model
	}
	ctx, span := r.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	if !span.IsRecording() {
		return r.opts.Model.Complete(ctx, req)
	}
	span.SetAttributes(semconv.GenAIOperationNameChat, semconv.GenAIProviderNameOpenAI, semconv.GenAIRequestModel(req.Model))
	if ts, ok := ctx.Value(turnSpanKey{}).(turnSpan); ok {
		span.SetAttributes(semconv.GenAIConversationID(ts.key))
	}
	if redact := r.opts.TraceContent; redact != nil {
		span.SetAttributes(semconv.GenAIInputMessagesKey.String(inputMessages(req.Messages, redact)))
	}
	reply, err := r.opts.Model.Complete(ctx, req)
	if err != nil {
		// The error's text may quote what the server answered; the type
		// and status say enough, and never a credential.
		typ := modelErrorType(err)
		span.SetAttributes(semconv.ErrorTypeKey.String(typ))
		span.SetStatus(codes.Error, "model request failed: "+typ)
		return reply, err
	}
	finish := reply.FinishReason
	if finish == "" {
		finish = string(openai.FinishReasonStop)
		if len(reply.Message.ToolCalls) > 0 {
			finish = string(openai.FinishReasonToolCalls)
		}
	}
	span.SetAttributes(
		semconv.GenAIUsageInputTokens(reply.Usage.PromptTokens),
		semconv.GenAIUsageOutputTokens(reply.Usage.CompletionTokens),
		semconv.GenAIResponseFinishReasons(finish),
	)
	if redact := r.opts.TraceContent; redact != nil {
		out := contentMessage(reply.Message, redact)
		out.FinishReason = finish
		span.SetAttributes(semconv.GenAIOutputMessagesKey.String(marshalMessages([]contentMsg{out})))
	}
	return reply, nil
}

// serverAttributes are server.address and server.port of a model's base
// URL (never its credentials or path).
func serverAttributes(baseURL string) []attribute.KeyValue {
	u, err := url.Parse(baseURL)
	if err != nil || u.Hostname() == "" {
		return nil
	}
	attrs := []attribute.KeyValue{semconv.ServerAddress(u.Hostname())}
	port := u.Port()
	switch {
	case port == "" && u.Scheme == "https":
		port = "443"
	case port == "" && u.Scheme == "http":
		port = "80"
	}
	if n, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.ServerPort(n))
	}
	return attrs
}

// modelErrorType is error.type of a failed model request: the HTTP
// status, or what kind of failure it was.
func modelErrorType(err error) string {
	var me *ModelError
	switch {
	case errors.Is(err, ErrContextTooLong):
		return "context_length_exceeded"
	case errors.Is(err, ErrStopped):
		return "stopped"
	case errors.Is(err, context.Canceled), errors.Is(err, errShutdown):
		return "canceled"
	case errors.As(err, &me) && me.Status != 0:
		return strconv.Itoa(me.Status)
	case errors.Is(err, ErrRateLimited):
		return strconv.Itoa(http.StatusTooManyRequests)
	case errors.Is(err, ErrResponseTooLarge):
		return "response_too_large"
	}
	return "_OTHER"
}

// traceRetry records a model request's retry as an event of its chat span.
func traceRetry(ctx context.Context, attempt int, wait int64, err error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent("retry", trace.WithAttributes(attrRetryAttempt.Int(attempt), attrRetryWait.Int64(wait), semconv.ErrorTypeKey.String(retryErrorType(err))))
}

func retryErrorType(err error) string {
	if s := status(err); s != 0 {
		return strconv.Itoa(s)
	}
	switch {
	case errors.Is(err, errAttemptTimeout):
		return "timeout"
	case errors.Is(err, errBrokenStream):
		return "broken_stream"
	case errors.Is(err, errNoChoices):
		return "no_choices"
	}
	return "_OTHER"
}

// traceTool starts the execute_tool span of the call tc. A call a person
// decided on starts when its card asked (d.Asked), and the wait for the
// decision is its first child: who decided, and how.
func (r *Runner) traceTool(ctx context.Context, tc openai.ToolCall, d Decision, decided bool) (context.Context, trace.Span) {
	if r.tracer == nil {
		return ctx, noSpan
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	waited := decided && !d.Asked.IsZero()
	if waited {
		opts = append(opts, trace.WithTimestamp(d.Asked))
	}
	ctx, span := r.tracer.Start(ctx, "execute_tool "+tc.Function.Name, opts...)
	if !span.IsRecording() {
		return ctx, span
	}
	span.SetAttributes(semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(tc.Function.Name), semconv.GenAIToolCallID(tc.ID))
	if ts, ok := ctx.Value(turnSpanKey{}).(turnSpan); ok {
		span.SetAttributes(semconv.GenAIConversationID(ts.key))
	}
	if t, ok := r.opts.Tools.Lookup(tc.Function.Name); ok {
		if t.Description != "" {
			span.SetAttributes(semconv.GenAIToolDescription(t.Description))
		}
		if t.Server != "" {
			// An MCP server's tool reaches out of the process.
			span.SetAttributes(attrToolServer.String(t.Server), semconv.GenAIToolType("extension"))
		} else {
			span.SetAttributes(semconv.GenAIToolType("function"))
		}
	}
	if redact := r.opts.TraceContent; redact != nil {
		span.SetAttributes(semconv.GenAIToolCallArgumentsKey.String(redact(tc.Function.Arguments)))
	}
	if waited {
		attrs := []attribute.KeyValue{semconv.GenAIToolName(tc.Function.Name), semconv.GenAIToolCallID(tc.ID), attrDecision.String(decisionName(d))}
		// Who decided, by platform id only: a display name is a person's
		// words, which traces carry only with content capture.
		if by := d.By; by != "" {
			attrs = append(attrs, attrDecidedBy.String(by))
		}
		_, wait := r.tracer.Start(ctx, "approval "+tc.Function.Name, trace.WithTimestamp(d.Asked), trace.WithAttributes(attrs...))
		wait.End(trace.WithTimestamp(d.At))
	}
	return ctx, span
}

// decisionName is how a call was decided, for traces.
func decisionName(d Decision) string {
	switch {
	case d.Reason == ReasonTimeout:
		return "timeout"
	case d.Reason == ReasonStopped:
		return "stopped"
	case d.Allow && d.Always:
		return "always_allow"
	case d.Allow:
		return "allow_once"
	}
	return "deny"
}

// traceToolEnd ends the execute_tool span of tc, whose result was out;
// for todo_write it records the plan the call left (work) and whether it
// changed it from revision before.
func (r *Runner) traceToolEnd(span trace.Span, tc openai.ToolCall, out string, work *todo.Tracker, before int64) {
	if !span.IsRecording() {
		span.End()
		return
	}
	defer span.End()
	outcome := outcomeOf(out)
	span.SetAttributes(attrToolOutcome.String(outcome))
	if outcome != OutcomeOK {
		var res struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		json.Unmarshal([]byte(out), &res)
		span.SetAttributes(semconv.ErrorTypeKey.String(cmp.Or(res.Error.Code, outcome)))
		span.SetStatus(codes.Error, outcome)
	}
	if tc.Function.Name == todo.ToolName {
		snap := work.Snapshot()
		span.SetAttributes(attrPlanRevision.Int64(work.Revision()), attrPlanChanged.Bool(work.Revision() != before),
			attrPlanItems.Int(snap.Len()), attrPlanPending.Int(snap.Count(todo.Pending)),
			attrPlanDoing.Int(snap.Count(todo.InProgress)), attrPlanDone.Int(snap.Count(todo.Completed)))
	}
	if redact := r.opts.TraceContent; redact != nil {
		span.SetAttributes(semconv.GenAIToolCallResultKey.String(redact(out)))
	}
}

// contentMsg and contentPart are a message as gen_ai.input.messages and
// gen_ai.output.messages record it (semconv v1.41.0's JSON schema).
type contentMsg struct {
	Role         string        `json:"role"`
	Parts        []contentPart `json:"parts"`
	FinishReason string        `json:"finish_reason,omitempty"`
}

type contentPart struct {
	Type      string `json:"type"`
	Content   string `json:"content,omitempty"`
	ID        string `json:"id,omitempty"`
	Name      string `json:"name,omitempty"`
	Arguments any    `json:"arguments,omitempty"`
	Response  any    `json:"response,omitempty"`
	Modality  string `json:"modality,omitempty"`
}

// inputMessages is gen_ai.input.messages of a request, every text passed
// through redact.
func inputMessages(msgs []openai.ChatCompletionMessage, redact func(string) string) string {
	out := make([]contentMsg, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, contentMessage(m, redact))
	}
	return marshalMessages(out)
}

func contentMessage(m openai.ChatCompletionMessage, redact func(string) string) contentMsg {
	c := contentMsg{Role: m.Role, Parts: []contentPart{}}
	if m.Role == openai.ChatMessageRoleTool {
		c.Parts = append(c.Parts, contentPart{Type: "tool_call_response", ID: m.ToolCallID, Response: redact(m.Content)})
		return c
	}
	if m.Content != "" {
		c.Parts = append(c.Parts, contentPart{Type: "text", Content: redact(m.Content)})
	}
	for _, p := range m.MultiContent {
		switch p.Type {
		case openai.ChatMessagePartTypeText:
			c.Parts = append(c.Parts, contentPart{Type: "text", Content: redact(p.Text)})
		default:
			// The image itself is left out: it is bytes, not text.
			c.Parts = append(c.Parts, contentPart{Type: "blob", Modality: "image"})
		}
	}
	for _, tc := range m.ToolCalls {
		c.Parts = append(c.Parts, contentPart{Type: "tool_call", ID: tc.ID, Name: tc.Function.Name, Arguments: redact(tc.Function.Arguments)})
	}
	return c
}

func marshalMessages(msgs []contentMsg) string {
	b, err := json.Marshal(msgs)
	if err != nil {
		return ""
	}
	return string(b)
}

// traceSteer records a person's change of the plan (DESIGN §19) as a
// span of its own, in the turn's trace when a turn runs: what, on which
// item and revision, by whom, from the change to its commit.
func (r *Runner) traceSteer(ctx context.Context, key string, st Steer) trace.Span {
	if r.tracer == nil {
		return noSpan
	}
	_, span := r.tracer.Start(ctx, "plan_change "+string(st.Action), trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(st.At))
	if span.IsRecording() {
		span.SetAttributes(semconv.GenAIConversationID(key), attrPlatform.String(platformOf(key)), attrSteerAction.String(string(st.Action)),
			attrSteerBy.String(st.By), attrPlanRevision.Int64(st.Revision))
		if st.ByID != "" {
			span.SetAttributes(semconv.UserID(st.ByID))
		}
	}
	return span
}
