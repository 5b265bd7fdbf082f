package chat

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/pinplan/pinplan/agent"
)

// The delivery layer: every send to a platform (plan post, edit, pin and
// unpin, card post and edit, reply) is classified into an Outcome and
// retried by one policy. Adapters classify each platform error per
// operation, by wrapping one of the sentinel errors of chat.go or
// returning a *RateLimitError, so a pin problem can never be mistaken for
// a reply problem; Classify reads the outcome back.

// Outcome is what a failed send means for the next attempt.
type Outcome int

const (
	// Retry: a transient failure (a 5xx, a timeout, the network); back
	// off and try again.
	Retry Outcome = iota
	// RetryAfter: the platform said how long to wait (a 429).
	RetryAfter
	// Permanent: the same request will never succeed; report, drop.
	Permanent
	// MessageGone: the message to edit is gone or frozen; post a new one.
	MessageGone
	// PinUnavailable: pinning is not possible here; go on unpinned.
	PinUnavailable
	// EditLater: edits of this message are refused for now; back off
	// long, edit again, and post a new message only if it persists.
	EditLater
)

func (o Outcome) String() string {
	switch o {
	case Retry:
		return "retry"
	case RetryAfter:
		return "retry after"
	case Permanent:
		return "permanent"
	case MessageGone:
		return "message gone"
	case PinUnavailable:
		return "pin unavailable"
	case EditLater:
		return "edit later"
	}
	return "unknown"
}

// Classify returns the outcome of a failed send and, for RetryAfter, the
// wait the platform asked for.
func Classify(err error) (Outcome, time.Duration) {
	var rl *RateLimitError
	switch {
	case errors.As(err, &rl):
		return RetryAfter, rl.RetryAfter
	case errors.Is(err, ErrUndeliverable), errors.Is(err, agent.ErrFenced), errors.Is(err, ErrNoSessions):
		return Permanent, 0
	case errors.Is(err, ErrEditLater):
		return EditLater, 0
	case errors.Is(err, ErrMessageGone):
		return MessageGone, 0
	case errors.Is(err, ErrPinUnavailable):
		return PinUnavailable, 0
	}
	return Retry, 0
}

// Backoff is the one retry policy of every send: doubling waits from
// First up to Max, with jitter over the upper half so that sends failing
// together do not retry together; a platform's own wait (429) wins, but
// never less than minWait.
type Backoff struct {
	First, Max time.Duration
}

const minWait = 50 * time.Millisecond

// Wait is how long to wait after the attempt-th failure (1-based) with err.
func (b Backoff) Wait(attempt int, err error) time.Duration {
	if o, after := Classify(err); o == RetryAfter {
		return max(after, minWait)
	}
	w := min(b.First<<min(max(attempt-1, 0), 16), b.Max)
	return w/2 + rand.N(w/2+1)
}

// backoff is the router's retry policy, from Options.RetryDelay up to max.
func (d *deliverer) backoff(max time.Duration) Backoff {
	return Backoff{First: d.opts.RetryDelay, Max: max}
}

// Fence is implemented by stores shared by several replicas (DESIGN §14):
// Held returns an error wrapping agent.ErrFenced once this process no
// longer holds the session. The plan board, the cards and the outbox ask
// before every platform request, so a replica that lost a session sends
// nothing more for it; the new holder's first render puts it right.
type Fence interface {
	Held(ctx context.Context, key string) error
}

// held returns the fence's verdict on the session; nil without a fence.
func (d *deliverer) held(ctx context.Context, key string) error {
	if d.opts.Fence == nil {
		return nil
	}
	return d.opts.Fence.Held(ctx, key)
}

// policy is how the sends of one operation are retried by the one retry
// stage (sendUntil): waits doubling from Options.RetryDelay up to max, at
// most attempts tries (0: no bound), and none once the send was first
// wanted more than maxAge ago (0: no bound).
type policy struct {
	max      time.Duration
	attempts int
	maxAge   time.Duration
}

// opRender is a plan message's post, edit or pin: the board's loop
// (Board.after) reads its policy, and besides retrying it reposts a
// message gone and gives up per content.
const opRender = "render_plan"

// policies are the retry policies of the operations, by name (the name
// a delivery's span carries), the one table every send's retries follow.
var policies = map[string]policy{
	// A plan's content: a few tries, then the thread is told once and
	// the next revision tries again. Its waits are off the lane.
	opRender: {max: maxBoardBackoff, attempts: maxFailures},
	// An answer is retried until delivered, refused for good or a day
	// old; it is stored meanwhile.
	"reply":           {max: maxReplyBackoff, maxAge: maxReplyAge},
	"reply_privately": {max: maxReplyBackoff, maxAge: maxReplyAge},
	// A live answer's parts: a failed append loses nothing (the answer
	// is finished whole at the end of the turn).
	"reply_live": {max: 2 * time.Second, attempts: liveAppendAttempts},
	// A live answer's later appends: one attempt in its slot; one that
	// failed for now is tried in the next slot (appendLive).
	"append_live": {max: time.Second, attempts: 1},
	"finish_live": {max: maxReplyBackoff, attempts: liveAppendAttempts},
	"close_live":  {max: maxReplyBackoff, attempts: liveAppendAttempts, maxAge: maxReplyAge},
	// Cards and statuses: a few tries; the turn goes on either way.
	"post_card":  {max: cardBackoff, attempts: cardAttempts},
	"edit_card":  {max: cardBackoff, attempts: cardAttempts},
	"set_status": {max: statusBackoff, attempts: statusAttempts},
	// The working indicator is not worth a retry.
	"working":     {max: time.Second, attempts: 1},
	"not_working": {max: time.Second, attempts: 1},
	// The router's own words and an adapter's post: a caller waits.
	"tell":           {max: 10 * time.Second, attempts: tellAttempts},
	"tell_privately": {max: 10 * time.Second, attempts: tellAttempts},
	"post":           {max: 10 * time.Second, attempts: tellAttempts},
}

// sendUntil runs send until it succeeds, its outcome is not worth a retry
// (anything but Retry and RetryAfter), attempts are spent (0: no limit),
// giveUp reports true, or ctx is done. It returns the attempts made and
// the last error.
func sendUntil(ctx context.Context, b Backoff, attempts int, giveUp func() bool, send func(ctx context.Context) error) (int, error) {
	for n := 1; ; n++ {
		err := send(ctx)
		if err == nil {
			return n, nil
		}
		o, _ := Classify(err)
		if o != Retry && o != RetryAfter {
			return n, err
		}
		if (attempts > 0 && n >= attempts) || (giveUp != nil && giveUp()) || ctx.Err() != nil {
			return n, err
		}
		wait := b.Wait(n, err)
		traceRetry(ctx, n, o, wait)
		sleep(ctx, wait)
		if ctx.Err() != nil {
			return n, err
		}
	}
}

// sendInfo is what a send from the outbox carries in its context.
type sendInfo struct {
	key    string
	queued time.Time // when the reply was stored
	unsure bool      // an earlier attempt may have landed
}

type sendKey struct{}

// withSend gives a send an idempotency key: the same key on every
// attempt at one message, and across restarts (the outbox's item). unsure
// says an earlier attempt may have landed unseen.
func withSend(ctx context.Context, key string, queued time.Time, unsure bool) context.Context {
	return context.WithValue(ctx, sendKey{}, sendInfo{key: key, queued: queued, unsure: unsure})
}

// WithSend is what the outbox and the plan board give a send (SendKey,
// SentMaybe), for a platform's tests.
func WithSend(ctx context.Context, key string, queued time.Time, unsure bool) context.Context {
	return withSend(ctx, key, queued, unsure)
}

// SendKey is the idempotency key of the send ctx carries, or "". A
// platform that can make a create idempotent (Discord's nonce with
// enforce_nonce) uses it, so that an attempt after one whose answer was
// lost, or after a restart, returns the message instead of posting it
// twice. A platform that cannot (Slack) tags the message with it, and
// looks for the tag when SentMaybe says so.
func SendKey(ctx context.Context) string {
	s, _ := ctx.Value(sendKey{}).(sendInfo)
	return s.key
}

// SentMaybe reports whether an earlier attempt at the send ctx carries
// (a reply from the outbox, or a plan message's post) may have landed
// without this process learning so: it was stored by a process that has
// since stopped (or by another replica), or an attempt failed in a way
// that does not rule out that the platform took it (a timeout, a dropped
// connection, a 5xx; a 429 alone rules it out). since is when the reply
// was stored, or the plan's first post attempt began: the message, if it
// was posted, is no older than that.
func SentMaybe(ctx context.Context) (since time.Time, maybe bool) {
	s, _ := ctx.Value(sendKey{}).(sendInfo)
	return s.queued, s.key != "" && s.unsure
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
