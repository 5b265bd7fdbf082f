// Package discord connects pinplan to Discord with
// github.com/bwmarrin/discordgo: the gateway (Guilds, GuildMessages,
// DirectMessages and MessageContent intents), the plan message as a
// Components V2 container (or an embed where Discord refuses that) pinned
// through the current pins route, and the chat.Platform the plan board
// drives. Start opens everything; with replicas, StartREST serves the
// REST side alone and OpenShard and CloseShard move each gateway shard
// (shards.go) to the one replica that holds it.
//
// It imports chat, agent (types) and todo; never store or another adapter.
package discord

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/gorilla/websocket"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/serial"
)

// Options configures the adapter.
type Options struct {
	Token string
	// APIURL replaces https://discord.com for REST calls and gateway
	// discovery (DISCORD_API_URL).
	APIURL        string
	ThreadPerTask bool
	// Marks keeps the read marks (marks.go) across restarts and gateway
	// hand-overs; without it they live only as long as the process.
	Marks  chat.MarkStore
	Logger *slog.Logger
	// EditEvery paces plan posts and edits per channel; Discord allows 5
	// edits per 5 s per channel, the default is one per 1.25 s, burst 3.
	EditEvery time.Duration
	// ComponentsV2 posts plans as a Components V2 container
	// (PINPLAN_DISCORD_COMPONENTS_V2); a plan Discord refuses that way is
	// posted as an embed.
	ComponentsV2 bool
	// Stream shows answers as the model writes them (PINPLAN_STREAM):
	// posted at the first words and edited as they grow (live.go).
	Stream bool
	// Commands registers the /pinplan application command at start
	// (commands.go), for Guild's set when Guild is set (PINPLAN_DISCORD_GUILD),
	// else the global set, as ApplicationID (DISCORD_APPLICATION_ID; by
	// default the bot's own id, which is its application's).
	Commands      bool
	Guild         string
	ApplicationID string
	// Sessions lists the sessions, for /pinplan status; nil: the command
	// says it is not available.
	Sessions func(ctx context.Context) ([]chat.Listed, error)
	// Shards is the gateway's shard count (PINPLAN_DISCORD_SHARDS); 0:
	// the count GET /gateway/bot recommends (shards.go).
	Shards int
	// Identify, when set, shares the shards' identify buckets with other
	// processes of the bot (replicas); this process paces its own either
	// way.
	Identify IdentifyLimiter
	// Forums are forum (or media) channel ids whose every new post is a
	// session, without a mention (PINPLAN_DISCORD_FORUMS; forum.go).
	Forums []string
}

// Adapter is the Discord platform.
type Adapter struct {
	opts Options
	s    *discordgo.Session
	log  *slog.Logger
	ctx  context.Context
	in   chat.Inbox // where the gateway's events go; ctx and in are given to StartREST, before the gateway opens
	wg   sync.WaitGroup

	queue serial.Queue // messages handled in order per channel

	mu        sync.Mutex // guards the fields below
	botID     string
	limiters  map[string]*chat.Budget // each channel's posts and edits of plans
	lives     map[string]*liveReply   // live replies' progress, by the router's reply id
	share     int                     // replicas sharing the per-channel pace (Share)
	typing    map[string]context.CancelFunc
	chanTypes map[string]discordgo.ChannelType
	// chanParents are threads' parent channels as looked up for
	// /pinplan status ("" for a channel that is no thread).
	chanParents map[string]string
	noManage    bool // deleting the pin notice was refused
	noContent   bool // the MessageContent intent is not enabled: messages without a mention come blank
	v2Refused   bool // a Components V2 plan was refused and logged
	// shown is, by channel, what its plan message shows of its items as
	// this process last rendered it: the Add form's numbers (steer.go).
	shown map[string]shownPlan
	// botRoles are the bot's managed roles by guild: a mention of one is a
	// mention of the bot.
	botRoles map[string][]string
	// seen is, per channel the bot listens in, the newest message it
	// handled: the read marks (marks.go).
	seen     map[string]seenChannel
	dirty    bool       // seen changed since it was saved
	flushing bool       // a save of seen is scheduled
	catching int        // catch-ups queued or running
	saveMu   sync.Mutex // one save of the marks at a time (not under mu)
	forums   forums     // forums and their posts (forum.go); its own lock

	// shards are the gateway's connections (shards.go), made by
	// StartREST and not changed after; their fields are guarded by mu.
	shards   []*shard
	buckets  *identifyBuckets // paces the shards' IDENTIFYs
	idWindow time.Duration    // tests: the identify window instead of Discord's 5 s
}

var (
	_ chat.Platform       = (*Adapter)(nil)
	_ chat.Paced          = (*Adapter)(nil)
	_ chat.PrivateReplier = (*Adapter)(nil)
	_ chat.LiveReplier    = (*Adapter)(nil)
	_ chat.Splitter       = (*Adapter)(nil)
	_ chat.Interactive    = (*Adapter)(nil)
	_ chat.History        = (*Adapter)(nil)
	_ chat.Forgetter      = (*Adapter)(nil)
)

// Caps implements chat.Platform: Discord paces a plan's posts and edits
// per channel, streams answers (when Options.Stream), answers privately
// where it can, cuts long replies, shows approval cards, reads a
// channel's earlier messages, keeps per-thread state in memory and
// serves attachments. It
// shows no sessions: the working indicator stands for them.
func (a *Adapter) Caps() chat.Caps {
	return chat.Caps{Paced: a, Live: a, Private: a, Split: a, Cards: a, History: a, Forget: a, Files: a}
}

// rewrite sends requests for discord.com to the configured API URL.
type rewrite struct {
	base   http.RoundTripper
	target *url.URL
}

func (t rewrite) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host == "discord.com" && t.target != nil {
		r := req.Clone(req.Context())
		r.URL.Scheme, r.URL.Host = t.target.Scheme, t.target.Host
		r.URL.Path = strings.TrimRight(t.target.Path, "/") + req.URL.Path
		r.Host = t.target.Host
		return t.base.RoundTrip(r)
	}
	return t.base.RoundTrip(req)
}

// dialled makes a request error name the URL that was dialled: the http
// client reports the URL discordgo built (https://discord.com/...), not
// the DISCORD_API_URL the transport sent it to.
func (a *Adapter) dialled(err error) error {
	t, ok := a.s.Client.Transport.(rewrite)
	var ue *url.Error
	if !ok || t.target == nil || !errors.As(err, &ue) {
		return err
	}
	if u, perr := url.Parse(ue.URL); perr == nil && u.Host == "discord.com" {
		u.Scheme, u.Host = t.target.Scheme, t.target.Host
		u.Path = strings.TrimRight(t.target.Path, "/") + u.Path
		ue.URL = u.String()
	}
	return err
}

// New returns an adapter; Start connects it and gives it its inbox.
func New(opts Options) (*Adapter, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.EditEvery <= 0 {
		opts.EditEvery = 1250 * time.Millisecond
	}
	s, err := discordgo.New("Bot " + opts.Token)
	if err != nil {
		return nil, fmt.Errorf("discord: %w", err)
	}
	var target *url.URL
	if opts.APIURL != "" && opts.APIURL != "https://discord.com" {
		if target, err = url.Parse(opts.APIURL); err != nil {
			return nil, fmt.Errorf("discord: DISCORD_API_URL: %w", err)
		}
	}
	// discordgo computes its endpoints from https://discord.com at init, so
	// the base URL is replaced in the transport.
	s.Client = &http.Client{Timeout: 30 * time.Second, Transport: rewrite{base: http.DefaultTransport, target: target}}
	s.ShouldRetryOnRateLimit = false // the plan board honours retry_after itself
	s.MaxRestRetries = 1
	s.StateEnabled = false
	// This session is REST's: each shard has a gateway session of its
	// own (shards.go), with these intents; this one never dials.
	s.ShouldReconnectOnError = false
	s.Dialer = &websocket.Dialer{NetDialContext: func(context.Context, string, string) (net.Conn, error) { return nil, errGatewayClosed }}
	s.Identify.Intents = discordgo.IntentsGuilds | discordgo.IntentsGuildMessages | discordgo.IntentsDirectMessages | discordgo.IntentsMessageContent
	a := &Adapter{opts: opts, s: s, log: opts.Logger, limiters: map[string]*chat.Budget{}, lives: map[string]*liveReply{}, typing: map[string]context.CancelFunc{},
		chanTypes: map[string]discordgo.ChannelType{}, chanParents: map[string]string{}, botRoles: map[string][]string{}, seen: map[string]seenChannel{},
		shown: map[string]shownPlan{}}
	return a, nil
}

// addHandlers adds the handlers of the gateway's events to s, a shard's
// session (newShard): every shard's events go to the same handlers and
// inbox. A handler of a new gateway event is added here, not in New.
// Handlers run in the shard's reading goroutine (SyncEvents), in the
// order Discord sent the events; onMessage only filters and queues per
// channel, and a channel's events all come on its guild's shard.
func (a *Adapter) addHandlers(s *discordgo.Session) {
	s.AddHandler(a.onMessage)
	s.AddHandler(a.onGuild)
	s.AddHandler(a.onInteraction)
	a.addForumHandlers(s) // forum.go
}

// ApplicationID reads a bot token's application id (its first segment is
// the bot user's id in base64, which is the application id).
func ApplicationID(token string) (string, error) {
	first, _, _ := strings.Cut(strings.TrimPrefix(token, "Bot "), ".")
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.StdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(first); err == nil && Snowflake(string(b)) {
			return string(b), nil
		}
	}
	return "", errors.New("discord: DISCORD_BOT_TOKEN is malformed: its first part is not a base64 application id")
}

// Snowflake reports whether s is a Discord id: 1 to 20 decimal digits.
func Snowflake(s string) bool {
	if len(s) == 0 || len(s) > 20 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// Start identifies the bot and opens the gateway. Events go to in until
// Close. It is StartREST and OpenGateway.
func (a *Adapter) Start(ctx context.Context, in chat.Inbox) error {
	if err := a.StartREST(ctx, in); err != nil {
		return err
	}
	if err := a.OpenGateway(ctx); err != nil {
		return err
	}
	a.log.Info("discord connected", "bot_user", a.bot())
	return nil
}

// StartREST checks the token, learns the bot's user and the gateway's
// shard count, without the gateway: plans, replies, cards and typing
// work, and no event arrives until OpenGateway or OpenShard; from then
// on they go to in. A replica that holds no shard runs so (DESIGN §14).
func (a *Adapter) StartREST(ctx context.Context, in chat.Inbox) error {
	a.ctx, a.in = ctx, in
	u, err := a.s.User("@me", discordgo.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("discord: check DISCORD_BOT_TOKEN and DISCORD_API_URL: %w", a.dialled(err))
	}
	a.mu.Lock()
	a.botID = u.ID
	a.mu.Unlock()
	if err := a.makeShards(ctx); err != nil {
		return err
	}
	if a.opts.Commands {
		a.registerCommands(ctx)
	}
	return nil
}

// errGatewayClosed refuses a gateway dial of a shard between CloseShard
// and OpenShard, and any dial of the REST session.
var errGatewayClosed = errors.New("discord: the gateway is closed on this process")

// closeDisallowedIntents is the gateway's close code for a privileged
// intent the application has not enabled.
const closeDisallowedIntents = 4014

// open opens a shard's gateway. When Discord refuses the privileged
// MessageContent intent (4014: not enabled for this application), it
// identifies again without it, and says what that means: pinplan works
// through mentions, DMs and /pinplan, and in a thread a follow-up without
// a mention is not heard (Discord sends no content without the intent).
// A shard opened after another learnt that asks without it at once.
func (a *Adapter) open(sh *shard) error {
	a.mu.Lock()
	blank := a.noContent
	a.mu.Unlock()
	if blank {
		a.dropContentIntent(sh)
	}
	err := sh.s.Open()
	a.releaseIdentify(sh) // READY or RESUMED read, or the opening failed
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != closeDisallowedIntents {
		return err
	}
	if a.dropContentIntent(sh) {
		a.mu.Lock()
		said := a.noContent
		a.noContent = true
		a.mu.Unlock()
		if !said {
			a.log.Warn("discord: the Message Content intent is not enabled for this application: pinplan answers mentions, DMs and /pinplan; " +
				"follow-ups in a thread without a mention need the intent (Developer Portal -> Bot -> Privileged Gateway Intents -> Message Content Intent)")
		}
	}
	err = sh.s.Open()
	a.releaseIdentify(sh)
	return err
}

// dropContentIntent takes MessageContent out of the shard's IDENTIFY and
// reports whether it was in. Open reads Identify under the session's
// lock; OpenShard and a reconnect can both be here.
func (a *Adapter) dropContentIntent(sh *shard) bool {
	sh.s.Lock()
	defer sh.s.Unlock()
	asked := sh.s.Identify.Intents&discordgo.IntentsMessageContent != 0
	sh.s.Identify.Intents &^= discordgo.IntentsMessageContent
	return asked
}

// onDisconnect runs when a shard's connection ends (discordgo emits
// Disconnect from Close, after a read error, a missed heartbeat ack or
// op 7). While the shard is wanted it is reopened, resuming its session,
// with discordgo's own backoff (1 s, doubling to 10 min); the other
// shards are not touched.
func (a *Adapter) onDisconnect(sh *shard) {
	a.mu.Lock()
	defer a.mu.Unlock()
	sh.connected = false
	if sh.downSince.IsZero() {
		sh.downSince = time.Now()
	}
	if !sh.on || sh.reconnecting {
		return
	}
	sh.reconnecting = true
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.reconnect(sh)
	}()
}

// reconnect opens a shard until it is connected or no longer wanted
// (closed, or the adapter's context done). A connection that ends while
// it runs finds it running and leaves the reconnect to it, so it is done
// only when connected.
func (a *Adapter) reconnect(sh *shard) {
	wait := time.Second
	for {
		a.mu.Lock()
		if !sh.on || sh.ctx.Err() != nil {
			sh.reconnecting = false
			a.mu.Unlock()
			return
		}
		gate := sh.ctx
		a.mu.Unlock()
		err := a.open(sh)
		opened := err == nil || errors.Is(err, discordgo.ErrWSAlreadyOpen)
		a.mu.Lock()
		if !sh.on || (opened && sh.connected) {
			sh.reconnecting = false
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		if !opened {
			a.log.Warn("discord: reconnect the gateway", "shard", sh.id, "err", shardRefusal(err), "retry_in", wait)
		}
		select {
		case <-gate.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Minute)
	}
}

// Close closes the gateway and waits for handlers the adapter started.
func (a *Adapter) Close() {
	a.CloseGateway()
	a.queue.Wait(context.Background())
	a.mu.Lock()
	for ch, stop := range a.typing {
		stop()
		delete(a.typing, ch)
	}
	a.mu.Unlock()
	a.wg.Wait()
}

// Ready reports whether the shards this process holds (opened and not
// closed since) are all connected; holding none, it is not ready. With
// replicas the election asks only while it holds a shard.
func (a *Adapter) Ready() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	held := false
	for _, sh := range a.shards {
		if !sh.on {
			continue
		}
		held = true
		if !sh.connected {
			return fmt.Errorf("discord: gateway shard %d of %d not connected", sh.id, len(a.shards))
		}
	}
	if !held {
		return errors.New("discord: gateway not connected")
	}
	return nil
}

func (a *Adapter) setConnected(sh *shard, v bool) {
	a.mu.Lock()
	sh.connected = v
	a.mu.Unlock()
}

// Budget implements chat.Paced: a plan's posts and edits are paced per
// channel, as Discord buckets them, the board's priorities deciding who
// goes next; pins and replies keep to discordgo's buckets.
func (a *Adapter) Budget(req chat.Request) *chat.Budget {
	if req.Method != chat.MethodEdit && req.Method != chat.MethodAppend && (req.Method != chat.MethodPost || req.Priority == nil || req.Priority() != chat.PriorityFirstPost) {
		return nil
	}
	return a.budget(req.Thread.Channel)
}

// budget is the channel's budget for plan posts and edits.
func (a *Adapter) budget(channel string) *chat.Budget {
	a.mu.Lock()
	defer a.mu.Unlock()
	l, ok := a.limiters[channel]
	if !ok {
		every, burst := a.editEvery()
		l = chat.NewBudget(float64(time.Minute)/float64(every), burst)
		a.limiters[channel] = l
	}
	return l
}

// Forget implements chat.Forgetter: the channel of a session that went
// idle drops its cached type and, once it has its whole burst back (so a
// new one paces the same), its edit limiter. The session is the
// channel's only one, and its board, which held the limiter, is gone.
func (a *Adapter) Forget(th chat.Thread) {
	if th.Platform != "discord" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.chanTypes, th.Channel)
	delete(a.shown, th.Channel)
	if l, ok := a.limiters[th.Channel]; ok && l.Idle() {
		delete(a.limiters, th.Channel)
	}
}

// Key is the session key of a Discord channel (a thread is a channel).
func Key(channelID string) string { return "discord/" + channelID }

// Error codes the adapter branches on.
const (
	codeUnknownMessage = 10008
	codeMaxPins        = 30003
	codeEditLimit      = 30046
	codeMissingAccess  = 50001
	codeMissingPerms   = 50013
	codeInvalidForm    = 50035
	codeThreadExists   = 160004 // a thread was started from this message already
)

func restCode(err error) int {
	var re *discordgo.RESTError
	if errors.As(err, &re) && re.Message != nil {
		return re.Message.Code
	}
	return 0
}

func classify(op string, err error, pin bool) error {
	if err == nil {
		return nil
	}
	var rl *discordgo.RateLimitError
	if errors.As(err, &rl) && rl.RateLimit != nil && rl.TooManyRequests != nil {
		return &chat.RateLimitError{RetryAfter: rl.RetryAfter, Err: fmt.Errorf("discord: %s: %w", op, err)}
	}
	switch code := restCode(err); {
	case code == codeUnknownMessage:
		return fmt.Errorf("discord: %s: %w (%w)", op, chat.ErrMessageGone, err)
	case code == codeEditLimit:
		return fmt.Errorf("discord: %s: %w (%w)", op, chat.ErrEditLater, err)
	case pin && (code == codeMaxPins || code == codeMissingPerms || code == codeMissingAccess):
		return fmt.Errorf("discord: %s: %w (%w)", op, chat.ErrPinUnavailable, err)
	}
	var re *discordgo.RESTError
	if errors.As(err, &re) && re.Response != nil && re.Response.StatusCode >= 400 && re.Response.StatusCode < 500 {
		// Unknown channel, missing access, archived thread (50083), an
		// invalid body: the same request would be refused again.
		return fmt.Errorf("discord: %s: %w (%w)", op, chat.ErrUndeliverable, err)
	}
	return fmt.Errorf("discord: %s: %w", op, err)
}

// PostPlan implements chat.Platform. With ComponentsV2 the plan is a
// Components V2 container, its ref of that Kind; if Discord refuses the
// container (400, 50035), this plan is posted as an embed and stays one.
//
// A post with a key (chat.SendKey: the board's name for this plan
// message) carries its nonce with enforce_nonce, as replies do: within
// the few minutes Discord holds a nonce, it returns the message an
// earlier attempt created (showing what that attempt sent; the board
// edits it when chat.SentMaybe said an attempt may have landed). The
// ref's Kind is read from the message Discord returns, not from the
// request: an earlier attempt may have been the other kind.
func (a *Adapter) PostPlan(ctx context.Context, th chat.Thread, p chat.Plan) (chat.MessageRef, error) {
	var n string
	if key := chat.SendKey(ctx); key != "" {
		n = nonce(key)
	}
	ref, err := a.postPlan(ctx, th, p, n)
	if err == nil {
		a.remember(th.Channel, ref.ID, p, true)
		a.forumPlan(th.Channel, p)
	}
	return ref, err
}

// postPlan creates the plan message, with nonce (and enforce_nonce) if
// it is not "".
func (a *Adapter) postPlan(ctx context.Context, th chat.Thread, p chat.Plan, nonce string) (chat.MessageRef, error) {
	if a.opts.ComponentsV2 {
		ref, err := a.postV2(ctx, th, p, nonce)
		if err == nil || !refusedV2(err) {
			return ref, classify("post plan", err, false)
		}
		a.mu.Lock()
		said := a.v2Refused
		a.v2Refused = true
		a.mu.Unlock()
		if !said {
			a.log.Warn("discord refused a Components V2 plan; posting it as an embed", "channel", th.Channel, "err", err)
		}
	}
	endpoint := discordgo.EndpointChannelMessages(th.Channel)
	body, err := a.s.RequestWithBucketID(http.MethodPost, endpoint, nonceSend{MessageSend: PlanMessage(p), Nonce: nonce, EnforceNonce: nonce != ""}, endpoint, discordgo.WithContext(ctx))
	if err != nil {
		return chat.MessageRef{}, classify("post plan", err, false)
	}
	ref, err := created(th, body)
	return ref, classify("post plan", err, false)
}

// postV2 posts the plan with IS_COMPONENTS_V2. discordgo's MessageSend
// always carries "embeds", so the body is PlanMessageV2's own.
func (a *Adapter) postV2(ctx context.Context, th chat.Thread, p chat.Plan, nonce string) (chat.MessageRef, error) {
	endpoint := discordgo.EndpointChannelMessages(th.Channel)
	msg := struct {
		*V2Message
		Nonce        string `json:"nonce,omitempty"`
		EnforceNonce bool   `json:"enforce_nonce,omitempty"`
	}{PlanMessageV2(p), nonce, nonce != ""}
	body, err := a.s.RequestWithBucketID(http.MethodPost, endpoint, msg, endpoint, discordgo.WithContext(ctx))
	if err != nil {
		return chat.MessageRef{}, err
	}
	return created(th, body)
}

// created reads the ref of the message a create answered with: its id,
// and its kind from its flags.
func created(th chat.Thread, body []byte) (chat.MessageRef, error) {
	var m struct {
		ID    string                 `json:"id"`
		Flags discordgo.MessageFlags `json:"flags"`
	}
	if err := json.Unmarshal(body, &m); err != nil || m.ID == "" {
		return chat.MessageRef{}, fmt.Errorf("an answer without the message id: %.200q", body)
	}
	ref := chat.MessageRef{Channel: th.Channel, ID: m.ID}
	if m.Flags&discordgo.MessageFlagsIsComponentsV2 != 0 {
		ref.Kind = refComponentsV2
	}
	return ref, nil
}

// refusedV2 reports whether Discord refused a Components V2 post as an
// invalid body: a 400 with code 50035 or with no code at all. Any other
// refusal (an archived thread, missing access, a rate limit) would meet
// the embed too.
func refusedV2(err error) bool {
	var re *discordgo.RESTError
	if !errors.As(err, &re) || re.Response == nil || re.Response.StatusCode != http.StatusBadRequest {
		return false
	}
	code := restCode(err)
	return code == codeInvalidForm || code == 0
}

// EditPlan implements chat.Platform: a Components V2 message is edited as
// one, with the flag and no content or embeds; any other as an embed.
func (a *Adapter) EditPlan(ctx context.Context, th chat.Thread, ref chat.MessageRef, p chat.Plan) error {
	edit := func() (err error) {
		if ref.Kind == refComponentsV2 {
			endpoint := discordgo.EndpointChannelMessage(ref.Channel, ref.ID)
			_, err = a.s.RequestWithBucketID(http.MethodPatch, endpoint, PlanMessageV2(p), discordgo.EndpointChannelMessage(ref.Channel, ""), discordgo.WithContext(ctx))
			return err
		}
		embeds := []*discordgo.MessageEmbed{PlanEmbed(p)}
		components := PlanComponents(p)
		_, err = a.s.ChannelMessageEditComplex(&discordgo.MessageEdit{ID: ref.ID, Channel: ref.Channel, Embeds: &embeds, Components: &components, AllowedMentions: noMentions()}, discordgo.WithContext(ctx))
		return err
	}
	err := edit()
	if err != nil && a.reopenForPlan(ctx, ref.Channel, err) {
		err = edit() // a forum post a person closed (forum.go)
	}
	if err == nil {
		a.remember(ref.Channel, ref.ID, p, false)
		a.forumPlan(ref.Channel, p)
	}
	return classify("edit plan "+ref.ID, err, false)
}

// Pin implements chat.Platform with the current route,
// /channels/{id}/messages/pins/{message_id}.
func (a *Adapter) Pin(ctx context.Context, th chat.Thread, ref chat.MessageRef, pin bool) error {
	method := http.MethodPut
	if !pin {
		method = http.MethodDelete
	}
	endpoint := discordgo.EndpointChannels + ref.Channel + "/messages/pins/" + ref.ID
	_, err := a.s.RequestWithBucketID(method, endpoint, nil, discordgo.EndpointChannels+ref.Channel+"/messages/pins/", discordgo.WithContext(ctx))
	if !pin && restCode(err) == codeUnknownMessage {
		return nil
	}
	return classify(strings.ToLower(method)+" pin "+ref.ID, err, true)
}

// SplitReply implements chat.Splitter: parts of at most 2,000 characters,
// cut on line boundaries.
func (a *Adapter) SplitReply(text string) []string { return Split(text, maxContent) }

// Reply implements chat.Platform: split at 2,000 characters on line
// boundaries, the first part answering the message that started the turn,
// nobody pinged.
//
// A send with a key (chat.SendKey: a reply from the outbox) carries a
// nonce per part with enforce_nonce, so that Discord returns the message
// it created for an earlier attempt in the last few minutes (Discord
// holds a nonce that long), a restart's included, instead of posting it
// again.
func (a *Adapter) Reply(ctx context.Context, th chat.Thread, replyTo, text string) error {
	key := chat.SendKey(ctx)
	endpoint := discordgo.EndpointChannelMessages(th.Channel)
	for i, part := range Split(text, maxContent) {
		msg := nonceSend{MessageSend: &discordgo.MessageSend{Content: part, AllowedMentions: noMentions()}}
		if i == 0 && replyTo != "" {
			msg.Reference = &discordgo.MessageReference{MessageID: replyTo, ChannelID: th.Channel, FailIfNotExists: new(bool)}
		}
		if key != "" {
			msg.Nonce, msg.EnforceNonce = nonce(fmt.Sprintf("%s/%d", key, i)), true
		}
		if _, err := a.s.RequestWithBucketID(http.MethodPost, endpoint, msg, endpoint, discordgo.WithContext(ctx)); err != nil {
			return classify("reply", err, false)
		}
	}
	return nil
}

// codeCannotDM is Discord's "Cannot send messages to this user": the
// person takes no direct messages from the bot.
const codeCannotDM = 50007

// ReplyPrivately implements chat.PrivateReplier. Discord has no
// ephemeral message outside an interaction, so the refusal of someone
// else's text stop or reset goes to that person as a direct message
// naming the thread; the thread hears nothing of it (DESIGN §16). A
// person who takes no direct messages from the bot is not told, rather
// than told in public: the refusal is logged and dropped.
func (a *Adapter) ReplyPrivately(ctx context.Context, th chat.Thread, user, text string) error {
	dm, err := a.s.UserChannelCreate(user, discordgo.WithContext(ctx))
	if err != nil {
		return classify("dm", err, false)
	}
	msg := nonceSend{MessageSend: &discordgo.MessageSend{Content: "In <#" + th.Channel + ">: " + text, AllowedMentions: noMentions()}}
	if key := chat.SendKey(ctx); key != "" {
		msg.Nonce, msg.EnforceNonce = nonce(key), true
	}
	endpoint := discordgo.EndpointChannelMessages(dm.ID)
	if _, err := a.s.RequestWithBucketID(http.MethodPost, endpoint, msg, endpoint, discordgo.WithContext(ctx)); err != nil {
		var rerr *discordgo.RESTError
		if errors.As(err, &rerr) && rerr.Message != nil && rerr.Message.Code == codeCannotDM {
			a.log.Info("refusal not delivered: the person takes no direct messages from the bot", "user", user, "session", th.Key)
			return nil
		}
		return classify("dm", err, false)
	}
	return nil
}

// nonceSend is a message create with Discord's nonce fields, which
// discordgo's MessageSend lacks.
type nonceSend struct {
	*discordgo.MessageSend
	Nonce        string `json:"nonce,omitempty"`
	EnforceNonce bool   `json:"enforce_nonce,omitempty"`
}

// nonce turns a send key into a nonce: 24 hex digits of its SHA-256
// (Discord takes at most 25 characters).
func nonce(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:12])
}

// Working implements chat.Platform: the typing indicator, renewed every
// 8 s (it lasts about 10) until the turn ends.
func (a *Adapter) Working(_ context.Context, th chat.Thread, _ string, on bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if stop, ok := a.typing[th.Channel]; ok {
		stop()
		delete(a.typing, th.Channel)
	}
	if !on || a.ctx == nil {
		return nil
	}
	ctx, stop := context.WithCancel(a.ctx)
	a.typing[th.Channel] = stop
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		t := time.NewTicker(8 * time.Second)
		defer t.Stop()
		for {
			if err := a.s.ChannelTyping(th.Channel, discordgo.WithContext(ctx)); err != nil && ctx.Err() == nil {
				a.log.Warn("discord typing indicator", "channel", th.Channel, "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}
