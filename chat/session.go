package chat

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinplan/pinplan/agent"
)

// session is what the router keeps in memory of one thread's session: its
// plan board, its approval cards and how it is listed, each with its own
// record in its own store.
type session struct {
	board   *Board
	cards   *record[cardsRecord]
	listing *record[listingRecord]
	cursor  cursor // the deliverer's, on the delivery queue only
	// unsettled: the cursor has work left (noteCursor); read by
	// eviction, off the delivery queue.
	unsettled atomic.Bool
	live      live // the answer as the model writes it (live.go)
	// undelivered: the thread was told that an answer could not be
	// delivered (outbox), which it is only once.
	undelivered atomic.Bool
	// archives counts the session's archives (reset, delete): a card's
	// send queued before one, still waiting for its next attempt, is
	// dropped (onLane).
	archives atomic.Int64
}

// record is a session's record of one kind (its cards, its listing), kept
// in memory and stored whole after each change.
type record[T any] struct {
	what string // for the log: "approval cards", "listing"
	log  *slog.Logger
	ctx  context.Context
	save func(ctx context.Context, data []byte) error

	// saveMu orders saves: held from taking the record's copy until it is
	// stored, so an older copy never overwrites a newer one. Taken before
	// mu.
	saveMu sync.Mutex

	mu sync.Mutex // guards v
	v  T

	fenced atomic.Bool // a fenced save was logged (update)
}

// read calls f with the record, mu held. f must not keep what it reads
// of the record's maps.
func (r *record[T]) read(f func(v *T)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.v)
}

// update changes the record with f and stores it. A failed save is
// logged; the change stays in memory and is stored with the next one.
//
// A save refused because another replica holds the session now
// (agent.ErrFenced) is a normal failover, not a failure: said once, at
// INFO.
func (r *record[T]) update(f func(v *T)) {
	err := r.put(f)
	switch {
	case err == nil:
	case errors.Is(err, agent.ErrFenced):
		if r.fenced.CompareAndSwap(false, true) {
			r.log.Info("session record not saved: another replica holds the session now", "record", r.what)
		}
	default:
		r.log.Error("save session record", "record", r.what, "err", err)
	}
}

// put is update returning the save's error.
func (r *record[T]) put(f func(v *T)) error {
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	r.mu.Lock()
	f(&r.v)
	raw, err := json.Marshal(r.v)
	r.mu.Unlock()
	if err != nil {
		return err
	}
	return r.save(context.WithoutCancel(r.ctx), raw)
}

// session returns the session's records, loading them; nil if the session
// has no board record and th is nil.
func (d *deliverer) session(key string, th *Thread) *session {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.sessions[key]; ok {
		return s
	}
	s := d.loadSession(key, th)
	if s != nil {
		d.sessions[key] = s
	}
	return s
}

// loadSession reads a session's board, cards and listing records. Called
// with r.mu held.
func (d *deliverer) loadSession(key string, th *Thread) *session {
	log := d.opts.Logger.With("session", key)
	var rec boardRecord
	raw, err := d.opts.Store.Board(d.ctx, key)
	if err != nil {
		log.Error("load plan board", "err", err)
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &rec); err != nil {
			log.Error("decode plan board", "err", err)
		}
	}
	if rec.Thread.Key == "" {
		if th == nil {
			return nil
		}
		rec.Thread = *th
	}
	rec.Thread.Title = "" // the listing's, not the board's
	b := d.newBoard(key, rec)
	s := &session{
		board: b,
		cards: &record[cardsRecord]{what: "approval cards", log: b.log, ctx: d.ctx,
			save: func(ctx context.Context, data []byte) error { return d.cards.SaveCards(ctx, key, data) }},
		listing: &record[listingRecord]{what: "listing", log: b.log, ctx: d.ctx,
			save: func(ctx context.Context, data []byte) error { return d.listings.SaveListing(ctx, key, data) }},
	}
	if raw, err := d.cards.Cards(d.ctx, key); err != nil {
		log.Error("load approval cards", "err", err)
	} else if len(raw) > 0 {
		if err := json.Unmarshal(raw, &s.cards.v); err != nil {
			log.Error("decode approval cards", "err", err)
		}
	}
	if raw, err := d.listings.Listing(d.ctx, key); err != nil {
		log.Error("load listing", "err", err)
	} else if len(raw) > 0 {
		if err := json.Unmarshal(raw, &s.listing.v); err != nil {
			log.Error("decode listing", "err", err)
		}
	}
	d.fold(s)
	return s
}

// fold loads the session's delivery cursor and folds what its plan
// message should show from the log (DESIGN §1): the entries the stored
// cursor has passed, after the last reset's (boardRecord.From), which
// the stores keep compacted to what a fold needs (agent.Compactable).
// The entries after the cursor are applied as they are delivered. A
// cursor or a log that cannot be read is logged: the board wants what
// its message shows, and the delivery reads the cursor again.
func (d *deliverer) fold(s *session) {
	if d.logs == nil {
		return
	}
	b := s.board
	seq, err := d.logs.Delivered(d.ctx, b.key)
	if err != nil {
		b.log.Error("read the session's delivery cursor to fold its plan", "err", err)
		return
	}
	entries, err := d.logs.Log(d.ctx, b.key, b.rec.From)
	if err != nil {
		b.log.Error("read the session's log to fold its plan", "err", err)
		return
	}
	c := &s.cursor
	// The old session's entries, before a reset, are not applied again.
	c.loaded, c.seq, c.saved = true, max(seq, b.rec.From), seq
	if len(entries) == 0 || entries[0].Seq > seq {
		return // nothing to fold: the board wants what its message shows
	}
	// From nothing, as the entries were applied: the state at the
	// cursor, which may be older than what the message shows (the
	// cursor is stored after the entries are applied); the entries after
	// it, applied again, bring it on, and an older revision is never
	// shown again meanwhile (Board.apply).
	b.want, b.floor, b.closed, b.final = Plan{}, 0, false, nil
	b.folding = true
	defer func() {
		b.folding = false
		if b.want.Revision < b.rec.Shown.Revision {
			b.foldedBelow = b.rec.Shown.Revision
		}
		b.unshown = b.pendingLocked()
	}()
	for _, l := range entries {
		if l.Seq > seq {
			break
		}
		e := l.Event(b.key)
		if e.Kind != agent.PlanChanged && e.Revision > b.want.Revision {
			// The entries of a turn carry its plan: the last one kept
			// may be its end, not the revision itself.
			b.foldPlan(e)
		}
		switch e.Kind {
		case agent.TurnStarted:
			b.turnStarted(e)
		case agent.PlanChanged:
			b.planChanged(e)
		case agent.EvidenceChanged:
			b.evidenceChanged(e)
		case agent.ApprovalNeeded:
			b.waiting(e)
		case agent.ApprovalDecided:
			b.approvalDecided(e)
		case agent.TurnEnded:
			b.turnEnded(e)
			c.ended = max(c.ended, e.Turn)
		}
	}
}

// applied returns the last entry of the session's log its deliverer has
// applied, read on the delivery queue.
func (d *deliverer) applied(s *session) int64 {
	done := make(chan int64, 1)
	d.delivery.Add(s.board.key, func() { done <- s.cursor.seq })
	select {
	case seq := <-done:
		return seq
	case <-d.ctx.Done():
		return 0
	}
}

// newBoard returns the board of session key with its record.
func (d *deliverer) newBoard(key string, rec boardRecord) *Board {
	b := &Board{key: key, platform: d.opts.Platforms[rec.Thread.Platform], store: d.opts.Store, hooks: d.opts.Hooks, owner: d,
		log: d.opts.Logger.With("session", key, "platform", rec.Thread.Platform), rec: rec, want: rec.Shown}
	b.floor = b.want.Revision
	b.idle = sync.NewCond(&b.mu)
	b.ctx, b.stop = context.WithCancel(d.ctx)
	b.caps = d.caps[rec.Thread.Platform]
	b.pacer = b.caps.Paced
	return b
}

// memRecords keeps cards and listing records in memory, for a router
// whose store keeps none.
type memRecords struct {
	mu sync.Mutex // guards m
	m  map[string][]byte
}

func (m *memRecords) get(key string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.m[key]
}

func (m *memRecords) put(key string, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string][]byte{}
	}
	m.m[key] = append([]byte(nil), data...)
}

// Cards implements CardStore.
func (m *memRecords) Cards(_ context.Context, key string) ([]byte, error) { return m.get(key), nil }

// SaveCards implements CardStore.
func (m *memRecords) SaveCards(_ context.Context, key string, data []byte) error {
	m.put(key, data)
	return nil
}

// Listing implements ListingStore.
func (m *memRecords) Listing(_ context.Context, key string) ([]byte, error) { return m.get(key), nil }

// SaveListing implements ListingStore.
func (m *memRecords) SaveListing(_ context.Context, key string, data []byte) error {
	m.put(key, data)
	return nil
}

// board returns the session's board, loading its records; with th, a
// session it has none of starts in that thread.
func (d *deliverer) board(key string, th *Thread) *Board {
	if s := d.session(key, th); s != nil {
		return s.board
	}
	return nil
}

// forget drops a session's records from memory.
func (d *deliverer) forget(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.sessions[key]; ok {
		s.board.stop()
		delete(d.sessions, key)
	}
	if cancel := d.pins[key]; cancel != nil {
		cancel() // the next holder pins it
		delete(d.pins, key)
	}
}

// Thread returns the session's thread as recorded by its board, with the
// title it is listed under.
func (d *deliverer) thread(key string) (Thread, bool) {
	s := d.session(key, nil)
	if s == nil {
		return Thread{}, false
	}
	rec, _ := s.board.state()
	th := rec.Thread
	s.listing.read(func(l *listingRecord) { th.Title = l.Title })
	return th, true
}

// Evict drops from memory the boards of sessions idle for longer than
// idle: no render running, no turn running, no open approval card. Their
// records stay in the store and load again on the next event. A session
// idle but for its pin, which waits for the budget's slot, leaves too:
// it waits on as its key (awaitPin). Every platform that keeps state of
// its own per thread (Forgetter) is told, not only the session's: the
// console mirrors the others' plans. It returns how many were dropped.
func (d *deliverer) evict(idle time.Duration) int {
	cutoff := time.Now().Add(-idle)
	var gone []Thread
	d.mu.Lock()
	for key, s := range d.sessions {
		th, idle, pin := s.idleSince(cutoff)
		if !idle {
			continue
		}
		s.board.stop()
		delete(d.sessions, key)
		gone = append(gone, th)
		if !pin.IsZero() {
			d.awaitPin(th, pin)
		}
	}
	// Still under d.mu: a session that comes back now loads after its
	// platforms forgot the old state, so what they are told of it through
	// the router comes after the forgetting. What an adapter notes before
	// it hands a message to the router (Slack's author, Discord's channel
	// type) can still be forgotten at that moment: it is read again.
	d.tellForgotten(gone)
	d.mu.Unlock()
	return len(gone)
}

// awaitPin puts the pin of a session leaving memory in its budget's
// queue as the session's key, in the place its board asked for (since);
// the session loads again when the slot comes (pinDue). d.mu is held.
func (d *deliverer) awaitPin(th Thread, since time.Time) {
	if d.pins[th.Key] != nil {
		return // waiting already
	}
	first := func() Priority { return PriorityFirstPost }
	bud := d.caps[th.Platform].Paced.Budget(Request{Thread: th, Method: MethodPin, Priority: first, Since: since})
	if bud == nil {
		return
	}
	ctx, cancel := context.WithCancel(d.ctx)
	d.pins[th.Key] = cancel
	bud.Notify(ctx, first, since, func() { d.pinDue(ctx, th.Key) })
}

// pinDue gives the pin's slot to the session whose key waited for it
// (awaitPin), loading it again if it is not in memory.
func (d *deliverer) pinDue(ctx context.Context, key string) {
	d.mu.Lock()
	if ctx.Err() != nil {
		d.mu.Unlock()
		return // forgotten meanwhile, or shut down
	}
	d.pins[key]()
	delete(d.pins, key)
	s, ok := d.sessions[key]
	if !ok {
		if s = d.loadSession(key, nil); s != nil {
			d.sessions[key] = s
		}
	}
	d.mu.Unlock()
	if s != nil {
		s.board.grant(MethodPin)
	}
}

// pinAwaited reports whether the session's pin waits in its budget as
// its key (awaitPin): its board, loaded again, does not ask a second time.
func (d *deliverer) pinAwaited(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pins[key] != nil
}

// tellForgotten tells every Forgetter platform that the sessions of
// threads left memory. The caller holds d.mu.
func (d *deliverer) tellForgotten(threads []Thread) {
	for _, c := range d.caps {
		if c.Forget != nil {
			for _, th := range threads {
				c.Forget.Forget(th)
			}
		}
	}
}

// Deleted drops a session that retention deleted from the store (a
// deletion that began at since) and, when it was in memory, tells the
// platforms as Evict does: Evict never sees it again, so what they keep
// of its thread would otherwise stay. A session in use again since then
// (a message came after its records went) is left as it is, by the
// test Evict uses: it runs on, and eviction takes it when it is idle.
func (d *deliverer) deleted(key string, since time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if cancel := d.pins[key]; cancel != nil {
		cancel() // its plan message went with its records
		delete(d.pins, key)
	}
	s, ok := d.sessions[key]
	if !ok {
		return
	}
	th, idle, _ := s.idleSince(since)
	if !idle {
		// Its log and cursor went with its records: the entries of its
		// new turn are numbered from 1 again. The deliverer starts over
		// from the store's cursor, and catches up what it has passed
		// over as applied already meanwhile.
		d.delivery.Add(key, func() {
			if d.current(s) {
				s.cursor = cursor{}
				// Its plan's revisions are numbered from 1 again too: the
				// board takes them (planChanged ignores older ones).
				// So are the entries a fold or a move counts by.
				s.board.mu.Lock()
				s.board.floor, s.board.foldedBelow = 0, 0
				s.board.mu.Unlock()
				s.board.update(func(r *boardRecord) { r.RefRev, r.From = 0, 0 })
				d.catchUpNow(s)
			}
		})
		return
	}
	s.board.stop()
	delete(d.sessions, key)
	d.tellForgotten([]Thread{th})
}

// waitLane waits until the session's lane has sent what was queued on it
// so far, or the router is closed. It must not be called from the lane.
func (d *deliverer) waitLane(key string) {
	done := make(chan struct{})
	d.lane.Add(key, func() { close(done) })
	select {
	case <-done:
	case <-d.ctx.Done():
	}
}

// archived is reset's and Delete's one path once the runner archived the
// session (stopping its turn first): open cards are closed as not run,
// the board starts over (the plan message is unpinned and left in the
// thread) and the cards of the old session go. hidden also takes the
// session out of the console's listing; its title stays.
func (d *deliverer) archived(ctx context.Context, s *session, by string, hidden bool) {
	rec, _ := s.board.state()
	th := rec.Thread
	// What the stopped turn logged (its end, its decided cards) is shown
	// before the board starts over.
	d.Flush(th.Key)
	from := d.applied(s)
	d.waitLane(th.Key) // its cards' posts too
	s.archives.Add(1)  // and not those still to be tried again
	d.closeOpen(ctx, s, th, agent.Decision{Reason: "stopped", ByName: by, At: d.opts.Now()}, 0)
	s.board.reset(from)
	s.cards.update(func(v *cardsRecord) { *v = cardsRecord{} })
	s.listing.update(func(l *listingRecord) { l.Hidden = hidden })
}
