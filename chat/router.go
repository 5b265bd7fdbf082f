package chat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"

	"go.opentelemetry.io/otel/trace"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/todo"
)

// MaxMessageRunes is the longest user message accepted; longer ones are
// refused with a reply rather than cut.
const MaxMessageRunes = 16000

// MaxAuthorRunes caps an author's display name before it reaches the
// model and the store.
const MaxAuthorRunes = 80

// invisible reports whether s has nothing a person can see: only
// whitespace, format characters (zero-width spaces and joiners, the byte
// order mark, soft hyphens), variation selectors and the blank-looking
// fillers that chat clients render as nothing.
func invisible(s string) bool {
	for _, c := range s {
		switch {
		case unicode.IsSpace(c), unicode.Is(unicode.Cf, c), unicode.Is(unicode.Variation_Selector, c):
		case c == '\u115f', c == '\u1160', c == '\u3164', c == '\uffa0', c == '\u2800':
		default:
			return false
		}
	}
	return true
}

// Runner is the part of agent.Runner the router uses.
type Runner interface {
	Submit(ctx context.Context, key string, in agent.Inbound) error
	Stop(key, by string) bool
	Decide(ctx context.Context, key, callID string, d agent.Decision) (agent.Approval, error)
	Reset(ctx context.Context, key, by string) error
	// Steer queues a person's change of the plan (DESIGN §19); a
	// change that cannot be made is an *agent.SteerError.
	Steer(ctx context.Context, key string, st agent.Steer) error
	// Turn returns the session's turn as the agent last committed it:
	// whether one runs (or waits for an approval) and who requested it.
	Turn(ctx context.Context, key string) (agent.TurnInfo, error)
}

// Options configures a Router.
type Options struct {
	// Runner runs the sessions' turns (an *agent.Runner); required. The
	// router hears of their events as an agent.Subscriber (Observe).
	Runner Runner
	Store  BoardStore
	// Log reads the sessions' logs and keeps their delivery cursors
	// (deliver.go); nil delivers only what it is told, from memory.
	Log LogStore
	// Cards keeps the sessions' approval cards; nil keeps them in this
	// process's memory only.
	Cards CardStore
	// Listings keeps how the sessions are listed (title, deleted); nil
	// keeps them in this process's memory only.
	Listings  ListingStore
	Platforms map[string]Platform // by Thread.Platform
	Logger    *slog.Logger
	Hooks     *Hooks
	Now       func() time.Time
	// RetryDelay is the first wait after a failed plan post, edit or
	// reply; it doubles with each failure (default 1 s).
	RetryDelay time.Duration
	// EditLaterDelay is the first back-off when a platform refuses edits
	// of a plan message for now (ErrEditLater); it doubles (default 1 min).
	EditLaterDelay time.Duration
	// Outbox keeps replies until they are delivered; nil keeps them in
	// memory only.
	Outbox OutboxStore
	// Approvers are platform user ids who may decide on any approval and
	// stop any turn (PINPLAN_APPROVERS), besides the turn's requester.
	Approvers []string
	// ThreadContext is how many earlier messages of a thread the first
	// request of a session quotes (PINPLAN_THREAD_CONTEXT); 0 quotes none.
	ThreadContext int
	// Fence, with replicas, says whether this process still holds a
	// session; nothing is sent for one it does not. nil: every session is
	// this process's.
	Fence Fence
	// Dedupe drops a command or a refusal (stop, reset, an empty message)
	// whose Incoming.Event was seen before; a message to queue is
	// deduplicated by the store as it is queued (agent.Inbound.Event).
	// nil: commands are not deduplicated.
	Dedupe Deduper
	// FollowUps keeps the follow-ups that wait for their thread's session
	// (Hold); nil keeps them in this process's memory only, which does
	// not hold across replicas.
	FollowUps FollowUpStore
	// FollowUpWait is how long a follow-up waits for its thread's
	// session before it expires (default FollowUpWait, a minute).
	FollowUpWait time.Duration
	// Tracer makes a span of every delivery (trace.go, DESIGN §17); nil
	// makes none.
	Tracer trace.TracerProvider
}

// Router is the chat side of the bot. The way in is its own: it takes
// each user message (message), button press and command, applies who
// may do what (rules) and feeds the agent runner, which runs one turn at
// a time per session, threads in parallel. The way back is its
// deliverer's (out): the runner's events, rendered on each thread's plan
// board, approval cards and answers.
type Router struct {
	opts      Options
	caps      map[string]Caps // each platform's, by name (Platform.Caps)
	runner    Runner
	followUps FollowUpStore
	rules     rules
	ctx       context.Context
	// out is the way back: it applies the sessions' logs to their
	// threads, and keeps the sessions in memory.
	out *deliverer
}

var _ Inbox = (*Router)(nil)

// NewRouter returns a router.
func NewRouter(opts Options) *Router {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = time.Second
	}
	if opts.EditLaterDelay <= 0 {
		opts.EditLaterDelay = time.Minute
	}
	if opts.FollowUpWait <= 0 {
		opts.FollowUpWait = FollowUpWait
	}
	caps := make(map[string]Caps, len(opts.Platforms))
	for name, p := range opts.Platforms {
		caps[name] = p.Caps()
	}
	out := newDeliverer(opts, caps)
	r := &Router{opts: opts, caps: caps, runner: opts.Runner, ctx: out.ctx, out: out, followUps: opts.FollowUps,
		rules: rules{approvers: opts.Approvers, caps: caps, runner: opts.Runner, log: opts.Logger}}
	if r.followUps == nil {
		r.followUps = &memFollowUps{boards: opts.Store, now: opts.Now}
	}
	return r
}

// hasWork is pendingLocked, with the board's lock.
func (b *Board) hasWork() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pendingLocked()
}

// pendingLocked reports whether the board has work its loop did not
// finish: content its message does not show yet (a post or an edit a
// stop cut short), a posted message not pinned yet, or earlier messages
// still to restore or unpin. The store indexes the boards saved so, for
// the next start (BoardStore.SaveBoard). b.mu is held.
func (b *Board) pendingLocked() bool {
	rec := &b.rec
	if len(rec.Restore) > 0 || len(rec.Unpin) > 0 || (!rec.Ref.IsZero() && !rec.Pinned && !rec.PinUnavailable) {
		return true
	}
	return (!rec.Ref.IsZero() || len(b.want.Items) > 0) && !sameContent(b.want, rec.Shown)
}

// Close lets the deliverers, the plan boards and the outbox apply what
// they were given (up to five seconds, so a final "done" edit is not
// lost to a restart; replies not delivered by then stay stored for the
// next start), then stops them and waits. Call it after the runner has
// stopped publishing.
func (r *Router) Close() { r.out.close() }

// Observe implements agent.Subscriber: the event goes on its session's
// deliverer, and Observe returns at once.
func (r *Router) Observe(e agent.Event) { r.out.Observe(e) }

// Resume delivers what the last process left undelivered (Resume of the
// deliverer); call it once the platforms are connected, before the
// runner resumes its sessions.
func (r *Router) Resume(ctx context.Context) (int, error) { return r.out.Resume(ctx) }

// Tell says text in th (to user alone, if not ""), whether or not a
// session of this process holds the thread (deliverer.Tell).
func (r *Router) Tell(ctx context.Context, th Thread, user, text string) error {
	return r.out.Tell(ctx, th, user, text)
}

// Post makes a post of the platform's own that belongs to no session yet
// through the one delivery step (deliverer.Post).
func (r *Router) Post(ctx context.Context, th Thread, send func(ctx context.Context) error) error {
	return r.out.Post(ctx, th, send)
}

// ResumeSession delivers what another replica left of a session this
// process has just taken over (DESIGN §14).
func (r *Router) ResumeSession(ctx context.Context, key string) { r.out.ResumeSession(ctx, key) }

// ErrRejected is returned by Handle for a message it answered itself
// instead of passing it on to the agent: a refused message, or a command
// (stop, reset). The error is a *Rejection saying which.
var ErrRejected = errors.New("chat: message rejected")

// Rejection is the error Handle returns for a message it answered itself.
// Refused is true when the message was not accepted (empty, too long, the
// database unavailable); Reason is what the thread was told, or with
// Private what its author alone is told (a stop or reset refused to
// someone who may not).
type Rejection struct {
	Reason  string
	Refused bool
	Private bool
}

func (e *Rejection) Error() string        { return "chat: " + e.Reason }
func (e *Rejection) Is(target error) bool { return target == ErrRejected }

// Flush waits until the session's deliverer has applied every event
// queued for it so far and stored its cursor, and its plan board has
// shown what they asked for (its posts, edits, pins and unpins), or
// given up on it; or the router is closed. Replies, approval cards and
// status moves queued meanwhile on the session's lane may still be on
// their way. It loads the session if
// it is not in memory. Tests and tools call it; it must not be called
// on the delivery queue or the session's lane.
func (r *Router) Flush(key string) {
	if b := r.out.board(key, nil); b != nil {
		b.Wait()
		return
	}
	r.out.Flush(key)
}

// Evict drops from memory the sessions idle for longer than idle
// (deliverer.evict); it returns how many.
func (r *Router) Evict(idle time.Duration) int { return r.out.evict(idle) }

// Deleted drops a session that retention deleted from the store (a
// deletion that began at since), unless it is in use again
// (deliverer.deleted).
func (r *Router) Deleted(key string, since time.Time) { r.out.deleted(key, since) }

// Handle takes one user message. Empty and oversized messages are answered
// in the thread and not passed on; "stop" stops the running turn. A
// follow-up of a thread without a session waits for one (Hold); the
// first message of a session is followed by the follow-ups that waited.
func (r *Router) Handle(ctx context.Context, in Incoming) error {
	th := in.Thread
	if r.opts.Platforms[th.Platform] == nil {
		return fmt.Errorf("chat: no platform %q", th.Platform)
	}
	if in.FollowUp && !r.Known(th.Key) {
		// Nothing is said in a thread pinplan may never be part of, so a
		// hold that fails is only logged (by the caller).
		if held, err := r.Hold(ctx, in); err != nil || held {
			return err
		}
	}
	in.Author = Shorten(strings.TrimSpace(in.Author), MaxAuthorRunes)
	m := &message{r: r, in: in, text: strings.TrimSpace(in.Text), log: r.opts.Logger.With("session", th.Key)}
	return m.handle(ctx)
}

// Known reports whether the session exists (it has received a message).
func (r *Router) Known(key string) bool { return r.out.session(key, nil) != nil }

// Thread returns the session's thread as recorded by its board, with the
// title it is listed under.
func (r *Router) Thread(key string) (Thread, bool) { return r.out.thread(key) }

// turnOver does what the router does when a turn ends, besides the board
// and the reply: the cards still open are closed, the working indicator
// goes.
func (d *deliverer) turnOver(ctx context.Context, s *session, th Thread, indicated string, e agent.Event) {
	b := s.board
	d.closeOpenCards(ctx, s, th, e)
	if !b.showsSessions() {
		d.working(b, th, indicated, false)
	}
	if e.Err != nil {
		b.log.Error("turn failed", "outcome", e.Outcome, "err", e.Err)
	}
}

// sharesItem reports whether the two plans have an item text in common:
// a plan that does is the same task continuing.
func sharesItem(a, b []todo.Item) bool {
	seen := make(map[string]bool, len(a))
	for _, it := range a {
		seen[it.Content] = true
	}
	for _, it := range b {
		if seen[it.Content] {
			return true
		}
	}
	return false
}

// closeOpenCards marks the cards still open when a turn ends as not run
// (the turn was stopped or failed while they waited), on the session's
// lane, after the cards' own posts. It runs on the session's deliverer.
func (d *deliverer) closeOpenCards(ctx context.Context, s *session, th Thread, e agent.Event) {
	var open int
	s.cards.read(func(v *cardsRecord) { open = len(v.open()) })
	if open == 0 && len(s.cursor.owed) == 0 {
		return // no card open, none on its way
	}
	dec := agent.Decision{Reason: "stopped", ByName: e.StoppedBy, At: e.At}
	d.onLane(s, e.Seq, func(n int) (time.Duration, bool) { return d.closeOpen(ctx, s, th, dec, n) })
}

// closeOpen closes the session's open cards with dec, as closeCardID
// does each (attempt n, or retried where it is with n 0).
func (d *deliverer) closeOpen(ctx context.Context, s *session, th Thread, dec agent.Decision, n int) (time.Duration, bool) {
	var open []cardRecord
	s.cards.read(func(v *cardsRecord) { open = v.open() })
	done := true
	for _, cr := range open {
		wait, ok := d.closeCardID(ctx, s, th, cr.Card.ID, dec, n)
		if wait > 0 {
			return wait, false // the next attempt reads what is still open
		}
		done = ok && done
	}
	return 0, done
}

// History is implemented by platforms that can list a thread's earlier
// messages, oldest first, for the first request of a session.
type History interface {
	History(ctx context.Context, th Thread, before string, limit int) ([]agent.Quoted, error)
}

// Forgetter is implemented by platforms that keep state per thread in
// memory (who asked, a channel's pace, the console's live view): Forget
// drops what they keep of th, whose session went idle and left the
// router's memory; they read it again, or start afresh, if the thread
// comes back. A platform is told of every platform's threads and ignores
// the ones it does not know. Forget is called with the router's lock
// held: it must not call back into the router.
type Forgetter interface {
	Forget(th Thread)
}

// Forget drops a session's records from memory, to be read again from
// the store on the next use.
func (r *Router) Forget(key string) { r.out.forget(key) }

// idleSince reports whether the session has been idle since cutoff: no
// render or turn running, no open approval card, no use after cutoff,
// no budget's slot owed but the pin's. It returns the session's thread
// too, and when its board waits for a pin's slot, since when (pin).
func (s *session) idleSince(cutoff time.Time) (th Thread, idle bool, pin time.Time) {
	b := s.board
	b.mu.Lock()
	owesPin := len(b.asking) == 1 && b.asking[MethodPin] && len(b.granted) == 0
	busy := b.running || b.owesSlotLocked() && !owesPin || b.want.Stoppable || b.used.After(cutoff)
	th = b.rec.Thread
	if owesPin {
		if pin = b.pending; pin.IsZero() {
			pin = time.Now()
		}
	}
	b.mu.Unlock()
	s.cards.read(func(v *cardsRecord) { busy = busy || len(v.open()) > 0 })
	return th, !busy && !s.live.busy() && !s.unsettled.Load(), pin
}

// Delete archives a session as reset does and hides it from listings; a
// later message starts it again.
func (r *Router) Delete(ctx context.Context, key, by string) error {
	s := r.out.session(key, nil)
	if s == nil {
		return errors.New("chat: no such session")
	}
	if err := r.runner.Reset(ctx, key, by); err != nil {
		return err
	}
	r.out.archived(ctx, s, by, true)
	return nil
}
