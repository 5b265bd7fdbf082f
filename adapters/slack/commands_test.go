package slack

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/chat/chattest"
	"github.com/pinplan/pinplan/internal/fakeslack"
)

// TestCommandTaskIsPaced: the task a /pinplan command posts in a channel
// goes through the router's delivery step (Router.Post) and so through
// the channel's chat.postMessage budget like every post: with the budget
// spent by plan posts, it waits for the next slot instead of meeting
// Slack's limit.
func TestCommandTaskIsPaced(t *testing.T) {
	fake := &fakeslack.Server{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	a := New(Options{BotToken: "xoxb-t", APIURL: srv.URL + "/api/"})
	r := chat.NewRouter(chat.Options{Runner: &chattest.Runner{}, Store: &chattest.Boards{}, Platforms: map[string]chat.Platform{"slack": a}})
	t.Cleanup(r.Close)
	if err := a.Start(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first := func() chat.Priority { return chat.PriorityFirstPost }
	for range postBurst {
		if err := chat.Pace(ctx, a, chat.Request{Thread: chat.Thread{Channel: "C1"}, Method: chat.MethodPost, Priority: first}); err != nil {
			t.Fatal(err)
		}
	}
	before := len(fake.Calls("chat.postMessage"))
	start := time.Now()
	a.command(ctx, slack.SlashCommand{Command: "/pinplan", Text: "a task", UserID: "U1", ChannelID: "C1", TeamID: "T1", TriggerID: "t1"})
	calls := fake.Calls("chat.postMessage")
	if len(calls) != before+1 {
		t.Fatalf("%d posts, want the task", len(calls)-before)
	}
	// One slot a second refills the budget: the post waited for it.
	if waited := calls[len(calls)-1].At.Sub(start); waited < time.Second/2 {
		t.Errorf("the task was posted %s after the command, with the channel's budget spent", waited)
	}
}
