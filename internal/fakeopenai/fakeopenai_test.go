//lint:file-ignore SA1019 max_tokens is what DESIGN §8 sends and what the servers people run (Ollama, vLLM, llama.cpp) read; max_completion_tokens is OpenAI's newer name for it.

package fakeopenai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func user(text string) openai.ChatCompletionMessage {
	return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: text}
}

func calls(ids ...string) openai.ChatCompletionMessage {
	m := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant}
	for _, id := range ids {
		m.ToolCalls = append(m.ToolCalls, openai.ToolCall{ID: id, Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "read", Arguments: "{}"}})
	}
	return m
}

func result(id string) openai.ChatCompletionMessage {
	return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: id, Content: "contents"}
}

func answer(text string) openai.ChatCompletionMessage {
	return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: text}
}

// TestToolCallsMustBeAnswered: like OpenAI, the fake refuses a
// conversation in which a tool call goes unanswered or a tool message
// answers no call of the assistant message it follows.
func TestToolCallsMustBeAnswered(t *testing.T) {
	const unanswered = "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
	tests := []struct {
		name       string
		msgs       []openai.ChatCompletionMessage
		wantStatus int
		wantMsg    string
		wantParam  string
	}{
		{"every call answered", []openai.ChatCompletionMessage{user("go"), calls("a", "b"), result("a"), result("b"), answer("done"), user("again")}, 200, "", ""},
		{"answered in another order", []openai.ChatCompletionMessage{user("go"), calls("a", "b"), result("b"), result("a")}, 200, "", ""},
		{"one call unanswered before a user message", []openai.ChatCompletionMessage{user("go"), calls("a", "b"), result("a"), user("and?")}, 400,
			unanswered + "b", "messages.[1].role"},
		{"no call answered before an assistant message", []openai.ChatCompletionMessage{user("go"), calls("a", "b"), answer("skipped them")}, 400,
			unanswered + "a, b", "messages.[1].role"},
		{"calls unanswered at the end", []openai.ChatCompletionMessage{user("go"), answer("hi"), user("go on"), calls("c")}, 400,
			unanswered + "c", "messages.[3].role"},
		{"a tool message with an unknown id", []openai.ChatCompletionMessage{user("go"), calls("a"), result("a"), result("z")}, 400,
			"Invalid parameter: 'tool_call_id' of 'z' not found in 'tool_calls' of previous message.", "messages.[3].tool_call_id"},
		{"a tool message after a user message", []openai.ChatCompletionMessage{user("go"), result("a")}, 400,
			"Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.", "messages.[1].role"},
		{"answering a call of an earlier run", []openai.ChatCompletionMessage{user("go"), calls("a"), result("a"), user("more"), answer("ok"), result("a")}, 400,
			"Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.", "messages.[5].role"},
		{"an empty assistant message", []openai.ChatCompletionMessage{user("go"), {Role: openai.ChatMessageRoleAssistant}}, 400,
			"Invalid value for 'messages[1].content': expected a string, got null.", "messages.[1].content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &Server{}
			srv := httptest.NewServer(fake)
			defer srv.Close()
			body, err := json.Marshal(openai.ChatCompletionRequest{Model: "fake", Messages: tt.msgs})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Post(srv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("got status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if tt.wantStatus == http.StatusOK {
				if n := len(fake.Requests()); n != 1 {
					t.Errorf("got %d requests recorded, want 1", n)
				}
				return
			}
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatal(err)
			}
			if e.Error.Message != tt.wantMsg {
				t.Errorf("got message %q, want %q", e.Error.Message, tt.wantMsg)
			}
			if e.Error.Type != "invalid_request_error" || e.Error.Param == nil || *e.Error.Param != tt.wantParam || e.Error.Code != nil {
				t.Errorf("got type %q param %v code %v, want invalid_request_error, %q, null", e.Error.Type, e.Error.Param, e.Error.Code, tt.wantParam)
			}
			if n := len(fake.Requests()); n != 0 {
				t.Errorf("a refused request was recorded (%d requests)", n)
			}
		})
	}
}

// TestRefusalReachesTheClient: go-openai, which pinplan uses, reads the
// refusal as an *openai.APIError with OpenAI's status and message.
func TestRefusalReachesTheClient(t *testing.T) {
	srv := httptest.NewServer(&Server{})
	defer srv.Close()
	cfg := openai.DefaultConfig("sk-test")
	cfg.BaseURL = srv.URL + "/v1"
	cfg.HTTPClient = srv.Client()
	_, err := openai.NewClientWithConfig(cfg).CreateChatCompletion(t.Context(), openai.ChatCompletionRequest{Model: "fake",
		Messages: []openai.ChatCompletionMessage{user("go"), calls("a"), user("never mind")}})
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("got error %T %v, want *openai.APIError", err, err)
	}
	if apiErr.HTTPStatusCode != http.StatusBadRequest || apiErr.Type != "invalid_request_error" || apiErr.Message == "" {
		t.Errorf("got %d %s %q, want 400 invalid_request_error with OpenAI's message", apiErr.HTTPStatusCode, apiErr.Type, apiErr.Message)
	}
}

// TestMaxTokensCutsTheAnswer: a model writes no more than max_tokens; the
// answer is cut there and finishes with "length", and the usage says so.
func TestMaxTokensCutsTheAnswer(t *testing.T) {
	s := &Server{Respond: func(*openai.ChatCompletionRequest) Reply {
		return Reply{Content: strings.Repeat("word ", 400)}
	}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	cfg := openai.DefaultConfig("sk-test")
	cfg.BaseURL = srv.URL + "/v1"
	c := openai.NewClientWithConfig(cfg)
	resp, err := c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "m", MaxTokens: 50,
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "write"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0]; got.FinishReason != openai.FinishReasonLength || len(got.Message.Content) > 50*4 || resp.Usage.CompletionTokens > 50 {
		t.Errorf("with max_tokens 50: finish %q, %d bytes, %d completion tokens; want length, at most 200 bytes and 50 tokens", got.FinishReason, len(got.Message.Content), resp.Usage.CompletionTokens)
	}
	if _, err := c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "m", MaxTokens: -1,
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "write"}}}); err == nil {
		t.Error("max_tokens -1 was accepted")
	}
}
