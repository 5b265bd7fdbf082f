package slack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack/slackevents"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/internal/inboxtest"
	"github.com/pinplan/pinplan/todo"
)

func eventAdapter(t *testing.T) (*Adapter, *fakeslack.Server, *inboxtest.Inbox, *inboxtest.Dedupe) {
	t.Helper()
	fake := &fakeslack.Server{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	rec, dd := &inboxtest.Inbox{}, &inboxtest.Dedupe{}
	a := New(Options{BotToken: "xoxb-t", APIURL: srv.URL + "/api/", Dedupe: dd})
	if err := a.Start(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	return a, fake, rec, dd
}

// push routes an Events API callback as the HTTP and Socket Mode paths do.
func push(t *testing.T, a *Adapter, fake *fakeslack.Server, id string, ev map[string]any) {
	t.Helper()
	api, err := slackevents.ParseEvent(json.RawMessage(fake.CallbackBody(id, ev)), slackevents.OptionNoVerifyToken())
	if err != nil {
		t.Fatal(err)
	}
	a.route(context.Background(), api, func() {})
}

func TestOnlyTheBotMentionIsStripped(t *testing.T) {
	a, fake, rec, _ := eventAdapter(t)
	fake.AddUser("U777", "Rita")
	bot := a.one.bot()
	push(t, a, fake, "Ev1", map[string]any{"type": "app_mention", "user": "U1", "channel": "C1", "ts": "1.1",
		"text": "<@" + bot + "> ask <@U777> about the release, and <@U888|bob> too, not <@U999>"})
	a.queue.Wait(context.Background())
	want := "ask @Rita about the release, and @bob too, not <@U999>"
	if got := rec.Texts(); len(got) != 1 || got[0] != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestUnrelatedMessagesCostNoWrite(t *testing.T) {
	a, fake, rec, dd := eventAdapter(t)
	for i := range 1000 {
		ev := map[string]any{"type": "message", "user": "U1", "channel": "C1", "ts": "2." + string(rune('a'+i%26)), "text": "chatter"}
		if i%2 == 1 {
			ev["thread_ts"] = "1.0" // a thread the bot is not part of
		}
		push(t, a, fake, "Ev"+strings.Repeat("x", i%7)+string(rune('A'+i%26)), ev)
	}
	// A mention afterwards proves the events above had their chance.
	push(t, a, fake, "EvMention", map[string]any{"type": "app_mention", "user": "U1", "channel": "C1", "ts": "3.1", "text": "<@" + a.one.bot() + "> hi"})
	a.queue.Wait(context.Background())
	if got := rec.Texts(); len(got) != 1 || got[0] != "hi" {
		t.Fatalf("handled %q, want only the mention", got)
	}
	// The mention is recorded where it is queued, with its event key.
	if w := dd.Writes(); w != 0 {
		t.Errorf("%d dedupe writes for 1,000 unrelated messages and one mention, want 0", w)
	}
	if ev := rec.Incoming()[0].Event; ev != "slack/msg/C1/3.1" {
		t.Errorf("the mention's event key = %q, want slack/msg/C1/3.1", ev)
	}
}

func TestThreadMessagesHandledInOrder(t *testing.T) {
	a, fake, rec, _ := eventAdapter(t)
	// The follow-ups arrive before the mention's session exists: they
	// must wait for it in the thread's order, not be dropped.
	push(t, a, fake, "EvM", map[string]any{"type": "app_mention", "user": "U1", "channel": "C1", "ts": "5.0", "text": "<@" + a.one.bot() + "> task"})
	for i := range 20 {
		push(t, a, fake, "EvF"+string(rune('a'+i)), map[string]any{"type": "message", "user": "U1", "channel": "C1", "ts": "5." + string(rune('a'+i)), "thread_ts": "5.0", "text": "follow-up " + string(rune('a'+i))})
	}
	a.queue.Wait(context.Background())
	got := rec.Texts()
	if len(got) != 21 {
		t.Fatalf("handled %d messages, want 21: %q", len(got), got)
	}
	for i := range 20 {
		if want := "follow-up " + string(rune('a'+i)); got[i+1] != want {
			t.Fatalf("message %d is %q, want %q", i+1, got[i+1], want)
		}
	}
}

// TestRepliesBeforeTheirMentionWait: replies handled before the mention
// of their thread (Slack sent them to this connection, the mention to
// another, or out of order) are handed on as follow-ups, not dropped:
// the handler keeps them for the session the mention makes, and they
// follow it in the order they were sent. A reply in a thread never
// mentioned stays waiting (and expires there).
func TestRepliesBeforeTheirMentionWait(t *testing.T) {
	a, fake, rec, _ := eventAdapter(t)
	reply := func(id, thread, ts, text string) {
		push(t, a, fake, id, map[string]any{"type": "message", "user": "U1", "channel": "C1", "ts": ts, "thread_ts": thread, "text": text})
	}
	reply("EvR2", "6.000100", "6.000300", "second reply")
	reply("EvR1", "6.000100", "6.000200", "first reply")
	reply("EvStray", "7.000100", "7.000200", "chatter")
	a.queue.Wait(context.Background())
	if got := rec.Texts(); len(got) != 0 {
		t.Fatalf("handled %q before any session", got)
	}
	if n := len(rec.Held()); n != 3 {
		t.Fatalf("held %q, want the three replies", rec.Held())
	}
	push(t, a, fake, "EvM", map[string]any{"type": "app_mention", "user": "U1", "channel": "C1", "ts": "6.000100", "text": "<@" + a.one.bot() + "> the task"})
	a.queue.Wait(context.Background())
	if got, want := strings.Join(rec.Texts(), "|"), "the task|first reply|second reply"; got != want {
		t.Errorf("handled %q, want %q", got, want)
	}
	for _, in := range rec.Incoming()[1:] {
		if !in.FollowUp || in.Event != "slack/msg/C1/"+in.MessageID {
			t.Errorf("reply %+v: want a follow-up with its event key", in)
		}
	}
	if got := rec.Held(); len(got) != 1 || got[0] != "chatter" {
		t.Errorf("held %q, want the reply in the thread never mentioned", got)
	}
}

func TestNativeBlocksFallBackPerMessage(t *testing.T) {
	a, fake := testAdapter(t, true)
	fake.Fail("chat.postMessage", "invalid_arguments") // not invalid_blocks
	p := chat.Plan{Revision: 1, Updated: time.Now(), Items: []todo.Item{{Content: "a", Status: todo.Pending}}}
	th1 := chat.Thread{Platform: "slack", Key: "slack/T1/C1/1.1", Channel: "C1", ThreadID: "1.1"}
	if _, err := a.PostPlan(context.Background(), th1, p); err != nil {
		t.Fatalf("post with a refused native block: %v", err)
	}
	th2 := chat.Thread{Platform: "slack", Key: "slack/T1/C1/2.1", Channel: "C1", ThreadID: "2.1"}
	if _, err := a.PostPlan(context.Background(), th2, p); err != nil {
		t.Fatal(err)
	}
	calls := fake.Calls("chat.postMessage")
	if len(calls) != 3 {
		t.Fatalf("got %d posts, want 3 (native refused, standard, native for the next thread)", len(calls))
	}
	native := func(c fakeslack.Call) bool { return strings.Contains(c.Params["blocks"], `"type":"plan"`) }
	if !native(calls[0]) || native(calls[1]) || !native(calls[2]) {
		t.Errorf("native per post: %t %t %t, want true false true", native(calls[0]), native(calls[1]), native(calls[2]))
	}
}

func TestHistoryQuotesEarlierThreadMessages(t *testing.T) {
	a, fake, _, _ := eventAdapter(t)
	fake.AddUser("U7", "Rita")
	// Earlier messages of a thread, stored in the fake as Slack has them.
	for _, ev := range []map[string]any{
		{"type": "message", "user": "U7", "channel": "C1", "ts": "9.000001", "text": "the release is friday"},
		{"type": "message", "user": "U7", "channel": "C1", "ts": "9.000002", "thread_ts": "9.000001", "text": "and the notes are late"},
		{"type": "message", "user": "U1", "channel": "C1", "ts": "9.000003", "thread_ts": "9.000001", "text": "<@" + a.one.bot() + "> sum it up"},
	} {
		fake.CallbackBody("Ev"+ev["ts"].(string), ev)
	}
	th := chat.Thread{Platform: "slack", Key: Key("T1", "C1", "9.000001"), Channel: "C1", ThreadID: "9.000001"}
	got, err := a.History(context.Background(), th, "9.000003", 30)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Author != "Rita" || got[0].Text != "the release is friday" || got[1].Text != "and the notes are late" {
		t.Errorf("history = %+v, want the two earlier messages, oldest first, by name", got)
	}
	if got, err := a.History(context.Background(), chat.Thread{Channel: "C1", ThreadID: "9.000003"}, "9.000003", 30); err != nil || len(got) != 0 {
		t.Errorf("a top-level mention's history = %+v, %v; want none", got, err)
	}
}

// TestStrayRepliesKeepNoAuthors: a reply in a thread with no session
// (channel chatter the bot only holds a minute for a mention that may
// come) records no author: such records would fill the adapter's table
// and clear the live sessions' ones.
func TestStrayRepliesKeepNoAuthors(t *testing.T) {
	a, fake, _, _ := eventAdapter(t)
	push(t, a, fake, "EvM", map[string]any{"type": "app_mention", "user": "U1", "channel": "C1", "ts": "8.000100", "text": "<@" + a.one.bot() + "> the task"})
	for i := range 5 {
		ts := fmt.Sprintf("9.00010%d", i)
		push(t, a, fake, "EvS"+ts, map[string]any{"type": "message", "user": "U2", "channel": "C1", "ts": ts + "1", "thread_ts": ts, "text": "chatter"})
	}
	a.queue.Wait(context.Background())
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.authors) != 1 || a.nAuthors != 1 {
		t.Errorf("authors kept for %d threads (%d entries), want the mentioned thread's only", len(a.authors), a.nAuthors)
	}
}
