// Package fakediscord is a loopback fake of Discord for tests: the REST API
// under /api/v9 (messages and their history, edits, the current pins route,
// threads, typing, channels, the bot's user and application (its flags
// say whether the Message Content intent is enabled, as DenyIntents has
// it), the bot's guild member and roles, 429s with a
// JSON retry_after body, and X-RateLimit headers on every answer) and the
// gateway websocket (GET /api/v9/gateway, op 10 HELLO, op 2 IDENTIFY,
// READY and GUILD_CREATE, op 0 dispatches in order with per-session
// sequence numbers, op 1 heartbeats answered with op 11, op 7 RECONNECT,
// op 6 RESUME with replay, op 9 INVALID SESSION and 4xxx close codes).
//
// A zero Server is ready. It is as strict as Discord where pinplan touches
// it: message and embed limits, empty messages, replies to unknown
// messages, editing only the bot's own messages, the pin limit, archived
// threads, gateway intents (message content is blanked without the
// MESSAGE_CONTENT intent), and sessions that end. It records REST calls,
// counts gateway sessions (Sessions, Connected, and MaxConnected: the
// most at once), keeps every message in its channel's history, and
// injects faults: error codes (Fail), HTTP statuses (FailHTTP), slow
// answers (Delay), rate limits (Limit, LimitEdits) and gateway trouble
// (Reconnect, Drop, InvalidSession, CloseWith).
//
// Message components and interactions work as on Discord: buttons in
// action rows are checked and kept with their message, Click dispatches
// the INTERACTION_CREATE of a user clicking one, and
// POST /interactions/{id}/{token}/callback answers it within the 3 s
// Discord allows (InteractionWindow), once, with a channel message, an
// ephemeral reply (Ephemerals), a deferral or an update of the clicked
// message; every callback is recorded (Responses). String selects are
// checked as Discord checks them (options, values, placeholder, value
// counts) and Select dispatches a person's pick. A MODAL callback is
// checked too (title, custom_id, 1 to 5 action rows with a text input, or
// labels), the modal stays open for its user (OpenModal), and SubmitModal
// dispatches its MODAL_SUBMIT, whose callback takes 4 and 5, and 6 and 7
// for a modal opened from a component.
//
// Components V2 too: a message flagged IS_COMPONENTS_V2 (1<<15) has no
// content, embeds, stickers or poll, its components are checked as
// Discord checks them (known types where each may stand, at most 40 with
// the nested ones, 4,000 characters of text display content in all), and
// the flag is never removed by an edit. RefuseComponentsV2 makes it refuse
// new V2 messages, as a Discord that does not take them would.
//
// Permissions as Discord computes them per channel (SetPermissions,
// SetOverwrite), private threads and their members (AddThread): an
// interaction carries the member's and the bot's real permission bits,
// and the bot's own requests are refused without the permission they
// need (permissions.go).
//
// Forum and media channels (AddForum, AddMediaChannel) with their tags,
// posts a person creates (Post), re-tags (SetPostTags), closes and
// reopens, and the bot's PATCH of a forum's or a post's tags, checked
// as Discord checks them (forum.go).
//
// Gateway shards (shards.go): GET /gateway/bot says how many (Shards)
// and the session start limit (MaxConcurrency), IDENTIFY may name its
// shard, a guild's events go only to its shard ((guild_id >> 22) %
// shards, ShardOf), 4010 and 4011 refuse a bad shard or too many guilds
// for one, IdentifyWindow enforces the identify buckets, and DropShard
// cuts one shard. Without a shard in IDENTIFY a session gets every event,
// as before.
//
// Only tests import it.
package fakediscord

import (
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// BotID is the bot user's id.
const BotID = "900000000000000001"

// ManagedRoleID is the bot's managed role in every guild: the role Discord
// creates for a bot when it joins, mentioned as <@&ManagedRoleID> when a
// user picks the bot's role instead of the bot. The bot can learn it from
// its own member in GUILD_CREATE (members[].roles, the role marked managed
// with tags.bot_id in roles) or from GET /guilds/{id}/members/{BotID}.
const ManagedRoleID = "900000000000000002"

// OtherBotID is the author of BotMessage.
const OtherBotID = "777"

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
	// Components are the message's components as sent: action rows, or
	// with IS_COMPONENTS_V2 containers and the rest (IsComponentsV2,
	// TextDisplays, CustomIDs and ComponentCount read them).
	Components []map[string]any
	Flags      int // 64 on an ephemeral reply, 1<<15 IS_COMPONENTS_V2
	// Recipient is the only user who sees an ephemeral reply.
	Recipient string
	// Interaction is the id of the interaction this message answers.
	Interaction string

	at, edited  time.Time
	thread      string           // the thread started from it
	nonce       string           // as sent on create
	attachments []map[string]any // as a message carries them
}

type channel struct {
	id, guildID, parentID, name string
	typ                         int
	recipient                   string // a DM's other user
	archived, locked            bool
	archivedAt                  time.Time            // archive_timestamp: when archived changed last; zero: at creation
	lastMessage                 string               // last_message_id: its newest message (a forum's: its newest post)
	members                     map[string]time.Time // a thread's members, when each joined
	tags                        []Tag                // a forum's available tags (forum.go)
	owner                       string               // who started the thread
	post                        bool                 // a forum post: has applied_tags
	applied                     []string             // a post's applied tags
	tagHistory                  [][]string           // every set of tags the post has had
}

func (c *channel) json() map[string]any {
	out := map[string]any{"id": c.id, "type": c.typ}
	if c.recipient != "" {
		out["recipients"] = []any{userJSON(c.recipient)}
	}
	if c.guildID != "" {
		out["guild_id"] = c.guildID
	}
	if c.name != "" {
		out["name"] = c.name
	}
	if c.parentID != "" {
		out["parent_id"] = c.parentID
	}
	if c.typ != 4 { // every channel with messages or posts, null before the first
		out["last_message_id"] = nil
		if c.lastMessage != "" {
			out["last_message_id"] = c.lastMessage
		}
	}
	if isThread(c.typ) {
		at := c.archivedAt
		if at.IsZero() {
			at = createdAt(c.id)
		}
		out["thread_metadata"] = map[string]any{"archived": c.archived, "locked": c.locked,
			"auto_archive_duration": int(autoArchive / time.Minute), "archive_timestamp": timestamp(at)}
	}
	c.forumJSON(out)
	return out
}

func isThread(typ int) bool { return typ == 10 || typ == 11 || typ == 12 }

// autoArchive is every thread's auto_archive_duration: Discord's default,
// a day of inactivity.
const autoArchive = 24 * time.Hour

// discordEpoch is the first millisecond of 2015 (Unix ms), where
// snowflakes count from.
const discordEpoch = 1420070400000

// snowflakeTime is when the snowflake id was made; zero for an id that is
// none (a test's "T1").
func snowflakeTime(id string) time.Time {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil || n>>22 == 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(n>>22) + discordEpoch)
}

// createdAt is when channel id was made: its snowflake's time, or now
// for a test's own id.
func createdAt(id string) time.Time {
	if t := snowflakeTime(id); !t.IsZero() {
		return t
	}
	return time.Now()
}

// timestamp formats t as Discord's ISO8601 timestamps are:
// microseconds and an explicit offset.
func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000+00:00") }

type window struct {
	n     int
	per   time.Duration
	times map[string][]time.Time // by major parameter
}

type fault struct {
	status, code int           // Fail, FailHTTP
	delay        time.Duration // Delay
	n            int           // calls left
}

// Server is the fake. Set fields before serving.
type Server struct {
	// HeartbeatInterval in HELLO; default 45 s.
	HeartbeatInterval time.Duration
	// Token, when set, is the only bot token REST calls and IDENTIFY may
	// carry ("Bot " prefix optional); any non-empty token does otherwise.
	Token string
	// PinLimit is how many pins a channel holds before 30003; default 50.
	PinLimit int
	// InteractionWindow is how long after Click dispatched an interaction
	// its callback is accepted (later: 404 code 10062); default 3 s, as on
	// Discord.
	InteractionWindow time.Duration
	// DenyIntents are privileged intents the app has not enabled: an
	// IDENTIFY asking for any of them is closed with 4014 (Disallowed
	// intent(s)). IntentMessageContent is the one pinplan asks for.
	DenyIntents int64
	// BaseURL is the fake's own address (http://127.0.0.1:port), for
	// attachment URLs; by default the Host of the latest REST request.
	BaseURL string
	// Shards is what GET /gateway/bot recommends; default 1.
	Shards int
	// MaxConcurrency is session_start_limit.max_concurrency: how many
	// identify buckets there are (a shard's is shard_id %
	// MaxConcurrency); default 1.
	MaxConcurrency int
	// ShardGuildLimit is how many guilds one session may hold before
	// the gateway closes an IDENTIFY with 4011 (Sharding required);
	// default 2,500, as on Discord.
	ShardGuildLimit int
	// IdentifyWindow, when set, is how long a bucket waits between
	// IDENTIFYs (Discord's is 5 s, IdentifyWindowDiscord); one too soon
	// is answered op 9 d=false. Zero lets every IDENTIFY through, as
	// tests that reconnect at once need.
	IdentifyWindow time.Duration
	files          attachments // UserMessageWithFiles
	host           string      // guarded by mu

	handlers sync.WaitGroup // gateway connections being served

	mu             sync.Mutex // guards everything below
	closed         bool
	calls          []Call
	messages       map[string]*Message
	order          []string
	pins           map[string]bool
	channels       map[string]*channel
	typing         map[string]int
	failures       map[string][]*fault // "PATCH message" etc.
	httpFaults     map[string][]*fault
	delays         map[string][]*fault
	lateAnswers    map[string][]*fault // DelayAnswer
	heldAnswers    int                 // answers a DelayAnswer holds now
	limits         map[string]*window  // by route
	retryUntil     map[string]time.Time
	violations     []string
	nextID         int64
	sessions       []*session
	sessionByID    map[string]*session
	conns          map[*conn]bool
	records        []*record // dispatched events, for Missed
	identifies     int
	resumes        int
	peak           int // the most ready connections at once, for MaxConnected
	interactions   map[string]*interaction
	commands       map[string]commandSet           // application commands, by scope ("global" or a guild id)
	overwrites     map[string]int                  // bulk overwrites, by scope
	noDMs          map[string]bool                 // users who take no direct messages from the bot
	ephemerals     []*Message                      // ephemeral interaction replies, oldest first
	refuseV2       bool                            // RefuseComponentsV2
	guildPerms     map[string]int64                // SetPermissions, by "guild/user"
	permOverwrites map[string]map[string]overwrite // SetOverwrite, by channel and user or guild
	modals         map[string]*modal               // the modal open for each user
	lastIdentify   map[int]time.Time               // by identify bucket (shards.go)
}

func (s *Server) initLocked() {
	if s.messages == nil {
		s.messages = map[string]*Message{}
		s.pins = map[string]bool{}
		s.channels = map[string]*channel{}
		s.typing = map[string]int{}
		s.failures = map[string][]*fault{}
		s.httpFaults = map[string][]*fault{}
		s.delays = map[string][]*fault{}
		s.lateAnswers = map[string][]*fault{}
		s.limits = map[string]*window{}
		s.retryUntil = map[string]time.Time{}
		s.sessionByID = map[string]*session{}
		s.conns = map[*conn]bool{}
		s.interactions = map[string]*interaction{}
		s.modals = map[string]*modal{}
		s.nextID = 1000000000000000000
	}
}

// idLocked returns a new snowflake: its time in the top bits, as
// Discord's (the adapter reads a message's time from its id), and
// greater than every earlier one.
func (s *Server) idLocked() string {
	s.nextID = max(s.nextID+1, (time.Now().UnixMilli()-discordEpoch)<<22)
	return strconv.FormatInt(s.nextID, 10)
}

// AddChannel registers a channel (type 0 text, 1 DM, 11 public thread,
// 12 private thread, with the bot as its member); AddThread gives a
// thread its parent.
func (s *Server) AddChannel(id string, typ int, guildID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	ch := &channel{id: id, typ: typ, guildID: guildID}
	s.channels[id] = ch
	s.joinLocked(ch, BotID)
}

// ArchiveThread archives a thread, as Discord does after its inactivity
// period: edits, deletes and pins in it answer 400 code 50083, and a new
// message unarchives it (THREAD_UPDATE), as on Discord. The fake does
// not make the test wait a day: the archive_timestamp is the thread's
// last activity (its newest message, its creation or its last archive
// change) plus its auto_archive_duration, as Discord's would be.
func (s *Server) ArchiveThread(id string) {
	s.setArchived(id, false, true)
}

// LockThread archives and locks a thread, as a moderator does: posting in
// it answers 50083 too.
func (s *Server) LockThread(id string) {
	s.setArchived(id, true, false)
}

func (s *Server) setArchived(id string, locked, idle bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	ch, ok := s.channels[id]
	if !ok || !isThread(ch.typ) {
		return
	}
	at := time.Now()
	if idle {
		active := createdAt(ch.id)
		for _, t := range []time.Time{snowflakeTime(ch.lastMessage), ch.archivedAt} {
			if t.After(active) {
				active = t
			}
		}
		if due := active.Add(autoArchive); due.After(at) {
			at = due
		}
	}
	ch.archived, ch.locked, ch.archivedAt = true, locked, at
	s.dispatchLocked("THREAD_UPDATE", ch.json())
}

// LimitEdits makes message edits answer 429 past n per channel in per; it
// is Limit("PATCH message", n, per).
func (s *Server) LimitEdits(n int, per time.Duration) {
	s.Limit("PATCH message", n, per)
}

// Limit sets the rate limit of route ("METHOD kind", as for Fail): n
// requests per major parameter (channel or guild) in any window of length
// per, reported in the X-RateLimit headers and enforced with 429. Routes
// without a limit allow 50 per second, Discord's global limit.
func (s *Server) Limit(route string, n int, per time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.limits[route] = &window{n: n, per: per, times: map[string][]time.Time{}}
}

// Fail queues an error for the next request matching route, "METHOD
// kind", where kind is one of messages (the list and posting), message
// (one message), pins, typing, threads, threadmember, channel, member,
// roles, user, gateway or callback (an interaction callback): "PATCH message",
// "GET messages", "POST callback". A code of 0 answers a plain
// HTTP error.
func (s *Server) Fail(route string, status, code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.failures[route] = append(s.failures[route], &fault{status: status, code: code, n: 1})
}

// FailHTTP makes the next n requests matching route ("" for any) answer
// the HTTP status with no Discord error code, as a failing edge does. A
// 429 (from Fail too) is a full rate-limit answer with retry_after 1 s,
// as a shared or global limit the headers did not announce would be.
func (s *Server) FailHTTP(route string, status, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.httpFaults[route] = append(s.httpFaults[route], &fault{status: status, n: n})
}

// DelayAnswer carries out the next n requests matching route ("" for any)
// at once and holds their answers for d: a client that gives up or dies
// meanwhile never learns that its message was created, as when
// Discord's answer is lost on the way.
func (s *Server) DelayAnswer(route string, d time.Duration, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.lateAnswers[route] = append(s.lateAnswers[route], &fault{delay: d, n: n})
}

// HeldAnswers reports how many answers DelayAnswer holds now.
func (s *Server) HeldAnswers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldAnswers
}

// Delay holds the next n requests matching route ("" for any) for d
// before answering. A request whose client gives up first still takes
// effect, as on a slow server.
func (s *Server) Delay(route string, d time.Duration, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.delays[route] = append(s.delays[route], &fault{delay: d, n: n})
}

// takeLocked uses one request of the first fault queued for route or for
// any route.
func takeLocked(q map[string][]*fault, route string) *fault {
	for _, k := range []string{route, ""} {
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

// RefuseDMs makes the user take no direct messages from the bot, as a
// member who turned them off for the server: opening the DM channel
// works, a message in it answers 403 code 50007 ("Cannot send messages to
// this user"), as Discord does.
func (s *Server) RefuseDMs(user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.noDMs == nil {
		s.noDMs = map[string]bool{}
	}
	s.noDMs[user] = true
}

// DMs returns the messages the bot sent to user in their DM channel.
func (s *Server) DMs(user string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, id := range s.order {
		if m, ok := s.messages[id]; ok {
			if c := s.channels[m.ChannelID]; c != nil && c.typ == 1 && c.recipient == user {
				out = append(out, *m)
			}
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

// Violations lists what Discord would hold against the client: requests
// made before a 429's retry_after had passed, messages refused as
// invalid (too long, too many embeds, bad components, empty) with the
// reason, and interaction callbacks refused (late, twice, wrong token,
// invalid).
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}

// Sessions reports how many IDENTIFYs and RESUMEs the gateway saw; a
// RESUME answered with op 9 counts too.
func (s *Server) Sessions() (identifies, resumes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.identifies, s.resumes
}

// Missed counts events dispatched that no gateway connection has
// received: created while the bot had no ready connection and not
// replayed by a RESUME, because the session ended (op 9 d=false, a
// non-resumable close, the client closing with 1000) or none existed yet.
// An event kept for a session that can still resume counts until the
// RESUME replays it; events every live session's intents exclude do not
// count.
func (s *Server) Missed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.records {
		if r.wanted && !r.delivered {
			n++
		}
	}
	return n
}

// Connected reports how many gateway clients have identified or resumed
// and receive dispatches.
func (s *Server) Connected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		if c.ready {
			n++
		}
	}
	return n
}

// MaxConnected reports the most gateway clients that were identified or
// resumed, and received dispatches, at the same time since the server
// started: 1 for a bot that only ever held one session at a time.
func (s *Server) MaxConnected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// readyLocked marks c as receiving dispatches and keeps the peak.
func (s *Server) readyLocked(c *conn) {
	c.ready = true
	n := 0
	for c := range s.conns {
		if c.ready {
			n++
		}
	}
	s.peak = max(s.peak, n)
}

// guildsLocked lists the guilds of the registered channels.
func (s *Server) guildsLocked() []string {
	seen := map[string]bool{}
	var out []string
	for _, ch := range s.channels {
		if ch.guildID != "" && !seen[ch.guildID] {
			seen[ch.guildID] = true
			out = append(out, ch.guildID)
		}
	}
	sort.Strings(out)
	return out
}

func (s *Server) guildExistsLocked(id string) bool {
	for _, ch := range s.channels {
		if ch.guildID == id {
			return true
		}
	}
	return false
}

func rolesJSON(guildID string) []any {
	return []any{
		map[string]any{"id": guildID, "name": "@everyone", "position": 0, "permissions": "0", "managed": false, "mentionable": false, "hoist": false, "color": 0, "flags": 0},
		map[string]any{"id": ManagedRoleID, "name": "pinplan", "position": 1, "permissions": "0", "managed": true, "mentionable": true, "hoist": false, "color": 0, "flags": 0,
			"tags": map[string]any{"bot_id": BotID}},
	}
}

func botMemberJSON() map[string]any {
	return map[string]any{"user": userJSON(BotID), "roles": []any{ManagedRoleID}, "joined_at": "2026-01-01T00:00:00Z", "deaf": false, "mute": false, "flags": 0}
}

// Application flags of GET /applications/@me (Application resource,
// application flags): the Message Content intent is enabled when either
// is set, GATEWAY_MESSAGE_CONTENT for an app in 100 or more servers (it
// needs Discord's approval), _LIMITED for one in fewer, toggled on the
// Bot page of the Developer Portal.
const (
	AppFlagGatewayMessageContent        = 1 << 18
	AppFlagGatewayMessageContentLimited = 1 << 19
)

// applicationLocked is the bot's application as GET /applications/@me
// answers: its id is the bot user's, and its flags say whether the
// Message Content intent is enabled, as DenyIntents has it.
func (s *Server) applicationLocked() map[string]any {
	flags := 0
	if s.DenyIntents&IntentMessageContent == 0 {
		flags |= AppFlagGatewayMessageContentLimited
	}
	return map[string]any{"id": BotID, "name": "pinplan", "description": "", "bot_public": true, "bot_require_code_grant": false,
		"verify_key": "0000000000000000000000000000000000000000000000000000000000000000", "flags": flags,
		"approximate_guild_count": len(s.guildsLocked()), "bot": userJSON(BotID)}
}

func userJSON(id string) map[string]any {
	switch id {
	case BotID:
		return map[string]any{"id": BotID, "username": "pinplan", "discriminator": "0", "bot": true}
	case OtherBotID:
		return map[string]any{"id": OtherBotID, "username": "otherbot", "discriminator": "0", "bot": true}
	}
	return map[string]any{"id": id, "username": "user" + id, "discriminator": "0", "bot": false}
}

// guildCreateLocked is the GUILD_CREATE payload of a guild: its channels,
// active threads, roles and the bot's own member.
func (s *Server) guildCreateLocked(id string) map[string]any {
	var chans, threads []any
	ids := make([]string, 0, len(s.channels))
	for cid := range s.channels {
		ids = append(ids, cid)
	}
	sort.Strings(ids)
	for _, cid := range ids {
		ch := s.channels[cid]
		switch {
		case ch.guildID != id:
		case isThread(ch.typ):
			if !ch.archived {
				threads = append(threads, ch.json())
			}
		default:
			chans = append(chans, ch.json())
		}
	}
	return map[string]any{"id": id, "name": "guild " + id, "unavailable": false, "owner_id": "1", "member_count": 2, "large": false,
		"joined_at": "2026-01-01T00:00:00Z", "roles": rolesJSON(id), "members": []any{botMemberJSON()},
		"channels": nonNil(chans), "threads": nonNil(threads), "emojis": []any{}, "stickers": []any{}, "features": []any{}, "voice_states": []any{}}
}

func nonNil(v []any) []any {
	if v == nil {
		return []any{}
	}
	return v
}
