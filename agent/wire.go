package agent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	openai "github.com/sashabaranov/go-openai"
)

// wire is the codec between go-openai and the servers' dialects of the
// chat-completions API (DESIGN §8). go-openai's structs know OpenAI's
// fields only, so what a server sends beyond them, and needs back on the
// next request, is read here into the reply (Reply.Extra) and put back
// into the request's JSON; and what a server refuses (a tool-call id's
// form, a message order, stream_options) is learnt from its refusal and
// sent its way from then on. It is not a second client: it rewrites
// bodies on their way through go-openai's HTTP client.
//
// What a request carries back comes from the messages it sends: the
// runner stores each message's Extra with it and hands them to the
// request (withExtras), so a turn another process resumes sends them as
// the process that heard them would. A caller that keeps no history of
// its own (pinplan doctor) is served from what the wire remembers of the
// calls it heard lately.
type wire struct {
	// Learnt from refusals, for the rest of the process.
	shortIDs        atomic.Bool // tool-call ids of nine letters and digits (Mistral)
	strictOrder     atomic.Bool // no user or system message right after a tool message, none last (Mistral)
	noStreamOptions atomic.Bool // stream_options refused (Azure AI model inference)

	mu     sync.Mutex // guards extras and order
	extras map[string]callExtras
	order  []string // keys of extras, oldest first
}

// maxExtras bounds what the wire remembers: the calls of the turns in
// flight, with room to spare.
const maxExtras = 4096

// Extra is what a server sent with an assistant message beyond OpenAI's
// fields and needs back with it on the next request (DESIGN §8):
// Gemini's thought signature in a tool call's extra_content, DeepSeek's
// reasoning_content on a message with tool calls. Only a message with
// tool calls has one. It is not changed once made.
type Extra struct {
	// Message holds fields of the message (reasoning_content).
	Message map[string]json.RawMessage `json:"message,omitempty"`
	// Calls holds each tool call's fields (extra_content), in the order
	// of the message's ToolCalls; nil for a call that had none.
	Calls []map[string]json.RawMessage `json:"calls,omitempty"`
}

// tokens is an estimate of what x adds to a request (estimateText).
func (x *Extra) tokens() int {
	if x == nil {
		return 0
	}
	n := 0
	for _, v := range x.Message {
		n += estimateText(string(v))
	}
	for _, c := range x.Calls {
		for _, v := range c {
			n += estimateText(string(v))
		}
	}
	return n
}

type extrasKey struct{}

// withExtras returns ctx for a request whose messages carry extras, one
// per message of the request, in order (nil for a message with none).
func withExtras(ctx context.Context, extras []*Extra) context.Context {
	if extras == nil {
		return ctx
	}
	return context.WithValue(ctx, extrasKey{}, extras)
}

// heard is what one response carried beyond OpenAI's fields, filled in
// by the wire as the response is read, for its Reply.
type heard struct {
	mu    sync.Mutex // guards msg and calls
	msg   map[string]json.RawMessage
	calls []heardCall
}

// heardCall is one tool call's fields, with the call's key (callKey).
type heardCall struct {
	key    string
	fields map[string]json.RawMessage
}

type heardKey struct{}

func (h *heard) set(msg map[string]json.RawMessage, calls []heardCall) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msg, h.calls = msg, calls
}

// extra is what was heard with msg, nil for nothing. Calls are matched
// by name and arguments, in order: go-openai rebuilds them in its own
// order, and the server may have sent no ids.
func (h *heard) extra(msg openai.ChatCompletionMessage) *Extra {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(msg.ToolCalls) == 0 || (len(h.msg) == 0 && len(h.calls) == 0) {
		return nil
	}
	x := &Extra{}
	if len(h.msg) > 0 {
		x.Message = h.msg
	}
	used := make([]bool, len(h.calls))
	found := false
	calls := make([]map[string]json.RawMessage, len(msg.ToolCalls))
	for i, tc := range msg.ToolCalls {
		key := callKey(tc.Function.Name, tc.Function.Arguments)
		for j, c := range h.calls {
			if !used[j] && c.key == key {
				used[j] = true
				if len(c.fields) > 0 {
					calls[i], found = c.fields, true
				}
				break
			}
		}
	}
	if found {
		x.Calls = calls
	}
	if x.Message == nil && x.Calls == nil {
		return nil
	}
	return x
}

// callExtras is what a server sent with one tool call beyond OpenAI's
// fields, to send back with it.
type callExtras struct {
	call map[string]json.RawMessage // unknown fields of the call (Gemini's extra_content)
	msg  map[string]json.RawMessage // fields of its message (DeepSeek's reasoning_content)
}

// carriedMessageFields are the fields of an assistant message with tool
// calls that go back with it. reasoning_content: DeepSeek's thinking mode
// refuses the next request without it. Not "reasoning" (OpenRouter,
// Ollama, Groq): Groq refuses it back (karthink/gptel#774), and none of
// them needs it.
var carriedMessageFields = []string{"reasoning_content"}

// callKey names a call by what it is, not by its id: servers send calls
// without ids, and the runner may give a call another id (uniqueCallIDs).
func callKey(name, args string) string { return name + "\x00" + args }

func (w *wire) remember(key string, x callExtras) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.extras == nil {
		w.extras = map[string]callExtras{}
	}
	if _, ok := w.extras[key]; !ok {
		w.order = append(w.order, key)
	}
	w.extras[key] = x
	for len(w.order) > maxExtras {
		delete(w.extras, w.order[0])
		w.order = w.order[1:]
	}
}

func (w *wire) lookup(key string) (callExtras, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	x, ok := w.extras[key]
	return x, ok
}

// adapt learns from a refused request what the server wants instead and
// reports whether sending the request again can help: it is true once
// per kind of refusal.
func (w *wire) adapt(err error) bool {
	status, text := errText(err)
	if status != http.StatusBadRequest && status != http.StatusUnprocessableEntity {
		return false
	}
	switch {
	case strings.Contains(text, "stream_options"):
		return !w.noStreamOptions.Swap(true)
	case strings.Contains(text, "Tool call id was") || strings.Contains(text, "tool call id"):
		return !w.shortIDs.Swap(true)
	case strings.Contains(text, "Unexpected role") || strings.Contains(text, "Expected last role"):
		return !w.strictOrder.Swap(true)
	}
	return false
}

// errText is an error's HTTP status and what the server said.
func errText(err error) (int, string) {
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	switch {
	case errors.As(err, &apiErr):
		return apiErr.HTTPStatusCode, apiErr.Message
	case errors.As(err, &reqErr):
		return reqErr.HTTPStatusCode, string(reqErr.Body)
	}
	return 0, ""
}

// request rewrites a chat-completions request body for the server;
// extras are its messages' (withExtras), or nil.
func (w *wire) request(body []byte, extras []*Extra) []byte {
	var req map[string]json.RawMessage
	if json.Unmarshal(body, &req) != nil {
		return body
	}
	var msgs []map[string]json.RawMessage
	if json.Unmarshal(req["messages"], &msgs) != nil {
		return body
	}
	if len(extras) != len(msgs) {
		extras = nil // not this request's
	}
	for i, m := range msgs {
		if extras != nil && extras[i] != nil {
			putExtra(m, extras[i])
		} else {
			w.putBack(m)
		}
	}
	if w.shortIDs.Load() {
		for _, m := range msgs {
			shortenIDs(m)
		}
	}
	if w.strictOrder.Load() {
		msgs = strictOrder(msgs)
	}
	req["messages"], _ = json.Marshal(msgs)
	if w.noStreamOptions.Load() {
		delete(req, "stream_options")
	}
	out, err := json.Marshal(req)
	if err != nil {
		return body
	}
	return out
}

// putExtra adds x, what the server sent with the message, to an
// assistant message and its tool calls; a field the message already
// has is left as it is.
func putExtra(m map[string]json.RawMessage, x *Extra) {
	if str(m["role"]) != openai.ChatMessageRoleAssistant {
		return
	}
	for k, v := range x.Message {
		if _, has := m[k]; !has {
			m[k] = v
		}
	}
	if len(x.Calls) == 0 {
		return
	}
	var calls []map[string]json.RawMessage
	if json.Unmarshal(m["tool_calls"], &calls) != nil {
		return
	}
	changed := false
	for i, c := range calls {
		if i >= len(x.Calls) {
			break
		}
		for k, v := range x.Calls[i] {
			if _, has := c[k]; !has {
				c[k], changed = v, true
			}
		}
	}
	if changed {
		m["tool_calls"], _ = json.Marshal(calls)
	}
}

// putBack adds to an assistant message's tool calls what the server sent
// with them, as the wire remembers it.
func (w *wire) putBack(m map[string]json.RawMessage) {
	if str(m["role"]) != openai.ChatMessageRoleAssistant {
		return
	}
	var calls []map[string]json.RawMessage
	if json.Unmarshal(m["tool_calls"], &calls) != nil || len(calls) == 0 {
		return
	}
	changed := false
	for _, c := range calls {
		var fn struct{ Name, Arguments string }
		json.Unmarshal(c["function"], &fn)
		x, ok := w.lookup(callKey(fn.Name, fn.Arguments))
		if !ok {
			continue
		}
		for k, v := range x.call {
			if _, has := c[k]; !has {
				c[k], changed = v, true
			}
		}
		for k, v := range x.msg {
			if _, has := m[k]; !has {
				m[k] = v
			}
		}
	}
	if changed {
		m["tool_calls"], _ = json.Marshal(calls)
	}
}

func str(raw json.RawMessage) string {
	var s string
	json.Unmarshal(raw, &s)
	return s
}

var shortID = regexp.MustCompile(`^[a-zA-Z0-9]{9}$`)

// toShortID maps an id to nine letters and digits, the same every time,
// so a call and its result still match.
func toShortID(id string) string {
	if shortID.MatchString(id) {
		return id
	}
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	sum := sha256.Sum256([]byte(id))
	out := make([]byte, 9)
	for i := range out {
		out[i] = alphabet[int(sum[i])%len(alphabet)]
	}
	return string(out)
}

func shortenIDs(m map[string]json.RawMessage) {
	if id, ok := m["tool_call_id"]; ok {
		m["tool_call_id"], _ = json.Marshal(toShortID(str(id)))
	}
	var calls []map[string]json.RawMessage
	if json.Unmarshal(m["tool_calls"], &calls) != nil || len(calls) == 0 {
		return
	}
	for _, c := range calls {
		c["id"], _ = json.Marshal(toShortID(str(c["id"])))
	}
	m["tool_calls"], _ = json.Marshal(calls)
}

// bridgeText is the assistant message put between tool results and a
// user message for a server that wants the assistant to speak between
// them (Mistral).
const bridgeText = "(I have the tool results above.)"

// strictOrder rewrites messages into an order Mistral's validator takes:
// a system message after the conversation began (the stale reminder, a
// note) is folded into the user or tool message before it, and a user
// message right after a tool message gets a short assistant message
// before it.
func strictOrder(msgs []map[string]json.RawMessage) []map[string]json.RawMessage {
	out := make([]map[string]json.RawMessage, 0, len(msgs)+2)
	leading := true
	for _, m := range msgs {
		role := str(m["role"])
		if role != openai.ChatMessageRoleSystem {
			leading = false
		}
		if len(out) > 0 {
			prev := out[len(out)-1]
			prole := str(prev["role"])
			switch {
			case role == openai.ChatMessageRoleSystem && !leading && (prole == openai.ChatMessageRoleUser || prole == openai.ChatMessageRoleTool):
				if appendText(prev, str(m["content"])) {
					continue
				}
			case role == openai.ChatMessageRoleUser && prole == openai.ChatMessageRoleTool:
				bridge, _ := json.Marshal(bridgeText)
				out = append(out, map[string]json.RawMessage{"role": json.RawMessage(`"assistant"`), "content": bridge})
			}
		}
		out = append(out, m)
	}
	return out
}

// appendText adds text to a message's content, a string or a list of
// parts; false if the content is neither.
func appendText(m map[string]json.RawMessage, text string) bool {
	raw := m["content"]
	var s string
	if len(raw) == 0 || json.Unmarshal(raw, &s) == nil {
		m["content"], _ = json.Marshal(strings.TrimLeft(s+"\n\n", "\n") + text)
		return true
	}
	var parts []map[string]any
	if json.Unmarshal(raw, &parts) != nil {
		return false
	}
	parts = append(parts, map[string]any{"type": "text", "text": text})
	m["content"], _ = json.Marshal(parts)
	return true
}

// knownCallFields are the fields of a tool call go-openai keeps.
var knownCallFields = map[string]bool{"id": true, "type": true, "function": true, "index": true}

// response keeps what a plain response's tool calls carry beyond
// OpenAI's fields, and tells h.
func (w *wire) response(h *heard, body []byte) {
	var resp struct {
		Choices []struct {
			Message map[string]json.RawMessage `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(body, &resp) != nil || len(resp.Choices) == 0 {
		return
	}
	m := resp.Choices[0].Message
	var calls []map[string]json.RawMessage
	if json.Unmarshal(m["tool_calls"], &calls) != nil {
		return
	}
	msg := map[string]json.RawMessage{}
	for _, k := range carriedMessageFields {
		if v, ok := m[k]; ok && str(v) != "" {
			msg[k] = v
		}
	}
	var got []heardCall
	for _, c := range calls {
		var fn struct{ Name, Arguments string }
		json.Unmarshal(c["function"], &fn)
		x := callExtras{call: map[string]json.RawMessage{}, msg: msg}
		for k, v := range c {
			if !knownCallFields[k] {
				x.call[k] = v
			}
		}
		key := callKey(fn.Name, fn.Arguments)
		got = append(got, heardCall{key: key, fields: x.call})
		if len(x.call) > 0 || len(x.msg) > 0 {
			w.remember(key, x)
		}
	}
	h.set(msg, got)
}

// streamedCall is one tool call being rebuilt from a stream's deltas, for
// its extras.
type streamedCall struct {
	name, args strings.Builder
	extra      map[string]json.RawMessage
}

// streamState follows one stream's tool calls and message fields.
type streamState struct {
	calls   []*streamedCall
	byIndex map[int]*streamedCall
	msg     map[string]*strings.Builder
}

func (s *streamState) chunk(data []byte) {
	var c struct {
		Choices []struct {
			Index int                        `json:"index"`
			Delta map[string]json.RawMessage `json:"delta"`
		} `json:"choices"`
	}
	if json.Unmarshal(data, &c) != nil {
		return
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		for _, k := range carriedMessageFields {
			if v := str(ch.Delta[k]); v != "" {
				if s.msg == nil {
					s.msg = map[string]*strings.Builder{}
				}
				if s.msg[k] == nil {
					s.msg[k] = &strings.Builder{}
				}
				s.msg[k].WriteString(v)
			}
		}
		var calls []map[string]json.RawMessage
		json.Unmarshal(ch.Delta["tool_calls"], &calls)
		for _, tc := range calls {
			var fn struct{ Name, Arguments string }
			json.Unmarshal(tc["function"], &fn)
			var idx *int
			json.Unmarshal(tc["index"], &idx)
			var cur *streamedCall
			switch {
			case idx != nil && s.byIndex[*idx] != nil && (fn.Name == "" || s.byIndex[*idx].name.Len() == 0):
				cur = s.byIndex[*idx]
			case idx == nil && fn.Name == "" && len(s.calls) > 0:
				cur = s.calls[len(s.calls)-1]
			default:
				cur = &streamedCall{extra: map[string]json.RawMessage{}}
				s.calls = append(s.calls, cur)
				if idx != nil {
					if s.byIndex == nil {
						s.byIndex = map[int]*streamedCall{}
					}
					s.byIndex[*idx] = cur
				}
			}
			cur.name.WriteString(fn.Name)
			cur.args.WriteString(fn.Arguments)
			for k, v := range tc {
				if !knownCallFields[k] {
					cur.extra[k] = v
				}
			}
		}
	}
}

// done keeps what the stream's tool calls carried beyond OpenAI's
// fields, and tells h.
func (s *streamState) done(w *wire, h *heard) {
	msg := map[string]json.RawMessage{}
	for k, b := range s.msg {
		msg[k], _ = json.Marshal(b.String())
	}
	got := make([]heardCall, 0, len(s.calls))
	for _, c := range s.calls {
		key := callKey(c.name.String(), c.args.String())
		got = append(got, heardCall{key: key, fields: c.extra})
		if len(c.extra) > 0 || len(msg) > 0 {
			w.remember(key, callExtras{call: c.extra, msg: msg})
		}
	}
	h.set(msg, got)
}

// errMidStream is an error object a server sent in a 200 stream
// (OpenRouter's provider errors, vLLM's and OpenAI's own): the model
// failed, and the text so far is not an answer.
type errMidStream struct{ msg string }

func (e *errMidStream) Error() string { return "model server error mid-stream: " + e.msg }

// streamError reads the error of a data line that carries one: a
// top-level "error" object (OpenAI, OpenRouter) or vLLM's
// {"object":"error"}.
func streamError(data []byte) error {
	if !bytes.Contains(data, []byte(`"error"`)) {
		return nil
	}
	var e struct {
		Error  json.RawMessage `json:"error"`
		Object string          `json:"object"`
		Msg    string          `json:"message"`
	}
	if json.Unmarshal(data, &e) != nil {
		return nil
	}
	if e.Object == "error" {
		return &errMidStream{msg: e.Msg}
	}
	if len(e.Error) == 0 || string(e.Error) == "null" {
		return nil
	}
	var body struct {
		Message string `json:"message"`
		Code    any    `json:"code"`
	}
	if json.Unmarshal(e.Error, &body) != nil || body.Message == "" {
		return &errMidStream{msg: string(e.Error)}
	}
	if body.Code != nil {
		return &errMidStream{msg: fmt.Sprintf("%s (code %v)", body.Message, body.Code)}
	}
	return &errMidStream{msg: body.Message}
}

// sseBody passes a stream's data lines on to go-openai, without the SSE
// comment lines some servers send to keep the connection open
// (OpenRouter's ": OPENROUTER PROCESSING"), which go-openai would count
// against its limit of empty messages and mix into an error's text. A
// data line with an error object ends the body with that error.
type sseBody struct {
	rc    io.ReadCloser
	r     *bufio.Reader
	buf   []byte
	err   error
	state streamState
	wire  *wire
	heard *heard
}

func (b *sseBody) Read(p []byte) (int, error) {
	for len(b.buf) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		line, err := b.r.ReadBytes('\n')
		if err != nil {
			b.err = err
			if errors.Is(err, io.EOF) {
				b.state.done(b.wire, b.heard)
			}
		}
		trimmed := bytes.TrimSpace(line)
		if bytes.HasPrefix(trimmed, []byte(":")) {
			continue
		}
		if data, ok := bytes.CutPrefix(trimmed, []byte("data:")); ok {
			data = bytes.TrimSpace(data)
			if e := streamError(data); e != nil {
				b.err = e
				return 0, e
			}
			if string(data) == "[DONE]" {
				b.state.done(b.wire, b.heard)
			} else {
				b.state.chunk(data)
			}
		}
		b.buf = line
	}
	n := copy(p, b.buf)
	b.buf = b.buf[n:]
	return n, nil
}

func (b *sseBody) Close() error { return b.rc.Close() }

// wireTransport applies the wire to chat-completion requests and their
// responses.
type wireTransport struct {
	base http.RoundTripper
	wire *wire
}

func (t wireTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/chat/completions") || req.Body == nil {
		return t.base.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	extras, _ := req.Context().Value(extrasKey{}).([]*Extra)
	h, _ := req.Context().Value(heardKey{}).(*heard)
	body = t.wire.request(body, extras)
	req = req.Clone(req.Context())
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.StatusCode/100 != 2 {
		return resp, err
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body = &sseBody{rc: resp.Body, r: bufio.NewReader(resp.Body), wire: t.wire, heard: h}
		return resp, nil
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	if err != nil {
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(raw), errReader{err}))
		return resp, nil
	}
	t.wire.response(h, raw)
	return resp, nil
}

// errReader fails every read with err, so a cut body stays cut.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
