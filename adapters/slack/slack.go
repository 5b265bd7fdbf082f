// Package slack connects pinplan to Slack with github.com/slack-go/slack:
// Socket Mode (SLACK_APP_TOKEN) or the Events API over HTTP
// (SLACK_SIGNING_SECRET), Block Kit rendering of the plan message, and the
// chat.Platform the plan board drives.
//
// It imports chat, agent (types) and todo; never store or another adapter.
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
	"golang.org/x/time/rate"

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
	// EditsPerMinute paces plan posts and edits for the workspace (Tier 3
	// chat.update allows about 50); default 45, burst 5.
	EditsPerMinute float64
	Handler        chat.Inbox
	Dedupe         chat.Deduper
	Logger         *slog.Logger
	HTTPClient     *http.Client
	Now            func() time.Time
}

// Adapter is the Slack platform.
type Adapter struct {
	opts    Options
	api     *slack.Client
	limiter *rate.Limiter
	log     *slog.Logger
	wg      sync.WaitGroup

	queue serial.Queue // events handled in order per thread

	mu        sync.Mutex // guards the fields below
	botUserID string
	teamID    string
	// noStatus: the token may not call assistant.threads.setStatus (a
	// token or scope error), so every thread uses the reaction.
	noStatus bool
	// status holds the threads whose assistant status is on, by session
	// key; the status is renewed after the bot's own posts and every
	// statusRenew, since both clear it.
	status map[string]*threadStatus
	// reacted is the message that got the working reaction, by session
	// key; the reaction is removed from that message.
	reacted map[string]string
	// standard holds plan messages that Slack refused native blocks for;
	// their edits use standard blocks. Other messages still try native.
	standard  map[string]bool
	users     map[string]string // display names by user id
	connected bool
}

// threadStatus is a thread's assistant status that is on.
type threadStatus struct {
	th   chat.Thread
	stop context.CancelFunc
}

// statusRenew is how often a thread's status is set again while the turn
// runs: Slack clears it after two minutes.
const statusRenew = 90 * time.Second

var (
	_ chat.Platform = (*Adapter)(nil)
	_ chat.Paced    = (*Adapter)(nil)
)

// New returns an adapter; Start connects it.
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
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	api := slack.New(opts.BotToken, slack.OptionAPIURL(opts.APIURL), slack.OptionHTTPClient(opts.HTTPClient), slack.OptionAppLevelToken(opts.AppToken))
	return &Adapter{opts: opts, api: api, log: opts.Logger,
		limiter: rate.NewLimiter(rate.Limit(opts.EditsPerMinute/60), 5),
		status:  map[string]*threadStatus{}, reacted: map[string]string{}, standard: map[string]bool{}, users: map[string]string{}}
}

// Start checks the token (auth.test) and, in Socket Mode, connects. It
// returns once the bot knows who it is; events are handled until ctx ends.
func (a *Adapter) Start(ctx context.Context) error {
	auth, err := a.api.AuthTestContext(ctx)
	if err != nil {
		return fmt.Errorf("slack: auth.test with SLACK_BOT_TOKEN: %w", err)
	}
	a.mu.Lock()
	a.botUserID, a.teamID = auth.UserID, auth.TeamID
	a.mu.Unlock()
	a.log.Info("slack connected", "bot_user", auth.UserID, "team", auth.TeamID, "mode", a.mode())
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

// Wait waits for the Socket Mode loop and event handlers to end, and stops
// renewing statuses.
func (a *Adapter) Wait() {
	a.mu.Lock()
	for key, st := range a.status {
		st.stop()
		delete(a.status, key)
	}
	a.mu.Unlock()
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

// Limiter implements chat.Paced: one pace for the workspace, as Slack's
// method tiers count per workspace.
func (a *Adapter) Limiter(chat.Thread) chat.Limiter { return a.limiter }

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
	return fmt.Errorf("slack: %s: %w", op, err)
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
// again with standard blocks: any refusal but a rate limit. It is decided
// per message, never for the whole workspace.
func (a *Adapter) fallBack(native bool, err error) bool {
	var rl *slack.RateLimitedError
	if !native || err == nil || errors.As(err, &rl) {
		return false
	}
	a.log.Warn("slack refused the native plan blocks; using standard blocks for this message", "err", err)
	return true
}

// PostPlan implements chat.Platform.
func (a *Adapter) PostPlan(ctx context.Context, th chat.Thread, p chat.Plan) (chat.MessageRef, error) {
	post := func(blocks []slack.Block) (string, error) {
		_, ts, err := a.api.PostMessageContext(ctx, th.Channel, slack.MsgOptionTS(th.ThreadID),
			slack.MsgOptionText(PlanText(p), false), slack.MsgOptionBlocks(blocks...), slack.MsgOptionDisableLinkUnfurl())
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
	a.renewStatus(ctx, th)
	return chat.MessageRef{Channel: th.Channel, ID: ts}, nil
}

// EditPlan implements chat.Platform.
func (a *Adapter) EditPlan(ctx context.Context, th chat.Thread, ref chat.MessageRef, p chat.Plan) error {
	update := func(blocks []slack.Block) error {
		_, _, _, err := a.api.UpdateMessageContext(ctx, ref.Channel, ref.ID,
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
	if pin {
		err := a.api.AddPinContext(ctx, ref.Channel, item)
		if slackCode(err) == "already_pinned" {
			return nil
		}
		return classifyPin("pin "+ref.ID, err)
	}
	err := a.api.RemovePinContext(ctx, ref.Channel, item)
	if c := slackCode(err); c == "no_pin" || c == "not_pinned" {
		return nil
	}
	return classifyPin("unpin "+ref.ID, err)
}

// SplitReply implements chat.Splitter: Markdown converted to mrkdwn, in
// parts of at most 3,500 characters.
func (a *Adapter) SplitReply(text string) []string { return Split(Mrkdwn(text), maxReplyRunes) }

// Reply implements chat.Platform: one message in the thread. Text longer
// than a part is split here too, for callers that did not split it.
func (a *Adapter) Reply(ctx context.Context, th chat.Thread, _, text string) error {
	for _, part := range Split(text, maxReplyRunes) {
		if _, _, err := a.api.PostMessageContext(ctx, th.Channel, slack.MsgOptionTS(th.ThreadID), slack.MsgOptionText(part, false)); err != nil {
			return classify("reply", err)
		}
	}
	a.renewStatus(ctx, th)
	return nil
}

const workingReaction = "hourglass_flowing_sand"

// statusDenied reports whether a setStatus error means this token can never
// set a status (not "this thread is not an assistant thread").
func statusDenied(code string) bool {
	switch code {
	case "missing_scope", "not_allowed_token_type", "invalid_auth", "not_authed", "token_revoked", "token_expired", "account_inactive", "no_permission", "access_denied":
		return true
	}
	return false
}

func (a *Adapter) setStatus(ctx context.Context, th chat.Thread, status string) error {
	return a.api.SetAssistantThreadsStatusContext(ctx, slack.AssistantThreadsSetStatusParameters{ChannelID: th.Channel, ThreadTS: th.ThreadID, Status: status})
}

const workingStatus = "is working on the plan…"

// renewStatus sets the thread's status again after the bot posted in it
// (Slack clears the status when the app replies).
func (a *Adapter) renewStatus(ctx context.Context, th chat.Thread) {
	a.mu.Lock()
	_, on := a.status[th.Key]
	a.mu.Unlock()
	if !on {
		return
	}
	if err := a.setStatus(ctx, th, workingStatus); err != nil {
		a.log.Warn("renew assistant thread status", "session", th.Key, "err", err)
	}
}

// Working implements chat.Platform: assistant.threads.setStatus where Slack
// allows it (assistant threads), renewed after the bot's posts and every
// 90 s; otherwise a reaction on the message that started the turn, removed
// from that message when the turn ends.
func (a *Adapter) Working(ctx context.Context, th chat.Thread, trigger string, on bool) error {
	if !on {
		a.mu.Lock()
		st, hadStatus := a.status[th.Key]
		if hadStatus {
			st.stop()
			delete(a.status, th.Key)
		}
		ts, ok := a.reacted[th.Key]
		delete(a.reacted, th.Key)
		a.mu.Unlock()
		if hadStatus {
			return classify("clear status", a.setStatus(ctx, th, ""))
		}
		if !ok {
			ts = trigger // after a restart: the message the router recorded
		}
		if ts == "" {
			return nil
		}
		err := a.api.RemoveReactionContext(ctx, workingReaction, slack.NewRefToMessage(th.Channel, ts))
		if slackCode(err) == "no_reaction" {
			return nil
		}
		return classify("remove reaction", err)
	}
	a.mu.Lock()
	noStatus := a.noStatus
	a.mu.Unlock()
	if !noStatus {
		err := a.setStatus(ctx, th, workingStatus)
		if err == nil {
			a.keepStatus(th)
			return nil
		}
		code := slackCode(err)
		if code == "" {
			return classify("set status", err)
		}
		if statusDenied(code) {
			a.mu.Lock()
			a.noStatus = true
			a.mu.Unlock()
			a.log.Info("assistant.threads.setStatus not allowed for this token; using reactions", "err", err)
		}
		// Any other code: this thread is not an assistant thread.
	}
	if trigger == "" {
		return nil
	}
	err := a.api.AddReactionContext(ctx, workingReaction, slack.NewRefToMessage(th.Channel, trigger))
	if err != nil && slackCode(err) != "already_reacted" {
		return classify("add reaction", err)
	}
	a.mu.Lock()
	a.reacted[th.Key] = trigger
	a.mu.Unlock()
	return nil
}

// keepStatus renews a thread's status every statusRenew until the turn ends.
func (a *Adapter) keepStatus(th chat.Thread) {
	ctx, stop := context.WithCancel(context.Background())
	a.mu.Lock()
	if old, ok := a.status[th.Key]; ok {
		old.stop()
	}
	a.status[th.Key] = &threadStatus{th: th, stop: stop}
	a.mu.Unlock()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		t := time.NewTicker(statusRenew)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := a.setStatus(ctx, th, workingStatus); err != nil && ctx.Err() == nil {
					a.log.Warn("renew assistant thread status", "session", th.Key, "err", err)
				}
			}
		}
	}()
}
