package doctor

//lint:file-ignore SA1019 max_tokens is what DESIGN §8 sends and the agent sends; it moves it to max_completion_tokens for a server that asks.

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/todo"
)

// doctorMaxTokens bounds each of doctor's requests: room for a short
// plan, and for a reasoning model's thinking before it.
const doctorMaxTokens = 1024

// model asks the model server what pinplan needs of it, through the
// agent's own client (so what the agent learns from a server's dialect
// is learnt here too): a plain answer, a streamed one, a todo_write call,
// its result sent back, a streamed call, usage, and an image when vision
// is on; then which server it recognised.
func (d *doctor) model(ctx context.Context) {
	cfg := d.cfg
	if !cfg.ModelConfigured {
		d.r.add("model", "server", Failed, "OPENAI_API_KEY, OPENAI_BASE_URL", "no model is configured: pinplan would answer every task with what to set")
		return
	}
	if d.bad["OPENAI_BASE_URL"] {
		d.r.add("model", "server", Skipped, "OPENAI_BASE_URL", "not asked: fix the URL first")
		return
	}
	base := d.opts.HTTPClient.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	wl := &wireLog{base: base}
	newModel := func(stream bool) *agent.OpenAIModel {
		return agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: cfg.OpenAIBaseURL, APIKey: cfg.OpenAIKey.Reveal(), Stream: stream,
			Timeout: d.opts.Timeout, Retries: 1, Concurrency: 1, BaseBackoff: 200 * time.Millisecond, MaxBackoff: 2 * time.Second,
			ResponseBytes: cfg.ResponseBytes, HTTPClient: &http.Client{Transport: wl}})
	}
	plain, streamed := newModel(false), newModel(true)
	ask := func(text string, tools []openai.Tool) openai.ChatCompletionRequest {
		return openai.ChatCompletionRequest{Model: cfg.OpenAIModel, MaxTokens: doctorMaxTokens, Tools: tools, Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: "You are pinplan's settings check. Do exactly what the user asks, briefly."},
			{Role: openai.ChatMessageRoleUser, Content: text},
		}}
	}
	// Streaming is needed with PINPLAN_STREAM on, and else a warning.
	streamNeed, streamSetting := Warning, "PINPLAN_STREAM"
	if cfg.Stream {
		streamNeed = Failed
	}

	hello := ask("Say hello in one word.", nil)
	answer, err := plain.Complete(ctx, hello)
	if err != nil {
		d.r.add("model", "plain answer", Failed, modelSetting(err), err.Error())
		d.r.add("model", "the other abilities", Skipped, "", "not asked: the server did not answer a plain question")
		return
	}
	d.r.add("model", "plain answer", OK, "OPENAI_MODEL", fmt.Sprintf("%s answered %s", cfg.OpenAIModel, quote(answer.Message.Content)))

	pieces := 0
	sctx := agent.WithTextSink(ctx, func(int, string) { pieces++ })
	streamAnswer, err := streamed.Complete(sctx, hello)
	streamOK := err == nil
	switch {
	case err != nil:
		d.r.add("model", "streaming", streamNeed, streamSetting, err.Error()+streamAdvice(cfg.Stream))
	case pieces == 0:
		d.r.add("model", "streaming", Warning, streamSetting, "the answer came, but not as it was written: the thread will show it at the end")
	default:
		d.r.add("model", "streaming", OK, streamSetting, fmt.Sprintf("the answer came in %d pieces", pieces))
	}

	todoTool := agent.TodoWrite()
	tools := []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
		Name: todoTool.Name, Description: todoTool.Description, Parameters: todoTool.Parameters}}}
	plan := ask("Call todo_write now with a plan of two items: \"Read the settings\" (in_progress) and \"Write the report\" (pending). Call the tool; do not answer in text.", tools)
	call, ok := d.toolCall(ctx, plain, plan, "tool call", Failed)
	if ok {
		d.toolResult(ctx, plain, plan, call)
	}
	switch {
	case !ok:
		d.r.add("model", "streamed tool call", Skipped, "", "not asked: the tool call failed")
	case !streamOK:
		d.r.add("model", "streamed tool call", Skipped, streamSetting, "not asked: streaming failed")
	default:
		d.toolCall(ctx, streamed, plan, "streamed tool call", streamNeed)
	}

	d.usage(answer, streamAnswer, streamOK)
	d.vision(ctx, plain)
	d.dialect(wl)
}

// toolCall asks for a todo_write call and checks the call the model
// made: its arguments must be what the schema takes.
func (d *doctor) toolCall(ctx context.Context, m *agent.OpenAIModel, req openai.ChatCompletionRequest, name string, need Status) (openai.ToolCall, bool) {
	reply, err := m.Complete(ctx, req)
	if err != nil {
		if said, ok := agent.ToolsRefused(err); ok {
			d.r.add("model", name, need, "OPENAI_MODEL", said)
		} else {
			d.r.add("model", name, need, modelSetting(err), err.Error())
		}
		return openai.ToolCall{}, false
	}
	if len(reply.Message.ToolCalls) == 0 {
		d.r.add("model", name, need, "OPENAI_MODEL", fmt.Sprintf("asked to call todo_write, the model answered in text instead (%s): pinplan keeps its plan with that tool, so it needs a model that calls tools", quote(reply.Message.Content)))
		return openai.ToolCall{}, false
	}
	c := reply.Message.ToolCalls[0]
	if c.Function.Name != todo.ToolName {
		d.r.add("model", name, Warning, "OPENAI_MODEL", fmt.Sprintf("asked to call todo_write, the model called %q", c.Function.Name))
		return openai.ToolCall{}, false
	}
	items, err := todo.Parse(c.Function.Arguments)
	if err != nil {
		d.r.add("model", name, Warning, "OPENAI_MODEL", fmt.Sprintf("the model called todo_write with arguments its schema refuses (%v): pinplan tells it so and it tries again, at the cost of a round", err))
		return openai.ToolCall{}, false
	}
	d.r.add("model", name, OK, "", fmt.Sprintf("todo_write with %d items that fit its schema", len(items)))
	return c, true
}

// toolResult sends the call's result back, as a turn does, and wants an
// answer: servers that need something of theirs back with a call (a
// thought signature, reasoning_content) refuse this when it is missing.
func (d *doctor) toolResult(ctx context.Context, m *agent.OpenAIModel, req openai.ChatCompletionRequest, call openai.ToolCall) {
	if call.ID == "" {
		call.ID = "call_doctor_1" // as the runner gives one to a call without
	}
	items, _ := todo.Parse(call.Function.Arguments)
	snap := todo.NewSnapshot(items)
	req.Messages = append(req.Messages,
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{call}},
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: call.ID, Content: snap.String()},
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: "Now say done in one word."},
	)
	if _, err := m.Complete(ctx, req); err != nil {
		d.r.add("model", "tool result", Failed, modelSetting(err), "the server refused the conversation after the tool call, so no turn could go on after a tool: "+err.Error())
		return
	}
	d.r.add("model", "tool result", OK, "", "answered after the call's result was sent back")
}

// usage reports whether the server counts tokens: without, budgets and
// the console's counts are pinplan's estimates.
func (d *doctor) usage(plain, streamed agent.Reply, streamOK bool) {
	inPlain := plain.Usage.TotalTokens > 0 || plain.Usage.PromptTokens > 0
	inStream := streamOK && (streamed.Usage.TotalTokens > 0 || streamed.Usage.PromptTokens > 0)
	const estimated = "token counts and budgets (PINPLAN_TURN_TOKENS, PINPLAN_USER_TOKENS_PER_DAY) are pinplan's estimates"
	switch {
	case inPlain && inStream:
		d.r.add("model", "usage", OK, "", "counted in plain and streamed answers")
	case inPlain && !d.cfg.Stream:
		d.r.add("model", "usage", OK, "", "counted in plain answers (streamed ones carry none; PINPLAN_STREAM is off)")
	case inPlain:
		d.r.add("model", "usage", Warning, "PINPLAN_STREAM", "streamed answers carry no usage, so "+estimated+"; PINPLAN_STREAM=false counts them")
	default:
		d.r.add("model", "usage", Warning, "", "the server sends no usage, so "+estimated)
	}
}

// vision sends a small image when PINPLAN_MODEL_VISION is on.
func (d *doctor) vision(ctx context.Context, m *agent.OpenAIModel) {
	if !d.cfg.Vision {
		d.r.add("model", "vision", Skipped, "PINPLAN_MODEL_VISION", "off: attached images are not given to the model")
		return
	}
	req := openai.ChatCompletionRequest{Model: d.cfg.OpenAIModel, MaxTokens: doctorMaxTokens, Messages: []openai.ChatCompletionMessage{{
		Role: openai.ChatMessageRoleUser, MultiContent: []openai.ChatMessagePart{
			{Type: openai.ChatMessagePartTypeText, Text: "What colour is this image? One word."},
			{Type: openai.ChatMessagePartTypeImageURL, ImageURL: &openai.ChatMessageImageURL{URL: redSquare(), Detail: openai.ImageURLDetailLow}},
		}}}}
	reply, err := m.Complete(ctx, req)
	if err != nil {
		d.r.add("model", "vision", Failed, "PINPLAN_MODEL_VISION", "the model refused an image; set PINPLAN_MODEL_VISION=false or choose a model that takes images: "+err.Error())
		return
	}
	d.r.add("model", "vision", OK, "PINPLAN_MODEL_VISION", "took an image and answered "+quote(reply.Message.Content))
}

// redSquare is a 16x16 red PNG as a data: URL.
func redSquare() string {
	img := image.NewRGBA(image.Rect(0, 0, 16, 16))
	for y := range 16 {
		for x := range 16 {
			img.Set(x, y, color.RGBA{R: 220, A: 255})
		}
	}
	var b bytes.Buffer
	png.Encode(&b, img)
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())
}

// modelSetting is the setting a failed model request points at.
func modelSetting(err error) string {
	var me *agent.ModelError
	if !errors.As(err, &me) {
		return "OPENAI_BASE_URL"
	}
	switch {
	case me.Status == http.StatusUnauthorized || me.Status == http.StatusForbidden:
		return "OPENAI_API_KEY"
	case me.Status == http.StatusNotFound:
		return "OPENAI_MODEL, OPENAI_BASE_URL"
	case me.Status == 0:
		return "OPENAI_BASE_URL"
	}
	return "OPENAI_MODEL"
}

func streamAdvice(on bool) string {
	if on {
		return "; PINPLAN_STREAM=false answers without streaming"
	}
	return " (PINPLAN_STREAM is off, so pinplan does not stream)"
}

// quote is s in quotes, cut to a short line.
func quote(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 40 {
		s = string(r[:40]) + "…"
	}
	return fmt.Sprintf("%q", s)
}

// dialect says which server family the answers came from, and what the
// agent learnt to send it differently.
func (d *doctor) dialect(wl *wireLog) {
	name, why := recognise(d.cfg.OpenAIBaseURL, wl.text())
	var learnt []string
	if wl.refused("stream_options") {
		learnt = append(learnt, "it refused stream_options, so pinplan sends none to it")
	}
	if wl.refused("Tool call id was") {
		learnt = append(learnt, "it takes tool-call ids of nine letters and digits only, so pinplan sends them so")
	}
	if wl.refused("Unexpected role") || wl.refused("Expected last role") {
		learnt = append(learnt, "it refuses some message orders, so pinplan sends them as it takes them")
	}
	detail := name
	if why != "" {
		detail += " (" + why + ")"
	}
	if len(learnt) > 0 {
		detail += "; " + strings.Join(learnt, "; ")
	}
	d.r.add("model", "dialect", OK, "", detail)
}

// recognise names the server family from its URL and from what it sent.
func recognise(baseURL, seen string) (name, why string) {
	host := ""
	if u, err := url.Parse(baseURL); err == nil {
		host = u.Hostname()
		switch u.Port() {
		case "11434":
			return "Ollama", "its port, 11434"
		case "1234":
			return "LM Studio", "its port, 1234"
		}
	}
	hosts := []struct{ suffix, name string }{
		{"api.openai.com", "OpenAI"}, {"openrouter.ai", "OpenRouter"}, {"generativelanguage.googleapis.com", "Gemini"},
		{"api.mistral.ai", "Mistral"}, {"api.deepseek.com", "DeepSeek"}, {"api.groq.com", "Groq"},
		{".openai.azure.com", "Azure"}, {".ai.azure.com", "Azure"},
	}
	for _, h := range hosts {
		if host == strings.TrimPrefix(h.suffix, ".") || strings.HasSuffix(host, h.suffix) {
			return h.name, "its host, " + host
		}
	}
	marks := []struct{ mark, name, why string }{
		{"prompt_filter_results", "Azure", "content filter results in its stream"},
		{"Extra parameters ['stream_options']", "Azure", "its refusal of stream_options"},
		{"x_groq", "Groq", "x_groq in its stream"},
		{"OPENROUTER PROCESSING", "OpenRouter", "its keep-alive comments"},
		{"thought_signature", "Gemini", "thought signatures on its tool calls"},
		{"Tool call id was", "Mistral", "its rule for tool-call ids"},
		{"invalid_request_message_order", "Mistral", "its rule for message orders"},
		{"registry.ollama.ai", "Ollama", "its model registry's name"},
		{"fp_ollama", "Ollama", "its system_fingerprint"},
		{"--enable-auto-tool-choice", "vLLM", "its error"},
		{"\"timings\"", "llama.cpp's server", "timings in its answers"},
		{"--jinja", "llama.cpp's server", "its error"},
		{"<think>", "a server that leaves reasoning in the answer (LM Studio, llama.cpp)", "<think> in the content, which pinplan keeps out of the thread"},
	}
	for _, m := range marks {
		if strings.Contains(seen, m.mark) {
			return m.name, m.why
		}
	}
	return "OpenAI's shape", "nothing of another server's dialect seen"
}

// wireLog keeps the start of every model response, for recognise, under
// the agent's own transport layers.
type wireLog struct {
	base http.RoundTripper

	mu        sync.Mutex // guards responses
	responses []*logged
}

type logged struct {
	status int
	body   bytes.Buffer // its first maxLogged bytes
}

const maxLogged = 64 << 10

func (w *wireLog) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	l := &logged{status: resp.StatusCode}
	w.mu.Lock()
	w.responses = append(w.responses, l)
	w.mu.Unlock()
	resp.Body = &teeBody{rc: resp.Body, l: l, mu: &w.mu}
	return resp, nil
}

// text is every logged body, together.
func (w *wireLog) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, l := range w.responses {
		b.Write(l.body.Bytes())
		b.WriteByte('\n')
	}
	return b.String()
}

// refused reports whether a 400 or 422 answer said what.
func (w *wireLog) refused(what string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.responses {
		if (l.status == http.StatusBadRequest || l.status == http.StatusUnprocessableEntity) && bytes.Contains(l.body.Bytes(), []byte(what)) {
			return true
		}
	}
	return false
}

// teeBody copies what is read of a body into its log entry.
type teeBody struct {
	rc io.ReadCloser
	l  *logged
	mu *sync.Mutex // the wireLog's
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.rc.Read(p)
	if n > 0 {
		t.mu.Lock()
		if room := maxLogged - t.l.body.Len(); room > 0 {
			t.l.body.Write(p[:min(n, room)])
		}
		t.mu.Unlock()
	}
	return n, err
}

func (t *teeBody) Close() error { return t.rc.Close() }
