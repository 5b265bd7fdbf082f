package fakediscord

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Gateway intents the fake filters dispatches by.
const (
	intentGuilds         = 1 << 0
	intentGuildMessages  = 1 << 9
	intentDirectMessages = 1 << 12
	intentMessageContent = 1 << 15
	// IntentMessageContent is the privileged MESSAGE_CONTENT intent
	// (DenyIntents).
	IntentMessageContent = intentMessageContent
)

const writeTimeout = 10 * time.Second

// session is a gateway session: created by IDENTIFY, it keeps its
// dispatches so a RESUME can replay them, until it ends.
type session struct {
	id      string
	intents int64
	seq     int64
	events  []frame
	conn    *conn // the connection serving it, nil while disconnected
	ended   bool  // RESUME answers op 9 d=false
	shard   int   // IDENTIFY's shard: [shard, shards]
	shards  int   // 1 when IDENTIFY named none
}

// frame is one dispatch of a session.
type frame struct {
	seq  int64
	name string
	data any
	rec  *record // nil for a session's own READY, GUILD_CREATE, RESUMED
}

func (f frame) payload() map[string]any {
	return map[string]any{"op": 0, "s": f.seq, "t": f.name, "d": f.data}
}

// record is an event dispatched to the world, for Missed.
type record struct {
	name      string
	wanted    bool // some live session takes it, or there was none at all
	delivered bool // a ready connection was sent it
}

type closeFrame struct {
	code   int
	reason string
}

// conn is one gateway connection. Its writer goroutine sends its queue in
// order, so dispatches arrive in sequence.
type conn struct {
	ws   *websocket.Conn
	wake chan struct{} // a frame was queued

	mu    sync.Mutex // guards queue
	queue []any

	// Guarded by Server.mu:
	sess    *session
	ready   bool // identified or resumed, and not told to go away
	closing bool // the server sent or queued a close
}

func (c *conn) send(v any) {
	c.mu.Lock()
	c.queue = append(c.queue, v)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *conn) take() []any {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queue
	c.queue = nil
	return q
}

func (c *conn) writeLoop(done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case <-c.wake:
			for _, v := range c.take() {
				if cf, ok := v.(closeFrame); ok {
					c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(cf.code, cf.reason), time.Now().Add(writeTimeout))
					c.ws.Close()
					return
				}
				c.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
				if err := c.ws.WriteJSON(v); err != nil {
					c.ws.Close()
					return
				}
			}
		}
	}
}

// closeLocked sends a close frame with code and ends the connection; a
// code Discord does not let a session survive ends the session too.
func (s *Server) closeLocked(c *conn, code int, reason string) {
	c.ready, c.closing = false, true
	if c.sess != nil {
		if !resumableClose(code) {
			s.endLocked(c.sess)
		}
		c.sess.conn = nil
		c.sess = nil
	}
	c.send(closeFrame{code, reason})
}

// resumableClose reports whether a session survives the gateway closing
// with code: the codes Discord documents as "reconnect" (4000 unknown
// error, 4001 unknown opcode, 4002 decode error, 4003 not authenticated,
// 4005 already authenticated, 4008 rate limited).
func resumableClose(code int) bool {
	switch code {
	case 4000, 4001, 4002, 4003, 4005, 4008:
		return true
	}
	return false
}

var closeReasons = map[int]string{
	4000: "Unknown error.", 4001: "Unknown opcode.", 4002: "Decode error.", 4003: "Not authenticated.",
	4004: "Authentication failed.", 4005: "Already authenticated.", 4007: "Invalid seq.", 4008: "Rate limited.",
	4009: "Session timed out.", 4010: "Invalid shard.", 4011: "Sharding required.", 4012: "Invalid API version.",
	4013: "Invalid intent(s).", 4014: "Disallowed intent(s).",
}

func (s *Server) endLocked(sess *session) {
	sess.ended = true
	sess.events = nil
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func (s *Server) gateway(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.handlers.Add(1)
		defer s.handlers.Done()
	}
	s.mu.Unlock()
	if closed {
		http.Error(w, "fakediscord closed", http.StatusServiceUnavailable)
		return
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	s.serveGateway(ws, r)
}

// serveGateway says Hello on a new gateway connection, sends it events
// (its write loop) and reads its opcodes until it closes.
func (s *Server) serveGateway(ws *websocket.Conn, r *http.Request) {
	c := &conn{ws: ws, wake: make(chan struct{}, 1)}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.writeLoop(done)
	}()
	s.mu.Lock()
	s.initLocked()
	s.conns[c] = true
	if s.closed { // Close ran since this connection was let in
		ws.Close()
	}
	hb := s.HeartbeatInterval
	s.mu.Unlock()
	if hb == 0 {
		hb = 45 * time.Second
	}
	c.send(map[string]any{"op": 10, "d": map[string]any{"heartbeat_interval": hb.Milliseconds()}})
	if !apiVersionOK(r.URL.Query().Get("v")) {
		s.mu.Lock()
		s.closeLocked(c, 4012, closeReasons[4012])
		s.mu.Unlock()
	}
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		c.ready = false
		if c.sess != nil && c.sess.conn == c {
			c.sess.conn = nil
		}
		s.mu.Unlock()
		close(done)
		wg.Wait()
		ws.Close()
	}()
	for {
		_, raw, err := ws.ReadMessage()
		if err != nil {
			// A client closing with 1000 or 1001 ends its session.
			var ce *websocket.CloseError
			if errors.As(err, &ce) && (ce.Code == websocket.CloseNormalClosure || ce.Code == websocket.CloseGoingAway) {
				s.mu.Lock()
				if c.sess != nil && !c.closing {
					s.endLocked(c.sess)
				}
				s.mu.Unlock()
			}
			return
		}
		s.receive(c, r, raw)
	}
}

// apiVersionOK reports whether the gateway serves API version v (the
// URL's v): 9 and 10, as Discord does (API Versioning: 8 and below are
// deprecated or discontinued, and their gateway closes with 4012);
// none given is taken as the default.
func apiVersionOK(v string) bool {
	return v == "" || v == "9" || v == "10"
}

// receive answers one gateway payload from c: a heartbeat, Identify or
// Resume; what needs a session before it has one, an unknown opcode or
// a payload that is not JSON closes the connection.
func (s *Server) receive(c *conn, r *http.Request, raw []byte) {
	var msg struct {
		Op int             `json:"op"`
		D  json.RawMessage `json:"d"`
	}
	bad := json.Unmarshal(raw, &msg) != nil
	s.mu.Lock()
	defer s.mu.Unlock()
	if bad {
		s.closeLocked(c, 4002, closeReasons[4002])
		return
	}
	switch {
	case c.closing:
	case msg.Op == 1:
		c.send(map[string]any{"op": 11})
	case msg.Op == 2:
		s.identifyLocked(c, r, msg.D)
	case msg.Op == 6:
		s.resumeLocked(c, msg.D)
	case msg.Op == 3 || msg.Op == 4 || msg.Op == 8:
		if c.sess == nil {
			s.closeLocked(c, 4003, closeReasons[4003])
		}
	default:
		s.closeLocked(c, 4001, closeReasons[4001])
	}
}

func (s *Server) tokenOK(token string) bool {
	token = strings.TrimPrefix(token, "Bot ")
	return token != "" && (s.Token == "" || token == strings.TrimPrefix(s.Token, "Bot "))
}

func (s *Server) identifyLocked(c *conn, r *http.Request, d json.RawMessage) {
	var id struct {
		Token   string `json:"token"`
		Intents *int64 `json:"intents"`
		Shard   []int  `json:"shard"`
	}
	json.Unmarshal(d, &id)
	switch {
	case c.sess != nil:
		s.closeLocked(c, 4005, closeReasons[4005])
		return
	case !s.tokenOK(id.Token):
		s.closeLocked(c, 4004, closeReasons[4004])
		return
	case id.Intents == nil:
		s.closeLocked(c, 4013, closeReasons[4013])
		return
	case *id.Intents&s.DenyIntents != 0:
		// A privileged intent the app has not enabled (Developer
		// Portal -> Bot -> Privileged Gateway Intents).
		s.closeLocked(c, 4014, closeReasons[4014])
		return
	}
	shard, shards, ok := s.checkShardLocked(c, id.Shard)
	if !ok {
		return
	}
	s.identifies++
	sess := &session{id: fmt.Sprintf("fake-session-%d", s.identifies), intents: *id.Intents, conn: c, shard: shard, shards: shards}
	s.sessions = append(s.sessions, sess)
	s.sessionByID[sess.id] = sess
	c.sess = sess
	s.readyLocked(c)
	guilds := s.shardGuildsLocked(shard, shards)
	unavailable := make([]any, 0, len(guilds))
	for _, g := range guilds {
		unavailable = append(unavailable, map[string]any{"id": g, "unavailable": true})
	}
	ready := map[string]any{"v": 9, "session_id": sess.id,
		"user": userJSON(BotID), "guilds": unavailable, "private_channels": []any{},
		"resume_gateway_url": "ws://" + r.Host + "/gateway", "application": map[string]any{"id": BotID, "flags": 0}}
	if id.Shard != nil {
		ready["shard"] = []any{shard, shards}
	}
	s.sendOwnLocked(sess, "READY", ready)
	if sess.intents&intentGuilds != 0 {
		for _, g := range guilds {
			s.sendOwnLocked(sess, "GUILD_CREATE", s.guildCreateLocked(g))
		}
	}
}

// sendOwnLocked dispatches an event of the session itself (not of the
// world) on its connection.
func (s *Server) sendOwnLocked(sess *session, name string, data any) {
	sess.seq++
	f := frame{seq: sess.seq, name: name, data: data}
	sess.events = append(sess.events, f)
	if sess.conn != nil {
		sess.conn.send(f.payload())
	}
}

func (s *Server) resumeLocked(c *conn, d json.RawMessage) {
	var res struct {
		Token     string `json:"token"`
		SessionID string `json:"session_id"`
		Seq       int64  `json:"seq"`
	}
	json.Unmarshal(d, &res)
	s.resumes++
	if c.sess != nil {
		s.closeLocked(c, 4005, closeReasons[4005])
		return
	}
	if !s.tokenOK(res.Token) {
		s.closeLocked(c, 4004, closeReasons[4004])
		return
	}
	sess := s.sessionByID[res.SessionID]
	if sess == nil || sess.ended || res.Seq > sess.seq {
		// The client is to IDENTIFY again, on this connection.
		c.send(map[string]any{"op": 9, "d": false})
		return
	}
	if old := sess.conn; old != nil && old != c {
		old.ready, old.sess = false, nil
		s.closeLocked(old, 4000, closeReasons[4000])
	}
	c.sess, sess.conn = sess, c
	for _, f := range sess.events {
		if f.seq > res.Seq && f.name != "READY" && f.name != "RESUMED" {
			c.send(f.payload())
			if f.rec != nil {
				f.rec.delivered = true
			}
		}
	}
	s.readyLocked(c)
	s.sendOwnLocked(sess, "RESUMED", map[string]any{})
}

// dispatchLocked sends an event to every live session its intents let
// see it: at once on a ready connection, otherwise kept for a RESUME.
func (s *Server) dispatchLocked(name string, data map[string]any) {
	rec := &record{name: name}
	s.records = append(s.records, rec)
	live, taken := 0, false
	for _, sess := range s.sessions {
		if sess.ended || !sess.owns(data) {
			continue
		}
		live++
		d, ok := visible(name, data, sess.intents)
		if !ok {
			continue
		}
		taken = true
		sess.seq++
		f := frame{seq: sess.seq, name: name, data: d, rec: rec}
		sess.events = append(sess.events, f)
		if c := sess.conn; c != nil && c.ready {
			c.send(f.payload())
			rec.delivered = true
		}
	}
	rec.wanted = live == 0 || taken
}

// visible applies a session's intents to an event: whether it is sent at
// all (INTERACTION_CREATE always is), and without the MESSAGE_CONTENT intent a message's content, embeds,
// attachments and components are blank unless it mentions the bot, is a
// DM or is the bot's own.
func visible(name string, data map[string]any, intents int64) (map[string]any, bool) {
	if name == "INTERACTION_CREATE" {
		// Interactions need no intent, and carry the message they are on
		// in full.
		return data, true
	}
	guild, _ := data["guild_id"].(string)
	need := int64(intentGuilds)
	switch name {
	case "MESSAGE_CREATE", "MESSAGE_UPDATE", "MESSAGE_DELETE":
		need = intentGuildMessages
		if guild == "" {
			need = intentDirectMessages
		}
	case "CHANNEL_PINS_UPDATE":
		if guild == "" {
			need = intentDirectMessages
		}
	}
	if intents&need == 0 {
		return nil, false
	}
	if name == "MESSAGE_DELETE" || intents&intentMessageContent != 0 || guild == "" {
		return data, true
	}
	if author, _ := data["author"].(map[string]any); author != nil && author["id"] == BotID {
		return data, true
	}
	if mentions, _ := data["mentions"].([]any); mentions != nil {
		for _, m := range mentions {
			if u, _ := m.(map[string]any); u != nil && u["id"] == BotID {
				return data, true
			}
		}
	}
	blank := make(map[string]any, len(data))
	for k, v := range data {
		blank[k] = v
	}
	blank["content"], blank["embeds"], blank["attachments"], blank["components"] = "", []any{}, []any{}, []any{}
	return blank, true
}

// Close cuts every gateway connection, refuses new ones and waits until
// their goroutines have ended. REST keeps answering.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.ready = false
		c.ws.UnderlyingConn().Close()
	}
	s.mu.Unlock()
	s.handlers.Wait()
}

// Reconnect asks every gateway client to reconnect (op 7); their sessions
// stay resumable and keep the events dispatched meanwhile.
func (s *Server) Reconnect() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.ready {
			c.ready = false
			c.send(map[string]any{"op": 7, "d": nil})
		}
	}
}

// Drop cuts every gateway connection without a close frame; the sessions
// stay resumable.
func (s *Server) Drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.ready = false
		c.ws.UnderlyingConn().Close()
	}
}

// InvalidSession sends op 9 to every identified gateway client. With
// resumable false their sessions end: the client must IDENTIFY again and
// the new session does not see the events dispatched in between (Missed
// counts them). With resumable true the session may be resumed on a new
// connection.
func (s *Server) InvalidSession(resumable bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.sess == nil || c.closing {
			continue
		}
		if !resumable {
			s.endLocked(c.sess)
		}
		c.sess.conn = nil
		c.sess, c.ready = nil, false
		c.send(map[string]any{"op": 9, "d": resumable})
	}
}

// CloseWith closes every gateway connection with a close code, as Discord
// does: 4000 (unknown error) leaves the session resumable, 4004
// (authentication failed), 4009 (session timed out) and the other codes
// Discord does not document as resumable end it.
func (s *Server) CloseWith(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reason := closeReasons[code]
	for c := range s.conns {
		if !c.closing {
			s.closeLocked(c, code, reason)
		}
	}
}

// UserMessage creates a user's message and dispatches MESSAGE_CREATE; it
// returns its id. mentionBot puts <@BotID> before the content, which puts
// the bot in mentions.
func (s *Server) UserMessage(channel, userID, content string, mentionBot bool) string {
	if mentionBot {
		content = "<@" + BotID + "> " + content
	}
	return s.userMessage(channel, userID, content)
}

// UserRoleMessage creates a user's message that mentions the bot's
// managed role (<@&ManagedRoleID> before the content, the role in
// mention_roles, the bot not in mentions) and dispatches MESSAGE_CREATE;
// it returns its id.
func (s *Server) UserRoleMessage(channel, userID, content string) string {
	return s.userMessage(channel, userID, "<@&"+ManagedRoleID+"> "+content)
}

func (s *Server) userMessage(channel, userID, content string, files ...Attachment) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	if ch, ok := s.channels[channel]; ok && ch.archived && !ch.locked {
		// A person's message unarchives a thread that is not locked.
		ch.archived, ch.archivedAt = false, time.Now()
		s.dispatchLocked("THREAD_UPDATE", ch.json())
	}
	m := &Message{ID: s.idLocked(), ChannelID: channel, AuthorID: userID, Content: content, at: time.Now()}
	for _, f := range files {
		m.attachments = append(m.attachments, s.attachmentJSON(channel, s.idLocked(), f))
	}
	s.addLocked(m)
	if ch, ok := s.channels[channel]; ok && ch.typ != 12 {
		s.joinLocked(ch, userID) // posting in a thread joins it; a private one's members are added
	}
	js := s.messageJSONLocked(m)
	if ch, ok := s.channels[channel]; ok && ch.guildID != "" {
		js["member"] = map[string]any{"roles": []any{}, "joined_at": "2026-01-01T00:00:00Z", "deaf": false, "mute": false, "flags": 0}
	}
	s.dispatchLocked("MESSAGE_CREATE", js)
	return m.ID
}

// BotMessage creates a message from another bot (OtherBotID) that
// mentions this one and dispatches MESSAGE_CREATE.
func (s *Server) BotMessage(channel, content string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	m := &Message{ID: s.idLocked(), ChannelID: channel, AuthorID: OtherBotID, Content: "<@" + BotID + "> " + content, at: time.Now()}
	s.addLocked(m)
	s.dispatchLocked("MESSAGE_CREATE", s.messageJSONLocked(m))
}
