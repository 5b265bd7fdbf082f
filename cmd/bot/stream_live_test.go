package main

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/todo"
)

// liveRig is a Slack rig with PINPLAN_STREAM=true whose model writes
// replies a word at a time (fakeopenai.Reply.Pace), recording when each
// word left it.
type liveRig struct {
	*slackRig
	mu     sync.Mutex
	deltas []time.Time
}

func newLiveRig(t *testing.T, replies []fakeopenai.Reply) *liveRig {
	r := &liveRig{slackRig: newSlackRig(t, 1, 0, true)}
	r.env["PINPLAN_STREAM"] = "true"
	script := fakeopenai.Script(func(string) []fakeopenai.Reply { return replies })
	r.model.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply { return script(req) }
	r.model.OnDelta = func(string) {
		r.mu.Lock()
		r.deltas = append(r.deltas, time.Now())
		r.mu.Unlock()
	}
	return r
}

func (r *liveRig) written() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.deltas)
}

// streams waits until the thread's streamed messages hold n words and
// the last has stopped, and returns them.
func (r *liveRig) streams(t *testing.T, thread string, n int) []fakeslack.Message {
	t.Helper()
	var msgs []fakeslack.Message
	waitFor(t, 60*time.Second, "the streamed replies, complete", func() bool {
		msgs = msgs[:0]
		words := 0
		for _, m := range r.slack.Streams("C1") {
			if m.ThreadTS == thread {
				msgs = append(msgs, m)
				words += len(strings.Fields(m.Text))
			}
		}
		return words >= n && !msgs[len(msgs)-1].Streaming
	})
	return msgs
}

func donePlan() fakeopenai.Reply {
	items := []todo.Item{{Content: "write the answer", Status: todo.Completed}}
	return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: todo.ToolName, Arguments: todo.Encode(items)}}}
}

func numberedWords(n int) []string {
	var w []string
	for i := 1; i <= n; i++ {
		w = append(w, fmt.Sprintf("w%03d", i))
	}
	return w
}

// TestSlackAnswerStreamsAsWritten (issue 29): the model writes a 90-word
// answer over 5.4 s (a word every 60 ms); the stream starts with its
// first words, grows while the model writes and stops after its last,
// every word once and in order, below the plan message. With the stream
// ended by Slack on its second append (the held-back native check) the
// words go on in new messages, still once and in order.
func TestSlackAnswerStreamsAsWritten(t *testing.T) {
	t.Parallel()
	for _, expire := range []int{0, 2} {
		t.Run(fmt.Sprintf("expire=%d", expire), func(t *testing.T) {
			t.Parallel()
			answer := numberedWords(90)
			r := newLiveRig(t, []fakeopenai.Reply{donePlan(), {Content: strings.Join(answer, " "), Pace: 60 * time.Millisecond}})
			r.slack.Set(func(s *fakeslack.Server) { s.ExpireStreamOnAppend = expire })
			p := r.start(t)
			defer p.stop(t)
			thread := "1700090000.000100"
			if _, err := r.slack.Push("EvLive", mention("C1", thread, "write it as you go")); err != nil {
				t.Fatal(err)
			}
			msgs := r.streams(t, thread, len(answer))
			var got []string
			for _, m := range msgs {
				got = append(got, strings.Fields(m.Text)...)
				if m.StreamUser != "U1" || m.StreamTeam != "T1" {
					t.Errorf("stream %s to %q/%q, want U1/T1", m.TS, m.StreamUser, m.StreamTeam)
				}
			}
			if !slices.Equal(got, answer) {
				t.Fatalf("streamed words differ from the answer: lost, repeated or out of order\n%q", got)
			}
			if expire > 0 && len(msgs) < 2 {
				t.Errorf("%d streamed messages: the expiry did not roll the answer over", len(msgs))
			}
			written := r.written()
			if len(written) != len(answer) {
				t.Fatalf("the model wrote %d deltas, want %d", len(written), len(answer))
			}
			first, last := written[0], written[len(written)-1]
			starts, appends, stops := okCalls(r.slack, "chat.startStream"), okCalls(r.slack, "chat.appendStream"), okCalls(r.slack, "chat.stopStream")
			if len(starts) == 0 || len(stops) == 0 {
				t.Fatalf("starts %d, stops %d", len(starts), len(stops))
			}
			t.Logf("first words %s after the model's first delta; %d appends; stopped %s after its last",
				starts[0].At.Sub(first).Round(time.Millisecond), len(appends), stops[len(stops)-1].At.Sub(last).Round(time.Millisecond))
			// The thread shows the answer while the model writes it: the
			// stream starts before the model has written a tenth of it,
			// grows in several appends before its last word, and stops
			// only after that.
			if !starts[0].At.Before(written[len(written)/10]) {
				t.Errorf("the stream started at %s, after the model had written %d words", starts[0].At.Format(time.StampMilli), len(written)/10)
			}
			during := 0
			for _, c := range appends {
				if c.At.Before(last) {
					during++
				}
			}
			if during < 3 {
				t.Errorf("%d appends while the model wrote, want the stream to grow with it", during)
			}
			if end := stops[len(stops)-1].At; end.Before(last) {
				t.Errorf("the stream stopped at %s, before the model's last word at %s", end.Format(time.StampMilli), last.Format(time.StampMilli))
			}
			plans := planMessages(r.slack, "C1")
			if len(plans) != 1 || plans[0].TS > msgs[0].TS {
				t.Errorf("plan messages %d; the answer must come below the plan", len(plans))
			}
			if posted := botMessages(r.slack, "C1", thread, "w001"); len(posted) != len(msgs[:1]) || !posted[0].Streamed {
				t.Errorf("the answer's first words are in %d messages (streamed %v), want the stream alone", len(posted), len(posted) > 0 && posted[0].Streamed)
			}
			if v := r.slack.Violations(); len(v) > 0 {
				t.Errorf("Slack would have refused: %v", v)
			}
		})
	}
}

// TestSlackTextBeforeToolsStays (issue 29): a round writes some text and
// then calls a tool: the text stays in the thread as an interim message,
// stopped, shown once; the next round's answer is a stream of its own,
// shown once.
func TestSlackTextBeforeToolsStays(t *testing.T) {
	t.Parallel()
	interim := "Let me write the plan down first."
	answer := "All done: the plan is complete and checked."
	plan := donePlan()
	plan.Content, plan.Pace = interim, 20*time.Millisecond
	r := newLiveRig(t, []fakeopenai.Reply{plan, {Content: answer, Pace: 20 * time.Millisecond}})
	p := r.start(t)
	defer p.stop(t)
	thread := "1700090001.000100"
	if _, err := r.slack.Push("EvInterim", mention("C1", thread, "plan it, then answer")); err != nil {
		t.Fatal(err)
	}
	msgs := r.streams(t, thread, len(strings.Fields(interim+" "+answer)))
	if len(msgs) != 2 || msgs[0].Text != interim || msgs[1].Text != answer {
		var texts []string
		for _, m := range msgs {
			texts = append(texts, m.Text)
		}
		t.Fatalf("streamed messages %q, want the interim text and the answer", texts)
	}
	for _, m := range msgs {
		if m.Streaming {
			t.Errorf("message %q left streaming", m.Text)
		}
	}
	if n := len(botMessages(r.slack, "C1", thread, "Let me write")); n != 1 {
		t.Errorf("the interim text is in %d messages, want 1", n)
	}
	if n := len(botMessages(r.slack, "C1", thread, "All done:")); n != 1 {
		t.Errorf("the answer is in %d messages, want 1", n)
	}
	if v := r.slack.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestSlackStreamCutByKillIsClosed (issue 29): the bot is killed (-9)
// while the answer streams. What the model had written was never stored
// (§5), so the next process resumes the turn and it answers again, in a
// stream of its own; the cut-off stream is not left open: it ends with a
// note saying so.
func TestSlackStreamCutByKillIsClosed(t *testing.T) {
	t.Parallel()
	answer := strings.Join(numberedWords(60), " ")
	r := newLiveRig(t, []fakeopenai.Reply{donePlan(), {Content: answer, Pace: 100 * time.Millisecond}})
	p := r.start(t)
	thread := "1700090002.000100"
	if _, err := r.slack.Push("EvKill", mention("C1", thread, "write slowly")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the answer to be streaming", func() bool {
		for _, m := range r.slack.Streams("C1") {
			if m.ThreadTS == thread && m.Streaming && len(strings.Fields(m.Text)) >= 5 {
				return true
			}
		}
		return false
	})
	p.kill()
	p = r.start(t)
	defer p.stop(t)
	var msgs []fakeslack.Message
	waitFor(t, 60*time.Second, "the cut stream closed and the answer streamed again", func() bool {
		msgs = msgs[:0]
		for _, m := range r.slack.Streams("C1") {
			if m.ThreadTS == thread {
				msgs = append(msgs, m)
			}
		}
		return len(msgs) >= 2 && !msgs[0].Streaming && !msgs[len(msgs)-1].Streaming && msgs[len(msgs)-1].Text == answer
	})
	if len(msgs) != 2 {
		t.Errorf("%d streamed messages, want the cut one and the answer", len(msgs))
	}
	cut := msgs[0].Text
	if !strings.HasSuffix(cut, "_(interrupted; answered again below)_") || !strings.HasPrefix(answer, strings.TrimSuffix(cut, "_(interrupted; answered again below)_")) {
		t.Errorf("the cut stream reads %q, want the words it had and the note", cut)
	}
	if v := r.slack.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestDiscordAnswerShownAsWritten (issue 29): on Discord the answer is
// posted at its first words, edited as the model writes (within the
// channel's edit bucket, as Discord sets it: 5 per 5 s; no edit
// refused), and ends on the whole text.
func TestDiscordAnswerShownAsWritten(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 1, 0)
	r.env["PINPLAN_STREAM"] = "true"
	r.dc.LimitEdits(5, 5*time.Second)
	answer := strings.Join(numberedWords(90), " ")
	script := fakeopenai.Script(func(string) []fakeopenai.Reply {
		return []fakeopenai.Reply{donePlan(), {Content: answer, Pace: 60 * time.Millisecond}}
	})
	r.model.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply { return script(req) }
	var mu sync.Mutex
	var written []time.Time
	r.model.OnDelta = func(string) {
		mu.Lock()
		written = append(written, time.Now())
		mu.Unlock()
	}
	p := r.start(t)
	defer p.stop(t)
	r.dc.UserMessage("C1", "U1", "write it as you go", true)
	var reply fakediscord.Message
	waitFor(t, 60*time.Second, "the whole answer in one message", func() bool {
		for _, m := range r.dc.Messages("C1") {
			if m.AuthorID == fakediscord.BotID && strings.HasPrefix(m.Content, "w001") {
				reply = m
				return m.Content == answer
			}
		}
		return false
	})
	mu.Lock()
	first, last := written[0], written[len(written)-1]
	tenth := written[len(written)/10]
	mu.Unlock()
	var posted time.Time
	for _, c := range r.dc.Calls("POST channels/C1/messages") {
		if s, _ := c.Body["content"].(string); strings.HasPrefix(s, "w001") {
			posted = c.At
			break
		}
	}
	edits, during, refused := 0, 0, 0
	for _, c := range r.dc.Calls("PATCH channels/C1/messages/" + reply.ID) {
		edits++
		if c.Status >= 300 {
			refused++
		}
		if c.At.Before(last) {
			during++
		}
	}
	t.Logf("first words posted %s after the model's first delta; %d edits, %d while the model wrote", posted.Sub(first).Round(time.Millisecond), edits, during)
	if posted.IsZero() || !posted.Before(tenth) {
		t.Errorf("the first words were posted at %v, not before the model had written a tenth of the answer", posted)
	}
	if during < 2 {
		t.Errorf("%d edits while the model wrote, want the message to grow with it", during)
	}
	if refused > 0 {
		t.Errorf("%d of %d edits refused", refused, edits)
	}
	if v := r.dc.Violations(); len(v) > 0 {
		t.Errorf("Discord would have refused: %v", v)
	}
}
