package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// userTexts lists, in order and without repeats per request, the user
// messages the model saw in requests for the conversation that starts
// with first.
func userTexts(reqs []openai.ChatCompletionRequest, contains string) []string {
	var last []openai.ChatCompletionMessage
	for _, req := range reqs {
		for _, m := range req.Messages {
			if m.Role == openai.ChatMessageRoleUser && strings.Contains(m.Content, contains) {
				last = req.Messages
				break
			}
		}
	}
	var out []string
	for _, m := range last {
		if m.Role == openai.ChatMessageRoleUser {
			out = append(out, m.Content)
		}
	}
	return out
}

// checkBurst checks the model saw the burst's messages once each, in order.
func checkBurst(t *testing.T, got []string, n int) {
	t.Helper()
	var burst []string
	for _, s := range got {
		if i := strings.Index(s, "burst "); i >= 0 {
			burst = append(burst, s[i:])
		}
	}
	if len(burst) != n {
		t.Fatalf("the model saw %d of %d burst messages: %q", len(burst), n, burst)
	}
	for i, s := range burst {
		if want := fmt.Sprintf("burst %02d", i+1); s != want {
			t.Fatalf("burst message %d is %q, want %q (all: %q)", i, s, want, burst)
		}
	}
}

func TestSlackBurstArrivesInOrder(t *testing.T) {
	t.Parallel()
	for _, socket := range []bool{true, false} {
		t.Run(fmt.Sprintf("socket=%t", socket), func(t *testing.T) {
			r := newSlackRig(t, 2, 30*time.Millisecond, socket)
			p := r.start(t)
			defer p.stop(t)
			const n = 12
			send := func(id string, ev map[string]any) {
				t.Helper()
				if socket {
					if _, err := r.slack.Push(id, ev); err != nil {
						t.Fatal(err)
					}
					return
				}
				if code, _ := do(t, signedRequest(t, p.URL+"/slack/events", "signing-secret", r.slack.CallbackBody(id, ev), time.Now())); code != 200 {
					t.Fatalf("event %s: HTTP %d", id, code)
				}
			}
			send("EvB0", mention("C1", "1700002000.000100", "start the burst"))
			for i := 1; i <= n; i++ {
				send(fmt.Sprintf("EvB%d", i), map[string]any{"type": "message", "channel_type": "channel", "user": "U1",
					"text": fmt.Sprintf("burst %02d", i), "ts": fmt.Sprintf("1700002000.%06d", 200+i), "thread_ts": "1700002000.000100", "channel": "C1"})
			}
			waitFor(t, 60*time.Second, "every burst message at the model", func() bool {
				return strings.Contains(strings.Join(userTexts(r.model.Requests(), "start the burst"), "\n"), fmt.Sprintf("burst %02d", n))
			})
			checkBurst(t, userTexts(r.model.Requests(), "start the burst"), n)
		})
	}
}

func TestSlackReplyDeliveredAfterServerErrors(t *testing.T) {
	t.Parallel()
	r := newSlackRig(t, 1, 0, true)
	p := r.start(t)
	defer p.stop(t)
	if _, err := r.slack.Push("Ev5", mention("C1", "1700003000.000100", "first")); err != nil {
		t.Fatal(err)
	}
	waitReply(t, r.slack, "C1", "1700003000.000100", "All done.")
	// The next answer meets two HTTP 500s; it is posted in the end, once.
	r.slack.FailHTTP("chat.postMessage", 500, 2)
	followUp := map[string]any{"type": "message", "channel_type": "channel", "user": "U1", "text": "and then?", "ts": "1700003001.000100", "thread_ts": "1700003000.000100", "channel": "C1"}
	if _, err := r.slack.Push("Ev6", followUp); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the answer after two 500s", func() bool {
		n := 0
		for _, m := range r.slack.Messages("C1") {
			if m.ThreadTS == "1700003000.000100" && m.BotID != "" && m.Text == "done" {
				n++
			}
		}
		return n == 1
	})
	failed := 0
	for _, c := range r.slack.Calls("chat.postMessage") {
		if c.Status == 500 {
			failed++
		}
	}
	if failed != 2 {
		t.Errorf("%d posts answered 500, want 2", failed)
	}
}

func TestDiscordBurstArrivesInOrder(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 2, 30*time.Millisecond)
	r.dc.AddChannel("T9", 11, "G1")
	p := r.start(t)
	defer p.stop(t)
	const n = 12
	r.dc.UserMessage("T9", "111", "start the burst", true)
	for i := 1; i <= n; i++ {
		r.dc.UserMessage("T9", "111", fmt.Sprintf("burst %02d", i), false)
	}
	waitFor(t, 60*time.Second, "every burst message at the model", func() bool {
		return strings.Contains(strings.Join(userTexts(r.model.Requests(), "start the burst"), "\n"), fmt.Sprintf("burst %02d", n))
	})
	checkBurst(t, userTexts(r.model.Requests(), "start the burst"), n)
}

func TestDiscordReplyDeliveredAfterServerErrors(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 1, 0)
	p := r.start(t)
	defer p.stop(t)
	r.dc.UserMessage("C1", "111", "first", true)
	waitDiscordReply(t, r.dc, "C1", "All done.")
	r.dc.FailHTTP("POST messages", 500, 2)
	r.dc.UserMessage("C1", "111", "and then?", true)
	waitFor(t, 60*time.Second, "the answer after two 500s", func() bool {
		n := 0
		for _, m := range r.dc.Messages("C1") {
			if m.AuthorID == fakediscord.BotID && len(m.Embeds) == 0 && m.Content == "done" {
				n++
			}
		}
		return n == 1
	})
}

func TestDiscordReconnectGapIsFetched(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 1, 0)
	r.dc.AddChannel("T7", 11, "G1")
	r.model.Respond = fakeopenai.Script(func(string) []fakeopenai.Reply { return nil }) // every turn: "done"
	p := r.start(t)
	defer p.stop(t)
	r.dc.UserMessage("T7", "111", "watch this thread", true)
	waitDiscordReply(t, r.dc, "T7", "done")
	// The session ends (Discord replays nothing) and a message is sent
	// before the bot identifies again. On a loaded machine the bot can
	// identify before the message is sent, and the gateway delivers it:
	// then the gap is made again, with another message.
	var sent []string
	for try := 1; r.dc.Missed() == 0; try++ {
		if try > 5 {
			t.Fatal("the fake delivered every gap's message: this test would prove nothing")
		}
		identifies, _ := r.dc.Sessions()
		r.dc.InvalidSession(false)
		sent = append(sent, fmt.Sprint("sent in gap ", try))
		r.dc.UserMessage("T7", "111", sent[len(sent)-1], false)
		waitFor(t, 30*time.Second, "a new gateway session", func() bool { id, _ := r.dc.Sessions(); return id > identifies && r.dc.Connected() > 0 })
	}
	r.dc.UserMessage("T7", "111", "after the gap", false)
	waitFor(t, 60*time.Second, "the message after the gap at the model", func() bool {
		return strings.Contains(strings.Join(userTexts(r.model.Requests(), "watch this thread"), "\n"), "after the gap")
	})
	onceEach(t, userTexts(r.model.Requests(), "watch this thread"), append(sent, "after the gap")...)
}

// TestDiscordMessagesWhileDownAreFetched: a mention and a follow-up
// sent while the process is down (kill -9) are answered after the
// restart, once each. Discord replays nothing to a new process's gateway
// session (found by the hour soak: one answer lost on one process).
func TestDiscordMessagesWhileDownAreFetched(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 1, 0)
	r.dc.AddChannel("T7", 11, "G1")
	r.model.Respond = fakeopenai.Script(func(string) []fakeopenai.Reply { return nil }) // every turn: "done"
	p := r.start(t)
	r.dc.UserMessage("T7", "111", "watch this thread", true)
	waitDiscordReply(t, r.dc, "T7", "done")
	p.kill()
	waitFor(t, 10*time.Second, "the fake to see the connection gone", func() bool { return r.dc.Connected() == 0 })
	r.dc.UserMessage("T7", "111", "sent while down", false)
	r.dc.UserMessage("T7", "111", "mentioned while down", true)
	p = r.start(t)
	defer p.stop(t)
	r.dc.UserMessage("T7", "111", "after the restart", false)
	waitFor(t, 60*time.Second, "the message after the restart at the model", func() bool {
		return strings.Contains(strings.Join(userTexts(r.model.Requests(), "watch this thread"), "\n"), "after the restart")
	})
	if r.dc.Missed() < 2 {
		t.Fatalf("the fake delivered %d of the messages sent while down: this test would prove nothing", 2-r.dc.Missed())
	}
	onceEach(t, userTexts(r.model.Requests(), "watch this thread"), "sent while down", "mentioned while down", "after the restart")
}

// onceEach checks that each of wants ends exactly one of the texts the
// model read (a user entry is "name: text").
func onceEach(t *testing.T, texts []string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		n := 0
		for _, s := range texts {
			if strings.HasSuffix(s, want) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%q reached the model %d times, want once (%q)", want, n, texts)
		}
	}
}

// TestSlackReplyRefusedForGoodIsReported: an answer Slack refuses with
// not_in_channel (the bot was removed from the channel) is attempted at
// most twice, then counted as undelivered and shown to the operator; it
// is not retried for a day as if a pin had failed.
func TestSlackReplyRefusedForGoodIsReported(t *testing.T) {
	t.Parallel()
	r := newSlackRig(t, 1, 1500*time.Millisecond, true) // the answer comes 1.5 s after the plan
	p := r.start(t)
	defer p.stop(t)
	thread := "1700004000.000100"
	// The plan post goes through; the answer, the next postMessage after
	// it, is refused for good.
	if _, err := r.slack.Push("EvNIC", mention("C1", thread, "do it")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the plan message", func() bool { return len(planMessages(r.slack, "C1")) == 1 })
	r.slack.Fail("chat.postMessage", "not_in_channel", "not_in_channel", "not_in_channel", "not_in_channel")
	waitFor(t, 30*time.Second, "the undelivered reply counted", func() bool {
		_, body := httpGet(t, p.URL+"/metrics")
		return strings.Contains(body, `pinplan_replies_undelivered_total{platform="slack"} 1`)
	})
	time.Sleep(3 * time.Second) // any retry would come within the first backoffs
	refused := 0
	for _, c := range r.slack.Calls("chat.postMessage") {
		if c.Error == "not_in_channel" {
			refused++
		}
	}
	if refused < 1 || refused > 2 {
		t.Errorf("the refused answer was attempted %d times, want at most twice", refused)
	}
	var view threadView
	getJSON(t, p.URL+"/api/threads/slack~T1~C1~"+thread, &view)
	shown := false
	for _, m := range view.Messages {
		shown = shown || strings.Contains(m.Text, "Not delivered to slack")
	}
	if !shown {
		t.Errorf("the console does not show the undelivered answer: %+v", view.Messages)
	}
}
