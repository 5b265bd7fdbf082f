package fakeslack

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

const (
	defaultPinLimit     = 100
	defaultRepliesLimit = 1000
	maxRepliesLimit     = 1000
)

func (s *Server) handleLocked(method string, p map[string]string, r *http.Request) (map[string]any, string) {
	switch method {
	case "auth.test":
		return s.authTestLocked(), ""
	case "apps.connections.open":
		s.seq++
		ticket := fmt.Sprintf("ticket-%d", s.seq)
		s.tickets[ticket] = true
		return map[string]any{"url": "ws://" + r.Host + "/socket?ticket=" + ticket}, ""
	case "chat.postMessage":
		return s.postMessageLocked(method, p)
	case "chat.update":
		return s.updateMessageLocked(method, p)
	case "chat.postEphemeral":
		return s.postEphemeralLocked(method, p)
	case "pins.add", "pins.remove":
		return s.pinLocked(method == "pins.add", p)
	case "reactions.add", "reactions.remove":
		key := p["channel"] + "/" + p["timestamp"]
		if _, ok := s.messages[key]; !ok {
			return nil, "message_not_found"
		}
		if s.reactions[key] == nil {
			s.reactions[key] = map[string]bool{}
		}
		on := method == "reactions.add"
		if s.reactions[key][p["name"]] == on {
			if on {
				return nil, "already_reacted"
			}
			return nil, "no_reaction"
		}
		s.reactions[key][p["name"]] = on
		return map[string]any{}, ""
	case "agents.sessions.setStatus":
		return s.setSessionStatusLocked(method, p)
	case "chat.startStream":
		return s.startStreamLocked(method, p)
	case "chat.appendStream":
		return s.appendStreamLocked(method, p)
	case "chat.stopStream":
		return s.stopStreamLocked(method, p)
	case "conversations.replies":
		return s.repliesLocked(p)
	case "views.open":
		return s.openViewLocked(method, p)
	case "views.update":
		return s.updateViewLocked(method, p)
	case "team.info":
		return s.teamInfoLocked(p["team"])
	case "users.info":
		name, ok := s.users[p["user"]]
		if !ok {
			return nil, "user_not_found"
		}
		id := p["user"]
		return map[string]any{"user": map[string]any{
			"id": id, "team_id": s.teamOfLocked(id), "name": strings.ToLower(strings.ReplaceAll(name, " ", ".")), "real_name": name,
			"deleted": false, "is_bot": id == s.BotUserID,
			"profile": map[string]any{"display_name": name, "display_name_normalized": name, "real_name": name, "real_name_normalized": name},
		}}, ""
	}
	return nil, "unknown_method"
}

// violationLocked answers code and records why Slack refused the call.
// The answer says why in response_metadata.messages, as Slack's
// invalid_blocks and invalid_arguments answers do ("[ERROR] ...").
func (s *Server) violationLocked(method, code, detail string) (map[string]any, string) {
	s.violations = append(s.violations, fmt.Sprintf("%s: %s: %s", method, code, detail))
	return map[string]any{"response_metadata": map[string]any{"messages": []any{"[ERROR] " + detail}}}, code
}

// checkMessageLocked applies Slack's limits to text and blocks. The plan
// blocks a workspace refuses are answered but not held against the client.
func (s *Server) checkMessageLocked(method string, p map[string]string) (map[string]any, string) {
	text, hasText := p["text"]
	blocks, hasBlocks := p["blocks"]
	code, detail := checkText(text, hasText, blocks, hasBlocks, s.RejectNativePlan)
	if code == "" {
		return nil, ""
	}
	if s.RejectNativePlan && code == "invalid_blocks" {
		if plain, _ := checkText(text, hasText, blocks, hasBlocks, false); plain == "" {
			return nil, code
		}
	}
	return s.violationLocked(method, code, detail)
}

func (s *Server) postMessageLocked(method string, p map[string]string) (map[string]any, string) {
	if p["channel"] == "" {
		return nil, "channel_not_found"
	}
	if resp, code := s.checkMessageLocked(method, p); code != "" {
		return resp, code
	}
	meta, hasMeta := p["metadata"]
	if hasMeta {
		if code, detail := checkMetadata(meta); code != "" {
			return s.violationLocked(method, code, detail)
		}
	}
	m := &Message{Channel: p["channel"], TS: s.tsLocked(), ThreadTS: p["thread_ts"], Text: p["text"], Blocks: p["blocks"], User: s.caller, BotID: "B1", Metadata: meta}
	s.messages[m.Channel+"/"+m.TS] = m
	s.order = append(s.order, m.Channel+"/"+m.TS)
	return map[string]any{"channel": m.Channel, "ts": m.TS, "message": s.messageJSONLocked(m)}, ""
}

func (s *Server) updateMessageLocked(method string, p map[string]string) (map[string]any, string) {
	m, ok := s.messages[p["channel"]+"/"+p["ts"]]
	if !ok {
		return nil, "message_not_found"
	}
	if m.User != s.caller {
		return nil, "cant_update_message"
	}
	if resp, code := s.checkMessageLocked(method, p); code != "" {
		return resp, code
	}
	// Slack keeps the text or blocks a chat.update leaves out.
	if t, ok := p["text"]; ok {
		m.Text = t
	}
	if b, ok := p["blocks"]; ok {
		m.Blocks = b
		if b == "[]" {
			m.Blocks = ""
		}
	}
	m.Edits++
	return map[string]any{"channel": m.Channel, "ts": m.TS, "text": m.Text, "message": s.messageJSONLocked(m)}, ""
}

func (s *Server) pinLocked(add bool, p map[string]string) (map[string]any, string) {
	key := p["channel"] + "/" + p["timestamp"]
	if _, ok := s.messages[key]; !ok {
		return nil, "message_not_found"
	}
	if !add {
		if !s.pins[key] {
			return nil, "no_pin"
		}
		delete(s.pins, key)
		return map[string]any{}, ""
	}
	switch limit := s.PinLimit; {
	case s.pins[key]:
		return nil, "already_pinned"
	case s.unpinnable[key]:
		return nil, "not_pinnable"
	default:
		if limit <= 0 {
			limit = defaultPinLimit
		}
		n := 0
		for k, on := range s.pins {
			if on && strings.HasPrefix(k, p["channel"]+"/") {
				n++
			}
		}
		if n >= limit {
			return nil, "too_many_pins"
		}
	}
	s.pins[key] = true
	return map[string]any{}, ""
}

// repliesLocked answers conversations.replies: the thread's parent and
// replies, oldest first, a page of limit at a time.
func (s *Server) repliesLocked(p map[string]string) (map[string]any, string) {
	if p["channel"] == "" {
		return nil, "channel_not_found"
	}
	m, ok := s.messages[p["channel"]+"/"+p["ts"]]
	if !ok {
		return nil, "thread_not_found"
	}
	root := m.TS
	if m.ThreadTS != "" {
		root = m.ThreadTS
	}
	var thread []*Message
	for _, k := range s.order {
		if x, ok := s.messages[k]; ok && x.Channel == m.Channel && (x.TS == root || x.ThreadTS == root) {
			thread = append(thread, x)
		}
	}
	sort.SliceStable(thread, func(i, j int) bool { return tsMicros(thread[i].TS) < tsMicros(thread[j].TS) })
	inclusive := p["inclusive"] == "1" || p["inclusive"] == "true"
	kept := thread[:0]
	for _, x := range thread {
		t := tsMicros(x.TS)
		if o := p["oldest"]; o != "" && (t < tsMicros(o) || t == tsMicros(o) && !inclusive) {
			continue
		}
		if l := p["latest"]; l != "" && (t > tsMicros(l) || t == tsMicros(l) && !inclusive) {
			continue
		}
		kept = append(kept, x)
	}
	thread = kept
	limit := defaultRepliesLimit
	if v := p["limit"]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, "invalid_limit"
		}
		if n > 0 {
			limit = min(n, maxRepliesLimit)
		}
	}
	start := 0
	if c := p["cursor"]; c != "" {
		b, err := base64.StdEncoding.DecodeString(c)
		off, ok := strings.CutPrefix(string(b), "offset:")
		n, err2 := strconv.Atoi(off)
		if err != nil || !ok || err2 != nil || n < 0 || n > len(thread) {
			return nil, "invalid_cursor"
		}
		start = n
	}
	end := min(start+limit, len(thread))
	msgs := make([]any, 0, end-start)
	withMeta := p["include_all_metadata"] == "1" || p["include_all_metadata"] == "true"
	for _, x := range thread[start:end] {
		out := s.messageJSONLocked(x)
		if withMeta && x.Metadata != "" {
			var md any
			json.Unmarshal([]byte(x.Metadata), &md)
			out["metadata"] = md
		}
		msgs = append(msgs, out)
	}
	next := ""
	if end < len(thread) {
		next = base64.StdEncoding.EncodeToString([]byte("offset:" + strconv.Itoa(end)))
	}
	return map[string]any{"messages": msgs, "has_more": next != "", "response_metadata": map[string]any{"next_cursor": next}}, ""
}

// checkMetadata applies Slack's message metadata schema: a JSON object
// with a non-empty event_type (letters, digits and underscores) and an
// event_payload object whose values are strings, numbers or booleans
// (or objects and arrays of them).
func checkMetadata(meta string) (code, detail string) {
	var md struct {
		EventType    *string         `json:"event_type"`
		EventPayload json.RawMessage `json:"event_payload"`
	}
	if err := json.Unmarshal([]byte(meta), &md); err != nil {
		return "invalid_metadata_format", err.Error()
	}
	if md.EventType == nil || *md.EventType == "" || len(*md.EventType) > 255 {
		return "invalid_metadata_schema", "event_type missing or longer than 255"
	}
	for _, r := range *md.EventType {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return "invalid_metadata_schema", fmt.Sprintf("event_type %q", *md.EventType)
		}
	}
	var payload map[string]any
	if err := json.Unmarshal(md.EventPayload, &payload); err != nil || payload == nil {
		return "invalid_metadata_schema", "event_payload is not an object"
	}
	for k, v := range payload {
		if v == nil {
			return "invalid_metadata_schema", fmt.Sprintf("event_payload.%s is null", k)
		}
	}
	return "", ""
}

func (s *Server) messageJSONLocked(m *Message) map[string]any {
	out := map[string]any{"type": "message", "ts": m.TS, "text": m.Text, "user": m.User, "team": s.teamOfLocked(m.User)}
	if m.BotID != "" {
		out["bot_id"] = m.BotID
	}
	if m.Blocks != "" {
		var b any
		if json.Unmarshal([]byte(m.Blocks), &b) == nil {
			out["blocks"] = b
		}
	}
	if m.ThreadTS != "" {
		out["thread_ts"] = m.ThreadTS
		if m.ThreadTS != m.TS {
			out["parent_user_id"] = s.messages[m.Channel+"/"+m.ThreadTS].userOrEmpty()
		}
	}
	replies := 0
	for _, x := range s.messages {
		if x.Channel == m.Channel && x.ThreadTS == m.TS && x.TS != m.TS {
			replies++
		}
	}
	if replies > 0 {
		out["thread_ts"] = m.TS
		out["reply_count"] = replies
	}
	return out
}

func (m *Message) userOrEmpty() string {
	if m == nil {
		return ""
	}
	return m.User
}

// tsLocked hands out a new message timestamp: the current time, after
// every timestamp seen so far.
func (s *Server) tsLocked() string {
	now := time.Now().UnixMicro()
	if now <= s.lastTS {
		now = s.lastTS + 1
	}
	s.lastTS = now
	return fmt.Sprintf("%d.%06d", now/1e6, now%1e6)
}

// tsMicros reads a Slack timestamp ("1700000000.000100") as microseconds.
func tsMicros(ts string) int64 {
	sec, frac, _ := strings.Cut(ts, ".")
	s, _ := strconv.ParseInt(sec, 10, 64)
	frac = (frac + "000000")[:6]
	f, _ := strconv.ParseInt(frac, 10, 64)
	return s*1e6 + f
}

// storeEventLocked keeps a user's message pushed as an event, so the Web
// API can see it (conversations.replies, reactions, pins).
func (s *Server) storeEventLocked(ev map[string]any) {
	str := func(k string) string { v, _ := ev[k].(string); return v }
	if t := str("type"); t != "message" && t != "app_mention" {
		return
	}
	switch str("subtype") {
	case "", "bot_message", "thread_broadcast", "file_share":
	default:
		return
	}
	channel, ts := str("channel"), str("ts")
	if channel == "" || ts == "" {
		return
	}
	key := channel + "/" + ts
	if _, ok := s.messages[key]; ok {
		return
	}
	m := &Message{Channel: channel, TS: ts, ThreadTS: str("thread_ts"), Text: str("text"), User: str("user"), BotID: str("bot_id")}
	if b, ok := ev["blocks"]; ok {
		raw, _ := json.Marshal(b)
		m.Blocks = string(raw)
	}
	s.messages[key] = m
	s.order = append(s.order, key)
	s.memberLocked(channel, m.User)
	if t := tsMicros(ts); t > s.lastTS {
		s.lastTS = t
	}
}
