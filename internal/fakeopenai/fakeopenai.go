// Package fakeopenai is a loopback fake of the OpenAI chat-completions API
// for tests, benchmarks and the end-to-end suite: POST
// /v1/chat/completions (any path ending in /chat/completions), plain JSON
// and SSE streaming with tool-call deltas and a final usage chunk.
//
// A zero Server is ready: it answers every request with "ok". Set Respond
// to script replies; Fail queues faults for the next requests. It records
// every request it receives.
package fakeopenai

//lint:file-ignore SA1019 max_tokens is what DESIGN §8 sends and what the servers people run (Ollama, vLLM, llama.cpp) read; max_completion_tokens is OpenAI's newer name for it.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	openai "github.com/sashabaranov/go-openai"
)

// Reply is one scripted assistant message.
type Reply struct {
	Content   string
	ToolCalls []Call
	// Reasoning is sent as reasoning_content (DeepSeek, vLLM and others
	// return the model's reasoning this way).
	Reasoning string
	// Usage, when set, is the usage reported with the reply instead of
	// the fake's own count (CountTokens for the prompt); NoUsage still
	// leaves it out.
	Usage *openai.Usage
	// Pace, when streamed, sends the content a word at a time (each delta
	// a word with the whitespace before it, as models write tokens), one
	// every Pace, instead of in two halves at once.
	Pace time.Duration
}

// Call is one tool call of a Reply.
type Call struct {
	ID        string // default call_<n>
	Name      string
	Arguments string
}

// Fault changes how one request is answered.
type Fault struct {
	Status     int           // answer with this HTTP status and an OpenAI error body
	RetryAfter string        // Retry-After header with Status
	Delay      time.Duration // wait before answering (or until the client gives up)
	CutStream  bool          // streamed: send part of the first tool call, then drop the connection
	Malformed  bool          // answer 200 with a body that is not JSON
	// StreamIndexZero: streamed tool calls all carry index 0 (as some
	// servers send), so only their ids tell them apart.
	StreamIndexZero bool
	// MidStreamError, streamed: after the first piece of content, an
	// error event with finish_reason "error" ends the 200 stream, as
	// OpenRouter reports a provider failing mid-generation (dialects.go).
	MidStreamError bool
	// HugeContent answers with this many bytes of content ("x" repeated),
	// plain or streamed, generated as they are sent: the fake holds none
	// of it, so a test can send far more than it could keep. It stops when
	// the client hangs up.
	HugeContent int64
}

// Server is the fake. Its fields are set before serving.
type Server struct {
	// Respond picks the reply to a request. Nil answers "ok".
	Respond func(req *openai.ChatCompletionRequest) Reply
	// NoRecord keeps no requests (for benchmarks that measure memory).
	NoRecord bool
	// ContextWindow, when set, is the model's window in tokens (counted by
	// CountTokens): a longer request is answered 400 with OpenAI's
	// context_length_exceeded error body.
	ContextWindow int
	// NoUsage leaves usage out of answers, as some servers do.
	NoUsage bool
	// OnDelta, when set, is called with each content delta of a paced
	// stream (Reply.Pace) right after it was flushed to the client.
	OnDelta func(delta string)
	// Vision: the model takes image parts (images.go); without it a
	// request with one is refused, as a text-only model refuses it.
	Vision bool
	// ReasoningModel answers as OpenAI's reasoning models (o-series) do: a
	// request with max_tokens is refused with 400 unsupported_parameter,
	// "Use 'max_completion_tokens' instead."; max_completion_tokens bounds
	// the answer as max_tokens does elsewhere.
	ReasoningModel bool
	// Dialect answers as that server family does (dialects.go).
	Dialect Dialect
	// NoTools: the server cannot call tools (vLLM without
	// --enable-auto-tool-choice, llama.cpp without --jinja, an Ollama
	// model without tool support) and refuses a request that offers
	// them, as its dialect does.
	NoTools bool

	mu       sync.Mutex // guards requests, faults and rejected
	requests []openai.ChatCompletionRequest
	faults   []Fault
	rejected int
}

// Rejected counts requests refused for exceeding ContextWindow.
func (s *Server) Rejected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rejected
}

// CountTokens is the fake's tokenizer: about one token per three bytes of
// text (so one per CJK character, about one per three ASCII characters:
// deliberately not pinplan's own estimate), plus 4 per message and the
// tool definitions.
func CountTokens(req *openai.ChatCompletionRequest) int {
	n := 0
	for _, m := range req.Messages {
		n += 4 + (len(m.Content)+2)/3
		for _, p := range m.MultiContent {
			n += (len(p.Text) + 2) / 3
			if p.Type == openai.ChatMessagePartTypeImageURL {
				n += imageTokens
			}
		}
		for _, tc := range m.ToolCalls {
			n += 3 + (len(tc.Function.Name)+len(tc.Function.Arguments)+2)/3
		}
	}
	if len(req.Tools) > 0 {
		b, _ := json.Marshal(req.Tools)
		n += len(b) / 4
	}
	return n
}

// Fail queues faults; each is used by one request, in order.
func (s *Server) Fail(f ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f...)
}

// Requests returns a copy of every request received so far.
func (s *Server) Requests() []openai.ChatCompletionRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]openai.ChatCompletionRequest(nil), s.requests...)
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, body, ok := read(w, r)
	if !ok {
		return
	}
	if msg, param := invalidImages(req.Messages, s.Vision); msg != "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", param, msg)
		return
	}
	if status, body := s.Dialect.refuse(body, &req, s.NoTools); status != 0 {
		writeRaw(w, status, body)
		return
	}
	limit, prompt, ok := s.admit(w, &req)
	if !ok {
		return
	}
	s.mu.Lock()
	if !s.NoRecord {
		s.requests = append(s.requests, req)
	}
	var f Fault
	if len(s.faults) > 0 {
		f, s.faults = s.faults[0], s.faults[1:]
	}
	respond := s.Respond
	s.mu.Unlock()

	if s.fault(w, r, &req, f) {
		return
	}
	reply := Reply{Content: "ok"}
	if respond != nil {
		reply = respond(&req)
	}
	for i := range reply.ToolCalls {
		if reply.ToolCalls[i].ID == "" {
			reply.ToolCalls[i].ID = s.Dialect.callID(len(req.Messages), i)
		}
	}
	reply, usage, cut := s.bound(reply, prompt, limit)
	switch {
	case s.Dialect != OpenAI:
		s.answerDialect(r.Context(), w, &req, reply, usage, f, cut)
	case req.Stream:
		s.stream(r.Context(), w, &req, reply, usage, f, cut)
	default:
		s.answer(w, &req, reply, usage, cut)
	}
}

// read reads a chat-completions request and refuses, as OpenAI does, one
// to another endpoint, one that is not JSON and a conversation OpenAI
// refuses (invalidMessages); ok is false when it answered.
func read(w http.ResponseWriter, r *http.Request) (req openai.ChatCompletionRequest, body []byte, ok bool) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		writeError(w, http.StatusNotFound, "not_found", "", "unknown endpoint "+r.URL.Path)
		return req, nil, false
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return req, nil, false
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", err.Error())
		return req, nil, false
	}
	if msg, param := invalidMessages(req.Messages); msg != "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", param, msg)
		return req, nil, false
	}
	return req, body, true
}

// admit checks the request's output limit and size as the model's
// server does, and returns the limit that bounds the answer and the
// prompt's tokens (CountTokens); ok is false when it refused the
// request.
func (s *Server) admit(w http.ResponseWriter, req *openai.ChatCompletionRequest) (limit, prompt int, ok bool) {
	if s.ReasoningModel && req.MaxTokens != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
			"message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
			"type":    "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter",
		}})
		return 0, 0, false
	}
	limit = req.MaxTokens // what bounds the answer
	if s.ReasoningModel {
		limit = req.MaxCompletionTokens
	}
	if req.MaxTokens < 0 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "max_tokens", fmt.Sprintf("Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got %d instead.", req.MaxTokens))
		return 0, 0, false
	}
	prompt = CountTokens(req)
	if s.ContextWindow > 0 && prompt > s.ContextWindow {
		s.mu.Lock()
		s.rejected++
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
			"message": fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", s.ContextWindow, prompt),
			"type":    "invalid_request_error", "param": "messages", "code": "context_length_exceeded",
		}})
		return 0, 0, false
	}
	return limit, prompt, true
}

// fault applies the parts of f that come before an answer (a delay) or
// stand for it (a status, a huge or malformed answer), and reports
// whether it answered.
func (s *Server) fault(w http.ResponseWriter, r *http.Request, req *openai.ChatCompletionRequest, f Fault) bool {
	if f.Delay > 0 {
		select {
		case <-time.After(f.Delay):
		case <-r.Context().Done():
			return true
		}
	}
	switch {
	case f.Status != 0:
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		writeError(w, f.Status, "server_error", "", fmt.Sprintf("injected %d", f.Status))
	case f.HugeContent > 0:
		s.huge(w, req, f.HugeContent)
	case f.Malformed:
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","choices":[{"message":{"role":"assistant","content":"tru`)
	default:
		return false
	}
	return true
}

// bound cuts reply at limit, as a model writes no more than max_tokens
// (an answer cut there finishes with "length"; the fake counts a token
// per 4 bytes of what it writes), and returns it with its usage.
func (s *Server) bound(reply Reply, prompt, limit int) (Reply, openai.Usage, bool) {
	cut := limit > 0 && 5+len(reply.Content)/4 > limit
	if cut {
		reply.Content = strings.ToValidUTF8(reply.Content[:max(limit-5, 0)*4], "")
	}
	usage := openai.Usage{PromptTokens: prompt, CompletionTokens: 5 + len(reply.Content)/4}
	usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
	if reply.Usage != nil {
		usage = *reply.Usage
		if limit > 0 && usage.CompletionTokens > limit {
			usage.CompletionTokens = limit
			usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
		}
	}
	if s.NoUsage {
		usage = openai.Usage{}
	}
	return reply, usage, cut
}

// answer answers in OpenAI's shape, not streamed.
func (s *Server) answer(w http.ResponseWriter, req *openai.ChatCompletionRequest, reply Reply, usage openai.Usage, cut bool) {
	msg := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: reply.Content, ReasoningContent: reply.Reasoning}
	finish := openai.FinishReasonStop
	for _, c := range reply.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{ID: c.ID, Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: c.Name, Arguments: c.Arguments}})
		finish = openai.FinishReasonToolCalls
	}
	if cut {
		finish = openai.FinishReasonLength
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(openai.ChatCompletionResponse{
		ID: "chatcmpl-fake", Object: "chat.completion", Created: time.Now().Unix(), Model: req.Model,
		Choices: []openai.ChatCompletionChoice{{Index: 0, Message: msg, FinishReason: finish}},
		Usage:   usage,
	})
}
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, req *openai.ChatCompletionRequest, reply Reply, usage openai.Usage, f Fault, cut bool) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	send := func(delta openai.ChatCompletionStreamChoiceDelta, finish openai.FinishReason) {
		chunk := openai.ChatCompletionStreamResponse{ID: "chatcmpl-fake", Object: "chat.completion.chunk", Created: time.Now().Unix(), Model: req.Model,
			Choices: []openai.ChatCompletionStreamChoice{{Index: 0, Delta: delta, FinishReason: finish}}}
		b, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	send(openai.ChatCompletionStreamChoiceDelta{Role: openai.ChatMessageRoleAssistant}, "")
	if reply.Content != "" && reply.Pace > 0 {
		t := time.NewTicker(reply.Pace)
		defer t.Stop()
		for _, word := range words(reply.Content) {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			send(openai.ChatCompletionStreamChoiceDelta{Content: word}, "")
			if s.OnDelta != nil {
				s.OnDelta(word)
			}
		}
	} else if reply.Content != "" {
		half := len(reply.Content) / 2
		send(openai.ChatCompletionStreamChoiceDelta{Content: reply.Content[:half]}, "")
		send(openai.ChatCompletionStreamChoiceDelta{Content: reply.Content[half:]}, "")
	}
	for i, c := range reply.ToolCalls {
		idx := i
		if f.StreamIndexZero {
			idx = 0
		}
		half := len(c.Arguments) / 2
		send(openai.ChatCompletionStreamChoiceDelta{ToolCalls: []openai.ToolCall{{Index: &idx, ID: c.ID, Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: c.Name, Arguments: c.Arguments[:half]}}}}, "")
		if f.CutStream {
			panic(http.ErrAbortHandler) // drops the connection mid-call
		}
		send(openai.ChatCompletionStreamChoiceDelta{ToolCalls: []openai.ToolCall{{Index: &idx, Function: openai.FunctionCall{Arguments: c.Arguments[half:]}}}}, "")
	}
	if f.CutStream {
		panic(http.ErrAbortHandler)
	}
	finish := openai.FinishReasonStop
	if len(reply.ToolCalls) > 0 {
		finish = openai.FinishReasonToolCalls
	}
	if cut {
		finish = openai.FinishReasonLength
	}
	send(openai.ChatCompletionStreamChoiceDelta{}, finish)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		b, _ := json.Marshal(openai.ChatCompletionStreamResponse{ID: "chatcmpl-fake", Object: "chat.completion.chunk", Model: req.Model, Choices: []openai.ChatCompletionStreamChoice{}, Usage: &usage})
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

// words cuts text into the deltas of a paced stream: each a word with
// the whitespace before it, the text's trailing whitespace with the last.
func words(text string) []string {
	var out []string
	start := 0
	for i := 1; i < len(text); i++ {
		if !unicode.IsSpace(rune(text[i-1])) && unicode.IsSpace(rune(text[i])) {
			out = append(out, text[start:i])
			start = i
		}
	}
	if start < len(text) {
		rest := text[start:]
		if strings.TrimSpace(rest) == "" && len(out) > 0 {
			out[len(out)-1] += rest
		} else {
			out = append(out, rest)
		}
	}
	return out
}

// hugeChunk is how much content one write of a huge answer carries.
const hugeChunk = 32 << 10

// huge answers with n bytes of content, written a chunk at a time from
// one buffer, until it is all sent or a write fails (the client hung up).
func (s *Server) huge(w http.ResponseWriter, req *openai.ChatCompletionRequest, n int64) {
	content := bytes.Repeat([]byte("x"), hugeChunk)
	model, _ := json.Marshal(req.Model)
	if req.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
		prefix := `data: {"id":"chatcmpl-fake","object":"chat.completion.chunk","model":` + string(model) + `,"choices":[{"index":0,"delta":{"role":"assistant","content":"`
		line := append(append([]byte(prefix), content...), `"}}]}`+"\n\n"...)
		for ; n > 0; n -= hugeChunk {
			if n < hugeChunk {
				line = append(append([]byte(prefix), content[:n]...), `"}}]}`+"\n\n"...)
			}
			if _, err := w.Write(line); err != nil {
				return
			}
		}
		io.WriteString(w, `data: {"id":"chatcmpl-fake","object":"chat.completion.chunk","model":`+string(model)+`,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := io.WriteString(w, `{"id":"chatcmpl-fake","object":"chat.completion","model":`+string(model)+`,"choices":[{"index":0,"message":{"role":"assistant","content":"`); err != nil {
		return
	}
	for ; n > 0; n -= hugeChunk {
		if _, err := w.Write(content[:min(n, hugeChunk)]); err != nil {
			return
		}
	}
	io.WriteString(w, `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
}

// writeError answers with OpenAI's error body; an empty param is null.
func writeError(w http.ResponseWriter, status int, typ, param, msg string) {
	var p any
	if param != "" {
		p = param
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": p, "code": nil}})
}

// Script answers from a per-conversation script: script(first) gives the
// replies for the conversation whose first user message is first, and the
// request's number of assistant messages picks the reply. It keeps no state,
// so a restarted bot that re-sends a request gets the same reply. Past the
// end of its script a conversation gets a final "done" answer.
func Script(script func(firstUser string) []Reply) func(*openai.ChatCompletionRequest) Reply {
	return func(req *openai.ChatCompletionRequest) Reply {
		first, n := "", 0
		for _, m := range req.Messages {
			if m.Role == openai.ChatMessageRoleUser && first == "" {
				first = m.Content
			}
			if m.Role == openai.ChatMessageRoleAssistant {
				n++
			}
		}
		replies := script(first)
		if n < len(replies) {
			return replies[n]
		}
		return Reply{Content: "done"}
	}
}

// invalidMessages rejects what the real APIs reject in a conversation and
// names the message as OpenAI's param does ("messages.[3].role"): an
// assistant message with neither content nor tool calls (OpenAI: "expected
// a string, got null"), reasoning_content sent back (DeepSeek answers 400),
// an assistant message whose tool calls are not each answered by a tool
// message before the next message of another role, and a tool message
// that answers no call of the assistant message its run follows.
func invalidMessages(msgs []openai.ChatCompletionMessage) (msg, param string) {
	// run holds the call ids of the assistant message the current run of
	// tool messages answers (nil outside a run); open those not answered
	// yet, in order, and at the assistant message's index.
	var (
		run  map[string]bool
		open []string
		at   int
	)
	unanswered := func() (string, string) {
		return "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: " + strings.Join(open, ", "),
			fmt.Sprintf("messages.[%d].role", at)
	}
	for i, m := range msgs {
		if m.Role != openai.ChatMessageRoleTool {
			if len(open) > 0 {
				return unanswered()
			}
			run = nil
		}
		switch m.Role {
		case openai.ChatMessageRoleUser, openai.ChatMessageRoleSystem:
			if m.Content == "" && len(m.MultiContent) == 0 {
				return fmt.Sprintf("Missing required parameter: 'messages[%d].content'.", i), fmt.Sprintf("messages.[%d].content", i)
			}
		case openai.ChatMessageRoleAssistant:
			if m.Content == "" && len(m.MultiContent) == 0 && len(m.ToolCalls) == 0 {
				return fmt.Sprintf("Invalid value for 'messages[%d].content': expected a string, got null.", i), fmt.Sprintf("messages.[%d].content", i)
			}
			if len(m.ToolCalls) > 0 {
				run, at = map[string]bool{}, i
				for _, tc := range m.ToolCalls {
					run[tc.ID] = true
					open = append(open, tc.ID)
				}
			}
		case openai.ChatMessageRoleTool:
			if run == nil {
				return "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.", fmt.Sprintf("messages.[%d].role", i)
			}
			if !run[m.ToolCallID] {
				return fmt.Sprintf("Invalid parameter: 'tool_call_id' of '%s' not found in 'tool_calls' of previous message.", m.ToolCallID), fmt.Sprintf("messages.[%d].tool_call_id", i)
			}
			open = slices.DeleteFunc(open, func(id string) bool { return id == m.ToolCallID })
		}
		if m.ReasoningContent != "" && len(m.ToolCalls) == 0 {
			return fmt.Sprintf("messages[%d]: reasoning_content must not be sent back in a request", i), fmt.Sprintf("messages.[%d].reasoning_content", i)
		}
	}
	if len(open) > 0 {
		return unanswered()
	}
	return "", ""
}
