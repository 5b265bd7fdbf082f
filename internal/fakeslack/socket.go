package fakeslack

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

const (
	defaultPingInterval = 10 * time.Second
	defaultAckTimeout   = 3 * time.Second
	maxRetries          = 3                // Slack retries an event three times
	disconnectGrace     = 10 * time.Second // a warned connection is closed after this
	checkEvery          = 100 * time.Millisecond
	writeTimeout        = 10 * time.Second
	// Slack "silently drops WebSocket responses that are 20KB or larger"
	// (slack-go's socketmode.Client.SendCtx): such an ack never arrives.
	maxAckBytes = 20 * 1024
)

// sock is one Socket Mode connection. Its writer goroutine sends its
// queue in order.
type sock struct {
	ws   *websocket.Conn
	wake chan struct{} // a frame was queued

	mu    sync.Mutex // guards queue
	queue []any

	// warned is when a disconnect was sent (zero while the connection takes
	// envelopes); guarded by Server.mu.
	warned time.Time
}

func (c *sock) send(v any) {
	c.mu.Lock()
	c.queue = append(c.queue, v)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *sock) take() []any {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queue
	c.queue = nil
	return q
}

// envelope is one events_api or interactive delivery, kept until acked.
type envelope struct {
	id, eventID string // eventID names an interactive envelope's payload type
	interactive bool
	command     bool // a slash_commands envelope (interactive too: acked within 3 s)
	payload     json.RawMessage
	attempt     int
	reason      string
	on          *sock // the connection it was last sent on
	sentAt      time.Time
	firstSent   time.Time // the first send; an interactive ack is due AckTimeout after it
	trigger     string    // the trigger_id its payload carries, which counts from the first send
	// respond: the app may answer in its ack (accepts_response_payload),
	// as to a view_submission. done, when set, is closed once the
	// envelope is acknowledged (ack holds the ack's payload, late whether
	// it came after AckTimeout) or given up (lost).
	respond bool
	done    chan struct{}
	ack     json.RawMessage
	late    bool
	lost    bool
}

func (e *envelope) frame() map[string]any {
	if e.interactive {
		typ := "interactive"
		if e.command {
			typ = "slash_commands"
		}
		f := map[string]any{"envelope_id": e.id, "type": typ, "accepts_response_payload": e.command || e.respond, "payload": e.payload}
		if e.attempt > 0 {
			f["retry_attempt"], f["retry_reason"] = e.attempt, e.reason
		}
		return f
	}
	return map[string]any{"envelope_id": e.id, "type": "events_api", "accepts_response_payload": false,
		"retry_attempt": e.attempt, "retry_reason": e.reason, "payload": e.payload}
}

// slack-go dials with Origin https://api.slack.com; accept any origin.
var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func (s *Server) socket(w http.ResponseWriter, r *http.Request) {
	ticket := r.URL.Query().Get("ticket")
	s.mu.Lock()
	s.initLocked()
	valid := s.tickets[ticket]
	delete(s.tickets, ticket)
	ping, ackTimeout := s.PingInterval, s.AckTimeout
	closed := s.closed
	if !closed {
		s.handlers.Add(1)
		defer s.handlers.Done()
	}
	s.mu.Unlock()
	if closed {
		http.Error(w, "fakeslack closed", http.StatusServiceUnavailable)
		return
	}
	if !valid {
		// A connection URL is good for one connection: ask
		// apps.connections.open for another.
		http.Error(w, "invalid or used ticket", http.StatusUnauthorized)
		return
	}
	if ping <= 0 {
		ping = defaultPingInterval
	}
	if ackTimeout == 0 {
		ackTimeout = defaultAckTimeout
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	s.serveSocket(ws, ping, ackTimeout)
}

// serveSocket says hello on a new connection, sends it envelopes (its
// write loop) and reads its acknowledgements until it closes; then what
// it left unacknowledged goes to another connection.
func (s *Server) serveSocket(ws *websocket.Conn, ping, ackTimeout time.Duration) {
	c := &sock{ws: ws, wake: make(chan struct{}, 1)}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.writeLoop(c, done, ping, ackTimeout)
	}()
	s.mu.Lock()
	c.send(map[string]any{"type": "hello", "num_connections": len(s.socks) + 1,
		"debug_info":      map[string]any{"host": "fakeslack", "approximate_connection_time": 18060},
		"connection_info": map[string]any{"app_id": "A1"}})
	s.socks = append(s.socks, c)
	s.flushLocked()
	if s.closed { // Close ran since this connection was let in
		ws.Close()
	}
	s.mu.Unlock()
	defer func() {
		close(done)
		wg.Wait()
		ws.Close()
		s.mu.Lock()
		s.hangUpLocked(c)
		s.mu.Unlock()
	}()
	for {
		_, raw, err := ws.ReadMessage()
		if err != nil {
			return
		}
		if len(raw) >= maxAckBytes {
			s.mu.Lock()
			s.violations = append(s.violations, fmt.Sprintf("a Socket Mode frame of %d bytes, dropped: Slack drops %d or more", len(raw), maxAckBytes))
			s.mu.Unlock()
			continue
		}
		var msg struct {
			EnvelopeID string          `json:"envelope_id"`
			Payload    json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(raw, &msg) == nil && msg.EnvelopeID != "" {
			s.mu.Lock()
			s.ackLocked(msg.EnvelopeID, msg.Payload, ackTimeout)
			s.mu.Unlock()
		}
	}
}

// hangUpLocked forgets the closed connection c: Slack sends what it left
// unacknowledged again.
func (s *Server) hangUpLocked(c *sock) {
	for i, x := range s.socks {
		if x == c {
			s.socks = append(s.socks[:i], s.socks[i+1:]...)
			break
		}
	}
	for _, e := range s.inflight {
		if e.on == c {
			s.retryLocked(e)
		}
	}
	s.flushLocked()
}

// ackLocked records the acknowledgement of envelope id, with the payload
// it carries, a violation if it is an interactive envelope acknowledged
// later than ackTimeout.
func (s *Server) ackLocked(id string, payload json.RawMessage, ackTimeout time.Duration) {
	s.acks = append(s.acks, id)
	e := s.inflight[id]
	if e != nil && e.interactive {
		// The user who clicked saw an error after 3 s.
		limit := ackTimeout
		if limit < 0 {
			limit = defaultAckTimeout
		}
		if late := time.Since(e.firstSent); late > limit {
			e.late = true
			s.violations = append(s.violations, fmt.Sprintf("interactive envelope %s (%s) acknowledged %s after it was sent, limit %s",
				e.id, e.eventID, late.Round(time.Millisecond), limit))
		}
	}
	delete(s.inflight, id)
	if e != nil && e.done != nil {
		e.ack = payload
		close(e.done)
		e.done = nil
	}
}

// writeLoop sends c's frames in order, pings it, redelivers envelopes
// overdue for an ack and closes it once a disconnect warning has expired.
func (s *Server) writeLoop(c *sock, done <-chan struct{}, ping, ackTimeout time.Duration) {
	pings := time.NewTicker(ping)
	defer pings.Stop()
	checks := time.NewTicker(checkEvery)
	defer checks.Stop()
	for {
		select {
		case <-done:
			return
		case <-c.wake:
			for _, v := range c.take() {
				c.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
				if err := c.ws.WriteJSON(v); err != nil {
					c.ws.Close()
					return
				}
			}
		case <-pings.C:
			if err := c.ws.WriteControl(websocket.PingMessage, []byte("ping"), time.Now().Add(writeTimeout)); err != nil {
				c.ws.Close()
				return
			}
		case now := <-checks.C:
			s.mu.Lock()
			if ackTimeout > 0 {
				for _, e := range s.inflight {
					if e.on == c && now.Sub(e.sentAt) > ackTimeout {
						s.retryLocked(e)
					}
				}
				s.flushLocked()
			}
			expired := !c.warned.IsZero() && now.Sub(c.warned) > disconnectGrace
			s.mu.Unlock()
			if expired {
				c.ws.Close()
				return
			}
		}
	}
}

// retryLocked takes e off its connection and queues it again with
// retry_attempt increased, or gives up after Slack's three retries.
func (s *Server) retryLocked(e *envelope) {
	delete(s.inflight, e.id)
	e.on = nil
	if e.attempt >= maxRetries {
		what := "event " + e.eventID
		if e.interactive {
			what = "interactive " + e.eventID
		}
		s.violations = append(s.violations, fmt.Sprintf("envelope %s (%s) never acknowledged after %d retries", e.id, what, maxRetries))
		if e.done != nil {
			e.lost = true
			close(e.done)
			e.done = nil
		}
		return
	}
	e.attempt++
	e.reason = "timeout"
	s.pending = append(s.pending, e)
}

// flushLocked sends pending envelopes round-robin over the connections
// that take them; with none, they wait.
func (s *Server) flushLocked() {
	for len(s.pending) > 0 {
		var c *sock
		for i := 0; i < len(s.socks) && c == nil; i++ {
			x := s.socks[(s.next+i)%len(s.socks)]
			if x.warned.IsZero() {
				c = x
				s.next = (s.next + i + 1) % len(s.socks)
			}
		}
		if c == nil {
			return
		}
		e := s.pending[0]
		s.pending = s.pending[1:]
		e.on, e.sentAt = c, time.Now()
		if e.firstSent.IsZero() {
			e.firstSent = e.sentAt
			s.sendTriggerLocked(e.trigger, e.sentAt)
		}
		s.inflight[e.id] = e
		c.send(e.frame())
	}
}

// Close closes every Socket Mode connection, refuses new ones and waits
// until their goroutines have ended. The Web API keeps answering.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for _, c := range s.socks {
		c.ws.Close()
	}
	s.mu.Unlock()
	s.handlers.Wait()
}

// Connected reports how many Socket Mode connections are open and take
// envelopes (a connection warned by Disconnect does not).
func (s *Server) Connected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.socks {
		if c.warned.IsZero() {
			n++
		}
	}
	return n
}

// Disconnect sends every Socket Mode connection a disconnect request
// (reason refresh_requested), as Slack does before it recycles a
// connection: no envelope goes to it afterwards, the client is to open a
// new one with apps.connections.open, and the old one is closed after 10 s
// if the client has not closed it.
func (s *Server) Disconnect() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, c := range s.socks {
		if c.warned.IsZero() {
			c.warned = now
			c.send(map[string]any{"type": "disconnect", "reason": "refresh_requested",
				"debug_info": map[string]any{"host": "fakeslack"}})
		}
	}
}

// CallbackBody is an Events API event_callback with event inside; the same
// JSON goes into Socket Mode envelopes and HTTP event requests. A message
// or app_mention event is kept as a message in its channel.
func (s *Server) CallbackBody(eventID string, event map[string]any) []byte {
	s.mu.Lock()
	s.initLocked()
	s.storeEventLocked(event)
	channel, _ := event["channel"].(string)
	env := s.eventEnvelopeLocked(eventID, s.channelTeamLocked(channel), event)
	s.mu.Unlock()
	b, _ := json.Marshal(env)
	return b
}

// Push sends an events_api envelope with event to one Socket Mode
// connection, round-robin as Slack spreads them, and returns its envelope
// id. With no connection open the envelope waits for one. It is sent
// again, with retry_attempt increased, when it is not acknowledged in
// time or its connection closes first. A message or app_mention event is
// kept as a message in its channel.
func (s *Server) Push(eventID string, event map[string]any) (string, error) {
	payload := s.CallbackBody(eventID, event)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	e := &envelope{id: fmt.Sprintf("env-%d", s.seq), eventID: eventID, payload: payload}
	s.pending = append(s.pending, e)
	s.flushLocked()
	return e.id, nil
}
