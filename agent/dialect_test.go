package agent_test

//lint:file-ignore SA1019 the test reads max_tokens, which DESIGN §8 sends, to see it renamed for a server that refuses it

import (
	"fmt"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// TestReasoningModelTakesMaxCompletionTokens: a server that refuses
// max_tokens and asks for max_completion_tokens (OpenAI's reasoning
// models) gets the same limit under that name, plain and streamed, and
// every later request sends it so; the turn is answered, not failed as a
// conversation too long.
func TestReasoningModelTakesMaxCompletionTokens(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			fake := &fakeopenai.Server{ReasoningModel: true, Respond: planThenAnswer}
			h := newHarness(t, fake, harnessOpts{stream: stream})
			for _, key := range []string{"web/o1", "web/o2"} {
				h.send(t, key, "hello")
				events := h.waitEnd(t, key)
				if end := events[len(events)-1]; end.Outcome != agent.Done {
					t.Fatalf("%s ended %s: %q (%v)", key, end.Outcome, end.Text, end.Err)
				}
			}
			reqs := fake.Requests()
			if len(reqs) < 4 {
				t.Fatalf("%d requests answered, want the plan and the answer of two turns", len(reqs))
			}
			for i, req := range reqs {
				if req.MaxCompletionTokens <= 0 || req.MaxTokens != 0 {
					t.Errorf("request %d: max_tokens %d, max_completion_tokens %d; want the limit as max_completion_tokens only", i, req.MaxTokens, req.MaxCompletionTokens)
				}
			}
		})
	}
}

// TestCutAnswerSaysSo: an answer the server cut at the request's
// max_tokens (finish_reason "length") is shown with a note that says so
// and why, not as if it ended there.
func TestCutAnswerSaysSo(t *testing.T) {
	fake := &fakeopenai.Server{Respond: func(*openai.ChatCompletionRequest) fakeopenai.Reply {
		return fakeopenai.Reply{Content: strings.Repeat("The migration plan has many steps. ", 200)}
	}}
	db, _ := openDB(t)
	h := storeHarness(t, fake, db, db, agent.Options{MaxOutputTokens: 100})
	h.send(t, "web/cut", "write it all out")
	events := h.waitEnd(t, "web/cut")
	end := events[len(events)-1]
	if end.Outcome != agent.Done || !strings.Contains(end.Text, "The answer was cut at its limit of 100 tokens") {
		t.Errorf("the cut answer ended %s with %q…; want it shown with a note of the cut", end.Outcome, end.Text[max(0, len(end.Text)-200):])
	}
}
