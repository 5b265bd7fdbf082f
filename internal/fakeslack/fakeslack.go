// Package fakeslack is a loopback fake of Slack for tests: the Web API as
// slack-go calls it (POST https://slack.com/api/<method>, form-encoded or
// JSON, the token in the form or a bearer header) and Socket Mode
// (apps.connections.open, a websocket that says hello, pings, events_api
// envelopes, their acks and redelivery, and disconnect requests).
//
// A zero Server is ready. It is as strict as Slack where pinplan touches
// it: Block Kit limits, message text length, token types, pin limits and
// errors, editing only the bot's own messages; an answer to a token it
// accepts names the token's scopes in X-OAuth-Scopes (Scopes). It
// keeps the messages (the bot's and the users' pushed as events, readable with
// conversations.replies), users (users.info; SetUserTeam puts one in
// another workspace, as a Slack Connect user), pins and reactions it was
// asked for, records every call, enforces rate limits when asked (Limit
// per method, LimitPerChannel per method and channel), and injects
// faults: error codes (Fail), HTTP statuses (FailHTTP), an egress
// proxy's refusal with its own HTML page (RefuseAtProxy), slow answers
// (Delay), deleted messages (Delete) and Socket Mode disconnects
// (Disconnect).
//
// Interactivity is Slack's too: BlockActions builds the block_actions
// payload of a click on a button of a bot message, PushInteraction sends
// it in an interactive Socket Mode envelope and InteractionBody encodes it
// for an HTTP Request URL; its response_url is served here and recorded
// (ResponseURLPosts). chat.postEphemeral messages are kept apart from the
// channel's (Ephemerals). Overflow and StaticSelect build the payload of
// a person picking an option of an overflow menu or a static_select.
//
// Modals (views.go): every payload's trigger_id opens one modal with
// views.open within 3 s of being sent (TriggerLife); views.open and
// views.update check the view as Slack does and the fake keeps it
// (Views); ViewSubmission builds a person's view_submission, and
// PushViewSubmission and AnswerViewSubmission apply the bot's ack to the
// view (closed, errors shown, updated, pushed, cleared). A refused call
// answers, as Slack does, response_metadata.messages saying why.
//
// Agent sessions and streams (agents.go): agents.sessions.setStatus is
// checked as Slack checks it and each thread's statuses are recorded
// (SessionStatuses); StopSession and RenameSession build the
// agent_session_stopped and agent_session_title_changed events a user's
// Stop or new title sends (push them with Push or CallbackBody);
// chat.startStream, chat.appendStream and chat.stopStream keep streamed
// messages (Streams), and a stream can be made to expire
// (ExpireStreamOnAppend). AgentSessionsError turns sessions off.
//
// Teams (teams.go): several workspaces, each with its own channels, bot
// user and tokens (AddTeam), a token refused on another workspace's
// channel, events naming their workspace, org and authorizations, and
// Uninstall sending tokens_revoked and app_uninstalled.
//
// Only tests import it.
package fakeslack

import (
	"cmp"
	"context"
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
)

// Call is one Web API request.
type Call struct {
	Method string
	Params map[string]string
	// Began is when the request reached the fake; At is when it was
	// carried out (later by a Delay).
	Began time.Time
	At    time.Time
	// Error is the error code answered, "" for ok; an injected HTTP
	// failure reads "http 500" and the like.
	Error  string
	Status int // the HTTP status answered
	// Team is the installation the call's token belongs to: a team id,
	// or an org id for an org-wide install (teams.go).
	Team string
}

// Message is a message the fake holds: posted by the bot, or pushed by the
// test as a message or app_mention event.
type Message struct {
	Channel, TS, ThreadTS, Text, Blocks, User string
	BotID                                     string // set on bot messages
	Edits                                     int
	// Recipient is the only user who sees an ephemeral message; "" on
	// channel messages.
	Recipient string
	// Streamed: posted with chat.startStream; Text is what its chunks
	// added up to. Streaming while it still takes chat.appendStream (until
	// chat.stopStream, its expiry or a Stop). StreamUser and StreamTeam
	// are its recipient_user_id and recipient_team_id; Appends counts its
	// chat.appendStream calls.
	Streamed, Streaming    bool
	StreamUser, StreamTeam string
	Appends                int
	// Metadata is the message's metadata as posted (chat.postMessage's
	// metadata), "" if none; conversations.replies returns it only with
	// include_all_metadata.
	Metadata string
}

type window struct {
	n     int
	per   time.Duration
	times []time.Time
}

// full drops the calls that left the window by now and returns the
// whole seconds until the oldest left leaves it too, as Retry-After says
// it, if n were counted already; 0 if a call at now may go.
func (w *window) full(now time.Time) (retryAfter int) {
	kept := w.times[:0]
	for _, t := range w.times {
		if now.Sub(t) < w.per {
			kept = append(kept, t)
		}
	}
	w.times = kept
	if len(w.times) < w.n {
		return 0
	}
	wait := w.per
	if len(w.times) > 0 {
		wait -= now.Sub(w.times[0])
	}
	return max(int(math.Ceil(wait.Seconds())), 1)
}

// hold is one 429's Retry-After: until its end, from the moment the 429
// was answered (sent: decided and then written at once, before a client
// can read it) on the connection conn (the client's address). A call that
// reached the fake before sent was on its way, not sent against it.
type hold struct {
	until, sent time.Time
	conn        string
}

// channelLimit is a LimitPerChannel: one window per channel.
type channelLimit struct {
	n        int
	per      time.Duration
	channels map[string]*window
}

type fault struct {
	status int           // FailHTTP
	delay  time.Duration // Delay
	n      int           // calls left
}

// Set changes the fake's settings under its lock, for a test that
// changes them once the server serves: a request that comes meanwhile
// (even one that is not from the test's bot, on a port another test's
// server used before) reads them safely.
func (s *Server) Set(f func(s *Server)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// Server is the fake. Set fields before serving.
type Server struct {
	BotUserID string // default UBOT
	TeamID    string // default T1
	// App is the distributed app installed by OAuth (oauth.go); nil
	// refuses oauth.v2.access.
	App   *App
	oauth *oauthState
	teams *teams // AddTeam (teams.go)
	// caller is the bot user of the token of the call being answered,
	// callerInstall its installation (a team or org id).
	caller, callerInstall string
	// BaseURL is the fake's own address (http://127.0.0.1:port) for the
	// response_url of BlockActions payloads; by default the Host of the
	// latest Web API request.
	BaseURL string
	// AgentSessionsError, when set, is the error agents.sessions.setStatus
	// answers: not_allowed_token_type for a token or app that may not use
	// agent sessions (the reaction fallback).
	AgentSessionsError string
	// ExpireStreamOnAppend, when positive, ends every streamed message on
	// its Nth chat.appendStream call: that call answers
	// message_not_in_streaming_state and takes nothing, as Slack does once
	// a stream has run for a few minutes.
	ExpireStreamOnAppend int
	// RejectNativePlan makes chat.postMessage and chat.update refuse the
	// native plan and task_card blocks with invalid_blocks, as a workspace
	// without them does.
	RejectNativePlan bool
	// PinLimit is how many pins a channel holds before too_many_pins;
	// default 100, as on Slack.
	PinLimit int
	// PingInterval is how often Socket Mode connections get a websocket
	// ping (slack-go reconnects after 30 s without one); default 10 s.
	PingInterval time.Duration
	// AckTimeout is how long an events_api envelope may go unacknowledged
	// before it is sent again with retry_attempt increased, at most 3
	// times; default 3 s, as on Slack. Negative turns redelivery on
	// timeout off (envelopes unacked when their connection closes are
	// still sent again).
	AckTimeout time.Duration
	// NoFilesRead: the app lacks the files:read scope, so files are
	// answered with Slack's sign-in page even with the bot token.
	NoFilesRead bool
	// Scopes are the bot token's scopes, which every Web API answer to a
	// call with it names in its X-OAuth-Scopes header, as Slack's do;
	// nil means BotScopes (less files:read with NoFilesRead). An
	// app-level token's are connections:write.
	Scopes []string
	// TriggerLife is how long after the payload carrying it was sent a
	// trigger_id opens a modal (views.open); default 3 s, as on Slack.
	TriggerLife time.Duration
	// InFlightGrace is how long after a 429 was answered a call on
	// another connection still counts as on its way rather than sent
	// against the Retry-After (InFlightAtRetryAfter, not Violations): the
	// answer's trip back and the client's scheduling, which a loaded
	// machine stretches, separate the fake's clock from what the client
	// knew. A call on the connection that carried the 429 came after the
	// client read it, whatever the grace. Default 0: strict.
	InFlightGrace time.Duration

	handlers sync.WaitGroup // Socket Mode connections being served
	files    files          // AddFile

	mu          sync.Mutex // guards everything below
	closed      bool
	calls       []Call
	messages    map[string]*Message // channel/ts
	order       []string
	lastTS      int64 // microseconds of the newest ts handed out or seen
	pins        map[string]bool
	unpinnable  map[string]bool
	reactions   map[string]map[string]bool
	users       map[string]string // id → display name
	userTeams   map[string]string // id → the user's own team, for users of another workspace
	limits      map[string]*window
	chanLimits  map[string]*channelLimit // by method
	failures    map[string][]string
	httpFaults  map[string][]*fault
	proxy       []*proxyRule // RefuseAtProxy, oldest first
	delays      map[string][]*fault
	held        map[string]int      // calls held by Delay now, by method
	late        map[string][]*fault // DelayAnswer
	heldAnswers int                 // answers DelayAnswer holds now
	holds       map[string][]*hold  // by method, or "method in channel" for a per-channel limit
	violations  []string
	inFlight    []string // calls in a Retry-After that began before its 429 was answered
	seq         int
	socks       []*sock              // open Socket Mode connections, oldest first
	next        int                  // round-robin position in socks
	pending     []*envelope          // waiting for a connection
	inflight    map[string]*envelope // sent, not acknowledged
	tickets     map[string]bool      // connection URLs handed out, unused
	acks        []string
	host        string                     // the Host of the latest Web API request, for response_url
	ephemerals  []*Message                 // chat.postEphemeral and response_url replies, oldest first
	members     map[string]map[string]bool // channel → users seen in it
	responses   map[string]*responseURL    // by path
	posts       []ResponseURLPost
	sessions    map[string]*agentSession // agent sessions, by channel/thread_ts
	triggers    map[string]*trigger      // trigger_ids handed out in payloads
	views       map[string]*view         // modals, by id
	viewOrder   []string
}

func (s *Server) initLocked() {
	if s.messages == nil {
		s.messages = map[string]*Message{}
		s.pins = map[string]bool{}
		s.unpinnable = map[string]bool{}
		s.reactions = map[string]map[string]bool{}
		s.users = map[string]string{}
		s.userTeams = map[string]string{}
		s.limits = map[string]*window{}
		s.chanLimits = map[string]*channelLimit{}
		s.failures = map[string][]string{}
		s.httpFaults = map[string][]*fault{}
		s.delays = map[string][]*fault{}
		s.late = map[string][]*fault{}
		s.holds = map[string][]*hold{}
		s.inflight = map[string]*envelope{}
		s.tickets = map[string]bool{}
		s.members = map[string]map[string]bool{}
		s.responses = map[string]*responseURL{}
		s.sessions = map[string]*agentSession{}
		s.triggers = map[string]*trigger{}
		s.views = map[string]*view{}
	}
	if s.BotUserID == "" {
		s.BotUserID = "UBOT"
	}
	if s.TeamID == "" {
		s.TeamID = "T1"
	}
	if _, ok := s.users[s.BotUserID]; !ok {
		s.users[s.BotUserID] = "pinplan"
	}
}

// Limit makes method answer 429 past n calls in any window of length per,
// counted per workspace as Slack counts them (a Team's calls apart from
// the default workspace's and from each other's).
func (s *Server) Limit(method string, n int, per time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.limits[method] = &window{n: n, per: per}
}

// LimitPerChannel makes method answer 429 past n calls to one channel in
// any window of length per, each channel counted on its own (the call's
// channel parameter), as Slack counts chat.postMessage: "1 message per
// second per channel, short bursts allowed". The end-to-end tests read
// that as 5 in any 5 s: a burst of 5 after a quiet 5 s, one a second
// after that. Its Retry-After holds that channel's calls of method: a
// call to the same channel before it ended is a violation, one to another
// channel is not. It adds to a Limit of the same method (Slack's
// workspace-wide cap); a call answered 429 counts in neither.
func (s *Server) LimitPerChannel(method string, n int, per time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.chanLimits[method] = &channelLimit{n: n, per: per, channels: map[string]*window{}}
}

// Fail queues error codes for the next calls of method, one call each;
// repeat a code to fail that many calls.
func (s *Server) Fail(method string, codes ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.failures[method] = append(s.failures[method], codes...)
}

// FailHTTP makes the next n calls of method ("" for any method) answer
// the HTTP status with no Slack body, as a failing gateway does. A 429
// carries Retry-After: 1, and a call before that second is a violation.
func (s *Server) FailHTTP(method string, status, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.httpFaults[method] = append(s.httpFaults[method], &fault{status: status, n: n})
}

// Heal drops the faults still pending for method (Fail, FailHTTP,
// RefuseAtProxy, Delay, DelayAnswer): its next calls are answered as usual.
func (s *Server) Heal(method string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	delete(s.failures, method)
	delete(s.httpFaults, method)
	s.healProxyLocked(method)
	delete(s.delays, method)
	delete(s.late, method)
}

// Delay holds the next n calls of method ("" for any method) for d before
// answering. A call whose client gives up first still takes effect, as on
// a slow server.
func (s *Server) Delay(method string, d time.Duration, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.delays[method] = append(s.delays[method], &fault{delay: d, n: n})
}

// DelayAnswer carries out the next n calls of method ("" for any method)
// at once and holds their answers for d: a client that gives up or dies
// meanwhile never learns that its message was posted, as when Slack's
// answer is lost on the way.
func (s *Server) DelayAnswer(method string, d time.Duration, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.late[method] = append(s.late[method], &fault{delay: d, n: n})
}

// HeldAnswers reports how many answers DelayAnswer holds now.
func (s *Server) HeldAnswers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldAnswers
}

// Held reports how many calls of method a Delay holds now.
func (s *Server) Held(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[method]
}

// takeLocked uses one call of the first fault queued for method or for
// any method.
func takeLocked(q map[string][]*fault, method string) *fault {
	for _, k := range []string{method, ""} {
		for len(q[k]) > 0 && q[k][0].n <= 0 {
			q[k] = q[k][1:]
		}
		if len(q[k]) > 0 {
			f := q[k][0]
			f.n--
			return f
		}
	}
	return nil
}

// Delete removes a message, as a user deleting it would.
func (s *Server) Delete(channel, ts string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	delete(s.messages, channel+"/"+ts)
	delete(s.pins, channel+"/"+ts)
}

// NotPinnable makes pins.add answer not_pinnable for a message.
func (s *Server) NotPinnable(channel, ts string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.unpinnable[channel+"/"+ts] = true
}

// AddUser registers a user for users.info.
func (s *Server) AddUser(id, displayName string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.users[id] = displayName
}

// SetUserTeam records that user belongs to team, another workspace than
// the fake's (a Slack Connect user in a shared channel): Slack names that
// team as the user's (users.info, the messages' team), and a stream to the
// user must name it as recipient_team_id.
func (s *Server) SetUserTeam(user, team string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.userTeams[user] = team
}

// teamOfLocked is user's team: the one SetUserTeam recorded, else the
// fake's.
func (s *Server) teamOfLocked(user string) string {
	if t, ok := s.userTeams[user]; ok {
		return t
	}
	return s.TeamID
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

// Violations lists what Slack would hold against the client: calls that
// reached it after a 429 was answered and before its Retry-After had
// passed (not those already on their way: InFlightAtRetryAfter),
// messages Slack refused as invalid (invalid_blocks, msg_too_long,
// no_text) with the reason, envelopes never acknowledged, and
// interactive envelopes acknowledged after AckTimeout (the user who
// clicked saw an error).
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}

// InFlightAtRetryAfter lists the calls made inside a 429's Retry-After
// that reached the fake before that 429 was answered (or, on another
// connection, within InFlightGrace after it): the client could not have
// known of the 429 when it sent them (several calls in flight at once,
// each on a connection of its own), so Slack would not hold them against
// it, and they are not Violations.
func (s *Server) InFlightAtRetryAfter() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.inFlight...)
}

// holdLocked starts a Retry-After of secs for key, counted from now, the
// time the call answered 429 on conn was carried out; the caller writes
// the 429 next. A call that reaches the fake from here (past
// InFlightGrace on another connection) until the hold ends was sent
// against it: the answer was on its way, the client can have read it
// only after this moment.
func (s *Server) holdLocked(key, conn string, now time.Time, secs int) {
	s.holds[key] = append(s.holds[key], &hold{until: now.Add(time.Duration(secs) * time.Second), sent: time.Now(), conn: conn})
}

// checkHoldsLocked records a call on conn that began at began (and was
// carried out at now) inside a Retry-After of key: a violation if that
// 429 had been answered when the call began (on another connection, by
// more than InFlightGrace), else a call in flight.
func (s *Server) checkHoldsLocked(key, conn string, began, now time.Time) {
	kept := s.holds[key][:0]
	var against, before *hold
	for _, h := range s.holds[key] {
		if now.Sub(h.until) > time.Minute {
			continue // over long ago: no call still held began inside it
		}
		kept = append(kept, h)
		if !began.Before(h.until) {
			continue
		}
		if h.sent.Before(began) && (conn == h.conn || h.sent.Add(s.InFlightGrace).Before(began)) {
			against = h
		} else {
			before = h
		}
	}
	s.holds[key] = kept
	switch {
	case against != nil:
		s.violations = append(s.violations, fmt.Sprintf("%s at %s, %s before Retry-After ended", key, now.Format(time.StampMilli), against.until.Sub(began)))
	case before != nil && before.sent.Before(began):
		s.inFlight = append(s.inFlight, fmt.Sprintf("%s at %s, began %s after its 429 was answered, on another connection", key, now.Format(time.StampMilli), began.Sub(before.sent)))
	case before != nil:
		s.inFlight = append(s.inFlight, fmt.Sprintf("%s at %s, began %s before its 429 was answered", key, now.Format(time.StampMilli), before.sent.Sub(began)))
	}
}

// Acks lists the envelope ids acknowledged over Socket Mode.
func (s *Server) Acks() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.acks...)
}

// ServeHTTP implements http.Handler: /api/<method> and the /socket websocket.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	began := time.Now()
	if r.URL.Path == "/socket" {
		s.socket(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, responseURLPrefix) {
		s.serveResponseURL(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, filesPrefix) {
		s.serveFile(w, r)
		return
	}
	method, ok := strings.CutPrefix(r.URL.Path, "/api/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	s.serveAPI(w, r, method, began)
}

// serveAPI answers a Web API call that reached the fake at began: past
// the proxy and any Delay, then the rate limits, the HTTP faults, the
// token and the method itself, recording the call as answered.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, method string, began time.Time) {
	params, err := readParams(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	token := params["token"]
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && token == "" {
		token = bearer
	}
	if !s.arrive(w, r, method, params, began) {
		return
	}
	now := time.Now()
	s.mu.Lock()
	team := s.installOfLocked(token)
	call := Call{Method: method, Params: params, Began: began, At: now, Status: http.StatusOK, Team: team}
	space := "" // the default workspace's limits and holds, as before teams
	if team != s.TeamID {
		space = team + " "
	}
	if secs := s.admitLocked(space, method, params["channel"], r.RemoteAddr, began, now); secs > 0 {
		call.Error, call.Status = "ratelimited", http.StatusTooManyRequests
		s.calls = append(s.calls, call)
		s.mu.Unlock()
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"ok":false,"error":"ratelimited"}`)
		return
	}
	if f := takeLocked(s.httpFaults, method); f != nil {
		call.Error, call.Status = fmt.Sprintf("http %d", f.status), f.status
		s.calls = append(s.calls, call)
		if f.status == http.StatusTooManyRequests {
			s.holdLocked(space+method, r.RemoteAddr, now, 1)
			w.Header().Set("Retry-After", "1")
		}
		s.mu.Unlock()
		http.Error(w, http.StatusText(f.status), f.status)
		return
	}
	resp, code := s.answerLocked(w.Header(), method, token, params, r)
	call.Error = code
	s.calls = append(s.calls, call)
	late := takeLocked(s.late, method)
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
	if code != "" {
		out := map[string]any{"ok": false, "error": code}
		if md, ok := resp["response_metadata"]; ok {
			out["response_metadata"] = md
		}
		resp = out
	} else {
		resp["ok"] = true
	}
	writeJSON(w, resp)
}

// arrive is the way to Slack: a proxy rule may refuse the call (recorded,
// answered, and false returned: Slack never sees it) and a Delay may hold
// it.
func (s *Server) arrive(w http.ResponseWriter, r *http.Request, method string, params map[string]string, began time.Time) bool {
	s.mu.Lock()
	s.initLocked()
	s.host = r.Host
	if status := s.proxyRefusesLocked(method, params); status != 0 {
		// Stopped on the way: Slack never sees the call.
		s.calls = append(s.calls, Call{Method: method, Params: params, Began: began, At: time.Now(), Error: fmt.Sprintf("proxy %d", status), Status: status})
		s.mu.Unlock()
		writeProxyRefusal(w, status)
		return false
	}
	d := takeLocked(s.delays, method)
	if d != nil {
		if s.held == nil {
			s.held = map[string]int{}
		}
		s.held[method]++
	}
	s.mu.Unlock()
	if d != nil {
		pause(r.Context(), d.delay)
		s.mu.Lock()
		s.held[method]--
		s.mu.Unlock()
	}
	return true
}

// admitLocked checks a call to method in channel from conn against the
// Retry-Afters it may break and the method's rate limits, the
// workspace's and the channel's. It returns the seconds of the
// Retry-After to answer with a 429, holding them from now; 0 admits the
// call, counted in every window it passes (one answered 429 is counted
// in none). Slack counts per workspace: space is the workspace's prefix
// of the keys ("" for the default one), so that each has its own windows
// and Retry-Afters.
func (s *Server) admitLocked(space, method, channel, conn string, began, now time.Time) (retryAfter int) {
	chanKey := method + " in " + channel // a per-channel Retry-After
	for _, k := range []string{space + method, chanKey} {
		s.checkHoldsLocked(k, conn, began, now)
	}
	var windows []*window
	limited, secs := "", 0
	if lim := s.limitLocked(space, method); lim != nil {
		windows = append(windows, lim)
		if after := lim.full(now); after > 0 {
			limited, secs = space+method, after
		}
	}
	if cl := s.chanLimits[method]; cl != nil {
		win := cl.channels[channel]
		if win == nil {
			win = &window{n: cl.n, per: cl.per}
			cl.channels[channel] = win
		}
		windows = append(windows, win)
		if after := win.full(now); after > 0 && limited == "" {
			limited, secs = chanKey, after
		}
	}
	if limited != "" {
		s.holdLocked(limited, conn, now, secs)
		return secs
	}
	for _, win := range windows {
		win.times = append(win.times, now)
	}
	return 0
}

// limitLocked is the window of method's Limit in the workspace space.
func (s *Server) limitLocked(space, method string) *window {
	lim := s.limits[method]
	if lim == nil || space == "" {
		return lim
	}
	own, ok := s.limits[space+method]
	if !ok {
		own = &window{n: lim.n, per: lim.per}
		s.limits[space+method] = own
	}
	return own
}

// answerLocked answers an admitted call: the token's error, a failure
// queued for the method, or the method's own answer, with the token's
// scopes in h when the token is good. code is the error, "" for none.
func (s *Server) answerLocked(h http.Header, method, token string, params map[string]string, r *http.Request) (resp map[string]any, code string) {
	if method == "oauth.v2.access" {
		return s.oauthAccessLocked(params) // the app's credentials, no token
	}
	code = authCode(method, token)
	if code == "" {
		code = s.tokenCodeLocked(token)
	}
	if code != "" {
		return nil, code
	}
	h.Set("X-OAuth-Scopes", s.scopesLocked(token))
	s.callerInstall = s.installOfLocked(token)
	s.caller = s.botOfLocked(s.callerInstall)
	if ch := cmp.Or(params["channel"], params["channel_id"]); ch != "" && !strings.HasPrefix(token, "xapp-") && !s.seesLocked(token, ch) {
		if s.revokedLocked(token, ch) {
			return nil, "team_access_not_granted" // a workspace removed from the org-wide install
		}
		return nil, "channel_not_found" // another workspace's channel
	}
	if q := s.failures[method]; len(q) > 0 {
		code, s.failures[method] = q[0], q[1:]
		return nil, code
	}
	return s.handleLocked(method, params, r)
}

// BotScopes are the bot scopes slack-app-manifest.yaml asks for: what an
// app installed from it is granted.
var BotScopes = []string{"app_mentions:read", "channels:history", "groups:history", "im:history", "mpim:history",
	"chat:write", "assistant:write", "pins:write", "reactions:write", "users:read", "files:read", "commands"}

// scopesLocked is the X-OAuth-Scopes header of an answer to token.
func (s *Server) scopesLocked(token string) string {
	if strings.HasPrefix(token, "xapp-") {
		return "connections:write"
	}
	scopes := s.Scopes
	if scopes == nil {
		for _, sc := range BotScopes {
			if sc != "files:read" || !s.NoFilesRead {
				scopes = append(scopes, sc)
			}
		}
	}
	return strings.Join(scopes, ",")
}

// pause waits d, or until the client gives up.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// authCode answers what Slack says to a token: app-level tokens (xapp-)
// open Socket Mode connections and nothing else, bot and user tokens do
// the rest, but agents.sessions.* take only a bot token.
func authCode(method, token string) string {
	token = strings.TrimPrefix(token, "xoxe.") // a rotating token
	switch {
	case token == "":
		return "not_authed"
	case strings.HasPrefix(token, "xapp-"):
		if method != "apps.connections.open" {
			return "not_allowed_token_type"
		}
	case strings.HasPrefix(token, "xoxb-"), strings.HasPrefix(token, "xoxp-"):
		if method == "apps.connections.open" || (strings.HasPrefix(method, "agents.") && strings.HasPrefix(token, "xoxp-")) {
			return "not_allowed_token_type"
		}
	default:
		return "invalid_auth"
	}
	return ""
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
