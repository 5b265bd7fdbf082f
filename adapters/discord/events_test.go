package discord

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/inboxtest"
)

func gatewayRig(t *testing.T) (*Adapter, *fakediscord.Server, *inboxtest.Inbox, *inboxtest.Marks) {
	t.Helper()
	fake := &fakediscord.Server{HeartbeatInterval: time.Second}
	fake.AddChannel("C1", 0, "G1")
	fake.AddChannel("T1", 11, "G1")
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	rec, marks := &inboxtest.Inbox{}, &inboxtest.Marks{}
	a, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", APIURL: srv.URL, Marks: marks})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.Start(ctx, rec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); a.Close() })
	return a, fake, rec, marks
}

func waitTexts(t *testing.T, rec *inboxtest.Inbox, n int) []string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := rec.Texts()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("handled %d messages, want %d: %q", len(got), n, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFollowUpsAfterMentionKeepOrder(t *testing.T) {
	_, fake, rec, _ := gatewayRig(t)
	fake.UserMessage("T1", "111", "the task", true)
	for i := 1; i <= 4; i++ {
		fake.UserMessage("T1", "111", fmt.Sprintf("follow-up %d", i), false)
	}
	got := waitTexts(t, rec, 5)
	want := []string{"the task", "follow-up 1", "follow-up 2", "follow-up 3", "follow-up 4"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("handled %q, want %q", got, want)
	}
}

// TestThreadRepliesBeforeTheSessionWait: replies in a thread whose
// session is not known yet (its mention handed to another replica and
// not handled there yet) are handed on as follow-ups, not dropped, and
// cost no channel lookup: the thread's type came with the guild.
func TestThreadRepliesBeforeTheSessionWait(t *testing.T) {
	_, fake, rec, _ := gatewayRig(t)
	fake.UserMessage("T1", "111", "follow-up 1", false)
	fake.UserMessage("T1", "111", "follow-up 2", false)
	deadline := time.Now().Add(15 * time.Second)
	for len(rec.Held()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("held %q, handled %q; want both follow-ups held", rec.Held(), rec.Texts())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, in := range rec.Incoming() {
		t.Errorf("handled %q before its thread had a session", in.Text)
	}
	if calls := channelLookups(fake, "T1"); len(calls) != 0 {
		t.Errorf("%d lookups of a thread the gateway told of", len(calls))
	}
}

func TestUnrelatedMessagesCostNoWriteOrLookup(t *testing.T) {
	_, fake, rec, marks := gatewayRig(t)
	for i := range 1000 {
		fake.UserMessage("C1", "111", fmt.Sprintf("chatter %d", i), false)
	}
	fake.UserMessage("C1", "111", "a task", true) // handled after all of the above
	if got := waitTexts(t, rec, 1); len(got) != 1 || got[0] != "a task" {
		t.Fatalf("handled %q, want only the mention", got)
	}
	// The mention is recorded where it is queued, with its event key; the
	// only writes are its channel's read marks (the first, and the move
	// past it a second later at most).
	if saves := marks.Saves(); saves == 0 || saves > 2 {
		t.Errorf("%d mark saves for 1,000 unrelated messages and a mention, want 1 or 2", saves)
	}
	if in := rec.Incoming()[0]; in.Event != "discord/msg/"+in.MessageID {
		t.Errorf("the mention's event key = %q, want discord/msg/%s", in.Event, in.MessageID)
	}
	if calls := channelLookups(fake, "C1"); len(calls) != 0 {
		t.Errorf("%d channel lookups for messages without a session", len(calls))
	}
}

func TestManagedRoleMentionIsAMention(t *testing.T) {
	_, fake, rec, _ := gatewayRig(t)
	fake.UserRoleMessage("C1", "111", "summarise the week")
	if got := waitTexts(t, rec, 1); got[0] != "summarise the week" {
		t.Errorf("handled %q, want the task without the role mention", got[0])
	}
}

func TestReconnectFetchesMissedMessages(t *testing.T) {
	_, fake, rec, _ := gatewayRig(t)
	fake.UserMessage("T1", "111", "the task", true)
	waitTexts(t, rec, 1)
	fake.InvalidSession(false) // discordgo identifies anew: no replay
	fake.UserMessage("T1", "111", "sent in the gap", false)
	fake.UserMessage("T1", "111", "also in the gap", false)
	waitTexts(t, rec, 3)
	fake.UserMessage("T1", "111", "after the gap", false)
	got := waitTexts(t, rec, 4)
	want := []string{"the task", "sent in the gap", "also in the gap", "after the gap"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("handled %q, want %q (each once, in order)", got, want)
	}
}

func TestHistoryQuotesEarlierChannelMessages(t *testing.T) {
	a, fake, _, _ := gatewayRig(t)
	fake.UserMessage("T1", "111", "the release is friday", false)
	fake.BotMessage("T1", "a bot's chatter")
	fake.UserMessage("T1", "222", "and the notes are late", false)
	trigger := fake.UserMessage("T1", "111", "sum it up", true)
	got, err := a.History(context.Background(), chat.Thread{Platform: "discord", Key: Key("T1"), Channel: "T1"}, trigger, 30)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Text != "the release is friday" || got[1].Text != "and the notes are late" {
		t.Errorf("history = %+v, want the two earlier user messages, oldest first", got)
	}
}

// channelLookups are the GET /channels/{id} calls the fake answered for
// id (the fake records paths without /api/v9/).
func channelLookups(fake *fakediscord.Server, id string) []fakediscord.Call {
	var out []fakediscord.Call
	for _, c := range fake.Calls("GET channels/" + id) {
		if c.Path == "channels/"+id {
			out = append(out, c)
		}
	}
	return out
}
