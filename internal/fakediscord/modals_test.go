package fakediscord

import (
	"errors"
	"strings"
	"testing"
)

// textInput is a short text input with customID, changed by kv pairs.
func textInput(customID string, kv ...any) map[string]any {
	return with(map[string]any{"type": 4, "custom_id": customID, "style": 1, "label": "New item"}, kv...)
}

func label(l string, c map[string]any) map[string]any {
	return map[string]any{"type": 18, "label": l, "component": c}
}

// addModal is the MODAL callback that adds an item after item 2.
func addModal(components ...any) map[string]any {
	if len(components) == 0 {
		components = []any{row(textInput("text", "max_length", 200)), row(textInput("why", "style", 2, "label", "Why", "required", false))}
	}
	return map[string]any{"type": 9, "data": map[string]any{"custom_id": "add:2", "title": "Add after 2. b", "components": components}}
}

// modalData is addModal's data changed by kv pairs.
func modalData(kv ...any) map[string]any {
	return map[string]any{"type": 9, "data": with(addModal()["data"].(map[string]any), kv...)}
}

// picked has 111 pick add:2 in the steering select of a plan in C1 and
// returns the interaction's id and token.
func picked(t *testing.T, s *Server, g *gw, plan string) (id, token string) {
	t.Helper()
	id, err := s.Select("C1", plan, "111", "steer", "add:2")
	if err != nil {
		t.Fatal(err)
	}
	return id, g.dispatch("INTERACTION_CREATE")["d"].(map[string]any)["token"].(string)
}

// steerSetup serves s with C1, a gateway client and a plan with the
// steering select.
func steerSetup(t *testing.T, s *Server) (base string, g *gw, plan string) {
	t.Helper()
	s.AddChannel("C1", 0, "G1")
	base = serve(t, s)
	g = dialGateway(t, base)
	g.identify(allIntents)
	g.dispatch("GUILD_CREATE")
	plan = postMsg(t, base, "C1", steerPlan(stringSelect("steer", []any{opt("Skip 1", "skip:1"), opt("Add after 2", "add:2")})))
	g.dispatch("MESSAGE_CREATE")
	return base, g, plan
}

func TestModalRules(t *testing.T) {
	long := func(n int) string { return strings.Repeat("é", n) }
	five := []any{row(textInput("a")), row(textInput("b")), row(textInput("c")), row(textInput("d")), row(textInput("e"))}
	tests := []struct {
		name  string
		body  map[string]any
		field string // the field the refusal names, "" for a modal Discord shows
	}{
		{"the add modal", addModal(), ""},
		{"title of 45", modalData("title", long(45)), ""},
		{"title of 46", modalData("title", long(46)), "data.title"},
		{"no title", modalData("title", ""), "data.title"},
		{"custom_id of 100", modalData("custom_id", long(100)), ""},
		{"custom_id of 101", modalData("custom_id", long(101)), "data.custom_id"},
		{"no custom_id", modalData("custom_id", nil), "data.custom_id"},
		{"5 components", addModal(five...), ""},
		{"6 components", addModal(append(five, row(textInput("f")))...), "data.components"},
		{"no components", modalData("components", []any{}), "data.components"},
		{"style 3", addModal(row(textInput("text", "style", 3))), "data.components.0.components.0.style"},
		{"input label of 45", addModal(row(textInput("text", "label", long(45)))), ""},
		{"input label of 46", addModal(row(textInput("text", "label", long(46)))), "data.components.0.components.0.label"},
		{"an input in a row without a label", addModal(row(textInput("text", "label", ""))), "data.components.0.components.0.label"},
		{"min_length 4000, max_length 4000", addModal(row(textInput("text", "min_length", 4000, "max_length", 4000))), ""},
		{"min_length 4001", addModal(row(textInput("text", "min_length", 4001))), "data.components.0.components.0.min_length"},
		{"max_length 4001", addModal(row(textInput("text", "max_length", 4001))), "data.components.0.components.0.max_length"},
		{"max_length 0", addModal(row(textInput("text", "max_length", 0))), "data.components.0.components.0.max_length"},
		{"min_length over max_length", addModal(row(textInput("text", "min_length", 10, "max_length", 5))), "data.components.0.components.0.min_length"},
		{"value of 4000", addModal(row(textInput("text", "value", long(4000)))), ""},
		{"value of 4001", addModal(row(textInput("text", "value", long(4001)))), "data.components.0.components.0.value"},
		{"placeholder of 101", addModal(row(textInput("text", "placeholder", long(101)))), "data.components.0.components.0.placeholder"},
		{"no custom_id on the input", addModal(row(textInput(""))), "data.components.0.components.0.custom_id"},
		{"two inputs in a row", addModal(row(textInput("a"), textInput("b"))), "data.components.0.components"},
		{"a button in a modal's row", addModal(row(btn("Go", "go", 1))), "data.components.0.components.0.type"},
		{"duplicate custom_id", addModal(row(textInput("text")), row(textInput("text"))), "data.components.1.components.0.custom_id"},
		{"a label around an input", addModal(label("New item", with(textInput("text"), "label", nil))), ""},
		{"a label of 46", addModal(label(long(46), textInput("text"))), "data.components.0.label"},
		{"a label without text", addModal(label("", textInput("text"))), "data.components.0.label"},
		{"a label's description of 101", addModal(with(label("New", textInput("text")), "description", long(101))), "data.components.0.description"},
		{"a label around a select", addModal(label("Where", stringSelect("where", opts(3)))), ""},
		{"a label around a disabled select", addModal(label("Where", stringSelect("where", opts(3), "disabled", true))), "data.components.0.component.disabled"},
		{"a label around a button", addModal(label("Go", btn("Go", "go", 1))), "data.components.0.component.type"},
		{"a text display", addModal(text("Adds an item after 2."), row(textInput("text"))), ""},
		{"a container", addModal(container(text("a"))), "data.components.0.type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{}
			base, g, plan := steerSetup(t, s)
			id, token := picked(t, s, g, plan)
			a := callback(t, base, id, token, tt.body)
			md, open := s.OpenModal("111")
			if tt.field == "" {
				if a.status != 204 || !open || md.CustomID != tt.body["data"].(map[string]any)["custom_id"] || len(s.Violations()) > 0 {
					t.Fatalf("got %d %v, modal %+v %v (violations %q), want 204 and the modal open", a.status, a.body, md, open, s.Violations())
				}
				return
			}
			errs, _ := a.field("errors").(map[string]any)
			if a.status != 400 || a.code() != codeInvalidForm || errs[tt.field] == nil {
				t.Errorf("got %d %v, want 400 code 50035 naming %s", a.status, a.body, tt.field)
			}
			if v := s.Violations(); open || len(v) != 1 {
				t.Errorf("modal open %v, violations %q", open, v)
			}
		})
	}
}

func TestSubmitModal(t *testing.T) {
	s := &Server{}
	base, g, plan := steerSetup(t, s)
	id, token := picked(t, s, g, plan)
	if a := callback(t, base, id, token, addModal()); a.status != 204 {
		t.Fatalf("modal: %d %v", a.status, a.body)
	}
	for _, tt := range []struct {
		name, user, modal string
		values            map[string]string
		want              error
	}{
		{"another user", "222", "add:2", map[string]string{"text": "x"}, ErrNoModal},
		{"another modal", "111", "add:1", map[string]string{"text": "x"}, ErrNoModal},
		{"an unknown input", "111", "add:2", map[string]string{"text": "x", "when": "now"}, ErrNotInModal},
		{"a required input left out", "111", "add:2", map[string]string{"why": "because"}, ErrNotInModal},
		{"a required input empty", "111", "add:2", map[string]string{"text": ""}, ErrNotInModal},
		{"over max_length", "111", "add:2", map[string]string{"text": strings.Repeat("x", 201)}, ErrNotInModal},
	} {
		if _, err := s.SubmitModal(tt.user, tt.modal, tt.values); !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}

	sub, err := s.SubmitModal("111", "add:2", map[string]string{"text": "Deploy to staging"})
	if err != nil {
		t.Fatal(err)
	}
	ev := g.dispatch("INTERACTION_CREATE")["d"].(map[string]any)
	data, _ := ev["data"].(map[string]any)
	comps, _ := data["components"].([]any)
	member, _ := ev["member"].(map[string]any)
	msg, _ := ev["message"].(map[string]any)
	if ev["id"] != sub || ev["type"] != 5.0 || ev["token"] == "" || ev["channel_id"] != "C1" || ev["guild_id"] != "G1" ||
		member["user"].(map[string]any)["id"] != "111" || msg["id"] != plan {
		t.Errorf("submission %v", ev)
	}
	if data["custom_id"] != "add:2" || len(comps) != 2 {
		t.Fatalf("data %v", data)
	}
	first := comps[0].(map[string]any)
	in := first["components"].([]any)[0].(map[string]any)
	second := comps[1].(map[string]any)["components"].([]any)[0].(map[string]any)
	if first["type"] != 1.0 || in["type"] != 4.0 || in["custom_id"] != "text" || in["value"] != "Deploy to staging" || second["custom_id"] != "why" || second["value"] != "" {
		t.Errorf("components %v", comps)
	}
	subToken := ev["token"].(string)
	if a := callback(t, base, sub, subToken, addModal()); a.status != 400 || a.code() != codeInvalidForm {
		t.Errorf("a modal answering a submission: %d %v, want 400 50035", a.status, a.body)
	}
	if _, open := s.OpenModal("111"); !open {
		t.Error("a refused answer closed the modal")
	}
	if a := callback(t, base, sub, subToken, map[string]any{"type": 6}); a.status != 204 {
		t.Errorf("a deferred update of the plan: %d %v", a.status, a.body)
	}
	if _, open := s.OpenModal("111"); open {
		t.Error("the modal is open after its submission was answered")
	}
	if _, err := s.SubmitModal("111", "add:2", map[string]string{"text": "again"}); !errors.Is(err, ErrNoModal) {
		t.Errorf("submitting a closed modal: %v", err)
	}
	if v := s.Violations(); len(v) != 1 || !strings.Contains(v[0], "INTERACTION_RESPONSE_TYPE_INVALID") {
		t.Errorf("violations %q, want the modal answering a submission", v)
	}

	t.Run("a command's modal", func(t *testing.T) {
		s := &Server{}
		s.AddChannel("C1", 0, "G1")
		base := serve(t, s)
		g := dialGateway(t, base)
		g.identify(allIntents)
		g.dispatch("GUILD_CREATE")
		registerPinplan(t, base)
		id, err := s.Command("C1", "111", "pinplan", "status", nil)
		if err != nil {
			t.Fatal(err)
		}
		token := g.dispatch("INTERACTION_CREATE")["d"].(map[string]any)["token"].(string)
		if a := callback(t, base, id, token, addModal(label("New item", with(textInput("text", "min_length", 3), "label", nil)),
			label("Where", stringSelect("where", opts(2))))); a.status != 204 {
			t.Fatalf("modal: %d %v", a.status, a.body)
		}
		if _, err := s.SubmitModal("111", "add:2", map[string]string{"text": "ab", "where": "skip:1"}); !errors.Is(err, ErrNotInModal) {
			t.Errorf("under min_length: %v", err)
		}
		if _, err := s.SubmitModal("111", "add:2", map[string]string{"text": "abc", "where": "skip:9"}); !errors.Is(err, ErrNotInModal) {
			t.Errorf("an option the select does not offer: %v", err)
		}
		sub, err := s.SubmitModal("111", "add:2", map[string]string{"text": "abc", "where": "skip:2"})
		if err != nil {
			t.Fatal(err)
		}
		ev := g.dispatch("INTERACTION_CREATE")["d"].(map[string]any)
		comps := ev["data"].(map[string]any)["components"].([]any)
		c0 := comps[0].(map[string]any)
		c1 := comps[1].(map[string]any)["component"].(map[string]any)
		if ev["message"] != nil || c0["type"] != 18.0 || c0["component"].(map[string]any)["value"] != "abc" || c1["type"] != 3.0 || c1["values"].([]any)[0] != "skip:2" {
			t.Errorf("submission %v", ev)
		}
		token = ev["token"].(string)
		for _, typ := range []int{6, 7} {
			if a := callback(t, base, sub, token, map[string]any{"type": typ, "data": map[string]any{"content": "x"}}); a.status != 400 {
				t.Errorf("type %d for a command's modal: %d %v, want 400", typ, a.status, a.body)
			}
		}
		if a := callback(t, base, sub, token, map[string]any{"type": 4, "data": map[string]any{"content": "Added."}}); a.status != 204 {
			t.Fatalf("reply: %d %v", a.status, a.body)
		}
		if msgs := s.Messages("C1"); len(msgs) != 1 || msgs[0].Type != 20 || msgs[0].Reference != "" || msgs[0].Interaction != sub {
			t.Errorf("messages %+v, want the reply to the submission", msgs)
		}
	})
}
