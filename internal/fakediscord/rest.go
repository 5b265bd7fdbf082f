package fakediscord

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Discord's limits on a message (discord.com/developers/docs, Message and
// Embed resources).
const (
	maxContent          = 2000
	maxEmbeds           = 10
	maxEmbedTitle       = 256
	maxEmbedDescription = 4096
	maxEmbedFields      = 25
	maxFieldName        = 256
	maxFieldValue       = 1024
	maxFooterText       = 2048
	maxAuthorName       = 256
	maxEmbedTotal       = 6000
	maxThreadName       = 100
	defaultPinLimit     = 50
	defaultHistory      = 50
	maxHistory          = 100
	defaultLimit        = 50 // requests per second on a route without a Limit
)

// Discord error codes the fake answers.
const (
	codeUnknownChannel     = 10003
	codeUnknownGuild       = 10004
	codeUnknownMember      = 10007
	codeUnknownMessage     = 10008
	codeUnknownInteraction = 10062
	codeAlreadyAcked       = 40060
	codeInvalidWebhookTok  = 50027
	codeMaxPins            = 30003
	codeOtherAuthor        = 50005
	codeEmptyMessage       = 50006
	codeSystemMessage      = 50021
	codeWrongChannelType   = 50024
	codeInvalidForm        = 50035
	codeThreadArchived     = 50083
	codeInvalidJSON        = 50109
	codeThreadAlreadyExist = 160004
)

// apiError is a Discord error answer.
type apiError struct {
	status, code int
	message      string
	errors       map[string]any // the field errors of a 50035
}

func (e *apiError) body() map[string]any {
	out := map[string]any{"code": e.code, "message": e.message}
	if e.errors != nil {
		out["errors"] = e.errors
	}
	return out
}

func fail(status, code int, message string) *apiError {
	return &apiError{status: status, code: code, message: message}
}

// formError is a 400 Invalid Form Body naming the field and the rule.
func formError(field, code, message string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: codeInvalidForm, message: "Invalid Form Body",
		errors: map[string]any{field: map[string]any{"_errors": []any{map[string]any{"code": code, "message": message}}}}}
}

// route is a parsed REST path.
type route struct {
	kind  string // messages, message, pins, typing, threads, threadmember, channel, member, roles, user, application, gateway, callback
	major string // the channel or guild id rate limits are kept by
	parts []string
}

func parseRoute(path string) (route, bool) {
	p := strings.Split(path, "/")
	switch {
	case path == "gateway" || path == "gateway/bot":
		return route{kind: "gateway", parts: p}, true
	case path == "users/@me":
		return route{kind: "user", parts: p}, true
	case path == "users/@me/channels":
		return route{kind: "dm", parts: p}, true
	case path == "applications/@me":
		return route{kind: "application", parts: p}, true
	case len(p) == 2 && p[0] == "channels":
		return route{kind: "channel", major: p[1], parts: p}, true
	case len(p) == 3 && p[0] == "channels" && p[2] == "messages":
		return route{kind: "messages", major: p[1], parts: p}, true
	case len(p) == 3 && p[0] == "channels" && p[2] == "typing":
		return route{kind: "typing", major: p[1], parts: p}, true
	case len(p) == 5 && p[0] == "channels" && p[2] == "messages" && p[3] == "pins":
		return route{kind: "pins", major: p[1], parts: p}, true
	case len(p) == 4 && p[0] == "channels" && p[2] == "thread-members":
		return route{kind: "threadmember", major: p[1], parts: p}, true
	case len(p) == 4 && p[0] == "channels" && p[2] == "messages" && p[3] != "pins":
		return route{kind: "message", major: p[1], parts: p}, true
	case len(p) == 3 && p[0] == "channels" && p[2] == "threads":
		// Start Thread without Message; the fake has it for forums.
		return route{kind: "threads", major: p[1], parts: p}, true
	case len(p) == 5 && p[0] == "channels" && p[2] == "messages" && p[4] == "threads":
		return route{kind: "threads", major: p[1], parts: p}, true
	case len(p) == 4 && p[0] == "guilds" && p[2] == "members":
		return route{kind: "member", major: p[1], parts: p}, true
	case len(p) == 3 && p[0] == "guilds" && p[2] == "roles":
		return route{kind: "roles", major: p[1], parts: p}, true
	case len(p) == 3 && p[0] == "applications" && p[2] == "commands",
		len(p) == 5 && p[0] == "applications" && p[2] == "guilds" && p[4] == "commands":
		return route{kind: "commands", major: p[1], parts: p}, true
	case len(p) == 5 && p[0] == "webhooks" && p[3] == "messages" && p[4] == "@original":
		return route{kind: "original", major: p[2], parts: p}, true
	case len(p) == 4 && p[0] == "interactions" && p[3] == "callback":
		// Kept by interaction: each has its own bucket.
		return route{kind: "callback", major: p[1], parts: p}, true
	}
	return route{}, false
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/gateway" || r.URL.Path == "/gateway/" {
		s.gateway(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, attachmentsPrefix) {
		s.serveAttachment(w, r)
		return
	}
	path, ok := strings.CutPrefix(r.URL.Path, "/api/v9/")
	rt, known := parseRoute(path)
	if !ok || !known {
		writeJSON(w, http.StatusNotFound, nil, map[string]any{"code": 0, "message": "404: Not Found"})
		return
	}
	q := readRequest(r, rt)

	s.mu.Lock()
	s.initLocked()
	s.host = r.Host
	d := takeLocked(s.delays, q.name)
	s.mu.Unlock()
	if d != nil {
		pause(r.Context(), d.delay)
	}

	now := time.Now()
	s.mu.Lock()
	h, limited := s.bucketLocked(q.name, rt.major, now)
	status, resp, aerr := s.answerLocked(q, h, limited, now)
	call := Call{Method: r.Method, Path: path, Body: q.body, Status: status, At: now}
	if aerr != nil {
		call.Status, call.Code = aerr.status, aerr.code
	}
	s.calls = append(s.calls, call)
	if rt.kind == "callback" {
		s.recordResponseLocked(rt.parts[1], q.body, call, q.arrived)
	}
	late := takeLocked(s.lateAnswers, q.name)
	if late != nil {
		s.heldAnswers++
	}
	s.mu.Unlock()
	if late != nil {
		pause(r.Context(), late.delay)
		s.mu.Lock()
		s.heldAnswers--
		s.mu.Unlock()
	}
	writeAnswer(w, call.Status, h, resp, aerr)
}

// request is a REST call as ServeHTTP read it.
type request struct {
	r       *http.Request
	rt      route
	name    string // the method and the route's kind: what faults, delays and buckets are kept by
	body    map[string]any
	list    []any // a bulk overwrite's body is an array
	badJSON bool
	arrived time.Time // an interaction callback is on time if it arrives in time
}

func readRequest(r *http.Request, rt route) *request {
	q := &request{r: r, rt: rt, name: r.Method + " " + rt.kind, arrived: time.Now()}
	raw, _ := io.ReadAll(r.Body)
	q.badJSON = len(raw) > 0 && json.Unmarshal(raw, &q.body) != nil
	if rt.kind == "commands" && r.Method == http.MethodPut {
		q.badJSON = json.Unmarshal(raw, &q.list) != nil
	}
	return q
}

// pause waits d, or until ctx is done.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
}

// answerLocked answers q: a 429 when its bucket is limited (resp is
// then the retry_after), a refused token or body, an injected fault or
// failure, else its route's handler.
func (s *Server) answerLocked(q *request, h http.Header, limited float64, now time.Time) (int, any, *apiError) {
	switch {
	case limited > 0:
		return http.StatusTooManyRequests, limited, nil
	case q.rt.kind != "callback" && q.rt.kind != "original" && !s.authorized(q.r.Header.Get("Authorization")):
		// An interaction callback is authorized by its token instead.
		return http.StatusOK, nil, fail(http.StatusUnauthorized, 0, "401: Unauthorized")
	case q.badJSON:
		return http.StatusOK, nil, fail(http.StatusBadRequest, codeInvalidJSON, "The request body contains invalid JSON.")
	}
	f := takeLocked(s.httpFaults, q.name)
	if f == nil {
		f = takeLocked(s.failures, q.name)
	}
	if f != nil {
		return s.injectedLocked(f, q.name+" "+q.rt.major, h, now)
	}
	switch q.rt.kind {
	case "callback":
		return s.callbackLocked(q.r, q.rt, q.body, q.arrived)
	case "original":
		return s.originalLocked(q.r, q.rt, q.body)
	case "commands":
		return s.commandsLocked(q.r, q.rt, q.list)
	}
	return s.routeLocked(q.r, q.rt, q.body)
}

// injectedLocked answers with the injected fault f, for the bucket key.
func (s *Server) injectedLocked(f *fault, key string, h http.Header, now time.Time) (int, any, *apiError) {
	if f.status == http.StatusTooManyRequests {
		// An injected 429 is a whole one: retry_after of 1 s, held
		// against an early retry, as a shared-scope limit is.
		s.retryUntil[key] = now.Add(time.Second)
		h.Set("X-RateLimit-Remaining", "0")
		h.Set("X-RateLimit-Reset-After", "1.000")
		h.Set("X-RateLimit-Reset", strconv.FormatFloat(float64(now.UnixMilli())/1000+1, 'f', 3, 64))
		return f.status, 1.0, nil
	}
	aerr := fail(f.status, f.code, "injected")
	if f.code == 0 {
		aerr.message = fmt.Sprintf("%d: %s", f.status, http.StatusText(f.status))
	}
	return http.StatusOK, nil, aerr
}

// writeAnswer writes the answer of a call that ended with status: a 429
// (resp its retry_after), an error, no content or resp.
func writeAnswer(w http.ResponseWriter, status int, h http.Header, resp any, aerr *apiError) {
	switch {
	case status == http.StatusTooManyRequests:
		ra := resp.(float64)
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(ra))))
		h.Set("X-RateLimit-Scope", "user")
		writeJSON(w, http.StatusTooManyRequests, h, map[string]any{"message": "You are being rate limited.", "retry_after": ra, "global": false})
	case aerr != nil:
		writeJSON(w, aerr.status, h, aerr.body())
	case resp == nil:
		for k, v := range h {
			w.Header()[k] = v
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		writeJSON(w, status, h, resp)
	}
}

func writeJSON(w http.ResponseWriter, status int, h http.Header, v any) {
	for k, vals := range h {
		w.Header()[k] = vals
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (s *Server) authorized(header string) bool {
	token := strings.TrimSpace(strings.TrimPrefix(header, "Bot "))
	if token == "" {
		return false
	}
	return s.Token == "" || token == strings.TrimPrefix(s.Token, "Bot ")
}

// bucketLocked counts a request against its route's bucket and returns the
// X-RateLimit headers to send, and the retry_after in seconds when the
// bucket is empty (the request is not counted then).
func (s *Server) bucketLocked(name, major string, now time.Time) (http.Header, float64) {
	lim := s.limits[name]
	if lim == nil {
		lim = &window{n: defaultLimit, per: time.Second, times: map[string][]time.Time{}}
		s.limits[name] = lim
	}
	key := name + " " + major
	if until, ok := s.retryUntil[key]; ok && now.Before(until) {
		s.violations = append(s.violations, fmt.Sprintf("%s in %s %s before retry_after ended", name, major, until.Sub(now)))
	}
	var kept []time.Time
	for _, t := range lim.times[major] {
		if now.Sub(t) < lim.per {
			kept = append(kept, t)
		}
	}
	h := http.Header{}
	hash := fnv.New32a()
	hash.Write([]byte(name))
	h.Set("X-RateLimit-Bucket", fmt.Sprintf("%08x", hash.Sum32()))
	h.Set("X-RateLimit-Limit", strconv.Itoa(lim.n))
	reset := func(after time.Duration) {
		secs := math.Ceil(after.Seconds()*1000) / 1000
		h.Set("X-RateLimit-Reset-After", strconv.FormatFloat(secs, 'f', 3, 64))
		at := float64(now.UnixMilli())/1000 + secs
		h.Set("X-RateLimit-Reset", strconv.FormatFloat(at, 'f', 3, 64))
	}
	if len(kept) >= lim.n {
		lim.times[major] = kept
		ra := lim.per - now.Sub(kept[0])
		secs := math.Ceil(ra.Seconds()*1000) / 1000
		s.retryUntil[key] = now.Add(time.Duration(secs * float64(time.Second)))
		h.Set("X-RateLimit-Remaining", "0")
		reset(ra)
		return h, secs
	}
	kept = append(kept, now)
	lim.times[major] = kept
	h.Set("X-RateLimit-Remaining", strconv.Itoa(lim.n-len(kept)))
	reset(lim.per - now.Sub(kept[0]))
	return h, 0
}

// violationLocked records why Discord refused a request and answers err.
func (s *Server) violationLocked(r *http.Request, path string, err *apiError) (int, any, *apiError) {
	detail, _ := json.Marshal(err.body())
	s.violations = append(s.violations, fmt.Sprintf("%s %s: %s", r.Method, path, detail))
	return 0, nil, err
}

// routeLocked answers a REST call by its method and route: the few that
// are not on a channel first, then those on a channel the bot can see.
func (s *Server) routeLocked(r *http.Request, rt route, body map[string]any) (int, any, *apiError) {
	p := rt.parts
	name := r.Method + " " + rt.kind
	switch name {
	case "GET gateway":
		out := map[string]any{"url": "ws://" + r.Host + "/gateway"}
		if len(p) == 2 {
			s.gatewayBotLocked(out)
		}
		return 200, out, nil
	case "GET user":
		return 200, userJSON(BotID), nil
	case "GET application":
		return 200, s.applicationLocked(), nil
	case "POST dm":
		return s.openDMLocked(body)
	case "GET member":
		return s.memberLocked(rt)
	case "GET roles":
		if !s.guildExistsLocked(rt.major) {
			return 0, nil, fail(404, codeUnknownGuild, "Unknown Guild")
		}
		return 200, rolesJSON(rt.major), nil
	}
	if rt.kind == "gateway" || rt.kind == "user" || rt.kind == "dm" || rt.kind == "member" || rt.kind == "roles" || rt.kind == "callback" {
		return 0, nil, fail(405, 0, "405: Method Not Allowed")
	}
	ch, ok := s.channels[rt.major]
	if !ok {
		return 0, nil, fail(404, codeUnknownChannel, "Unknown Channel")
	}
	if err := s.botMayLocked(ch, PermViewChannel); err != nil {
		return 0, nil, err
	}
	switch name {
	case "GET channel":
		return 200, ch.json(), nil
	case "PATCH channel":
		return s.modifyChannelLocked(ch, body)
	case "GET threadmember":
		return s.threadMemberLocked(ch, p[3])
	case "GET messages":
		return s.historyLocked(r, ch)
	case "POST messages":
		return s.postMessageLocked(r, rt, ch, body)
	case "GET message", "PATCH message", "DELETE message":
		return s.messageLocked(r, rt, ch, body)
	case "PUT pins", "DELETE pins":
		return s.pinLocked(r, ch, p[4])
	case "POST typing":
		s.typing[ch.id]++
		return 204, nil, nil
	case "POST threads":
		if len(p) == 3 {
			return s.startPostLocked(r, rt, ch, body)
		}
		if err := s.botMayLocked(ch, PermCreatePublicThreads); err != nil {
			return 0, nil, err
		}
		return s.startThreadLocked(ch, p[3], body)
	}
	return 0, nil, fail(405, 0, "405: Method Not Allowed")
}

// threadArchived is what Discord answers a change in an archived thread.
func threadArchived() *apiError { return fail(400, codeThreadArchived, "Thread is archived") }

// openDMLocked is Create DM: one DM channel per recipient, created on
// first use and the same after (as Discord answers). A recipient who
// allows no DMs from the bot gets 50007 on the message, not here.
func (s *Server) openDMLocked(body map[string]any) (int, any, *apiError) {
	user, _ := body["recipient_id"].(string)
	if user == "" || user == BotID {
		return 0, nil, formError("recipient_id", "BASE_TYPE_REQUIRED", "This field is required")
	}
	for _, c := range s.channels {
		if c.typ == 1 && c.recipient == user {
			return 200, c.json(), nil
		}
	}
	c := &channel{id: s.idLocked(), typ: 1, recipient: user}
	s.channels[c.id] = c
	return 200, c.json(), nil
}

// memberLocked is Get Guild Member: the bot, or a user who wrote in one
// of the guild's channels.
func (s *Server) memberLocked(rt route) (int, any, *apiError) {
	if !s.guildExistsLocked(rt.major) {
		return 0, nil, fail(404, codeUnknownGuild, "Unknown Guild")
	}
	user := rt.parts[3]
	if user == BotID {
		return 200, botMemberJSON(), nil
	}
	for _, m := range s.messages {
		if m.AuthorID == user && s.channels[m.ChannelID] != nil && s.channels[m.ChannelID].guildID == rt.major {
			return 200, map[string]any{"user": userJSON(m.AuthorID), "roles": []any{}, "joined_at": "2026-01-01T00:00:00Z", "deaf": false, "mute": false, "flags": 0}, nil
		}
	}
	return 0, nil, fail(404, codeUnknownMember, "Unknown Member")
}

// postMessageLocked is Create Message in ch, a nonce enforced.
func (s *Server) postMessageLocked(r *http.Request, rt route, ch *channel, body map[string]any) (int, any, *apiError) {
	if isForum(ch.typ) {
		return 0, nil, fail(400, codeNonText, "Cannot send messages in a non-text channel")
	}
	if ch.archived && ch.locked && s.permissionsLocked(ch.id, BotID)&PermManageThreads == 0 {
		// Only MANAGE_THREADS may unarchive a locked thread, which a
		// message does.
		return 0, nil, threadArchived()
	}
	if ch.typ == 1 && s.noDMs[ch.recipient] {
		return 0, nil, fail(403, 50007, "Cannot send messages to this user")
	}
	if err := s.botMayLocked(ch, sendPermission(ch)); err != nil {
		return 0, nil, err
	}
	nonce, enforce, err := nonceOf(body)
	if err != nil {
		return s.violationLocked(r, rt.major, err)
	}
	if enforce && nonce != "" {
		// Discord: a message the same author created with the same
		// nonce in the past few minutes is returned, and none created.
		for _, old := range s.messages {
			if old.AuthorID == BotID && old.nonce == nonce && time.Since(old.at) < nonceWindow {
				return 200, s.messageJSONLocked(old), nil
			}
		}
	}
	m := &Message{ChannelID: ch.id, AuthorID: BotID, nonce: nonce}
	if err := s.applyLocked(m, body, true); err != nil {
		return s.violationLocked(r, rt.major, err)
	}
	s.createLocked(ch, m)
	return 200, s.messageJSONLocked(m), nil
}

// messageLocked is Get, Edit or Delete Message in ch.
func (s *Server) messageLocked(r *http.Request, rt route, ch *channel, body map[string]any) (int, any, *apiError) {
	m, ok := s.messages[rt.parts[3]]
	if !ok || m.ChannelID != ch.id {
		return 0, nil, fail(404, codeUnknownMessage, "Unknown Message")
	}
	if r.Method == http.MethodGet {
		return 200, s.messageJSONLocked(m), nil
	}
	if ch.archived {
		return 0, nil, threadArchived()
	}
	if r.Method == http.MethodDelete {
		delete(s.messages, m.ID)
		delete(s.pins, m.ID)
		ev := map[string]any{"id": m.ID, "channel_id": m.ChannelID}
		if ch.guildID != "" {
			ev["guild_id"] = ch.guildID
		}
		s.dispatchLocked("MESSAGE_DELETE", ev)
		return 204, nil, nil
	}
	if m.AuthorID != BotID {
		return 0, nil, fail(403, codeOtherAuthor, "Cannot edit a message authored by another user")
	}
	if m.Type != 0 && m.Type != 19 {
		return 0, nil, fail(400, codeSystemMessage, "Cannot execute action on a system message")
	}
	edited := *m
	if err := s.applyLocked(&edited, body, false); err != nil {
		return s.violationLocked(r, rt.major+"/"+m.ID, err)
	}
	*m = edited
	m.Edits++
	m.edited = time.Now()
	s.dispatchLocked("MESSAGE_UPDATE", s.messageJSONLocked(m))
	return 200, s.messageJSONLocked(m), nil
}

// pinLocked is Pin or Unpin Message msgID in ch, up to the channel's pin
// limit; Discord announces a pin with a system message.
func (s *Server) pinLocked(r *http.Request, ch *channel, msgID string) (int, any, *apiError) {
	m, ok := s.messages[msgID]
	if !ok || m.ChannelID != ch.id {
		return 0, nil, fail(404, codeUnknownMessage, "Unknown Message")
	}
	if ch.archived {
		return 0, nil, threadArchived()
	}
	if r.Method == http.MethodDelete {
		if s.pins[m.ID] {
			delete(s.pins, m.ID)
			s.dispatchLocked("CHANNEL_PINS_UPDATE", s.pinsUpdateLocked(ch))
		}
		return 204, nil, nil
	}
	if s.pins[m.ID] {
		return 204, nil, nil
	}
	if m.Type != 0 && m.Type != 19 {
		return 0, nil, fail(400, codeSystemMessage, "Cannot execute action on a system message")
	}
	limit := s.PinLimit
	if limit <= 0 {
		limit = defaultPinLimit
	}
	n := 0
	for id, on := range s.pins {
		if x, ok := s.messages[id]; on && ok && x.ChannelID == ch.id {
			n++
		}
	}
	if n >= limit {
		return 0, nil, fail(400, codeMaxPins, fmt.Sprintf("Maximum number of pins reached (%d)", limit))
	}
	s.pins[m.ID] = true
	sys := &Message{ID: s.idLocked(), ChannelID: ch.id, AuthorID: BotID, Type: 6, Reference: m.ID, at: time.Now()}
	s.addLocked(sys)
	s.dispatchLocked("MESSAGE_CREATE", s.messageJSONLocked(sys))
	s.dispatchLocked("CHANNEL_PINS_UPDATE", s.pinsUpdateLocked(ch))
	return 204, nil, nil
}

// createLocked adds the bot's message m to ch and announces it.
func (s *Server) createLocked(ch *channel, m *Message) {
	if ch.archived {
		// Sending a message unarchives a thread that is not locked.
		ch.archived, ch.archivedAt = false, time.Now()
		s.dispatchLocked("THREAD_UPDATE", ch.json())
	}
	m.ID, m.at = s.idLocked(), time.Now()
	s.addLocked(m)
	s.dispatchLocked("MESSAGE_CREATE", s.messageJSONLocked(m))
}

func (s *Server) pinsUpdateLocked(ch *channel) map[string]any {
	ev := map[string]any{"channel_id": ch.id, "last_pin_timestamp": time.Now().UTC().Format(time.RFC3339)}
	if ch.guildID != "" {
		ev["guild_id"] = ch.guildID
	}
	return ev
}

// startThreadLocked starts a public thread from a message; as on Discord
// the thread's id is the message's, and a message starts one thread.
func (s *Server) startThreadLocked(ch *channel, msgID string, body map[string]any) (int, any, *apiError) {
	if ch.typ != 0 && ch.typ != 5 {
		return 0, nil, fail(400, codeWrongChannelType, "Cannot execute action on this channel type")
	}
	m, ok := s.messages[msgID]
	if !ok || m.ChannelID != ch.id {
		return 0, nil, fail(404, codeUnknownMessage, "Unknown Message")
	}
	if m.thread != "" {
		return 0, nil, fail(400, codeThreadAlreadyExist, "A thread has already been created for this message")
	}
	name, _ := body["name"].(string)
	if n := utf8.RuneCountInString(name); n < 1 || n > maxThreadName {
		return 0, nil, formError("name", "BASE_TYPE_BAD_LENGTH", fmt.Sprintf("Must be between 1 and %d in length.", maxThreadName))
	}
	if d, ok := body["auto_archive_duration"]; ok && d != nil {
		switch d {
		case 60.0, 1440.0, 4320.0, 10080.0:
		default:
			return 0, nil, formError("auto_archive_duration", "BASE_TYPE_CHOICES", "Value must be one of {60, 1440, 4320, 10080}.")
		}
	}
	typ := 11
	if ch.typ == 5 {
		typ = 10
	}
	th := &channel{id: m.ID, typ: typ, guildID: ch.guildID, parentID: ch.id, name: name, owner: BotID}
	s.channels[th.id] = th
	s.joinLocked(th, BotID) // who starts a thread is its member
	m.thread = th.id
	ev := th.json()
	ev["newly_created"] = true
	s.dispatchLocked("THREAD_CREATE", ev)
	return 201, th.json(), nil
}

// historyLocked answers GET /channels/{id}/messages: at most limit
// messages before, after or around an id, newest first, as Discord does.
func (s *Server) historyLocked(r *http.Request, ch *channel) (int, any, *apiError) {
	q := r.URL.Query()
	limit := defaultHistory
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxHistory {
			return 0, nil, formError("limit", "NUMBER_TYPE_MAX", fmt.Sprintf("Must be between 1 and %d.", maxHistory))
		}
		limit = n
	}
	var anchors []string
	for _, k := range []string{"before", "after", "around"} {
		if q.Get(k) != "" {
			anchors = append(anchors, k)
		}
	}
	if len(anchors) > 1 {
		return 0, nil, formError(anchors[1], "BASE_TYPE_INVALID", "Only one of before, after and around may be passed.")
	}
	var all []*Message
	for _, id := range s.order {
		if m, ok := s.messages[id]; ok && m.ChannelID == ch.id {
			all = append(all, m)
		}
	}
	sort.Slice(all, func(i, j int) bool { return idLess(all[i].ID, all[j].ID) })
	var page []*Message
	switch {
	case q.Get("before") != "":
		for _, m := range all {
			if idLess(m.ID, q.Get("before")) {
				page = append(page, m)
			}
		}
		page = page[max(0, len(page)-limit):]
	case q.Get("after") != "":
		for _, m := range all {
			if idLess(q.Get("after"), m.ID) {
				page = append(page, m)
			}
		}
		page = page[:min(limit, len(page))]
	case q.Get("around") != "":
		at := sort.Search(len(all), func(i int) bool { return !idLess(all[i].ID, q.Get("around")) })
		start := max(0, at-limit/2)
		page = all[start:min(len(all), start+limit)]
	default:
		page = all[max(0, len(all)-limit):]
	}
	out := make([]any, 0, len(page))
	for i := len(page) - 1; i >= 0; i-- {
		out = append(out, s.messageJSONLocked(page[i]))
	}
	return 200, out, nil
}

// idLess orders snowflakes numerically.
func idLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// nonceWindow is how long Discord holds a nonce against a second create
// ("the past few minutes").
const nonceWindow = 5 * time.Minute

// nonceOf reads a create's nonce (an integer or a string of at most 25
// characters) and enforce_nonce.
func nonceOf(body map[string]any) (string, bool, *apiError) {
	enforce, _ := body["enforce_nonce"].(bool)
	switch v := body["nonce"].(type) {
	case nil:
		return "", enforce, nil
	case float64:
		return strconv.FormatFloat(v, 'f', 0, 64), enforce, nil
	case string:
		if len(v) > 25 {
			return "", false, formError("nonce", "BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length.")
		}
		return v, enforce, nil
	}
	return "", false, formError("nonce", "NONCE_TYPE_INVALID", "Nonce must be an integer or a string.")
}

// applyLocked sets the content, embeds, components, flags and reply of m
// from a create or edit body, refusing what Discord refuses. A message
// flagged IS_COMPONENTS_V2 has no content, embeds, stickers or poll, and
// its components are held to checkComponentsV2; the flag, once set, is
// never removed. null clears content and embeds.
func (s *Server) applyLocked(m *Message, body map[string]any, create bool) *apiError {
	isNew := m.ID == ""
	flags, err := messageFlags(m, body, isNew)
	if err != nil {
		return err
	}
	v2 := flags&flagComponentsV2 != 0
	if v2 && isNew && s.refuseV2 {
		return formError("components.0.type", "UNION_TYPE_CHOICES", "Value of field \"type\" must be one of (1,).")
	}
	if err := applyContent(m, body, v2); err != nil {
		return err
	}
	if err := applyEmbeds(m, body, v2); err != nil {
		return err
	}
	stickers, _ := body["sticker_ids"].([]any)
	if v2 {
		if err := checkV2Legacy(m, body, stickers); err != nil {
			return err
		}
	}
	if err := applyComponents(m, body, v2); err != nil {
		return err
	}
	m.Flags = flags
	if am, ok := body["allowed_mentions"].(map[string]any); ok {
		if err := checkAllowedMentions(am); err != nil {
			return err
		}
	}
	if ref, ok := body["message_reference"].(map[string]any); ok && create {
		if err := s.applyReferenceLocked(m, ref); err != nil {
			return err
		}
	}
	if m.Content == "" && len(m.Embeds) == 0 && len(stickers) == 0 && len(m.Components) == 0 && body["poll"] == nil {
		return fail(400, codeEmptyMessage, "Cannot send an empty message")
	}
	return nil
}

// applyContent sets m's content from body, if it has one; null clears it.
func applyContent(m *Message, body map[string]any, v2 bool) *apiError {
	v, ok := body["content"]
	if !ok {
		return nil
	}
	if v == nil {
		m.Content = ""
		return nil
	}
	c, ok := v.(string)
	if !ok {
		return formError("content", "STRING_TYPE_CONVERT", "Could not interpret the value as string.")
	}
	if n := utf8.RuneCountInString(c); n > maxContent {
		return formError("content", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", maxContent))
	}
	if v2 && c != "" {
		return legacyField("content")
	}
	m.Content = c
	return nil
}

// applyEmbeds sets m's embeds from body, if it has them; null clears them.
func applyEmbeds(m *Message, body map[string]any, v2 bool) *apiError {
	v, ok := body["embeds"]
	if !ok {
		return nil
	}
	if v == nil {
		m.Embeds = nil
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		return formError("embeds", "LIST_TYPE_CONVERT", "Only iterables may be used in a ListType.")
	}
	if v2 && len(list) > 0 {
		return legacyField("embeds")
	}
	if err := checkEmbeds(list); err != nil {
		return err
	}
	m.Embeds = nil
	for _, e := range list {
		m.Embeds = append(m.Embeds, e.(map[string]any))
	}
	return nil
}

// checkV2Legacy refuses, on a message flagged IS_COMPONENTS_V2, the
// stickers or poll of body and the content or embeds m still has.
func checkV2Legacy(m *Message, body map[string]any, stickers []any) *apiError {
	if len(stickers) > 0 {
		return legacyField("sticker_ids")
	}
	if body["poll"] != nil {
		return legacyField("poll")
	}
	if m.Content != "" || len(m.Embeds) > 0 {
		// An edit that sets the flag must clear what the message had.
		field := "content"
		if m.Content == "" {
			field = "embeds"
		}
		return legacyField(field)
	}
	return nil
}

// applyComponents sets m's components from body, checked as v2's or the
// legacy ones; without them, a message that gets the v2 flag has its
// components checked again.
func applyComponents(m *Message, body map[string]any, v2 bool) *apiError {
	if v, ok := body["components"]; ok && v != nil {
		list, ok := v.([]any)
		if !ok {
			return formError("components", "LIST_TYPE_CONVERT", "Only iterables may be used in a ListType.")
		}
		check := checkComponents
		if v2 {
			check = checkComponentsV2
		}
		if err := check(list); err != nil {
			return err
		}
		m.Components = nil // an empty list removes them
		for _, c := range list {
			m.Components = append(m.Components, c.(map[string]any))
		}
	} else if v2 && m.Flags&flagComponentsV2 == 0 && len(m.Components) > 0 {
		// The flag set on a message whose components were not sent again.
		list := make([]any, len(m.Components))
		for i, c := range m.Components {
			list[i] = c
		}
		if err := checkComponentsV2(list); err != nil {
			return err
		}
	}
	return nil
}

// applyReferenceLocked makes a new message m a reply to the message ref
// names, in m's channel; an unknown one is refused unless
// fail_if_not_exists is false.
func (s *Server) applyReferenceLocked(m *Message, ref map[string]any) *apiError {
	id, _ := ref["message_id"].(string)
	target, found := s.messages[id]
	if !found || target.ChannelID != m.ChannelID {
		if f, ok := ref["fail_if_not_exists"].(bool); !ok || f {
			return formError("message_reference", "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "Unknown message")
		}
		return nil
	}
	m.Reference = id
	m.Type = 19 // a reply
	return nil
}

func checkEmbeds(list []any) *apiError {
	if len(list) > maxEmbeds {
		return formError("embeds", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", maxEmbeds))
	}
	total := 0
	text := func(field string, v any, max int, required bool) *apiError {
		str, _ := v.(string)
		n := utf8.RuneCountInString(str)
		if required && n == 0 {
			return formError(field, "BASE_TYPE_REQUIRED", "This field is required")
		}
		if n > max {
			return formError(field, "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", max))
		}
		total += n
		return nil
	}
	for i, raw := range list {
		e, ok := raw.(map[string]any)
		if !ok {
			return formError(fmt.Sprintf("embeds.%d", i), "DICT_TYPE_CONVERT", "Only dictionaries may be used in a DictType")
		}
		at := fmt.Sprintf("embeds.%d.", i)
		if err := text(at+"title", e["title"], maxEmbedTitle, false); err != nil {
			return err
		}
		if err := text(at+"description", e["description"], maxEmbedDescription, false); err != nil {
			return err
		}
		if f, ok := e["footer"].(map[string]any); ok {
			if err := text(at+"footer.text", f["text"], maxFooterText, true); err != nil {
				return err
			}
		}
		if a, ok := e["author"].(map[string]any); ok {
			if err := text(at+"author.name", a["name"], maxAuthorName, true); err != nil {
				return err
			}
		}
		fields, _ := e["fields"].([]any)
		if len(fields) > maxEmbedFields {
			return formError(at+"fields", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", maxEmbedFields))
		}
		for j, raw := range fields {
			f, _ := raw.(map[string]any)
			if err := text(fmt.Sprintf("%sfields.%d.name", at, j), f["name"], maxFieldName, true); err != nil {
				return err
			}
			if err := text(fmt.Sprintf("%sfields.%d.value", at, j), f["value"], maxFieldValue, true); err != nil {
				return err
			}
		}
	}
	if total > maxEmbedTotal {
		return formError("embeds", "MAX_EMBED_SIZE_EXCEEDED", fmt.Sprintf("Embed size exceeds maximum size of %d", maxEmbedTotal))
	}
	return nil
}

func checkAllowedMentions(am map[string]any) *apiError {
	parse := map[string]bool{}
	if list, ok := am["parse"].([]any); ok {
		for _, v := range list {
			p, _ := v.(string)
			if p != "users" && p != "roles" && p != "everyone" {
				return formError("allowed_mentions.parse", "BASE_TYPE_CHOICES", "Value must be one of {'users', 'roles', 'everyone'}.")
			}
			parse[p] = true
		}
	}
	for _, k := range []string{"users", "roles"} {
		if list, _ := am[k].([]any); len(list) > 0 && parse[k] {
			return formError("allowed_mentions", "MESSAGE_ALLOWED_MENTIONS_PARSE_EXCLUSIVE", fmt.Sprintf("parse:[%q] and %s: [ids] are mutually exclusive.", k, k))
		}
	}
	return nil
}

func (s *Server) addLocked(m *Message) {
	s.messages[m.ID] = m
	s.order = append(s.order, m.ID)
	if ch := s.channels[m.ChannelID]; ch != nil {
		ch.lastMessage = m.ID
		if f := s.channels[ch.parentID]; f != nil && isForum(f.typ) && m.ID == ch.id {
			f.lastMessage = m.ID // a forum's last_message_id is its newest post
		}
	}
}

var (
	reUserMention = regexp.MustCompile(`<@!?(\d+)>`)
	reRoleMention = regexp.MustCompile(`<@&(\d+)>`)
)

func (s *Server) messageJSONLocked(m *Message) map[string]any {
	mentions := []any{}
	seen := map[string]bool{}
	for _, g := range reUserMention.FindAllStringSubmatch(m.Content, -1) {
		if !seen[g[1]] {
			seen[g[1]] = true
			mentions = append(mentions, userJSON(g[1]))
		}
	}
	roles := []any{}
	for _, g := range reRoleMention.FindAllStringSubmatch(m.Content, -1) {
		roles = append(roles, g[1])
	}
	embeds := make([]any, 0, len(m.Embeds))
	for _, e := range m.Embeds {
		embeds = append(embeds, e)
	}
	components := make([]any, 0, len(m.Components))
	for _, c := range m.Components {
		components = append(components, c)
	}
	at := m.at
	if at.IsZero() {
		at = time.Now()
	}
	out := map[string]any{
		"id": m.ID, "channel_id": m.ChannelID, "content": m.Content, "type": m.Type,
		"author": userJSON(m.AuthorID), "timestamp": at.UTC().Format(time.RFC3339Nano), "edited_timestamp": nil,
		"mentions": mentions, "mention_roles": roles, "mention_everyone": false, "embeds": embeds,
		"attachments": attachmentsOf(m), "components": components, "pinned": s.pins[m.ID], "tts": false, "flags": m.Flags,
	}
	if !m.edited.IsZero() {
		out["edited_timestamp"] = m.edited.UTC().Format(time.RFC3339Nano)
	}
	if m.nonce != "" {
		out["nonce"] = m.nonce
	}
	if ch, ok := s.channels[m.ChannelID]; ok && ch.guildID != "" {
		out["guild_id"] = ch.guildID
	}
	if m.Reference != "" {
		out["message_reference"] = map[string]any{"message_id": m.Reference, "channel_id": m.ChannelID}
	}
	if m.thread != "" {
		if th, ok := s.channels[m.thread]; ok {
			out["thread"] = th.json()
		}
	}
	if in, ok := s.interactions[m.Interaction]; ok {
		out["interaction_metadata"] = in.metadataJSON()
	}
	return out
}

func attachmentsOf(m *Message) []any {
	out := make([]any, 0, len(m.attachments))
	for _, a := range m.attachments {
		out = append(out, a)
	}
	return out
}
