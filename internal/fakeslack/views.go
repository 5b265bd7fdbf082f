package fakeslack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// Modals as Slack has them (docs.slack.dev/surfaces/modals): views.open
// exchanges a trigger_id from an interaction payload for a modal shown
// to the person who interacted; views.update changes an open one; a
// view_submission is acknowledged with nothing (the view closes) or a
// response_action (errors, update, push, clear).
const (
	// "Triggers expire in three seconds ... Triggers may only be used
	// once" (api.slack.com/docs/triggers); views.open answers
	// expired_trigger_id, exchanged_trigger_id ("The trigger_id was
	// already exchanged in a previous call",
	// docs.slack.dev/reference/methods/views.push) and invalid_trigger_id.
	defaultTriggerLife = 3 * time.Second
	// docs.slack.dev/reference/views/modal-views: title, submit and close
	// plain_text of at most 24 characters, submit required with an input
	// block, at most 100 blocks, callback_id 255, private_metadata 3000;
	// external_id 255 (views.open).
	maxModalBlocks     = 100
	maxViewButton      = 24
	maxCallbackID      = 255
	maxPrivateMetadata = 3000
	maxExternalID      = 255
	// views.open: "view_too_large: ... greater than 250kb".
	maxViewBytes = 250 * 1024
	// views.push: "the app is limited to pushing 2 additional views".
	maxViewStack = 3
)

// modalBlocks are the block types a modal takes (each block's reference
// page lists the surfaces it is available in).
var modalBlocks = map[string]bool{"actions": true, "context": true, "divider": true, "header": true, "image": true,
	"input": true, "rich_text": true, "section": true, "video": true}

// ErrNoView is ViewSubmission's error for a view that is not open for
// the person, or not on top of its stack: they cannot submit it.
var ErrNoView = errors.New("fakeslack: no such open view")

// ErrNotInView is ViewSubmission's error for a value the person could not
// have entered: no plain_text_input with that block_id and action_id, a
// required one left empty, or one outside its min_length and max_length.
var ErrNotInView = errors.New("fakeslack: not an input of the view")

// trigger is a trigger_id handed out in an interaction payload.
type trigger struct {
	user, channel string
	sent          time.Time // when its payload was sent (built, until then)
	used          bool
}

// view is a modal as the fake holds it.
type view struct {
	id, user, channel string
	body              map[string]any // the view object as the bot sent it
	hash              string
	open              bool
	root, previous    string // the stack it is in: its root view and the one it was pushed on
	errors            map[string]string
	updates           int
}

// View is a modal the bot opened for a person (views.open, or a push in
// a view_submission ack), as it stands now.
type View struct {
	ID, User string
	// Channel is where the interaction whose trigger_id opened it was.
	Channel                                        string
	Title, CallbackID, PrivateMetadata, ExternalID string
	Blocks                                         string // the view's blocks as JSON
	// Open: shown to User until an empty ack or a clear closes it.
	Open bool
	// Errors are what the bot's last "errors" ack shows, by block_id.
	Errors map[string]string
	// Updates counts views.update calls and "update" acks.
	Updates int
	// RootID is the first view of its stack, PreviousID the one it was
	// pushed on ("" for a root).
	RootID, PreviousID string
}

// ViewAck is what the bot answered a view_submission, and what Slack did
// with it.
type ViewAck struct {
	// Action is the ack's response_action: "" for an empty ack, which
	// closes the view, or errors, update, push or clear.
	Action string
	// Errors are the messages an "errors" ack shows, by block_id.
	Errors map[string]string
	// Closed: the view closed (an empty ack, or clear).
	Closed bool
	// Payload is the ack's JSON, nil for an empty one.
	Payload map[string]any
	// Refused says why Slack would not take the ack (too late, errors
	// naming no input block, an invalid view): the person saw an error
	// and the view stayed as it was. A refusal is a violation too.
	Refused string
}

// issueTriggerLocked records a trigger_id handed out to user in channel.
func (s *Server) issueTriggerLocked(id, user, channel string) {
	s.triggers[id] = &trigger{user: user, channel: channel, sent: time.Now()}
}

// sendTriggerLocked starts the life of trigger id at, when the payload
// carrying it is sent.
func (s *Server) sendTriggerLocked(id string, at time.Time) {
	if t := s.triggers[id]; t != nil && !t.used {
		t.sent = at
	}
}

// Views returns the modals the bot opened, oldest first.
func (s *Server) Views() []View {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []View
	for _, id := range s.viewOrder {
		v := s.views[id]
		str := func(k string) string { x, _ := v.body[k].(string); return x }
		title, _ := v.body["title"].(map[string]any)
		t, _ := title["text"].(string)
		blocks, _ := json.Marshal(v.body["blocks"])
		var errs map[string]string
		if v.errors != nil {
			errs = map[string]string{}
			for k, e := range v.errors {
				errs[k] = e
			}
		}
		out = append(out, View{ID: v.id, User: v.user, Channel: v.channel, Title: t, CallbackID: str("callback_id"),
			PrivateMetadata: str("private_metadata"), ExternalID: str("external_id"), Blocks: string(blocks), Open: v.open,
			Errors: errs, Updates: v.updates, RootID: v.root, PreviousID: v.previous})
	}
	return out
}

// parseViewLocked reads a view object as views.open, views.update and an
// update or push ack take it, and checks it as Slack does (a modal, its
// title, buttons, ids and blocks within their limits); self is the view
// it replaces, whose external_id it may keep. It returns the Web API
// error code and why, "" when Slack would take it.
func (s *Server) parseViewLocked(raw, self string) (body map[string]any, code, detail string) {
	if raw == "" {
		return nil, "invalid_arguments", "missing required field: view"
	}
	if len(raw) > maxViewBytes {
		return nil, "view_too_large", fmt.Sprintf("view of %d bytes, limit %d", len(raw), maxViewBytes)
	}
	if err := json.Unmarshal([]byte(raw), &body); err != nil || body == nil {
		return nil, "invalid_arguments", "view is not a JSON object"
	}
	if body["type"] != "modal" {
		return nil, "invalid_arguments", fmt.Sprintf("view.type %v is not modal", body["type"])
	}
	if d := checkTextObject(body["title"], "view.title", maxViewButton, true); d != "" {
		return nil, "invalid_arguments", d
	}
	for _, k := range []string{"submit", "close"} {
		if v, ok := body[k]; ok && v != nil {
			if d := checkTextObject(v, "view."+k, maxViewButton, true); d != "" {
				return nil, "invalid_arguments", d
			}
		}
	}
	for _, f := range []struct {
		key string
		max int
	}{{"callback_id", maxCallbackID}, {"private_metadata", maxPrivateMetadata}, {"external_id", maxExternalID}} {
		v, ok := body[f.key]
		if !ok {
			continue
		}
		str, isString := v.(string)
		if !isString {
			return nil, "invalid_arguments", fmt.Sprintf("view.%s must be a string", f.key)
		}
		if n := utf8.RuneCountInString(str); n > f.max {
			return nil, "invalid_arguments", fmt.Sprintf("view.%s is %d characters, limit %d", f.key, n, f.max)
		}
	}
	blocks, ok := body["blocks"].([]any)
	if !ok {
		return nil, "invalid_arguments", "view.blocks must be an array"
	}
	if d := checkBlockList(blocks, false, maxModalBlocks, modalBlocks); d != "" {
		return nil, "invalid_arguments", "view.blocks: " + d
	}
	for _, b := range blocks {
		if bm, _ := b.(map[string]any); bm["type"] == "input" && body["submit"] == nil {
			return nil, "invalid_arguments", "view.submit is required when the view has an input block"
		}
	}
	if ext, _ := body["external_id"].(string); ext != "" {
		for _, v := range s.views {
			if x, _ := v.body["external_id"].(string); x == ext && v.id != self {
				return nil, "duplicate_external_id", fmt.Sprintf("external_id %q is view %s's", ext, v.id)
			}
		}
	}
	return body, "", ""
}

// newViewLocked opens a view for user with body, on top of previous
// ("" for a new modal).
func (s *Server) newViewLocked(body map[string]any, user, channel, previous string) *view {
	s.seq++
	v := &view{id: fmt.Sprintf("V%08X", s.seq), user: user, channel: channel, body: body, open: true, previous: previous}
	v.hash = s.viewHashLocked()
	v.root = v.id
	if p := s.views[previous]; p != nil {
		v.root = p.root
	}
	s.views[v.id] = v
	s.viewOrder = append(s.viewOrder, v.id)
	return v
}

func (s *Server) viewHashLocked() string {
	s.seq++
	return fmt.Sprintf("%d.%08x", time.Now().Unix(), s.seq)
}

// viewJSONLocked is v as Slack answers it and sends it in payloads.
func (s *Server) viewJSONLocked(v *view) map[string]any {
	out := map[string]any{"private_metadata": "", "callback_id": "", "external_id": "", "clear_on_close": false,
		"notify_on_close": false, "close": nil, "submit": nil}
	for k, x := range v.body {
		out[k] = x
	}
	team := s.channelTeamLocked(v.channel)
	out["id"], out["team_id"], out["hash"] = v.id, team, v.hash
	out["state"] = map[string]any{"values": map[string]any{}}
	out["root_view_id"], out["previous_view_id"] = v.root, nil
	if v.previous != "" {
		out["previous_view_id"] = v.previous
	}
	out["app_id"], out["bot_id"], out["app_installed_team_id"] = "A1", "B1", team
	return out
}

// openViewLocked answers views.open: a trigger_id the fake handed out in
// an interaction payload, used once within TriggerLife of being sent,
// and a valid modal, opened for the person who interacted.
func (s *Server) openViewLocked(method string, p map[string]string) (map[string]any, string) {
	id := p["trigger_id"]
	if id == "" {
		return s.violationLocked(method, "invalid_arguments", "missing required field: trigger_id")
	}
	life := s.TriggerLife
	if life <= 0 {
		life = defaultTriggerLife
	}
	t, ok := s.triggers[id]
	switch {
	case !ok:
		return s.violationLocked(method, "invalid_trigger_id", fmt.Sprintf("trigger_id %q was never handed out", id))
	case t.used:
		return s.violationLocked(method, "exchanged_trigger_id", fmt.Sprintf("trigger_id %q was already exchanged", id))
	}
	if late := time.Since(t.sent); late > life {
		return s.violationLocked(method, "expired_trigger_id", fmt.Sprintf("trigger_id %q used %s after it was sent, limit %s",
			id, late.Round(time.Millisecond), life))
	}
	body, code, detail := s.parseViewLocked(p["view"], "")
	if code != "" {
		return s.violationLocked(method, code, detail)
	}
	t.used = true
	v := s.newViewLocked(body, t.user, t.channel, "")
	return map[string]any{"view": s.viewJSONLocked(v)}, ""
}

// updateViewLocked answers views.update: an open view by view_id or
// external_id, its hash when given, and a valid modal.
func (s *Server) updateViewLocked(method string, p map[string]string) (map[string]any, string) {
	id, ext := p["view_id"], p["external_id"]
	if id == "" && ext == "" {
		return s.violationLocked(method, "invalid_arguments", "view_id or external_id is required")
	}
	v := s.views[id]
	if id == "" {
		for _, x := range s.views {
			if e, _ := x.body["external_id"].(string); e == ext {
				v = x
			}
		}
	}
	if v == nil || !v.open {
		// The person may have closed it: not the app's fault.
		return nil, "not_found"
	}
	if h := p["hash"]; h != "" && h != v.hash {
		return nil, "hash_conflict"
	}
	body, code, detail := s.parseViewLocked(p["view"], v.id)
	if code != "" {
		return s.violationLocked(method, code, detail)
	}
	v.body, v.hash, v.errors = body, s.viewHashLocked(), nil
	v.updates++
	return map[string]any{"view": s.viewJSONLocked(v)}, ""
}

// input is a stateful element of an input block of a view.
type input struct {
	block, action string
	el            map[string]any
	optional      bool
}

// inputsOf lists the input blocks of v; those without a block_id or
// action_id get the names Slack would make up.
func inputsOf(v *view) []input {
	blocks, _ := v.body["blocks"].([]any)
	var out []input
	for i, raw := range blocks {
		b, _ := raw.(map[string]any)
		if b["type"] != "input" {
			continue
		}
		el, _ := b["element"].(map[string]any)
		in := input{el: el}
		in.block, _ = b["block_id"].(string)
		in.action, _ = el["action_id"].(string)
		in.optional, _ = b["optional"].(bool)
		h := fnv.New32a()
		fmt.Fprintf(h, "%s/%d", v.id, i)
		if in.block == "" {
			in.block = fmt.Sprintf("%05x", h.Sum32()&0xfffff)
		}
		if in.action == "" {
			in.action = fmt.Sprintf("%05x", (h.Sum32()>>12)&0xfffff)
		}
		out = append(out, in)
	}
	return out
}

// ViewSubmission returns the view_submission payload Slack sends when
// userID submits the open view viewID with values by block_id and
// action_id: the text of a plain_text_input, the value of the option
// picked in a static_select or radio_buttons (an input left out keeps
// its initial_value or initial_option). The view's state carries every input block. It refuses
// (ErrNoView) a view that is not open, not userID's, not on top of its
// stack or without a submit button, and (ErrNotInView) a value for
// anything but a plain_text_input of the view, an empty required input
// and a text outside the input's min_length and max_length: Slack's
// client would not submit them. Deliver the payload with
// PushViewSubmission, or InteractionBody and AnswerViewSubmission.
func (s *Server) ViewSubmission(userID, viewID string, values map[string]map[string]string) (map[string]any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	v, ok := s.views[viewID]
	switch {
	case !ok || !v.open:
		return nil, fmt.Errorf("submit view %s: %w", viewID, ErrNoView)
	case v.user != userID:
		return nil, fmt.Errorf("submit view %s as %s, opened for %s: %w", viewID, userID, v.user, ErrNoView)
	case v.body["submit"] == nil:
		return nil, fmt.Errorf("submit view %s: it has no submit button: %w", viewID, ErrNoView)
	}
	for _, x := range s.views {
		if x.open && x.previous == v.id {
			return nil, fmt.Errorf("submit view %s: view %s is pushed on it: %w", viewID, x.id, ErrNoView)
		}
	}
	state := map[string]any{}
	used := 0
	for _, in := range inputsOf(v) {
		typ, _ := in.el["type"].(string)
		entry := map[string]any{"type": typ}
		if typ == "plain_text_input" {
			val, given := values[in.block][in.action]
			if given {
				used++
			} else {
				val, _ = in.el["initial_value"].(string)
			}
			if err := checkEntered(in, val); err != nil {
				return nil, fmt.Errorf("submit view %s: %w", viewID, err)
			}
			entry["value"] = nil
			if val != "" {
				entry["value"] = val
			}
		}
		if typ == "static_select" || typ == "radio_buttons" {
			opt, given, err := chosen(in, values)
			if err != nil {
				return nil, fmt.Errorf("submit view %s: %w", viewID, err)
			}
			if given {
				used++
			}
			entry["selected_option"] = opt
		}
		if state[in.block] == nil {
			state[in.block] = map[string]any{}
		}
		state[in.block].(map[string]any)[in.action] = entry
	}
	if n := countValues(values); used != n {
		var ids []string
		for b, acts := range values {
			for a := range acts {
				if e, _ := state[b].(map[string]any); e == nil || e[a] == nil {
					ids = append(ids, b+"/"+a)
				}
			}
		}
		sort.Strings(ids)
		return nil, fmt.Errorf("submit view %s: %s: %w", viewID, strings.Join(ids, ", "), ErrNotInView)
	}
	s.seq++
	secret := fmt.Sprintf("%016x%08x", time.Now().UnixNano(), s.seq)
	triggerID := fmt.Sprintf("%d.%s.%s", 1000000000+s.seq, s.TeamID, secret[:16])
	s.issueTriggerLocked(triggerID, userID, v.channel)
	vj := s.viewJSONLocked(v)
	vj["state"] = map[string]any{"values": state}
	return map[string]any{
		"type":                  "view_submission",
		"team":                  map[string]any{"id": s.channelTeamLocked(v.channel), "domain": strings.ToLower(s.channelTeamLocked(v.channel))},
		"user":                  s.interactionUserLocked(userID),
		"api_app_id":            "A1",
		"token":                 "legacy",
		"trigger_id":            triggerID,
		"view":                  vj,
		"response_urls":         []any{},
		"enterprise":            nil,
		"is_enterprise_install": false,
	}, nil
}

// chosen is the option a person picked in a static_select or
// radio_buttons input: the one whose value values gives (given), else
// its initial_option; a value it does not offer, or no choice in a
// required input, is ErrNotInView. The option is as the view has it.
func chosen(in input, values map[string]map[string]string) (opt map[string]any, given bool, err error) {
	val, given := values[in.block][in.action]
	if !given {
		opt, _ = in.el["initial_option"].(map[string]any)
		if opt == nil && !in.optional {
			return nil, false, fmt.Errorf("%s/%s is required: %w", in.block, in.action, ErrNotInView)
		}
		return opt, false, nil
	}
	opts, _ := in.el["options"].([]any)
	for _, o := range opts {
		if m, _ := o.(map[string]any); m != nil && m["value"] == val {
			return m, true, nil
		}
	}
	return nil, true, fmt.Errorf("%s/%s offers no option %q: %w", in.block, in.action, val, ErrNotInView)
}

// checkEntered refuses what Slack's client does not submit: a required
// input left empty, a text outside min_length and max_length.
func checkEntered(in input, val string) error {
	n := utf8.RuneCountInString(val)
	if n == 0 {
		if !in.optional {
			return fmt.Errorf("%s/%s is required: %w", in.block, in.action, ErrNotInView)
		}
		return nil
	}
	if lo, ok, _ := intField(in.el, "min_length"); ok && n < lo {
		return fmt.Errorf("%s/%s: %d characters, min_length %d: %w", in.block, in.action, n, lo, ErrNotInView)
	}
	hi, ok, _ := intField(in.el, "max_length")
	if !ok {
		hi = maxTextInputLength
	}
	if n > hi {
		return fmt.Errorf("%s/%s: %d characters, max_length %d: %w", in.block, in.action, n, hi, ErrNotInView)
	}
	return nil
}

func countValues(values map[string]map[string]string) int {
	n := 0
	for _, acts := range values {
		n += len(acts)
	}
	return n
}

// PushViewSubmission sends a ViewSubmission payload in an interactive
// Socket Mode envelope that accepts a response payload, waits for the
// bot's ack (or ctx) and returns what it answered, applied to the view
// as Slack applies it: an empty ack closes it, errors keep it open with
// the messages shown, update replaces it, push opens another on it,
// clear closes its whole stack. An ack later than AckTimeout is refused
// (and a violation), as the person saw an error.
func (s *Server) PushViewSubmission(ctx context.Context, payload map[string]any) (ViewAck, error) {
	raw, err := json.Marshal(payload)
	if err != nil {
		return ViewAck{}, fmt.Errorf("fakeslack: view_submission payload: %w", err)
	}
	vj, _ := payload["view"].(map[string]any)
	viewID, _ := vj["id"].(string)
	trigger, _ := payload["trigger_id"].(string)
	s.mu.Lock()
	s.initLocked()
	if _, ok := s.views[viewID]; !ok || payload["type"] != "view_submission" {
		s.mu.Unlock()
		return ViewAck{}, fmt.Errorf("push view_submission of view %q: %w", viewID, ErrNoView)
	}
	s.seq++
	done := make(chan struct{})
	e := &envelope{id: fmt.Sprintf("env-%d", s.seq), eventID: "view_submission", interactive: true, respond: true,
		payload: raw, trigger: trigger, done: done}
	s.pending = append(s.pending, e)
	s.flushLocked()
	s.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return ViewAck{}, fmt.Errorf("fakeslack: view_submission %s of view %s: no ack: %w", e.id, viewID, context.Cause(ctx))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.lost {
		return ViewAck{}, fmt.Errorf("fakeslack: view_submission %s of view %s: never acknowledged", e.id, viewID)
	}
	return s.applyViewAckLocked(viewID, e.ack, e.late), nil
}

// AnswerViewSubmission applies the bot's HTTP answer (status and body) to
// the view_submission payload it got at its interactivity Request URL
// (InteractionBody), as Slack does, and returns it as PushViewSubmission
// does. The test times the answer: Slack waits 3 s.
func (s *Server) AnswerViewSubmission(payload map[string]any, status int, body []byte) (ViewAck, error) {
	vj, _ := payload["view"].(map[string]any)
	viewID, _ := vj["id"].(string)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	if _, ok := s.views[viewID]; !ok {
		return ViewAck{}, fmt.Errorf("answer view_submission of view %q: %w", viewID, ErrNoView)
	}
	if status != 200 {
		return s.refuseAckLocked(viewID, ViewAck{}, fmt.Sprintf("HTTP status %d", status)), nil
	}
	return s.applyViewAckLocked(viewID, body, false), nil
}

// refuseAckLocked records why Slack refused the ack of viewID's
// submission.
func (s *Server) refuseAckLocked(viewID string, ack ViewAck, why string) ViewAck {
	ack.Refused = why
	s.violations = append(s.violations, fmt.Sprintf("view_submission of view %s: %s", viewID, why))
	return ack
}

// applyViewAckLocked applies the ack raw of viewID's submission.
func (s *Server) applyViewAckLocked(viewID string, raw json.RawMessage, late bool) ViewAck {
	v := s.views[viewID]
	var ack ViewAck
	if late {
		ack.Refused = "acknowledged after the 3 s Slack waits" // the late ack is a violation already
		return ack
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		v.open, ack.Closed = false, true
		return ack
	}
	if err := json.Unmarshal(raw, &ack.Payload); err != nil || ack.Payload == nil {
		return s.refuseAckLocked(viewID, ack, "the ack is not a JSON object")
	}
	ack.Action, _ = ack.Payload["response_action"].(string)
	switch ack.Action {
	case "":
		v.open, ack.Closed = false, true
	case "clear":
		for _, x := range s.views {
			if x.root == v.root {
				x.open = false
			}
		}
		ack.Closed = true
	case "errors":
		errs, _ := ack.Payload["errors"].(map[string]any)
		if len(errs) == 0 {
			return s.refuseAckLocked(viewID, ack, "response_action errors without errors")
		}
		inputs := map[string]bool{}
		for _, in := range inputsOf(v) {
			inputs[in.block] = true
		}
		ack.Errors = map[string]string{}
		for k, e := range errs {
			msg, _ := e.(string)
			if !inputs[k] || msg == "" {
				// Slack shows "We had some trouble connecting" instead.
				return s.refuseAckLocked(viewID, ViewAck{Action: ack.Action, Payload: ack.Payload},
					fmt.Sprintf("errors[%q] names no input block of the view, or says nothing", k))
			}
			ack.Errors[k] = msg
		}
		v.errors = ack.Errors
	case "update", "push":
		rawView, _ := json.Marshal(ack.Payload["view"])
		self := v.id
		if ack.Action == "push" {
			self = ""
		}
		body, code, detail := s.parseViewLocked(string(rawView), self)
		if code != "" {
			return s.refuseAckLocked(viewID, ack, fmt.Sprintf("%s view: %s: %s", ack.Action, code, detail))
		}
		if ack.Action == "update" {
			v.body, v.hash, v.errors = body, s.viewHashLocked(), nil
			v.updates++
			break
		}
		depth := 0
		for _, x := range s.views {
			if x.open && x.root == v.root {
				depth++
			}
		}
		if depth >= maxViewStack {
			return s.refuseAckLocked(viewID, ack, fmt.Sprintf("push on a stack of %d views, limit %d", depth, maxViewStack))
		}
		s.newViewLocked(body, v.user, v.channel, v.id)
	default:
		return s.refuseAckLocked(viewID, ack, fmt.Sprintf("unknown response_action %q", ack.Action))
	}
	return ack
}
