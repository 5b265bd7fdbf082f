package agent_test

import (
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// TestStreamedTextEvents: with a streaming model, what the model writes
// is published as it arrives (TextDelta), a reply per round; a round
// that goes on to call tools ends its text with an interim TextDone
// before the tool runs, and the final answer's deltas add up to the
// TurnEnded text.
func TestStreamedTextEvents(t *testing.T) {
	fake := &fakeopenai.Server{}
	fake.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		if len(req.Messages) <= 2 {
			return fakeopenai.Reply{Content: "Let me read it first.", Pace: time.Millisecond,
				ToolCalls: []fakeopenai.Call{{Name: "read_file", Arguments: `{"path":"a"}`}}}
		}
		return fakeopenai.Reply{Content: "The file says hello, and that is all.", Pace: time.Millisecond}
	}
	h := newHarness(t, fake, harnessOpts{stream: true, tools: []agent.Tool{readTool()}})
	h.send(t, "web/s", "read a")
	events := h.waitEnd(t, "web/s")

	var replies []string // in order of their first delta
	text := map[string]string{}
	var interim agent.Event
	toolAt, doneAt := -1, -1
	for i, e := range events {
		switch e.Kind {
		case agent.TextDelta:
			if e.Reply == "" {
				t.Fatalf("delta %q without a reply id", e.Text)
			}
			if _, ok := text[e.Reply]; !ok {
				replies = append(replies, e.Reply)
			}
			text[e.Reply] += e.Text
		case agent.TextDone:
			interim, doneAt = e, i
		case agent.ToolStarted:
			if toolAt < 0 {
				toolAt = i
			}
		}
	}
	if len(replies) != 2 {
		t.Fatalf("streamed replies %q, want two (one per round)", replies)
	}
	if text[replies[0]] != "Let me read it first." {
		t.Errorf("first round's deltas add up to %q", text[replies[0]])
	}
	if !interim.Interim || interim.Reply != replies[0] || interim.Text != "Let me read it first." {
		t.Errorf("TextDone = %+v, want the first reply, interim, whole", interim)
	}
	if toolAt >= 0 && doneAt > toolAt {
		t.Errorf("TextDone at event %d, after the tool started at %d", doneAt, toolAt)
	}
	end := events[len(events)-1]
	if text[replies[1]] != end.Text || !strings.HasPrefix(end.Text, "The file says") {
		t.Errorf("final deltas %q, TurnEnded text %q", text[replies[1]], end.Text)
	}
}

// TestNoTextEventsWithoutStreaming: a model that does not stream
// publishes no text events; the answer is the TurnEnded text as before.
func TestNoTextEventsWithoutStreaming(t *testing.T) {
	fake := &fakeopenai.Server{}
	fake.Respond = func(*openai.ChatCompletionRequest) fakeopenai.Reply { return fakeopenai.Reply{Content: "plain answer"} }
	h := newHarness(t, fake, harnessOpts{})
	h.send(t, "web/p", "hi")
	for _, e := range h.waitEnd(t, "web/p") {
		if e.Kind == agent.TextDelta || e.Kind == agent.TextDone {
			t.Errorf("event %v %q without streaming", e.Kind, e.Text)
		}
	}
}
