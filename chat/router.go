package chat

import (
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

	"go.opentelemetry.io/otel/trace"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/serial"
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

// Router maps threads to sessions, feeds their messages to the agent runner
// (which runs one turn at a time per session, threads in parallel) and
// renders the runner's events on each thread's plan board and approval
// cards.
type Router struct {
	opts      Options
	caps      map[string]Caps // each platform's, by name (Platform.Caps)
	runner    Runner
	cards     CardStore
	listings  ListingStore
	followUps FollowUpStore
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup // board loops
	// closing: Close has begun, and a budget's slot that comes now
	// starts no board loop (Board.slot); closeMu orders the two.
	closeMu sync.RWMutex
	closing bool

	logs LogStore // nil: no log to read, cursors in memory
	// delivery is the sessions' deliverers (deliver.go), by session key;
	// waited for before the rest.
	delivery serial.Queue

	// lane is each session's sends, by session key, one at a time and
	// in order: the plan board's posts, edits and pins (Board.loop), the
	// replies (outbox), the live answer. A reply that must come after
	// the plan's state shows it first, on the lane (Board.showFirst).
	// Waited for beside wg.
	lane   serial.Queue
	outbox *outbox
	// statuses sends the sessions' status moves (status.go), by session
	// key; waited for beside wg.
	statuses serial.Queue
	tracer   trace.Tracer // from Options.Tracer

	mu       sync.Mutex // guards sessions
	sessions map[string]*session
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
	ctx, cancel := context.WithCancel(context.Background())
	r := &Router{opts: opts, runner: opts.Runner, cards: opts.Cards, listings: opts.Listings, ctx: ctx, cancel: cancel, sessions: map[string]*session{}}
	// What is not given is kept in this process's memory: said by the
	// caller, never guessed from Store's methods (a store whose
	// signatures drift would fall back without a word).
	if r.cards == nil {
		r.cards = &memRecords{}
	}
	if r.listings == nil {
		r.listings = &memRecords{}
	}
	r.followUps = opts.FollowUps
	if r.followUps == nil {
		r.followUps = &memFollowUps{boards: opts.Store, now: opts.Now}
	}
	r.caps = make(map[string]Caps, len(opts.Platforms))
	for name, p := range opts.Platforms {
		r.caps[name] = p.Caps()
	}
	r.logs = opts.Log
	r.outbox = newOutbox(r, opts.Outbox)
	r.tracer = newTracer(opts.Tracer)
	return r
}

// BoardPending reports whether a stored plan board record has work its
// loop did not finish: content its message does not show yet (a post or
// an edit a stop cut short), a posted message not pinned yet, or earlier
// messages still to restore or unpin.
func BoardPending(data []byte) bool {
	var rec boardRecord
	if json.Unmarshal(data, &rec) != nil {
		return false
	}
	return rec.pending()
}

func (rec *boardRecord) pending() bool {
	if len(rec.Restore) > 0 || len(rec.Unpin) > 0 || (!rec.Ref.IsZero() && !rec.Pinned && !rec.PinUnavailable) {
		return true
	}
	return rec.Want != nil && (!rec.Ref.IsZero() || len(rec.Want.Items) > 0) && !sameContent(*rec.Want, rec.Shown)
}

// drainTimeout bounds how long Close lets plan boards finish their edits.
const drainTimeout = 5 * time.Second

// Close lets the deliverers, the plan boards and the outbox apply what they were given (up
// to five seconds, so a final "done" edit is not lost to a restart; replies
// not delivered by then stay stored for the next start), then stops them
// and waits. Call it after the runner has stopped publishing.
func (r *Router) Close() {
	r.closeMu.Lock()
	r.closing = true
	r.closeMu.Unlock()
	done := make(chan struct{})
	go func() {
		r.delivery.Wait(context.Background())
		r.settleCursors()
		r.wg.Wait()
		r.lane.Wait(context.Background())
		r.statuses.Wait(context.Background())
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

// Handle takes one user message. Empty and oversized messages are answered
// in the thread and not passed on; "stop" stops the running turn. A
// follow-up of a thread without a session waits for one (Hold); the
// first message of a session is followed by the follow-ups that waited.
func (r *Router) Handle(ctx context.Context, in Incoming) error {
	th := in.Thread
	log := r.opts.Logger.With("session", th.Key)
	p := r.opts.Platforms[th.Platform]
	if p == nil {
		return fmt.Errorf("chat: no platform %q", th.Platform)
	}
	if in.FollowUp && !r.Known(th.Key) {
		// Nothing is said in a thread pinplan may never be part of, so a
		// hold that fails is only logged (by the caller).
		if held, err := r.Hold(ctx, in); err != nil || held {
			return err
		}
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
	// private refuses a command to its author alone (DESIGN §16).
	private := func(msg string) error {
		if in.AuthorID == "" {
			return reply(msg)
		}
		if !in.Sync {
			r.outbox.addPrivate(th, in.AuthorID, msg)
		}
		return &Rejection{Reason: msg, Private: true}
	}
	in.Author = Shorten(strings.TrimSpace(in.Author), MaxAuthorRunes)
	n := utf8.RuneCountInString(text)
	empty := invisible(text) && len(in.Files) == 0 // a file alone is a message
	command := empty || n > MaxMessageRunes || strings.EqualFold(text, "stop") || strings.EqualFold(text, "reset")
	if command && r.seenBefore(ctx, in) {
		log.Info("command seen before; ignored", "event", in.Event)
		return nil
	}
	switch {
	case empty:
		return refuse("Your message was empty. Tell me the task, for example: `plan the release checklist for v2`.")
	case n > MaxMessageRunes:
		return refuse(fmt.Sprintf("Your message is %d characters long; the limit is %d. Please shorten it or split it.", n, MaxMessageRunes))
	}
	if strings.EqualFold(text, "stop") {
		msg := "Nothing is running in this thread."
		if b := r.Board(th.Key); b != nil {
			// Checked whether or not the board has seen the turn start
			// yet: the runner can stop a turn a moment before its
			// TurnStarted reaches the board.
			rec, _ := b.state()
			t := r.turn(ctx, th.Key)
			if !r.mayStop(th.Platform, rec, t, in.AuthorID) {
				if !t.Running {
					return reply(msg)
				}
				return private(stopRefusal(rec, t))
			}
		}
		if r.runner.Stop(th.Key, in.Author) {
			msg = "Stopping the current turn."
		}
		return reply(msg)
	}
	if strings.EqualFold(text, "reset") {
		msg, refused := r.reset(ctx, th, in)
		if refused {
			return private(msg)
		}
		return reply(msg)
	}
	isNew := !r.Known(th.Key)
	s := r.session(th.Key, &th)
	got := s.board.received(th, in)
	var relist bool // saved only when it changes: most messages leave it
	s.listing.read(func(l *listingRecord) { relist = l.Hidden || l.Title == "" })
	if relist {
		s.listing.update(func(l *listingRecord) {
			if l.Hidden {
				l.Hidden, l.Title = false, "" // a deleted thread written to again
			}
			if l.Title == "" {
				l.Title = Shorten(text, 80)
			}
		})
	}
	inb := agent.Inbound{Text: text, Author: in.Author, AuthorID: in.AuthorID, Event: in.Event, Files: in.Files, Handed: in.Handed}
	if isNew {
		inb.Context = r.threadContext(ctx, th, in.MessageID)
	}
	err := r.runner.Submit(ctx, th.Key, inb)
	if errors.Is(err, agent.ErrDuplicate) {
		log.Info("message queued before; ignored", "event", in.Event)
		s.board.unreceive(in, got)
		return nil
	}
	if err != nil {
		log.Error("queue message", "err", err)
		return refuse("I couldn't accept your message right now (the bot is shutting down or its database is unavailable). Please send it again in a moment.")
	}
	if isNew {
		r.takeFollowUps(ctx, in)
	}
	return nil
}

// seenBefore reports whether a command's event was seen before. A
// command is not queued, so the store does not deduplicate it: this
// does, before it runs, so that a redelivered stop or reset runs once.
func (r *Router) seenBefore(ctx context.Context, in Incoming) bool {
	if in.Event == "" || r.opts.Dedupe == nil {
		return false
	}
	first, err := r.opts.Dedupe.FirstSeen(ctx, in.Event, agent.EventTTL)
	if err != nil {
		r.opts.Logger.Warn("dedupe a command", "event", in.Event, "err", err)
		return false
	}
	return !first
}

// Board returns the session's board, loading its records; nil if the
// session has none.
func (r *Router) Board(key string) *Board { return r.board(key, nil) }

// Known reports whether the session exists (it has received a message).
func (r *Router) Known(key string) bool { return r.session(key, nil) != nil }

// Thread returns the session's thread as recorded by its board, with the
// title it is listed under.
func (r *Router) Thread(key string) (Thread, bool) {
	s := r.session(key, nil)
	if s == nil {
		return Thread{}, false
	}
	rec, _ := s.board.state()
	th := rec.Thread
	s.listing.read(func(l *listingRecord) { th.Title = l.Title })
	return th, true
}

// board returns the session's board, loading its records; with th, a
// session it has none of starts in that thread.
func (r *Router) board(key string, th *Thread) *Board {
	if s := r.session(key, th); s != nil {
		return s.board
	}
	return nil
}

// turnOver does what the router does when a turn ends, besides the board
// and the reply: the cards still open are closed, the working indicator
// goes.
func (r *Router) turnOver(ctx context.Context, s *session, th Thread, indicated string, e agent.Event) {
	b := s.board
	r.closeOpenCards(ctx, s, th, e)
	if !b.showsSessions() {
		r.working(b, th, indicated, false)
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
// (the turn was stopped or failed while they waited).
func (r *Router) closeOpenCards(ctx context.Context, s *session, th Thread, e agent.Event) {
	var open []cardRecord
	s.cards.read(func(v *cardsRecord) { open = v.open() })
	for _, cr := range open {
		d := agent.Decision{Reason: "stopped", ByName: e.StoppedBy, At: e.At}
		r.closeCardID(ctx, s, th, cr.Card.ID, d)
	}
}

// History is implemented by platforms that can list a thread's earlier
// messages, oldest first, for the first request of a session.
type History interface {
	History(ctx context.Context, th Thread, before string, limit int) ([]agent.Quoted, error)
}

// threadContext returns up to Options.ThreadContext messages of the thread
// before the one that starts its session, when the platform can list them.
func (r *Router) threadContext(ctx context.Context, th Thread, before string) []agent.Quoted {
	h := r.caps[th.Platform].History
	if h == nil || r.opts.ThreadContext <= 0 || before == "" {
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
// thread. It returns what to tell the thread, or with refused what to
// tell the one who may not reset it, privately.
func (r *Router) reset(ctx context.Context, th Thread, in Incoming) (msg string, refused bool) {
	s := r.session(th.Key, nil)
	if s == nil {
		return "There is nothing to reset in this thread yet.", false
	}
	rec, _ := s.board.state()
	t := r.turn(ctx, th.Key)
	if !r.mayReset(th.Platform, rec, t, in.AuthorID) {
		return "Only " + mention(startedBy(rec, t)) + ", who started this thread's session, or an approver can reset it.", true
	}
	if err := r.archive(ctx, s, in.Author, false); err != nil {
		r.opts.Logger.Error("reset session", "session", th.Key, "err", err)
		return "I couldn't reset this thread (the bot's log has the details). Nothing was changed.", false
	}
	r.opts.Logger.Info("session reset", "session", th.Key, "by", in.Author)
	return "Started fresh: the earlier conversation and plan are archived (kept in the database), and the plan message is unpinned. Your next message begins a new session here.", false
}

// Evict drops from memory the boards of sessions idle for longer than
// idle: no render running, no turn running, no open approval card. Their
// records stay in the store and load again on the next event. Every
// platform that keeps state of its own per thread (Forgetter) is told,
// not only the session's: the console mirrors the others' plans. It
// returns how many were dropped.
func (r *Router) Evict(idle time.Duration) int {
	cutoff := time.Now().Add(-idle)
	var gone []Thread
	r.mu.Lock()
	for key, s := range r.sessions {
		if th, idle := s.idleSince(cutoff); idle {
			s.board.stop()
			delete(r.sessions, key)
			gone = append(gone, th)
		}
	}
	// Still under r.mu: a session that comes back now loads after its
	// platforms forgot the old state, so what they are told of it through
	// the router comes after the forgetting. What an adapter notes before
	// it hands a message to the router (Slack's author, Discord's channel
	// type) can still be forgotten at that moment: it is read again.
	r.tellForgotten(gone)
	r.mu.Unlock()
	return len(gone)
}

// tellForgotten tells every Forgetter platform that the sessions of
// threads left memory. The caller holds r.mu.
func (r *Router) tellForgotten(threads []Thread) {
	for _, c := range r.caps {
		if c.Forget != nil {
			for _, th := range threads {
				c.Forget.Forget(th)
			}
		}
	}
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
func (r *Router) Forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.sessions[key]; ok {
		s.board.stop()
		delete(r.sessions, key)
	}
}

// Deleted drops a session that retention deleted from the store (a
// deletion that began at since) and, when it was in memory, tells the
// platforms as Evict does: Evict never sees it again, so what they keep
// of its thread would otherwise stay. A session in use again since then
// (a message came after its records went) is left as it is, by the
// test Evict uses: it runs on, and eviction takes it when it is idle.
func (r *Router) Deleted(key string, since time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sessions[key]
	if !ok {
		return
	}
	th, idle := s.idleSince(since)
	if !idle {
		// Its log and cursor went with its records: the entries of its
		// new turn are numbered from 1 again. The deliverer starts over
		// from the store's cursor, and catches up what it has passed
		// over as applied already meanwhile.
		r.delivery.Add(key, func() {
			if r.current(s) {
				s.cursor = cursor{}
				r.catchUpNow(s)
			}
		})
		return
	}
	s.board.stop()
	delete(r.sessions, key)
	r.tellForgotten([]Thread{th})
}

// idleSince reports whether the session has been idle since cutoff: no
// render or turn running, no open approval card, no use after cutoff.
// It returns the session's thread too.
func (s *session) idleSince(cutoff time.Time) (Thread, bool) {
	b := s.board
	b.mu.Lock()
	busy := b.running || b.owesSlotLocked() || b.want.Stoppable || b.used.After(cutoff)
	th := b.rec.Thread
	b.mu.Unlock()
	s.cards.read(func(v *cardsRecord) { busy = busy || len(v.open()) > 0 })
	return th, !busy && !s.live.busy() && !s.unsettled.Load()
}

// Delete archives a session as reset does and hides it from listings; a
// later message starts it again.
func (r *Router) Delete(ctx context.Context, key, by string) error {
	s := r.session(key, nil)
	if s == nil {
		return errors.New("chat: no such session")
	}
	return r.archive(ctx, s, by, true)
}

// archive is reset's and Delete's one path: the runner archives the
// session (stopping its turn first), open cards are closed as not run, the
// board starts over (the plan message is unpinned and left in the thread)
// and the cards of the old session go. hidden also takes the session out
// of the console's listing; its title stays.
func (r *Router) archive(ctx context.Context, s *session, by string, hidden bool) error {
	rec, _ := s.board.state()
	th := rec.Thread
	if err := r.runner.Reset(ctx, th.Key, by); err != nil {
		return err
	}
	// What the stopped turn logged (its end, its decided cards) is shown
	// before the board starts over.
	r.Flush(th.Key)
	r.closeOpenCards(ctx, s, th, agent.Event{StoppedBy: by, At: r.opts.Now()})
	s.board.reset()
	s.cards.update(func(v *cardsRecord) { *v = cardsRecord{} })
	s.listing.update(func(l *listingRecord) { l.Hidden = hidden })
	return nil
}
