package fakediscord

import (
	"slices"
	"strings"
	"testing"
)

func text(content string) map[string]any { return map[string]any{"type": 10, "content": content} }

func container(children ...any) map[string]any {
	return map[string]any{"type": 17, "accent_color": 0x2457c5, "components": children}
}

func separator() map[string]any { return map[string]any{"type": 14, "divider": true, "spacing": 1} }

// planV2 is a body like pinplan's plan: a container with the items, a
// separator, the footer and the Stop button.
func planV2(children ...any) map[string]any {
	if len(children) == 0 {
		children = []any{text("### Plan · 0/1 done\n⬜ a"), separator(), text("-# revision 1"), row(btn("Stop", "stop", 4))}
	}
	return map[string]any{"flags": flagComponentsV2, "components": []any{container(children...)}}
}

func with(body map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range body {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

func texts(n int, each string) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = text(each)
	}
	return out
}

func TestComponentsV2Rules(t *testing.T) {
	buttons := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = btn("b", "id"+strings.Repeat("x", i), 2)
		}
		return out
	}
	section := func(accessory any) map[string]any {
		s := map[string]any{"type": 9, "components": []any{text("a")}}
		if accessory != nil {
			s["accessory"] = accessory
		}
		return s
	}
	embed := []any{map[string]any{"title": "t"}}
	tests := []struct {
		name string
		body map[string]any
		ok   bool
		want string // in the refusal
	}{
		{"the plan container", planV2(), true, ""},
		{"empty content alongside", with(planV2(), "content", ""), true, ""},
		{"null content and embeds", with(planV2(), "content", nil, "embeds", nil), true, ""},
		{"content", with(planV2(), "content", "x"), false, legacyWithV2Field},
		{"embeds", with(planV2(), "embeds", embed), false, legacyWithV2Field},
		{"stickers", with(planV2(), "sticker_ids", []any{"1"}), false, legacyWithV2Field},
		{"a poll", with(planV2(), "poll", map[string]any{"question": map[string]any{"text": "?"}}), false, legacyWithV2Field},
		{"V2 components without the flag", map[string]any{"components": planV2()["components"]}, false, "must be one of (1,)"},
		{"text display at the top", map[string]any{"flags": flagComponentsV2, "components": []any{text("hello")}}, true, ""},
		{"an unknown type", map[string]any{"flags": flagComponentsV2, "components": []any{map[string]any{"type": 99}}}, false, "UNION_TYPE_CHOICES"},
		{"a container in a container", planV2(container(text("a"))), false, "UNION_TYPE_CHOICES"},
		{"a button loose in a container", planV2(text("a"), btn("Stop", "stop", 4)), false, "UNION_TYPE_CHOICES"},
		{"a container without children", map[string]any{"flags": flagComponentsV2, "components": []any{container()}}, false, "BASE_TYPE_MIN_LENGTH"},
		{"an empty text display", planV2(text("")), false, "BASE_TYPE_REQUIRED"},
		{"a text display without content", planV2(map[string]any{"type": 10}), false, "BASE_TYPE_REQUIRED"},
		{"custom_id of 100", planV2(text("a"), row(btn("Stop", strings.Repeat("c", 100), 4))), true, ""},
		{"custom_id of 101", planV2(text("a"), row(btn("Stop", strings.Repeat("c", 101), 4))), false, "BASE_TYPE_MAX_LENGTH"},
		{"5 buttons in a row", planV2(text("a"), row(buttons(5)...)), true, ""},
		{"6 buttons in a row", planV2(text("a"), row(buttons(6)...)), false, "BASE_TYPE_BAD_LENGTH"},
		{"an empty row", planV2(text("a"), row()), false, "BASE_TYPE_BAD_LENGTH"},
		{"duplicate custom_id across rows", planV2(row(btn("a", "same", 1)), row(btn("b", "same", 2))), false, "COMPONENT_CUSTOM_ID_DUPLICATED"},
		{"spacing 3", planV2(text("a"), map[string]any{"type": 14, "spacing": 3}), false, "BASE_TYPE_CHOICES"},
		{"accent colour past 0xFFFFFF", map[string]any{"flags": flagComponentsV2, "components": []any{with(container(text("a")), "accent_color", 0x1000000)}}, false, "accent_color"},
		{"no accent colour", map[string]any{"flags": flagComponentsV2, "components": []any{with(container(text("a")), "accent_color", nil)}}, true, ""},
		{"a section with a button", planV2(section(btn("Stop", "stop", 4))), true, ""},
		{"a section without an accessory", planV2(section(nil)), false, "accessory"},
		{"40 components", planV2(texts(39, "a")...), true, ""},
		{"41 components", planV2(texts(40, "a")...), false, "COMPONENT_MAX_TOTAL_EXCEEDED"},
		{"41 with the buttons counted", planV2(append(texts(34, "a"), row(buttons(5)...))...), false, "COMPONENT_MAX_TOTAL_EXCEEDED"},
		{"4000 characters of text", planV2(text(strings.Repeat("é", 2000)), text(strings.Repeat("é", 2000))), true, ""},
		{"4001 characters of text", planV2(text(strings.Repeat("é", 2000)), text(strings.Repeat("é", 2001))), false, "COMPONENT_MAX_TEXT_LENGTH_EXCEEDED"},
		{"button labels count as text", planV2(text(strings.Repeat("a", 3998)), row(btn("Stop", "stop", 4))), false, "COMPONENT_MAX_TEXT_LENGTH_EXCEEDED"},
		{"emoji count twice (UTF-16)", planV2(text(strings.Repeat("✅", 2000)), text(strings.Repeat("🔥", 1001))), false, "COMPONENT_MAX_TEXT_LENGTH_EXCEEDED"},
		{"flags not a number", with(planV2(), "flags", "v2"), false, "flags"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{}
			s.AddChannel("C1", 0, "G1")
			base := serve(t, s)
			id := postMsg(t, base, "C1", planV2())
			answers := []answer{rest(t, base, "POST", "channels/C1/messages", tt.body)}
			if _, ok := tt.body["flags"].(int); ok {
				// The same components as an edit of a V2 message.
				answers = append(answers, rest(t, base, "PATCH", "channels/C1/messages/"+id, tt.body))
			}
			for _, a := range answers {
				if tt.ok && a.status != 200 {
					t.Errorf("got %d %v, want 200", a.status, a.body)
				}
				if !tt.ok && (a.status != 400 || a.code() != codeInvalidForm) {
					t.Errorf("got %d %v, want 400 code 50035", a.status, a.body)
				}
			}
			v := s.Violations()
			if tt.ok {
				if len(v) > 0 {
					t.Errorf("violations %q for an accepted message", v)
				}
				if msgs := s.Messages("C1"); len(msgs) != 2 || !msgs[1].IsComponentsV2() && tt.body["flags"] != nil {
					t.Errorf("messages %+v, want the new V2 message", msgs)
				}
				return
			}
			if len(v) != len(answers) || !strings.Contains(v[0], tt.want) {
				t.Errorf("violations %q, want %d naming %q", v, len(answers), tt.want)
			}
			if msgs := s.Messages("C1"); len(msgs) != 1 || msgs[0].Edits != 0 {
				t.Errorf("a refused request landed: %+v", msgs)
			}
		})
	}
}

// TestComponentsV2FlagStays: the flag cannot be removed and an edit of a
// V2 message cannot add content or embeds; an edit without flags keeps
// it; an embed message may become V2 only with its content and embeds
// cleared.
func TestComponentsV2FlagStays(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	base := serve(t, s)
	id := postMsg(t, base, "C1", planV2())
	path := "channels/C1/messages/" + id
	refused := []struct {
		name string
		body map[string]any
		want string
	}{
		{"flags 0", map[string]any{"flags": 0, "components": planV2()["components"]}, "MESSAGE_CANNOT_REMOVE_COMPONENTS_V2_FLAG"},
		{"SUPPRESS_EMBEDS alone", map[string]any{"flags": flagSuppressEmbeds}, "MESSAGE_CANNOT_REMOVE_COMPONENTS_V2_FLAG"},
		{"content without flags", map[string]any{"content": "x"}, legacyWithV2Field},
		{"embeds without flags", map[string]any{"embeds": []any{map[string]any{"title": "t"}}}, legacyWithV2Field},
		{"an empty container", map[string]any{"components": []any{container()}}, "BASE_TYPE_MIN_LENGTH"},
	}
	for _, tt := range refused {
		if a := rest(t, base, "PATCH", path, tt.body); a.status != 400 || a.code() != codeInvalidForm || !strings.Contains(strings.Join(s.Violations(), "\n"), tt.want) {
			t.Errorf("%s: %d %v, want 400 50035 %s", tt.name, a.status, a.body, tt.want)
		}
	}
	if a := rest(t, base, "PATCH", path, map[string]any{"components": planV2(text("edited"))["components"]}); a.status != 200 || a.field("flags") != float64(flagComponentsV2) {
		t.Errorf("an edit without flags: %d %v, want 200 and the flag kept", a.status, a.body)
	}
	m := s.Messages("C1")[0]
	if !m.IsComponentsV2() || m.Edits != 1 || !slices.Equal(m.TextDisplays(), []string{"edited"}) {
		t.Errorf("message flags %d, %d edits, texts %q", m.Flags, m.Edits, m.TextDisplays())
	}

	// An embed message becomes V2 only with its embeds cleared.
	old := postMsg(t, base, "C1", map[string]any{"embeds": []any{map[string]any{"title": "t"}}})
	upgrade := planV2()
	if a := rest(t, base, "PATCH", "channels/C1/messages/"+old, upgrade); a.status != 400 || a.code() != codeInvalidForm {
		t.Errorf("the flag set with the embed kept: %d %v, want 400 50035", a.status, a.body)
	}
	if a := rest(t, base, "PATCH", "channels/C1/messages/"+old, with(upgrade, "embeds", nil)); a.status != 200 || a.field("flags") != float64(flagComponentsV2) {
		t.Errorf("the flag set with embeds: null: %d %v, want 200", a.status, a.body)
	}
}

// TestRefuseComponentsV2: the switch refuses new V2 messages as Discord
// refuses components it does not take, and nothing else.
func TestRefuseComponentsV2(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	base := serve(t, s)
	id := postMsg(t, base, "C1", planV2())
	s.RefuseComponentsV2(true)
	a := rest(t, base, "POST", "channels/C1/messages", planV2())
	errs, _ := a.field("errors").(map[string]any)
	if a.status != 400 || a.code() != codeInvalidForm || errs["components.0.type"] == nil {
		t.Errorf("a V2 post: %d %v, want 400 50035 on components.0.type", a.status, a.body)
	}
	if a := rest(t, base, "PATCH", "channels/C1/messages/"+id, planV2(text("still V2"))); a.status != 200 {
		t.Errorf("an edit of a V2 message: %d %v, want 200", a.status, a.body)
	}
	postMsg(t, base, "C1", map[string]any{"embeds": []any{map[string]any{"title": "t"}}})
	s.RefuseComponentsV2(false)
	postMsg(t, base, "C1", planV2())
	calls := s.Calls("POST channels/C1/messages")
	if len(calls) != 4 || calls[1].Status != 400 || calls[1].Code != codeInvalidForm {
		t.Errorf("posts %+v, want the second refused with 50035", calls)
	}
}

// TestClickInContainer: a button inside a container can be clicked; the
// update keeps the flag, and one that removes it is refused.
func TestClickInContainer(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	base := serve(t, s)
	g := dialGateway(t, base)
	g.identify(allIntents)
	g.dispatch("GUILD_CREATE")
	plan := postMsg(t, base, "C1", planV2())
	g.dispatch("MESSAGE_CREATE")
	id, err := s.Click("C1", plan, "111", "stop")
	if err != nil {
		t.Fatal(err)
	}
	ev := g.dispatch("INTERACTION_CREATE")["d"].(map[string]any)
	if msg := ev["message"].(map[string]any); msg["flags"] != float64(flagComponentsV2) {
		t.Errorf("the clicked message's flags %v, want IS_COMPONENTS_V2", msg["flags"])
	}
	token := ev["token"].(string)
	drop := map[string]any{"type": 7, "data": map[string]any{"flags": 0, "components": planV2(text("stopped"))["components"]}}
	if a := callback(t, base, id, token, drop); a.status != 400 || a.code() != codeInvalidForm {
		t.Errorf("an update without the flag: %d %v, want 400 50035", a.status, a.body)
	}
	keep := map[string]any{"type": 7, "data": map[string]any{"flags": flagComponentsV2, "components": planV2(text("stopped"))["components"]}}
	if a := callback(t, base, id, token, keep); a.status != 204 {
		t.Errorf("a V2 update: %d %v, want 204", a.status, a.body)
	}
	m := s.Messages("C1")[0]
	if !m.IsComponentsV2() || len(m.CustomIDs()) != 0 || !slices.Equal(m.TextDisplays(), []string{"stopped"}) || m.ComponentCount() != 2 {
		t.Errorf("after the update: flags %d, ids %q, texts %q, %d components", m.Flags, m.CustomIDs(), m.TextDisplays(), m.ComponentCount())
	}
	if _, err := s.Click("C1", plan, "111", "stop"); err == nil {
		t.Error("the removed button can still be clicked")
	}
}
