package fakediscord

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
)

func opt(label, value string) map[string]any { return map[string]any{"label": label, "value": value} }

// stringSelect is a string select with customID and options, changed by
// kv pairs.
func stringSelect(customID string, options []any, kv ...any) map[string]any {
	return with(map[string]any{"type": 3, "custom_id": customID, "options": options}, kv...)
}

func opts(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = opt(fmt.Sprint("item ", i+1), fmt.Sprint("skip:", i+1))
	}
	return out
}

// steerPlan is a plan like pinplan's with the steering select under the
// items and the Stop button.
func steerPlan(sel map[string]any) map[string]any { return steerRow(row(sel)) }

// steerRow is steerPlan with the row r for the select's.
func steerRow(r map[string]any) map[string]any {
	return planV2(text("### Plan · 0/2 done\n⬜ a\n⬜ b"), r, separator(), text("-# revision 1"), row(btn("Stop", "stop", 4)))
}

func TestStringSelectRules(t *testing.T) {
	long := func(n int) string { return strings.Repeat("é", n) }
	dg, _ := json.Marshal(discordgo.ActionsRow{Components: []discordgo.MessageComponent{discordgo.SelectMenu{CustomID: "steer",
		Options: []discordgo.SelectMenuOption{{Label: "Skip 1", Value: "skip:1"}, {Label: "Reopen 2", Value: "reopen:2"}}}}})
	var dgRow map[string]any
	json.Unmarshal(dg, &dgRow)
	tests := []struct {
		name  string
		body  map[string]any
		field string // the field the refusal names, "" for an accepted body
	}{
		{"the steering select in the container", steerPlan(stringSelect("steer", opts(2))), ""},
		{"as discordgo sends it", planV2(text("a"), dgRow), ""},
		{"at the top of a V2 message", map[string]any{"flags": flagComponentsV2, "components": []any{text("a"), row(stringSelect("steer", opts(2)))}}, ""},
		{"in a message with content", map[string]any{"content": "plan", "components": []any{row(stringSelect("steer", opts(2)))}}, ""},
		{"25 options", steerPlan(stringSelect("steer", opts(25))), ""},
		{"26 options", steerPlan(stringSelect("steer", opts(26))), "components.0.components.1.components.0.options"},
		{"no options", steerPlan(stringSelect("steer", []any{})), "components.0.components.1.components.0.options"},
		{"label of 100", steerPlan(stringSelect("steer", []any{opt(long(100), "a")})), ""},
		{"label of 101", steerPlan(stringSelect("steer", []any{opt(long(101), "a")})), "components.0.components.1.components.0.options.0.label"},
		{"no label", steerPlan(stringSelect("steer", []any{map[string]any{"value": "a"}})), "components.0.components.1.components.0.options.0.label"},
		{"value of 100", steerPlan(stringSelect("steer", []any{opt("a", long(100))})), ""},
		{"value of 101", steerPlan(stringSelect("steer", []any{opt("a", long(101))})), "components.0.components.1.components.0.options.0.value"},
		{"no value", steerPlan(stringSelect("steer", []any{map[string]any{"label": "a"}})), "components.0.components.1.components.0.options.0.value"},
		{"description of 101", steerPlan(stringSelect("steer", []any{with(opt("a", "a"), "description", long(101))})), "components.0.components.1.components.0.options.0.description"},
		{"duplicate values", steerPlan(stringSelect("steer", []any{opt("a", "x"), opt("b", "x")})), "components.0.components.1.components.0.options.1.value"},
		{"placeholder of 150", steerPlan(stringSelect("steer", opts(2), "placeholder", long(150))), ""},
		{"placeholder of 151", steerPlan(stringSelect("steer", opts(2), "placeholder", long(151))), "components.0.components.1.components.0.placeholder"},
		{"custom_id of 100", steerPlan(stringSelect(long(100), opts(2))), ""},
		{"custom_id of 101", steerPlan(stringSelect(long(101), opts(2))), "components.0.components.1.components.0.custom_id"},
		{"no custom_id", steerPlan(stringSelect("", opts(2))), "components.0.components.1.components.0.custom_id"},
		{"the Stop button's custom_id", steerPlan(stringSelect("stop", opts(2))), "components.0.components.4.components.0.custom_id"},
		{"min_values 0 and max_values 2", steerPlan(stringSelect("steer", opts(2), "min_values", 0, "max_values", 2)), ""},
		{"min_values 26", steerPlan(stringSelect("steer", opts(25), "min_values", 26, "max_values", 25)), "components.0.components.1.components.0.min_values"},
		{"min_values -1", steerPlan(stringSelect("steer", opts(2), "min_values", -1)), "components.0.components.1.components.0.min_values"},
		{"max_values 0", steerPlan(stringSelect("steer", opts(2), "max_values", 0)), "components.0.components.1.components.0.max_values"},
		{"max_values 26", steerPlan(stringSelect("steer", opts(25), "max_values", 26)), "components.0.components.1.components.0.max_values"},
		{"min_values over max_values", steerPlan(stringSelect("steer", opts(3), "min_values", 3, "max_values", 2)), "components.0.components.1.components.0.min_values"},
		{"min_values over the default max", steerPlan(stringSelect("steer", opts(3), "min_values", 2)), "components.0.components.1.components.0.min_values"},
		{"max_values over the options", steerPlan(stringSelect("steer", opts(2), "max_values", 3)), "components.0.components.1.components.0.max_values"},
		{"a select beside a button", steerRow(row(stringSelect("steer", opts(2)), btn("Go", "go", 1))), "components.0.components.1.components.0"},
		{"two selects in a row", steerRow(row(stringSelect("a", opts(2)), stringSelect("b", opts(2)))), "components.0.components.1.components.0"},
		{"a select loose in a container", planV2(text("a"), stringSelect("steer", opts(2))), "components.0.components.1.type"},
		{"40 components with the select", planV2(append(texts(37, "a"), row(stringSelect("steer", opts(25))))...), ""},
		{"41 components with the select", planV2(append(texts(38, "a"), row(stringSelect("steer", opts(25))))...), "components"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{}
			s.AddChannel("C1", 0, "G1")
			base := serve(t, s)
			a := rest(t, base, "POST", "channels/C1/messages", tt.body)
			if tt.field == "" {
				if a.status != 200 || len(s.Violations()) > 0 {
					t.Fatalf("got %d %v (violations %q), want 200", a.status, a.body, s.Violations())
				}
				return
			}
			errs, _ := a.field("errors").(map[string]any)
			if a.status != 400 || a.code() != codeInvalidForm || errs[tt.field] == nil {
				t.Errorf("got %d %v, want 400 code 50035 naming %s", a.status, a.body, tt.field)
			}
			if v := s.Violations(); len(v) != 1 || len(s.Messages("C1")) != 0 {
				t.Errorf("violations %q, messages %+v", v, s.Messages("C1"))
			}
		})
	}
}

func TestSelect(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	s.AddChannel("C2", 0, "G1")
	base := serve(t, s)
	g := dialGateway(t, base)
	g.identify(allIntents)
	g.dispatch("GUILD_CREATE")
	multi := stringSelect("reopen", opts(3), "min_values", 1, "max_values", 2, "id", 7)
	plan := postMsg(t, base, "C1", planV2(text("a"), row(stringSelect("steer", opts(2))), row(multi),
		row(with(stringSelect("off", opts(2)), "disabled", true)), row(btn("Stop", "stop", 4))))
	g.dispatch("MESSAGE_CREATE")

	id, err := s.Select("C1", plan, "111", "steer", "skip:2")
	if err != nil {
		t.Fatal(err)
	}
	ev := g.dispatch("INTERACTION_CREATE")["d"].(map[string]any)
	data, _ := ev["data"].(map[string]any)
	member, _ := ev["member"].(map[string]any)
	user, _ := member["user"].(map[string]any)
	msg, _ := ev["message"].(map[string]any)
	if ev["id"] != id || ev["type"] != 3.0 || ev["token"] == "" || ev["channel_id"] != "C1" || ev["guild_id"] != "G1" || ev["app_permissions"] == nil {
		t.Errorf("interaction %v", ev)
	}
	if data["custom_id"] != "steer" || data["component_type"] != 3.0 || fmt.Sprint(data["values"]) != "[skip:2]" {
		t.Errorf("data %v", data)
	}
	if user["id"] != "111" || msg["id"] != plan || msg["flags"] != float64(flagComponentsV2) {
		t.Errorf("member %v, message %v", member, msg)
	}
	if _, err := s.Select("C1", plan, "111", "reopen", "skip:1", "skip:3"); err != nil {
		t.Errorf("two values of a select taking 1 to 2: %v", err)
	}
	if data := g.dispatch("INTERACTION_CREATE")["d"].(map[string]any)["data"].(map[string]any); fmt.Sprint(data["values"]) != "[skip:1 skip:3]" || data["id"] != 7.0 {
		t.Errorf("data %v", data)
	}

	for _, tt := range []struct {
		name, channel, message, customID string
		values                           []string
	}{
		{"unknown custom_id", "C1", plan, "pick", []string{"skip:1"}},
		{"a value not offered", "C1", plan, "steer", []string{"skip:9"}},
		{"two values of a single select", "C1", plan, "steer", []string{"skip:1", "skip:2"}},
		{"no value", "C1", plan, "steer", nil},
		{"three values of a select taking 2", "C1", plan, "reopen", []string{"skip:1", "skip:2", "skip:3"}},
		{"a value twice", "C1", plan, "reopen", []string{"skip:1", "skip:1"}},
		{"a disabled select", "C1", plan, "off", []string{"skip:1"}},
		{"a button", "C1", plan, "stop", []string{"skip:1"}},
		{"unknown message", "C1", "42", "steer", []string{"skip:1"}},
		{"wrong channel", "C2", plan, "steer", []string{"skip:1"}},
	} {
		if _, err := s.Select(tt.channel, tt.message, "111", tt.customID, tt.values...); !errors.Is(err, ErrNoSelect) {
			t.Errorf("%s: got %v, want ErrNoSelect", tt.name, err)
		}
	}
	if _, err := s.Click("C1", plan, "111", "steer"); !errors.Is(err, ErrNoButton) {
		t.Errorf("a click on a select: %v, want ErrNoButton", err)
	}

	token := ev["token"].(string)
	upd := map[string]any{"type": 7, "data": map[string]any{"flags": flagComponentsV2, "components": planV2(text("b skipped by <@111>"))["components"]}}
	if a := callback(t, base, id, token, upd); a.status != 204 {
		t.Fatalf("update: %d %v", a.status, a.body)
	}
	if _, err := s.Select("C1", plan, "111", "steer", "skip:1"); !errors.Is(err, ErrNoSelect) {
		t.Errorf("a select the update removed: %v", err)
	}
	if rs := s.Responses(id); len(rs) != 1 || rs[0].Type != 7 || rs[0].Status != 204 {
		t.Errorf("responses %+v", rs)
	}
}

// TestDiscordgoSelectAndModal runs the steering round with discordgo: the
// plan's select, a modal with a text input opened from it, the
// submission decoded and answered by updating the plan.
func TestDiscordgoSelectAndModal(t *testing.T) {
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
	got := make(chan *discordgo.Interaction, 2)
	dg.AddHandler(func(_ *discordgo.Session, i *discordgo.InteractionCreate) { got <- i.Interaction })
	if err := dg.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dg.Close() })
	waitUntil(t, "discordgo to connect", func() bool { return s.Connected() == 1 })
	plan, err := dg.ChannelMessageSendComplex("C1", &discordgo.MessageSend{Flags: discordgo.MessageFlagsIsComponentsV2,
		Components: []discordgo.MessageComponent{discordgo.Container{Components: []discordgo.MessageComponent{
			discordgo.TextDisplay{Content: "### Plan · 0/2 done\n⬜ a\n⬜ b"},
			discordgo.ActionsRow{Components: []discordgo.MessageComponent{discordgo.SelectMenu{CustomID: "steer", Placeholder: "Change the plan",
				Options: []discordgo.SelectMenuOption{{Label: "Skip 1. a", Value: "skip:1"}, {Label: "Add after 2. b", Value: "add:2"}}}}},
		}}}})
	if err != nil {
		t.Fatalf("post the plan: %v", err)
	}
	next := func() *discordgo.Interaction {
		t.Helper()
		select {
		case in := <-got:
			return in
		case <-time.After(5 * time.Second):
			t.Fatal("no INTERACTION_CREATE")
		}
		return nil
	}
	if _, err := s.Select("C1", plan.ID, "111", "steer", "add:2"); err != nil {
		t.Fatal(err)
	}
	in := next()
	if d := in.MessageComponentData(); in.Type != discordgo.InteractionMessageComponent || d.ComponentType != discordgo.SelectMenuComponent ||
		d.CustomID != "steer" || !slices.Equal(d.Values, []string{"add:2"}) || in.Message == nil || in.Message.ID != plan.ID {
		t.Fatalf("select interaction %+v", in)
	}
	err = dg.InteractionRespond(in, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseModal, Data: &discordgo.InteractionResponseData{
		CustomID: "add:2", Title: "Add after 2. b",
		Components: []discordgo.MessageComponent{discordgo.ActionsRow{Components: []discordgo.MessageComponent{
			discordgo.TextInput{CustomID: "text", Label: "New item", Style: discordgo.TextInputShort, Required: true, MaxLength: 200},
		}}}}})
	if err != nil {
		t.Fatalf("modal: %v", err)
	}
	if md, ok := s.OpenModal("111"); !ok || md.CustomID != "add:2" || md.Message != plan.ID || md.Interaction != in.ID {
		t.Fatalf("open modal %+v %v", md, ok)
	}
	if _, err := s.SubmitModal("111", "add:2", map[string]string{"text": "Deploy to staging"}); err != nil {
		t.Fatal(err)
	}
	sub := next()
	d := sub.ModalSubmitData()
	if sub.Type != discordgo.InteractionModalSubmit || d.CustomID != "add:2" || len(d.Components) != 1 || sub.Member == nil || sub.Member.User.ID != "111" {
		t.Fatalf("submission %+v", sub)
	}
	r, _ := d.Components[0].(*discordgo.ActionsRow)
	if r == nil || len(r.Components) != 1 || r.Components[0].(*discordgo.TextInput).CustomID != "text" || r.Components[0].(*discordgo.TextInput).Value != "Deploy to staging" {
		t.Fatalf("submitted components %+v", d.Components)
	}
	err = dg.InteractionRespond(sub, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseUpdateMessage, Data: &discordgo.InteractionResponseData{
		Flags: discordgo.MessageFlagsIsComponentsV2, Components: []discordgo.MessageComponent{discordgo.Container{Components: []discordgo.MessageComponent{
			discordgo.TextDisplay{Content: "### Plan · 0/3 done\n⬜ a\n⬜ b\n⬜ Deploy to staging\n↳ added by <@111>"}}}}}})
	if err != nil {
		t.Fatalf("update from the submission: %v", err)
	}
	if m := s.Messages("C1")[0]; m.Edits != 1 || !strings.Contains(strings.Join(m.TextDisplays(), "\n"), "Deploy to staging") {
		t.Errorf("the plan after the submission %+v", m)
	}
	if _, ok := s.OpenModal("111"); ok {
		t.Error("the modal is still open after its submission was answered")
	}
	if v := s.Violations(); len(v) > 0 {
		t.Errorf("violations %q", v)
	}
}
