package fakeslack

import (
	"strings"
	"testing"

	"github.com/slack-go/slack"
)

func option(text, value string) *slack.OptionBlockObject {
	return slack.NewOptionBlockObject(value, plain(text), nil)
}

// planRows is a plan with an overflow menu per item row, every menu with
// the same action_id, told apart by block_id and values.
func planRows(t testing.TB) string {
	t.Helper()
	row := func(n, text string) slack.Block {
		menu := slack.NewOverflowBlockElement("item", option("Skip", "skip:"+n), option("Add after", "add:"+n))
		return slack.NewSectionBlock(mrkdwn(text), nil, slack.NewAccessory(menu), slack.SectionBlockOptionBlockID("item-"+n))
	}
	return blocksJSON(t, slack.NewHeaderBlock(plain("Plan · 0/2 done")), row("1", "⬜ Read"), row("2", "🔄 *Write*"))
}

func TestMenuRules(t *testing.T) {
	long := func(n int) string { return strings.Repeat("é", n) }
	opt := func(text, value string) string {
		return `{"text":{"type":"plain_text","text":"` + text + `"},"value":"` + value + `"}`
	}
	opts := func(n int) string {
		out := make([]string, n)
		for i := range out {
			out[i] = opt("o", "v"+strings.Repeat("x", i))
		}
		return strings.Join(out, ",")
	}
	overflow := func(options string) string {
		return `[{"type":"section","text":{"type":"mrkdwn","text":"item"},"accessory":{"type":"overflow","action_id":"item","options":[` + options + `]}}]`
	}
	sel := func(fields string) string {
		return `[{"type":"actions","elements":[{"type":"static_select","action_id":"pick"` + fields + `}]}]`
	}
	tests := []struct {
		name, blocks, want string
	}{
		{"plan rows with overflow menus", planRows(t), ""},
		{"overflow of 2", overflow(opts(2)), ""},
		{"overflow of 5", overflow(opts(5)), ""},
		{"overflow of 1", overflow(opts(1)), "invalid_blocks"},
		{"overflow of 6", overflow(opts(6)), "invalid_blocks"},
		{"overflow in an actions block", `[{"type":"actions","elements":[{"type":"overflow","action_id":"m","options":[` + opts(2) + `]}]}]`, ""},
		{"option text of 75", overflow(opt(long(75), "a") + "," + opt("b", "b")), ""},
		{"option text of 76", overflow(opt(long(76), "a") + "," + opt("b", "b")), "invalid_blocks"},
		{"mrkdwn option text", overflow(`{"text":{"type":"mrkdwn","text":"*a*"},"value":"a"},` + opt("b", "b")), "invalid_blocks"},
		{"empty option text", overflow(opt("", "a") + "," + opt("b", "b")), "invalid_blocks"},
		{"option value of 150", overflow(opt("a", long(150)) + "," + opt("b", "b")), ""},
		{"option value of 151", overflow(opt("a", long(151)) + "," + opt("b", "b")), "invalid_blocks"},
		{"option without a value", overflow(`{"text":{"type":"plain_text","text":"a"}},` + opt("b", "b")), "invalid_blocks"},
		{"option description of 76", overflow(`{"text":{"type":"plain_text","text":"a"},"value":"a","description":{"type":"plain_text","text":"` + long(76) + `"}},` + opt("b", "b")), "invalid_blocks"},
		{"overflow option with a url", overflow(`{"text":{"type":"plain_text","text":"Docs"},"value":"docs","url":"https://example.com"},` + opt("b", "b")), ""},
		{"overflow action_id of 255", `[{"type":"section","text":{"type":"mrkdwn","text":"x"},"accessory":{"type":"overflow","action_id":"` + long(255) + `","options":[` + opts(2) + `]}}]`, ""},
		{"overflow action_id of 256", `[{"type":"section","text":{"type":"mrkdwn","text":"x"},"accessory":{"type":"overflow","action_id":"` + long(256) + `","options":[` + opts(2) + `]}}]`, "invalid_blocks"},
		{"two overflows with one action_id in a block", `[{"type":"actions","elements":[{"type":"overflow","action_id":"m","options":[` + opts(2) + `]},{"type":"overflow","action_id":"m","options":[` + opts(2) + `]}]}]`, "invalid_blocks"},
		{"overflow in a context block", `[{"type":"context","elements":[{"type":"overflow","action_id":"m","options":[` + opts(2) + `]}]}]`, "invalid_blocks"},
		{"a text input as an accessory", `[{"type":"section","text":{"type":"mrkdwn","text":"x"},"accessory":{"type":"plain_text_input","action_id":"t"}}]`, "invalid_blocks"},
		{"static select of 100", sel(`,"options":[` + opts(100) + `]`), ""},
		{"static select of 101", sel(`,"options":[` + opts(101) + `]`), "invalid_blocks"},
		{"static select without options", sel(``), "invalid_blocks"},
		{"static select with options and groups", sel(`,"options":[` + opts(1) + `],"option_groups":[{"label":{"type":"plain_text","text":"g"},"options":[` + opts(1) + `]}]`), "invalid_blocks"},
		{"static select with groups", sel(`,"option_groups":[{"label":{"type":"plain_text","text":"g"},"options":[` + opts(2) + `]}]`), ""},
		{"group label of 76", sel(`,"option_groups":[{"label":{"type":"plain_text","text":"` + long(76) + `"},"options":[` + opts(2) + `]}]`), "invalid_blocks"},
		{"select option with a url", sel(`,"options":[{"text":{"type":"plain_text","text":"a"},"value":"a","url":"https://example.com"}]`), "invalid_blocks"},
		{"placeholder of 150", sel(`,"placeholder":{"type":"plain_text","text":"` + long(150) + `"},"options":[` + opts(2) + `]`), ""},
		{"placeholder of 151", sel(`,"placeholder":{"type":"plain_text","text":"` + long(151) + `"},"options":[` + opts(2) + `]`), "invalid_blocks"},
		{"initial option among the options", sel(`,"options":[` + opts(2) + `],"initial_option":` + opt("o", "vx")), ""},
		{"initial option not among them", sel(`,"options":[` + opts(2) + `],"initial_option":` + opt("o", "nope")), "invalid_blocks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{}
			base := serve(t, s)
			out, got := bot(t, base, "chat.postMessage", map[string]string{"channel": "C1", "text": "plan", "blocks": tt.blocks})
			if got != tt.want {
				t.Fatalf("got %q, want %q (violations %q)", got, tt.want, s.Violations())
			}
			if tt.want == "" {
				return
			}
			md, _ := out["response_metadata"].(map[string]any)
			msgs, _ := md["messages"].([]any)
			if v := s.Violations(); len(msgs) != 1 || len(v) != 1 || !strings.HasPrefix(msgs[0].(string), "[ERROR] block 0") ||
				!strings.HasSuffix(v[0], strings.TrimPrefix(msgs[0].(string), "[ERROR] ")) {
				t.Errorf("answer %v and violations %q: want the reason in response_metadata.messages and the violation", out, v)
			}
		})
	}
}

func TestOverflow(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	thread := "1700000000.000100"
	s.Push("Ev1", map[string]any{"type": "app_mention", "user": "U1", "text": "<@UBOT> plan", "ts": thread, "channel": "C1"})
	out, code := bot(t, base, "chat.postMessage", map[string]string{"channel": "C1", "thread_ts": thread, "text": "plan", "blocks": planRows(t)})
	if code != "" {
		t.Fatal(code)
	}
	ts := out["ts"].(string)
	p := s.Overflow("U2", "C1", ts, "item", "skip:2")
	if p == nil {
		t.Fatal("no payload for an option of the second row's menu")
	}
	cb := decode(t, p)
	if cb.Type != slack.InteractionTypeBlockActions || cb.User.ID != "U2" || cb.TriggerID == "" || cb.Channel.ID != "C1" ||
		!strings.HasPrefix(cb.ResponseURL, base+"/actions/T1/") {
		t.Errorf("payload header %+v", cb)
	}
	if c := cb.Container; c.Type != "message" || c.MessageTs != ts || c.ChannelID != "C1" || c.ThreadTs != thread {
		t.Errorf("container %+v", c)
	}
	if m := cb.Message; m.Timestamp != ts || m.BotID != "B1" || len(m.Blocks.BlockSet) != 3 {
		t.Errorf("message %s by %s with %d blocks", m.Timestamp, m.BotID, len(m.Blocks.BlockSet))
	}
	acts := cb.ActionCallback.BlockActions
	if len(acts) != 1 || acts[0].Type != "overflow" || acts[0].ActionID != "item" || acts[0].BlockID != "item-2" || acts[0].ActionTs == "" ||
		acts[0].SelectedOption.Value != "skip:2" || acts[0].SelectedOption.Text == nil || acts[0].SelectedOption.Text.Text != "Skip" {
		t.Errorf("actions %+v", acts)
	}
	if acts := decode(t, s.Overflow("U2", "C1", ts, "item", "add:1")).ActionCallback.BlockActions; len(acts) != 1 || acts[0].BlockID != "item-1" {
		t.Errorf("an option of the first row: %+v", acts)
	}
	for _, tt := range []struct{ name, channel, ts, action, value string }{
		{"no such action_id", "C1", ts, "menu", "skip:2"},
		{"no such value", "C1", ts, "item", "skip:3"},
		{"an empty value", "C1", ts, "item", ""},
		{"no such message", "C1", "1700000000.999999", "item", "skip:2"},
		{"a user's message", "C1", thread, "item", "skip:2"},
	} {
		if p := s.Overflow("U3", tt.channel, tt.ts, tt.action, tt.value); p != nil {
			t.Errorf("%s: got a payload %v, want nil", tt.name, p)
		}
	}
	// The plan edited without the second row has nothing there to pick.
	edited := blocksJSON(t, slack.NewSectionBlock(mrkdwn("⬜ Read"), nil,
		slack.NewAccessory(slack.NewOverflowBlockElement("item", option("Skip", "skip:1"), option("Add after", "add:1"))),
		slack.SectionBlockOptionBlockID("item-1")))
	if _, code := bot(t, base, "chat.update", map[string]string{"channel": "C1", "ts": ts, "text": "plan", "blocks": edited}); code != "" {
		t.Fatal(code)
	}
	if p := s.Overflow("U2", "C1", ts, "item", "skip:2"); p != nil {
		t.Error("an option the update removed can still be picked")
	}
	if p := s.BlockActions("U2", "C1", ts, "item"); p != nil {
		t.Error("BlockActions clicked an overflow menu as a button")
	}

	c := open(t, base)
	c.next()
	id, err := s.PushInteraction(s.Overflow("U2", "C1", ts, "item", "add:1"))
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]any
	for env == nil || env["type"] == "events_api" {
		env = c.next()
	}
	pl, _ := env["payload"].(map[string]any)
	acts2, _ := pl["actions"].([]any)
	if env["envelope_id"] != id || env["type"] != "interactive" || len(acts2) != 1 || acts2[0].(map[string]any)["type"] != "overflow" {
		t.Errorf("envelope %v", env)
	}
}

func TestStaticSelect(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	blocks := blocksJSON(t, slack.NewActionBlock("steer",
		slack.NewOptionsSelectBlockElement(slack.OptTypeStatic, plain("Change an item"), "change",
			option("Skip 1", "skip:1"), option("Reopen 2", "reopen:2"))))
	out, code := bot(t, base, "chat.postMessage", map[string]string{"channel": "C1", "text": "plan", "blocks": blocks})
	if code != "" {
		t.Fatal(code)
	}
	ts := out["ts"].(string)
	cb := decode(t, s.StaticSelect("U2", "C1", ts, "change", "reopen:2"))
	acts := cb.ActionCallback.BlockActions
	if len(acts) != 1 || acts[0].Type != "static_select" || acts[0].BlockID != "steer" || acts[0].SelectedOption.Value != "reopen:2" {
		t.Errorf("actions %+v", acts)
	}
	if st := cb.BlockActionState; st == nil || st.Values["steer"]["change"].SelectedOption.Value != "reopen:2" {
		t.Errorf("state %+v, want the select's new option", cb.BlockActionState)
	}
	if p := s.StaticSelect("U2", "C1", ts, "change", "skip:9"); p != nil {
		t.Error("a value the select does not offer")
	}
	if p := s.Overflow("U2", "C1", ts, "change", "skip:1"); p != nil {
		t.Error("Overflow picked from a static_select")
	}
}
