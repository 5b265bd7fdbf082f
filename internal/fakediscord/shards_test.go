package fakediscord

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/gorilla/websocket"
)

// Guild ids on shard 0 and 1 of 2: (id >> 22) % 2.
var (
	guildShard0 = strconv.FormatUint(2<<22, 10)
	guildShard1 = strconv.FormatUint(3<<22, 10)
)

func (g *gw) identifyShard(shard, shards int) map[string]any {
	g.t.Helper()
	g.send(2, map[string]any{"token": "Bot test-token", "intents": allIntents, "properties": map[string]any{}, "shard": []int{shard, shards}})
	return g.dispatch("READY")["d"].(map[string]any)
}

func TestShardOf(t *testing.T) {
	for _, c := range []struct {
		guild  string
		shards int
		want   int
	}{
		{guildShard0, 2, 0}, {guildShard1, 2, 1}, {"", 4, 0}, {"G1", 4, 0},
		{guildShard1, 1, 0},
	} {
		if got := ShardOf(c.guild, c.shards); got != c.want {
			t.Errorf("ShardOf(%q, %d) = %d, want %d", c.guild, c.shards, got, c.want)
		}
	}
}

func TestGatewayBot(t *testing.T) {
	s := &Server{Shards: 4, MaxConcurrency: 2}
	s.AddChannel("C1", 0, guildShard0)
	base := serve(t, s)
	a := rest(t, base, "GET", "gateway/bot", nil)
	limit, _ := a.field("session_start_limit").(map[string]any)
	if a.field("shards") != 4.0 || limit["max_concurrency"] != 2.0 || limit["total"] != 1000.0 || limit["remaining"] != 1000.0 {
		t.Fatalf("GET /gateway/bot: %v", a.body)
	}
	dialGateway(t, base).identifyShard(0, 4)
	dialGateway(t, base).identifyShard(1, 4)
	limit = rest(t, base, "GET", "gateway/bot", nil).field("session_start_limit").(map[string]any)
	if limit["remaining"] != 998.0 {
		t.Errorf("remaining after two IDENTIFYs: %v, want 998", limit["remaining"])
	}
	def := serve(t, &Server{})
	if a := rest(t, def, "GET", "gateway/bot", nil); a.field("shards") != 1.0 || a.field("session_start_limit").(map[string]any)["max_concurrency"] != 1.0 {
		t.Errorf("the default GET /gateway/bot: %v", a.body)
	}
}

func TestShardRefusals(t *testing.T) {
	s := &Server{ShardGuildLimit: 1}
	s.AddChannel("C0", 0, guildShard0)
	s.AddChannel("C1", 0, guildShard1)
	base := serve(t, s)
	for _, sh := range [][]int{{2, 2}, {3, 2}, {-1, 2}, {0, 0}} {
		g := dialGateway(t, base)
		g.send(2, map[string]any{"token": "Bot test-token", "intents": allIntents, "properties": map[string]any{}, "shard": sh})
		if code := g.closeCode(); code != 4010 {
			t.Errorf("shard %v: closed with %d, want 4010", sh, code)
		}
	}
	// Two guilds, one allowed a session: unsharded is refused, two
	// shards of one guild each are not.
	g := dialGateway(t, base)
	g.send(2, map[string]any{"token": "Bot test-token", "intents": allIntents, "properties": map[string]any{}})
	if code := g.closeCode(); code != 4011 {
		t.Errorf("one session for two guilds over the limit: closed with %d, want 4011", code)
	}
	for shard := range 2 {
		ready := dialGateway(t, base).identifyShard(shard, 2)
		if guilds := ready["guilds"].([]any); len(guilds) != 1 {
			t.Errorf("shard %d READY guilds %v, want one", shard, guilds)
		}
		if sh := ready["shard"].([]any); sh[0] != float64(shard) || sh[1] != 2.0 {
			t.Errorf("READY shard %v", sh)
		}
	}
}

func TestIdentifyWindow(t *testing.T) {
	s := &Server{IdentifyWindow: 300 * time.Millisecond, MaxConcurrency: 2}
	base := serve(t, s)
	dialGateway(t, base).identifyShard(0, 4)
	dialGateway(t, base).identifyShard(1, 4) // another bucket: 1 % 2
	g := dialGateway(t, base)
	g.send(2, map[string]any{"token": "Bot test-token", "intents": allIntents, "properties": map[string]any{}, "shard": []int{2, 4}})
	if m := g.next(); m["op"] != 9.0 || m["d"] != false {
		t.Fatalf("shard 2 in shard 0's bucket at once: %v, want op 9 d=false", m)
	}
	if ids, _ := s.Sessions(); ids != 2 {
		t.Errorf("the refused IDENTIFY counted: %d", ids)
	}
	time.Sleep(300 * time.Millisecond)
	g.identifyShard(2, 4)
}

func TestShardRouting(t *testing.T) {
	s := &Server{}
	s.AddChannel("C0", 0, guildShard0)
	s.AddChannel("C1", 0, guildShard1)
	s.AddChannel("D1", 1, "")
	base := serve(t, s)
	g0, g1 := dialGateway(t, base), dialGateway(t, base)
	sid0 := g0.identifyShard(0, 2)["session_id"].(string)
	g0.dispatch("GUILD_CREATE")
	g1.identifyShard(1, 2)
	if d := g1.dispatch("GUILD_CREATE")["d"].(map[string]any); d["id"] != guildShard1 {
		t.Errorf("shard 1's GUILD_CREATE is of %v", d["id"])
	}
	s.UserMessage("C1", "U1", "to shard 1", true)
	s.UserMessage("C0", "U1", "to shard 0", true)
	s.UserMessage("D1", "U1", "a DM", false)
	if d := g1.dispatch("MESSAGE_CREATE")["d"].(map[string]any); d["channel_id"] != "C1" {
		t.Errorf("shard 1 got %v", d)
	}
	if d := g0.dispatch("MESSAGE_CREATE")["d"].(map[string]any); d["channel_id"] != "C0" {
		t.Errorf("shard 0 got %v first", d)
	}
	if d := g0.dispatch("MESSAGE_CREATE")["d"].(map[string]any); d["channel_id"] != "D1" {
		t.Errorf("shard 0 got %v, want the DM", d)
	}
	// Dropping shard 0 leaves shard 1 up; shard 0 resumes and gets
	// what it missed, shard 1 nothing of it.
	if got := s.ShardsConnected(); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("ShardsConnected() = %v, want [0 1]", got)
	}
	s.DropShard(0)
	waitUntil(t, "shard 0 to drop", func() bool { return slices.Equal(s.ShardsConnected(), []int{1}) })
	s.UserMessage("C0", "U1", "while shard 0 was down", true)
	s.UserMessage("C1", "U1", "shard 1 still up", true)
	if d := g1.dispatch("MESSAGE_CREATE")["d"].(map[string]any); d["channel_id"] != "C1" {
		t.Errorf("shard 1 got %v", d)
	}
	if n := s.Missed(); n != 1 {
		t.Errorf("Missed() = %d while shard 0 is down with one event, want 1", n)
	}
	g := dialGateway(t, base)
	g.send(6, map[string]any{"token": "Bot test-token", "session_id": sid0, "seq": 4})
	if d := g.dispatch("MESSAGE_CREATE")["d"].(map[string]any); d["channel_id"] != "C0" {
		t.Errorf("shard 0's replay: %v", d)
	}
	g.dispatch("RESUMED")
	if n := s.Missed(); n != 0 {
		t.Errorf("Missed() = %d", n)
	}
	select {
	case m := <-g1.in:
		t.Errorf("shard 1 got %v after its own messages", m)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestDiscordgoShard: discordgo identifying as shard 1 of 2 gets the
// events of shard 1's guild only.
func TestDiscordgoShard(t *testing.T) {
	s := &Server{Shards: 2, HeartbeatInterval: time.Second}
	s.AddChannel("C0", 0, guildShard0)
	s.AddChannel("C1", 0, guildShard1)
	base := serve(t, s)
	target, _ := url.Parse(base)
	dg, err := discordgo.New("Bot test-token")
	if err != nil {
		t.Fatal(err)
	}
	dg.Client = &http.Client{Transport: rewrite{target}}
	dg.StateEnabled = false
	dg.SyncEvents = true
	dg.Identify.Intents = discordgo.IntentsGuilds | discordgo.IntentsGuildMessages | discordgo.IntentMessageContent
	gb, err := dg.GatewayBot()
	if err != nil || gb.Shards != 2 {
		t.Fatalf("GatewayBot: %v %+v", err, gb)
	}
	dg.ShardID, dg.ShardCount = 1, gb.Shards
	got := make(chan string, 10)
	dg.AddHandler(func(_ *discordgo.Session, m *discordgo.MessageCreate) { got <- m.ChannelID })
	if err := dg.Open(); err != nil {
		t.Fatal(err)
	}
	defer dg.Close()
	waitUntil(t, "shard 1 to connect", func() bool { return slices.Equal(s.ShardsConnected(), []int{1}) })
	s.UserMessage("C0", "U1", "shard 0's", true)
	s.UserMessage("C1", "U1", "shard 1's", true)
	select {
	case ch := <-got:
		if ch != "C1" {
			t.Errorf("shard 1 got a message of %s", ch)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no message on shard 1")
	}
	select {
	case ch := <-got:
		t.Errorf("shard 1 got a second message, of %s", ch)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestShardingRequiredDefault: Discord's 2,500 guilds a session.
func TestShardingRequiredDefault(t *testing.T) {
	s := &Server{}
	for i := range 2501 {
		s.AddChannel("C"+strconv.Itoa(i), 0, strconv.FormatUint(uint64(i+1)<<22, 10))
	}
	base := serve(t, s)
	g := dialGateway(t, base)
	g.send(2, map[string]any{"token": "Bot test-token", "intents": allIntents, "properties": map[string]any{}})
	if code := g.closeCode(); code != 4011 {
		t.Errorf("one session for 2,501 guilds: closed with %d, want 4011", code)
	}
	if ready := dialGateway(t, base).identifyShard(0, 2); len(ready["guilds"].([]any)) != 1250 {
		t.Errorf("shard 0 of 2 holds %d guilds, want 1250", len(ready["guilds"].([]any)))
	}
}

// TestGatewayAPIVersion: a gateway URL asking for an API version Discord
// no longer serves is said Hello and closed with 4012.
func TestGatewayAPIVersion(t *testing.T) {
	base := serve(t, &Server{})
	for _, c := range []struct {
		v    string
		want int
	}{{"8", 4012}, {"6", 4012}, {"10", 0}} {
		ws, _, err := websocket.DefaultDialer.Dial(strings.Replace(base, "http", "ws", 1)+"/gateway?v="+c.v+"&encoding=json", nil)
		if err != nil {
			t.Fatal(err)
		}
		var hello map[string]any
		if err := ws.ReadJSON(&hello); err != nil || hello["op"] != 10.0 {
			t.Fatalf("v=%s: first %v, %v; want Hello", c.v, hello, err)
		}
		ws.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, _, err = ws.ReadMessage()
		var ce *websocket.CloseError
		got := 0
		if errors.As(err, &ce) {
			got = ce.Code
		}
		if got != c.want {
			t.Errorf("v=%s: closed with %d (%v), want %d", c.v, got, err, c.want)
		}
		ws.Close()
	}
}
