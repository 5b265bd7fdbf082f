package main

import (
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// TestSlowSlackDoesNotHoldTheRounds: with every Slack call taking 3 s,
// a turn's seven quick model rounds (six plan revisions and the answer)
// are all asked before a second Slack call has come back: the agent
// never waits on the platform (DESIGN §1); what people see lags, the
// rounds do not.
func TestSlowSlackDoesNotHoldTheRounds(t *testing.T) {
	t.Parallel() // rounds take milliseconds against a 3 s call: a wide margin
	const slow = 3 * time.Second
	r := newSlackRig(t, 6, 0, true)
	var mu sync.Mutex
	var asked []time.Time
	respond := r.model.Respond
	r.model.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		mu.Lock()
		asked = append(asked, time.Now())
		mu.Unlock()
		return respond(req)
	}
	p := r.start(t)
	defer p.stop(t)
	r.slack.Delay("", slow, 1000)
	if _, err := r.slack.Push("EvSlow", mention("C1", "1700080000.000100", "plan it quickly")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "seven model rounds", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(asked) >= 7
	})
	mu.Lock()
	first, last := asked[0], asked[6]
	mu.Unlock()
	// Reading the message in (who wrote it, the thread so far) may wait
	// on Slack before the first round; between the first round and the
	// last, no Slack call may have come back.
	back := 0
	for _, c := range r.slack.Calls("") {
		if done := c.At.Add(slow); done.After(first) && done.Before(last) {
			back++
		}
	}
	t.Logf("seven rounds in %s; %d Slack calls of %s came back meanwhile", last.Sub(first).Round(time.Millisecond), back, slow)
	if back > 0 {
		t.Errorf("%d Slack calls came back between the first and the last round: the rounds waited on Slack", back)
	}
}
