package discord

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/inboxtest"
	"github.com/pinplan/pinplan/todo"
)

// restRig is an adapter started with StartREST only, as a replica that
// does not hold the gateway runs it.
func restRig(t *testing.T) (*Adapter, *fakediscord.Server, *inboxtest.Inbox) {
	t.Helper()
	fake := &fakediscord.Server{HeartbeatInterval: time.Second}
	fake.AddChannel("C1", 0, "G1")
	fake.AddChannel("T1", 11, "G1")
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	rec := &inboxtest.Inbox{}
	a, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", APIURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	a.idWindow = 50 * time.Millisecond // a reconnect need not wait out Discord's 5 s
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.StartREST(ctx, rec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); a.Close() })
	return a, fake, rec
}

func waitGateway(t *testing.T, fake *fakediscord.Server, want int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for fake.Connected() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d gateway connections, want %d", fake.Connected(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRESTWithoutGateway: StartREST posts, edits and pins with no
// gateway session; OpenGateway brings the events, CloseGateway ends the
// session and stops them, and a second OpenGateway catches up on what
// the channel received meanwhile. One session at a time throughout.
func TestRESTWithoutGateway(t *testing.T) {
	a, fake, rec := restRig(t)
	ctx := context.Background()
	th := chat.Thread{Platform: "discord", Key: Key("T1"), Channel: "T1"}
	ref, err := a.PostPlan(ctx, th, chat.Plan{Revision: 1, Items: []todo.Item{{Content: "a", Status: todo.Pending}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Pin(ctx, th, ref, true); err != nil {
		t.Fatal(err)
	}
	if id, res := fake.Sessions(); id+res != 0 || fake.Connected() != 0 {
		t.Fatalf("StartREST: %d identifies, %d resumes, %d connected; want no gateway", id, res, fake.Connected())
	}
	if err := a.Ready(); err == nil {
		t.Error("Ready() = nil without a gateway, want an error")
	}

	if err := a.OpenGateway(ctx); err != nil {
		t.Fatal(err)
	}
	waitGateway(t, fake, 1)
	fake.UserMessage("T1", "111", "the task", true)
	waitTexts(t, rec, 1)

	a.CloseGateway()
	waitGateway(t, fake, 0)
	fake.UserMessage("T1", "111", "while closed", false)
	// Nothing dials while closed, discordgo's Open included.
	if err := a.s.Open(); !errors.Is(err, errGatewayClosed) {
		t.Errorf("Open while closed: %v, want %v", err, errGatewayClosed)
	}
	if n := fake.Connected(); n != 0 {
		t.Errorf("%d gateway connections while closed", n)
	}
	if got := rec.Texts(); len(got) != 1 {
		t.Errorf("handled %q while closed, want only the task", got)
	}

	if err := a.OpenGateway(ctx); err != nil {
		t.Fatal(err)
	}
	waitGateway(t, fake, 1)
	fake.UserMessage("T1", "111", "after reopening", false)
	got := waitTexts(t, rec, 3)
	want := []string{"the task", "while closed", "after reopening"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("handled %q, want %q (the gap caught up once, in order)", got, want)
	}
	if n := fake.MaxConnected(); n != 1 {
		t.Errorf("MaxConnected() = %d, want 1", n)
	}
}

// TestCloseGatewayStopsReconnects: a dropped connection is reconnected
// while the gateway is open; after CloseGateway the reconnect loop ends
// without a connection, and the gateway stays closed.
func TestCloseGatewayStopsReconnects(t *testing.T) {
	a, fake, rec := restRig(t)
	ctx := context.Background()
	if err := a.OpenGateway(ctx); err != nil {
		t.Fatal(err)
	}
	waitGateway(t, fake, 1)
	fake.Drop()
	waitGateway(t, fake, 0)
	waitGateway(t, fake, 1) // reconnected (resumed)
	fake.UserMessage("T1", "111", "the task", true)
	waitTexts(t, rec, 1)

	fake.Drop()
	a.CloseGateway()
	deadline := time.Now().Add(15 * time.Second)
	for {
		a.mu.Lock()
		running := a.shards[0].reconnecting
		a.mu.Unlock()
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reconnect loop still runs 15 s after CloseGateway")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := fake.Connected(); n != 0 {
		t.Errorf("%d gateway connections after CloseGateway, want 0", n)
	}
	if n := fake.MaxConnected(); n != 1 {
		t.Errorf("MaxConnected() = %d, want 1", n)
	}
}

// TestGatewayReconnects: the adapter reconnects the gateway itself
// (discordgo's loop is off), resuming the session, after each way a
// connection ends; what was sent meanwhile arrives once, in order.
func TestGatewayReconnects(t *testing.T) {
	tests := []struct {
		name  string
		fault func(*fakediscord.Server)
	}{
		{"dropped", (*fakediscord.Server).Drop},
		{"op 7 reconnect", (*fakediscord.Server).Reconnect},
		{"closed with 4000", func(s *fakediscord.Server) { s.CloseWith(4000) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, fake, rec := restRig(t)
			if err := a.OpenGateway(context.Background()); err != nil {
				t.Fatal(err)
			}
			waitGateway(t, fake, 1)
			fake.UserMessage("T1", "111", "the task", true)
			waitTexts(t, rec, 1)
			tt.fault(fake)
			fake.UserMessage("T1", "111", "meanwhile", false)
			waitGateway(t, fake, 1)
			fake.UserMessage("T1", "111", "after", false)
			got := waitTexts(t, rec, 3)
			want := []string{"the task", "meanwhile", "after"}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("handled %q, want %q", got, want)
			}
			if _, resumes := fake.Sessions(); resumes == 0 {
				t.Error("no RESUME after the connection ended")
			}
			if n := fake.MaxConnected(); n != 1 {
				t.Errorf("MaxConnected() = %d, want 1", n)
			}
		})
	}
}

// TestCardPostedOnceByItsKey: an approval card posted again with the
// same send key (its first answer lost, or the process killed before it
// recorded the card) is the card Discord created, not a second one.
func TestCardPostedOnceByItsKey(t *testing.T) {
	a, fake, _ := restRig(t)
	th := chat.Thread{Platform: "discord", Key: "discord/G1/C1", Channel: "C1"}
	c := chat.Card{ID: "card1", Tool: "fs__write_file", Server: "fs", Requester: "U1", Deadline: time.Now().Add(time.Hour)}
	ref, err := a.PostCard(chat.WithSend(t.Context(), "card/card1", time.Now(), false), th, c)
	if err != nil {
		t.Fatal(err)
	}
	again, err := a.PostCard(chat.WithSend(t.Context(), "card/card1", time.Now(), true), th, c)
	if err != nil {
		t.Fatal(err)
	}
	if again != ref {
		t.Errorf("the second attempt returned %v, want the first card %v", again, ref)
	}
	if n := len(fake.Messages("C1")); n != 1 {
		t.Errorf("%d messages, want the one card", n)
	}
}

// TestFetchFileOnlyFromDiscord: an attachment is fetched from Discord's
// CDN (here the fake, at DISCORD_API_URL's host), never from elsewhere.
func TestFetchFileOnlyFromDiscord(t *testing.T) {
	a, _, _ := restRig(t)
	var hits int
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits++ }))
	defer other.Close()
	for _, u := range []string{other.URL + "/a.txt", "http://cdn.discordapp.com/a.txt", "https://cdn.discordapp.com.evil.example/a.txt"} {
		var fe *chat.FileError
		if _, err := a.FetchFile(t.Context(), "discord/C1", agent.File{Name: "a.txt", URL: u}, 100); !errors.As(err, &fe) {
			t.Errorf("FetchFile(%s) = %v, want refused as not Discord's", u, err)
		}
	}
	if hits != 0 {
		t.Errorf("%d requests went to another host", hits)
	}
}
