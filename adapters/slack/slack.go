// Package slack connects pinplan to Slack with github.com/slack-go/slack:
// Socket Mode (SLACK_APP_TOKEN) or the Events API over HTTP
// (SLACK_SIGNING_SECRET), Block Kit rendering of the plan message, the
// chat.Platform the plan board drives, every thread as an agent session
// (sessions.go) and, as an option, answers streamed into the thread as
// the model writes them (live.go). One adapter serves one workspace (SLACK_BOT_TOKEN) or every
// workspace pinplan is installed in by OAuth (workspace.go).
//
// It imports chat, agent (types), todo and its own install package;
// never store or another adapter.
package slack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/pinplan/pinplan/adapters/slack/install"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/serial"
)

// Options configures the adapter.
type Options struct {
	BotToken      string
	AppToken      string // Socket Mode when set
	SigningSecret string // Events API over HTTP when AppToken is empty
	APIURL        string // SLACK_API_URL, ending in /
	// NativePlan renders plans with Slack's plan and task-card blocks,
	// falling back to standard blocks when Slack rejects them.
	NativePlan bool
	// EditsPerMinute paces plan edits (chat.update) for the workspace
	// (Tier 3 allows about 50); default 45, burst 5. Posts and pins have
	// budgets of their own (pace.go).
	EditsPerMinute float64
	// Stream shows answers as the model writes them (PINPLAN_STREAM),
	// streamed into the thread with chat.startStream, chat.appendStream
	// and chat.stopStream (live.go), and posts the other replies in the
	// same Markdown; plan messages and cards are never streamed.
	Stream bool
	// AppendsPerMinute paces chat.appendStream for the workspace (Tier 4
	// allows about 100); default 90, burst 5.
	AppendsPerMinute float64
	Dedupe           chat.Deduper
	// Sessions lists the sessions of every thread, for /pinplan status
	// (commands.go); nil: the command says it is not available.
	Sessions   func(ctx context.Context) ([]chat.Listed, error)
	Logger     *slog.Logger
	HTTPClient *http.Client
	Now        func() time.Time

	// Installations, when set, makes the adapter serve every workspace
	// pinplan is installed in by OAuth (DESIGN §14, workspace.go): each
	// call goes with the bot token of its workspace's installation (its
	// own, or its org's org-wide one), refreshed with Refresh before it
	// expires and once more when Slack answers token_expired. BotToken
	// is then not used.
	Installations *install.Installations
	// Refresh exchanges a refresh token at oauth.v2.access
	// (install.Flow.Refresh); needed with token rotation.
	Refresh func(ctx context.Context, refreshToken string) (install.Refreshed, error)
	// Uninstalled, when set, is told of an installation (a team id, or
	// an org id for an org-wide install) that app_uninstalled or
	// tokens_revoked deleted, or that team_access_revoked removed from
	// some of its org's workspaces, after their pending sends were
	// dropped, with the teams it no longer serves here: their sessions
	// are to stop. It must not block for long.
	Uninstalled func(id string, teams []string)
}

// Adapter is the Slack platform.
type Adapter struct {
	opts Options
	// one is SLACK_BOT_TOKEN's workspace; nil with Installations, where
	// each team has its own (spaces, workspace.go).
	one *workspace
	// app opens the Socket Mode connection (SLACK_APP_TOKEN), one for
	// every workspace.
	app *slack.Client
	log *slog.Logger
	wg  sync.WaitGroup
	// in is where events go, given to Start before any can arrive (the
	// Socket Mode loop and the HTTP handlers run after it).
	in Handler

	queue serial.Queue // events handled in order per thread

	mu sync.Mutex // guards the fields below
	// spaces are the workspaces served, by team id, with Installations.
	spaces map[string]*workspace
	share  int                               // replicas sharing the budgets (Share)
	say    func(key string, until time.Time) // OnRetryAfter
	// lives is the progress of live replies (live.go), by the router's
	// reply id.
	lives map[string]*liveReply
	// authors is who wrote the messages handed to the router, by
	// session key then message ts, and askers who wrote the newest one of
	// each session, by session key: the recipients of streamed replies.
	// Both go when the session leaves the router's memory (Forget).
	authors  map[string]map[string]person
	nAuthors int // entries in authors, all sessions
	askers   map[string]person
	// reacted is the message that got the working reaction, by session
	// key; the reaction is removed from that message.
	reacted map[string]string
	// standard holds plan messages that Slack refused native blocks for;
	// their edits use standard blocks. Other messages still try native.
	standard  map[string]bool
	users     map[string]string // display names by team and user id ("T1/U1")
	connected bool
}

var (
	_ chat.Platform       = (*Adapter)(nil)
	_ chat.Paced          = (*Adapter)(nil)
	_ chat.SessionStatus  = (*Adapter)(nil)
	_ chat.LiveReplier    = (*Adapter)(nil)
	_ chat.PrivateReplier = (*Adapter)(nil)
	_ chat.Splitter       = (*Adapter)(nil)
	_ chat.Interactive    = (*Adapter)(nil)
	_ chat.History        = (*Adapter)(nil)
	_ chat.Forgetter      = (*Adapter)(nil)
)

// Caps implements chat.Platform: Slack paces by its budgets, shows
// agent sessions, streams answers (when Options.Stream), shows ephemeral
// messages, cuts long replies, shows approval cards, reads a thread's
// earlier messages, keeps per-thread state in memory and serves the
// files people attach.
func (a *Adapter) Caps() chat.Caps {
	return chat.Caps{Paced: a, Sessions: a, Live: a, Private: a, Split: a, Cards: a, History: a, Forget: a, Files: a}
}

// New returns an adapter; Start connects it and gives it its inbox.
func New(opts Options) *Adapter {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.EditsPerMinute <= 0 {
		opts.EditsPerMinute = 45
	}
	if opts.AppendsPerMinute <= 0 {
		opts.AppendsPerMinute = 90
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	a := &Adapter{opts: opts, log: opts.Logger, share: 1, spaces: map[string]*workspace{},
		lives: map[string]*liveReply{}, authors: map[string]map[string]person{}, askers: map[string]person{},
		reacted: map[string]string{}, standard: map[string]bool{}, users: map[string]string{}}
	if opts.Installations == nil {
		a.one = a.newWorkspace("", opts.BotToken, nil)
		a.app = a.one.api
	} else {
		a.app = slack.New("", slack.OptionAPIURL(opts.APIURL), slack.OptionHTTPClient(opts.HTTPClient), slack.OptionAppLevelToken(opts.AppToken))
	}
	return a
}

// Start checks the token (auth.test) and, in Socket Mode, connects. It
// returns once the bot knows who it is; events go to in until ctx ends.
// Over HTTP, serve HTTPHandler, InteractionsHandler and CommandsHandler
// only once Start has returned: the adapter knows neither the bot nor its
// inbox before.
func (a *Adapter) Start(ctx context.Context, in Handler) error {
	a.in = in
	if a.one != nil {
		auth, err := a.one.api.AuthTestContext(ctx)
		if err != nil {
			return fmt.Errorf("slack: auth.test with SLACK_BOT_TOKEN: %w", err)
		}
		a.one.mu.Lock()
		a.one.botUserID, a.one.team = auth.UserID, auth.TeamID
		a.one.mu.Unlock()
		a.log.Info("slack connected", "bot_user", auth.UserID, "team", auth.TeamID, "mode", a.mode())
	} else {
		// Read them all once: a wrong PINPLAN_SECRET_KEY or an
		// unreadable store is said here, not at the first event.
		all, err := a.opts.Installations.List(ctx)
		if err != nil {
			return fmt.Errorf("slack: read the installations: %w", err)
		}
		a.log.Info("slack serving its installed workspaces", "installations", len(all), "mode", a.mode())
	}
	if a.opts.AppToken != "" {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.runSocketMode(ctx)
		}()
	} else {
		a.setConnected(true)
	}
	return nil
}

func (a *Adapter) mode() string {
	if a.opts.AppToken != "" {
		return "socket"
	}
	return "http"
}

// Wait waits for the Socket Mode loop and event handlers to end.
func (a *Adapter) Wait() {
	a.queue.Wait(context.Background())
	a.wg.Wait()
}

// Ready reports whether the adapter is connected.
func (a *Adapter) Ready() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.connected {
		return errors.New("slack: not connected")
	}
	return nil
}

func (a *Adapter) setConnected(v bool) {
	a.mu.Lock()
	a.connected = v
	a.mu.Unlock()
}

// classify maps Slack errors to the board's sentinel errors.
func classify(op string, err error) error { return classifyOp(op, false, err) }

// classifyPin is classify for pins.add and pins.remove: there a missing
// permission or channel membership means pinning is not possible here
// (the plan is kept up to date unpinned), while for every other
// operation the same codes mean the call will never succeed.
func classifyPin(op string, err error) error { return classifyOp(op, true, err) }

func classifyOp(op string, pin bool, err error) error {
	if err == nil {
		return nil
	}
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		return &chat.RateLimitError{RetryAfter: rl.RetryAfter, Err: fmt.Errorf("slack: %s: %w", op, err)}
	}
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		switch se.Err {
		case "message_not_found", "cant_update_message", "edit_window_closed", "msg_too_long_to_update":
			return fmt.Errorf("slack: %s: %s: %w", op, se.Err, chat.ErrMessageGone)
		case "too_many_pins", "not_pinnable", "missing_scope", "not_in_channel", "restricted_action", "access_denied", "permission_denied", "no_permission":
			if pin {
				return fmt.Errorf("slack: %s: %s: %w", op, se.Err, chat.ErrPinUnavailable)
			}
		case "internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited":
			return fmt.Errorf("slack: %s: %w", op, err) // Slack's side: try again
		}
		// Any other error answer (channel_not_found, is_archived,
		// invalid_auth, msg_too_long..., and the permission codes above
		// for anything but a pin) will be the same next time.
		return fmt.Errorf("slack: %s: %s: %w", op, se.Err, chat.ErrUndeliverable)
	}
	if refusedHTTP(err) {
		// A 4xx with no Slack error body: something on the way (an
		// egress proxy's 403, a gateway's 401 or 413) refused the
		// request, and refuses it again on every retry, as Discord's
		// 4xx do.
		return fmt.Errorf("slack: %s: %w (%w)", op, chat.ErrUndeliverable, err)
	}
	return fmt.Errorf("slack: %s: %w", op, err)
}

// refusedHTTP reports whether err is an HTTP 4xx answer other than 408
// (Request Timeout) and 429 (Too Many Requests, here without a
// Retry-After): a refusal that a retry of the same request cannot
// change. slack-go reads no body from a non-200 answer, so a Slack error
// sent with a 4xx lands here too; Slack answers its errors with 200.
func refusedHTTP(err error) bool {
	var sc slack.StatusCodeError
	if !errors.As(err, &sc) {
		return false
	}
	switch c := sc.HTTPStatusCode(); {
	case c == http.StatusRequestTimeout, c == http.StatusTooManyRequests:
		return false
	default:
		return c >= 400 && c < 500
	}
}

// appDenied reports whether an error code means this token or app may
// never use the method (agents.sessions.setStatus, chat.startStream),
// rather than that this one call failed: a token that is not a granular
// bot token, a missing scope (for sessions, no assistant:write: the app
// was not declared an agent, or was not reinstalled since), or a
// workspace or app without the method.
func appDenied(code string) bool {
	switch code {
	case "not_allowed_token_type", "missing_scope", "unknown_method", "method_deprecated", "feature_disabled", "no_permission", "access_denied":
		return true
	}
	return false
}

func slackCode(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err
	}
	return ""
}

// planBlocks renders p: native plan blocks when they are enabled and Slack
// has not refused them for this message.
func (a *Adapter) planBlocks(ref string, p chat.Plan) (blocks []slack.Block, native bool) {
	a.mu.Lock()
	native = a.opts.NativePlan && !a.standard[ref]
	a.mu.Unlock()
	if native {
		return NativePlanBlocks(p), true
	}
	return PlanBlocks(p), false
}

// fallBack reports whether a failed native-blocks request should be sent
// again with standard blocks: only when Slack answered with a refusal
// (not a rate limit, not a failure on its side, not a timeout or a
// dropped connection, after which the post may have landed and is looked
// for by the next attempt instead). It is decided per message, never for
// the whole workspace.
func (a *Adapter) fallBack(native bool, err error) bool {
	var se slack.SlackErrorResponse
	if !native || err == nil || !errors.As(err, &se) {
		return false
	}
	switch se.Err {
	case "ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout":
		return false
	}
	a.log.Warn("slack refused the native plan blocks; using standard blocks for this message", "err", err)
	return true
}

// PostPlan implements chat.Platform. A post with a key (chat.SendKey)
// is tagged like a reply (event_type pinplan_plan); when an earlier
// attempt may have landed (chat.SentMaybe), the message it left in the
// thread is returned instead of posting another (the board then edits it
// to the plan wanted now).
func (a *Adapter) PostPlan(ctx context.Context, th chat.Thread, p chat.Plan) (chat.MessageRef, error) {
	key := chat.SendKey(ctx)
	if since, maybe := chat.SentMaybe(ctx); maybe && th.ThreadID != "" {
		found, err := a.tagged(ctx, th, since, planEvent)
		if err := a.lookFailed("post plan", th, err); err != nil {
			return chat.MessageRef{}, err
		}
		if ts, ok := found[key]; ok {
			return chat.MessageRef{Channel: th.Channel, ID: ts}, nil
		}
	}
	post := func(blocks []slack.Block) (string, error) {
		opts := []slack.MsgOption{slack.MsgOptionTS(th.ThreadID),
			slack.MsgOptionText(PlanText(p), false), slack.MsgOptionBlocks(blocks...), slack.MsgOptionDisableLinkUnfurl()}
		if key != "" {
			opts = append(opts, tag(planEvent, key))
		}
		_, ts, err := a.on(th).api.PostMessageContext(ctx, th.Channel, opts...)
		return ts, err
	}
	blocks, native := a.planBlocks("", p)
	ts, err := post(blocks)
	if a.fallBack(native, err) {
		if ts, err = post(PlanBlocks(p)); err == nil {
			a.mu.Lock()
			a.standard[ts] = true
			a.mu.Unlock()
		}
	}
	if err != nil {
		return chat.MessageRef{}, classify("post plan", err)
	}
	return chat.MessageRef{Channel: th.Channel, ID: ts}, nil
}

// EditPlan implements chat.Platform.
func (a *Adapter) EditPlan(ctx context.Context, th chat.Thread, ref chat.MessageRef, p chat.Plan) error {
	update := func(blocks []slack.Block) error {
		_, _, _, err := a.on(th).api.UpdateMessageContext(ctx, ref.Channel, ref.ID,
			slack.MsgOptionText(PlanText(p), false), slack.MsgOptionBlocks(blocks...))
		return err
	}
	blocks, native := a.planBlocks(ref.ID, p)
	err := update(blocks)
	if a.fallBack(native, err) && classify("", err) != nil && !errors.Is(classify("", err), chat.ErrMessageGone) {
		if err = update(PlanBlocks(p)); err == nil {
			a.mu.Lock()
			a.standard[ref.ID] = true
			a.mu.Unlock()
		}
	}
	return classify("update plan "+ref.ID, err)
}

// Pin implements chat.Platform.
func (a *Adapter) Pin(ctx context.Context, th chat.Thread, ref chat.MessageRef, pin bool) error {
	item := slack.NewRefToMessage(ref.Channel, ref.ID)
	api := a.on(th).api
	if pin {
		err := api.AddPinContext(ctx, ref.Channel, item)
		if slackCode(err) == "already_pinned" {
			return nil
		}
		return classifyPin("pin "+ref.ID, err)
	}
	err := api.RemovePinContext(ctx, ref.Channel, item)
	if c := slackCode(err); c == "no_pin" || c == "not_pinned" {
		return nil
	}
	return classifyPin("unpin "+ref.ID, err)
}

// SplitReply implements chat.Splitter: parts of at most 3,500
// characters, in Slack's mrkdwn; with Options.Stream, the Markdown as it
// is (Reply makes it safe for markdown_text, as the live answers are), a
// code block cut between parts closed at the end of one and opened
// again at the start of the next, so that each part is escaped as the
// whole answer reads.
func (a *Adapter) SplitReply(text string) []string {
	if a.opts.Stream {
		return splitMarkdown(text, maxReplyRunes)
	}
	return Split(Mrkdwn(text), maxReplyRunes)
}

// Reply implements chat.Platform: one message in the thread, posted
// whole. Only an answer is shown as written (live.go); a reply is a
// message: in mrkdwn, or with Options.Stream in a markdown block, as the
// live answers read. Text longer than a part is split here too, for
// callers that did not split it.
func (a *Adapter) Reply(ctx context.Context, th chat.Thread, replyTo, text string) error {
	return a.post(ctx, th, text)
}

// post posts text in the thread, in parts: mrkdwn, or with
// Options.Stream Markdown made safe (markdownText) in a markdown block.
//
// Slack has no idempotent post, so a reply from the outbox (chat.SendKey)
// carries its key in the message's metadata (event_type pinplan_reply,
// payload send_key), and when an earlier attempt may have landed unseen
// (chat.SentMaybe: a timeout, a lost answer, a restart) post first reads
// the thread since the reply was stored, with include_all_metadata, and
// skips the parts already there.
func (a *Adapter) post(ctx context.Context, th chat.Thread, text string) error {
	key := chat.SendKey(ctx)
	var posted map[string]string
	if since, maybe := chat.SentMaybe(ctx); maybe && th.ThreadID != "" {
		var err error
		posted, err = a.tagged(ctx, th, since, replyEvent)
		if err := a.lookFailed("reply", th, err); err != nil {
			return err
		}
	}
	parts := Split(text, maxReplyRunes)
	if a.opts.Stream {
		parts = splitMarkdown(text, maxReplyRunes)
	}
	for i, part := range parts {
		opts := []slack.MsgOption{slack.MsgOptionTS(th.ThreadID), slack.MsgOptionText(part, false)}
		if a.opts.Stream {
			md := markdownText(part)
			opts = []slack.MsgOption{slack.MsgOptionTS(th.ThreadID), slack.MsgOptionText(md, false), slack.MsgOptionBlocks(slack.NewMarkdownBlock("", md))}
		}
		if key != "" {
			k := fmt.Sprintf("%s/%d", key, i)
			if _, ok := posted[k]; ok {
				continue
			}
			opts = append(opts, tag(replyEvent, k))
		}
		if _, _, err := a.on(th).api.PostMessageContext(ctx, th.Channel, opts...); err != nil {
			return classify("reply", err)
		}
	}
	return nil
}

// Looking for a reply posted by an attempt whose answer was lost.
const (
	// replyEvent, planEvent and cardEvent are the metadata event_types
	// of a reply from the outbox, of a plan message and of an approval
	// card.
	replyEvent = "pinplan_reply"
	planEvent  = "pinplan_plan"
	cardEvent  = "pinplan_card"
	// clockSlack is how far before the reply was stored the thread is
	// read, for a clock here ahead of Slack's.
	clockSlack = 10 * time.Minute
	// maxLookPages bounds the pages of 200 messages read; past them the
	// reply is posted (a rare duplicate rather than a lost answer).
	maxLookPages = 10
)

// lookFailed decides what a failed look for an earlier attempt means: a
// rate limit or a failure on Slack's side is retried (the error); any
// other refusal of conversations.replies (a missing scope, a thread gone)
// would refuse every retry too, so it is logged and the post goes ahead,
// at worst twice, rather than the reply being dropped.
func (a *Adapter) lookFailed(op string, th chat.Thread, err error) error {
	if err == nil {
		return nil
	}
	err = classify(op+": look for an earlier attempt", err)
	if errors.Is(err, chat.ErrUndeliverable) || errors.Is(err, chat.ErrMessageGone) {
		a.log.Warn("cannot look for an earlier attempt; posting", "channel", th.Channel, "thread", th.ThreadID, "err", err)
		return nil
	}
	return err
}

// tag is the metadata that marks a message as the one posted for key.
func tag(event, key string) slack.MsgOption {
	return slack.MsgOptionMetadata(slack.SlackMetadata{EventType: event, EventPayload: map[string]any{"send_key": key}})
}

// tagged returns the messages this bot tagged with event in the thread,
// posted since (less clockSlack; the whole thread if since is zero): their
// ts by send key.
func (a *Adapter) tagged(ctx context.Context, th chat.Thread, since time.Time, event string) (map[string]string, error) {
	params := &slack.GetConversationRepliesParameters{ChannelID: th.Channel, Timestamp: th.ThreadID, Limit: 200, IncludeAllMetadata: true}
	if !since.IsZero() {
		from := since.Add(-clockSlack)
		params.Oldest = fmt.Sprintf("%d.%06d", from.Unix(), from.Nanosecond()/1000)
	}
	found := map[string]string{}
	w := a.on(th)
	for range maxLookPages {
		msgs, more, cursor, err := w.api.GetConversationRepliesContext(ctx, params)
		if err != nil {
			return nil, err
		}
		bot := w.bot()
		for _, m := range msgs {
			if m.Metadata.EventType != event || (bot != "" && m.User != bot) {
				continue
			}
			if k, ok := m.Metadata.EventPayload["send_key"].(string); ok {
				found[k] = m.Timestamp
			}
		}
		if !more || cursor == "" {
			return found, nil
		}
		params.Cursor = cursor
	}
	a.log.Warn("thread too long to look for an earlier attempt at a post; posting it", "channel", th.Channel, "thread", th.ThreadID)
	return found, nil
}

const workingReaction = "hourglass_flowing_sand"

// Working implements chat.Platform: a reaction on the message that started
// the turn, removed from that message when the turn ends. The router asks
// for it only where agent sessions are not available (sessions.go); there
// the session's status is the working indicator.
func (a *Adapter) Working(ctx context.Context, th chat.Thread, trigger string, on bool) error {
	if !on {
		a.mu.Lock()
		ts, ok := a.reacted[th.Key]
		delete(a.reacted, th.Key)
		a.mu.Unlock()
		if !ok {
			ts = trigger // after a restart: the message the turn began on, from its log entry
		}
		if ts == "" {
			return nil
		}
		err := a.on(th).api.RemoveReactionContext(ctx, workingReaction, slack.NewRefToMessage(th.Channel, ts))
		if slackCode(err) == "no_reaction" {
			return nil
		}
		return classify("remove reaction", err)
	}
	if trigger == "" {
		return nil
	}
	err := a.on(th).api.AddReactionContext(ctx, workingReaction, slack.NewRefToMessage(th.Channel, trigger))
	if err != nil && slackCode(err) != "already_reacted" {
		return classify("add reaction", err)
	}
	a.mu.Lock()
	a.reacted[th.Key] = trigger
	a.mu.Unlock()
	return nil
}
