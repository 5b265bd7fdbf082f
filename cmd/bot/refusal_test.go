package main

import (
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/internal/fakediscord"
)

// TestSlackTextRefusalsArePrivate: someone else's text stop and reset in
// a thread with a running turn are refused with ephemeral messages to
// that person, naming the requester as a mention; nothing is said in the
// thread about them, and the turn goes on to its answer.
func TestSlackTextRefusalsArePrivate(t *testing.T) {
	t.Parallel()
	r := newSlackRig(t, 2, 300*time.Millisecond, true)
	r.slack.AddUser("U1", "ann")
	r.slack.AddUser("U2", "bob")
	p := r.start(t)
	defer p.stop(t)
	thread := "1700070000.000100"
	if _, err := r.slack.Push("EvStart", mention("C1", thread, "plan the release")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the plan message", func() bool { return len(planMessages(r.slack, "C1")) > 0 })
	for i, cmd := range []string{"stop", "reset"} {
		ts := "1700070001.00010" + string(rune('1'+i))
		ev := map[string]any{"type": "message", "user": "U2", "text": cmd, "ts": ts, "thread_ts": thread, "channel": "C1", "event_ts": ts}
		if _, err := r.slack.Push("EvBob"+cmd, ev); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 20*time.Second, "bob's two private refusals", func() bool {
		n := 0
		for _, m := range r.slack.Ephemerals("C1") {
			if m.Recipient == "U2" && m.ThreadTS == thread && strings.Contains(m.Text, "Only <@U1>") {
				n++
			}
		}
		return n == 2
	})
	waitFor(t, 30*time.Second, "the answer", func() bool {
		for _, m := range r.slack.Messages("C1") {
			if strings.Contains(m.Text, "All done") {
				return true
			}
		}
		return false
	})
	for _, m := range r.slack.Messages("C1") {
		if strings.Contains(m.Text, "Only") || strings.Contains(m.Text, "&lt;@") {
			t.Errorf("said in the thread: %q", m.Text)
		}
	}
	for _, m := range planMessages(r.slack, "C1") {
		if strings.Contains(m.Blocks, "stopped") {
			t.Errorf("bob's stop stopped the turn: %s", m.Blocks)
		}
	}
	if v := r.slack.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestDiscordTextRefusalsArePrivate: on Discord, where a message outside
// an interaction cannot be ephemeral, someone else's text stop and reset
// are refused in a direct message to that person, naming the channel;
// the channel hears nothing of them and the turn goes on.
func TestDiscordTextRefusalsArePrivate(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 2, 300*time.Millisecond)
	p := r.start(t)
	defer p.stop(t)
	r.dc.UserMessage("C1", "111", "plan the release", true)
	waitFor(t, 20*time.Second, "the plan message", func() bool { return len(discordPlans(r.dc, "C1")) > 0 })
	r.dc.UserMessage("C1", "222", "stop", true)
	r.dc.UserMessage("C1", "222", "reset", true)
	waitFor(t, 20*time.Second, "the two refusals in 222's direct messages", func() bool {
		n := 0
		for _, m := range r.dc.DMs("222") {
			if strings.Contains(m.Content, "<#C1>") && strings.Contains(m.Content, "Only <@111>") {
				n++
			}
		}
		return n == 2
	})
	waitDiscordReply(t, r.dc, "C1", "All done")
	for _, m := range r.dc.Messages("C1") {
		if m.AuthorID == fakediscord.BotID && strings.Contains(m.Content, "Only") {
			t.Errorf("said in the channel: %q", m.Content)
		}
	}
	if got := r.dc.DMs("111"); len(got) != 0 {
		t.Errorf("the requester got direct messages: %+v", got)
	}
}
