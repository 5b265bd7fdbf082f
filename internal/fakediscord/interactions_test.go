package fakediscord

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
)

func btn(label, customID string, style int) map[string]any {
	return map[string]any{"type": 2, "label": label, "custom_id": customID, "style": style}
}

func row(children ...any) map[string]any {
	return map[string]any{"type": 1, "components": children}
}

// approvalCard is the body of an approval card with its three buttons.
func approvalCard() map[string]any {
	return map[string]any{"content": "fs__write_file wants to run", "components": []any{
		row(btn("Allow once", "allow_once:1", 1), btn("Always allow here", "allow_always:1", 2), btn("Deny", "deny:1", 4)),
	}}
}

// callback answers an interaction as discordgo does: no Authorization.
func callback(t testing.TB, base, id, token string, body any) answer {
	t.Helper()
	raw, _ := json.Marshal(body)
	resp, err := http.Post(base+"/api/v9/interactions/"+id+"/"+token+"/callback", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, header: resp.Header}
	json.NewDecoder(resp.Body).Decode(&a.body)
	return a
}

func TestComponentRules(t *testing.T) {
	long := func(n int) string { return strings.Repeat("é", n) }
	rows := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = row(btn("b", "id"+strings.Repeat("x", i), 1))
		}
		return out
	}
	buttons := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = btn("b", "id"+strings.Repeat("x", i), 2)
		}
		return out
	}
	link := func(extra map[string]any) map[string]any {
		b := map[string]any{"type": 2, "label": "Docs", "style": 5}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	sel := map[string]any{"type": 3, "custom_id": "pick", "options": []any{map[string]any{"label": "a", "value": "a"}}}
	tests := []struct {
		name       string
		components any
		ok         bool
	}{
		{"approval card", approvalCard()["components"], true},
		{"5 rows", rows(5), true},
		{"6 rows", rows(6), false},
		{"5 buttons in a row", []any{row(buttons(5)...)}, true},
		{"6 buttons in a row", []any{row(buttons(6)...)}, false},
		{"an empty row", []any{row()}, false},
		{"a button outside a row", []any{btn("Deny", "deny", 4)}, false},
		{"a row in a row", []any{row(row(btn("a", "a", 1)))}, false},
		{"label of 80", []any{row(btn(long(80), "a", 1))}, true},
		{"label of 81", []any{row(btn(long(81), "a", 1))}, false},
		{"custom_id of 100", []any{row(btn("a", strings.Repeat("c", 100), 1))}, true},
		{"custom_id of 101", []any{row(btn("a", strings.Repeat("c", 101), 1))}, false},
		{"no custom_id", []any{row(map[string]any{"type": 2, "label": "a", "style": 1})}, false},
		{"duplicate custom_id across rows", []any{row(btn("a", "same", 1)), row(btn("b", "same", 2))}, false},
		{"unknown style", []any{row(btn("a", "a", 7))}, false},
		{"no style", []any{row(map[string]any{"type": 2, "label": "a", "custom_id": "a"})}, false},
		{"link button", []any{row(link(map[string]any{"url": "https://example.com"}))}, true},
		{"link button with a custom_id", []any{row(link(map[string]any{"url": "https://example.com", "custom_id": "x"}))}, false},
		{"link button without a url", []any{row(link(nil))}, false},
		{"primary button with a url", []any{row(map[string]any{"type": 2, "label": "a", "style": 1, "custom_id": "a", "url": "https://example.com"})}, false},
		{"select menu alone", []any{row(sel)}, true},
		{"select menu beside a button", []any{row(sel, btn("a", "a", 1))}, false},
		{"not a list", map[string]any{"type": 1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{}
			s.AddChannel("C1", 0, "G1")
			base := serve(t, s)
			id := postMsg(t, base, "C1", map[string]any{"content": "first"})
			for _, a := range []answer{
				rest(t, base, "POST", "channels/C1/messages", map[string]any{"content": "x", "components": tt.components}),
				rest(t, base, "PATCH", "channels/C1/messages/"+id, map[string]any{"components": tt.components}),
			} {
				if tt.ok && a.status != 200 {
					t.Errorf("got %d %v, want 200", a.status, a.body)
				}
				if !tt.ok && (a.status != 400 || a.code() != codeInvalidForm) {
					t.Errorf("got %d %v, want 400 code 50035", a.status, a.body)
				}
			}
			if tt.ok {
				msgs := s.Messages("C1")
				if len(msgs) != 2 || len(msgs[0].Components) == 0 || len(msgs[1].Components) == 0 {
					t.Errorf("components not kept: %+v", msgs)
				}
				return
			}
			if n := len(s.Messages("C1")); n != 1 {
				t.Errorf("%d messages: a refused post landed", n)
			}
			if m := s.Messages("C1")[0]; m.Edits != 0 || len(m.Components) != 0 {
				t.Errorf("a refused edit was applied: %+v", m)
			}
			if v := s.Violations(); len(v) != 2 {
				t.Errorf("violations %q, want one per refused request", v)
			}
		})
	}
}

func TestComponentsKeptAndCleared(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	base := serve(t, s)
	a := rest(t, base, "POST", "channels/C1/messages", approvalCard())
	if cs, _ := a.field("components").([]any); len(cs) != 1 {
		t.Fatalf("POST answered components %v", a.field("components"))
	}
	id := a.field("id").(string)
	rest(t, base, "PATCH", "channels/C1/messages/"+id, map[string]any{"content": "still waiting"})
	got := rest(t, base, "GET", "channels/C1/messages/"+id, nil)
	if cs, _ := got.field("components").([]any); len(cs) != 1 || got.field("content") != "still waiting" {
		t.Errorf("an edit without components dropped them: %v", got.body)
	}
	// Only buttons, no content: not an empty message.
	if a := rest(t, base, "PATCH", "channels/C1/messages/"+id, map[string]any{"content": ""}); a.status != 200 {
		t.Errorf("a message with only components: %d %v", a.status, a.body)
	}
	if a := rest(t, base, "PATCH", "channels/C1/messages/"+id, map[string]any{"components": []any{}}); a.status != 400 || a.code() != codeEmptyMessage {
		t.Errorf("removing the last thing in a message: %d %v, want 50006", a.status, a.body)
	}
	rest(t, base, "PATCH", "channels/C1/messages/"+id, map[string]any{"content": "Denied", "components": []any{}})
	if m := s.Messages("C1")[0]; len(m.Components) != 0 || m.Content != "Denied" {
		t.Errorf("components: [] did not clear them: %+v", m)
	}
}

// cardSetup serves s with a guild channel, a DM and a gateway client, and
// posts an approval card in C1.
func cardSetup(t *testing.T, s *Server) (base string, g *gw, card string) {
	t.Helper()
	s.AddChannel("C1", 0, "G1")
	s.AddChannel("D1", 1, "")
	base = serve(t, s)
	g = dialGateway(t, base)
	g.identify(allIntents)
	g.dispatch("GUILD_CREATE")
	card = postMsg(t, base, "C1", approvalCard())
	g.dispatch("MESSAGE_CREATE")
	return base, g, card
}

func TestClickRoundTrip(t *testing.T) {
	s := &Server{}
	base, g, card := cardSetup(t, s)
	id, err := s.Click("C1", card, "111", "deny:1")
	if err != nil {
		t.Fatal(err)
	}
	ev := g.dispatch("INTERACTION_CREATE")["d"].(map[string]any)
	data, _ := ev["data"].(map[string]any)
	member, _ := ev["member"].(map[string]any)
	user, _ := member["user"].(map[string]any)
	msg, _ := ev["message"].(map[string]any)
	if ev["id"] != id || ev["type"] != 3.0 || ev["application_id"] != BotID || ev["version"] != 1.0 || ev["token"] == "" ||
		ev["guild_id"] != "G1" || ev["channel_id"] != "C1" || ev["user"] != nil || ev["app_permissions"] == nil || ev["locale"] == nil {
		t.Errorf("interaction %v", ev)
	}
	if data["custom_id"] != "deny:1" || data["component_type"] != 2.0 {
		t.Errorf("data %v", data)
	}
	if user["id"] != "111" || user["username"] == nil || user["global_name"] == nil || member["permissions"] == nil || member["roles"] == nil {
		t.Errorf("member %v", member)
	}
	if cs, _ := msg["components"].([]any); msg["id"] != card || len(cs) != 1 {
		t.Errorf("message %v", msg)
	}
	if c, _ := ev["channel"].(map[string]any); c["id"] != "C1" || c["type"] != 0.0 {
		t.Errorf("channel %v", ev["channel"])
	}

	token := ev["token"].(string)
	a := callback(t, base, id, token, map[string]any{"type": 7, "data": map[string]any{"content": "Denied by <@111>", "components": []any{}}})
	if a.status != 204 {
		t.Fatalf("update callback: %d %v", a.status, a.body)
	}
	for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Bucket"} {
		if a.header.Get(h) == "" {
			t.Errorf("callback answer without %s", h)
		}
	}
	upd := g.dispatch("MESSAGE_UPDATE")["d"].(map[string]any)
	if cs, _ := upd["components"].([]any); upd["id"] != card || upd["content"] != "Denied by <@111>" || len(cs) != 0 {
		t.Errorf("MESSAGE_UPDATE %v", upd)
	}
	if m := s.Messages("C1")[0]; m.Content != "Denied by <@111>" || len(m.Components) != 0 || m.Edits != 1 {
		t.Errorf("the card after the update: %+v", m)
	}
	if _, err := s.Click("C1", card, "111", "deny:1"); !errors.Is(err, ErrNoButton) {
		t.Errorf("a click on a removed button: %v, want ErrNoButton", err)
	}

	again := callback(t, base, id, token, map[string]any{"type": 6})
	if again.status != 400 || again.code() != codeAlreadyAcked {
		t.Errorf("second callback: %d %v, want 400 code 40060", again.status, again.body)
	}
	rs := s.Responses(id)
	if len(rs) != 2 || rs[0].Type != 7 || rs[0].Status != 204 || rs[0].Latency <= 0 || rs[0].Data["content"] != "Denied by <@111>" ||
		rs[1].Type != 6 || rs[1].Status != 400 || rs[1].Code != codeAlreadyAcked || rs[1].Latency < rs[0].Latency {
		t.Errorf("responses %+v", rs)
	}
}

func TestCallbackRefused(t *testing.T) {
	t.Run("late", func(t *testing.T) {
		s := &Server{InteractionWindow: 50 * time.Millisecond}
		base, g, card := cardSetup(t, s)
		id, _ := s.Click("C1", card, "111", "allow_once:1")
		token := g.dispatch("INTERACTION_CREATE")["d"].(map[string]any)["token"].(string)
		time.Sleep(100 * time.Millisecond) // past the window: the rule is about time
		a := callback(t, base, id, token, map[string]any{"type": 6})
		if a.status != 404 || a.code() != codeUnknownInteraction {
			t.Errorf("late callback: %d %v, want 404 code 10062", a.status, a.body)
		}
		if rs := s.Responses(id); len(rs) != 1 || rs[0].Status != 404 || rs[0].Latency < 100*time.Millisecond {
			t.Errorf("responses %+v", rs)
		}
		if v := s.Violations(); len(v) != 1 || !strings.Contains(v[0], "interaction "+id+" answered") {
			t.Errorf("violations %q, want the late answer", v)
		}
	})
	t.Run("tokens and ids", func(t *testing.T) {
		s := &Server{}
		base, g, card := cardSetup(t, s)
		id, _ := s.Click("C1", card, "111", "allow_once:1")
		token := g.dispatch("INTERACTION_CREATE")["d"].(map[string]any)["token"].(string)
		if a := callback(t, base, id, "bm90LWl0", map[string]any{"type": 6}); a.status != 401 || a.code() != codeInvalidWebhookTok {
			t.Errorf("wrong token: %d %v, want 401 code 50027", a.status, a.body)
		}
		if a := callback(t, base, "1", token, map[string]any{"type": 6}); a.status != 404 || a.code() != codeUnknownInteraction {
			t.Errorf("unknown interaction: %d %v, want 404 code 10062", a.status, a.body)
		}
		// A bot token is not needed, and not in the way.
		raw, _ := json.Marshal(map[string]any{"type": 6})
		req, _ := http.NewRequest("POST", base+"/api/v9/interactions/"+id+"/"+token+"/callback", bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bot test-token")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 204 {
			t.Errorf("callback with a bot token: %d, want 204", resp.StatusCode)
		}
	})
	t.Run("invalid components leave the interaction open", func(t *testing.T) {
		s := &Server{}
		base, g, card := cardSetup(t, s)
		id, _ := s.Click("C1", card, "111", "allow_once:1")
		token := g.dispatch("INTERACTION_CREATE")["d"].(map[string]any)["token"].(string)
		bad := map[string]any{"type": 7, "data": map[string]any{"components": []any{row(btn("a", "x", 1), btn("b", "x", 1))}}}
		a := callback(t, base, id, token, bad)
		errs, _ := a.field("errors").(map[string]any)
		if a.status != 400 || a.code() != codeInvalidForm || errs["data.components.0.components.1.custom_id"] == nil {
			t.Errorf("duplicate custom_id in an update: %d %v", a.status, a.body)
		}
		for _, body := range []map[string]any{
			{"type": 1}, {"type": 8}, {"type": 4, "data": map[string]any{}},
			{"type": 4, "data": map[string]any{"content": "x", "flags": 2}},
			{"type": 4, "data": map[string]any{"content": strings.Repeat("x", 2001)}},
		} {
			if a := callback(t, base, id, token, body); a.status != 400 {
				t.Errorf("callback %v: %d %v, want 400", body, a.status, a.body)
			}
		}
		if a := callback(t, base, id, token, map[string]any{"type": 6}); a.status != 204 {
			t.Errorf("a valid callback after refused ones: %d %v", a.status, a.body)
		}
		if m := s.Messages("C1")[0]; m.Edits != 0 || len(m.Components) != 1 {
			t.Errorf("refused updates changed the card: %+v", m)
		}
	})
}

func TestCallbackMessages(t *testing.T) {
	s := &Server{}
	base, g, card := cardSetup(t, s)
	// Someone who may not decide is told privately.
	id, _ := s.Click("C1", card, "222", "allow_once:1")
	token := g.dispatch("INTERACTION_CREATE")["d"].(map[string]any)["token"].(string)
	a := callback(t, base, id, token, map[string]any{"type": 4, "data": map[string]any{"content": "Only the requester or an approver can decide.", "flags": 64}})
	if a.status != 204 {
		t.Fatalf("ephemeral reply: %d %v", a.status, a.body)
	}
	eph := s.Ephemerals("C1")
	if len(eph) != 1 || eph[0].Recipient != "222" || eph[0].Flags != 64 || eph[0].Interaction != id || eph[0].ID == "" {
		t.Errorf("ephemerals %+v", eph)
	}
	if msgs := s.Messages("C1"); len(msgs) != 1 {
		t.Errorf("the ephemeral reply is among the channel's messages: %+v", msgs)
	}
	if a := rest(t, base, "GET", "channels/C1/messages/"+eph[0].ID, nil); a.status != 404 {
		t.Errorf("GET an ephemeral reply: %d, want 404", a.status)
	}

	// A public reply answers the clicked message.
	id2, _ := s.Click("C1", card, "111", "allow_always:1")
	ev := g.dispatch("INTERACTION_CREATE")["d"].(map[string]any)
	a = callback(t, base, id2, ev["token"].(string)+"", map[string]any{"type": 4, "data": map[string]any{"content": "Allowed here."}})
	if a.status != 204 {
		t.Fatalf("channel reply: %d %v", a.status, a.body)
	}
	created := g.dispatch("MESSAGE_CREATE")["d"].(map[string]any)
	meta, _ := created["interaction_metadata"].(map[string]any)
	if created["type"] != 19.0 || created["content"] != "Allowed here." || meta["id"] != id2 || meta["interacted_message_id"] != card {
		t.Errorf("reply %v", created)
	}
	if msgs := s.Messages("C1"); len(msgs) != 2 || msgs[1].Reference != card || msgs[1].Interaction != id2 {
		t.Errorf("messages %+v", msgs)
	}

	// with_response=true answers the callback response.
	id3, _ := s.Click("C1", card, "111", "deny:1")
	tok3 := g.dispatch("INTERACTION_CREATE")["d"].(map[string]any)["token"].(string)
	raw, _ := json.Marshal(map[string]any{"type": 7, "data": map[string]any{"content": "Denied", "components": []any{}}})
	resp, err := http.Post(base+"/api/v9/interactions/"+id3+"/"+tok3+"/callback?with_response=true", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	res, _ := out["resource"].(map[string]any)
	if resp.StatusCode != 200 || res["type"] != 7.0 || res["message"].(map[string]any)["content"] != "Denied" {
		t.Errorf("with_response: %d %v", resp.StatusCode, out)
	}
	if in, _ := out["interaction"].(map[string]any); in["response_message_loading"] != false {
		t.Errorf("with_response of an update: response_message_loading %v, want false", in["response_message_loading"])
	}
}

// TestDeferredCallbackWithResponse: a deferred reply (5) answered
// with_response says its message is loading, as Discord's interaction
// callback response does.
func TestDeferredCallbackWithResponse(t *testing.T) {
	s := &Server{}
	base, g, card := cardSetup(t, s)
	id, _ := s.Click("C1", card, "111", "deny:1")
	token := g.dispatch("INTERACTION_CREATE")["d"].(map[string]any)["token"].(string)
	raw, _ := json.Marshal(map[string]any{"type": 5})
	resp, err := http.Post(base+"/api/v9/interactions/"+id+"/"+token+"/callback?with_response=true", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if in, _ := out["interaction"].(map[string]any); resp.StatusCode != 200 || in["response_message_loading"] != true {
		t.Errorf("with_response of a deferred reply: %d %v, want response_message_loading true", resp.StatusCode, out)
	}
}

func TestClickRefused(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	base := serve(t, s)
	card := postMsg(t, base, "C1", map[string]any{"content": "x", "components": []any{row(
		btn("Go", "go", 1),
		map[string]any{"type": 2, "label": "Off", "custom_id": "off", "style": 2, "disabled": true},
		map[string]any{"type": 2, "label": "Docs", "style": 5, "url": "https://example.com"},
	)}})
	plain := postMsg(t, base, "C1", map[string]any{"content": "no buttons"})
	for _, tt := range []struct{ name, channel, message, customID string }{
		{"unknown custom_id", "C1", card, "stop"},
		{"disabled button", "C1", card, "off"},
		{"link button", "C1", card, ""},
		{"message without components", "C1", plain, "go"},
		{"unknown message", "C1", "42", "go"},
		{"wrong channel", "C2", card, "go"},
	} {
		if _, err := s.Click(tt.channel, tt.message, "111", tt.customID); !errors.Is(err, ErrNoButton) {
			t.Errorf("%s: got %v, want ErrNoButton", tt.name, err)
		}
	}
	if _, err := s.Click("C1", card, "111", "go"); err != nil {
		t.Errorf("a real button: %v", err)
	}
}

func TestClickInDMAndWithoutIntents(t *testing.T) {
	s := &Server{}
	s.AddChannel("D1", 1, "")
	base := serve(t, s)
	g := dialGateway(t, base)
	g.identify(0) // no intents: interactions come anyway
	card := postMsg(t, base, "D1", map[string]any{"content": "Stop?", "components": []any{row(btn("Stop", "stop", 4))}})
	if _, err := s.Click("D1", card, "111", "stop"); err != nil {
		t.Fatal(err)
	}
	ev := g.dispatch("INTERACTION_CREATE")["d"].(map[string]any)
	user, _ := ev["user"].(map[string]any)
	if ev["member"] != nil || ev["guild_id"] != nil || user["id"] != "111" || ev["context"] != 1.0 {
		t.Errorf("DM interaction %v", ev)
	}
}

// TestDiscordgoInteraction answers a click with discordgo: the interaction
// decodes, InteractionRespond updates the card and removes its buttons.
func TestDiscordgoInteraction(t *testing.T) {
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
	dg.Identify.Intents = discordgo.IntentsGuilds | discordgo.IntentsGuildMessages
	got := make(chan *discordgo.Interaction, 1)
	dg.AddHandler(func(_ *discordgo.Session, i *discordgo.InteractionCreate) { got <- i.Interaction })
	if err := dg.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dg.Close() })
	waitUntil(t, "discordgo to connect", func() bool { return s.Connected() == 1 })
	card, err := dg.ChannelMessageSendComplex("C1", &discordgo.MessageSend{Content: "approve?", Components: []discordgo.MessageComponent{
		discordgo.ActionsRow{Components: []discordgo.MessageComponent{
			discordgo.Button{Label: "Allow once", CustomID: "allow_once:1", Style: discordgo.PrimaryButton},
			discordgo.Button{Label: "Deny", CustomID: "deny:1", Style: discordgo.DangerButton},
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(card.Components) != 1 {
		t.Fatalf("discordgo read back %d components", len(card.Components))
	}
	id, err := s.Click("C1", card.ID, "111", "allow_once:1")
	if err != nil {
		t.Fatal(err)
	}
	var in *discordgo.Interaction
	select {
	case in = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("no INTERACTION_CREATE")
	}
	if in.ID != id || in.Type != discordgo.InteractionMessageComponent || in.MessageComponentData().CustomID != "allow_once:1" ||
		in.Member == nil || in.Member.User.ID != "111" || in.Message == nil || in.Message.ID != card.ID || len(in.Message.Components) != 1 {
		t.Fatalf("interaction %+v", in)
	}
	err = dg.InteractionRespond(in, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseUpdateMessage,
		Data: &discordgo.InteractionResponseData{Content: "Allowed once by <@111>", Components: []discordgo.MessageComponent{}}})
	if err != nil {
		t.Fatalf("InteractionRespond: %v", err)
	}
	if m := s.Messages("C1")[0]; m.Content != "Allowed once by <@111>" || len(m.Components) != 0 {
		t.Errorf("card after the update %+v", m)
	}
	err = dg.InteractionRespond(in, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredMessageUpdate})
	var rerr *discordgo.RESTError
	if !errors.As(err, &rerr) || rerr.Message == nil || rerr.Message.Code != codeAlreadyAcked {
		t.Errorf("second InteractionRespond: %v, want code 40060", err)
	}
	if v := s.Violations(); len(v) != 1 || !strings.Contains(v[0], "40060") {
		t.Errorf("violations %q, want the second answer", v)
	}
}
