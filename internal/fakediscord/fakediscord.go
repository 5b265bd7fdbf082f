// Package fakediscord is a loopback fake of Discord for tests: the REST API
// under /api/v9 (messages, edits, the current pins route, threads, typing,
// channels, 429s with a JSON retry_after body and rate-limit headers) and
// the gateway websocket (GET /api/v9/gateway, op 10 HELLO, op 2 IDENTIFY,
// READY, op 0 dispatches with sequence numbers, op 1 heartbeats answered
// with op 11, op 7 RECONNECT and op 6 RESUME with replay).
//
// A zero Server is ready. It records REST calls and can inject errors.
package fakediscord

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// BotID is the bot user's id.
const BotID = "900000000000000001"

// Call is one REST request.
type Call struct {
	Method, Path string
	Body         map[string]any
	Status       int
	Code         int // Discord error code, if any
	At           time.Time
}

// Message is a message the fake holds.
type Message struct {
	ID, ChannelID, Content, AuthorID string
	Embeds                           []map[string]any
	Reference                        string // message_reference.message_id
	Type                             int
	Edits                            int
}

type failure struct {
	status, code int
}

// Server is the fake.
type Server struct {
	// HeartbeatInterval in HELLO; default 45 s.
	HeartbeatInterval time.Duration

	mu         sync.Mutex // guards everything below
	calls      []Call
	messages   map[string]*Message
	order      []string
	pins       map[string]bool
	channels   map[string]map[string]any
	typing     map[string]int
	failures   map[string][]failure // "PATCH messages" etc.
	editLimit  int
	editPer    time.Duration
	editTimes  map[string][]time.Time
	retryUntil map[string]time.Time
	violations []string
	nextID     int64
	seq        int64
	events     []event // dispatched, for RESUME replay
	conns      map[*websocket.Conn]*conn
	identifies int
	resumes    int
	sessionID  string
}

type event struct {
	seq  int64
	name string
	data any
}

type conn struct {
	mu     sync.Mutex // guards writes
	ready  bool
	closed bool
}

func (s *Server) initLocked() {
	if s.messages == nil {
		s.messages = map[string]*Message{}
		s.pins = map[string]bool{}
		s.channels = map[string]map[string]any{}
		s.typing = map[string]int{}
		s.failures = map[string][]failure{}
		s.editTimes = map[string][]time.Time{}
		s.retryUntil = map[string]time.Time{}
		s.conns = map[*websocket.Conn]*conn{}
		s.nextID = 1000000000000000000
		s.sessionID = "fake-session"
	}
}

func (s *Server) idLocked() string {
	s.nextID++
	return strconv.FormatInt(s.nextID, 10)
}

// AddChannel registers a channel (type 0 text, 1 DM, 11 public thread).
func (s *Server) AddChannel(id string, typ int, guildID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.channels[id] = map[string]any{"id": id, "type": typ, "guild_id": guildID}
}

// LimitEdits makes message edits answer 429 past n per channel in per.
func (s *Server) LimitEdits(n int, per time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.editLimit, s.editPer = n, per
}

// Fail queues an error for the next request matching "METHOD kind", where
// kind is messages, message, pins, typing or threads.
func (s *Server) Fail(route string, status, code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.failures[route] = append(s.failures[route], failure{status, code})
}

// Calls returns REST calls whose "METHOD path" contains match.
func (s *Server) Calls(match string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if strings.Contains(c.Method+" "+c.Path, match) {
			out = append(out, c)
		}
	}
	return out
}

// Messages returns the channel's messages, oldest first.
func (s *Server) Messages(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, id := range s.order {
		if m, ok := s.messages[id]; ok && m.ChannelID == channel {
			out = append(out, *m)
		}
	}
	return out
}

// Pinned lists the channel's pinned message ids.
func (s *Server) Pinned(channel string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, on := range s.pins {
		if m, ok := s.messages[id]; on && ok && m.ChannelID == channel {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// Typing counts typing requests in a channel.
func (s *Server) Typing(channel string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.typing[channel]
}

// Violations lists requests made before a 429's retry_after had passed.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}

// Sessions reports how many IDENTIFYs and RESUMEs the gateway saw.
func (s *Server) Sessions() (identifies, resumes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.identifies, s.resumes
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/gateway" || r.URL.Path == "/gateway/" {
		s.gateway(w, r)
		return
	}
	path, ok := strings.CutPrefix(r.URL.Path, "/api/v9/")
	if !ok {
		writeErr(w, http.StatusNotFound, 0, "404: Not Found")
		return
	}
	var body map[string]any
	if raw, _ := io.ReadAll(r.Body); len(raw) > 0 {
		json.Unmarshal(raw, &body)
	}
	s.mu.Lock()
	s.initLocked()
	status, code, resp := s.routeLocked(r, path, body)
	s.calls = append(s.calls, Call{Method: r.Method, Path: path, Body: body, Status: status, Code: code, At: time.Now()})
	s.mu.Unlock()
	if status == http.StatusTooManyRequests {
		ra := resp.(float64)
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(ra))))
		w.Header().Set("X-RateLimit-Limit", "5")
		w.Header().Set("X-RateLimit-Remaining", "0")
		w.Header().Set("X-RateLimit-Reset-After", strconv.FormatFloat(ra, 'f', 3, 64))
		w.Header().Set("X-RateLimit-Bucket", "edit-bucket")
		w.Header().Set("X-RateLimit-Scope", "user")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"message": "You are being rate limited.", "retry_after": ra, "global": false})
		return
	}
	if status >= 400 {
		writeErr(w, status, code, fmt.Sprint(resp))
		return
	}
	if resp == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(resp)
}

func writeErr(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"code": code, "message": msg})
}

func (s *Server) routeLocked(r *http.Request, path string, body map[string]any) (int, int, any) {
	parts := strings.Split(path, "/")
	kind := ""
	switch {
	case path == "gateway" || path == "gateway/bot":
		return 200, 0, map[string]any{"url": "ws://" + r.Host + "/gateway", "shards": 1}
	case path == "users/@me":
		return 200, 0, map[string]any{"id": BotID, "username": "pinplan", "bot": true}
	case len(parts) == 2 && parts[0] == "channels":
		kind = "channel"
	case len(parts) == 3 && parts[2] == "messages":
		kind = "messages"
	case len(parts) == 4 && parts[2] == "messages":
		kind = "message"
	case len(parts) == 5 && parts[2] == "messages" && parts[3] == "pins":
		kind = "pins"
	case len(parts) == 3 && parts[2] == "typing":
		kind = "typing"
	case len(parts) == 5 && parts[4] == "threads":
		kind = "threads"
	default:
		return 404, 0, "404: Not Found"
	}
	channel := parts[1]
	now := time.Now()
	route := r.Method + " " + kind
	if until, ok := s.retryUntil[route+" "+channel]; ok && now.Before(until) {
		s.violations = append(s.violations, fmt.Sprintf("%s in %s %s before retry_after ended", route, channel, until.Sub(now)))
	}
	if q := s.failures[route]; len(q) > 0 {
		f := q[0]
		s.failures[route] = q[1:]
		return f.status, f.code, "injected"
	}
	if route == "PATCH message" && s.editLimit > 0 {
		var kept []time.Time
		for _, t := range s.editTimes[channel] {
			if now.Sub(t) < s.editPer {
				kept = append(kept, t)
			}
		}
		if len(kept) >= s.editLimit {
			ra := (s.editPer - now.Sub(kept[0])).Seconds()
			ra = math.Ceil(ra*1000) / 1000
			s.retryUntil[route+" "+channel] = now.Add(time.Duration(ra * float64(time.Second)))
			s.editTimes[channel] = kept
			return http.StatusTooManyRequests, 0, ra
		}
		s.editTimes[channel] = append(kept, now)
	}
	switch route {
	case "GET channel":
		ch, ok := s.channels[channel]
		if !ok {
			return 404, 10003, "Unknown Channel"
		}
		return 200, 0, ch
	case "POST messages":
		m := &Message{ID: s.idLocked(), ChannelID: channel, AuthorID: BotID}
		m.Content, _ = body["content"].(string)
		if embeds, ok := body["embeds"].([]any); ok {
			for _, e := range embeds {
				if em, ok := e.(map[string]any); ok {
					m.Embeds = append(m.Embeds, em)
				}
			}
		}
		if ref, ok := body["message_reference"].(map[string]any); ok {
			m.Reference, _ = ref["message_id"].(string)
		}
		s.messages[m.ID] = m
		s.order = append(s.order, m.ID)
		s.dispatchLocked("MESSAGE_CREATE", s.messageJSON(m))
		return 200, 0, s.messageJSON(m)
	case "PATCH message", "DELETE message":
		m, ok := s.messages[parts[3]]
		if !ok || m.ChannelID != channel {
			return 404, 10008, "Unknown Message"
		}
		if r.Method == http.MethodDelete {
			delete(s.messages, m.ID)
			delete(s.pins, m.ID)
			return 204, 0, nil
		}
		if c, ok := body["content"].(string); ok {
			m.Content = c
		}
		if embeds, ok := body["embeds"].([]any); ok {
			m.Embeds = nil
			for _, e := range embeds {
				if em, ok := e.(map[string]any); ok {
					m.Embeds = append(m.Embeds, em)
				}
			}
		}
		m.Edits++
		return 200, 0, s.messageJSON(m)
	case "PUT pins", "DELETE pins":
		m, ok := s.messages[parts[4]]
		if !ok || m.ChannelID != channel {
			return 404, 10008, "Unknown Message"
		}
		if r.Method == http.MethodPut {
			if !s.pins[m.ID] {
				s.pins[m.ID] = true
				// Discord announces a pin with a system message.
				sys := &Message{ID: s.idLocked(), ChannelID: channel, AuthorID: BotID, Type: 6, Reference: m.ID}
				s.messages[sys.ID] = sys
				s.order = append(s.order, sys.ID)
				s.dispatchLocked("MESSAGE_CREATE", s.messageJSON(sys))
			}
		} else {
			delete(s.pins, m.ID)
		}
		return 204, 0, nil
	case "POST typing":
		s.typing[channel]++
		return 204, 0, nil
	case "POST threads":
		id := s.idLocked()
		name, _ := body["name"].(string)
		ch := map[string]any{"id": id, "type": 11, "parent_id": channel, "name": name, "guild_id": s.channels[channel]["guild_id"]}
		s.channels[id] = ch
		s.dispatchLocked("THREAD_CREATE", ch)
		return 201, 0, ch
	}
	return 405, 0, "405: Method Not Allowed"
}

func (s *Server) messageJSON(m *Message) map[string]any {
	out := map[string]any{
		"id": m.ID, "channel_id": m.ChannelID, "content": m.Content, "type": m.Type,
		"author":    map[string]any{"id": m.AuthorID, "username": "pinplan", "bot": m.AuthorID == BotID},
		"timestamp": time.Now().UTC().Format(time.RFC3339), "mentions": []any{}, "embeds": m.Embeds,
	}
	if ch, ok := s.channels[m.ChannelID]; ok && ch["guild_id"] != "" {
		out["guild_id"] = ch["guild_id"]
	}
	if m.Reference != "" {
		out["message_reference"] = map[string]any{"message_id": m.Reference, "channel_id": m.ChannelID}
	}
	return out
}

// UserMessage dispatches MESSAGE_CREATE for a user's message and returns
// its id. mentionBot adds the bot to mentions and <@id> to the content.
func (s *Server) UserMessage(channel, userID, content string, mentionBot bool) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	m := &Message{ID: s.idLocked(), ChannelID: channel, AuthorID: userID, Content: content}
	if mentionBot {
		m.Content = "<@" + BotID + "> " + content
	}
	s.messages[m.ID] = m
	s.order = append(s.order, m.ID)
	js := s.messageJSON(m)
	js["author"] = map[string]any{"id": userID, "username": "user" + userID, "bot": false}
	if mentionBot {
		js["mentions"] = []any{map[string]any{"id": BotID, "username": "pinplan", "bot": true}}
	}
	s.dispatchLocked("MESSAGE_CREATE", js)
	return m.ID
}

// BotMessage dispatches a message from another bot.
func (s *Server) BotMessage(channel, content string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	m := map[string]any{"id": s.idLocked(), "channel_id": channel, "content": "<@" + BotID + "> " + content, "type": 0,
		"author": map[string]any{"id": "777", "username": "otherbot", "bot": true}, "mentions": []any{map[string]any{"id": BotID}},
		"timestamp": time.Now().UTC().Format(time.RFC3339)}
	s.dispatchLocked("MESSAGE_CREATE", m)
}

func (s *Server) dispatchLocked(name string, data any) {
	s.seq++
	ev := event{seq: s.seq, name: name, data: data}
	s.events = append(s.events, ev)
	for c, st := range s.conns {
		if st.ready {
			go s.write(c, st, map[string]any{"op": 0, "s": ev.seq, "t": ev.name, "d": ev.data})
		}
	}
}

func (s *Server) write(c *websocket.Conn, st *conn, v any) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.closed {
		c.WriteJSON(v)
	}
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func (s *Server) gateway(w http.ResponseWriter, r *http.Request) {
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	st := &conn{}
	s.mu.Lock()
	s.initLocked()
	s.conns[c] = st
	hb := s.HeartbeatInterval
	s.mu.Unlock()
	if hb == 0 {
		hb = 45 * time.Second
	}
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		st.mu.Lock()
		st.closed = true
		st.mu.Unlock()
		c.Close()
	}()
	s.write(c, st, map[string]any{"op": 10, "d": map[string]any{"heartbeat_interval": hb.Milliseconds()}})
	for {
		var msg struct {
			Op int             `json:"op"`
			D  json.RawMessage `json:"d"`
		}
		if err := c.ReadJSON(&msg); err != nil {
			return
		}
		switch msg.Op {
		case 1:
			s.write(c, st, map[string]any{"op": 11})
		case 2:
			s.mu.Lock()
			s.identifies++
			s.seq++
			ready := event{seq: s.seq, name: "READY", data: map[string]any{"v": 9, "session_id": s.sessionID,
				"user": map[string]any{"id": BotID, "username": "pinplan", "bot": true}, "guilds": []any{},
				"resume_gateway_url": "ws://" + r.Host + "/gateway", "application": map[string]any{"id": BotID}}}
			s.events = append(s.events, ready)
			st.ready = true
			s.mu.Unlock()
			s.write(c, st, map[string]any{"op": 0, "s": ready.seq, "t": ready.name, "d": ready.data})
		case 6:
			var res struct {
				SessionID string `json:"session_id"`
				Seq       int64  `json:"seq"`
			}
			json.Unmarshal(msg.D, &res)
			s.mu.Lock()
			s.resumes++
			var replay []event
			for _, ev := range s.events {
				if ev.seq > res.Seq && ev.name != "READY" {
					replay = append(replay, ev)
				}
			}
			s.seq++
			resumed := s.seq
			st.ready = true
			st.mu.Lock() // hold writes so the replay comes first
			s.mu.Unlock()
			for _, ev := range replay {
				c.WriteJSON(map[string]any{"op": 0, "s": ev.seq, "t": ev.name, "d": ev.data})
			}
			c.WriteJSON(map[string]any{"op": 0, "s": resumed, "t": "RESUMED", "d": map[string]any{}})
			st.mu.Unlock()
		}
	}
}

// Reconnect asks every gateway client to reconnect (op 7).
func (s *Server) Reconnect() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, st := range s.conns {
		st.ready = false // events from now on wait for the resume's replay
		go s.write(c, st, map[string]any{"op": 7, "d": nil})
	}
}

// Drop cuts every gateway connection without a close frame.
func (s *Server) Drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, st := range s.conns {
		st.ready = false
		c.UnderlyingConn().Close()
	}
}

// Connected reports how many gateway clients have identified or resumed.
func (s *Server) Connected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, st := range s.conns {
		if st.ready {
			n++
		}
	}
	return n
}
