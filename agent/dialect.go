package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// settle reads a reply the way its message, not its labels, says
// (DESIGN §8): reasoning written in the content between <think> tags
// (LM Studio, llama.cpp's legacy format) is moved out of the answer, a
// finish_reason that disagrees with the message's tool calls is set by
// them (Gemini says "stop" on calls, LM Studio "tool_calls" on answers),
// and finish_reason "error" (OpenRouter, a provider failing
// mid-generation) is the model error it is.
func settle(r Reply) (Reply, error) {
	if r.FinishReason == "error" {
		return Reply{}, &errMidStream{msg: `finish_reason "error"`}
	}
	if reasoning, answer, ok := cutThink(r.Message.Content); ok {
		r.Message.Content = answer
		r.Message.ReasoningContent = strings.TrimSpace(r.Message.ReasoningContent + "\n" + reasoning)
	}
	switch {
	case len(r.Message.ToolCalls) > 0 && r.FinishReason != string(openai.FinishReasonLength):
		r.FinishReason = string(openai.FinishReasonToolCalls)
	case len(r.Message.ToolCalls) == 0 && r.FinishReason == string(openai.FinishReasonToolCalls):
		r.FinishReason = string(openai.FinishReasonStop)
	}
	return r, nil
}

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// cutThink splits content that opens with a <think> block into the
// reasoning and the answer after it. An unclosed block is all reasoning.
func cutThink(content string) (reasoning, answer string, ok bool) {
	rest, found := strings.CutPrefix(strings.TrimLeft(content, " \t\r\n"), thinkOpen)
	if !found {
		return "", content, false
	}
	reasoning, answer, _ = strings.Cut(rest, thinkClose)
	return strings.TrimSpace(reasoning), strings.TrimLeft(answer, " \t\r\n"), true
}

// thinkFilter holds back a streamed answer's leading <think> block, so
// the thread sees the answer as it is written and never the reasoning.
type thinkFilter struct {
	head    strings.Builder // content so far, while it may still open a block
	decided bool
	inside  bool
}

// feed takes a content delta and returns what may be shown of it.
func (f *thinkFilter) feed(delta string) string {
	if f.decided && !f.inside {
		return delta
	}
	f.head.WriteString(delta)
	s := f.head.String()
	if !f.decided {
		t := strings.TrimLeft(s, " \t\r\n")
		switch {
		case t == "" || (len(t) < len(thinkOpen) && strings.HasPrefix(thinkOpen, t)):
			return "" // too early to tell
		case !strings.HasPrefix(t, thinkOpen):
			f.decided = true
			return s
		}
		f.decided, f.inside = true, true
	}
	if _, after, found := strings.Cut(s, thinkClose); found {
		f.inside = false
		f.head.Reset()
		return strings.TrimLeft(after, " \t\r\n")
	}
	return ""
}

// refusesTools reports whether err is a server saying it cannot call
// tools at all, with what it said: vLLM without
// --enable-auto-tool-choice, llama.cpp's server without --jinja, an
// Ollama model without tool support.
func refusesTools(err error) (string, bool) {
	status, text := errText(err)
	if status < 400 {
		return "", false
	}
	for _, s := range []string{"does not support tools", "tool choice requires --enable-auto-tool-choice", "tools param requires --jinja", "tools are not supported", "tool use is not supported", "does not support tool"} {
		if strings.Contains(text, s) {
			said := text
			var body struct {
				Message string `json:"message"`
				Error   struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal([]byte(text), &body) == nil {
				said = body.Message + body.Error.Message
			}
			if said == "" {
				said = s
			}
			return said, true
		}
	}
	return "", false
}

// textCall matches a tool call a model wrote as text: a JSON object with
// a "name", alone or in the <tool_call> tags or code fence it came in.
var textCall = regexp.MustCompile(`(?s)^\s*(?:<tool_call>|` + "```" + `(?:json)?)?\s*(\{.*\})\s*(?:</tool_call>|` + "```" + `)?\s*$`)

// textToolCall reports whether msg is a tool call written as text
// instead of made: its content is a JSON object naming one of the tools
// offered, with arguments. A server that does not turn the model's calls
// into tool calls (a chat template without tools, no tool parser) gives
// the model's call to the thread as the answer.
func textToolCall(msg openai.ChatCompletionMessage, tools []openai.Tool) (string, bool) {
	if len(msg.ToolCalls) > 0 || len(tools) == 0 {
		return "", false
	}
	m := textCall.FindStringSubmatch(msg.Content)
	if m == nil {
		return "", false
	}
	var call struct {
		Name       string          `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if json.Unmarshal([]byte(m[1]), &call) != nil || (call.Arguments == nil && call.Parameters == nil) {
		return "", false
	}
	for _, t := range tools {
		if t.Function != nil && t.Function.Name == call.Name {
			return call.Name, true
		}
	}
	return "", false
}

// doctorHint points the thread at the command that checks a server.
const doctorHint = "`pinplan doctor` checks what a model server can do."

// toolSettings is what to try when a server cannot call tools.
const toolSettings = "Point OPENAI_MODEL at a model that calls tools, or turn tool calls on in its server: vLLM `--enable-auto-tool-choice --tool-call-parser <parser>`, llama.cpp `llama-server --jinja`, Ollama a model listed with the `tools` capability, LM Studio a model with tool use."

// toolsUnsupported is a server that cannot call tools, or a model that
// wrote its call as text: the turn ends with what to change, not with a
// plan-less answer.
type toolsUnsupported struct {
	*ModelError
	said   string // the server's refusal
	asText string // the tool the model wrote a call to as text
}

// UserMessage says which model settings to try.
func (e *toolsUnsupported) UserMessage() string {
	if e.asText != "" {
		return fmt.Sprintf("The model wrote its call to `%s` as text instead of calling the tool, so its server is not passing tool calls through and I can't keep a plan. %s %s", e.asText, toolSettings, doctorHint)
	}
	return fmt.Sprintf("The model server refused tool calls (%q), and I keep the plan with a tool, so this turn ended. %s %s", e.said, toolSettings, doctorHint)
}

// midStreamFailure is a model that failed while it answered, on every
// attempt: what it wrote before is not an answer.
type midStreamFailure struct {
	*ModelError
	said string
}

// UserMessage says the server failed mid-answer.
func (e *midStreamFailure) UserMessage() string {
	return fmt.Sprintf("The model server reported an error while answering (%s) on every try, so this turn ended without an answer. Send a message to try again.", e.said)
}

var (
	_ interface{ UserMessage() string } = (*toolsUnsupported)(nil)
	_ interface{ UserMessage() string } = (*midStreamFailure)(nil)
)

// ToolsRefused reports whether err is a model server that cannot call
// tools, or a model that wrote its call as text, and says so with the
// settings to try: what `pinplan doctor` shows where a turn shows
// UserMessage.
func ToolsRefused(err error) (string, bool) {
	var tu *toolsUnsupported
	if !errors.As(err, &tu) {
		return "", false
	}
	if tu.asText != "" {
		return fmt.Sprintf("the model wrote its call to %s as text instead of calling the tool, so its server does not pass tool calls through. %s", tu.asText, toolSettings), true
	}
	return fmt.Sprintf("the model server refuses tool calls (%q). %s", tu.said, toolSettings), true
}
