package discord

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/inboxtest"
)

// slowInbox answers a stop after delay, as a router behind a slow store.
type slowInbox struct {
	inboxtest.Inbox
	delay time.Duration
}

func (s *slowInbox) Handle(context.Context, chat.Incoming) error {
	time.Sleep(s.delay)
	return &chat.Rejection{Reason: "Stopping the current turn."}
}

// TestSlowStopIsDeferred: a /pinplan stop the router takes longer than
// 2 s over is deferred within Discord's 3 s, to the person alone, and
// its answer fills the deferred message in.
func TestSlowStopIsDeferred(t *testing.T) {
	fake := &fakediscord.Server{HeartbeatInterval: time.Second}
	fake.AddChannel("C1", 0, "G1")
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	a, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", APIURL: srv.URL, Commands: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.Start(ctx, &slowInbox{delay: 2500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); a.Close() })
	in, err := fake.Command("C1", "U1", "pinplan", "stop", nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var filled string
	for filled == "" && time.Now().Before(deadline) {
		for _, m := range fake.Ephemerals("C1") {
			if m.Interaction == in && m.Edits > 0 {
				filled = m.Content
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	res := fake.Responses(in)
	if len(res) != 1 || res[0].Type != 5 || res[0].Latency > 3*time.Second || int(res[0].Data["flags"].(float64))&64 == 0 {
		t.Errorf("responses %+v, want one deferral within 3 s, to the person alone", res)
	}
	if !strings.Contains(filled, "Stopping") {
		t.Errorf("the deferred answer reads %q", filled)
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Discord would have refused: %v", v)
	}
}
