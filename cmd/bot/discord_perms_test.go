package main

import (
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// privateAnswer waits for the interaction's one answer and returns its
// text when it went to the person alone; it fails the test when the
// answer was public.
func privateAnswer(t *testing.T, s *fakediscord.Server, channel, user, id string) string {
	t.Helper()
	res := waitResponses(t, s, id, 1)
	flags, _ := res[0].Data["flags"].(float64)
	if res[0].Type != 4 || int(flags)&64 == 0 {
		t.Errorf("interaction %s in %s answered type %d flags %d (%v), want a message only %s sees", id, channel, res[0].Type, int(flags), res[0].Data["content"], user)
		return ""
	}
	for _, m := range s.Ephemerals(channel) {
		if m.Interaction == id && m.Recipient == user {
			return m.Content
		}
	}
	t.Errorf("no ephemeral answer for %s in %s", user, channel)
	return ""
}

// TestDiscordTaskNeedsSendMessages (issue 40, 3): /pinplan task posts
// the task publicly for the person, so it is refused, to them alone,
// where they may not post: a read-only announcements channel (no Send
// Messages for @everyone), a thread where they lack Send Messages in
// Threads, and a channel where the bot itself may not post
// (app_permissions). Nothing of a refused task is posted or reaches the
// model. Where they may post, the quoted task's links are not unfurled.
func TestDiscordTaskNeedsSendMessages(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 1, 0)
	r.dc.AddChannel("ANN", 0, "G1")
	r.dc.SetOverwrite("ANN", "G1", 0, fakediscord.PermSendMessages)              // read-only for @everyone
	r.dc.SetOverwrite("ANN", "MOD", fakediscord.PermSendMessages, 0)             // a moderator posts there
	r.dc.SetOverwrite("ANN", fakediscord.BotID, fakediscord.PermSendMessages, 0) // and so does the bot (its role)
	r.dc.AddThread("T1", 11, "C2")
	r.dc.SetOverwrite("C2", "U8", 0, fakediscord.PermSendMessagesInThreads) // U8 may post in C2, not in its threads
	r.dc.AddChannel("C3", 0, "G1")
	r.dc.SetOverwrite("C3", fakediscord.BotID, 0, fakediscord.PermSendMessages) // the bot may not post in C3
	p := r.start(t)
	defer p.stop(t)
	defer func() {
		if t.Failed() {
			t.Logf("calls %+v\nstderr:\n%s", r.dc.Calls(""), p.stderr)
		}
	}()
	waitFor(t, 10*time.Second, "/pinplan registered", func() bool { return r.dc.Commands("global")["pinplan"] != nil })

	refused := []struct{ channel, user, task string }{
		{"ANN", "U9", "Free nitro for everyone: https://phish.example/claim"},
		{"T1", "U8", "Free nitro in the thread: https://phish.example/thread"},
		{"C3", "U1", "Free nitro where the bot is mute: https://phish.example/mute"},
	}
	for _, c := range refused {
		in, err := r.dc.Command(c.channel, c.user, "pinplan", "task", map[string]string{"task": c.task})
		if err != nil {
			t.Fatal(err)
		}
		if text := privateAnswer(t, r.dc, c.channel, c.user, in); !strings.Contains(text, "Send Messages") {
			t.Errorf("the refusal in %s reads %q: want it to name the missing permission", c.channel, text)
		}
	}

	// A task where the person may post: public, its link not unfurled,
	// and answered; it comes after the refused ones, so they had their
	// chance to run.
	in, err := r.dc.Command("ANN", "MOD", "pinplan", "task", map[string]string{"task": "summarise https://example.com/notes"})
	if err != nil {
		t.Fatal(err)
	}
	if res := waitResponses(t, r.dc, in, 1); res[0].Type != 4 {
		t.Fatalf("the moderator's task was answered %+v", res[0])
	}
	waitDiscordReply(t, r.dc, "ANN", "All done.")
	for _, m := range r.dc.Messages("ANN") {
		if m.Interaction == in {
			if links := m.Unfurls(); len(links) > 0 {
				t.Errorf("the quoted task %q unfurls %v", m.Content, links)
			}
		}
	}

	for _, ch := range []string{"ANN", "T1", "C3"} {
		for _, m := range r.dc.Messages(ch) {
			if strings.Contains(m.Content, "phish.example") || strings.Contains(m.Content, "Free nitro") {
				t.Errorf("a refused task was posted in %s: %q", ch, m.Content)
			}
		}
	}
	reached := map[string]bool{}
	for _, req := range r.model.Requests() {
		for _, m := range req.Messages {
			for _, c := range refused {
				if strings.Contains(m.Content, c.task) && !reached[c.task] {
					reached[c.task] = true
					t.Errorf("a refused task reached the model: %q", c.task)
				}
			}
		}
	}
	if v := r.dc.Violations(); len(v) > 0 {
		t.Errorf("Discord would have refused: %v", v)
	}
}

// TestDiscordStatusHidesPrivateThreads (issue 40, 4): /pinplan status in
// a channel lists its private threads' sessions only to the threads'
// members and to those with Manage Threads; a public thread's session is
// listed to everyone there.
func TestDiscordStatusHidesPrivateThreads(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 1, 0)
	r.dc.AddThread("P1", 12, "C1", "U1") // private: U1 and the bot
	r.dc.AddThread("T1", 11, "C1")
	r.dc.SetPermissions("G1", "LEAD", fakediscord.DefaultPermissions|fakediscord.PermManageThreads)
	release := make(chan struct{})
	answer := r.model.Respond
	r.model.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		if last := req.Messages[len(req.Messages)-1].Content; strings.Contains(last, "confidential") || strings.Contains(last, "public notes") {
			select {
			case <-release:
			case <-time.After(60 * time.Second):
			}
		}
		return answer(req)
	}
	p := r.start(t)
	defer p.stop(t)
	defer close(release) // before the bot stops
	defer func() {
		if t.Failed() {
			t.Logf("calls %+v\nstderr:\n%s", r.dc.Calls(""), p.stderr)
		}
	}()
	waitFor(t, 10*time.Second, "/pinplan registered", func() bool { return r.dc.Commands("global")["pinplan"] != nil })

	for _, c := range []struct{ channel, task string }{
		{"P1", "draft the layoff list for the Berlin office (confidential)"},
		{"T1", "collect the public notes"},
	} {
		in, err := r.dc.Command(c.channel, "U1", "pinplan", "task", map[string]string{"task": c.task})
		if err != nil {
			t.Fatal(err)
		}
		waitResponses(t, r.dc, in, 1)
	}
	waitFor(t, 20*time.Second, "both tasks working", func() bool {
		seen := 0
		for _, req := range r.model.Requests() {
			last := req.Messages[len(req.Messages)-1].Content
			if strings.Contains(last, "confidential") || strings.Contains(last, "public notes") {
				seen++
			}
		}
		return seen >= 2
	})

	status := func(user string) string {
		t.Helper()
		in, err := r.dc.Command("C1", user, "pinplan", "status", nil)
		if err != nil {
			t.Fatal(err)
		}
		waitResponses(t, r.dc, in, 1)
		var listed string
		waitFor(t, 10*time.Second, "the status list for "+user, func() bool {
			for _, m := range r.dc.Ephemerals("C1") {
				if m.Recipient == user && m.Interaction == in && m.Content != "" {
					listed = m.Content
					return true
				}
			}
			return false
		})
		return listed
	}
	for _, tt := range []struct {
		name, user string
		private    bool
	}{
		{"not a member", "U2", false},
		{"the private thread's member", "U1", true},
		{"Manage Threads", "LEAD", true},
	} {
		listed := status(tt.user)
		if !strings.Contains(listed, "<#T1>") {
			t.Errorf("%s: status lists %q, want the public thread", tt.name, listed)
		}
		if shown := strings.Contains(listed, "<#P1>") || strings.Contains(listed, "layoff"); shown != tt.private {
			t.Errorf("%s: status lists %q: private thread shown %v, want %v", tt.name, listed, shown, tt.private)
		}
	}
	if v := r.dc.Violations(); len(v) > 0 {
		t.Errorf("Discord would have refused: %v", v)
	}
}
