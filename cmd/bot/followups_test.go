package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// requestUserTexts returns the user messages of every model request, one slice
// per request.
func requestUserTexts(m *fakeopenai.Server) [][]string {
	var out [][]string
	for _, req := range m.Requests() {
		var texts []string
		for _, msg := range req.Messages {
			if msg.Role == openai.ChatMessageRoleUser {
				texts = append(texts, msg.Content)
			}
		}
		out = append(out, texts)
	}
	return out
}

// positions returns where each of want is in texts (the first message
// containing it), -1 for one not there.
func positions(texts, want []string) []int {
	out := make([]int, len(want))
	for i, w := range want {
		out[i] = -1
		for j, t := range texts {
			if strings.Contains(t, w) {
				out[i] = j
				break
			}
		}
	}
	return out
}

// increasing reports whether every position is set and they increase.
func increasing(pos []int) bool {
	for i, p := range pos {
		if p < 0 || (i > 0 && p <= pos[i-1]) {
			return false
		}
	}
	return true
}

// threadReply is a message event in a thread, without a mention.
func threadReply(channel, thread, ts, text string) map[string]any {
	return map[string]any{"type": "message", "user": "U1", "text": text, "ts": ts, "thread_ts": thread, "channel": channel, "event_ts": ts}
}

// waitInOrder waits for a model request whose user messages hold every
// one of want, in that order, and fails if any request holds them in
// another order.
func waitInOrder(t *testing.T, m *fakeopenai.Server, want []string, logs func() string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		reqs := requestUserTexts(m)
		for _, texts := range reqs {
			pos := positions(texts, want)
			for i := 1; i < len(pos); i++ {
				if pos[i] >= 0 && pos[i-1] >= 0 && pos[i] < pos[i-1] {
					t.Fatalf("%q reached the model before %q: %q", want[i], want[i-1], texts)
				}
			}
			if increasing(pos) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no model request holds %q in order; the requests' user messages:\n%q\n%s", want, reqs, logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestFollowUpsSpreadOverReplicas: a mention and three replies sent at
// once land on three replicas (the fake spreads envelopes round-robin, as
// Slack does); the replies arrive where no session exists yet, wait in
// the thread's queue, and all reach the model after the mention, in the
// order they were sent (DESIGN §14).
func TestFollowUpsSpreadOverReplicas(t *testing.T) {
	t.Parallel()
	r := newReplicaRig(t, 2)
	ps := []*botProc{r.start(t, 0), r.start(t, 1), r.start(t, 2)}
	const ch, thread = "C1", "1700000500.000100"
	if _, err := r.slack.Push("EvM", mention(ch, thread, "task in C1")); err != nil {
		t.Fatal(err)
	}
	want := []string{"task in C1"}
	for i := 1; i <= 3; i++ {
		text := fmt.Sprint("follow-up ", i)
		want = append(want, text)
		if _, err := r.slack.Push(fmt.Sprint("EvR", i), threadReply(ch, thread, fmt.Sprintf("1700000500.00020%d", i), text)); err != nil {
			t.Fatal(err)
		}
	}
	waitInOrder(t, r.model, want, func() string { return stderrs(ps...) })
	waitFor(t, 60*time.Second, "an answer in "+ch, func() bool { return len(answers(r.slack, ch)) >= 1 })
	if n := len(planMessages(r.slack, ch)); n != 1 {
		t.Errorf("%d plan messages, want 1", n)
	}
	if v := r.slack.Violations(); len(v) > 0 {
		t.Errorf("Slack protocol violations: %v", v)
	}
}

// TestFollowUpBeforeItsMention: one process; a thread reply handled
// before the mention that starts its thread's session (events out of
// order) waits for the session and reaches the model after the mention.
// A reply in a thread pinplan was never mentioned in reaches nothing: no
// model request carries it and nothing is said in its thread.
func TestFollowUpBeforeItsMention(t *testing.T) {
	t.Parallel()
	r := newSlackRig(t, 2, 20*time.Millisecond, true)
	p := r.start(t)
	defer p.stop(t)
	const ch, thread, other = "C1", "1700000600.000100", "1700000700.000100"
	if _, err := r.slack.Push("EvStray", threadReply(ch, other, "1700000700.000200", "chatter without pinplan")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.slack.Push("EvEarly", threadReply(ch, thread, "1700000600.000200", "early follow-up")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the reply is handled first
	if _, err := r.slack.Push("EvM", mention(ch, thread, "late task")); err != nil {
		t.Fatal(err)
	}
	waitInOrder(t, r.model, []string{"late task", "early follow-up"}, p.stderr.String)
	waitReply(t, r.slack, ch, thread, "All done.")
	for _, texts := range requestUserTexts(r.model) {
		for _, text := range texts {
			if strings.Contains(text, "chatter without pinplan") {
				t.Errorf("a reply in a thread pinplan was never mentioned in reached the model: %q", texts)
			}
		}
	}
	for _, m := range r.slack.Messages(ch) {
		if m.ThreadTS == other && m.BotID != "" {
			t.Errorf("the bot said %q in a thread it was never mentioned in", m.Text)
		}
	}
}

// TestDiscordFollowUpsAcrossReplicas: on Discord the gateway replica
// hands a thread's mention over through etcd and its follow-ups right
// behind it, before any replica has made the session: all reach the
// model after the mention, in order.
func TestDiscordFollowUpsAcrossReplicas(t *testing.T) {
	t.Parallel()
	r := newDiscordReplicaRig(t, replicaTTL)
	r.dc.AddChannel("T1", 11, "G1") // a public thread
	ps := []*botProc{r.start(t, 0), r.start(t, 1)}
	waitHolder(t, r, ps, 15*time.Second)
	want := []string{"the thread's task"}
	r.dc.UserMessage("T1", "111", want[0], true)
	for i := 1; i <= 3; i++ {
		want = append(want, fmt.Sprint("discord follow-up ", i))
		r.dc.UserMessage("T1", "111", want[i], false)
	}
	waitInOrder(t, r.model, want, func() string { return stderrs(ps...) })
}
