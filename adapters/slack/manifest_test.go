package slack

import (
	"bufio"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/todo"
)

// methodScopes are the bot scopes each Web API method the adapter calls
// needs (docs.slack.dev, each method's Facts).
var methodScopes = map[string][]string{
	"chat.postMessage":          {"chat:write"},
	"chat.update":               {"chat:write"},
	"chat.postEphemeral":        {"chat:write"},
	"chat.startStream":          {"chat:write"},
	"chat.appendStream":         {"chat:write"},
	"chat.stopStream":           {"chat:write"},
	"agents.sessions.setStatus": {"chat:write", "assistant:write"},
	"pins.add":                  {"pins:write"},
	"pins.remove":               {"pins:write"},
	"reactions.add":             {"reactions:write"},
	"reactions.remove":          {"reactions:write"},
	"users.info":                {"users:read"},
	"conversations.replies":     {"channels:history", "groups:history", "im:history", "mpim:history"},
}

// manifestLists reads slack-app-manifest.yaml: the YAML lists in it, by
// the last element of their key (bot, bot_events), and its text.
func manifestLists(t *testing.T) (lists map[string][]string, text string) {
	t.Helper()
	raw, err := os.ReadFile("../../slack-app-manifest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lists = map[string][]string{}
	key := ""
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
		case strings.HasPrefix(trimmed, "- ") && key != "":
			lists[key] = append(lists[key], strings.TrimSpace(strings.TrimPrefix(trimmed, "- ")))
		case strings.HasSuffix(trimmed, ":"):
			key = strings.TrimSuffix(trimmed, ":")
		default:
			key = ""
		}
	}
	return lists, string(raw)
}

// TestManifestDeclaresWhatTheAdapterUses: every Web API method the adapter
// calls (driven here through each of its operations, streaming and
// sessions included) has its scopes in the manifest, every event it
// handles is subscribed, and the app is declared an agent.
func TestManifestDeclaresWhatTheAdapterUses(t *testing.T) {
	lists, text := manifestLists(t)
	scopes, events := lists["bot"], lists["bot_events"]

	fake := &fakeslack.Server{}
	fake.AddUser("U2", "bob")
	r := newSessionRig(t, "xoxb-t", fake)
	ctx := context.Background()
	th := r.thread("C1", "1.1")
	p := chat.Plan{Revision: 1, Updated: time.Now(), Items: []todo.Item{{Content: "a", Status: todo.Pending}}}
	ref, _ := r.a.PostPlan(ctx, th, p)
	r.a.EditPlan(ctx, th, ref, p)
	r.a.Pin(ctx, th, ref, true)
	r.a.Pin(ctx, th, ref, false)
	card, _ := r.a.PostCard(ctx, th, chat.Card{ID: "c1", Tool: "t", Arguments: "{}"})
	r.a.EditCard(ctx, th, card, chat.Card{ID: "c1", Tool: "t", Arguments: "{}", Outcome: "Denied"})
	r.a.Reply(ctx, th, "1.1", "posted")
	r.a.ReplyPrivately(ctx, th, "U2", "only you")
	r.a.History(ctx, chat.Thread{Channel: "C1", ThreadID: "1.1"}, "1.2", 10)
	r.a.Working(ctx, th, "1.1", true)
	r.a.Working(ctx, th, "1.1", false)
	r.a.SetSessionStatus(ctx, th, chat.SessionProcessing, "task")
	r.a.displayName(ctx, "", "U2")
	push(t, r.a, fake, "EvStop", fake.StopSession("U2", "C1", "1.1"))
	r.a.queue.Wait(ctx)
	r.a.command(ctx, slack.SlashCommand{Command: "/pinplan", Text: "a task", UserID: "U2", ChannelID: "C1", TeamID: "T1", TriggerID: "t1"})
	r.a.queue.Wait(ctx)
	r.a.opts.Stream = true
	r.a.Reply(ctx, th, "", words(200))
	// An answer shown as written: started, appended to, stopped.
	r.a.noteAuthor(th.Key, "1.1", person{user: "U2", team: "T1"})
	answer := "first " + words(600) // over one message: the finish appends
	if _, err := appendAll(ctx, fake, r.a, th, "1.1", "live1", "first "); err != nil {
		t.Fatal(err)
	}
	if _, err := finishAll(ctx, fake, r.a, th, "1.1", "live1", answer, "interrupted"); err != nil {
		t.Fatal(err)
	}

	seen := map[string]bool{}
	for _, c := range fake.Calls("") {
		seen[c.Method] = true
	}
	for m := range seen {
		if m == "auth.test" {
			continue
		}
		need, ok := methodScopes[m]
		if !ok {
			t.Errorf("the adapter calls %s: add its scopes to methodScopes and the manifest", m)
		}
		for _, s := range need {
			if !slices.Contains(scopes, s) {
				t.Errorf("%s needs scope %s, missing from the manifest's bot scopes %q", m, s, scopes)
			}
		}
	}
	for m := range methodScopes {
		if !seen[m] {
			t.Errorf("methodScopes lists %s, which the operations above never called", m)
		}
	}
	for _, ev := range []string{"app_mention", "message.channels", "message.groups", "message.im", "message.mpim", "agent_session_stopped", "agent_session_title_changed"} {
		if !slices.Contains(events, ev) {
			t.Errorf("the adapter handles %s, missing from bot_events %q", ev, events)
		}
	}
	if !strings.Contains(text, "\n  agent_view:\n    agent_description: ") || len(lists["suggested_prompts"]) == 0 {
		t.Error("the manifest does not declare features.agent_view with a description and suggested prompts")
	}
	if !strings.Contains(text, "\n    - name: Give to pinplan\n      type: message\n      callback_id: "+shortcutID+"\n") {
		t.Errorf("the adapter answers the message shortcut %s: the manifest must declare it under shortcuts", shortcutID)
	}
	if !slices.Contains(scopes, "files:read") {
		t.Error("the adapter fetches attached files (url_private_download): the manifest needs files:read")
	}
	if !slices.Contains(lists["slash_commands"], "command: /pinplan") || !slices.Contains(scopes, "commands") {
		t.Errorf("the adapter answers /pinplan: the manifest must declare it under slash_commands (%q) with the commands scope", lists["slash_commands"])
	}
	if strings.Contains(text, "assistant_view") && !strings.Contains(text, "Replaces assistant_view") {
		t.Error("the manifest declares assistant_view, which Slack retires in February 2027")
	}
}
