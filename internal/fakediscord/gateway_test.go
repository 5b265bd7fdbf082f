package fakediscord

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/gorilla/websocket"
	"go.uber.org/goleak"
)

const allIntents = intentGuilds | intentGuildMessages | intentDirectMessages | intentMessageContent

// gw is a hand-driven gateway connection.
type gw struct {
	t      testing.TB
	ws     *websocket.Conn
	in     chan map[string]any
	closed chan int // the close code the server sent
}

func dialGateway(t testing.TB, base string) *gw {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(strings.Replace(base, "http", "ws", 1)+"/gateway?v=9&encoding=json", nil)
	if err != nil {
		t.Fatal(err)
	}
	g := &gw{t: t, ws: ws, in: make(chan map[string]any, 1000), closed: make(chan int, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(g.in)
		for {
			var m map[string]any
			if err := ws.ReadJSON(&m); err != nil {
				if ce, ok := err.(*websocket.CloseError); ok {
					g.closed <- ce.Code
				}
				return
			}
			g.in <- m
		}
	}()
	t.Cleanup(func() { ws.Close(); <-done })
	if h := g.next(); h["op"] != 10.0 {
		t.Fatalf("first frame %v, want HELLO", h)
	}
	return g
}

func (g *gw) next() map[string]any {
	g.t.Helper()
	select {
	case m, ok := <-g.in:
		if !ok {
			g.t.Fatal("gateway connection closed")
		}
		return m
	case <-time.After(5 * time.Second):
		g.t.Fatal("no gateway frame within 5s")
	}
	return nil
}

// dispatch reads the next frame and checks it is the op 0 event name.
func (g *gw) dispatch(name string) map[string]any {
	g.t.Helper()
	m := g.next()
	if m["op"] != 0.0 || m["t"] != name {
		g.t.Fatalf("got %v, want dispatch %s", m, name)
	}
	return m
}

func (g *gw) send(op int, d any) {
	g.t.Helper()
	if err := g.ws.WriteJSON(map[string]any{"op": op, "d": d}); err != nil {
		g.t.Fatal(err)
	}
}

func (g *gw) identify(intents int) (sessionID string) {
	g.t.Helper()
	g.send(2, map[string]any{"token": "Bot test-token", "intents": intents, "properties": map[string]any{}})
	ready := g.dispatch("READY")
	return ready["d"].(map[string]any)["session_id"].(string)
}

func (g *gw) closeCode() int {
	g.t.Helper()
	select {
	case c := <-g.closed:
		return c
	case <-time.After(5 * time.Second):
		g.t.Fatal("the server did not close the connection")
	}
	return 0
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

func TestIdentifyReadyGuildCreate(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	s.AddChannel("T1", 11, "G1")
	s.AddChannel("D1", 1, "")
	base := serve(t, s)
	g := dialGateway(t, base)
	g.send(2, map[string]any{"token": "Bot x", "intents": allIntents})
	ready := g.dispatch("READY")
	if ready["s"] != 1.0 {
		t.Errorf("READY s=%v, want 1", ready["s"])
	}
	gc := g.dispatch("GUILD_CREATE")["d"].(map[string]any)
	members := gc["members"].([]any)
	bot := members[0].(map[string]any)
	if bot["user"].(map[string]any)["id"] != BotID || bot["roles"].([]any)[0] != ManagedRoleID {
		t.Errorf("GUILD_CREATE members %v, want the bot with its managed role", members)
	}
	if th := gc["threads"].([]any); len(th) != 1 || gc["channels"].([]any)[0].(map[string]any)["id"] != "C1" {
		t.Errorf("GUILD_CREATE channels %v threads %v", gc["channels"], gc["threads"])
	}
	g.send(1, 1)
	if ack := g.next(); ack["op"] != 11.0 {
		t.Errorf("heartbeat answered with %v", ack)
	}
	g.send(2, map[string]any{"token": "Bot x", "intents": allIntents})
	if code := g.closeCode(); code != 4005 {
		t.Errorf("second IDENTIFY: close %d, want 4005", code)
	}
}

func TestIdentifyRefused(t *testing.T) {
	tests := []struct {
		name string
		d    map[string]any
		op   int
		want int
	}{
		{"wrong token", map[string]any{"token": "Bot wrong", "intents": 1}, 2, 4004},
		{"no intents", map[string]any{"token": "Bot right"}, 2, 4013},
		{"presence before identify", map[string]any{}, 3, 4003},
		{"unknown opcode", map[string]any{}, 42, 4001},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{Token: "right"}
			g := dialGateway(t, serve(t, s))
			g.send(tt.op, tt.d)
			if code := g.closeCode(); code != tt.want {
				t.Errorf("close %d, want %d", code, tt.want)
			}
		})
	}
}

func TestDispatchOrder(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	base := serve(t, s)
	g := dialGateway(t, base)
	g.identify(allIntents)
	g.dispatch("GUILD_CREATE")
	const n = 300
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			s.UserMessage("C1", "111", fmt.Sprint(i), false)
		}
	}()
	last := 2.0
	for i := 0; i < n; i++ {
		m := g.dispatch("MESSAGE_CREATE")
		if m["s"] != last+1 {
			t.Fatalf("dispatch %d has s=%v after %v", i, m["s"], last)
		}
		last = m["s"].(float64)
		if c := m["d"].(map[string]any)["content"]; c != fmt.Sprint(i) {
			t.Fatalf("dispatch %d carries %q: out of order", i, c)
		}
	}
	wg.Wait()
}

func TestIntents(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	s.AddChannel("D1", 1, "")
	base := serve(t, s)
	noContent := dialGateway(t, base)
	noContent.identify(intentGuilds | intentGuildMessages | intentDirectMessages)
	noContent.dispatch("GUILD_CREATE")
	dmOnly := dialGateway(t, base)
	dmOnly.identify(intentDirectMessages | intentMessageContent)
	s.UserMessage("C1", "111", "plain", false)
	s.UserMessage("C1", "111", "to the bot", true)
	s.UserMessage("D1", "111", "in a DM", false)
	for _, want := range []string{"", "<@" + BotID + "> to the bot", "in a DM"} {
		if got := noContent.dispatch("MESSAGE_CREATE")["d"].(map[string]any)["content"]; got != want {
			t.Errorf("without MESSAGE_CONTENT: content %q, want %q", got, want)
		}
	}
	if got := dmOnly.dispatch("MESSAGE_CREATE")["d"].(map[string]any)["content"]; got != "in a DM" {
		t.Errorf("DM intent only: first event %q, want only the DM", got)
	}
}

func TestResume(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	base := serve(t, s)
	g := dialGateway(t, base)
	sid := g.identify(allIntents)
	g.dispatch("GUILD_CREATE")
	s.UserMessage("C1", "111", "seen", false)
	last := g.dispatch("MESSAGE_CREATE")["s"].(float64)
	s.CloseWith(4000)
	if code := g.closeCode(); code != 4000 {
		t.Fatalf("close %d, want 4000", code)
	}
	s.UserMessage("C1", "111", "while away", false)
	g2 := dialGateway(t, base)
	g2.send(6, map[string]any{"token": "Bot x", "session_id": sid, "seq": last})
	if got := g2.dispatch("MESSAGE_CREATE")["d"].(map[string]any)["content"]; got != "while away" {
		t.Errorf("replayed %q", got)
	}
	resumed := g2.dispatch("RESUMED")
	s.UserMessage("C1", "111", "after", false)
	after := g2.dispatch("MESSAGE_CREATE")
	if after["s"].(float64) != resumed["s"].(float64)+1 {
		t.Errorf("sequence after RESUMED %v, want %v", after["s"], resumed["s"].(float64)+1)
	}
	if n := s.Missed(); n != 0 {
		t.Errorf("Missed() = %d after a good resume", n)
	}
	if id, res := s.Sessions(); id != 1 || res != 1 {
		t.Errorf("Sessions() = %d, %d, want 1, 1", id, res)
	}
}

func TestSessionEnds(t *testing.T) {
	tests := []struct {
		name string
		end  func(s *Server, g *gw)
	}{
		{"op 9 not resumable", func(s *Server, g *gw) {
			s.InvalidSession(false)
			if m := g.next(); m["op"] != 9.0 || m["d"] != false {
				t.Fatalf("got %v, want op 9 d=false", m)
			}
		}},
		{"close 4009 session timed out", func(s *Server, g *gw) {
			s.CloseWith(4009)
			if code := g.closeCode(); code != 4009 {
				t.Fatalf("close %d, want 4009", code)
			}
		}},
		{"close 4004 authentication failed", func(s *Server, g *gw) {
			s.CloseWith(4004)
			if code := g.closeCode(); code != 4004 {
				t.Fatalf("close %d, want 4004", code)
			}
		}},
		{"client closes with 1000", func(s *Server, g *gw) {
			g.ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "bye"))
			waitUntil(t, "the close", func() bool { return s.Connected() == 0 })
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{}
			s.AddChannel("C1", 0, "G1")
			base := serve(t, s)
			g := dialGateway(t, base)
			sid := g.identify(allIntents)
			last := g.dispatch("GUILD_CREATE")["s"].(float64)
			tt.end(s, g)
			s.UserMessage("C1", "111", "lost 1", false)
			s.UserMessage("C1", "111", "lost 2", false)
			g2 := dialGateway(t, base)
			g2.send(6, map[string]any{"token": "Bot x", "session_id": sid, "seq": last})
			if m := g2.next(); m["op"] != 9.0 || m["d"] != false {
				t.Fatalf("RESUME of an ended session: %v, want op 9 d=false", m)
			}
			sid2 := g2.identify(allIntents)
			if sid2 == sid {
				t.Error("the new session reuses the old id")
			}
			g2.dispatch("GUILD_CREATE")
			s.UserMessage("C1", "111", "new", false)
			if got := g2.dispatch("MESSAGE_CREATE")["d"].(map[string]any)["content"]; got != "new" {
				t.Errorf("the new session got %q first: events of the ended session replayed", got)
			}
			if n := s.Missed(); n != 2 {
				t.Errorf("Missed() = %d, want 2", n)
			}
		})
	}
}

func TestReconnectAndDropKeepEvents(t *testing.T) {
	for _, name := range []string{"op 7", "drop", "op 9 resumable", "close 4000"} {
		t.Run(name, func(t *testing.T) {
			s := &Server{}
			s.AddChannel("C1", 0, "G1")
			base := serve(t, s)
			g := dialGateway(t, base)
			sid := g.identify(allIntents)
			last := g.dispatch("GUILD_CREATE")["s"].(float64)
			switch name {
			case "op 7":
				s.Reconnect()
				if m := g.next(); m["op"] != 7.0 {
					t.Fatalf("got %v, want op 7", m)
				}
			case "drop":
				s.Drop()
			case "op 9 resumable":
				s.InvalidSession(true)
				if m := g.next(); m["op"] != 9.0 || m["d"] != true {
					t.Fatalf("got %v, want op 9 d=true", m)
				}
			case "close 4000":
				s.CloseWith(4000)
			}
			waitUntil(t, "no ready connection", func() bool { return s.Connected() == 0 })
			s.UserMessage("C1", "111", "kept", false)
			g2 := dialGateway(t, base)
			g2.send(6, map[string]any{"token": "Bot x", "session_id": sid, "seq": last})
			if got := g2.dispatch("MESSAGE_CREATE")["d"].(map[string]any)["content"]; got != "kept" {
				t.Errorf("replay %q", got)
			}
			g2.dispatch("RESUMED")
			if s.Missed() != 0 {
				t.Errorf("Missed() = %d", s.Missed())
			}
		})
	}
}

func TestRoleMention(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	base := serve(t, s)
	g := dialGateway(t, base)
	g.identify(allIntents)
	g.dispatch("GUILD_CREATE")
	id := s.UserRoleMessage("C1", "111", "plan it")
	d := g.dispatch("MESSAGE_CREATE")["d"].(map[string]any)
	if d["id"] != id || d["content"] != "<@&"+ManagedRoleID+"> plan it" {
		t.Errorf("role mention %v", d)
	}
	if roles := d["mention_roles"].([]any); len(roles) != 1 || roles[0] != ManagedRoleID {
		t.Errorf("mention_roles %v", roles)
	}
	if m := d["mentions"].([]any); len(m) != 0 {
		t.Errorf("mentions %v: a role mention does not mention the bot user", m)
	}
	if _, ok := d["member"]; !ok {
		t.Error("a guild message has no member")
	}
}

// rewrite sends discordgo's requests for discord.com to the fake, as the
// adapter does.
type rewrite struct{ target *url.URL }

func (rw rewrite) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.URL.Scheme, r.URL.Host, r.Host = rw.target.Scheme, rw.target.Host, rw.target.Host
	return http.DefaultTransport.RoundTrip(r)
}

// TestDiscordgo drives the fake with discordgo: messages in order, a
// resume after op 7 with the missed message replayed, and a new session
// after op 9.
func TestDiscordgo(t *testing.T) {
	s := &Server{HeartbeatInterval: time.Second}
	s.AddChannel("C1", 0, "G1")
	base := serve(t, s)
	target, _ := url.Parse(base)
	dg, err := discordgo.New("Bot test-token")
	if err != nil {
		t.Fatal(err)
	}
	dg.Client = &http.Client{Transport: rewrite{target}}
	dg.SyncEvents = true
	dg.StateEnabled = false
	dg.ShouldRetryOnRateLimit = false
	dg.Identify.Intents = discordgo.IntentsGuilds | discordgo.IntentsGuildMessages | discordgo.IntentMessageContent
	got := make(chan string, 100)
	roles := make(chan []string, 1)
	dg.AddHandler(func(_ *discordgo.Session, m *discordgo.MessageCreate) { got <- m.Content })
	dg.AddHandler(func(_ *discordgo.Session, g *discordgo.GuildCreate) {
		for _, mem := range g.Members {
			if mem.User != nil && mem.User.ID == BotID {
				roles <- mem.Roles
			}
		}
	})
	if err := dg.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dg.Close() })
	select {
	case r := <-roles:
		if len(r) != 1 || r[0] != ManagedRoleID {
			t.Errorf("discordgo saw the bot's roles %v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no GUILD_CREATE with the bot's member")
	}
	expect := func(want ...string) {
		t.Helper()
		for _, w := range want {
			select {
			case c := <-got:
				if c != w {
					t.Fatalf("got %q, want %q", c, w)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%q never arrived", w)
			}
		}
	}
	for i := 0; i < 20; i++ {
		s.UserMessage("C1", "111", fmt.Sprint(i), false)
	}
	for i := 0; i < 20; i++ {
		expect(fmt.Sprint(i))
	}
	s.Reconnect()
	s.UserMessage("C1", "111", "during op 7", false)
	waitUntil(t, "the resume", func() bool { _, r := s.Sessions(); return r == 1 && s.Connected() == 1 })
	expect("during op 7")
	s.InvalidSession(false)
	waitUntil(t, "a new session", func() bool { id, _ := s.Sessions(); return id == 2 && s.Connected() == 1 })
	s.UserMessage("C1", "111", "after op 9", false)
	expect("after op 9")
	// REST through discordgo: the rate limit headers parse.
	ms, err := dg.ChannelMessages("C1", 3, "", "", "", discordgo.WithContext(context.Background()))
	if err != nil || len(ms) != 3 || ms[0].Content != "after op 9" {
		t.Errorf("ChannelMessages: %v %v", err, ms)
	}
	raw, _ := json.Marshal(s.Violations())
	if len(s.Violations()) > 0 {
		t.Errorf("violations %s", raw)
	}
}

func TestClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := &Server{}
	srv := httptest.NewServer(s)
	defer srv.Close()
	g := dialGateway(t, srv.URL)
	g.identify(allIntents)
	s.Close()
	if n := s.Connected(); n != 0 {
		t.Errorf("Connected() = %d after Close", n)
	}
	if _, resp, err := websocket.DefaultDialer.Dial(strings.Replace(srv.URL, "http", "ws", 1)+"/gateway", nil); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("dial after Close: %v, want HTTP 503", err)
	}
	for range g.in {
	}
}

// TestMaxConnected: the peak of ready connections counts sessions held at
// the same time, not one after another, and a resume on a new connection
// that replaces the old one is still one.
func TestMaxConnected(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	base := serve(t, s)
	g1 := dialGateway(t, base)
	sid := g1.identify(allIntents)
	g1.dispatch("GUILD_CREATE")
	if got := s.MaxConnected(); got != 1 {
		t.Fatalf("MaxConnected() = %d after one IDENTIFY, want 1", got)
	}
	// The same session resumed on a second connection: the first is
	// closed, one session receives dispatches.
	g2 := dialGateway(t, base)
	g2.send(6, map[string]any{"token": "Bot x", "session_id": sid, "seq": 2})
	g2.dispatch("RESUMED")
	if code := g1.closeCode(); code != 4000 {
		t.Errorf("the replaced connection closed with %d, want 4000", code)
	}
	if got := s.MaxConnected(); got != 1 {
		t.Errorf("MaxConnected() = %d after a resume replaced the connection, want 1", got)
	}
	// A second IDENTIFY while the first session is up: two at once.
	g3 := dialGateway(t, base)
	g3.identify(allIntents)
	if got, now := s.MaxConnected(), s.Connected(); got != 2 || now != 2 {
		t.Errorf("MaxConnected(), Connected() = %d, %d with two sessions up, want 2, 2", got, now)
	}
	g3.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	waitUntil(t, "the closed session to leave", func() bool { return s.Connected() == 1 })
	if got := s.MaxConnected(); got != 2 {
		t.Errorf("MaxConnected() = %d after one of two closed, want it to keep 2", got)
	}
}
