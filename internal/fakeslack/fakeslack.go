// Package fakeslack is a loopback fake of Slack for tests: the Web API as
// slack-go calls it (POST https://slack.com/api/<method>, form-encoded or
// JSON, the token in the form or a bearer header) and Socket Mode
// (apps.connections.open, a websocket that says hello, events_api
// envelopes and their acks).
//
// A zero Server is ready. It keeps the messages, pins and reactions it was
// asked for, records every call, enforces per-method rate limits when asked
// (Limit), returns any error code (Fail) and can delete a message.
package fakeslack

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Call is one Web API request.
type Call struct {
	Method string
	Params map[string]string
	At     time.Time
	Error  string // the error code answered, "" for ok
}

// Message is a message the fake holds.
type Message struct {
	Channel, TS, ThreadTS, Text, Blocks, User string
	Edits                                     int
}

type window struct {
	n     int
	per   time.Duration
	times []time.Time
}

// Server is the fake. Set fields before serving.
type Server struct {
	BotUserID string // default UBOT
	TeamID    string // default T1
	// AssistantStatusError, when set, is the error assistant.threads.setStatus answers.
	AssistantStatusError string

	mu         sync.Mutex // guards everything below
	calls      []Call
	messages   map[string]*Message // channel/ts
	order      []string
	pins       map[string]bool
	reactions  map[string]map[string]bool
	limits     map[string]*window
	failures   map[string][]string
	retryUntil map[string]time.Time
	violations []string
	seq        int
	conns      map[*websocket.Conn]*sync.Mutex
	acks       []string
}

func (s *Server) initLocked() {
	if s.messages == nil {
		s.messages = map[string]*Message{}
		s.pins = map[string]bool{}
		s.reactions = map[string]map[string]bool{}
		s.limits = map[string]*window{}
		s.failures = map[string][]string{}
		s.retryUntil = map[string]time.Time{}
		s.conns = map[*websocket.Conn]*sync.Mutex{}
	}
	if s.BotUserID == "" {
		s.BotUserID = "UBOT"
	}
	if s.TeamID == "" {
		s.TeamID = "T1"
	}
}

// Limit makes method answer 429 past n calls in any window of length per.
func (s *Server) Limit(method string, n int, per time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.limits[method] = &window{n: n, per: per}
}

// Fail queues error codes for the next calls of method.
func (s *Server) Fail(method string, codes ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.failures[method] = append(s.failures[method], codes...)
}

// Delete removes a message, as a user deleting it would.
func (s *Server) Delete(channel, ts string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	delete(s.messages, channel+"/"+ts)
	delete(s.pins, channel+"/"+ts)
}

// Calls returns the recorded calls of method ("" for all).
func (s *Server) Calls(method string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// Messages returns the messages in channel, oldest first.
func (s *Server) Messages(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, k := range s.order {
		if m, ok := s.messages[k]; ok && m.Channel == channel {
			out = append(out, *m)
		}
	}
	return out
}

// Pinned lists the pinned timestamps of channel.
func (s *Server) Pinned(channel string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, ok := range s.pins {
		if ok && strings.HasPrefix(k, channel+"/") {
			out = append(out, strings.TrimPrefix(k, channel+"/"))
		}
	}
	sort.Strings(out)
	return out
}

// Reactions lists the reactions on a message.
func (s *Server) Reactions(channel, ts string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for name, on := range s.reactions[channel+"/"+ts] {
		if on {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Violations lists calls made before a 429's Retry-After had passed.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}

// Acks lists the envelope ids acknowledged over Socket Mode.
func (s *Server) Acks() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.acks...)
}

// ServeHTTP implements http.Handler: /api/<method> and the /socket websocket.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/socket" {
		s.socket(w, r)
		return
	}
	method, ok := strings.CutPrefix(r.URL.Path, "/api/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	params, err := readParams(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	now := time.Now()
	s.mu.Lock()
	s.initLocked()
	call := Call{Method: method, Params: params, At: now}
	if until, ok := s.retryUntil[method]; ok && now.Before(until) {
		s.violations = append(s.violations, fmt.Sprintf("%s at %s, %s before Retry-After ended", method, now.Format(time.StampMilli), until.Sub(now)))
	}
	if lim := s.limits[method]; lim != nil {
		kept := lim.times[:0]
		for _, t := range lim.times {
			if now.Sub(t) < lim.per {
				kept = append(kept, t)
			}
		}
		lim.times = kept
		if len(lim.times) >= lim.n {
			wait := lim.per
			if len(lim.times) > 0 {
				wait -= now.Sub(lim.times[0])
			}
			secs := int(math.Ceil(wait.Seconds()))
			s.retryUntil[method] = now.Add(time.Duration(secs) * time.Second)
			call.Error = "ratelimited"
			s.calls = append(s.calls, call)
			s.mu.Unlock()
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"ok":false,"error":"ratelimited"}`)
			return
		}
		lim.times = append(lim.times, now)
	}
	if q := s.failures[method]; len(q) > 0 {
		call.Error, s.failures[method] = q[0], q[1:]
		s.calls = append(s.calls, call)
		s.mu.Unlock()
		writeJSON(w, map[string]any{"ok": false, "error": call.Error})
		return
	}
	resp, code := s.handleLocked(method, params, r)
	call.Error = code
	s.calls = append(s.calls, call)
	s.mu.Unlock()
	if code != "" {
		resp = map[string]any{"ok": false, "error": code}
	} else {
		resp["ok"] = true
	}
	writeJSON(w, resp)
}

func (s *Server) handleLocked(method string, p map[string]string, r *http.Request) (map[string]any, string) {
	switch method {
	case "auth.test":
		return map[string]any{"user_id": s.BotUserID, "team_id": s.TeamID, "user": "pinplan", "bot_id": "B1"}, ""
	case "apps.connections.open":
		return map[string]any{"url": "ws://" + r.Host + "/socket"}, ""
	case "chat.postMessage":
		s.seq++
		ts := fmt.Sprintf("%d.%06d", 1700000000+s.seq, s.seq)
		m := &Message{Channel: p["channel"], TS: ts, ThreadTS: p["thread_ts"], Text: p["text"], Blocks: p["blocks"], User: s.BotUserID}
		s.messages[m.Channel+"/"+ts] = m
		s.order = append(s.order, m.Channel+"/"+ts)
		return map[string]any{"channel": m.Channel, "ts": ts, "message": map[string]any{"text": m.Text, "ts": ts}}, ""
	case "chat.update":
		m, ok := s.messages[p["channel"]+"/"+p["ts"]]
		if !ok {
			return nil, "message_not_found"
		}
		m.Text, m.Blocks = p["text"], p["blocks"]
		m.Edits++
		return map[string]any{"channel": m.Channel, "ts": m.TS, "text": m.Text}, ""
	case "pins.add", "pins.remove":
		key := p["channel"] + "/" + p["timestamp"]
		if _, ok := s.messages[key]; !ok {
			return nil, "message_not_found"
		}
		if method == "pins.add" {
			if s.pins[key] {
				return nil, "already_pinned"
			}
			s.pins[key] = true
		} else {
			if !s.pins[key] {
				return nil, "no_pin"
			}
			delete(s.pins, key)
		}
		return map[string]any{}, ""
	case "reactions.add", "reactions.remove":
		key := p["channel"] + "/" + p["timestamp"]
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
	case "assistant.threads.setStatus":
		if s.AssistantStatusError != "" {
			return nil, s.AssistantStatusError
		}
		return map[string]any{}, ""
	}
	return nil, "unknown_method"
}

func readParams(r *http.Request) (map[string]string, error) {
	out := map[string]string{}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	if len(body) > 0 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			return nil, err
		}
		for k, v := range m {
			if s, ok := v.(string); ok {
				out[k] = s
			} else {
				b, _ := json.Marshal(v)
				out[k] = string(b)
			}
		}
	} else {
		vals, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, err
		}
		for k := range vals {
			out[k] = vals.Get(k)
		}
	}
	for k, v := range r.URL.Query() {
		out[k] = v[0]
	}
	return out, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// slack-go dials with Origin https://api.slack.com; accept any origin.
var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func (s *Server) socket(w http.ResponseWriter, r *http.Request) {
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	wmu := &sync.Mutex{}
	s.mu.Lock()
	s.initLocked()
	s.conns[conn] = wmu
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
		conn.Close()
	}()
	wmu.Lock()
	err = conn.WriteJSON(map[string]any{"type": "hello", "num_connections": 1, "connection_info": map[string]any{"app_id": "A1"}})
	wmu.Unlock()
	if err != nil {
		return
	}
	for {
		var msg map[string]any
		if err := conn.ReadJSON(&msg); err != nil {
			return
		}
		if id, ok := msg["envelope_id"].(string); ok {
			s.mu.Lock()
			s.acks = append(s.acks, id)
			s.mu.Unlock()
		}
	}
}

// Connected reports how many Socket Mode connections are open.
func (s *Server) Connected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// CallbackBody is an Events API event_callback with event inside; the same
// JSON goes into Socket Mode envelopes and HTTP event requests.
func (s *Server) CallbackBody(eventID string, event map[string]any) []byte {
	s.mu.Lock()
	s.initLocked()
	team := s.TeamID
	s.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"token": "legacy", "team_id": team, "api_app_id": "A1", "type": "event_callback",
		"event_id": eventID, "event_time": time.Now().Unix(), "event": event})
	return b
}

// Push sends an events_api envelope to every Socket Mode connection and
// returns its envelope id.
func (s *Server) Push(eventID string, event map[string]any) (string, error) {
	payload := s.CallbackBody(eventID, event)
	s.mu.Lock()
	s.seq++
	envID := fmt.Sprintf("env-%d", s.seq)
	conns := make(map[*websocket.Conn]*sync.Mutex, len(s.conns))
	for c, m := range s.conns {
		conns[c] = m
	}
	s.mu.Unlock()
	if len(conns) == 0 {
		return "", fmt.Errorf("fakeslack: no socket mode connection")
	}
	env := map[string]any{"envelope_id": envID, "type": "events_api", "accepts_response_payload": false, "retry_attempt": 0, "retry_reason": "", "payload": json.RawMessage(payload)}
	for c, m := range conns {
		m.Lock()
		err := c.WriteJSON(env)
		m.Unlock()
		if err != nil {
			return "", err
		}
	}
	return envID, nil
}
