package fakeslack

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
	"go.uber.org/goleak"
)

// client is a hand-driven Socket Mode connection.
type client struct {
	t     testing.TB
	ws    *websocket.Conn
	pings atomic.Int32
	in    chan map[string]any
}

// open asks apps.connections.open for a URL and dials it.
func open(t testing.TB, base string) *client {
	t.Helper()
	out, _ := call(t, base, "xapp-1", "apps.connections.open", nil)
	u, _ := out["url"].(string)
	if u == "" {
		t.Fatalf("apps.connections.open: %v", out)
	}
	return dial(t, u)
}

func dial(t testing.TB, u string) *client {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(u, http.Header{"Origin": {"https://api.slack.com"}})
	if err != nil {
		t.Fatalf("dial %s: %v", u, err)
	}
	c := &client{t: t, ws: ws, in: make(chan map[string]any, 100)}
	ws.SetPingHandler(func(data string) error {
		c.pings.Add(1)
		return ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c.in)
		for {
			var m map[string]any
			if err := ws.ReadJSON(&m); err != nil {
				return
			}
			c.in <- m
		}
	}()
	t.Cleanup(func() { ws.Close(); <-done })
	return c
}

// next returns the next frame, failing after a deadline.
func (c *client) next() map[string]any {
	c.t.Helper()
	select {
	case m, ok := <-c.in:
		if !ok {
			c.t.Fatal("connection closed")
		}
		return m
	case <-time.After(5 * time.Second):
		c.t.Fatal("no frame within 5s")
	}
	return nil
}

func (c *client) ack(id any) {
	c.t.Helper()
	if err := c.ws.WriteJSON(map[string]any{"envelope_id": id}); err != nil {
		c.t.Fatal(err)
	}
}

func mention(ts string) map[string]any {
	return map[string]any{"type": "app_mention", "user": "U1", "text": "<@UBOT> hi", "ts": ts, "channel": "C1"}
}

func eventID(t testing.TB, env map[string]any) string {
	t.Helper()
	p, _ := env["payload"].(map[string]any)
	id, _ := p["event_id"].(string)
	return id
}

func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSocketHelloEnvelopeAck(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	c := open(t, base)
	if h := c.next(); h["type"] != "hello" {
		t.Fatalf("first frame %v, want hello", h)
	}
	waitUntil(t, "the connection", func() bool { return s.Connected() == 1 })
	id, err := s.Push("Ev1", mention("1700000000.000100"))
	if err != nil {
		t.Fatal(err)
	}
	env := c.next()
	if env["type"] != "events_api" || env["envelope_id"] != id || env["retry_attempt"] != 0.0 || eventID(t, env) != "Ev1" {
		t.Fatalf("envelope %v", env)
	}
	c.ack(id)
	waitUntil(t, "the ack", func() bool { return len(s.Acks()) == 1 })
	if got := s.Acks(); got[0] != id {
		t.Errorf("acks %v, want [%s]", got, id)
	}
	if m := s.Messages("C1"); len(m) != 1 || m[0].User != "U1" {
		t.Errorf("the pushed mention was not kept: %+v", m)
	}
}

func TestSocketTicketIsSingleUse(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	out, _ := call(t, base, "xapp-1", "apps.connections.open", nil)
	u := out["url"].(string)
	dial(t, u).next()
	if _, resp, err := websocket.DefaultDialer.Dial(u, nil); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("second dial of the same URL: err %v, want HTTP 401", err)
	}
	if _, resp, err := websocket.DefaultDialer.Dial(strings.Replace(base, "http", "ws", 1)+"/socket", nil); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("dial without a ticket: err %v, want HTTP 401", err)
	}
}

func TestSocketPings(t *testing.T) {
	s := &Server{PingInterval: 20 * time.Millisecond}
	base := serve(t, s)
	c := open(t, base)
	c.next()
	waitUntil(t, "three pings", func() bool { return c.pings.Load() >= 3 })
}

func TestSocketQueuesWithoutConnection(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	id1, err := s.Push("Ev1", mention("1700000000.000100"))
	if err != nil {
		t.Fatalf("push with no connection: %v", err)
	}
	id2, _ := s.Push("Ev2", mention("1700000000.000200"))
	c := open(t, base)
	if h := c.next(); h["type"] != "hello" {
		t.Fatalf("got %v before hello", h)
	}
	if e := c.next(); e["envelope_id"] != id1 {
		t.Errorf("first envelope %v, want %s", e, id1)
	}
	if e := c.next(); e["envelope_id"] != id2 {
		t.Errorf("second envelope %v, want %s", e, id2)
	}
}

func TestSocketDisconnect(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	old := open(t, base)
	old.next()
	waitUntil(t, "the connection", func() bool { return s.Connected() == 1 })
	s.Disconnect()
	if d := old.next(); d["type"] != "disconnect" || d["reason"] != "refresh_requested" {
		t.Fatalf("got %v, want a disconnect request", d)
	}
	if n := s.Connected(); n != 0 {
		t.Errorf("Connected() = %d after a disconnect request, want 0", n)
	}
	id, _ := s.Push("Ev1", mention("1700000000.000100"))
	c := open(t, base)
	c.next()
	if e := c.next(); e["envelope_id"] != id {
		t.Errorf("envelope %v went elsewhere, want %s on the new connection", e, id)
	}
	select {
	case m, ok := <-old.in:
		if ok {
			t.Errorf("the warned connection got %v", m)
		}
	default:
	}
}

func TestSocketRedelivery(t *testing.T) {
	t.Run("ack timeout", func(t *testing.T) {
		s := &Server{AckTimeout: 50 * time.Millisecond}
		base := serve(t, s)
		c := open(t, base)
		c.next()
		waitUntil(t, "the connection", func() bool { return s.Connected() == 1 })
		id, _ := s.Push("Ev1", mention("1700000000.000100"))
		for attempt := 0; attempt <= 3; attempt++ {
			e := c.next()
			if e["envelope_id"] != id || e["retry_attempt"] != float64(attempt) || eventID(t, e) != "Ev1" {
				t.Fatalf("delivery %d: %v", attempt, e)
			}
			if attempt > 0 && e["retry_reason"] != "timeout" {
				t.Errorf("retry_reason %v", e["retry_reason"])
			}
		}
		waitUntil(t, "the give-up violation", func() bool { return len(s.Violations()) == 1 })
		if v := s.Violations()[0]; !strings.Contains(v, "never acknowledged") {
			t.Errorf("violation %q", v)
		}
	})
	t.Run("acked in time", func(t *testing.T) {
		s := &Server{AckTimeout: 50 * time.Millisecond}
		base := serve(t, s)
		c := open(t, base)
		c.next()
		waitUntil(t, "the connection", func() bool { return s.Connected() == 1 })
		id, _ := s.Push("Ev1", mention("1700000000.000100"))
		c.ack(c.next()["envelope_id"])
		// Past the timeout and several checks; then a later envelope
		// proves the fake had its chance to resend.
		time.Sleep(50*time.Millisecond + 3*checkEvery)
		id2, _ := s.Push("Ev2", mention("1700000000.000200"))
		if e := c.next(); e["envelope_id"] != id2 {
			t.Errorf("got %v after acking %s, want the next event %s", e, id, id2)
		}
	})
	t.Run("connection closed before the ack", func(t *testing.T) {
		s := &Server{AckTimeout: -1}
		base := serve(t, s)
		c := open(t, base)
		c.next()
		waitUntil(t, "the connection", func() bool { return s.Connected() == 1 })
		id, _ := s.Push("Ev1", mention("1700000000.000100"))
		c.next()
		c.ws.Close()
		waitUntil(t, "the close", func() bool { return s.Connected() == 0 })
		c2 := open(t, base)
		c2.next()
		if e := c2.next(); e["envelope_id"] != id || e["retry_attempt"] != 1.0 {
			t.Errorf("redelivery %v, want %s with retry_attempt 1", e, id)
		}
	})
}

// TestSlackGoClient drives the fake with slack-go's own Socket Mode client:
// events arrive, acks are recorded, and a disconnect request makes it
// reconnect through apps.connections.open.
func TestSlackGoClient(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	api := slack.New("xoxb-test", slack.OptionAPIURL(base+"/api/"), slack.OptionAppLevelToken("xapp-test"))
	sm := socketmode.New(api)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sm.RunContext(ctx)
	}()
	got := make(chan string, 10)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case evt := <-sm.Events:
				if evt.Type != socketmode.EventTypeEventsAPI {
					continue
				}
				sm.Ack(*evt.Request)
				if api, ok := evt.Data.(slackevents.EventsAPIEvent); ok {
					if m, ok := api.InnerEvent.Data.(*slackevents.AppMentionEvent); ok {
						got <- m.TimeStamp
					}
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	waitUntil(t, "slack-go to connect", func() bool { return s.Connected() == 1 })
	expect := func(ts string) {
		t.Helper()
		select {
		case g := <-got:
			if g != ts {
				t.Errorf("got mention %s, want %s", g, ts)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("mention %s not received; calls %+v", ts, s.Calls(""))
		}
	}
	s.Push("Ev1", mention("1700000000.000100"))
	expect("1700000000.000100")
	// Slack redelivers an envelope not yet acked when the socket drops, so
	// the first one must be acked before the drop for the next to be Ev2.
	waitUntil(t, "the first ack", func() bool { return len(s.Acks()) == 1 })
	s.Disconnect()
	waitUntil(t, "slack-go to reconnect", func() bool { return len(s.Calls("apps.connections.open")) == 2 && s.Connected() == 1 })
	s.Push("Ev2", mention("1700000000.000200"))
	expect("1700000000.000200")
	waitUntil(t, "both acks", func() bool { return len(s.Acks()) == 2 })
	var raw []byte
	raw, _ = json.Marshal(s.Violations())
	if len(s.Violations()) > 0 {
		t.Errorf("violations %s", raw)
	}
}

func TestClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := &Server{PingInterval: 10 * time.Millisecond}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := open(t, srv.URL)
	c.next()
	waitUntil(t, "the connection", func() bool { return s.Connected() == 1 })
	s.Close()
	if n := s.Connected(); n != 0 {
		t.Errorf("Connected() = %d after Close", n)
	}
	out, _ := call(t, srv.URL, "xapp-1", "apps.connections.open", nil)
	if _, resp, err := websocket.DefaultDialer.Dial(out["url"].(string), nil); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("dial after Close: %v, want HTTP 503", err)
	}
	for range c.in { // the client sees the connection end
	}
}
