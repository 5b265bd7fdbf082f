package fakeslack

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

const (
	// responseURLPrefix is where the fake serves response_url, as
	// hooks.slack.com/actions/<team>/<id>/<secret> does.
	responseURLPrefix = "/actions/"
	// A response_url takes 5 posts within 30 minutes of the click.
	maxResponseURLUses = 5
	responseURLLife    = 30 * time.Minute
)

// responseURL is a response_url handed out with a block_actions payload.
type responseURL struct {
	channel, ts, threadTS, user string
	created                     time.Time
	uses                        int
}

// ResponseURLPost is one POST to a response_url.
type ResponseURLPost struct {
	URL  string // the response_url posted to
	Body map[string]any
	At   time.Time
	// Error is the error answered ("" for ok): expired_url, used_url,
	// invalid_blocks and the like.
	Error  string
	Status int
}

// memberLocked notes that user is in channel, for chat.postEphemeral.
func (s *Server) memberLocked(channel, user string) {
	if channel == "" || user == "" {
		return
	}
	if s.members[channel] == nil {
		s.members[channel] = map[string]bool{}
	}
	s.members[channel][user] = true
}

// inChannelLocked reports whether user is in channel as far as the fake
// knows: registered with AddUser (a member of every channel), the author
// of a message in it, or someone who clicked a button in it.
func (s *Server) inChannelLocked(channel, user string) bool {
	if _, ok := s.users[user]; ok {
		return true
	}
	return s.members[channel][user]
}

// postEphemeralLocked answers chat.postEphemeral: checked as
// chat.postMessage is, kept apart from the channel's messages (an
// ephemeral message cannot be updated, pinned, reacted to or read back).
func (s *Server) postEphemeralLocked(method string, p map[string]string) (map[string]any, string) {
	if p["channel"] == "" {
		return nil, "channel_not_found"
	}
	if !s.inChannelLocked(p["channel"], p["user"]) {
		return nil, "user_not_in_channel"
	}
	if resp, code := s.checkMessageLocked(method, p); code != "" {
		return resp, code
	}
	m := &Message{Channel: p["channel"], TS: s.tsLocked(), ThreadTS: p["thread_ts"], Text: p["text"], Blocks: p["blocks"],
		User: s.caller, BotID: "B1", Recipient: p["user"]}
	s.ephemerals = append(s.ephemerals, m)
	return map[string]any{"message_ts": m.TS}, ""
}

// Ephemerals returns the ephemeral messages sent in channel, oldest
// first, each with its Recipient: chat.postEphemeral calls and ephemeral
// response_url replies.
func (s *Server) Ephemerals(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.ephemerals {
		if m.Channel == channel {
			out = append(out, *m)
		}
	}
	return out
}

// ResponseURLPosts returns the POSTs made to response_urls, oldest first.
func (s *Server) ResponseURLPosts() []ResponseURLPost {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ResponseURLPost(nil), s.posts...)
}

// BlockActions returns the block_actions payload Slack sends when userID
// clicks the button with actionID on the bot's message messageTS in
// channel, with a response_url served by the fake. It returns nil, and
// records nothing, when there is no such message from the bot or the
// message has no button with that action_id: there is nothing to click.
// The first button with actionID wins when several blocks use it.
//
// The user counts as a member of channel from then on (chat.postEphemeral
// to them is accepted). The response_url is on the fake's own address:
// the Host of the latest Web API request, or BaseURL when set. Its
// trigger_id opens one modal (views.open) within TriggerLife of being
// sent.
func (s *Server) BlockActions(userID, channel, messageTS, actionID string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.blockActionLocked(userID, channel, messageTS, actionID, func(blocks []any) (string, map[string]any, map[string]any) {
		blockID, button := findElement(blocks, "button", actionID, nil)
		if button == nil {
			return "", nil, nil
		}
		action := map[string]any{"type": "button", "action_id": actionID, "block_id": blockID, "text": button["text"]}
		for _, k := range []string{"value", "style", "url"} {
			if v, ok := button[k]; ok {
				action[k] = v
			}
		}
		return blockID, action, nil
	})
}

// Overflow returns the block_actions payload Slack sends when userID
// picks the option with value in the overflow menu actionID on the bot's
// message messageTS in channel: actions[0] is of type overflow with the
// selected_option as the menu holds it. Like BlockActions, it returns
// nil and records nothing when the message, as it is now, has no such
// menu with that option: the person could not have picked it. When
// several blocks have a menu with actionID, the first holding value wins.
func (s *Server) Overflow(userID, channel, messageTS, actionID, value string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.blockActionLocked(userID, channel, messageTS, actionID, func(blocks []any) (string, map[string]any, map[string]any) {
		var option map[string]any
		blockID, menu := findElement(blocks, "overflow", actionID, func(el map[string]any) bool {
			option = findOption(el, value)
			return option != nil
		})
		if menu == nil {
			return "", nil, nil
		}
		return blockID, map[string]any{"type": "overflow", "action_id": actionID, "block_id": blockID, "selected_option": option}, nil
	})
}

// StaticSelect returns the block_actions payload Slack sends when userID
// picks the option with value in the static_select actionID on the bot's
// message messageTS in channel (actions[0].selected_option, and the
// select's new state in state.values), nil when there is no such select
// with that option, as Overflow.
func (s *Server) StaticSelect(userID, channel, messageTS, actionID, value string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.blockActionLocked(userID, channel, messageTS, actionID, func(blocks []any) (string, map[string]any, map[string]any) {
		var option map[string]any
		blockID, sel := findElement(blocks, "static_select", actionID, func(el map[string]any) bool {
			option = findOption(el, value)
			return option != nil
		})
		if sel == nil {
			return "", nil, nil
		}
		action := map[string]any{"type": "static_select", "action_id": actionID, "block_id": blockID, "selected_option": option}
		if p, ok := sel["placeholder"]; ok {
			action["placeholder"] = p
		}
		state := map[string]any{blockID: map[string]any{actionID: map[string]any{"type": "static_select", "selected_option": option}}}
		return blockID, action, state
	})
}

// blockActionLocked builds the block_actions payload of userID acting on
// the element pick finds in the blocks of the bot's message messageTS in
// channel; nil when there is no such message or pick finds nothing. pick
// returns the element's block_id ("" when the block has none: Slack names
// it), the action and the state values the action leaves.
func (s *Server) blockActionLocked(userID, channel, messageTS, actionID string,
	pick func(blocks []any) (blockID string, action, state map[string]any)) map[string]any {
	s.initLocked()
	m, ok := s.messages[channel+"/"+messageTS]
	if !ok || m.BotID == "" || m.User != s.botOfLocked(s.channelTeamLocked(channel)) || m.Blocks == "" {
		return nil
	}
	var blocks []any
	if json.Unmarshal([]byte(m.Blocks), &blocks) != nil {
		return nil
	}
	blockID, action, state := pick(blocks)
	if action == nil {
		return nil
	}
	if blockID == "" {
		// Slack names a block that was sent without a block_id.
		h := fnv.New32a()
		fmt.Fprintf(h, "%s/%s/%s", channel, messageTS, actionID)
		blockID = fmt.Sprintf("%05x", h.Sum32()&0xfffff)
		action["block_id"] = blockID
		for _, v := range state {
			state = map[string]any{blockID: v}
		}
	}
	if state == nil {
		state = map[string]any{}
	}
	action["action_ts"] = s.tsLocked()
	team := s.channelTeamLocked(channel)
	s.memberLocked(channel, userID)
	s.seq++
	secret := fmt.Sprintf("%016x%08x", time.Now().UnixNano(), s.seq)
	path := fmt.Sprintf("%s%s/%d/%s", responseURLPrefix, s.TeamID, 1000000000+s.seq, secret)
	s.responses[path] = &responseURL{channel: channel, ts: messageTS, threadTS: m.ThreadTS, user: userID, created: time.Now()}
	base := strings.TrimSuffix(s.BaseURL, "/")
	if base == "" {
		base = "http://" + s.host
	}
	triggerID := fmt.Sprintf("%d.%s.%s", 1000000000+s.seq, s.TeamID, secret[:16])
	s.issueTriggerLocked(triggerID, userID, channel)

	container := map[string]any{"type": "message", "message_ts": m.TS, "channel_id": channel, "is_ephemeral": false}
	if m.ThreadTS != "" {
		container["thread_ts"] = m.ThreadTS
	}
	message := s.messageJSONLocked(m)
	message["app_id"] = "A1"
	channelName := strings.ToLower(channel)
	if strings.HasPrefix(channel, "D") {
		channelName = "directmessage"
	}
	return map[string]any{
		"type":                  "block_actions",
		"user":                  s.interactionUserLocked(userID),
		"api_app_id":            "A1",
		"token":                 "legacy",
		"container":             container,
		"trigger_id":            triggerID,
		"team":                  map[string]any{"id": team, "domain": strings.ToLower(team)},
		"enterprise":            enterpriseJSON(s.enterpriseOfLocked(team)),
		"is_enterprise_install": s.orgWideLocked(team),
		"channel":               map[string]any{"id": channel, "name": channelName},
		"message":               message,
		"state":                 map[string]any{"values": state},
		"response_url":          base + path,
		"actions":               []any{action},
	}
}

// interactionUserLocked is the user object of an interaction payload.
func (s *Server) interactionUserLocked(userID string) map[string]any {
	username := strings.ToLower(userID)
	if name, ok := s.users[userID]; ok {
		username = strings.ToLower(strings.ReplaceAll(name, " ", "."))
	}
	return map[string]any{"id": userID, "username": username, "name": username, "team_id": s.TeamID}
}

// findElement finds the first element of type typ with actionID that
// accept takes (nil takes any) in an actions block or a section's
// accessory, and returns its block's block_id.
func findElement(blocks []any, typ, actionID string, accept func(map[string]any) bool) (string, map[string]any) {
	for _, raw := range blocks {
		b, _ := raw.(map[string]any)
		var elems []any
		switch b["type"] {
		case "actions":
			elems, _ = b["elements"].([]any)
		case "section":
			if acc, ok := b["accessory"]; ok {
				elems = []any{acc}
			}
		}
		for _, e := range elems {
			el, _ := e.(map[string]any)
			if el["type"] == typ && el["action_id"] == actionID && (accept == nil || accept(el)) {
				id, _ := b["block_id"].(string)
				return id, el
			}
		}
	}
	return "", nil
}

// findOption returns the option with value among a menu's options or
// option groups, nil if it has none.
func findOption(menu map[string]any, value string) map[string]any {
	opts, _ := menu["options"].([]any)
	groups, _ := menu["option_groups"].([]any)
	for _, g := range groups {
		gm, _ := g.(map[string]any)
		inner, _ := gm["options"].([]any)
		opts = append(opts, inner...)
	}
	for _, o := range opts {
		if om, _ := o.(map[string]any); om["value"] == value {
			return om
		}
	}
	return nil
}

// PushInteraction sends payload (a BlockActions payload, say) in an
// interactive Socket Mode envelope, as Push sends events: to one
// connection, waiting for one when none is open, sent again when it is not
// acknowledged in time or its connection closes first. Acks are recorded
// with the others (Acks); one that comes later than AckTimeout (3 s)
// after the envelope was first sent is a violation, as the user saw the
// click fail.
func (s *Server) PushInteraction(payload map[string]any) (string, error) {
	raw, err := json.Marshal(payload)
	if err != nil {
		return "", fmt.Errorf("fakeslack: interaction payload: %w", err)
	}
	typ, _ := payload["type"].(string)
	trigger, _ := payload["trigger_id"].(string)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.seq++
	e := &envelope{id: fmt.Sprintf("env-%d", s.seq), eventID: typ, interactive: true, payload: raw, trigger: trigger}
	s.pending = append(s.pending, e)
	s.flushLocked()
	return e.id, nil
}

// PushCommand delivers a slash command over Socket Mode, as Slack sends
// one: a slash_commands envelope whose payload is the command's fields
// (command, text, user_id, channel_id, team_id, trigger_id, ...), to be
// acknowledged within 3 s. Fields left out get Slack's usual values; the
// response_url is the fake's, taking what a command's does (ephemeral by
// default, 5 posts in 30 minutes).
func (s *Server) PushCommand(fields map[string]any) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.commandLocked(fields)
	raw, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("fakeslack: command payload: %w", err)
	}
	s.seq++
	trigger, _ := p["trigger_id"].(string)
	e := &envelope{id: fmt.Sprintf("env-%d", s.seq), eventID: "slash_commands", interactive: true, command: true, payload: raw, trigger: trigger}
	s.pending = append(s.pending, e)
	s.flushLocked()
	return e.id, nil
}

// CommandBody is the body Slack POSTs to a slash command's Request URL
// (application/x-www-form-urlencoded, the command's fields); sign it as
// an event request is signed.
func (s *Server) CommandBody(fields map[string]any) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	form := url.Values{}
	for k, v := range s.commandLocked(fields) {
		form.Set(k, fmt.Sprint(v))
	}
	return []byte(form.Encode())
}

// commandLocked fills in a command's fields and registers its
// response_url.
func (s *Server) commandLocked(fields map[string]any) map[string]any {
	s.initLocked()
	channel, _ := fields["channel_id"].(string)
	team := s.channelTeamLocked(channel)
	p := map[string]any{"token": "legacy", "team_id": team, "team_domain": "fake", "api_app_id": "A1", "command": "/pinplan",
		"user_name": "someone", "channel_name": "general", "is_enterprise_install": s.orgWideLocked(team)}
	if ent := s.enterpriseOfLocked(team); ent != "" {
		p["enterprise_id"] = ent
	}
	for k, v := range fields {
		p[k] = v
	}
	s.seq++
	if p["trigger_id"] == nil {
		p["trigger_id"] = fmt.Sprintf("trig-%d", s.seq)
	}
	user, _ := p["user_id"].(string)
	channel, _ = p["channel_id"].(string)
	s.issueTriggerLocked(fmt.Sprint(p["trigger_id"]), user, channel)
	if p["response_url"] == nil {
		secret := fmt.Sprintf("%016x%08x", time.Now().UnixNano(), s.seq)
		path := fmt.Sprintf("%s%s/%d/%s", responseURLPrefix, s.TeamID, 1000000000+s.seq, secret)
		s.responses[path] = &responseURL{channel: channel, user: user, created: time.Now()}
		base := strings.TrimSuffix(s.BaseURL, "/")
		if base == "" {
			base = "http://" + s.host
		}
		p["response_url"] = base + path
	}
	return p
}

// MessageShortcut returns the message_action payload Slack sends when
// userID runs the message shortcut callbackID on message in channel (the
// message as an event carries it: ts, user, text, thread_ts, files),
// with a response_url served by the fake. Deliver it with
// PushInteraction or InteractionBody.
func (s *Server) MessageShortcut(userID, channel, callbackID string, message map[string]any) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.seq++
	secret := fmt.Sprintf("%016x%08x", time.Now().UnixNano(), s.seq)
	path := fmt.Sprintf("%s%s/%d/%s", responseURLPrefix, s.TeamID, 1000000000+s.seq, secret)
	ts, _ := message["ts"].(string)
	thread, _ := message["thread_ts"].(string)
	s.responses[path] = &responseURL{channel: channel, ts: ts, threadTS: thread, user: userID, created: time.Now()}
	base := strings.TrimSuffix(s.BaseURL, "/")
	if base == "" {
		base = "http://" + s.host
	}
	team := s.channelTeamLocked(channel)
	msg := map[string]any{"type": "message"}
	for k, v := range message {
		msg[k] = v
	}
	username := strings.ToLower(userID)
	if name, ok := s.users[userID]; ok {
		username = strings.ToLower(strings.ReplaceAll(name, " ", "."))
	}
	triggerID := fmt.Sprintf("%d.%s.%s", 1000000000+s.seq, s.TeamID, secret[:16])
	s.issueTriggerLocked(triggerID, userID, channel)
	return map[string]any{
		"type":                  "message_action",
		"callback_id":           callbackID,
		"trigger_id":            triggerID,
		"response_url":          base + path,
		"message_ts":            ts,
		"message":               msg,
		"user":                  map[string]any{"id": userID, "name": username, "team_id": s.TeamID},
		"channel":               map[string]any{"id": channel, "name": strings.ToLower(channel)},
		"team":                  map[string]any{"id": team, "domain": strings.ToLower(team)},
		"enterprise":            enterpriseJSON(s.enterpriseOfLocked(team)),
		"token":                 "legacy",
		"action_ts":             s.tsLocked(),
		"is_enterprise_install": s.orgWideLocked(team),
	}
}

// InteractionBody is the body Slack POSTs to an app's interactivity
// Request URL (application/x-www-form-urlencoded): payload=<the JSON>.
// Sign it as an event request is signed, and send it at once: the
// payload's trigger_id counts as sent now.
func (s *Server) InteractionBody(payload map[string]any) []byte {
	raw, _ := json.Marshal(payload)
	if id, ok := payload["trigger_id"].(string); ok {
		s.mu.Lock()
		s.sendTriggerLocked(id, time.Now())
		s.mu.Unlock()
	}
	return []byte(url.Values{"payload": {string(raw)}}.Encode())
}

// serveResponseURL answers a POST to a response_url, as Slack does: the
// JSON body replaces the clicked message (replace_original), deletes it
// (delete_original), posts in the channel (response_type in_channel) or,
// by default, sends the clicking user an ephemeral message.
func (s *Server) serveResponseURL(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var body map[string]any
	badJSON := json.Unmarshal(raw, &body) != nil
	s.mu.Lock()
	s.initLocked()
	post := ResponseURLPost{URL: "http://" + r.Host + r.URL.Path, Body: body, At: time.Now(), Status: http.StatusOK}
	post.Status, post.Error = s.respondLocked(r.URL.Path, body, badJSON)
	s.posts = append(s.posts, post)
	s.mu.Unlock()
	if post.Error != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(post.Status)
		json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": post.Error})
		return
	}
	writeJSON(w, map[string]any{"ok": true})
}

func (s *Server) respondLocked(path string, body map[string]any, badJSON bool) (int, string) {
	ru, ok := s.responses[path]
	switch {
	case !ok || time.Since(ru.created) > responseURLLife:
		return http.StatusNotFound, "expired_url"
	case ru.uses >= maxResponseURLUses:
		return http.StatusNotFound, "used_url"
	case badJSON:
		return http.StatusBadRequest, "invalid_payload"
	}
	ru.uses++
	str := func(k string) (string, bool) {
		v, ok := body[k]
		if !ok {
			return "", false
		}
		if s, ok := v.(string); ok {
			return s, true
		}
		b, _ := json.Marshal(v)
		return string(b), true
	}
	truthy := func(k string) bool { v, _ := str(k); return v == "true" }
	p := map[string]string{}
	for _, k := range []string{"text", "blocks", "thread_ts"} {
		if v, ok := str(k); ok && v != "null" {
			p[k] = v
		}
	}
	key := ru.channel + "/" + ru.ts
	if truthy("delete_original") {
		if _, ok := s.messages[key]; !ok {
			return http.StatusNotFound, "message_not_found"
		}
		delete(s.messages, key)
		delete(s.pins, key)
		return http.StatusOK, ""
	}
	if _, code := s.checkMessageLocked("response_url", p); code != "" {
		return http.StatusBadRequest, code
	}
	if truthy("replace_original") {
		m, ok := s.messages[key]
		if !ok {
			return http.StatusNotFound, "message_not_found"
		}
		m.Text = p["text"]
		m.Blocks = p["blocks"]
		if m.Blocks == "[]" {
			m.Blocks = ""
		}
		m.Edits++
		return http.StatusOK, ""
	}
	thread := p["thread_ts"]
	if thread == "" {
		thread = ru.threadTS
	}
	m := &Message{Channel: ru.channel, TS: s.tsLocked(), ThreadTS: thread, Text: p["text"], Blocks: p["blocks"], User: s.BotUserID, BotID: "B1"}
	if rt, _ := str("response_type"); rt == "in_channel" {
		s.messages[m.Channel+"/"+m.TS] = m
		s.order = append(s.order, m.Channel+"/"+m.TS)
		return http.StatusOK, ""
	}
	m.Recipient = ru.user
	s.ephemerals = append(s.ephemerals, m)
	return http.StatusOK, ""
}
