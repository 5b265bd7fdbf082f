package chat

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

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
}

// Options configures a Router.
type Options struct {
	// Runner runs the sessions' turns (an *agent.Runner); required. The
	// router hears of their events as an agent.Subscriber (Observe).
	Runner    Runner
	Store     BoardStore
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
}

// Router maps threads to sessions, feeds their messages to the agent runner
// (which runs one turn at a time per session, threads in parallel) and
// renders the runner's events on each thread's plan board.
type Router struct {
	opts   Options
	runner Runner
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // board loops

	outbox *outbox // its queue is waited for beside wg

	mu     sync.Mutex // guards boards
	boards map[string]*Board
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
	ctx, cancel := context.WithCancel(context.Background())
	r := &Router{opts: opts, runner: opts.Runner, ctx: ctx, cancel: cancel, boards: map[string]*Board{}}
	r.outbox = newOutbox(r, opts.Outbox)
	return r
}

// Resume delivers the replies a previous process stored but did not
// deliver, and finishes the plan posts and edits it left, when the store
// can list board records. Call it once the platforms are connected.
//
// Every board whose wanted plan differs from what its message shows is
// resumed, whether or not the message exists yet: a first post still
// waiting for the platform's pace at the kill is posted and pinned now.
// The one case that can show a plan twice is a post the platform accepted
// just before the kill whose ref was not stored yet: the record has no
// ref, so it is posted again and the new message is the one pinned and
// edited; the first copy stays in the thread, unpinned (pins follow the
// stored ref). TestPostWithoutStoredRefIsRepeated pins that down.
func (r *Router) Resume(ctx context.Context) (int, error) {
	if bl, ok := r.opts.Store.(BoardLister); ok {
		var keys []string
		err := bl.Boards(ctx, func(key string, data []byte) {
			var rec boardRecord
			if json.Unmarshal(data, &rec) == nil && rec.Want != nil && (!rec.Ref.IsZero() || len(rec.Want.Items) > 0) && !sameContent(*rec.Want, rec.Shown) {
				keys = append(keys, key)
			}
		})
		if err != nil {
			r.opts.Logger.Error("list plan boards", "err", err)
		}
		for _, key := range keys {
			if b := r.Board(key); b != nil && b.platform != nil {
				b.set(func(*boardRecord, *Plan) {})
			}
		}
	}
	return r.outbox.resume(ctx)
}

// drainTimeout bounds how long Close lets plan boards finish their edits.
const drainTimeout = 5 * time.Second

// Close lets the plan boards and the outbox apply what they were given (up
// to five seconds, so a final "done" edit is not lost to a restart; replies
// not delivered by then stay stored for the next start), then stops them
// and waits. Call it after the runner has stopped publishing.
func (r *Router) Close() {
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		r.outbox.queue.Wait(context.Background())
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(drainTimeout):
	}
	r.cancel()
	<-done
}

// ErrRejected is returned by Handle for a message it answered itself
// instead of passing it on to the agent: a refused message, or a command
// (stop, reset). The error is a *Rejection saying which.
var ErrRejected = errors.New("chat: message rejected")

// Rejection is the error Handle returns for a message it answered itself.
// Refused is true when the message was not accepted (empty, too long, the
// database unavailable); Reason is what the thread was told.
type Rejection struct {
	Reason  string
	Refused bool
}

func (e *Rejection) Error() string        { return "chat: " + e.Reason }
func (e *Rejection) Is(target error) bool { return target == ErrRejected }

// Handle takes one user message. Empty and oversized messages are answered
// in the thread and not passed on; "stop" stops the running turn.
func (r *Router) Handle(ctx context.Context, in Incoming) error {
	th := in.Thread
	log := r.opts.Logger.With("session", th.Key)
	p := r.opts.Platforms[th.Platform]
	if p == nil {
		return fmt.Errorf("chat: no platform %q", th.Platform)
	}
	text := strings.TrimSpace(in.Text)
	answer := func(msg string, refused bool) error {
		if !in.Sync {
			r.outbox.add(th, in.MessageID, msg)
		}
		return &Rejection{Reason: msg, Refused: refused}
	}
	refuse := func(msg string) error { return answer(msg, true) }
	reply := func(msg string) error { return answer(msg, false) }
	in.Author = Shorten(strings.TrimSpace(in.Author), MaxAuthorRunes)
	switch n := utf8.RuneCountInString(text); {
	case invisible(text):
		return refuse("Your message was empty. Tell me the task, for example: `plan the release checklist for v2`.")
	case n > MaxMessageRunes:
		return refuse(fmt.Sprintf("Your message is %d characters long; the limit is %d. Please shorten it or split it.", n, MaxMessageRunes))
	}
	if strings.EqualFold(text, "stop") {
		msg := "Nothing is running in this thread."
		if b := r.Board(th.Key); b != nil {
			b.mu.Lock()
			rec := b.rec
			b.mu.Unlock()
			if rec.Running && !r.mayStop(th.Platform, rec, in.AuthorID) {
				return reply(stopRefusal(rec))
			}
		}
		if r.runner.Stop(th.Key, in.Author) {
			msg = "Stopping the current turn."
		}
		return reply(msg)
	}
	if strings.EqualFold(text, "reset") {
		return reply(r.reset(ctx, th, in))
	}
	isNew := !r.Known(th.Key)
	b := r.board(th.Key, &th)
	b.update(func(rec *boardRecord) {
		rec.Thread.Channel, rec.Thread.ThreadID = th.Channel, th.ThreadID
		if rec.Hidden {
			rec.Hidden, rec.Thread.Title = false, "" // a deleted thread written to again
		}
		if rec.Thread.Title == "" {
			rec.Thread.Title = Shorten(text, 80)
		}
		if in.MessageID != "" {
			rec.Trigger = in.MessageID
		}
		if rec.Starter == "" {
			// The session's first message (a new thread, or the first
			// after a reset). A session recorded before starters were
			// kept takes its last requester.
			rec.Starter = cmp.Or(rec.Requester, in.AuthorID)
		}
	})
	inb := agent.Inbound{Text: text, Author: in.Author, AuthorID: in.AuthorID}
	if isNew {
		inb.Context = r.threadContext(ctx, p, th, in.MessageID)
	}
	if err := r.runner.Submit(ctx, th.Key, inb); err != nil {
		log.Error("queue message", "err", err)
		return refuse("I couldn't accept your message right now (the bot is shutting down or its database is unavailable). Please send it again in a moment.")
	}
	return nil
}

// Board returns the session's board, loading its record; nil if the
// session has none.
func (r *Router) Board(key string) *Board { return r.board(key, nil) }

// Known reports whether the session exists (it has received a message).
func (r *Router) Known(key string) bool { return r.board(key, nil) != nil }

// Thread returns the session's thread as recorded by its board.
func (r *Router) Thread(key string) (Thread, bool) {
	b := r.board(key, nil)
	if b == nil {
		return Thread{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rec.Thread, true
}

func (r *Router) board(key string, th *Thread) *Board {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.boards[key]; ok {
		return b
	}
	var rec boardRecord
	raw, err := r.opts.Store.Board(r.ctx, key)
	if err != nil {
		r.opts.Logger.Error("load plan board", "session", key, "err", err)
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &rec); err != nil {
			r.opts.Logger.Error("decode plan board", "session", key, "err", err)
		}
	}
	if rec.Thread.Key == "" {
		if th == nil {
			return nil
		}
		rec.Thread = *th
	}
	b := &Board{key: key, platform: r.opts.Platforms[rec.Thread.Platform], store: r.opts.Store, hooks: r.opts.Hooks, owner: r,
		log: r.opts.Logger.With("session", key, "platform", rec.Thread.Platform), rec: rec, want: rec.Shown}
	if rec.Want != nil {
		b.want = *rec.Want
	}
	b.idle = sync.NewCond(&b.mu)
	if paced, ok := b.platform.(Paced); ok {
		b.limiter = paced.Limiter(rec.Thread)
	}
	r.boards[key] = b
	return b
}

var _ agent.Subscriber = (*Router)(nil)

// Observe implements agent.Subscriber: it renders the turns' events on the
// plan boards and approval cards.
func (r *Router) Observe(e agent.Event) {
	b := r.board(e.Session, nil)
	if b == nil || b.platform == nil {
		r.opts.Logger.Warn("event for a session without a platform", "session", e.Session, "kind", e.Kind)
		return
	}
	b.mu.Lock()
	th, trigger, indicated := b.rec.Thread, b.rec.Trigger, b.rec.Indicated
	b.mu.Unlock()
	log := b.log
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	switch e.Kind {
	case agent.TurnStarted:
		state := StateWorking
		if e.Resumed {
			state = StateResumed
		}
		b.set(func(rec *boardRecord, want *Plan) {
			rec.Indicated = trigger
			rec.Requester = e.Requester
			rec.Running = true
			if rec.Closed && rec.Final == nil && len(want.Items) > 0 {
				// A later turn on a finished plan: the plan message is
				// the thread's live plan again and carries the Stop
				// button; its final content is kept in case this turn
				// moves on to a new task (and a new message).
				final := *want
				rec.Final = &final
			}
			want.State, want.Updated = state, e.At
			want.Stoppable, want.StoppedBy, want.Activity = true, "", ""
		})
		if err := b.platform.Working(ctx, th, trigger, true); err != nil {
			log.Warn("show working indicator", "err", err)
		}
	case agent.PlanChanged:
		b.set(func(rec *boardRecord, want *Plan) {
			state := want.State
			if rec.Closed {
				if !sharesItem(want.Items, e.Plan.Items()) {
					// A new task after a plan whose run ended: a new
					// message; the old one stays in the thread with its
					// final footer, and is unpinned.
					// Always: an edit to "working" may be in flight, so
					// what the record says the message shows may lag.
					if rec.Final != nil && !rec.Ref.IsZero() {
						rec.Restore = append(rec.Restore, restoreEdit{Ref: rec.Ref, Plan: *rec.Final})
					}
					rec.Unpin = append(rec.Unpin, rec.Ref)
					rec.Ref, rec.Pinned, rec.Shown = MessageRef{}, false, Plan{}
				}
				rec.Closed, rec.Final = false, nil
				state = StateWorking
			}
			if state != StateResumed {
				state = StateWorking
			}
			activity := want.Activity
			*want = planFrom(e.Plan, e.Revision, state, e.At)
			want.Stoppable, want.Activity = true, activity
		})
	case agent.ToolStarted, agent.ToolEnded:
		b.set(func(_ *boardRecord, want *Plan) {
			want.Activity = ""
			if e.Kind == agent.ToolStarted {
				want.Activity = "running " + e.Tool
			}
		})
	case agent.ApprovalNeeded:
		b.set(func(_ *boardRecord, want *Plan) { want.State, want.Updated, want.Activity = StateWaiting, e.At, "" })
		if e.Approval != nil {
			r.showCard(ctx, b, th, *e.Approval)
		}
	case agent.ApprovalDecided:
		if e.Approval != nil && e.Decision != nil {
			r.closeCard(ctx, b, th, *e.Approval, *e.Decision)
		}
		b.set(func(_ *boardRecord, want *Plan) {
			if want.State == StateWaiting {
				want.State, want.Updated = StateWorking, e.At
			}
		})
	case agent.Replied:
		r.outbox.add(th, trigger, e.Text)
	case agent.TurnEnded:
		state := map[agent.Outcome]PlanState{agent.Done: StateDone, agent.Failed: StateFailed, agent.Stopped: StateStopped, agent.Limited: StateLimited}[e.Outcome]
		b.set(func(rec *boardRecord, want *Plan) {
			rec.Running, rec.Final = false, nil
			want.State, want.Updated = state, e.At
			want.Stoppable, want.Activity, want.StoppedBy = false, "", e.StoppedBy
			// The run is over (done, stopped, failed or at the round
			// limit): the next turn's plan gets its own message unless
			// it continues this one.
			rec.Closed = len(want.Items) > 0
		})
		r.closeOpenCards(ctx, b, th, e)
		if err := b.platform.Working(ctx, th, indicated, false); err != nil {
			log.Warn("clear working indicator", "err", err)
		}
		if e.Err != nil {
			log.Error("turn failed", "outcome", e.Outcome, "err", e.Err)
		}
		if e.Text != "" {
			r.outbox.add(th, trigger, e.Text)
		}
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
// (the turn was stopped or failed while they waited).
func (r *Router) closeOpenCards(ctx context.Context, b *Board, th Thread, e agent.Event) {
	b.mu.Lock()
	var open []cardRecord
	for _, cr := range b.rec.Cards {
		if cr.Card.Open() {
			open = append(open, cr)
		}
	}
	b.mu.Unlock()
	for _, cr := range open {
		d := agent.Decision{Reason: "stopped", ByName: e.StoppedBy, At: e.At}
		r.closeCardID(ctx, b, th, cr.Card.ID, d)
	}
}

// History is implemented by platforms that can list a thread's earlier
// messages, oldest first, for the first request of a session.
type History interface {
	History(ctx context.Context, th Thread, before string, limit int) ([]agent.Quoted, error)
}

// threadContext returns up to Options.ThreadContext messages of the thread
// before the one that starts its session, when the platform can list them.
func (r *Router) threadContext(ctx context.Context, p Platform, th Thread, before string) []agent.Quoted {
	h, ok := p.(History)
	if !ok || r.opts.ThreadContext <= 0 || before == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msgs, err := h.History(ctx, th, before, r.opts.ThreadContext)
	if err != nil {
		r.opts.Logger.Warn("read the thread's earlier messages; starting without them", "session", th.Key, "err", err)
		return nil
	}
	return msgs
}

// reset archives the session (stopping its turn first, with the same
// rules as stop) and takes the plan message down: unpinned, left in the
// thread. It returns what to tell the thread.
func (r *Router) reset(ctx context.Context, th Thread, in Incoming) string {
	b := r.Board(th.Key)
	if b == nil {
		return "There is nothing to reset in this thread yet."
	}
	b.mu.Lock()
	rec := b.rec
	b.mu.Unlock()
	if !r.mayReset(th.Platform, rec, in.AuthorID) {
		return "Only " + mention(starter(rec)) + ", who started this thread's session, or an approver can reset it."
	}
	if err := r.archive(ctx, b, in.Author, false); err != nil {
		r.opts.Logger.Error("reset session", "session", th.Key, "err", err)
		return "I couldn't reset this thread (the bot's log has the details). Nothing was changed."
	}
	r.opts.Logger.Info("session reset", "session", th.Key, "by", in.Author)
	return "Started fresh: the earlier conversation and plan are archived (kept in the database), and the plan message is unpinned. Your next message begins a new session here."
}

// Evict drops from memory the boards of sessions idle for longer than
// idle: no render running, no turn running, no open approval card. Their
// records stay in the store and load again on the next event. It returns
// how many were dropped.
func (r *Router) Evict(idle time.Duration) int {
	cutoff := time.Now().Add(-idle)
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for key, b := range r.boards {
		b.mu.Lock()
		busy := b.running || b.want.Stoppable || b.used.After(cutoff)
		for _, cr := range b.rec.Cards {
			busy = busy || cr.Card.Open()
		}
		b.mu.Unlock()
		if !busy {
			delete(r.boards, key)
			n++
		}
	}
	return n
}

// Forget drops a session's board from memory (its session was deleted).
func (r *Router) Forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.boards, key)
}

// Visible reports whether a session exists and was not deleted.
func (r *Router) Visible(key string) bool {
	b := r.Board(key)
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.rec.Hidden
}

// Rename sets a session's title (shown in listings).
func (r *Router) Rename(key, title string) (Thread, bool) {
	b := r.Board(key)
	if b == nil {
		return Thread{}, false
	}
	title = Shorten(strings.Join(strings.Fields(title), " "), 80)
	var th Thread
	b.update(func(rec *boardRecord) {
		if title != "" {
			rec.Thread.Title = title
		}
		th = rec.Thread
	})
	return th, true
}

// Delete archives a session as reset does and hides it from listings; a
// later message starts it again.
func (r *Router) Delete(ctx context.Context, key, by string) error {
	b := r.Board(key)
	if b == nil {
		return errors.New("chat: no such session")
	}
	return r.archive(ctx, b, by, true)
}

// archive is reset's and Delete's one path: the runner archives the
// session (stopping its turn first), open cards are closed as not run,
// and the board starts over: the plan message is unpinned and left in
// the thread, and everything the record knew of the old session goes.
// hidden also takes the session out of the console's listing.
func (r *Router) archive(ctx context.Context, b *Board, by string, hidden bool) error {
	b.mu.Lock()
	th := b.rec.Thread
	b.mu.Unlock()
	if err := r.runner.Reset(ctx, th.Key, by); err != nil {
		return err
	}
	r.closeOpenCards(ctx, b, th, agent.Event{StoppedBy: by, At: r.opts.Now()})
	b.set(func(rec *boardRecord, want *Plan) {
		unpin := rec.Unpin
		if !rec.Ref.IsZero() {
			unpin = append(unpin, rec.Ref)
		}
		*rec = boardRecord{Thread: rec.Thread, Trigger: rec.Trigger, Indicated: rec.Indicated, Unpin: unpin, Restore: rec.Restore, Hidden: hidden}
		*want = Plan{}
	})
	return nil
}
