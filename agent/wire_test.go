package agent_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/todo"
)

// toolThenAnswer calls read_file (and todo_write with it when both is
// set) in the first round and answers in the second.
func toolThenAnswer(both bool) func(*openai.ChatCompletionRequest) fakeopenai.Reply {
	return fakeopenai.Script(func(string) []fakeopenai.Reply {
		calls := []fakeopenai.Call{{Name: "read_file", Arguments: `{"path":"notes.txt"}`}}
		if both {
			calls = append([]fakeopenai.Call{{Name: todo.ToolName, Arguments: todo.Encode([]todo.Item{{Content: "read the notes", Status: todo.InProgress}})}}, calls...)
		}
		return []fakeopenai.Reply{{ToolCalls: calls}, {Content: "The notes say to release on friday."}}
	})
}

// runTurn sends one message and returns how the turn ended.
func runTurn(t *testing.T, h *harness, key string) agent.Event {
	t.Helper()
	h.send(t, key, "read the notes")
	events := h.waitEnd(t, key)
	return events[len(events)-1]
}

// TestDialectTurns: a turn with a tool call and an answer survives each
// dialect's quirks, plain and streamed.
func TestDialectTurns(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dialect fakeopenai.Dialect
		both    bool // two calls in one message
	}{
		// Streamed calls with neither index nor id, each whole in one
		// chunk: the second is a call of its own, not more of the first.
		{"gemini parallel calls without index", fakeopenai.Gemini, true},
		// Gemini's thought signature goes back with the call.
		{"gemini thought signature", fakeopenai.Gemini, false},
		// DeepSeek's reasoning_content goes back with the call.
		{"deepseek reasoning back", fakeopenai.DeepSeek, false},
		// Azure refuses stream_options: the request goes again without.
		{"azure stream_options", fakeopenai.Azure, false},
		// Groq refuses fields it does not know: nothing extra is sent.
		{"groq strict fields", fakeopenai.Groq, true},
		{"ollama calls without index", fakeopenai.Ollama, true},
		{"openrouter comments", fakeopenai.OpenRouter, true},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.name, stream), func(t *testing.T) {
				fake := &fakeopenai.Server{Dialect: tc.dialect, Respond: toolThenAnswer(tc.both)}
				h := newHarness(t, fake, harnessOpts{stream: stream, tools: []agent.Tool{readTool()}})
				end := runTurn(t, h, "web/d")
				if end.Outcome != agent.Done || end.Text != "The notes say to release on friday." {
					t.Fatalf("the turn ended %s: %q (%v)", end.Outcome, end.Text, end.Err)
				}
				reqs := fake.Requests()
				last := reqs[len(reqs)-1]
				var calls []openai.ToolCall
				for _, m := range last.Messages {
					calls = append(calls, m.ToolCalls...)
				}
				want := 1
				if tc.both {
					want = 2
				}
				if len(calls) != want {
					t.Errorf("the answer's request carries %d tool calls, want %d: %+v", len(calls), want, calls)
				}
				for _, c := range calls {
					if !strings.HasPrefix(c.Function.Arguments, "{") || !strings.HasSuffix(c.Function.Arguments, "}") {
						t.Errorf("call %s has arguments %q, want one JSON object", c.Function.Name, c.Function.Arguments)
					}
				}
			})
		}
	}
}

// TestMistralOrderAndIDs: Mistral refuses a system or user message right
// after a tool message, a system message last, and tool-call ids that
// are not nine letters and digits; the stale reminder after a tool
// result, and ids from an earlier server, are sent in a form it takes.
func TestMistralOrderAndIDs(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   string // the first call's id, as an earlier server gave it
	}{
		{"reminder after a tool result", ""},
		{"id of another form", "call_from_before"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeopenai.Server{Dialect: fakeopenai.Mistral, Respond: fakeopenai.Script(func(string) []fakeopenai.Reply {
				return []fakeopenai.Reply{
					{ToolCalls: []fakeopenai.Call{{ID: tc.id, Name: "read_file", Arguments: `{"path":"a"}`}}},
					{ToolCalls: []fakeopenai.Call{{Name: "read_file", Arguments: `{"path":"b"}`}}},
					{Content: "done reading"},
				}
			})}
			db, _ := openDB(t)
			reg, err := agent.NewRegistry(readTool())
			if err != nil {
				t.Fatal(err)
			}
			h := storeHarness(t, fake, db, db, agent.Options{StaleRounds: 1, Tools: reg})
			end := runTurn(t, h, "web/m")
			if end.Outcome != agent.Done || end.Text != "done reading" {
				t.Fatalf("the turn ended %s: %q (%v)", end.Outcome, end.Text, end.Err)
			}
		})
	}
}

// TestMidStreamError: an error object in a 200 stream (OpenRouter) is a
// model error: retried, and said if it persists; the text before it is
// never the answer.
func TestMidStreamError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults int
		want   agent.Outcome
		text   string
	}{
		{"retried", 1, agent.Done, "The whole answer, written out."},
		{"said", 2, agent.Failed, "reported an error while answering"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeopenai.Server{Dialect: fakeopenai.OpenRouter, Respond: func(*openai.ChatCompletionRequest) fakeopenai.Reply {
				return fakeopenai.Reply{Content: "The whole answer, written out."}
			}}
			for range tc.faults {
				fake.Fail(fakeopenai.Fault{MidStreamError: true})
			}
			h := newHarness(t, fake, harnessOpts{stream: true, retries: 1})
			end := runTurn(t, h, "web/e")
			if end.Outcome != tc.want || !strings.Contains(end.Text, tc.text) {
				t.Fatalf("the turn ended %s: %q; want %s with %q", end.Outcome, end.Text, tc.want, tc.text)
			}
		})
	}
}

// TestReasoningInContentNotShown: reasoning left in the content between
// <think> tags (LM Studio) is neither streamed to the thread nor the
// answer.
func TestReasoningInContentNotShown(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			fake := &fakeopenai.Server{Dialect: fakeopenai.LMStudio, Respond: func(*openai.ChatCompletionRequest) fakeopenai.Reply {
				return fakeopenai.Reply{Reasoning: "the secret scratch work", Content: "Friday."}
			}}
			h := newHarness(t, fake, harnessOpts{stream: stream})
			h.send(t, "web/r", "when?")
			events := h.waitEnd(t, "web/r")
			for _, e := range events {
				if strings.Contains(e.Text, "secret") || strings.Contains(e.Text, "<think>") {
					t.Errorf("%v event shows the reasoning: %q", e.Kind, e.Text)
				}
			}
			if end := events[len(events)-1]; end.Outcome != agent.Done || end.Text != "Friday." {
				t.Errorf("the turn ended %s: %q, want Done: Friday.", end.Outcome, end.Text)
			}
		})
	}
}

// TestFinishReasonFollowsTheMessage: a reply's finish_reason is what its
// message says, whatever the server labelled it.
func TestFinishReasonFollowsTheMessage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dialect fakeopenai.Dialect
		reply   fakeopenai.Reply
		want    string
	}{
		{"gemini stop on calls", fakeopenai.Gemini, fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: "read_file", Arguments: "{}"}}}, "tool_calls"},
		{"lm studio tool_calls on an answer", fakeopenai.LMStudio, fakeopenai.Reply{Content: "hi"}, "stop"},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.name, stream), func(t *testing.T) {
				fake := &fakeopenai.Server{Dialect: tc.dialect, Respond: func(*openai.ChatCompletionRequest) fakeopenai.Reply { return tc.reply }}
				h := newHarness(t, fake, harnessOpts{stream: stream})
				tools := []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "read_file"}}}
				reply, err := h.model.Complete(context.Background(), openai.ChatCompletionRequest{Model: "m", Tools: tools,
					Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "hi"}}})
				if err != nil {
					t.Fatal(err)
				}
				if reply.FinishReason != tc.want {
					t.Errorf("finish_reason %q, want %q", reply.FinishReason, tc.want)
				}
			})
		}
	}
}

// TestServerWithoutTools: a server that cannot call tools, or a model
// that writes its call as text, ends the turn with one message that says
// which settings to try, not with a plan-less answer.
func TestServerWithoutTools(t *testing.T) {
	asText := func(*openai.ChatCompletionRequest) fakeopenai.Reply {
		return fakeopenai.Reply{Content: "<tool_call>\n{\"name\": \"todo_write\", \"arguments\": {\"todos\": []}}\n</tool_call>"}
	}
	for _, tc := range []struct {
		name string
		fake *fakeopenai.Server
		want string
	}{
		{"vllm", &fakeopenai.Server{Dialect: fakeopenai.VLLM, NoTools: true}, "--enable-auto-tool-choice"},
		{"llama.cpp", &fakeopenai.Server{Dialect: fakeopenai.LlamaCpp, NoTools: true}, "llama-server --jinja"},
		{"ollama", &fakeopenai.Server{Dialect: fakeopenai.Ollama, NoTools: true}, "does not support tools"},
		{"call as text", &fakeopenai.Server{Dialect: fakeopenai.Ollama, Respond: asText}, "as text instead of calling the tool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.fake, harnessOpts{retries: 2})
			end := runTurn(t, h, "web/n")
			if end.Outcome != agent.Failed || !strings.Contains(end.Text, tc.want) || !strings.Contains(end.Text, "OPENAI_MODEL") {
				t.Fatalf("the turn ended %s: %q; want Failed, saying %q and what to change", end.Outcome, end.Text, tc.want)
			}
		})
	}
}

// TestProviderFieldsSurviveARestart: what a server needs back with a
// call (Gemini's thought signature, DeepSeek's reasoning_content) is kept
// with the stored message, so the process that resumes the turn (after a
// kill -9, a deploy or a takeover) sends it too; the server refuses the
// turn's next request without it. The restart is a second runner, with
// a model client of its own, on the first one's store.
func TestProviderFieldsSurviveARestart(t *testing.T) {
	for _, d := range []fakeopenai.Dialect{fakeopenai.Gemini, fakeopenai.DeepSeek} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v/request in flight", d, stream), func(t *testing.T) {
				fake := &fakeopenai.Server{Dialect: d, Respond: toolThenAnswer(false)}
				// The request after the tool result hangs until the first
				// process is gone.
				fake.Fail(fakeopenai.Fault{}, fakeopenai.Fault{Delay: time.Minute})
				db, _ := openDB(t)
				opts := harnessOpts{db: db, stream: stream, tools: []agent.Tool{readTool()}}
				first := newHarness(t, fake, opts)
				first.send(t, "web/p", "read the notes")
				waitRequests(t, fake, 2)
				first.runner.Close()

				second := newHarness(t, fake, opts)
				if n, err := second.runner.Resume(context.Background()); err != nil || n != 1 {
					t.Fatalf("Resume = %d, %v; want the running session", n, err)
				}
				events := second.waitEnd(t, "web/p")
				if end := events[len(events)-1]; end.Outcome != agent.Done || end.Text != "The notes say to release on friday." {
					t.Fatalf("the resumed turn ended %s: %q (%v)", end.Outcome, end.Text, end.Err)
				}
			})
			t.Run(fmt.Sprintf("%s/stream=%v/waiting for approval", d, stream), func(t *testing.T) {
				var runs atomic.Int32
				fake := &fakeopenai.Server{Dialect: d, Respond: writeOnce}
				db, _ := openDB(t)
				opts := harnessOpts{db: db, stream: stream, tools: []agent.Tool{writeTool(&runs)}}
				first := newHarness(t, fake, opts)
				first.send(t, "web/a", "write")
				a := first.waitKind(t, "web/a", agent.ApprovalNeeded).Approval
				first.runner.Close()

				second := newHarness(t, fake, opts)
				if n, err := second.runner.Resume(context.Background()); err != nil || n != 1 {
					t.Fatalf("Resume = %d, %v; want the waiting session", n, err)
				}
				second.waitKind(t, "web/a", agent.ApprovalNeeded)
				if _, err := second.runner.Decide(context.Background(), "web/a", a.CallID, agent.Decision{Allow: true, ByName: "ann"}); err != nil {
					t.Fatal(err)
				}
				events := second.waitEnd(t, "web/a")
				if end := events[len(events)-1]; end.Outcome != agent.Done || end.Text != "result: written" {
					t.Fatalf("the turn decided after the restart ended %s: %q (%v)", end.Outcome, end.Text, end.Err)
				}
				if runs.Load() != 1 {
					t.Errorf("the approved call ran %d times, want 1", runs.Load())
				}
			})
		}
	}
}
