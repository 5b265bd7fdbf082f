package chat

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/serial"
)

// The way back (DESIGN.md §1). Everything a turn does to its thread is an
// entry of the session's log (agent.LogEntry), committed by the agent with
// the round that caused it. Each session has one deliverer: the session's
// key on the router's delivery queue, which applies the log's entries in
// order, from a cursor kept in the store (LogStore.Delivered), onto the
// platform: the plan board (post and pin first, then coalesced edits),
// the approval cards, the session's status and working indicator, and the
// turn's answer through the outbox.
//
// The agent publishes each entry once it is committed; Observe only queues
// it, so the agent never waits on a platform. An entry this process did
// not see (it was committed before a kill -9, or by another replica that
// held the session) is read from the log: the deliverer goes on from its
// cursor, and there is nothing to reconcile.
//
// Applying an entry hands its effect to the stage that sends it, durably:
// the board records the content it wants before it posts or edits, the
// outbox stores the answer before it sends it. The cursor moves once that
// is done; a card's post or close, queued on the session's lane, holds
// the stored cursor before its entry until it is sent (onLane). So an
// entry is applied at least once; applying one again is
// harmless (the board wants the same content, a card is posted once, an
// answer is stored under its entry's number once, and sent only after
// the cursor has moved past it).
//
// Events that are not logged (Seq 0: a tool call in progress, a resumed
// turn's start, a failure to read or save the session) are applied in
// their place in the queue and mean nothing after a restart.
//
// Following one event from a mention to the plan edit and back:
// adapter -> Router.Handle (message.submit) -> agent.Runner.Submit -> a
// round commits its entries -> agent.EventService.Publish ->
// Router.Observe -> deliverer.Observe (queued on the session's key of
// the delivery queue) -> deliverer.deliverEvent -> deliverer.catchUp
// (the entries past the cursor) -> deliverer.apply -> Board.planChanged
// (wanted content recorded) -> Board.loop, queued on the session's lane
// -> Board.pace (the platform's budget, by priority) -> Board.apply ->
// Platform.EditPlan. The turn's answer: deliverer.apply (TurnEnded)
// stores it (outbox.hold) -> deliverer.release, once the cursor is saved
// past its entry -> outbox.send, on the lane behind the board's loop,
// once the plan message shows the turn's final state (Board.showFirst),
// within the channel's post budget -> Platform.Reply. A click on an
// approval card: adapter -> Router.Click (rules.mayDecide) ->
// Runner.Decide (the agent logs the decision and starts the tool) -> the
// entry comes back through deliverer.apply -> deliverer.onLane, queued on
// the session's lane -> deliverer.closeCard -> Caps.Cards.EditCard ->
// deliverer.paid, back on the delivery queue: the cursor may pass it. A
// status move or the working indicator: deliverer.apply ->
// Board.turnStarted or turnOver -> deliverer.queueMove,
// tidy-up on the session's lane (serial.Queue.AddIdle), after everything
// else queued there -> SessionStatus.SetSessionStatus or
// Platform.Working, a failed move's next attempt queued after its backoff
// (serial.Queue.Later), the session's later moves behind it. With
// replicas, a mention that reaches a replica not holding the session is
// handed to the session's owner; the rest is the same.

// LogStore reads the sessions' logs and keeps their delivery cursors.
// store.DB and etcdstore.Store implement it.
type LogStore interface {
	// Log returns the entries of session key's log numbered above
	// after, oldest first.
	Log(ctx context.Context, key string, after int64) ([]agent.LogEntry, error)
	// Delivered returns the session's cursor: the number of the last
	// entry delivered, 0 for none.
	Delivered(ctx context.Context, key string) (int64, error)
	// SaveDelivered stores the session's cursor; a store shared by
	// replicas fences it by the session's owner.
	SaveDelivered(ctx context.Context, key string, seq int64) error
	// Undelivered lists the sessions whose log goes past its cursor,
	// from an index the store keeps as it writes both: a start reads
	// only those logs.
	Undelivered(ctx context.Context) ([]string, error)
}

// cursor is a session's delivery cursor in memory. It is used only on the
// session's key of the delivery queue, one function at a time.
type cursor struct {
	loaded bool
	seq    int64 // last entry applied
	saved  int64 // last one stored
	// saving: a save of seq is queued behind the entries queued so far,
	// so that one write covers a round's entries.
	saving bool
	// held are the answers of entries applied past the saved cursor,
	// stored in the outbox, in order: sent once the cursor is saved.
	held []queued
	// have names the entries whose answer a previous process stored
	// (Resume), so that a catch-up retried later does not store it again.
	have map[int64]bool
	// retrying: a read of the cursor or the log, or a save, failed, and
	// a catch-up from the cursor is queued after a backoff (failures in
	// a row).
	retrying bool
	failures int
	// owed are the entries whose cards wait on the session's lane to be
	// posted or closed (onLane): the cursor is not stored past the
	// oldest, and the answers from it on wait for it, so that a card is
	// in the thread before its entry is passed and before a later answer.
	owed map[int64]*int // the token of the send owed (onLane)
	// ended is the newest turn whose end was applied: a resumed turn's
	// start (not logged) that comes off the queue after a catch-up read
	// that turn's end from the log is stale, and is dropped.
	ended int64
}

// deliverer is the way back (DESIGN §1): it keeps the sessions in
// memory, applies each one's log to its thread from its cursor on the
// session's key of the delivery queue, and sends what that asks for on
// the session's lane, one send at a time: the plan board's loop, the
// replies of the outbox, the live answer, and as tidy-up, when nothing
// else waits, the status moves and the working indicator (queueMove), so
// that what only tidies up never holds up what people read. The router
// (the way in) hands it nothing but the events the agent publishes and
// the sessions it looks up.
type deliverer struct {
	opts     Options
	caps     map[string]Caps
	cards    CardStore
	listings ListingStore
	logs     LogStore // nil: no log to read, cursors in memory
	tracer   trace.Tracer
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup // board loops
	// closing: Close has begun, and a budget's slot that comes now
	// starts no board loop (Board.slot); closeMu orders the two.
	closeMu sync.RWMutex
	closing bool

	// delivery applies the sessions' log entries, by session key;
	// waited for before the rest.
	delivery serial.Queue
	// lane is each session's sends, by session key, one at a time and in
	// order: the plan board's posts, edits and pins (Board.loop), the
	// replies (outbox), the live answer; the status moves and the
	// working indicator last (serial.Queue.AddIdle). A reply that must
	// come after the plan's state shows it first, on the lane
	// (Board.showFirst).
	lane   serial.Queue
	outbox *outbox
	// moves are the sessions' status moves and working indicator not
	// made yet, by session key, oldest first (queueMove): tidy-up on the
	// lane.
	movesMu sync.Mutex
	moves   map[string][]move
	// movesIdle is closed, and set to nil, when moves becomes empty; nil
	// while no one waits (waitMoves).
	movesIdle chan struct{}

	mu       sync.Mutex // guards sessions and pins
	sessions map[string]*session
	// pins are the sessions that left memory while they waited for a
	// pin's slot (evict): each waits in the pin budget as a key, and
	// its session loads again when the slot comes (pinDue). The cancel
	// takes it out of the budget.
	pins map[string]context.CancelFunc
}

func newDeliverer(opts Options, caps map[string]Caps) *deliverer {
	ctx, cancel := context.WithCancel(context.Background())
	d := &deliverer{opts: opts, caps: caps, cards: opts.Cards, listings: opts.Listings, logs: opts.Log,
		tracer: newTracer(opts.Tracer), ctx: ctx, cancel: cancel, sessions: map[string]*session{}, pins: map[string]context.CancelFunc{}}
	// What is not given is kept in this process's memory: said by the
	// caller, never guessed from Store's methods.
	if d.cards == nil {
		d.cards = &memRecords{}
	}
	if d.listings == nil {
		d.listings = &memRecords{}
	}
	d.outbox = newOutbox(d, opts.Outbox)
	return d
}

// drainTimeout bounds how long Close lets plan boards finish their edits.
const drainTimeout = 5 * time.Second

// close lets the deliverers, the plan boards and the outbox apply what
// they were given, for up to drainTimeout, then stops them and waits.
func (d *deliverer) close() {
	d.closeMu.Lock()
	d.closing = true
	d.closeMu.Unlock()
	done := make(chan struct{})
	go func() {
		d.delivery.Wait(context.Background())
		d.settleCursors()
		d.wg.Wait()
		d.lane.Wait(context.Background())
		d.waitMoves()                         // those waiting for a budget's slot or their next attempt
		d.delivery.Wait(context.Background()) // the outcomes of the cards' sends made on the lane (paid)
		d.settleCursors()
		d.lane.Wait(context.Background()) // the answers they released
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(drainTimeout):
	}
	d.cancel()
	<-done
	// A board that owes a budget's slot it will not get now has nobody
	// to wake those waiting for it (Board.Wait).
	d.mu.Lock()
	for _, s := range d.sessions {
		s.board.mu.Lock()
		s.board.idle.Broadcast()
		s.board.mu.Unlock()
	}
	d.mu.Unlock()
}

// maxDeliveryBackoff bounds the wait before a failed read of a session's
// log or cursor, or a failed save of its cursor, is tried again.
const maxDeliveryBackoff = 30 * time.Second

// Observe implements agent.Subscriber: the event goes on its session's
// deliverer, and Observe returns at once.
func (d *deliverer) Observe(e agent.Event) {
	if d.ctx.Err() != nil {
		return // shutting down: the next start goes on from the cursor
	}
	d.delivery.Add(e.Session, func() { d.deliverEvent(e) })
}

// Flush waits until the session's deliverer has applied every event
// queued for it so far, and stored its cursor, or the router is closed.
// It must not be called from the delivery queue itself.
func (d *deliverer) Flush(key string) {
	done := make(chan struct{})
	d.delivery.Add(key, func() {
		defer close(done)
		d.mu.Lock()
		s := d.sessions[key]
		d.mu.Unlock()
		if s != nil && s.cursor.loaded {
			if !d.settleCursor(s, &s.cursor) {
				d.retryLater(s)
			}
			d.noteCursor(s)
		}
	})
	select {
	case <-done:
	case <-d.ctx.Done():
	}
}

// deliverEvent applies one published event on its session's deliverer.
func (d *deliverer) deliverEvent(e agent.Event) {
	if d.ctx.Err() != nil {
		return
	}
	s := d.session(e.Session, nil)
	if s == nil || s.board.platform == nil {
		d.opts.Logger.Warn("event for a session without a platform", "session", e.Session, "kind", e.Kind)
		return
	}
	if e.Seq == 0 {
		if e.Kind == agent.TurnStarted && e.Resumed && e.Turn > 0 && e.Turn <= s.cursor.ended {
			s.board.log.Info("resumed turn's start dropped: its end is applied already", "turn", e.Turn)
			return
		}
		d.outbox.enqueue(e.Session, d.apply(s, e, nil)...)
		return
	}
	defer d.noteCursor(s)
	c := d.cursorOf(s)
	if c == nil {
		d.retryLater(s) // the cursor could not be read (logged)
		return
	}
	if e.Seq <= c.seq {
		return // applied already
	}
	if e.Seq > c.seq+1 {
		// Entries this process did not see: read them from the log.
		// What they and e bring the board to is shown, not a state in
		// the middle.
		s.board.hold()
		defer s.board.unhold()
		replies, err := d.catchUp(s, c, e.Seq-1)
		d.release(s, c, replies)
		if e.Seq <= c.seq {
			return
		}
		if err != nil || e.Seq > c.seq+1 {
			// The log could not be read (logged): applying e now would
			// skip what came before it for good. The catch-up tried
			// again in a moment reads it all from the cursor.
			d.retryLater(s)
			return
		}
	}
	replies := d.apply(s, e, nil)
	s.board.startUnshown() // before its replies: they wait for what the fold left
	if d.ctx.Err() != nil {
		return // shut down while applying it: the next start applies it again (catchUp)
	}
	c.seq = e.Seq
	if len(replies) > 0 || e.Kind == agent.TurnEnded || len(c.held) > 0 {
		d.release(s, c, replies)
		return
	}
	d.saveCursorLater(s, c)
}

// release sends the answers of the entries applied so far once the
// cursor is stored past them: a restart never stores one twice, nor
// sends it again. When the save fails they wait, in order and stored,
// for the save tried again in a moment (or for the next start).
func (d *deliverer) release(s *session, c *cursor, replies []queued) {
	c.held = append(c.held, replies...)
	if !d.settleCursor(s, c) {
		d.retryLater(s)
		return
	}
	// In order, up to the first that comes after a card still to be sent.
	n := 0
	for n < len(c.held) && !c.owes(c.held[n].item.Seq) {
		n++
	}
	ready := c.held[:n]
	c.held = slices.Clone(c.held[n:])
	d.outbox.enqueue(s.board.key, ready...)
}

// onLane queues send, what entry seq does to the thread besides the plan
// and the answer (a card posted or closed), on the session's lane, behind
// what the session sends already. send makes its n-th attempt and
// returns how long to wait before the next one, or whether it is done,
// false when it is left to the next deliverer (a shutdown, another
// replica holding the session now). A wait is off the lane
// (serial.Queue.Later): what the session sends meanwhile goes first.
//
// Until it is done the cursor is not stored past seq, and the answers of
// entries from seq on wait (paid), so a card is in the thread before its
// entry is passed, after a kill -9 too. A send left to the next process
// by a shutdown stays owed: the cursor is stored before it, and the next
// start applies the entry again. One left to another replica is paid all
// the same: the cursor's save is that replica's. A session forgotten
// before its send's turn sends nothing: its cursor was not stored past
// seq, so whoever loads it next applies the entry again.
func (d *deliverer) onLane(s *session, seq int64, send func(n int) (time.Duration, bool)) {
	key := s.board.key
	tok := new(int) // a cursor started over since (deleted) owes nothing of it
	if seq > 0 {
		c := &s.cursor
		if c.owed == nil {
			c.owed = map[int64]*int{}
		}
		c.owed[seq] = tok
	}
	archives := s.archives.Load()
	var run func(n int)
	run = func(n int) {
		if d.ctx.Err() != nil || !d.current(s) {
			return // shut down (owed still), or forgotten
		}
		wait, done := time.Duration(0), true
		if s.archives.Load() == archives { // else archived since: its cards went with it
			wait, done = send(n)
		}
		if wait > 0 && d.ctx.Err() == nil {
			d.lane.Later(d.ctx, key, wait, func() { run(n + 1) })
			return
		}
		if (done || d.ctx.Err() == nil) && seq > 0 {
			d.delivery.Add(key, func() { d.paid(s, seq, tok) })
		}
	}
	d.lane.Add(key, func() { run(1) })
}

// paid is told, on the session's deliverer, that entry seq's sends on the
// lane are done: the cursor may be stored past it, and the answers that
// waited for it go.
func (d *deliverer) paid(s *session, seq int64, tok *int) {
	c := &s.cursor
	if c.owed[seq] != tok {
		return
	}
	delete(c.owed, seq)
	if d.ctx.Err() != nil || !d.current(s) {
		return // the next start applies the entry again, which changes nothing
	}
	d.release(s, c, nil)
	d.noteCursor(s)
}

// storable is the newest entry the cursor may be stored at: the one
// before the oldest entry still owed, or the last one applied.
func (c *cursor) storable() int64 {
	to := c.seq
	for seq := range c.owed {
		to = min(to, seq-1)
	}
	return to
}

// owes reports whether an entry at or before seq still owes a send on the
// lane; an item of no entry (seq 0) owes nothing.
func (c *cursor) owes(seq int64) bool {
	if seq == 0 {
		return false
	}
	for o := range c.owed {
		if o <= seq {
			return true
		}
	}
	return false
}

// retryLater queues a catch-up of the session from its cursor after a
// backoff, on its deliverer: a read or a save that failed (a store that
// failed once, an etcd election) is tried again without waiting for the
// session's next event, which may never come once its turn has ended.
func (d *deliverer) retryLater(s *session) {
	c := &s.cursor
	if c.retrying {
		return
	}
	c.retrying = true
	c.failures++
	wait := d.backoff(maxDeliveryBackoff).Wait(c.failures, nil)
	d.delivery.Later(d.ctx, s.board.key, wait, func() {
		if d.ctx.Err() != nil {
			return // the next start goes on from the stored cursor
		}
		c.retrying = false
		if d.current(s) { // else the session loads afresh from the store
			d.catchUpNow(s)
		}
	})
}

// catchUpNow applies every logged entry past the session's cursor and
// sends the answers they stored, as a start does; on a failure it tries
// again later.
func (d *deliverer) catchUpNow(s *session) {
	defer d.noteCursor(s)
	c := d.cursorOf(s)
	if c == nil {
		d.retryLater(s)
		return
	}
	replies, err := d.catchUp(s, c, 0)
	d.release(s, c, replies)
	if err != nil {
		d.retryLater(s)
		return
	}
	if !c.retrying {
		c.failures, c.have = 0, nil
	}
}

// current reports whether s is the session the router holds for its key
// (not one forgotten, evicted or deleted since).
func (d *deliverer) current(s *session) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sessions[s.board.key] == s
}

// noteCursor records, for eviction (which runs off the delivery queue),
// whether the session's cursor has work left: applied entries not yet
// stored, answers waiting for the save, or a retry queued.
func (d *deliverer) noteCursor(s *session) {
	c := &s.cursor
	s.unsettled.Store(len(c.owed) > 0 || d.logs != nil && (c.seq > c.saved || len(c.held) > 0 || c.retrying))
}

// cursorOf returns the session's cursor, read from the store the first
// time; nil when it cannot be read (the event is dropped and logged: the
// next start reads it again).
func (d *deliverer) cursorOf(s *session) *cursor {
	c := &s.cursor
	if c.loaded || d.logs == nil {
		c.loaded = true
		return c
	}
	seq, err := d.logs.Delivered(d.ctx, s.board.key)
	if err != nil {
		s.board.log.Error("read the session's delivery cursor", "err", err)
		return nil
	}
	c.loaded, c.seq, c.saved = true, seq, seq
	return c
}

// catchUp applies the session's logged entries after its cursor, up to
// through (0: all of them), and returns the answers they stored, to be
// released once the cursor is saved. c.have names the entries whose
// answer the outbox holds already (read back after a restart).
func (d *deliverer) catchUp(s *session, c *cursor, through int64) ([]queued, error) {
	if d.logs == nil {
		return nil, nil
	}
	key := s.board.key
	entries, err := d.logs.Log(d.ctx, key, c.seq)
	if err != nil {
		s.board.log.Error("read the session's log; trying again shortly", "after", c.seq, "err", err)
		return nil, err
	}
	var replies []queued
	// The board shows where the batch brings it, not a state in the
	// middle of it (after a restart, its fold at the stored cursor).
	s.board.hold()
	defer s.board.unhold()
	for _, l := range entries {
		if through > 0 && l.Seq > through {
			break
		}
		if l.Seq <= c.seq {
			continue
		}
		replies = append(replies, d.apply(s, l.Event(key), c.have)...)
		if d.ctx.Err() != nil {
			// Shut down while applying it: the cursor stays before
			// it, and the next start applies it again, which changes
			// nothing done already.
			break
		}
		c.seq = l.Seq
	}
	if len(entries) > 0 {
		s.board.log.Info("delivered the log from its cursor", "through", c.seq)
	}
	return replies, nil
}

// settleCursor stores the cursor now, if it moved, and reports whether
// it is stored.
func (d *deliverer) settleCursor(s *session, c *cursor) bool {
	to := c.storable()
	if d.logs == nil || to <= c.saved {
		return true
	}
	if err := d.logs.SaveDelivered(context.WithoutCancel(d.ctx), s.board.key, to); err != nil {
		s.board.log.Error("save the session's delivery cursor; trying again shortly", "seq", to, "err", err)
		return false
	}
	c.saved = to
	return true
}

// cursorSaveDelay is how long a cursor that moved past entries without
// an answer may wait before it is stored: one write covers the entries
// of a busy second, and the agent's commits do not share the database's
// writer with a cursor save per entry. A kill in between applies those
// entries again, which changes nothing.
const cursorSaveDelay = time.Second

// saveCursorLater stores the cursor a moment from now, on the session's
// deliverer (Flush and Close store it at once).
func (d *deliverer) saveCursorLater(s *session, c *cursor) {
	if d.logs == nil || c.saving {
		return
	}
	c.saving = true
	d.delivery.Later(d.ctx, s.board.key, cursorSaveDelay, func() {
		if d.ctx.Err() != nil {
			return // Close stores it
		}
		c.saving = false
		// A session forgotten since would store a stale cursor.
		if d.current(s) && !d.settleCursor(s, c) {
			d.retryLater(s)
		}
		d.noteCursor(s)
	})
}

// settleCursors stores every session's cursor that moved, on its
// deliverer, and waits for that.
func (d *deliverer) settleCursors() {
	d.mu.Lock()
	keys := make([]string, 0, len(d.sessions))
	for key := range d.sessions {
		keys = append(keys, key)
	}
	d.mu.Unlock()
	for _, key := range keys {
		d.Flush(key)
	}
}

// resumeDelivery queues on the session's deliverer what a previous
// process (this one before a restart, or another replica) left: the log
// past the cursor, then the stored answers, oldest first, then the ones
// the catch-up stored.
func (d *deliverer) resumeDelivery(key string, stored []queued) {
	d.delivery.Add(key, func() {
		// The close items first: a live message a stopped process left
		// open ends with "answered again below" above the answer sent
		// again, whichever was stored first (a message started by the
		// answer's own delivery is stored after the answer).
		slices.SortStableFunc(stored, func(a, b queued) int {
			return cmp.Compare(boolInt(a.item.LiveRef == nil), boolInt(b.item.LiveRef == nil))
		})
		s := d.session(key, nil)
		if s == nil || s.board.platform == nil || d.logs == nil {
			if s != nil && s.board.platform != nil && s.board.hasWork() {
				s.board.set(func(*boardRecord, *Plan) {}) // before the replies
			}
			d.outbox.enqueue(key, stored...)
			return
		}
		c := &s.cursor
		for _, q := range stored {
			if q.item.Seq > 0 {
				if c.have == nil {
					c.have = map[int64]bool{}
				}
				c.have[q.item.Seq] = true
			}
		}
		// What was stored goes first, and like every answer only once
		// the cursor is stored past its entry.
		c.held = append(c.held, stored...)
		d.catchUpNow(s)
		// The board's loop goes after the entries the catch-up applied:
		// it shows where they brought it. A stored reply waits for the
		// plan it comes after all the same (showFirst).
		if s.board.hasWork() {
			s.board.set(func(*boardRecord, *Plan) {})
		}
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// apply is one entry's effect: the plan board records it (and renders
// it), the router does the rest: the approval cards, the answer and the
// working indicator. It returns the answer stored for the outbox, to be
// enqueued by the caller (none if have says it is stored already).
func (d *deliverer) apply(s *session, e agent.Event, have map[int64]bool) []queued {
	b := s.board
	rec, _ := b.state()
	// The answer replies to the message the turn began on, and the
	// working indicator is shown there (the log's, not the board's).
	th, trigger := rec.Thread, e.Trigger
	ctx := d.ctx // each platform call has its own timeout (paceSend)
	switch e.Kind {
	case agent.TurnStarted:
		marked := b.turnStarted(e)
		if !b.showsSessions() { // else the session's status shows it (status.go)
			d.working(b, th, marked, true)
		}
	case agent.PlanChanged:
		b.planChanged(e)
	case agent.EvidenceChanged:
		b.evidenceChanged(e)
	case agent.ToolStarted, agent.ToolEnded:
		b.toolActivity(e)
	case agent.TextDelta, agent.TextDone:
		d.liveText(s, th, trigger, e)
	case agent.Notice:
		if e.Text != "" && !have[e.Seq] {
			return awaitPlan(d.outbox.hold(th, trigger, e.Text, 0, e.Seq), b)
		}
	case agent.ApprovalNeeded:
		b.waiting(e) // a plan's Start shows on the plan message
		if a := e.Approval; a != nil && !a.Plan {
			d.onLane(s, e.Seq, func(n int) (time.Duration, bool) { return d.showCard(ctx, s, th, *a, n) })
		}
	case agent.ApprovalDecided:
		if a, dec := e.Approval, e.Decision; a != nil && dec != nil {
			d.onLane(s, e.Seq, func(n int) (time.Duration, bool) { return d.closeCard(ctx, s, th, *a, *dec, n) })
		}
		b.approvalDecided(e)
	case agent.TurnEnded:
		s.cursor.ended = max(s.cursor.ended, e.Turn)
		// The answer is stored before the board records the end, and
		// sent after the cursor passed it: an answer in the thread means
		// both are durable.
		var reply []queued
		_, live := liveReplier(b.caps)
		switch id := ""; {
		case live:
			var interim []liveSeg
			id, interim = s.sealLive(e.Turn)
			d.finishInterim(s, th, trigger, interim)
			if e.Text == "" {
				note := noteFor(e.Outcome)
				d.lane.Add(th.Key, func() { d.finishLive(s, th, trigger, s.live.open, "", note) })
			} else if !have[e.Seq] {
				reply = d.outbox.holdLive(th, trigger, e.Text, e.Turn, e.Seq, id, noteFor(e.Outcome))
			}
		case e.Text != "" && !have[e.Seq]:
			reply = d.outbox.hold(th, trigger, e.Text, e.Turn, e.Seq)
		}
		b.turnEnded(e)
		d.turnOver(ctx, s, th, trigger, e)
		return awaitPlan(reply, b) // the final state, first
	}
	return nil
}

// awaitPlan makes the items wait for what board b wants now: the plan
// state the log had when they were written.
func awaitPlan(qs []queued, b *Board) []queued {
	ver := b.wanted()
	for i := range qs {
		qs[i].plan, qs[i].board = ver, b
	}
	return qs
}

// working queues showing (on) or clearing the working indicator on
// message msg on the session's lane, as tidy-up: behind the plan, the
// cards' and the answer's sends, the session's earlier status moves
// first. An indicator still waiting when its turn is over is not shown
// (indicator.shows).
func (d *deliverer) working(b *Board, th Thread, msg string, on bool) {
	b.indicator.want(msg, on)
	since := d.opts.Now()
	d.queueMove(th.Key, d.indicate(b.platform, th, msg, on, since, func() bool { return !on || b.indicator.shows(msg) }))
}

// indicate is the move that shows or clears the working indicator on
// message msg, in one attempt (an indicator is not worth a retry): at
// once when its budget (reactions.add and reactions.remove on Slack, each
// counted apart) has a slot now, otherwise once the budget gives it one.
// It never waits on the lane for the slot: it parks, the session's later
// moves behind it, and the budget's call queues it again. still reports
// whether it is wanted yet when it goes.
func (d *deliverer) indicate(p Platform, th Thread, msg string, on bool, since time.Time, still func() bool) move {
	op, m, prio := "working", MethodReaction, PriorityIntermediate
	if !on {
		op, m, prio = "not_working", MethodUnreaction, PriorityFinal
	}
	req := Request{Thread: th, Method: m, Priority: func() Priority { return prio }, Since: since}
	var given time.Time // when the budget gave the slot asked for
	return func() time.Duration {
		if !still() || d.ctx.Err() != nil {
			return 0
		}
		var bud *Budget
		if pacer := d.caps[th.Platform].Paced; pacer != nil {
			bud = pacer.Budget(req)
		}
		fresh := !given.IsZero() && time.Since(given) < slotFresh
		if bud != nil && !(fresh && !bud.Held()) && !bud.TryNow(0) {
			// No slot now, or the one given went stale (a 429 came
			// since, or it waited too long for its call): ask.
			given = time.Time{}
			bud.Notify(d.ctx, req.Priority, since, func() {
				given = time.Now() // read on the lane after the queue's lock
				d.lane.Add(th.Key, func() { d.nextMove(th.Key) })
			})
			return moveParked
		}
		d.indicateNow(p, th, op, msg, on, since)
		return 0
	}
}

// indicateNow makes the indicator's call, its budget's slot in hand.
func (d *deliverer) indicateNow(p Platform, th Thread, op, msg string, on bool, since time.Time) {
	_, err := d.deliver(d.ctx, op, th, since, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, sendTimeout)
		defer cancel()
		if err := d.held(ctx, th.Key); err != nil {
			return err
		}
		return p.Working(ctx, th, msg, on)
	})
	if err != nil && !d.leftToNext(err) {
		d.opts.Logger.Warn("working indicator", "session", th.Key, "platform", th.Platform, "on", on, "err", err)
	}
}

// leftToNext reports whether a send failed because it is left to whoever
// delivers next: this process is shutting down, or another replica holds
// the session now. Such a failure is neither reported in the thread nor
// recorded as given up.
func (d *deliverer) leftToNext(err error) bool {
	return err != nil && (d.ctx.Err() != nil || errors.Is(err, agent.ErrFenced))
}

// sendTimeout bounds one platform call of a card or the working
// indicator, once its budget let it go.
const sendTimeout = 30 * time.Second

// paceSend makes one platform call of method m in th: it waits, when the
// platform paces, for a slot of the method's budget (as long as the
// budget's priorities take; only shutdown ends the wait), checks that
// this process still holds the session, then calls send within
// sendTimeout.
func (d *deliverer) paceSend(ctx context.Context, p Platform, th Thread, m Method, prio Priority, since time.Time, send func(ctx context.Context) error) error {
	if pacer := d.caps[th.Platform].Paced; pacer != nil {
		if err := Pace(ctx, pacer, Request{Thread: th, Method: m, Priority: func() Priority { return prio }, Since: since}); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	if err := d.held(ctx, th.Key); err != nil { // after the wait: this replica may hold it no more
		return err
	}
	return send(ctx)
}

// Resume finishes what a previous process left, when the store can list
// board records: the plan posts and edits it did not make, the log's
// entries past each session's cursor, and the stored answers. Call it once
// the platforms are connected, before the runner resumes its sessions.
//
// Every board saved with work left is resumed (a plan not shown, posted
// or pinned yet), whether or not the message exists yet: a first post
// still waiting for the platform's pace at the kill is posted and pinned
// now. The one case that can show a plan twice is a post the platform
// accepted just before the kill whose ref was not stored yet: the record
// has no ref, so it is posted again and the new message is the one
// pinned and edited; the first copy stays in the thread, unpinned (pins
// follow the stored ref).
func (d *deliverer) Resume(ctx context.Context) (int, error) {
	// Only the sessions with work left are visited, from the stores'
	// indexes: the start's cost grows with them, not with the stored
	// sessions.
	var keys []string
	pending, err := d.opts.Store.PendingBoards(ctx)
	if err != nil {
		d.opts.Logger.Error("list plan boards with work left", "err", err)
	}
	if d.logs != nil {
		undelivered, err := d.logs.Undelivered(ctx)
		if err != nil {
			d.opts.Logger.Error("list sessions with undelivered log entries", "err", err)
		}
		keys = append(keys, undelivered...)
	}
	// Boards first: their loops go on the sessions' lanes before the
	// stored replies that come after their plans. A session whose log is
	// undelivered starts its loop after the catch-up (resumeDelivery):
	// its board is folded at the stored cursor, and shows the entries
	// after it, not a state before them.
	catching := map[string]bool{}
	for _, key := range keys {
		catching[key] = true
	}
	for _, key := range pending {
		if b := d.board(key, nil); b != nil && b.platform != nil && !catching[key] {
			b.set(func(*boardRecord, *Plan) {})
		}
	}
	stored, err := d.outbox.stored(ctx)
	if err != nil {
		for _, key := range pending {
			if b := d.board(key, nil); b != nil && b.platform != nil && catching[key] {
				b.set(func(*boardRecord, *Plan) {})
			}
		}
		// Which answers are stored is not known: catching a log up now
		// could store one twice. The next start tries again; until then
		// the boards show what they recorded.
		d.opts.Logger.Error("read the stored replies back; the sessions' delivery resumes at the next start", "err", err)
		return 0, err
	}
	bySession := map[string][]queued{}
	for _, q := range stored {
		key := q.item.Thread.Key
		if _, ok := bySession[key]; !ok {
			keys = append(keys, key)
		}
		bySession[key] = append(bySession[key], q)
	}
	seen := map[string]bool{}
	for _, key := range keys {
		if !seen[key] {
			seen[key] = true
			d.resumeDelivery(key, bySession[key])
		}
	}
	return len(stored), nil
}

// ResumeSession is Resume for one session that this process has just
// taken from another replica (DESIGN §14): its records are read afresh,
// and the plan post or edit, the log's entries and the replies the other
// one left are delivered here, from the session's cursor.
func (d *deliverer) ResumeSession(ctx context.Context, key string) {
	d.delivery.Add(key, func() { d.forget(key) }) // behind what was queued for it before
	stored, err := d.outbox.storedOf(ctx, key)
	if err != nil {
		d.opts.Logger.Error("resume undelivered replies", "session", key, "err", err)
	}
	d.resumeDelivery(key, stored) // the board is loaded afresh, folded from the log
}
