package agent_test

//lint:file-ignore SA1019 the test reads max_tokens, which DESIGN §8 sends, to see it renamed for a server that refuses it

import (
	"fmt"
	"testing"

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
