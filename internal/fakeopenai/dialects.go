package fakeopenai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// Dialect is a server family whose OpenAI-compatible API differs from
// OpenAI's own in ways an agent trips on. Each is answered as that server
// answers, from its documentation and from what its users reported (the
// source is named at each constant), and is as strict as that server where
// it refuses a request.
type Dialect string

const (
	// OpenAI is OpenAI's own shape (the zero value).
	OpenAI Dialect = ""

	// Ollama streams each tool call whole in one chunk with no "index"
	// (ollama/ollama#7881; later versions send index 0 for every call,
	// ollama/ollama#15457) and puts a thinking model's reasoning in
	// "reasoning". A model without tool support is refused with 400
	// "... does not support tools".
	Ollama Dialect = "ollama"

	// VLLM returns reasoning in "reasoning_content" and, started without
	// --enable-auto-tool-choice, refuses any request with tools: 400
	// "\"auto\" tool choice requires --enable-auto-tool-choice and
	// --tool-call-parser to be set" (vllm-project/vllm#9986), in vLLM's
	// own error body ({"object":"error",...}).
	VLLM Dialect = "vllm"

	// LlamaCpp (llama-server) sends usage and its "timings" on the last
	// chunk whether or not stream_options asked for them, and, started
	// without --jinja, answers a request with tools 500 "tools param
	// requires --jinja flag" (containers/ramalama#988,
	// defilantech/LLMKube#126).
	LlamaCpp Dialect = "llamacpp"

	// LMStudio leaves a reasoning model's thinking in the content between
	// <think> tags unless the user turned on the separate field
	// (lmstudio-ai/lmstudio-js#269), and ends a plain answer with
	// finish_reason "tool_calls" when tools were offered
	// (anomalyco/opencode#5139).
	LMStudio Dialect = "lmstudio"

	// OpenRouter sends SSE comment lines (": OPENROUTER PROCESSING") to
	// keep the connection open, puts reasoning in "reasoning", and reports
	// an error that happens mid-generation as a data event with an "error"
	// field and finish_reason "error", on a 200 stream
	// (https://openrouter.ai/docs/api-reference/streaming,
	// https://openrouter.ai/docs/errors).
	OpenRouter Dialect = "openrouter"

	// Gemini (generativelanguage.googleapis.com/v1beta/openai) streams a
	// tool call whole in one chunk with no "index", an empty id and
	// finish_reason "stop" (discuss.ai.google.dev/t/50746,
	// discuss.ai.google.dev/t/59886); its thinking models attach a
	// thought signature to the first call of a message in
	// extra_content.google.thought_signature and refuse the next request
	// with 400 if a call of the current turn comes back without it
	// (https://ai.google.dev/gemini-api/docs/thought-signatures,
	// discuss.ai.google.dev/t/109823), in an error body that is a JSON
	// array.
	Gemini Dialect = "gemini"

	// Mistral's API takes tool-call ids of exactly nine letters and
	// digits (400 "Tool call id was ... but must be a-z, A-Z, 0-9, with a
	// length of 9.": langchain-ai/langchain#24668), and refuses message
	// orders its validator does not allow: after a tool message only an
	// assistant or tool message (400 "Unexpected role 'user' after role
	// 'tool'", code 3230: mistralai/mistral-common#169,
	// avante-corp/avante.nvim#2562), and a last message that is not a
	// user or tool message (0xPlaygrounds/rig#1130).
	Mistral Dialect = "mistral"

	// DeepSeek returns reasoning in "reasoning_content" and, in thinking
	// mode, requires it back on every assistant message that made tool
	// calls: 400 "Missing `reasoning_content` field in the assistant
	// message at message index N" (zed-industries/zed#44301,
	// anomalyco/opencode#24722).
	DeepSeek Dialect = "deepseek"

	// Groq refuses any property of a message it does not know, such as
	// reasoning sent back: 400 "'messages.N' : for 'role:assistant' the
	// following must be satisfied[('messages.N' : property 'reasoning' is
	// unsupported)]" (karthink/gptel#774, NousResearch/hermes-agent#11089),
	// returns a reasoning model's thinking in "reasoning", and reports a
	// stream's usage in "x_groq" rather than "usage".
	Groq Dialect = "groq"

	// Azure AI model inference refuses parameters it was not told to pass
	// through, stream_options among them: 400 {"detail":"Extra parameters
	// ['stream_options'] are not allowed ..."} (CherryHQ/cherry-studio#9214),
	// and opens a stream with a chunk of prompt_filter_results and no
	// choices.
	Azure Dialect = "azure"
)

// Dialects lists every dialect but OpenAI's, for tests that run them all.
var Dialects = []Dialect{Ollama, VLLM, LlamaCpp, LMStudio, OpenRouter, Gemini, Mistral, DeepSeek, Groq, Azure}

// wireMessage is a request message as sent, with every field kept.
type wireMessage map[string]json.RawMessage

func (m wireMessage) str(key string) string {
	var s string
	json.Unmarshal(m[key], &s)
	return s
}

func (m wireMessage) calls() []map[string]json.RawMessage {
	var calls []map[string]json.RawMessage
	json.Unmarshal(m["tool_calls"], &calls)
	return calls
}

// refuse checks the raw request as the dialect's server does; a refusal
// is the status and body to answer with.
func (d Dialect) refuse(body []byte, req *openai.ChatCompletionRequest, noTools bool) (int, string) {
	var raw struct {
		Messages      []wireMessage   `json:"messages"`
		StreamOptions json.RawMessage `json:"stream_options"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return http.StatusBadRequest, errorBody(err.Error())
	}
	if noTools && len(req.Tools) > 0 {
		return d.refuseTools(req.Model)
	}
	switch d {
	case Azure:
		if len(raw.StreamOptions) > 0 && string(raw.StreamOptions) != "null" {
			return http.StatusBadRequest, `{"detail":"Extra parameters ['stream_options'] are not allowed when extra-parameters is not set or set to be 'error'. Set extra-parameters to 'pass-through' to pass to the model."}`
		}
	case Mistral:
		return mistralRefuse(raw.Messages)
	case DeepSeek:
		for i, m := range raw.Messages {
			if m.str("role") == "assistant" && len(m.calls()) > 0 && m.str("reasoning_content") == "" {
				return http.StatusBadRequest, errorBody(fmt.Sprintf("Missing `reasoning_content` field in the assistant message at message index %d", i))
			}
		}
	case Groq:
		return groqRefuse(raw.Messages)
	case Gemini:
		return geminiRefuse(raw.Messages)
	}
	return 0, ""
}

// refuseTools is how the dialect's server refuses a request with tools
// when it cannot call them.
func (d Dialect) refuseTools(model string) (int, string) {
	switch d {
	case VLLM:
		return http.StatusBadRequest, vllmError(`"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`)
	case LlamaCpp:
		return http.StatusInternalServerError, `{"error":{"code":500,"message":"tools param requires --jinja flag","type":"server_error"}}`
	case Ollama:
		return http.StatusBadRequest, errorBody(fmt.Sprintf("registry.ollama.ai/library/%s does not support tools", model))
	}
	return http.StatusBadRequest, errorBody("tools are not supported by this model")
}

// groqRefuse refuses a property of a message or a tool call Groq does
// not know.
func groqRefuse(msgs []wireMessage) (int, string) {
	known := map[string]bool{"role": true, "content": true, "name": true, "tool_calls": true, "tool_call_id": true}
	for i, m := range msgs {
		for k := range m {
			if !known[k] {
				return http.StatusBadRequest, fmt.Sprintf(`{"error":{"message":"'messages.%d' : for 'role:%s' the following must be satisfied[('messages.%d' : property '%s' is unsupported)]","type":"invalid_request_error"}}`, i, m.str("role"), i, k)
			}
		}
		for _, c := range m.calls() {
			for k := range c {
				if k != "id" && k != "type" && k != "function" {
					return http.StatusBadRequest, fmt.Sprintf(`{"error":{"message":"'messages.%d.tool_calls' : property '%s' is unsupported","type":"invalid_request_error"}}`, i, k)
				}
			}
		}
	}
	return 0, ""
}

// geminiRefuse refuses a call of the current turn (since the last user
// message) whose message's first call comes back without its thought
// signature.
func geminiRefuse(msgs []wireMessage) (int, string) {
	last := 0
	for i, m := range msgs {
		if m.str("role") == "user" {
			last = i
		}
	}
	for i, m := range msgs[last:] {
		calls := m.calls()
		if m.str("role") != "assistant" || len(calls) == 0 {
			continue
		}
		var extra struct {
			Google struct {
				ThoughtSignature string `json:"thought_signature"`
			} `json:"google"`
		}
		json.Unmarshal(calls[0]["extra_content"], &extra)
		if !strings.HasPrefix(extra.Google.ThoughtSignature, signaturePrefix) {
			var fn struct {
				Name string `json:"name"`
			}
			json.Unmarshal(calls[0]["function"], &fn)
			msg := fmt.Sprintf("Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:%s` , position %d. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.", fn.Name, last+i+1)
			b, _ := json.Marshal([]any{map[string]any{"error": map[string]any{"code": 400, "message": msg, "status": "INVALID_ARGUMENT"}}})
			return http.StatusBadRequest, string(b)
		}
	}
	return 0, ""
}

// signaturePrefix starts every thought signature the Gemini dialect issues.
const signaturePrefix = "c2lnbmF0dXJl"

var mistralID = regexp.MustCompile(`^[a-zA-Z0-9]{9}$`)

// mistralRefuse is mistral_common's validator as Mistral's API applies it.
func mistralRefuse(msgs []wireMessage) (int, string) {
	order := func(msg string) (int, string) {
		b, _ := json.Marshal(map[string]any{"object": "error", "message": msg, "type": "invalid_request_message_order", "param": nil, "code": "3230"})
		return http.StatusBadRequest, string(b)
	}
	badID := func(id string) (int, string) {
		b, _ := json.Marshal(map[string]any{"object": "error", "message": fmt.Sprintf("Tool call id was %s but must be a-z, A-Z, 0-9, with a length of 9.", id), "type": "invalid_request_error", "param": nil, "code": nil})
		return http.StatusBadRequest, string(b)
	}
	allowed := map[string][]string{
		"system":    {"user", "assistant", "system"},
		"user":      {"assistant", "system", "user"},
		"assistant": {"assistant", "user", "tool"},
		"tool":      {"assistant", "tool"},
	}
	prev := ""
	for _, m := range msgs {
		role := m.str("role")
		if prev != "" && !contains(allowed[prev], role) {
			return order(fmt.Sprintf("Unexpected role '%s' after role '%s'", role, prev))
		}
		for _, c := range m.calls() {
			var id string
			json.Unmarshal(c["id"], &id)
			if !mistralID.MatchString(id) {
				return badID(id)
			}
		}
		if role == "tool" && !mistralID.MatchString(m.str("tool_call_id")) {
			return badID(m.str("tool_call_id"))
		}
		prev = role
	}
	if prev != "user" && prev != "tool" {
		return order(fmt.Sprintf("Expected last role User or Tool (or Assistant with prefix True) for serving but got %s", prev))
	}
	return 0, ""
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func errorBody(msg string) string {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "param": nil, "code": nil}})
	return string(b)
}

func vllmError(msg string) string {
	b, _ := json.Marshal(map[string]any{"object": "error", "message": msg, "type": "BadRequestError", "param": nil, "code": 400})
	return string(b)
}

func writeRaw(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// callID is the id the dialect's server gives the i-th call of a reply.
func (d Dialect) callID(nmsgs, i int) string {
	switch d {
	case Mistral:
		return fmt.Sprintf("%09d", nmsgs*10+i)[:9] // nine digits
	case Gemini:
		return "" // Gemini's compatibility layer sends none
	}
	return fmt.Sprintf("call_%d_%d", nmsgs, i)
}

// reasoningField is where the dialect puts a model's reasoning; "" puts
// it in the content between <think> tags.
func (d Dialect) reasoningField() string {
	switch d {
	case Ollama, OpenRouter, Groq:
		return "reasoning"
	case LMStudio:
		return ""
	}
	return "reasoning_content"
}

func (d Dialect) finish(calls bool, tools bool) string {
	switch {
	case d == Gemini:
		return "stop"
	case calls, d == LMStudio && tools:
		return "tool_calls"
	}
	return "stop"
}

// dialectCall is a tool call as the dialect writes it.
func (d Dialect) call(c Call, i int, first bool) map[string]any {
	out := map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Arguments}}
	if d == Gemini && first {
		out["extra_content"] = map[string]any{"google": map[string]any{"thought_signature": signaturePrefix + fmt.Sprint(time.Now().UnixNano()%1e6, i)}}
	}
	return out
}

// answerDialect answers req as the dialect's server does.
func (s *Server) answerDialect(ctx context.Context, w http.ResponseWriter, req *openai.ChatCompletionRequest, reply Reply, usage openai.Usage, f Fault, cut bool) {
	d := s.Dialect
	if d == DeepSeek && reply.Reasoning == "" {
		reply.Reasoning = "The user asked something; let me work out the steps."
	}
	content := reply.Content
	if reply.Reasoning != "" && d.reasoningField() == "" {
		content = "<think>\n" + reply.Reasoning + "\n</think>\n\n" + content
	}
	finish := d.finish(len(reply.ToolCalls) > 0, len(req.Tools) > 0)
	if cut {
		finish = "length"
	}
	if !req.Stream {
		s.dialectMessage(w, req, reply, content, finish, usage)
		return
	}
	out := newSSE(w, req.Model)
	switch d {
	case OpenRouter:
		out.line(": OPENROUTER PROCESSING\n\n: OPENROUTER PROCESSING\n\n")
	case Azure:
		out.line(`data: {"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}]}` + "\n\n")
	}
	out.chunk(map[string]any{"role": "assistant", "content": ""}, nil, nil)
	if reply.Reasoning != "" && d.reasoningField() != "" {
		out.chunk(map[string]any{d.reasoningField(): reply.Reasoning}, nil, nil)
	}
	if !s.streamContent(ctx, out, content, reply.Pace, f) {
		return
	}
	for i, c := range reply.ToolCalls {
		call := d.call(c, i, i == 0)
		switch d {
		case Ollama, Gemini:
			// The whole call in one chunk, no index.
			out.chunk(map[string]any{"tool_calls": []any{call}}, nil, nil)
		default:
			half := len(c.Arguments) / 2
			call["index"] = i
			call["function"] = map[string]any{"name": c.Name, "arguments": c.Arguments[:half]}
			out.chunk(map[string]any{"tool_calls": []any{call}}, nil, nil)
			out.chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": c.Arguments[half:]}}}}, nil, nil)
		}
	}
	s.streamEnd(out, req, finish, usage)
}

// dialectMessage answers as the dialect's server does, not streamed.
func (s *Server) dialectMessage(w http.ResponseWriter, req *openai.ChatCompletionRequest, reply Reply, content, finish string, usage openai.Usage) {
	d := s.Dialect
	msg := map[string]any{"role": "assistant", "content": content}
	if reply.Reasoning != "" && d.reasoningField() != "" {
		msg[d.reasoningField()] = reply.Reasoning
	}
	var calls []map[string]any
	for i, c := range reply.ToolCalls {
		calls = append(calls, d.call(c, i, i == 0))
	}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	resp := map[string]any{"id": "chatcmpl-fake", "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}}
	if !s.NoUsage {
		resp["usage"] = usage
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

// streamContent streams content in two halves, or a word every pace,
// and reports whether the stream goes on: a mid-stream error (f) or the
// client hanging up ends it.
func (s *Server) streamContent(ctx context.Context, out sse, content string, pace time.Duration, f Fault) bool {
	pieces := []string{content[:len(content)/2], content[len(content)/2:]}
	if pace > 0 {
		pieces = words(content)
	}
	for i, p := range pieces {
		if p == "" {
			continue
		}
		if pace > 0 {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(pace):
			}
		}
		out.chunk(map[string]any{"content": p}, nil, nil)
		if s.OnDelta != nil && pace > 0 {
			s.OnDelta(p)
		}
		if f.MidStreamError && i == 0 {
			// OpenRouter: the error as a data event of a 200 stream.
			out.chunk(map[string]any{"content": ""}, "error", map[string]any{"error": map[string]any{"code": 502, "message": "Provider returned error"}})
			return false
		}
		if s.Dialect == OpenRouter && i == 0 {
			out.line(": OPENROUTER PROCESSING\n\n")
		}
	}
	return true
}

// streamEnd ends a dialect's stream: the finish, the usage where and
// when the dialect sends it, and [DONE].
func (s *Server) streamEnd(out sse, req *openai.ChatCompletionRequest, finish string, usage openai.Usage) {
	d := s.Dialect
	var extra map[string]any
	if d == Groq && !s.NoUsage {
		extra = map[string]any{"x_groq": map[string]any{"id": "req_fake", "usage": usage}}
	}
	out.chunk(map[string]any{}, finish, extra)
	wantUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	switch {
	case s.NoUsage || d == Groq:
	case d == LlamaCpp:
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": req.Model, "choices": []any{}, "usage": usage,
			"timings": map[string]any{"prompt_n": usage.PromptTokens, "predicted_n": usage.CompletionTokens}})
		out.line("data: " + string(b) + "\n\n")
	case wantUsage:
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": req.Model, "choices": []any{}, "usage": usage})
		out.line("data: " + string(b) + "\n\n")
	}
	out.line("data: [DONE]\n\n")
}

// sse writes a dialect's stream, flushing each line.
type sse struct {
	w       http.ResponseWriter
	flusher http.Flusher
	model   string
}

func newSSE(w http.ResponseWriter, model string) sse {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	return sse{w: w, flusher: flusher, model: model}
}

func (o sse) line(s string) {
	io.WriteString(o.w, s)
	if o.flusher != nil {
		o.flusher.Flush()
	}
}

// chunk writes one chunk of choice 0, with extra's fields beside choices.
func (o sse) chunk(delta map[string]any, finish any, extra map[string]any) {
	c := map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": o.model,
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	for k, v := range extra {
		c[k] = v
	}
	b, _ := json.Marshal(c)
	o.line("data: " + string(b) + "\n\n")
}
