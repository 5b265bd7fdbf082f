package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Model answers one chat-completion request. OpenAIModel implements it over
// HTTP; the demo model of cmd/bot implements it in process.
type Model interface {
	Complete(ctx context.Context, req openai.ChatCompletionRequest) (Reply, error)
}

// Reply is one model response: the assistant message and its token usage.
type Reply struct {
	Message openai.ChatCompletionMessage
	Usage   openai.Usage
	// FinishReason is the server's finish_reason ("stop", "tool_calls",
	// "length"), "" when the model does not say.
	FinishReason string
	// Estimated: the server sent no usage, so Usage is the runner's
	// estimate of the request and the reply (DESIGN §18).
	Estimated bool
	// Extra is what the server sent with the message's tool calls
	// beyond OpenAI's fields and needs back with them (wire.go); nil
	// when nothing.
	Extra *Extra
}

// ErrModel wraps every error a Model gives up with, after its retries.
var ErrModel = errors.New("model request failed")

// OpenAIOptions configures OpenAIModel.
type OpenAIOptions struct {
	BaseURL     string
	APIKey      string
	Stream      bool
	Timeout     time.Duration // per request attempt
	Retries     int           // attempts after the first on 429, 5xx, timeouts and broken streams
	Concurrency int           // model calls in flight at once, for this process
	// MaxBackoff caps one wait between attempts, Retry-After included.
	MaxBackoff time.Duration
	// BaseBackoff is the first wait; each retry doubles it, with jitter.
	BaseBackoff time.Duration
	HTTPClient  *http.Client // its Transport is wrapped to read Retry-After and cap responses
	// ResponseBytes is the longest response read, streamed or not
	// (PINPLAN_MODEL_RESPONSE_BYTES); 0 means DefaultResponseBytes. A
	// longer one fails with ErrResponseTooLarge.
	ResponseBytes int
	// OnRetry, when set, is told of each wait (for metrics and logs).
	OnRetry func(attempt int, wait time.Duration, err error)
}

// OpenAIModel calls an OpenAI-compatible chat-completions API with bounded
// retries, a per-attempt timeout and a cap on concurrent calls.
type OpenAIModel struct {
	client *openai.Client
	opts   OpenAIOptions
	sem    chan struct{}
	server []attribute.KeyValue // server.address and .port, for the chat span
	// completionTokens: the server refused max_tokens and asked for
	// max_completion_tokens (OpenAI's reasoning models), which every
	// request sends from then on (outputLimit).
	completionTokens atomic.Bool
	// wire carries what servers need back and learns what they refuse
	// (wire.go).
	wire *wire
}

// outputLimit sends req's output limit the way the server takes it:
// max_tokens (DESIGN §8; what Ollama, vLLM, llama.cpp and most servers
// read), or max_completion_tokens once the server refused max_tokens.
func (m *OpenAIModel) outputLimit(req openai.ChatCompletionRequest) openai.ChatCompletionRequest {
	//lint:ignore SA1019 max_tokens is what DESIGN §8 sends; max_completion_tokens is OpenAI's newer name, for the models that refuse the old one
	limit := &req.MaxTokens
	if m.completionTokens.Load() && *limit > 0 {
		req.MaxCompletionTokens, *limit = *limit, 0
	}
	return req
}

// refusesMaxTokens reports whether err is a server refusing max_tokens for
// max_completion_tokens: OpenAI answers 400, param "max_tokens", code
// "unsupported_parameter", "Use 'max_completion_tokens' instead."
func refusesMaxTokens(err error) bool {
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != http.StatusBadRequest {
		return false
	}
	param := ""
	if apiErr.Param != nil {
		param = *apiErr.Param
	}
	return param == "max_tokens" && strings.Contains(apiErr.Message, "max_completion_tokens")
}

// NewOpenAIModel returns a model client for opts.
func NewOpenAIModel(opts OpenAIOptions) *OpenAIModel {
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Minute
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 30 * time.Second
	}
	if opts.BaseBackoff <= 0 {
		opts.BaseBackoff = 500 * time.Millisecond
	}
	if opts.ResponseBytes <= 0 {
		opts.ResponseBytes = DefaultResponseBytes
	}
	base := http.DefaultTransport
	if opts.HTTPClient != nil && opts.HTTPClient.Transport != nil {
		base = opts.HTTPClient.Transport
	}
	cfg := openai.DefaultConfig(opts.APIKey)
	cfg.BaseURL = strings.TrimRight(opts.BaseURL, "/")
	w := &wire{}
	cfg.HTTPClient = &http.Client{Transport: wireTransport{base: retryAfterTransport{capTransport{base: base, limit: int64(opts.ResponseBytes)}}, wire: w}}
	return &OpenAIModel{client: openai.NewClientWithConfig(cfg), opts: opts, sem: make(chan struct{}, opts.Concurrency), server: serverAttributes(cfg.BaseURL), wire: w}
}

// Complete implements Model.
func (m *OpenAIModel) Complete(ctx context.Context, req openai.ChatCompletionRequest) (Reply, error) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(m.server...)
	}
	sink, _ := ctx.Value(textSinkKey{}).(TextSink)
	for attempt := 0; ; attempt++ {
		hint := &retryHint{}
		var text func(string)
		if sink != nil {
			text = func(delta string) { sink(attempt, delta) }
		}
		reply, err := m.once(context.WithValue(ctx, retryHintKey{}, hint), m.outputLimit(req), text)
		if err == nil {
			if call, ok := textToolCall(reply.Message, req.Tools); ok {
				return Reply{}, &toolsUnsupported{ModelError: m.fail(req, fmt.Errorf("%w: the model wrote a call to %s as text", ErrModel, call)), asText: call}
			}
			return reply, nil
		}
		if ctx.Err() != nil {
			return Reply{}, fmt.Errorf("%w: %w", ErrModel, context.Cause(ctx))
		}
		if refusesMaxTokens(err) && !m.completionTokens.Swap(true) {
			attempt--
			continue // the same request, its limit under the name the server takes
		}
		if m.wire.adapt(err) {
			attempt--
			continue // the same request, in the form the server said it takes
		}
		if said, ok := refusesTools(err); ok {
			return Reply{}, &toolsUnsupported{ModelError: m.fail(req, fmt.Errorf("%w: %w", ErrModel, err)), said: said}
		}
		if errors.Is(err, ErrResponseTooLarge) {
			me := m.fail(req, fmt.Errorf("%w: %w", ErrModel, err))
			return Reply{}, &oversizeError{ModelError: me, limit: int64(m.opts.ResponseBytes)}
		}
		if contextTooLong(err) {
			return Reply{}, m.fail(req, fmt.Errorf("%w: %w: %w", ErrModel, ErrContextTooLong, err))
		}
		if !retryable(err) || attempt >= m.opts.Retries {
			me := m.fail(req, fmt.Errorf("%w after %d attempt(s): %w", ErrModel, attempt+1, err))
			var mid *errMidStream
			if errors.As(err, &mid) {
				return Reply{}, &midStreamFailure{ModelError: me, said: mid.msg}
			}
			return Reply{}, me
		}
		retryAfter := hint.get()
		if retryAfter > m.opts.MaxBackoff {
			// Retrying sooner would ignore the server; waiting longer would
			// hold the thread for too long. Give up and say why.
			return Reply{}, m.fail(req, fmt.Errorf("%w: %w: the server asked to retry after %s, longer than the %s this bot waits: %w", ErrModel, ErrRateLimited, retryAfter, m.opts.MaxBackoff, err))
		}
		wait := m.backoff(attempt, retryAfter)
		if m.opts.OnRetry != nil {
			m.opts.OnRetry(attempt+1, wait, err)
		}
		traceRetry(ctx, attempt+1, wait.Milliseconds(), err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Reply{}, fmt.Errorf("%w: %w", ErrModel, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// fail wraps a final error with what the thread should be told.
func (m *OpenAIModel) fail(req openai.ChatCompletionRequest, err error) *ModelError {
	base := m.opts.BaseURL
	if u, perr := url.Parse(base); perr == nil {
		u.User = nil
		base = u.String()
	}
	return &ModelError{Status: status(err), BaseURL: base, Model: req.Model, Err: err}
}

// backoff is exponential with full jitter in [d/2, d], at least Retry-After.
func (m *OpenAIModel) backoff(attempt int, retryAfter time.Duration) time.Duration {
	d := m.opts.BaseBackoff << min(attempt, 16)
	d = d/2 + rand.N(d/2+1)
	if retryAfter > d {
		d = retryAfter
	}
	return min(d, m.opts.MaxBackoff)
}

// TextSink is told each piece of content a streamed model reply writes,
// as it arrives, with the number of the attempt it belongs to (0 for the
// first; a retry after a broken stream starts its text again).
type TextSink func(attempt int, delta string)

type textSinkKey struct{}

// WithTextSink returns ctx with sink, for a Model that streams
// (OpenAIOptions.Stream) to tell as it writes. A model that does not
// stream never calls it.
func WithTextSink(ctx context.Context, sink TextSink) context.Context {
	return context.WithValue(ctx, textSinkKey{}, sink)
}

// once is one attempt; text, if not nil, is told each content delta of a
// streamed reply.
func (m *OpenAIModel) once(ctx context.Context, req openai.ChatCompletionRequest, text func(string)) (Reply, error) {
	select {
	case m.sem <- struct{}{}:
	case <-ctx.Done():
		return Reply{}, context.Cause(ctx)
	}
	defer func() { <-m.sem }()
	ctx, cancel := context.WithTimeoutCause(ctx, m.opts.Timeout, errAttemptTimeout)
	defer cancel()
	h := &heard{}
	ctx = context.WithValue(ctx, heardKey{}, h)
	reply, err := m.attempt(ctx, req, text)
	if err != nil {
		return Reply{}, err
	}
	reply.Extra = h.extra(reply.Message)
	return reply, nil
}

// attempt sends req once, plain or streamed.
func (m *OpenAIModel) attempt(ctx context.Context, req openai.ChatCompletionRequest, text func(string)) (Reply, error) {
	if !m.opts.Stream {
		resp, err := m.client.CreateChatCompletion(ctx, req)
		if err != nil {
			if errors.Is(context.Cause(ctx), errAttemptTimeout) {
				return Reply{}, errAttemptTimeout
			}
			return Reply{}, err
		}
		if len(resp.Choices) == 0 {
			return Reply{}, errNoChoices
		}
		return settle(Reply{Message: resp.Choices[0].Message, Usage: resp.Usage, FinishReason: string(resp.Choices[0].FinishReason)})
	}
	req.Stream = true
	req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	stream, err := m.client.CreateChatCompletionStream(ctx, req)
	if err != nil {
		if errors.Is(context.Cause(ctx), errAttemptTimeout) {
			return Reply{}, errAttemptTimeout
		}
		return Reply{}, err
	}
	defer stream.Close()
	var acc streamAccumulator
	var think thinkFilter
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if errors.Is(context.Cause(ctx), errAttemptTimeout) {
				return Reply{}, errAttemptTimeout
			}
			if errors.Is(err, ErrResponseTooLarge) {
				return Reply{}, err
			}
			return Reply{}, fmt.Errorf("%w: %w", errBrokenStream, err)
		}
		acc.add(chunk)
		if int64(acc.size) > int64(m.opts.ResponseBytes) {
			// Each line was within the cap, but together they are not.
			return Reply{}, &tooLarge{limit: int64(m.opts.ResponseBytes)}
		}
		if text != nil {
			for _, ch := range chunk.Choices {
				if ch.Index == 0 && ch.Delta.Content != "" {
					if shown := think.feed(ch.Delta.Content); shown != "" {
						text(shown)
					}
				}
			}
		}
	}
	if !acc.finished {
		return Reply{}, fmt.Errorf("%w: stream ended without a finish_reason", errBrokenStream)
	}
	return settle(acc.reply())
}

var (
	errAttemptTimeout = errors.New("model request timed out")
	errBrokenStream   = errors.New("model stream broke off")
	errNoChoices      = errors.New("model response has no choices")
)

func retryable(err error) bool {
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	var netErr net.Error
	switch {
	case errors.As(err, &apiErr):
		return apiErr.HTTPStatusCode == http.StatusTooManyRequests || apiErr.HTTPStatusCode >= 500 || apiErr.HTTPStatusCode == 0
	case errors.As(err, &reqErr):
		return reqErr.HTTPStatusCode == http.StatusTooManyRequests || reqErr.HTTPStatusCode >= 500 || reqErr.HTTPStatusCode == 0
	case errors.Is(err, errAttemptTimeout), errors.Is(err, errBrokenStream), errors.Is(err, errNoChoices), errors.As(err, new(*errMidStream)),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF), errors.As(err, &netErr):
		return true
	}
	// A 200 body that is not JSON (a proxy's HTML page, a cut response):
	// go-openai returns the decoder's error as it is.
	var syntaxErr *json.SyntaxError
	return errors.As(err, &syntaxErr)
}

// streamAccumulator rebuilds one assistant message from stream chunks. Tool
// calls are keyed by id when the server sends one and by index otherwise:
// some servers send index 0 for every call, so a new id starts a new call.
type streamAccumulator struct {
	content  strings.Builder
	reason   strings.Builder
	role     string
	calls    []openai.ToolCall
	byIndex  map[int]int
	byID     map[string]int
	usage    openai.Usage
	finished bool
	finish   string // the finish_reason
	size     int    // bytes of content, reasoning and tool calls so far
}

func (a *streamAccumulator) add(chunk openai.ChatCompletionStreamResponse) {
	if chunk.Usage != nil {
		a.usage = *chunk.Usage
	}
	for _, ch := range chunk.Choices {
		if ch.Index != 0 {
			continue
		}
		if ch.FinishReason != "" {
			a.finished = true
			a.finish = string(ch.FinishReason)
		}
		d := ch.Delta
		if d.Role != "" {
			a.role = d.Role
		}
		a.content.WriteString(d.Content)
		a.reason.WriteString(d.ReasoningContent)
		a.size += len(d.Content) + len(d.ReasoningContent)
		for _, tc := range d.ToolCalls {
			a.size += len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments)
			a.addCall(tc)
		}
	}
}

func (a *streamAccumulator) addCall(tc openai.ToolCall) {
	if a.byIndex == nil {
		a.byIndex, a.byID = map[int]int{}, map[string]int{}
	}
	idx := -1
	if tc.Index != nil {
		idx = *tc.Index
	}
	pos, ok := -1, false
	switch {
	case tc.ID != "":
		if pos, ok = a.byID[tc.ID]; !ok {
			pos = len(a.calls)
			a.calls = append(a.calls, openai.ToolCall{ID: tc.ID, Type: openai.ToolTypeFunction})
			a.byID[tc.ID] = pos
		}
	case idx >= 0:
		if pos, ok = a.byIndex[idx]; !ok {
			pos = len(a.calls)
			a.calls = append(a.calls, openai.ToolCall{Type: openai.ToolTypeFunction})
		}
	default:
		// Neither index nor id (Gemini, older Ollama): each call comes
		// whole, so a delta that names a function after the last call
		// was named starts a new one.
		if len(a.calls) == 0 || (tc.Function.Name != "" && a.calls[len(a.calls)-1].Function.Name != "") {
			a.calls = append(a.calls, openai.ToolCall{Type: openai.ToolTypeFunction})
		}
		pos = len(a.calls) - 1
	}
	if idx >= 0 {
		a.byIndex[idx] = pos
	}
	c := &a.calls[pos]
	if tc.Type != "" {
		c.Type = tc.Type
	}
	c.Function.Name += tc.Function.Name
	c.Function.Arguments += tc.Function.Arguments
}

func (a *streamAccumulator) reply() Reply {
	msg := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: a.content.String(), ReasoningContent: a.reason.String()}
	for i, c := range a.calls {
		if c.ID == "" {
			c.ID = "call_" + strconv.Itoa(i)
		}
		msg.ToolCalls = append(msg.ToolCalls, c)
	}
	return Reply{Message: msg, Usage: a.usage, FinishReason: a.finish}
}

type retryHintKey struct{}

// retryHint carries a Retry-After header from the transport to the retry
// loop: go-openai's errors do not expose response headers.
type retryHint struct {
	mu    sync.Mutex // guards after
	after time.Duration
}

func (h *retryHint) get() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.after
}

type retryAfterTransport struct{ base http.RoundTripper }

func (t retryAfterTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.StatusCode < 400 {
		return resp, err
	}
	if h, ok := req.Context().Value(retryHintKey{}).(*retryHint); ok {
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			h.mu.Lock()
			h.after = d
			h.mu.Unlock()
		}
	}
	return resp, nil
}

// parseRetryAfter reads seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil && secs >= 0 {
		return time.Duration(secs * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
