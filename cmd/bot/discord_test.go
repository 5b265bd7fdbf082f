package main

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/todo"
)

type discordRig struct {
	dc    *fakediscord.Server
	model *fakeopenai.Server
	env   map[string]string
}

func newDiscordRig(t *testing.T, revisions int, delay time.Duration) *discordRig {
	t.Helper()
	r := &discordRig{dc: &fakediscord.Server{HeartbeatInterval: time.Second}}
	r.dc.AddChannel("C1", 0, "G1")
	r.dc.AddChannel("C2", 0, "G1")
	script := fakeopenai.Script(planScript(revisions, "All done. See the plan above."))
	r.model = &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		time.Sleep(delay)
		return script(req)
	}}
	ds := httptest.NewServer(r.dc)
	t.Cleanup(ds.Close)
	ms := httptest.NewServer(r.model)
	t.Cleanup(ms.Close)
	r.env = map[string]string{
		"PINPLAN_DB": filepath.Join(t.TempDir(), "discord.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"OPENAI_BASE_URL": ms.URL + "/v1", "OPENAI_API_KEY": "sk-test",
		"DISCORD_BOT_TOKEN": "OTAwMDAwMDAwMDAwMDAwMDAx.fake.token", "DISCORD_API_URL": ds.URL,
	}
	return r
}

func (r *discordRig) start(t *testing.T) *botProc {
	t.Helper()
	p := startBot(t, r.env, botBinary)
	deadline := time.Now().Add(15 * time.Second)
	for r.dc.Connected() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no gateway connection; calls %+v\nstdout:\n%s\nstderr:\n%s", r.dc.Calls(""), p.stdout, p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

func embedOf(m fakediscord.Message) string {
	var b strings.Builder
	for _, e := range m.Embeds {
		for _, k := range []string{"title", "description"} {
			if s, ok := e[k].(string); ok {
				b.WriteString(s + "\n")
			}
		}
		if f, ok := e["footer"].(map[string]any); ok {
			b.WriteString(f["text"].(string))
		}
	}
	return b.String()
}

// planText is what a plan message shows: its embed's title, description
// and footer, or a Components V2 message's text displays.
func planText(m fakediscord.Message) string {
	if m.IsComponentsV2() {
		return strings.Join(m.TextDisplays(), "\n")
	}
	return embedOf(m)
}

// bodyText is the plan text a post or edit of a plan sent.
func bodyText(body map[string]any) string {
	m := fakediscord.Message{}
	if f, ok := body["flags"].(float64); ok {
		m.Flags = int(f)
	}
	list, _ := body["embeds"].([]any)
	for _, e := range list {
		m.Embeds = append(m.Embeds, e.(map[string]any))
	}
	cs, _ := body["components"].([]any)
	for _, c := range cs {
		m.Components = append(m.Components, c.(map[string]any))
	}
	return planText(m)
}

// discordPlans is the channel's plan messages (and approval cards):
// embeds, or Components V2.
func discordPlans(s *fakediscord.Server, channel string) []fakediscord.Message {
	var out []fakediscord.Message
	for _, m := range s.Messages(channel) {
		if len(m.Embeds) > 0 || m.IsComponentsV2() {
			out = append(out, m)
		}
	}
	return out
}

func waitDiscordReply(t *testing.T, s *fakediscord.Server, channel, text string) fakediscord.Message {
	t.Helper()
	var got fakediscord.Message
	waitFor(t, 60*time.Second, "the reply in "+channel, func() bool {
		for _, m := range s.Messages(channel) {
			if m.AuthorID == fakediscord.BotID && len(m.Embeds) == 0 && strings.Contains(m.Content, text) {
				got = m
				return true
			}
		}
		return false
	})
	return got
}

func okDiscord(s *fakediscord.Server, match string) []fakediscord.Call {
	var out []fakediscord.Call
	for _, c := range s.Calls(match) {
		if c.Status < 300 {
			out = append(out, c)
		}
	}
	return out
}

func TestDiscordMention(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 5, 40*time.Millisecond)
	p := r.start(t)
	defer p.stop(t)
	r.dc.BotMessage("C1", "bots are ignored")
	trigger := r.dc.UserMessage("C1", "111", "plan the release", true)
	reply := waitDiscordReply(t, r.dc, "C1", "All done.")
	if reply.Reference != trigger {
		t.Errorf("reply references %q, want the triggering message %s", reply.Reference, trigger)
	}
	plans := discordPlans(r.dc, "C1")
	if len(plans) != 1 {
		t.Fatalf("plan messages %d, want 1", len(plans))
	}
	pins := okDiscord(r.dc, "PUT channels/C1/messages/pins/")
	if len(pins) != 1 || !strings.HasSuffix(pins[0].Path, plans[0].ID) {
		t.Errorf("pins %+v, want one on %s", pins, plans[0].ID)
	}
	if old := r.dc.Calls("channels/C1/pins/"); len(old) != 0 {
		t.Errorf("the deprecated pins route was used: %+v", old)
	}
	waitFor(t, 10*time.Second, "the final footer", func() bool {
		return strings.Contains(planText(discordPlans(r.dc, "C1")[0]), "revision 5 · done")
	})
	if e := planText(discordPlans(r.dc, "C1")[0]); !strings.Contains(e, "Plan · 3/3 done") || !strings.Contains(e, "~~") {
		t.Errorf("final plan: %s", e)
	}
	edits := okDiscord(r.dc, "PATCH channels/C1/messages/"+plans[0].ID)
	// Revisions come faster than the channel's edits may (DESIGN §6):
	// intermediate ones are skipped, never applied out of order, and the
	// last edit shows the last revision.
	if revs := editRevisions(edits); len(revs) == 0 || !slices.IsSorted(revs) || revs[len(revs)-1] != 5 {
		t.Errorf("edits showed revisions %v; want them in order, ending on 5", revs)
	}
	if r.dc.Typing("C1") == 0 {
		t.Error("no typing indicator")
	}
	// Discord's "pinned a message" notice was removed.
	for _, m := range r.dc.Messages("C1") {
		if m.Type == 6 {
			t.Error("the pin notice is still in the channel")
		}
	}
	for _, c := range r.dc.Calls("POST channels/C1/messages") {
		am, _ := c.Body["allowed_mentions"].(map[string]any)
		if parse, ok := am["parse"].([]any); !ok || len(parse) != 0 {
			t.Errorf("a message may ping: allowed_mentions %v", c.Body["allowed_mentions"])
		}
	}
	if n := len(r.model.Requests()); n != 8 {
		t.Errorf("model requests %d, want 8 (the bot message started nothing)", n)
	}
}

func TestDiscordThreadPerTask(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 2, 0)
	r.env["PINPLAN_DISCORD_THREAD_PER_TASK"] = "true"
	p := r.start(t)
	defer p.stop(t)
	// A right-to-left override in the task must not reach the thread's
	// name (DESIGN §16).
	trigger := r.dc.UserMessage("C1", "111", "write the \u202echangelog", true)
	var thread string
	waitFor(t, 15*time.Second, "the thread", func() bool {
		calls := okDiscord(r.dc, "POST channels/C1/messages/"+trigger+"/threads")
		if len(calls) == 1 {
			for _, c := range r.dc.Calls("messages") {
				if parts := strings.Split(c.Path, "/"); c.Method == "POST" && len(parts) == 3 && parts[1] != "C1" {
					thread = parts[1]
				}
			}
		}
		return thread != ""
	})
	for _, c := range okDiscord(r.dc, "POST channels/C1/messages/"+trigger+"/threads") {
		if name, _ := c.Body["name"].(string); name != "write the changelog" {
			t.Errorf("thread name %q, want the task without its bidi control", name)
		}
	}
	waitDiscordReply(t, r.dc, thread, "All done.")
	if len(discordPlans(r.dc, thread)) != 1 || len(discordPlans(r.dc, "C1")) != 0 {
		t.Error("the plan should live in the thread only")
	}
	for _, m := range r.dc.Messages("C1") {
		if m.AuthorID == fakediscord.BotID && (m.Type == 0 || m.Type == 19) {
			t.Errorf("the bot wrote in the parent channel: %+v", m)
		}
	}
	// A follow-up in the thread without a mention reaches the session.
	r.dc.UserMessage(thread, "111", "add the date", false)
	waitFor(t, 30*time.Second, "the follow-up", func() bool {
		for _, req := range r.model.Requests() {
			if last := req.Messages[len(req.Messages)-1]; last.Role == "user" && strings.Contains(last.Content, "add the date") {
				return true
			}
		}
		return false
	})
}

func TestDiscordKillResumeAndReconnect(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 6, 250*time.Millisecond)
	p := r.start(t)
	r.dc.UserMessage("C1", "111", "survive a crash", true)
	waitFor(t, 30*time.Second, "the plan to be pinned and edited", func() bool {
		return len(okDiscord(r.dc, "PUT channels/C1/messages/pins/")) == 1 && len(okDiscord(r.dc, "PATCH channels/C1/messages/")) >= 1
	})
	p.kill()
	p = r.start(t)
	defer p.stop(t)
	waitDiscordReply(t, r.dc, "C1", "All done.")
	waitFor(t, 10*time.Second, "the final footer", func() bool {
		pl := discordPlans(r.dc, "C1")
		return len(pl) == 1 && strings.Contains(planText(pl[0]), "revision 6 · done")
	})
	if n := len(okDiscord(r.dc, "PUT channels/C1/messages/pins/")); n != 1 {
		t.Errorf("pins %d, want 1", n)
	}
	resumed := false
	for _, c := range okDiscord(r.dc, "PATCH channels/C1/messages/") {
		if strings.Contains(bodyText(c.Body), "resumed after restart") {
			resumed = true
		}
	}
	if !resumed {
		t.Error("no edit said resumed after restart")
	}

	// Gateway trouble: op 7 and a dropped connection. Messages sent while
	// the bot is away are replayed on resume; none runs twice.
	before := len(r.model.Requests())
	r.dc.Reconnect()
	r.dc.UserMessage("C2", "111", "sent during op 7", true)
	waitFor(t, 15*time.Second, "the resume after op 7", func() bool { _, res := r.dc.Sessions(); return res >= 1 && r.dc.Connected() > 0 })
	waitDiscordReply(t, r.dc, "C2", "All done.")
	r.dc.Drop()
	r.dc.UserMessage("C1", "111", "sent while dropped", true)
	waitFor(t, 20*time.Second, "the resume after the drop", func() bool { _, res := r.dc.Sessions(); return res >= 2 && r.dc.Connected() > 0 })
	waitFor(t, 30*time.Second, "the message sent while dropped", func() bool {
		for _, req := range r.model.Requests()[before:] {
			if strings.Contains(req.Messages[len(req.Messages)-1].Content, "sent while dropped") {
				return true
			}
		}
		return false
	})
	// A later message in the same channel is handled after any replayed
	// copy of the one above, so duplicates would show by then.
	r.dc.UserMessage("C1", "111", "after the drop", true)
	waitFor(t, 30*time.Second, "the message after the drop", func() bool {
		for _, req := range r.model.Requests()[before:] {
			if strings.Contains(req.Messages[len(req.Messages)-1].Content, "after the drop") {
				return true
			}
		}
		return false
	})
	counts := map[string]int{}
	for _, req := range r.model.Requests()[before:] {
		if last := req.Messages[len(req.Messages)-1]; last.Role == "user" {
			counts[last.Content]++
		}
	}
	for text, n := range counts {
		if n != 1 {
			t.Errorf("%q reached the model %d times as a new message", text, n)
		}
	}
}

func TestDiscordRateLimitedBurst(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		n       int
		per     time.Duration
		want429 bool
	}{
		{"discord-5-per-5s", 5, 5 * time.Second, false},
		{"stricter", 2, 3 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newDiscordRig(t, 60, 0)
			r.env["PINPLAN_MAX_ROUNDS"] = "200"
			r.dc.LimitEdits(tt.n, tt.per)
			if tt.want429 {
				// discordgo waits out the announced bucket by itself; a
				// shared limit the headers did not announce still answers
				// 429, and its retry_after must be honoured.
				r.dc.FailHTTP("PATCH message", 429, 3)
			}
			p := r.start(t)
			defer p.stop(t)
			r.dc.UserMessage("C1", "111", "burst", true)
			waitDiscordReply(t, r.dc, "C1", "All done.")
			waitFor(t, 60*time.Second, "the last revision", func() bool {
				pl := discordPlans(r.dc, "C1")
				return len(pl) == 1 && strings.Contains(planText(pl[0]), "revision 60 · done")
			})
			if v := r.dc.Violations(); len(v) > 0 {
				t.Errorf("retry_after ignored: %v", v)
			}
			limited := 0
			for _, c := range r.dc.Calls("PATCH channels/C1/messages/") {
				if c.Status == 429 {
					limited++
				}
			}
			if tt.want429 && limited == 0 {
				t.Error("the stricter fake never answered 429")
			}
			t.Logf("60 revisions: %d edits, %d answered 429", len(okDiscord(r.dc, "PATCH channels/C1/messages/")), limited)
		})
	}
}

// TestDiscordEditErrorsRepost: a plan message Discord no longer knows
// (10008) is replaced. 30046 is temporary and backed off first (a minute,
// doubling), which chat's TestEditLaterBacksOffBeforeReposting covers.
func TestDiscordEditErrorsRepost(t *testing.T) {
	t.Parallel()
	for _, code := range []int{10008} {
		t.Run(strings.TrimSpace(string(rune('0'+code/10000)))+"xxxx", func(t *testing.T) {
			r := newDiscordRig(t, 4, 150*time.Millisecond)
			p := r.start(t)
			defer p.stop(t)
			r.dc.UserMessage("C1", "111", "edit errors", true)
			var first string
			waitFor(t, 30*time.Second, "the first plan message", func() bool {
				pl := discordPlans(r.dc, "C1")
				if len(pl) == 1 && len(okDiscord(r.dc, "PUT channels/C1/messages/pins/")) == 1 {
					first = pl[0].ID
					return true
				}
				return false
			})
			status := 404
			if code == 30046 {
				status = 400
			}
			r.dc.Fail("PATCH message", status, code)
			waitDiscordReply(t, r.dc, "C1", "All done.")
			var second string
			waitFor(t, 15*time.Second, "the new plan message at the last revision", func() bool {
				for _, m := range discordPlans(r.dc, "C1") {
					if m.ID != first && strings.Contains(planText(m), "revision 4 · done") {
						second = m.ID
						return true
					}
				}
				return false
			})
			// The new message is pinned after its edits and the old one
			// unpinned last (DESIGN §6): wait for both.
			waitFor(t, 10*time.Second, "only the new message pinned", func() bool {
				pins := r.dc.Pinned("C1")
				return len(pins) == 1 && pins[0] == second && len(okDiscord(r.dc, "DELETE channels/C1/messages/pins/"+first)) > 0
			})
			if pins := r.dc.Pinned("C1"); len(pins) != 1 || pins[0] != second {
				t.Errorf("pinned %v, want only the new message %s", pins, second)
			}
			if len(okDiscord(r.dc, "DELETE channels/C1/messages/pins/"+first)) != 1 {
				t.Errorf("the old message %s was not unpinned", first)
			}
		})
	}
}

func TestDiscordDirectMessage(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 2, 0)
	r.dc.AddChannel("D1", 1, "")
	p := r.start(t)
	defer p.stop(t)
	trigger := r.dc.UserMessage("D1", "111", "remind me of the steps", false)
	reply := waitDiscordReply(t, r.dc, "D1", "All done.")
	if reply.Reference != trigger {
		t.Errorf("reply references %q, want %s", reply.Reference, trigger)
	}
	if len(discordPlans(r.dc, "D1")) != 1 {
		t.Error("no plan message in the DM")
	}
	// In a guild channel, a message without a mention starts nothing.
	before := len(r.model.Requests())
	r.dc.UserMessage("C2", "111", "just chatting", false)
	// A mention after it in the same channel is handled after it.
	r.dc.UserMessage("C2", "111", "now a task", true)
	waitDiscordReply(t, r.dc, "C2", "All done.")
	// It may be quoted as the channel's earlier conversation when the
	// mention starts the session, but never as a message of its own.
	for _, req := range r.model.Requests()[before:] {
		for _, m := range req.Messages {
			if strings.Contains(m.Content, "just chatting") && !strings.Contains(m.Content, "<thread_message") {
				t.Fatalf("an unmentioned channel message reached the model as a message: %q", m.Content)
			}
		}
	}
}

// TestDiscordQueuedPlanSurvivesKill: a second task in a channel gets a
// new plan message, whose post waits for the channel's pace behind the
// first task's edits (a burst of 3, then one per 1.25 s); the turn answers
// meanwhile and the process is killed before the post. After the restart
// the plan is posted and pinned once, on its last revision, beside the
// one answer.
func TestDiscordQueuedPlanSurvivesKill(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 1, 0)
	items := func(prefix string, n, done int) string {
		var it []todo.Item
		for i := range n {
			st := todo.Pending
			if i < done {
				st = todo.Completed
			}
			it = append(it, todo.Item{Content: fmt.Sprintf("%s step %d", prefix, i+1), Status: st})
		}
		return todo.Encode(it)
	}
	r.model.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		var task string
		rounds := 0
		for _, m := range req.Messages {
			switch {
			case m.Role == openai.ChatMessageRoleUser && strings.Contains(m.Content, "task "):
				task, rounds = m.Content[strings.Index(m.Content, "task ")+5:][:1], 0
			case m.Role == openai.ChatMessageRoleTool:
				rounds++
			}
		}
		if task == "A" && rounds < 3 {
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: todo.ToolName, Arguments: items("A", 3, rounds+1)}}}
		}
		if task == "B" && rounds < 1 {
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: todo.ToolName, Arguments: items("B", 2, 2)}}}
		}
		return fakeopenai.Reply{Content: "finished task " + task}
	}
	p := r.start(t)
	r.dc.UserMessage("C1", "111", "task A", true)
	waitDiscordReply(t, r.dc, "C1", "finished task A")
	r.dc.UserMessage("C1", "111", "task B", true)
	// Task B's turn ends (four requests for A, two for B) while its plan
	// waits for the channel's pace, and its answer waits for its plan
	// (DESIGN §6).
	waitFor(t, 30*time.Second, "task B's last model request", func() bool { return len(r.model.Requests()) >= 6 })
	time.Sleep(300 * time.Millisecond) // the last round commits
	plansOf := func(task string) []fakediscord.Message {
		var out []fakediscord.Message
		for _, m := range discordPlans(r.dc, "C1") {
			if strings.Contains(planText(m), task+" step 1") {
				out = append(out, m)
			}
		}
		return out
	}
	if n := len(plansOf("B")); n != 0 {
		t.Fatalf("task B's plan was posted (%d) before the kill: the test did not exercise a queued plan; calls %s", n, callList(r.dc.Calls("")))
	}
	p.kill()
	p = r.start(t)
	defer p.stop(t)
	waitFor(t, 30*time.Second, "task B's plan on its last revision", func() bool {
		pl := plansOf("B")
		return len(pl) == 1 && strings.Contains(planText(pl[0]), "Plan · 2/2 done")
	})
	// The pin is its own request after the post: wait for it, then make
	// sure it is the only one.
	b := plansOf("B")[0]
	waitFor(t, 10*time.Second, "task B's plan pinned", func() bool { return slices.Contains(r.dc.Pinned("C1"), b.ID) })
	// Task A's plan is unpinned last, after task B's is shown (DESIGN §6:
	// tidying up never holds up the new plan): wait for it.
	waitFor(t, 10*time.Second, "task A's plan unpinned", func() bool { return len(r.dc.Pinned("C1")) == 1 })
	if pinned := r.dc.Pinned("C1"); len(pinned) != 1 || pinned[0] != b.ID {
		t.Errorf("pinned %v, want only task B's plan %s", pinned, b.ID)
	}
	if n := len(plansOf("A")); n != 1 {
		t.Errorf("task A has %d plan messages, want 1", n)
	}
	if answer := waitDiscordReply(t, r.dc, "C1", "finished task B"); len(answer.ID) < len(b.ID) || len(answer.ID) == len(b.ID) && answer.ID < b.ID {
		t.Errorf("task B's answer %s is above its plan %s", answer.ID, b.ID)
	}
	for _, task := range []string{"A", "B"} {
		answers := 0
		for _, m := range r.dc.Messages("C1") {
			if m.AuthorID == fakediscord.BotID && len(m.Embeds) == 0 && m.Content == "finished task "+task {
				answers++
			}
		}
		if answers != 1 {
			t.Errorf("task %s: %d answers, want 1", task, answers)
		}
	}
}

// editRevisions returns the plan revision each edit showed, in order.
func editRevisions(calls []fakediscord.Call) []int {
	var revs []int
	for _, c := range calls {
		raw, _ := json.Marshal(c.Body)
		if m := revisionRE.FindSubmatch(raw); m != nil {
			n, _ := strconv.Atoi(string(m[1]))
			revs = append(revs, n)
		}
	}
	return revs
}

var revisionRE = regexp.MustCompile(`revision (\d+)`)

func callList(calls []fakediscord.Call) string {
	var b strings.Builder
	for _, c := range calls {
		fmt.Fprintf(&b, "\n  %s %s %d %s", c.Method, c.Path, c.Status, c.At.Format("15:04:05.000"))
	}
	return b.String()
}

// TestDiscordPlanCreatedBeforeKillIsNotPostedTwice: the plan message is
// created and the process killed before Discord's answer reaches it, so
// the board has no ref. The next process posts with the same nonce,
// gets the message back, brings it up to date and pins it: one plan
// message.
func TestDiscordPlanCreatedBeforeKillIsNotPostedTwice(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 1, 0)
	p := r.start(t)
	r.dc.DelayAnswer("POST messages", 10*time.Second, 1)
	r.dc.UserMessage("C1", "111", "plan once", true)
	waitFor(t, 30*time.Second, "the plan created and its response held", func() bool {
		return len(discordPlans(r.dc, "C1")) == 1 && r.dc.HeldAnswers() > 0
	})
	p.kill()
	p = r.start(t)
	defer p.stop(t)
	waitFor(t, 60*time.Second, "the answer and a pinned plan", func() bool {
		pl := discordPlans(r.dc, "C1")
		return len(discordAnswers(r.dc, "C1")) > 0 && len(pl) > 0 && slices.Contains(r.dc.Pinned("C1"), pl[len(pl)-1].ID) &&
			strings.Contains(planText(pl[len(pl)-1]), "revision 1 · done")
	})
	if pl := discordPlans(r.dc, "C1"); len(pl) != 1 {
		t.Errorf("%d plan messages, want 1", len(pl))
	}
}

// TestDiscordReplyCreatedBeforeKillIsNotPostedTwice: Discord creates the
// answer but its response is held, and the bot is killed meanwhile, so
// the reply is still in the outbox. After the restart it is sent again,
// with the same nonce and enforce_nonce: Discord returns the message it
// has, and the thread shows the answer once. (Without the nonce the
// restart posted it a second time; the fake enforces nonces as Discord.)
func TestDiscordReplyCreatedBeforeKillIsNotPostedTwice(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 1, 0)
	p := r.start(t)
	// The typing indicator comes first, then the plan post; the answer is
	// the third message the bot creates: hold the answers of every post
	// from the plan's on, and kill once the answer's is held.
	r.dc.DelayAnswer("POST messages", 5*time.Second, 3)
	r.dc.UserMessage("C1", "111", "answer once", true)
	waitFor(t, 30*time.Second, "the answer created and its response held", func() bool {
		return len(discordAnswers(r.dc, "C1")) == 1 && r.dc.HeldAnswers() > 0
	})
	p.kill()
	p = r.start(t)
	defer p.stop(t)
	waitFor(t, 30*time.Second, "the outbox to send the answer again", func() bool {
		n := 0
		for _, c := range r.dc.Calls("POST channels/C1/messages") {
			if s, _ := c.Body["content"].(string); strings.Contains(s, "All done.") {
				n++
			}
		}
		return n >= 2
	})
	time.Sleep(500 * time.Millisecond)
	if n := len(discordAnswers(r.dc, "C1")); n != 1 {
		t.Errorf("the answer is in the thread %d times, want once", n)
	}
	// The plan's post had its answer held too: the restart finds the
	// message it created (the nonce) instead of posting a second one.
	if pl := discordPlans(r.dc, "C1"); len(pl) != 1 {
		t.Errorf("%d plan messages, want 1", len(pl))
	}
}
