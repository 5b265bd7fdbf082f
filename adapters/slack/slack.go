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
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"
	"golang.org/x/time/rate"

	"github.com/pinplan/pinplan/chat"
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

	mu             sync.Mutex // guards the fields below
	botUserID      string
	teamID         string
	noStatus       bool // assistant.threads.setStatus refused: use reactions
	nativeRejected bool
	connected      bool
}

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
		limiter: rate.NewLimiter(rate.Limit(opts.EditsPerMinute/60), 5)}
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

// Wait waits for the Socket Mode loop and event handlers to end.
func (a *Adapter) Wait() { a.wg.Wait() }

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
func classify(op string, err error) error {
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
			return fmt.Errorf("slack: %s: %s: %w", op, se.Err, chat.ErrPinUnavailable)
		}
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

func (a *Adapter) planOptions(p chat.Plan) (blocks []slack.Block, native bool) {
	a.mu.Lock()
	native = a.opts.NativePlan && !a.nativeRejected
	a.mu.Unlock()
	if native {
		return NativePlanBlocks(p), true
	}
	return PlanBlocks(p), false
}

// rejectNative remembers that Slack refused the native blocks.
func (a *Adapter) rejectNative(err error) bool {
	if !strings.HasPrefix(slackCode(err), "invalid_blocks") {
		return false
	}
	a.mu.Lock()
	a.nativeRejected = true
	a.mu.Unlock()
	a.log.Warn("slack rejected plan blocks; using standard blocks", "err", err)
	return true
}

// PostPlan implements chat.Platform.
func (a *Adapter) PostPlan(ctx context.Context, th chat.Thread, p chat.Plan) (chat.MessageRef, error) {
	for {
		blocks, native := a.planOptions(p)
		_, ts, err := a.api.PostMessageContext(ctx, th.Channel, slack.MsgOptionTS(th.ThreadID),
			slack.MsgOptionText(PlanText(p), false), slack.MsgOptionBlocks(blocks...), slack.MsgOptionDisableLinkUnfurl())
		if err != nil && native && a.rejectNative(err) {
			continue
		}
		if err != nil {
			return chat.MessageRef{}, classify("post plan", err)
		}
		return chat.MessageRef{Channel: th.Channel, ID: ts}, nil
	}
}

// EditPlan implements chat.Platform.
func (a *Adapter) EditPlan(ctx context.Context, th chat.Thread, ref chat.MessageRef, p chat.Plan) error {
	for {
		blocks, native := a.planOptions(p)
		_, _, _, err := a.api.UpdateMessageContext(ctx, ref.Channel, ref.ID,
			slack.MsgOptionText(PlanText(p), false), slack.MsgOptionBlocks(blocks...))
		if err != nil && native && a.rejectNative(err) {
			continue
		}
		return classify("update plan "+ref.ID, err)
	}
}

// Pin implements chat.Platform.
func (a *Adapter) Pin(ctx context.Context, th chat.Thread, ref chat.MessageRef, pin bool) error {
	item := slack.NewRefToMessage(ref.Channel, ref.ID)
	if pin {
		err := a.api.AddPinContext(ctx, ref.Channel, item)
		if slackCode(err) == "already_pinned" {
			return nil
		}
		return classify("pin "+ref.ID, err)
	}
	err := a.api.RemovePinContext(ctx, ref.Channel, item)
	if c := slackCode(err); c == "no_pin" || c == "not_pinned" {
		return nil
	}
	return classify("unpin "+ref.ID, err)
}

// Reply implements chat.Platform: Markdown converted to mrkdwn, split into
// messages of at most 3,500 characters, posted in the thread.
func (a *Adapter) Reply(ctx context.Context, th chat.Thread, _, text string) error {
	for _, part := range Split(Mrkdwn(text), maxReplyRunes) {
		if _, _, err := a.api.PostMessageContext(ctx, th.Channel, slack.MsgOptionTS(th.ThreadID), slack.MsgOptionText(part, false)); err != nil {
			return classify("reply", err)
		}
	}
	return nil
}

const workingReaction = "hourglass_flowing_sand"

// Working implements chat.Platform: assistant.threads.setStatus where Slack
// allows it (assistant threads), otherwise a reaction on the message that
// started the turn, removed when the turn ends.
func (a *Adapter) Working(ctx context.Context, th chat.Thread, trigger string, on bool) error {
	a.mu.Lock()
	noStatus := a.noStatus
	a.mu.Unlock()
	if !noStatus {
		status := ""
		if on {
			status = "is working on the plan…"
		}
		err := a.api.SetAssistantThreadsStatusContext(ctx, slack.AssistantThreadsSetStatusParameters{ChannelID: th.Channel, ThreadTS: th.ThreadID, Status: status})
		if err == nil {
			return nil
		}
		if slackCode(err) == "" {
			return classify("set status", err)
		}
		a.mu.Lock()
		a.noStatus = true
		a.mu.Unlock()
		a.log.Info("assistant.threads.setStatus not allowed; using a reaction", "err", err)
	}
	if trigger == "" {
		return nil
	}
	item := slack.NewRefToMessage(th.Channel, trigger)
	if on {
		err := a.api.AddReactionContext(ctx, workingReaction, item)
		if slackCode(err) == "already_reacted" {
			return nil
		}
		return classify("add reaction", err)
	}
	err := a.api.RemoveReactionContext(ctx, workingReaction, item)
	if slackCode(err) == "no_reaction" {
		return nil
	}
	return classify("remove reaction", err)
}
