package fakeslack

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
)

// card is an approval card: a section and three buttons.
func card(t testing.TB) string {
	t.Helper()
	return blocksJSON(t,
		slack.NewSectionBlock(mrkdwn("*fs__write_file* wants to run"), nil, nil),
		slack.NewActionBlock("approval",
			button("Allow once", "allow_once", "call-1"),
			button("Always allow here", "allow_always", "call-1"),
			slack.NewButtonBlockElement("deny", "call-1", plain("Deny")).WithStyle(slack.StyleDanger)))
}

func TestButtonRules(t *testing.T) {
	buttons := func(n int) string {
		els := make([]string, n)
		for i := range els {
			els[i] = `{"type":"button","text":{"type":"plain_text","text":"b"},"action_id":"a` + strings.Repeat("x", i) + `"}`
		}
		return `[{"type":"actions","elements":[` + strings.Join(els, ",") + `]}]`
	}
	btn := func(extra string) string {
		return `[{"type":"actions","elements":[{"type":"button","text":{"type":"plain_text","text":"Go"},"action_id":"go"` + extra + `}]}]`
	}
	confirm := func(title, deny string) string {
		return `,"confirm":{"title":{"type":"plain_text","text":"` + title + `"},"text":{"type":"mrkdwn","text":"Sure?"},` +
			`"confirm":{"type":"plain_text","text":"Yes"}` + deny + `}`
	}
	tests := []struct {
		name, blocks, want string
	}{
		{"approval card", card(t), ""},
		{"25 buttons", buttons(25), ""},
		{"26 buttons", buttons(26), "invalid_blocks"},
		{"primary style", btn(`,"style":"primary"`), ""},
		{"unknown style", btn(`,"style":"secondary"`), "invalid_blocks"},
		{"mrkdwn button text", `[{"type":"actions","elements":[{"type":"button","text":{"type":"mrkdwn","text":"*Go*"},"action_id":"go"}]}]`, "invalid_blocks"},
		{"button without text", `[{"type":"actions","elements":[{"type":"button","action_id":"go"}]}]`, "invalid_blocks"},
		{"empty action_id", `[{"type":"actions","elements":[{"type":"button","text":{"type":"plain_text","text":"Go"},"action_id":""}]}]`, "invalid_blocks"},
		{"duplicate action_id in a block", `[{"type":"actions","elements":[` +
			`{"type":"button","text":{"type":"plain_text","text":"A"},"action_id":"x"},` +
			`{"type":"button","text":{"type":"plain_text","text":"B"},"action_id":"x"}]}]`, "invalid_blocks"},
		{"the same action_id in two blocks", `[{"type":"actions","elements":[{"type":"button","text":{"type":"plain_text","text":"A"},"action_id":"x"}]},` +
			`{"type":"actions","elements":[{"type":"button","text":{"type":"plain_text","text":"B"},"action_id":"x"}]}]`, ""},
		{"confirm dialog", btn(confirm("Really?", `,"deny":{"type":"plain_text","text":"No"}`)), ""},
		{"confirm without deny", btn(confirm("Really?", "")), "invalid_blocks"},
		{"confirm title of 101", btn(confirm(strings.Repeat("t", 101), `,"deny":{"type":"plain_text","text":"No"}`)), "invalid_blocks"},
		{"accessibility_label of 76", btn(`,"accessibility_label":"` + strings.Repeat("l", 76) + `"`), "invalid_blocks"},
		{"image in an actions block", `[{"type":"actions","elements":[{"type":"image","image_url":"https://x/y.png","alt_text":"y"}]}]`, "invalid_blocks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{}
			base := serve(t, s)
			ts := post(t, base, "C1", "first")
			for _, method := range []string{"chat.postMessage", "chat.update"} {
				if _, got := bot(t, base, method, map[string]string{"channel": "C1", "ts": ts, "text": "t", "blocks": tt.blocks}); got != tt.want {
					t.Errorf("%s: got %q, want %q (violations %q)", method, got, tt.want, s.Violations())
				}
			}
		})
	}
}

// cardIn posts an approval card as a reply in a thread of channel and
// returns the thread's and the card's ts.
func cardIn(t testing.TB, s *Server, base, channel string) (thread, ts string) {
	t.Helper()
	thread = "1700000000.000100"
	s.Push("Ev1", map[string]any{"type": "app_mention", "user": "U1", "text": "<@UBOT> go", "ts": thread, "channel": channel})
	out, code := bot(t, base, "chat.postMessage", map[string]string{"channel": channel, "thread_ts": thread, "text": "approval", "blocks": card(t)})
	if code != "" {
		t.Fatalf("post the card: %s", code)
	}
	return thread, out["ts"].(string)
}

func decode(t testing.TB, payload map[string]any) slack.InteractionCallback {
	t.Helper()
	raw, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	var cb slack.InteractionCallback
	if err := json.Unmarshal(raw, &cb); err != nil {
		t.Fatalf("slack-go cannot read the payload: %v", err)
	}
	return cb
}

func TestBlockActions(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	thread, ts := cardIn(t, s, base, "C1")
	p := s.BlockActions("U2", "C1", ts, "deny")
	if p == nil {
		t.Fatal("no payload for a button on the card")
	}
	cb := decode(t, p)
	if cb.Type != slack.InteractionTypeBlockActions || cb.User.ID != "U2" || cb.User.TeamID != "T1" || cb.Team.ID != "T1" ||
		cb.APIAppID != "A1" || cb.TriggerID == "" || cb.Channel.ID != "C1" {
		t.Errorf("payload header %+v", cb)
	}
	if c := cb.Container; c.Type != "message" || c.MessageTs != ts || c.ChannelID != "C1" || c.ThreadTs != thread || c.IsEphemeral {
		t.Errorf("container %+v, want the card %s in thread %s", c, ts, thread)
	}
	if m := cb.Message; m.Timestamp != ts || m.ThreadTimestamp != thread || m.BotID != "B1" || len(m.Blocks.BlockSet) != 2 {
		t.Errorf("message ts %s thread %s bot %s with %d blocks", m.Timestamp, m.ThreadTimestamp, m.BotID, len(m.Blocks.BlockSet))
	}
	acts := cb.ActionCallback.BlockActions
	if len(acts) != 1 || acts[0].ActionID != "deny" || acts[0].BlockID != "approval" || acts[0].Value != "call-1" ||
		acts[0].Type != "button" || acts[0].Text.Text != "Deny" || acts[0].ActionTs == "" {
		t.Errorf("actions %+v", acts)
	}
	if !strings.HasPrefix(cb.ResponseURL, base+"/actions/T1/") {
		t.Errorf("response_url %q is not on the fake %s", cb.ResponseURL, base)
	}

	for _, tt := range []struct{ name, channel, ts, action string }{
		{"no such action_id", "C1", ts, "approve"},
		{"no such message", "C1", "1700000000.999999", "deny"},
		{"wrong channel", "C2", ts, "deny"},
		{"a user's message", "C1", thread, "deny"},
	} {
		if p := s.BlockActions("U3", tt.channel, tt.ts, tt.action); p != nil {
			t.Errorf("%s: got a payload %v, want nil", tt.name, p)
		}
	}
	// Nothing was recorded for U3: they are not known in C1.
	if _, code := bot(t, base, "chat.postEphemeral", map[string]string{"channel": "C1", "user": "U3", "text": "x"}); code != "user_not_in_channel" {
		t.Errorf("ephemeral to a user whose click failed: got %q, want user_not_in_channel", code)
	}
	// The edited card without buttons has nothing to click.
	if _, code := bot(t, base, "chat.update", map[string]string{"channel": "C1", "ts": ts, "text": "Denied by U2", "blocks": "[]"}); code != "" {
		t.Fatal(code)
	}
	if p := s.BlockActions("U2", "C1", ts, "deny"); p != nil {
		t.Error("a click on a button the update removed")
	}
}

func TestInteractionBody(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	_, ts := cardIn(t, s, base, "C1")
	body := s.InteractionBody(s.BlockActions("U1", "C1", ts, "allow_once"))
	req, _ := http.NewRequest(http.MethodPost, "http://bot/slack/interactions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	cb, err := slack.InteractionCallbackParse(req)
	if err != nil {
		t.Fatal(err)
	}
	if acts := cb.ActionCallback.BlockActions; len(acts) != 1 || acts[0].ActionID != "allow_once" || cb.Container.MessageTs != ts {
		t.Errorf("parsed %+v", cb)
	}
}

func TestPushInteraction(t *testing.T) {
	t.Run("delivered and acked", func(t *testing.T) {
		s := &Server{}
		base := serve(t, s)
		_, ts := cardIn(t, s, base, "C1")
		c := open(t, base)
		c.next()
		id, err := s.PushInteraction(s.BlockActions("U1", "C1", ts, "allow_once"))
		if err != nil {
			t.Fatal(err)
		}
		var env map[string]any
		for env == nil || env["type"] == "events_api" { // the mention pushed by cardIn comes first
			env = c.next()
		}
		p, _ := env["payload"].(map[string]any)
		if env["type"] != "interactive" || env["envelope_id"] != id || env["accepts_response_payload"] != false || p["type"] != "block_actions" {
			t.Fatalf("envelope %v", env)
		}
		if _, ok := env["retry_attempt"]; ok {
			t.Errorf("a first delivery with retry_attempt: %v", env)
		}
		c.ack(id)
		waitUntil(t, "the ack", func() bool {
			for _, a := range s.Acks() {
				if a == id {
					return true
				}
			}
			return false
		})
		if v := s.Violations(); len(v) > 0 {
			t.Errorf("violations %q", v)
		}
	})
	t.Run("redelivered when not acked, a late ack held against the client", func(t *testing.T) {
		s := &Server{AckTimeout: 50 * time.Millisecond}
		base := serve(t, s)
		_, ts := cardIn(t, s, base, "C1")
		c := open(t, base)
		c.next()
		waitUntil(t, "the connection", func() bool { return s.Connected() == 1 })
		c.ack(c.next()["envelope_id"]) // the mention
		id, _ := s.PushInteraction(s.BlockActions("U1", "C1", ts, "allow_once"))
		if e := c.next(); e["envelope_id"] != id {
			t.Fatalf("got %v, want %s", e, id)
		}
		e := c.next()
		if e["envelope_id"] != id || e["type"] != "interactive" || e["retry_attempt"] != 1.0 || e["retry_reason"] != "timeout" {
			t.Fatalf("redelivery %v", e)
		}
		c.ack(id)
		waitUntil(t, "the late ack", func() bool { return len(s.Violations()) == 1 })
		if v := s.Violations()[0]; !strings.Contains(v, "interactive envelope "+id) {
			t.Errorf("violation %q", v)
		}
	})
}

func TestPostEphemeral(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	thread, ts := cardIn(t, s, base, "C1")
	api := slack.New("xoxb-test", slack.OptionAPIURL(base+"/api/"))
	ets, err := api.PostEphemeral("C1", "U1", slack.MsgOptionText("Only the requester or an approver can decide.", false), slack.MsgOptionTS(thread))
	if err != nil || ets == "" {
		t.Fatalf("PostEphemeral: %q %v", ets, err)
	}
	eph := s.Ephemerals("C1")
	if len(eph) != 1 || eph[0].Recipient != "U1" || eph[0].TS != ets || eph[0].ThreadTS != thread || eph[0].BotID != "B1" {
		t.Errorf("ephemerals %+v", eph)
	}
	for _, m := range s.Messages("C1") {
		if m.TS == ets {
			t.Errorf("the ephemeral message is among the channel's: %+v", m)
		}
	}
	if len(s.Messages("C1")) != 2 {
		t.Errorf("channel messages %+v, want the mention and the card", s.Messages("C1"))
	}
	for _, tt := range []struct {
		name, method string
		params       map[string]string
		want         string
	}{
		{"update an ephemeral", "chat.update", map[string]string{"channel": "C1", "ts": ets, "text": "x"}, "message_not_found"},
		{"pin an ephemeral", "pins.add", map[string]string{"channel": "C1", "timestamp": ets}, "message_not_found"},
		{"react to an ephemeral", "reactions.add", map[string]string{"channel": "C1", "timestamp": ets, "name": "eyes"}, "message_not_found"},
		{"unknown user", "chat.postEphemeral", map[string]string{"channel": "C1", "user": "U9", "text": "x"}, "user_not_in_channel"},
		{"no user", "chat.postEphemeral", map[string]string{"channel": "C1", "text": "x"}, "user_not_in_channel"},
		{"no channel", "chat.postEphemeral", map[string]string{"user": "U1", "text": "x"}, "channel_not_found"},
		{"no text", "chat.postEphemeral", map[string]string{"channel": "C1", "user": "U1"}, "no_text"},
		{"invalid blocks", "chat.postEphemeral", map[string]string{"channel": "C1", "user": "U1", "text": "x", "blocks": `[{"type":"fancy"}]`}, "invalid_blocks"},
		{"a user who clicked", "chat.postEphemeral", map[string]string{"channel": "C1", "user": "U7", "text": "x"}, ""},
	} {
		if tt.name == "a user who clicked" {
			s.BlockActions("U7", "C1", ts, "deny")
		}
		if _, code := bot(t, base, tt.method, tt.params); code != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, code, tt.want)
		}
	}
	if n := len(s.Ephemerals("C1")); n != 2 {
		t.Errorf("%d ephemerals, want 2", n)
	}
}

func TestResponseURL(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	_, ts := cardIn(t, s, base, "C1")
	api := slack.New("xoxb-test", slack.OptionAPIURL(base+"/api/"))
	u := decode(t, s.BlockActions("U1", "C1", ts, "allow_once")).ResponseURL

	// Replace the card, as a decision does.
	if _, _, err := api.PostMessage("", slack.MsgOptionReplaceOriginal(u), slack.MsgOptionText("Allowed once by U1", false),
		slack.MsgOptionBlocks(slack.NewSectionBlock(mrkdwn("Allowed once by <@U1>"), nil, nil))); err != nil {
		t.Fatalf("replace_original: %v", err)
	}
	msgs := s.Messages("C1")
	if m := msgs[len(msgs)-1]; m.TS != ts || m.Text != "Allowed once by U1" || strings.Contains(m.Blocks, "actions") || m.Edits != 1 {
		t.Errorf("after replace_original: %+v", m)
	}
	// The default response is ephemeral, for the user who clicked.
	if _, _, err := api.PostMessage("", slack.MsgOptionResponseURL(u, slack.ResponseTypeEphemeral), slack.MsgOptionText("noted", false)); err != nil {
		t.Fatal(err)
	}
	if e := s.Ephemerals("C1"); len(e) != 1 || e[0].Recipient != "U1" || e[0].Text != "noted" {
		t.Errorf("ephemerals %+v", e)
	}
	if _, _, err := api.PostMessage("", slack.MsgOptionResponseURL(u, slack.ResponseTypeInChannel), slack.MsgOptionText("for all", false)); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Messages("C1")); n != 3 {
		t.Errorf("%d channel messages after an in_channel response, want 3", n)
	}
	post := func(url, body string) (int, string) {
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		e, _ := out["error"].(string)
		return resp.StatusCode, e
	}
	if status, e := post(u, `{"text":"","blocks":[{"type":"fancy"}]}`); status != 400 || e != "invalid_blocks" {
		t.Errorf("invalid blocks: %d %q", status, e)
	}
	if status, e := post(u, `{"delete_original":true}`); status != 200 || e != "" {
		t.Errorf("delete_original: %d %q", status, e)
	}
	if status, e := post(u, `{"text":"sixth"}`); status != 404 || e != "used_url" {
		t.Errorf("a sixth use: %d %q, want 404 used_url", status, e)
	}
	if status, e := post(base+"/actions/T1/1/nope", `{"text":"x"}`); status != 404 || e != "expired_url" {
		t.Errorf("unknown response_url: %d %q, want 404 expired_url", status, e)
	}
	for _, m := range s.Messages("C1") {
		if m.TS == ts {
			t.Errorf("the card survived delete_original: %+v", m)
		}
	}
	posts := s.ResponseURLPosts()
	if len(posts) != 7 || posts[0].URL != u || posts[0].Body["replace_original"] != true || posts[5].Error != "used_url" {
		t.Errorf("recorded posts %+v", posts)
	}
}

// TestSlackGoInteractive drives a click through slack-go's Socket Mode
// client: an interactive event with the callback, acked.
func TestSlackGoInteractive(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	_, ts := cardIn(t, s, base, "C1")
	api := slack.New("xoxb-test", slack.OptionAPIURL(base+"/api/"), slack.OptionAppLevelToken("xapp-test"))
	sm := socketmode.New(api)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sm.RunContext(ctx)
	}()
	got := make(chan slack.InteractionCallback, 10)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case evt := <-sm.Events:
				if evt.Request != nil && evt.Request.EnvelopeID != "" {
					sm.Ack(*evt.Request)
				}
				if cb, ok := evt.Data.(slack.InteractionCallback); ok && evt.Type == socketmode.EventTypeInteractive {
					got <- cb
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	id, _ := s.PushInteraction(s.BlockActions("U1", "C1", ts, "allow_always"))
	select {
	case cb := <-got:
		if acts := cb.ActionCallback.BlockActions; len(acts) != 1 || acts[0].ActionID != "allow_always" || cb.Container.MessageTs != ts {
			t.Errorf("callback %+v", cb)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("slack-go saw no interactive event")
	}
	waitUntil(t, "the ack", func() bool {
		for _, a := range s.Acks() {
			if a == id {
				return true
			}
		}
		return false
	})
	if v := s.Violations(); len(v) > 0 {
		t.Errorf("violations %q", v)
	}
}

// TestCommandResponseURL: a slash command's fields, over HTTP or Socket
// Mode, carry a response_url that answers the person who ran it alone by
// default; a command's form is what Slack POSTs.
func TestCommandResponseURL(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	s.BaseURL = base // no request has told the fake its address yet
	form, err := url.ParseQuery(string(s.CommandBody(map[string]any{"text": "status", "user_id": "U9", "channel_id": "C1"})))
	if err != nil {
		t.Fatal(err)
	}
	if form.Get("command") != "/pinplan" || form.Get("text") != "status" || form.Get("trigger_id") == "" || !strings.HasPrefix(form.Get("response_url"), base+"/actions/") {
		t.Fatalf("command form %v", form)
	}
	if err := slack.PostWebhook(form.Get("response_url"), &slack.WebhookMessage{Text: "only you", ResponseType: slack.ResponseTypeEphemeral}); err != nil {
		t.Fatal(err)
	}
	if e := s.Ephemerals("C1"); len(e) != 1 || e[0].Recipient != "U9" || e[0].Text != "only you" {
		t.Errorf("ephemerals %+v, want one to U9", e)
	}
	if n := len(s.Messages("C1")); n != 0 {
		t.Errorf("%d channel messages from an ephemeral answer", n)
	}
}
