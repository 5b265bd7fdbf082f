package fakeslack

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
)

// planIn posts planRows in C1 and returns its ts.
func planIn(t testing.TB, base string) string {
	t.Helper()
	out, code := bot(t, base, "chat.postMessage", map[string]string{"channel": "C1", "text": "plan", "blocks": planRows(t)})
	if code != "" {
		t.Fatalf("post the plan: %s", code)
	}
	return out["ts"].(string)
}

// addModal is the modal that adds an item after item 2.
func addModal() slack.ModalViewRequest {
	input := slack.NewPlainTextInputBlockElement(plain("What to do"), "text")
	input.MaxLength = 200
	return slack.ModalViewRequest{Type: slack.VTModal, Title: plain("Add after 2"), Submit: plain("Add"), Close: plain("Cancel"),
		CallbackID: "add_item", PrivateMetadata: "C1/2",
		Blocks: slack.Blocks{BlockSet: []slack.Block{
			slack.NewSectionBlock(mrkdwn("After *Write*"), nil, nil),
			slack.NewInputBlock("item", plain("New item"), nil, input),
		}}}
}

// viewJSON is addModal as a map, changed by edit.
func viewJSON(t testing.TB, edit func(v map[string]any)) string {
	t.Helper()
	raw, _ := json.Marshal(addModal())
	var v map[string]any
	json.Unmarshal(raw, &v)
	if edit != nil {
		edit(v)
	}
	raw, _ = json.Marshal(v)
	return string(raw)
}

// opened opens addModal for U2 from the plan's menu and returns its id.
func opened(t testing.TB, s *Server, api *slack.Client, ts string) string {
	t.Helper()
	cb := decode(t, s.Overflow("U2", "C1", ts, "item", "add:2"))
	resp, err := api.OpenView(cb.TriggerID, addModal())
	if err != nil {
		t.Fatalf("views.open: %v (violations %q)", err, s.Violations())
	}
	return resp.View.ID
}

func TestViewsOpen(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	api := slack.New("xoxb-test", slack.OptionAPIURL(base+"/api/"))
	ts := planIn(t, base)
	trigger := decode(t, s.Overflow("U2", "C1", ts, "item", "add:2")).TriggerID
	resp, err := api.OpenView(trigger, addModal())
	if err != nil {
		t.Fatal(err)
	}
	if v := resp.View; !strings.HasPrefix(v.ID, "V") || v.Type != "modal" || v.CallbackID != "add_item" || v.PrivateMetadata != "C1/2" ||
		v.Hash == "" || v.RootViewID != v.ID || v.TeamID != "T1" || len(v.Blocks.BlockSet) != 2 || v.Title.Text != "Add after 2" {
		t.Errorf("answered view %+v", v)
	}
	views := s.Views()
	if len(views) != 1 || views[0].ID != resp.View.ID || views[0].User != "U2" || views[0].Channel != "C1" || !views[0].Open ||
		views[0].CallbackID != "add_item" || views[0].Title != "Add after 2" || !strings.Contains(views[0].Blocks, `"block_id":"item"`) {
		t.Errorf("views %+v", views)
	}

	// A trigger opens one view.
	_, err = api.OpenView(trigger, addModal())
	if e := (slack.SlackErrorResponse{}); !errors.As(err, &e) || e.Err != "exchanged_trigger_id" || len(e.ResponseMetadata.Messages) != 1 {
		t.Errorf("a trigger used twice: %v, want exchanged_trigger_id with a message", err)
	}
	for _, tt := range []struct{ name, trigger, want string }{
		{"unknown trigger", "1.T1.nope", "invalid_trigger_id"},
		{"no trigger", "", "invalid_arguments"},
	} {
		if _, code := bot(t, base, "views.open", map[string]string{"trigger_id": tt.trigger, "view": viewJSON(t, nil)}); code != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, code, tt.want)
		}
	}
	// Every trigger of a payload counts: a command's and a shortcut's.
	for name, p := range map[string]map[string]any{
		"shortcut": s.MessageShortcut("U1", "C1", "give_to_pinplan", map[string]any{"ts": ts, "text": "x"}),
		"click":    s.BlockActions("U1", "C1", ts, "nope"), // nil: no such button
	} {
		id, _ := p["trigger_id"].(string)
		_, code := bot(t, base, "views.open", map[string]string{"trigger_id": id, "view": viewJSON(t, nil)})
		if want := map[string]string{"shortcut": "", "click": "invalid_arguments"}[name]; code != want {
			t.Errorf("%s's trigger: got %q, want %q", name, code, want)
		}
	}
	form := s.CommandBody(map[string]any{"user_id": "U1", "channel_id": "C1", "trigger_id": "cmd-1"})
	if !strings.Contains(string(form), "trigger_id=cmd-1") {
		t.Fatalf("command form %s", form)
	}
	if _, code := bot(t, base, "views.open", map[string]string{"trigger_id": "cmd-1", "view": viewJSON(t, nil)}); code != "" {
		t.Errorf("a command's trigger: %q", code)
	}
	if n := len(s.Views()); n != 3 {
		t.Errorf("%d views, want 3", n)
	}

	t.Run("expired", func(t *testing.T) {
		s := &Server{TriggerLife: 50 * time.Millisecond}
		base := serve(t, s)
		ts := planIn(t, base)
		trigger := decode(t, s.Overflow("U2", "C1", ts, "item", "add:2")).TriggerID
		time.Sleep(100 * time.Millisecond) // past the trigger's life: the rule is about time
		if _, code := bot(t, base, "views.open", map[string]string{"trigger_id": trigger, "view": viewJSON(t, nil)}); code != "expired_trigger_id" {
			t.Errorf("got %q, want expired_trigger_id", code)
		}
		if v := s.Violations(); len(v) != 1 || !strings.Contains(v[0], "expired_trigger_id") {
			t.Errorf("violations %q", v)
		}
	})
	t.Run("counted from the envelope's send", func(t *testing.T) {
		s := &Server{TriggerLife: 200 * time.Millisecond}
		base := serve(t, s)
		ts := planIn(t, base)
		p := s.Overflow("U2", "C1", ts, "item", "add:2")
		if _, err := s.PushInteraction(p); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // the envelope waits for a connection meanwhile
		c := open(t, base)
		c.next()
		c.next()
		if _, code := bot(t, base, "views.open", map[string]string{"trigger_id": p["trigger_id"].(string), "view": viewJSON(t, nil)}); code != "" {
			t.Errorf("a trigger sent just now: %q", code)
		}
	})
}

func TestViewRules(t *testing.T) {
	long := func(n int) string { return strings.Repeat("é", n) }
	text := func(s string) map[string]any { return map[string]any{"type": "plain_text", "text": s} }
	input := func(el map[string]any) map[string]any {
		return map[string]any{"type": "input", "block_id": "item", "label": text("New item"), "element": el}
	}
	textInput := func(kv ...any) map[string]any {
		el := map[string]any{"type": "plain_text_input", "action_id": "text"}
		for i := 0; i < len(kv); i += 2 {
			el[kv[i].(string)] = kv[i+1]
		}
		return el
	}
	set := func(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
	blocks := func(b ...any) func(map[string]any) { return set("blocks", b) }
	dividers := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = map[string]any{"type": "divider"}
		}
		return out
	}
	tests := []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"the add modal", nil, ""},
		{"title of 24", set("title", text(long(24))), ""},
		{"title of 25", set("title", text(long(25))), "invalid_arguments"},
		{"no title", func(m map[string]any) { delete(m, "title") }, "invalid_arguments"},
		{"mrkdwn title", set("title", map[string]any{"type": "mrkdwn", "text": "*Add*"}), "invalid_arguments"},
		{"submit of 25", set("submit", text(long(25))), "invalid_arguments"},
		{"close of 25", set("close", text(long(25))), "invalid_arguments"},
		{"an input without submit", func(m map[string]any) { delete(m, "submit") }, "invalid_arguments"},
		{"a home view", set("type", "home"), "invalid_arguments"},
		{"callback_id of 255", set("callback_id", long(255)), ""},
		{"callback_id of 256", set("callback_id", long(256)), "invalid_arguments"},
		{"private_metadata of 3000", set("private_metadata", long(3000)), ""},
		{"private_metadata of 3001", set("private_metadata", long(3001)), "invalid_arguments"},
		{"external_id of 256", set("external_id", long(256)), "invalid_arguments"},
		{"100 blocks", blocks(dividers(100)...), ""},
		{"101 blocks", blocks(dividers(101)...), "invalid_arguments"},
		{"a file block", blocks(map[string]any{"type": "file", "external_id": "f", "source": "remote"}), "invalid_arguments"},
		{"max_length of 3000", blocks(input(textInput("max_length", 3000))), ""},
		{"max_length of 3001", blocks(input(textInput("max_length", 3001))), "invalid_arguments"},
		{"max_length of 0", blocks(input(textInput("max_length", 0))), "invalid_arguments"},
		{"min_length of 3001", blocks(input(textInput("min_length", 3001))), "invalid_arguments"},
		{"min_length over max_length", blocks(input(textInput("min_length", 10, "max_length", 5))), "invalid_arguments"},
		{"a fractional max_length", blocks(input(textInput("max_length", 2.5))), "invalid_arguments"},
		{"input action_id of 256", blocks(input(textInput("action_id", long(256)))), "invalid_arguments"},
		{"text input placeholder of 151", blocks(input(textInput("placeholder", text(long(151))))), "invalid_arguments"},
		{"label of 2000", blocks(map[string]any{"type": "input", "label": text(long(2000)), "element": textInput()}), ""},
		{"label of 2001", blocks(map[string]any{"type": "input", "label": text(long(2001)), "element": textInput()}), "invalid_arguments"},
		{"hint of 2001", blocks(map[string]any{"type": "input", "label": text("l"), "hint": text(long(2001)), "element": textInput()}), "invalid_arguments"},
		{"a button in an input", blocks(input(map[string]any{"type": "button", "text": text("b"), "action_id": "b"})), "invalid_arguments"},
		{"an input without an element", blocks(map[string]any{"type": "input", "label": text("l")}), "invalid_arguments"},
		{"duplicate block_id", blocks(input(textInput()), input(textInput())), "invalid_arguments"},
		{"two inputs", blocks(input(textInput()), map[string]any{"type": "input", "block_id": "why", "label": text("Why"), "element": textInput(), "optional": true}), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{}
			base := serve(t, s)
			ts := planIn(t, base)
			trigger := decode(t, s.Overflow("U2", "C1", ts, "item", "add:2")).TriggerID
			out, code := bot(t, base, "views.open", map[string]string{"trigger_id": trigger, "view": viewJSON(t, tt.edit)})
			if code != tt.want {
				t.Fatalf("got %q, want %q (violations %q)", code, tt.want, s.Violations())
			}
			if tt.want == "" {
				return
			}
			md, _ := out["response_metadata"].(map[string]any)
			if msgs, _ := md["messages"].([]any); len(msgs) != 1 || len(s.Violations()) != 1 || len(s.Views()) != 0 {
				t.Errorf("answer %v, violations %q, views %+v", out, s.Violations(), s.Views())
			}
			// A refused view leaves the trigger unused.
			if _, code := bot(t, base, "views.open", map[string]string{"trigger_id": trigger, "view": viewJSON(t, nil)}); code != "" {
				t.Errorf("the trigger after a refused view: %q", code)
			}
		})
	}
	t.Run("duplicate external_id", func(t *testing.T) {
		s := &Server{}
		base := serve(t, s)
		ts := planIn(t, base)
		for i, want := range []string{"", "duplicate_external_id"} {
			trigger := decode(t, s.Overflow("U2", "C1", ts, "item", "add:2")).TriggerID
			if _, code := bot(t, base, "views.open", map[string]string{"trigger_id": trigger, "view": viewJSON(t, set("external_id", "add-2"))}); code != want {
				t.Errorf("open %d: got %q, want %q", i, code, want)
			}
		}
	})
}

func TestViewsUpdate(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	api := slack.New("xoxb-test", slack.OptionAPIURL(base+"/api/"))
	ts := planIn(t, base)
	first, err := api.OpenView(decode(t, s.Overflow("U2", "C1", ts, "item", "add:2")).TriggerID, addModal())
	if err != nil {
		t.Fatal(err)
	}
	id, hash := first.View.ID, first.View.Hash
	m := addModal()
	m.Title = plain("Add after 3")
	resp, err := api.UpdateView(m, "", hash, id)
	if err != nil {
		t.Fatal(err)
	}
	if resp.View.ID != id || resp.View.Hash == hash || resp.View.Title.Text != "Add after 3" {
		t.Errorf("updated view %+v", resp.View)
	}
	if v := s.Views()[0]; v.Title != "Add after 3" || v.Updates != 1 || !v.Open {
		t.Errorf("view after the update %+v", v)
	}
	for _, tt := range []struct {
		name   string
		params map[string]string
		want   string
	}{
		{"a stale hash", map[string]string{"view_id": id, "hash": hash, "view": viewJSON(t, nil)}, "hash_conflict"},
		{"an unknown view", map[string]string{"view_id": "V1", "view": viewJSON(t, nil)}, "not_found"},
		{"no view_id", map[string]string{"view": viewJSON(t, nil)}, "invalid_arguments"},
		{"an invalid view", map[string]string{"view_id": id, "view": viewJSON(t, func(v map[string]any) { delete(v, "title") })}, "invalid_arguments"},
	} {
		if _, code := bot(t, base, "views.update", tt.params); code != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, code, tt.want)
		}
	}
	if v := s.Violations(); len(v) != 2 {
		t.Errorf("violations %q, want the two invalid calls (a stale hash or a closed view is not the app's fault)", v)
	}
}

func TestViewSubmissionRefused(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	api := slack.New("xoxb-test", slack.OptionAPIURL(base+"/api/"))
	ts := planIn(t, base)
	id := opened(t, s, api, ts)
	for _, tt := range []struct {
		name, user, view string
		values           map[string]map[string]string
		want             error
	}{
		{"another person", "U3", id, map[string]map[string]string{"item": {"text": "x"}}, ErrNoView},
		{"an unknown view", "U2", "V1", map[string]map[string]string{"item": {"text": "x"}}, ErrNoView},
		{"an unknown block", "U2", id, map[string]map[string]string{"item": {"text": "x"}, "why": {"text": "y"}}, ErrNotInView},
		{"an unknown action", "U2", id, map[string]map[string]string{"item": {"value": "x"}}, ErrNotInView},
		{"a required input left empty", "U2", id, nil, ErrNotInView},
		{"an empty text", "U2", id, map[string]map[string]string{"item": {"text": ""}}, ErrNotInView},
		{"over max_length", "U2", id, map[string]map[string]string{"item": {"text": strings.Repeat("x", 201)}}, ErrNotInView},
	} {
		if p, err := s.ViewSubmission(tt.user, tt.view, tt.values); !errors.Is(err, tt.want) || p != nil {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := s.ViewSubmission("U2", id, map[string]map[string]string{"item": {"text": strings.Repeat("x", 200)}}); err != nil {
		t.Errorf("200 characters: %v", err)
	}
	t.Run("min_length and optional", func(t *testing.T) {
		trigger := decode(t, s.Overflow("U2", "C1", ts, "item", "add:2")).TriggerID
		v := viewJSON(t, func(m map[string]any) {
			m["blocks"] = []any{map[string]any{"type": "input", "block_id": "why", "optional": true, "label": map[string]any{"type": "plain_text", "text": "Why"},
				"element": map[string]any{"type": "plain_text_input", "action_id": "text", "min_length": 5}}}
		})
		out, code := bot(t, base, "views.open", map[string]string{"trigger_id": trigger, "view": v})
		if code != "" {
			t.Fatal(code)
		}
		vid := out["view"].(map[string]any)["id"].(string)
		if _, err := s.ViewSubmission("U2", vid, map[string]map[string]string{"why": {"text": "abc"}}); !errors.Is(err, ErrNotInView) {
			t.Errorf("under min_length: %v", err)
		}
		p, err := s.ViewSubmission("U2", vid, nil)
		if err != nil {
			t.Fatalf("an optional input left empty: %v", err)
		}
		if st := decode(t, p).View.State; st == nil || st.Values["why"]["text"].Type != "plain_text_input" || st.Values["why"]["text"].Value != "" {
			t.Errorf("state %+v", st)
		}
	})
}

// submitted builds U2's submission of id with text.
func submitted(t testing.TB, s *Server, id, text string) map[string]any {
	t.Helper()
	p, err := s.ViewSubmission("U2", id, map[string]map[string]string{"item": {"text": text}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestViewSubmissionOverSocketMode(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	api := slack.New("xoxb-test", slack.OptionAPIURL(base+"/api/"))
	ts := planIn(t, base)
	id := opened(t, s, api, ts)
	c := open(t, base)
	c.next()
	waitUntil(t, "the connection", func() bool { return s.Connected() == 1 })

	// The bot answers each submission with what answer gives, in its ack.
	submit := func(text string, answer any) ViewAck {
		t.Helper()
		p := submitted(t, s, id, text)
		cb := decode(t, p)
		if cb.Type != slack.InteractionTypeViewSubmission || cb.User.ID != "U2" || cb.View.ID != id || cb.View.CallbackID != "add_item" ||
			cb.View.PrivateMetadata != "C1/2" || cb.View.State.Values["item"]["text"].Value != text || cb.TriggerID == "" {
			t.Errorf("payload %+v", cb)
		}
		type result struct {
			ack ViewAck
			err error
		}
		done := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ack, err := s.PushViewSubmission(ctx, p)
			done <- result{ack, err}
		}()
		env := c.next()
		if pl, _ := env["payload"].(map[string]any); env["type"] != "interactive" || env["accepts_response_payload"] != true || pl["type"] != "view_submission" {
			t.Errorf("envelope %v", env)
		}
		frame := map[string]any{"envelope_id": env["envelope_id"]}
		if answer != nil {
			frame["payload"] = answer
		}
		if err := c.ws.WriteJSON(frame); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.ack
	}

	ack := submit("too vague", map[string]any{"response_action": "errors", "errors": map[string]any{"item": "Say what to do."}})
	if ack.Action != "errors" || ack.Errors["item"] != "Say what to do." || ack.Closed || ack.Refused != "" {
		t.Errorf("errors ack %+v", ack)
	}
	if v := s.Views()[0]; !v.Open || v.Errors["item"] != "Say what to do." {
		t.Errorf("view after errors %+v", v)
	}
	ack = submit("x", map[string]any{"response_action": "errors", "errors": map[string]any{"nope": "?"}})
	if ack.Refused == "" || ack.Errors != nil {
		t.Errorf("errors naming no input block: %+v, want refused", ack)
	}
	if v := s.Violations(); len(v) != 1 || !strings.Contains(v[0], "view_submission of view "+id) {
		t.Errorf("violations %q", v)
	}
	updated := addModal()
	updated.Title = plain("Add after 3")
	if ack = submit("x", slack.NewUpdateViewSubmissionResponse(&updated)); ack.Action != "update" || ack.Closed || s.Views()[0].Title != "Add after 3" {
		t.Errorf("update ack %+v, views %+v", ack, s.Views())
	}
	bad := addModal()
	bad.Title = plain(strings.Repeat("t", 25))
	if ack = submit("x", slack.NewUpdateViewSubmissionResponse(&bad)); ack.Refused == "" || s.Views()[0].Title != "Add after 3" {
		t.Errorf("an update with a title of 25: %+v", ack)
	}
	if ack = submit("Deploy to staging", nil); !ack.Closed || ack.Action != "" || ack.Payload != nil || ack.Refused != "" {
		t.Errorf("empty ack %+v", ack)
	}
	if v := s.Views()[0]; v.Open {
		t.Errorf("the view is open after an empty ack: %+v", v)
	}
	if _, err := s.ViewSubmission("U2", id, map[string]map[string]string{"item": {"text": "again"}}); !errors.Is(err, ErrNoView) {
		t.Errorf("submitting a closed view: %v", err)
	}
}

func TestViewStackAndLateAck(t *testing.T) {
	s := &Server{AckTimeout: 50 * time.Millisecond}
	base := serve(t, s)
	api := slack.New("xoxb-test", slack.OptionAPIURL(base+"/api/"))
	ts := planIn(t, base)
	id := opened(t, s, api, ts)
	pushed := addModal()
	pushed.Title = plain("Confirm")
	ack, err := s.AnswerViewSubmission(submitted(t, s, id, "a"), 200, mustJSON(t, slack.NewPushViewSubmissionResponse(&pushed)))
	if err != nil || ack.Action != "push" || ack.Closed {
		t.Fatalf("push: %+v %v", ack, err)
	}
	views := s.Views()
	if len(views) != 2 || views[1].PreviousID != id || views[1].RootID != id || !views[1].Open || !views[0].Open {
		t.Fatalf("views after a push %+v", views)
	}
	if _, err := s.ViewSubmission("U2", id, map[string]map[string]string{"item": {"text": "a"}}); !errors.Is(err, ErrNoView) {
		t.Errorf("submitting the view under a pushed one: %v", err)
	}
	ack, _ = s.AnswerViewSubmission(submitted(t, s, views[1].ID, "b"), 200, mustJSON(t, slack.NewPushViewSubmissionResponse(&pushed)))
	if ack.Action != "push" || ack.Refused != "" || len(s.Views()) != 3 {
		t.Fatalf("a second push: %+v", ack)
	}
	ack, _ = s.AnswerViewSubmission(submitted(t, s, s.Views()[2].ID, "c"), 200, mustJSON(t, slack.NewPushViewSubmissionResponse(&pushed)))
	if ack.Refused == "" || len(s.Views()) != 3 {
		t.Errorf("a third push: %+v, want refused (2 pushes at most)", ack)
	}
	ack, _ = s.AnswerViewSubmission(submitted(t, s, s.Views()[2].ID, "c"), 200, mustJSON(t, slack.NewClearViewSubmissionResponse()))
	if !ack.Closed || ack.Action != "clear" {
		t.Errorf("clear %+v", ack)
	}
	for _, v := range s.Views() {
		if v.Open {
			t.Errorf("view %s open after clear", v.ID)
		}
	}

	id = opened(t, s, api, ts)
	if ack, _ := s.AnswerViewSubmission(submitted(t, s, id, "d"), 500, nil); ack.Refused == "" || !s.Views()[3].Open {
		t.Errorf("an HTTP 500: %+v", ack)
	}
	if ack, _ := s.AnswerViewSubmission(submitted(t, s, id, "d"), 200, []byte(`{"response_action":"explode"}`)); ack.Refused == "" {
		t.Errorf("an unknown response_action: %+v", ack)
	}

	// An ack after AckTimeout: Slack already showed an error.
	c := open(t, base)
	c.next()
	done := make(chan ViewAck, 1)
	go func() {
		ack, _ := s.PushViewSubmission(context.Background(), submitted(t, s, id, "e"))
		done <- ack
	}()
	env := c.next()
	time.Sleep(100 * time.Millisecond) // past AckTimeout: the rule is about time
	c.ack(env["envelope_id"])
	if ack := <-done; ack.Refused == "" || ack.Closed {
		t.Errorf("a late ack %+v, want refused", ack)
	}
	if !s.Views()[3].Open {
		t.Error("a late empty ack closed the view")
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAckTooLarge: Slack drops a Socket Mode frame of 20 KB or more, so
// the envelope it acknowledges is not acknowledged.
func TestAckTooLarge(t *testing.T) {
	s := &Server{AckTimeout: -1}
	base := serve(t, s)
	c := open(t, base)
	c.next()
	id, _ := s.Push("Ev1", mention("1700000000.000100"))
	c.next()
	if err := c.ws.WriteJSON(map[string]any{"envelope_id": id, "payload": map[string]any{"pad": strings.Repeat("x", 20*1024)}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the dropped frame", func() bool { return len(s.Violations()) == 1 })
	if a := s.Acks(); len(a) != 0 {
		t.Errorf("acks %v from a dropped frame", a)
	}
	c.ack(id)
	waitUntil(t, "the ack", func() bool { return len(s.Acks()) == 1 })
}

// TestSlackGoModal drives the whole round through slack-go: a person
// picks Add in a row's menu, the bot opens the modal with the payload's
// trigger_id, the person submits it, and the bot's Socket Mode ack with
// errors and then an empty one reach the view.
func TestSlackGoModal(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	ts := planIn(t, base)
	api := slack.New("xoxb-test", slack.OptionAPIURL(base+"/api/"), slack.OptionAppLevelToken("xapp-test"))
	sm := socketmode.New(api)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sm.RunContext(ctx)
	}()
	opened := make(chan error, 1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case evt := <-sm.Events:
				cb, ok := evt.Data.(slack.InteractionCallback)
				if !ok || evt.Request == nil {
					continue
				}
				switch cb.Type {
				case slack.InteractionTypeBlockActions:
					sm.Ack(*evt.Request)
					_, err := api.OpenView(cb.TriggerID, addModal())
					opened <- err
				case slack.InteractionTypeViewSubmission:
					if text := cb.View.State.Values["item"]["text"].Value; len(text) < 5 {
						sm.Ack(*evt.Request, slack.NewErrorsViewSubmissionResponse(map[string]string{"item": "Say more."}))
					} else {
						sm.Ack(*evt.Request)
					}
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	if _, err := s.PushInteraction(s.Overflow("U2", "C1", ts, "item", "add:2")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-opened:
		if err != nil {
			t.Fatalf("views.open: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the bot opened no modal")
	}
	id := s.Views()[0].ID
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	ack, err := s.PushViewSubmission(sctx, submitted(t, s, id, "abc"))
	if err != nil || ack.Action != "errors" || ack.Errors["item"] != "Say more." {
		t.Fatalf("first submission: %+v %v", ack, err)
	}
	ack, err = s.PushViewSubmission(sctx, submitted(t, s, id, "Deploy to staging"))
	if err != nil || !ack.Closed {
		t.Fatalf("second submission: %+v %v", ack, err)
	}
	if v := s.Violations(); len(v) > 0 {
		t.Errorf("violations %q", v)
	}
}

// TestViewSubmissionOfASelect: a static_select or radio_buttons input is
// submitted with the option picked, as the view offers it; a value it
// does not offer is refused, and a required one left empty too.
func TestViewSubmissionOfASelect(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	api := slack.New("xoxb-test", slack.OptionAPIURL(base+"/api/"))
	ts := planIn(t, base)
	cb := decode(t, s.Overflow("U2", "C1", ts, "item", "add:2"))
	opts := []*slack.OptionBlockObject{slack.NewOptionBlockObject("1.a", plain("1. a"), nil), slack.NewOptionBlockObject("2.b", plain("2. b"), nil)}
	sel := slack.NewOptionsSelectBlockElement(slack.OptTypeStatic, plain("Pick"), "pick", opts...)
	radio := slack.NewRadioButtonsBlockElement("what", slack.NewOptionBlockObject("skip", plain("Skip"), nil), slack.NewOptionBlockObject("add", plain("Add"), nil))
	view := slack.ModalViewRequest{Type: slack.VTModal, Title: plain("Change the plan"), Submit: plain("Change"), Close: plain("Cancel"),
		Blocks: slack.Blocks{BlockSet: []slack.Block{slack.NewInputBlock("item", plain("Item"), nil, sel), slack.NewInputBlock("action", plain("What"), nil, radio)}}}
	resp, err := api.OpenView(cb.TriggerID, view)
	if err != nil {
		t.Fatalf("views.open: %v (violations %q)", err, s.Violations())
	}
	id := resp.View.ID
	if _, err := s.ViewSubmission("U2", id, map[string]map[string]string{"item": {"pick": "9.z"}, "action": {"what": "skip"}}); !errors.Is(err, ErrNotInView) {
		t.Errorf("an option the select does not offer: %v", err)
	}
	if _, err := s.ViewSubmission("U2", id, map[string]map[string]string{"item": {"pick": "2.b"}}); !errors.Is(err, ErrNotInView) {
		t.Errorf("a required choice left empty: %v", err)
	}
	p, err := s.ViewSubmission("U2", id, map[string]map[string]string{"item": {"pick": "2.b"}, "action": {"what": "skip"}})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(p)
	var cbk slack.InteractionCallback
	if err := json.Unmarshal(raw, &cbk); err != nil {
		t.Fatal(err)
	}
	vals := cbk.View.State.Values
	if vals["item"]["pick"].SelectedOption.Value != "2.b" || vals["action"]["what"].SelectedOption.Value != "skip" {
		t.Errorf("state %+v", vals)
	}
}
