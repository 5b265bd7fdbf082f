package main

import (
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// waitResponses waits for an interaction's callbacks and returns them.
func waitResponses(t *testing.T, s *fakediscord.Server, id string, n int) []fakediscord.Response {
	t.Helper()
	var got []fakediscord.Response
	waitFor(t, 10*time.Second, "the interaction's answer", func() bool {
		got = s.Responses(id)
		return len(got) >= n
	})
	for _, r := range got {
		if r.Status >= 300 || r.Latency > 3*time.Second {
			t.Errorf("interaction %s answered %d after %s: Discord wants a 2xx within 3 s", id, r.Status, r.Latency)
		}
	}
	return got
}

// TestDiscordSlashCommands (issue 30): pinplan registers /pinplan at
// start by a bulk overwrite, the same set again after a restart (the
// command keeps its id); /pinplan task: starts the channel's session,
// answered within 3 s with the task attributed, and the plan and answer
// follow; /pinplan stop by someone else while the turn runs is refused
// to them alone; /pinplan status is deferred, then lists the working
// channel; /pinplan stop by the requester stops it.
func TestDiscordSlashCommands(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 1, 0)
	release := make(chan struct{})
	answer := r.model.Respond
	r.model.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		if strings.Contains(req.Messages[len(req.Messages)-1].Content, "slow task") {
			select {
			case <-release:
			case <-time.After(30 * time.Second):
			}
		}
		return answer(req)
	}
	p := r.start(t)
	waitFor(t, 10*time.Second, "/pinplan registered", func() bool { return r.dc.Commands("global")["pinplan"] != nil })
	id := r.dc.Commands("global")["pinplan"]["id"]

	in, err := r.dc.Command("C1", "U1", "pinplan", "task", map[string]string{"task": "plan the release @everyone"})
	if err != nil {
		t.Fatal(err)
	}
	res := waitResponses(t, r.dc, in, 1)
	if res[0].Type != 4 || res[0].Data["flags"] != nil && int(res[0].Data["flags"].(float64))&64 != 0 {
		t.Errorf("the task was answered %+v, want a public message", res[0])
	}
	if c, _ := res[0].Data["content"].(string); !strings.Contains(c, "<@U1> asked pinplan") || !strings.Contains(c, "plan the release") {
		t.Errorf("the task's answer reads %q", c)
	}
	if am, _ := res[0].Data["allowed_mentions"].(map[string]any); am == nil || len(am["parse"].([]any)) != 0 {
		t.Errorf("the task's answer may ping: allowed_mentions %v", res[0].Data["allowed_mentions"])
	}
	waitDiscordReply(t, r.dc, "C1", "All done.")
	if len(discordPlans(r.dc, "C1")) != 1 {
		t.Errorf("%d plan messages in C1, want 1", len(discordPlans(r.dc, "C1")))
	}

	// A turn that works a while, in C2.
	if _, err := r.dc.Command("C2", "U1", "pinplan", "task", map[string]string{"task": "a slow task"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the slow task's request", func() bool {
		for _, req := range r.model.Requests() {
			if strings.Contains(req.Messages[len(req.Messages)-1].Content, "slow task") {
				return true
			}
		}
		return false
	})
	stop, err := r.dc.Command("C2", "U2", "pinplan", "stop", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res := waitResponses(t, r.dc, stop, 1); res[0].Type != 4 || int(res[0].Data["flags"].(float64))&64 == 0 {
		t.Errorf("someone else's stop was answered %+v, want a refusal only they see", res[0])
	}
	// Status lists what works here: in C2 the slow task; in C1 (done)
	// nothing, and never another channel's session.
	statusIn := func(channel string) string {
		t.Helper()
		status, err := r.dc.Command(channel, "U2", "pinplan", "status", nil)
		if err != nil {
			t.Fatal(err)
		}
		if res := waitResponses(t, r.dc, status, 1); res[0].Type != 5 {
			t.Errorf("status answered %+v, want deferred", res[0])
		}
		var listed string
		waitFor(t, 10*time.Second, "the status list in "+channel, func() bool {
			for _, m := range r.dc.Ephemerals(channel) {
				if m.Recipient == "U2" && m.Interaction == status && m.Content != "" {
					listed = m.Content
					return true
				}
			}
			return false
		})
		return listed
	}
	if listed := statusIn("C2"); !strings.Contains(listed, "<#C2>") || !strings.Contains(listed, "working") {
		t.Errorf("status in C2 lists %q: want C2 working", listed)
	}
	if listed := statusIn("C1"); strings.Contains(listed, "<#C2>") || !strings.Contains(listed, "Nothing is working") {
		t.Errorf("status in C1 lists %q: want nothing, and not C2's session", listed)
	}
	own, err := r.dc.Command("C2", "U1", "pinplan", "stop", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res := waitResponses(t, r.dc, own, 1); res[0].Type != 4 || !strings.Contains(res[0].Data["content"].(string), "Stopping") {
		t.Errorf("the requester's stop was answered %+v", res[0])
	}
	close(release)
	p.stop(t)

	// A restart registers the same set again: one command, same id.
	p = r.start(t)
	defer p.stop(t)
	waitFor(t, 10*time.Second, "the second registration", func() bool { return r.dc.Overwrites()["global"] == 2 })
	if got := r.dc.Commands("global"); len(got) != 1 || got["pinplan"]["id"] != id {
		t.Errorf("after a restart: commands %v, want /pinplan with id %v", got, id)
	}
	if v := r.dc.Violations(); len(v) > 0 {
		t.Errorf("Discord would have refused: %v", v)
	}
}

// TestDiscordTaskCommandStartsAThread: with PINPLAN_DISCORD_GUILD the
// command is registered for that server too (at once there); with
// thread-per-task /pinplan task: in a text channel starts a thread on
// its answer, where the plan and the answer go; /pinplan task: in that
// thread continues its session.
func TestDiscordTaskCommandStartsAThread(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 1, 0)
	r.env["PINPLAN_DISCORD_THREAD_PER_TASK"] = "true"
	r.env["PINPLAN_DISCORD_GUILD"] = "G1"
	p := r.start(t)
	defer p.stop(t)
	waitFor(t, 10*time.Second, "/pinplan registered for G1", func() bool { return r.dc.Commands("G1")["pinplan"] != nil })
	if r.dc.Commands("global")["pinplan"] == nil {
		t.Error("/pinplan was not registered globally too (DMs and other servers)")
	}
	in, err := r.dc.Command("C1", "U1", "pinplan", "task", map[string]string{"task": "write the changelog"})
	if err != nil {
		t.Fatal(err)
	}
	res := waitResponses(t, r.dc, in, 1)
	if res[0].Type != 4 {
		t.Fatalf("answered %+v", res[0])
	}
	var thread string
	defer func() {
		if t.Failed() {
			t.Logf("calls %+v\n%s", r.dc.Calls(""), p.stderr)
		}
	}()
	waitFor(t, 15*time.Second, "the thread", func() bool {
		for _, c := range r.dc.Calls("threads") {
			if c.Method == "POST" && c.Status < 300 && strings.HasPrefix(c.Path, "channels/C1/messages/") {
				for _, m := range r.dc.Calls("messages") {
					if parts := strings.Split(m.Path, "/"); m.Method == "POST" && len(parts) == 3 && parts[1] != "C1" {
						thread = parts[1]
					}
				}
			}
		}
		return thread != ""
	})
	waitDiscordReply(t, r.dc, thread, "All done.")
	if len(discordPlans(r.dc, thread)) != 1 || len(discordPlans(r.dc, "C1")) != 0 {
		t.Error("the plan should live in the thread only")
	}
	if _, err := r.dc.Command(thread, "U1", "pinplan", "task", map[string]string{"task": "add the date"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the thread's next turn", func() bool {
		for _, req := range r.model.Requests() {
			if last := req.Messages[len(req.Messages)-1]; strings.Contains(last.Content, "add the date") {
				return len(req.Messages) > 3 // the thread's history came with it
			}
		}
		return false
	})
}

// TestDiscordWithoutMessageContent: an application without the
// privileged Message Content intent (Discord closes its IDENTIFY with
// 4014) still connects, without the intent, and says at start what that
// means; mentions and /pinplan work; a follow-up in a thread without a
// mention, which Discord sends blank, is not answered as an empty
// message.
func TestDiscordWithoutMessageContent(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 1, 0)
	r.dc.DenyIntents = fakediscord.IntentMessageContent
	r.dc.AddChannel("T1", 11, "G1")
	p := r.start(t)
	defer p.stop(t)
	waitFor(t, 10*time.Second, "the intent warning", func() bool {
		return strings.Contains(p.stderr.String(), "Message Content intent is not enabled")
	})
	r.dc.UserMessage("T1", "U1", "start the report", true)
	waitDiscordReply(t, r.dc, "T1", "All done.")
	r.dc.UserMessage("T1", "U1", "and add the totals", false) // blank without the intent
	in, err := r.dc.Command("C1", "U1", "pinplan", "task", map[string]string{"task": "count the files"})
	if err != nil {
		t.Fatal(err)
	}
	waitResponses(t, r.dc, in, 1)
	waitDiscordReply(t, r.dc, "C1", "All done.")
	for _, m := range r.dc.Messages("T1") {
		if m.AuthorID == fakediscord.BotID && strings.Contains(m.Content, "empty") {
			t.Errorf("a blank follow-up was answered: %q", m.Content)
		}
	}
}
