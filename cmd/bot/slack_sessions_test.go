package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/internal/fakeslack"
)

// statuses waits until the thread's session status history has n moves
// and returns it.
func statuses(t *testing.T, s *fakeslack.Server, thread string, n int) []string {
	t.Helper()
	var got []string
	waitFor(t, 30*time.Second, fmt.Sprintf("%d session status moves", n), func() bool {
		got = s.SessionStatuses("C1", thread)
		return len(got) >= n
	})
	return got
}

// TestSlackSessionStatusesWithCard: a turn that waits on an approval card
// is processing, suspended while the card waits, processing once it is
// decided, and active when it ends.
func TestSlackSessionStatusesWithCard(t *testing.T) {
	t.Parallel()
	r := newToolRig(t, true, nil)
	p := r.start(t)
	defer p.stop(t)
	thread := "1700050000.000100"
	if _, err := r.slack.Push("EvC", mention("C1", thread, "write hello")); err != nil {
		t.Fatal(err)
	}
	card, allow := waitCard(t, r.slack, thread, "fs__write_file", "allow")
	if got := statuses(t, r.slack, thread, 2); !slices.Equal(got, []string{"processing", "suspended"}) {
		t.Errorf("statuses while the card waits %q, want processing, suspended", got)
	}
	r.press(t, "U1", thread, card.TS, allow)
	waitReply(t, r.slack, "C1", thread, "tool said:")
	want := []string{"processing", "suspended", "processing", "active"}
	if got := statuses(t, r.slack, thread, 4); !slices.Equal(got, want) {
		t.Errorf("statuses %q, want %q", got, want)
	}
	if title := r.slack.SessionTitle("C1", thread); title != "write hello" {
		t.Errorf("session title %q", title)
	}
	if v := r.slack.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestSlackNativeStop: Slack's own Stop follows the Stop button's rule.
// Someone else's is refused privately and the status goes back to
// processing (Slack leaves it); the requester's stops the turn and the
// status moves to active.
func TestSlackNativeStop(t *testing.T) {
	r := newToolRig(t, true, nil)
	p := r.start(t)
	defer p.stop(t)
	slow := "1700060000.000100"
	if _, err := r.slack.Push("EvS", mention("C1", slow, "sleep a while")); err != nil {
		t.Fatal(err)
	}
	var plan fakeslack.Message
	waitFor(t, 30*time.Second, "the long tool call", func() bool {
		for _, m := range planMessages(r.slack, "C1") {
			if m.ThreadTS == slow && strings.Contains(m.Blocks, "running ev__trigger-long-running-operation") {
				plan = m
				return true
			}
		}
		return false
	})
	before := statuses(t, r.slack, slow, 1)
	stop := r.slack.StopSession("U2", "C1", slow)
	if stop == nil {
		t.Fatalf("no Stop button on the session: statuses %q", before)
	}
	if _, err := r.slack.Push("EvStopBob", stop); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "bob's private refusal", func() bool {
		for _, m := range r.slack.Ephemerals("C1") {
			if m.Recipient == "U2" && m.ThreadTS == slow && strings.Contains(m.Text, "Only <@U1>") {
				return true
			}
		}
		return false
	})
	got := statuses(t, r.slack, slow, len(before)+1)
	if got[len(got)-1] != "processing" {
		t.Errorf("statuses after the refused stop %q, want back to processing", got)
	}
	for _, m := range planMessages(r.slack, "C1") {
		if m.TS == plan.TS && strings.Contains(m.Blocks, "stopped") {
			t.Fatal("bob's stop stopped the turn")
		}
	}

	start := time.Now()
	if _, err := r.slack.Push("EvStopAnn", r.slack.StopSession("U1", "C1", slow)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the stopped footer", func() bool {
		for _, m := range planMessages(r.slack, "C1") {
			if m.TS == plan.TS {
				return strings.Contains(m.Blocks, "stopped by ann")
			}
		}
		return false
	})
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("Slack's Stop took %s against a 30 s operation", took)
	}
	waitFor(t, 10*time.Second, "the status at active", func() bool {
		st := r.slack.SessionStatuses("C1", slow)
		return st[len(st)-1] == "active"
	})
	if v := r.slack.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestSlackStreamedAnswerRollsOver: with PINPLAN_STREAM=true the answer
// streams into the thread; the stream Slack ends on its second append
// goes on in new streamed messages, every word once and in order.
func TestSlackStreamedAnswerRollsOver(t *testing.T) {
	t.Parallel()
	r := newSlackRig(t, 2, 0, true)
	r.env["PINPLAN_STREAM"] = "true"
	r.slack.Set(func(s *fakeslack.Server) { s.ExpireStreamOnAppend = 2 })
	var answer []string
	for i := 1; i <= 400; i++ {
		answer = append(answer, fmt.Sprintf("w%03d", i))
	}
	script := fakeopenai.Script(planScript(2, strings.Join(answer, " ")))
	r.model.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		reply := script(req)
		reply.Pace = 2 * time.Millisecond // written as it goes, so the stream has appends to be ended on
		return reply
	}
	p := r.start(t)
	defer p.stop(t)
	thread := "1700070000.000100"
	if _, err := r.slack.Push("EvStream", mention("C1", thread, "write it all out")); err != nil {
		t.Fatal(err)
	}
	var msgs []fakeslack.Message
	waitFor(t, 60*time.Second, "the streamed answer, complete", func() bool {
		msgs = msgs[:0]
		var words []string
		for _, m := range r.slack.Streams("C1") {
			if m.ThreadTS == thread {
				msgs = append(msgs, m)
				words = append(words, strings.Fields(m.Text)...)
			}
		}
		return len(words) >= len(answer) && !msgs[len(msgs)-1].Streaming
	})
	var words []string
	for _, m := range msgs {
		if m.StreamUser != "U1" || m.StreamTeam != "T1" {
			t.Errorf("stream %s to %q/%q, want U1/T1 (the thread is in a channel)", m.TS, m.StreamUser, m.StreamTeam)
		}
		words = append(words, strings.Fields(m.Text)...)
	}
	if !slices.Equal(words, answer) {
		t.Errorf("streamed words (%d) differ from the answer (%d): lost, repeated or out of order\n%q", len(words), len(answer), words)
	}
	if len(msgs) < 2 {
		t.Errorf("%d streamed messages: the expiry did not roll the answer over", len(msgs))
	}
	for _, m := range botMessages(r.slack, "C1", thread, "w001") {
		if !m.Streamed {
			t.Errorf("the answer was also posted: %+v", m)
		}
	}
	if n := len(planMessages(r.slack, "C1")); n != 1 {
		t.Errorf("%d plan messages, want 1 (never a stream)", n)
	}
	if v := r.slack.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestSlackSessionsFallBackToReactions: a token Slack does not let use
// agent sessions turns them off for the workspace at the first answer,
// logged once, and the working indicator is the reaction on the message
// that started each turn.
func TestSlackSessionsFallBackToReactions(t *testing.T) {
	t.Parallel()
	// Each model request takes a moment, so that every turn outlasts its
	// indicator's way out (one that has not gone out when its turn is
	// over is not shown at all).
	r := newSlackRig(t, 2, 300*time.Millisecond, true)
	r.slack.Set(func(s *fakeslack.Server) { s.AgentSessionsError = "not_allowed_token_type" })
	p := r.start(t)
	defer p.stop(t)
	for i, ts := range []string{"1700080000.000100", "1700080100.000100"} {
		if _, err := r.slack.Push(fmt.Sprintf("EvF%d", i), mention("C1", ts, "plan the release")); err != nil {
			t.Fatal(err)
		}
		waitReply(t, r.slack, "C1", ts, "All done.")
	}
	waitFor(t, 10*time.Second, "both reactions removed", func() bool {
		return len(okCalls(r.slack, "reactions.remove")) == 2
	})
	if n := len(okCalls(r.slack, "reactions.add")); n != 2 {
		t.Errorf("%d working reactions, want one per turn", n)
	}
	for _, ts := range []string{"1700080000.000100", "1700080100.000100"} {
		if got := r.slack.Reactions("C1", ts); len(got) != 0 {
			t.Errorf("reactions %q left on %s", got, ts)
		}
	}
	if n := len(r.slack.Calls("agents.sessions.setStatus")); n != 1 {
		t.Errorf("%d setStatus calls, want 1: the workspace falls back after the first refusal", n)
	}
	if n := strings.Count(p.stderr.String(), "agent sessions are not available"); n != 1 {
		t.Errorf("the fallback was logged %d times, want once", n)
	}
}
