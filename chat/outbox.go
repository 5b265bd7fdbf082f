package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinplan/pinplan/agent"
)

// OutboxStore keeps replies until the platform has them, so a reply that
// meets a platform outage or a restart is delivered later rather than
// lost. store.DB implements it.
type OutboxStore interface {
	// AddOutbox stores the session's items in order, in one
	// transaction, and returns their ids (increasing). A store shared by
	// replicas keeps them under the session, fenced by its owner.
	AddOutbox(ctx context.Context, key string, items [][]byte) ([]uint64, error)
	// DeleteOutbox removes a delivered or undeliverable item.
	DeleteOutbox(ctx context.Context, key string, id uint64) error
	// Outbox calls f with every stored item, oldest first (per session,
	// at least). Each item names its thread itself.
	Outbox(ctx context.Context, f func(id uint64, data []byte)) error
	// OutboxOf calls f with session key's stored items, oldest first:
	// a replica taking a session over reads those. A store that keeps
	// one queue for every session (store.DB, which has no replicas) may
	// call f with the others' too; the caller keeps the session's.
	OutboxOf(ctx context.Context, key string, f func(id uint64, data []byte)) error
}

// Splitter is implemented by platforms that cut a long reply into several
// messages. The outbox stores each part as its own item, so a retry never
// posts a part twice.
type Splitter interface {
	SplitReply(text string) []string
}

// Delivery bounds. A reply is retried with doubling waits (from
// Options.RetryDelay up to maxReplyBackoff) until it is delivered, the
// platform refuses it for good (ErrUndeliverable), or it is older than
// maxReplyAge.
const (
	maxReplyBackoff = 2 * time.Minute
	maxReplyAge     = 24 * time.Hour
	replyTimeout    = 30 * time.Second
)

// outboxItem is one stored reply (one part of it).
type outboxItem struct {
	// Key names the part for the platform (chat.SendKey), the same on
	// every attempt, after a restart and after a migration to another
	// store (which renumbers the ids); "" in items stored before it was
	// kept (their id names them).
	Key     string    `json:"key,omitempty"`
	Thread  Thread    `json:"thread"`
	ReplyTo string    `json:"reply_to,omitempty"`
	Text    string    `json:"text"`
	Created time.Time `json:"created"`
	// Turn is the turn whose end the item tells (agent.Event.Turn); 0
	// for anything else.
	Turn int64 `json:"turn,omitempty"`
	// Seq is the number of the log entry the item is the answer of
	// (agent.LogEntry.Seq), 0 for anything else: a deliverer that
	// applies that entry again after a restart finds it stored.
	Seq int64 `json:"seq,omitempty"`
	// To is the user the item is for alone (PrivateReplier); "" for the
	// thread.
	To string `json:"to,omitempty"`
	// Live: the item is a turn's answer, whole, that finishes the live
	// reply shown as the model wrote it (LiveReplier.FinishLive); Note
	// ends what was shown if it is not the answer. LiveID is the reply
	// the answer was streamed as, in this process only.
	Live   bool   `json:"live,omitempty"`
	Note   string `json:"note,omitempty"`
	LiveID string `json:"-"`
	// LiveRef, when set, makes the item a live message's close item: it
	// is sent only by a process that did not write the message (after a
	// kill, or on the replica that took the session over), and ends the
	// message with Text (LiveReplier.CloseLive).
	LiveRef *MessageRef `json:"live_ref,omitempty"`
}

type queued struct {
	id   uint64
	item outboxItem
	// plan is the version of board's content the item waits for
	// (Board.showFirst): its turn's final state, for an answer; 0 for the
	// plan's first post only.
	plan  uint64
	board *Board
	// stored: read back from the store (a restart, or a session taken
	// over from another replica), so an earlier attempt may have landed.
	stored bool
}

// outbox stores each session's replies until the platform has them; they
// are sent in order, one at a time, on the session's lane (Router.lane).
type outbox struct {
	d     *deliverer
	store OutboxStore

	added atomic.Uint64 // replies added by this process: with the time, the parts' keys

	afterPop func() // for tests: runs right after an item was sent
}

func newOutbox(d *deliverer, st OutboxStore) *outbox {
	if st == nil {
		st = &memOutbox{}
	}
	return &outbox{d: d, store: st}
}

// add stores a reply and starts its delivery. If the store fails, the
// reply is still delivered from memory; it just would not survive a
// restart.
func (o *outbox) add(th Thread, replyTo, text string) {
	o.enqueue(th.Key, o.hold(th, replyTo, text, 0, 0)...)
}

// addPrivate stores a message for user alone and starts its delivery,
// in order with the session's replies. It is the router's own words,
// whole: no Splitter rewrites it (Slack's would escape its mentions).
func (o *outbox) addPrivate(th Thread, user, text string) {
	now := o.d.opts.Now()
	n := o.added.Add(1)
	it := outboxItem{Key: fmt.Sprintf("outbox/%s/%d.%d.0", th.Key, now.UnixNano(), n), Thread: th, Text: text, Created: now, To: user}
	raw, _ := json.Marshal(it)
	ids, err := o.store.AddOutbox(context.WithoutCancel(o.d.ctx), th.Key, [][]byte{raw})
	if err != nil {
		o.d.opts.Logger.Error("store private reply in outbox; delivering from memory", "session", th.Key, "err", err)
		ids = []uint64{0}
	}
	o.enqueue(th.Key, queued{id: ids[0], item: it})
}

// hold stores a reply without sending it and returns its parts, for
// enqueue: the caller saves in between what must be durable before the
// reply can be seen. turn is the turn whose end the reply tells, 0 for
// any other reply; seq the log entry it answers, 0 for none.
func (o *outbox) hold(th Thread, replyTo, text string, turn, seq int64) []queued {
	return o.holdItems(th, replyTo, text, turn, seq, nil)
}

// holdLive is hold for an answer that finishes live reply id (""
// for the one shown), whole: the platform splits it as it shows it.
func (o *outbox) holdLive(th Thread, replyTo, text string, turn, seq int64, id, note string) []queued {
	return o.holdItems(th, replyTo, text, turn, seq, func(it *outboxItem) {
		it.Live, it.LiveID, it.Note = true, id, note
	})
}

func (o *outbox) holdItems(th Thread, replyTo, text string, turn, seq int64, live func(*outboxItem)) []queued {
	parts := []string{text}
	if sp := o.d.caps[th.Platform].Split; sp != nil && live == nil {
		parts = sp.SplitReply(text)
	}
	now := o.d.opts.Now()
	n := o.added.Add(1)
	items := make([]outboxItem, len(parts))
	raw := make([][]byte, len(parts))
	for i, part := range parts {
		key := fmt.Sprintf("outbox/%s/%d.%d.%d", th.Key, now.UnixNano(), n, i)
		if seq > 0 {
			// The same name on every attempt at this entry's answer.
			key = fmt.Sprintf("log/%s/%d.%d", th.Key, seq, i)
		}
		items[i] = outboxItem{Key: key, Thread: th, Text: part, Created: now, Turn: turn, Seq: seq}
		if i == 0 {
			items[i].ReplyTo = replyTo
		}
		if live != nil {
			live(&items[i])
		}
		raw[i], _ = json.Marshal(items[i])
	}
	ids, err := o.store.AddOutbox(context.WithoutCancel(o.d.ctx), th.Key, raw)
	if err != nil {
		o.d.opts.Logger.Error("store reply in outbox; delivering from memory", "session", th.Key, "err", err)
		ids = make([]uint64, len(items))
	}
	qs := make([]queued, len(items))
	for i := range items {
		qs[i] = queued{id: ids[i], item: items[i]}
	}
	return qs
}

// stored reads every stored reply back, for a process that starts; the
// caller queues them.
func (o *outbox) stored(ctx context.Context) ([]queued, error) {
	var qs []queued
	err := o.store.Outbox(ctx, func(id uint64, data []byte) {
		var it outboxItem
		if err := json.Unmarshal(data, &it); err != nil || it.Thread.Key == "" {
			o.d.opts.Logger.Error("unreadable outbox item; dropped", "id", id, "err", err)
			o.store.DeleteOutbox(ctx, it.Thread.Key, id)
			return
		}
		qs = append(qs, queued{id: id, item: it, stored: true})
	})
	return qs, err
}

// storedOf reads the stored replies of one session back; the caller
// queues them.
func (o *outbox) storedOf(ctx context.Context, key string) ([]queued, error) {
	var qs []queued
	err := o.store.OutboxOf(ctx, key, func(id uint64, data []byte) {
		var it outboxItem
		if json.Unmarshal(data, &it) == nil && it.Thread.Key == key {
			qs = append(qs, queued{id: id, item: it, stored: true})
		}
	})
	return qs, err
}

// enqueue queues the items behind the session's earlier replies. They go
// in as one function, so the parts of one reply are never interleaved
// with another's.
func (o *outbox) enqueue(key string, qs ...queued) {
	if len(qs) == 0 {
		return
	}
	if o.d.ctx.Err() != nil {
		return // shutting down: stored items go out after the restart
	}
	for _, q := range qs {
		if q.board != nil {
			q.board.awaitedBy(1)
		}
	}
	o.d.lane.Add(key, func() { o.deliver(qs) })
}

// deliver sends items in order; after shutdown it leaves the rest stored.
func (o *outbox) deliver(qs []queued) {
	ctx := o.d.ctx
	for _, q := range qs {
		if ctx.Err() != nil {
			return
		}
		o.send(ctx, q)
		if q.board != nil {
			q.board.awaitedBy(-1)
		}
		if o.afterPop != nil {
			o.afterPop()
		}
	}
}

// send delivers one item, retrying until it is delivered, refused for good
// or too old, or the router shuts down (then it stays stored).
func (o *outbox) send(ctx context.Context, q queued) {
	th, it := q.item.Thread, q.item
	log := o.d.opts.Logger.With("session", th.Key, "outbox_id", q.id)
	p := o.d.opts.Platforms[th.Platform]
	if p == nil {
		log.Error("reply for a platform that is not configured; kept for when it is", "platform", th.Platform)
		return
	}
	unsure := q.stored
	if it.LiveRef != nil {
		o.closeLive(ctx, q, p)
		return
	}
	var s *session
	caps := o.d.caps[th.Platform]
	_, live := liveReplier(caps)
	if live && it.Live {
		s = o.d.session(th.Key, nil)
	}
	live = live && it.Live && s != nil
	if it.To == "" {
		// A thread's plan message is above its answer, and shows the
		// plan state the log had when the answer was written (DESIGN
		// §6): the answer waits for that edit, which goes first in the
		// edit budget while it does. An answer read back from the store
		// waits for what the board wants now.
		o.d.planShown(th.Key, o.planVersion(q))
	}
	pacer := caps.Paced
	op := "reply"
	if it.To != "" {
		op = "reply_privately"
	}
	// A live answer is a post of its own unless its reply is open.
	post := !live || s.live.open == "" || (it.LiveID != "" && it.LiveID != s.live.open)
	attempts, err := o.d.deliver(ctx, op, th, it.Created, func(ctx context.Context) error {
		if pacer != nil && it.To == "" && post {
			final := func() Priority { return PriorityFinal }
			if err := Pace(ctx, pacer, Request{Thread: th, Method: MethodPost, Priority: final, Since: it.Created}); err != nil {
				return err
			}
		}
		if err := o.d.held(ctx, th.Key); err != nil { // after the wait: this replica may hold it no more
			return err
		}
		actx, cancel := context.WithTimeout(ctx, replyTimeout)
		defer cancel()
		if it.Key != "" {
			actx = withSend(actx, it.Key, it.Created, unsure)
		}
		var err error
		switch pr := caps.Private; {
		case pr != nil && it.To != "":
			err = pr.ReplyPrivately(actx, th, it.To, it.Text)
		case live:
			err = o.d.finishAnswer(actx, s, th, it.ReplyTo, it.LiveID, it.Text, it.Note)
		case it.Live:
			// Stored as a live answer, but the platform does not show
			// answers as written (any more): its parts, in this attempt.
			err = o.replyParts(actx, p, caps.Split, th, it.ReplyTo, it.Text)
		default:
			err = p.Reply(actx, th, it.ReplyTo, it.Text)
		}

		if err != nil && ctx.Err() == nil {
			log.Warn("reply not delivered", "err", err)
		}
		// Once an attempt may have landed, every later one asks.
		var rl *RateLimitError
		unsure = unsure || (err != nil && !errors.As(err, &rl))
		return err
	})
	o.finish(ctx, q, s, log, attempts, err)
}

// finish ends item q's delivery after its attempts: counted when it was
// delivered, dropped with a word to the thread when it cannot be, and
// removed from the store; left stored when this process stops or
// another replica holds the session. s is its session, if known.
func (o *outbox) finish(ctx context.Context, q queued, s *session, log *slog.Logger, attempts int, err error) {
	th, it := q.item.Thread, q.item
	switch {
	case err == nil:
		if hooks := o.d.opts.Hooks; hooks != nil && hooks.Delivered != nil {
			hooks.Delivered(th.Platform, o.d.opts.Now().Sub(it.Created), attempts)
		}
	case ctx.Err() != nil:
		return // shutdown: delivered after the restart
	case errors.Is(err, agent.ErrFenced):
		log.Warn("reply left to the replica that holds the session now", "err", err)
		return // it is stored; that replica delivers it
	default:
		// Refused for good, or still failing after maxReplyAge.
		log.Error("reply undeliverable; dropped", "attempts", attempts, "err", err)
		if hooks := o.d.opts.Hooks; hooks != nil && hooks.Undelivered != nil {
			hooks.Undelivered(th, it.Text, err)
		}
		if it.To == "" && s == nil {
			s = o.d.session(th.Key, nil)
		}
		if it.To == "" && s != nil && s.undelivered.CompareAndSwap(false, true) {
			// Said once a session, in this process, if anything can
			// still reach the thread (Tell logs it when nothing can).
			o.d.Tell(context.WithoutCancel(ctx), th, "", undeliveredNote(err))
		}
	}
	if q.id != 0 {
		if err := o.store.DeleteOutbox(context.WithoutCancel(ctx), th.Key, q.id); err != nil {
			log.Warn("remove delivered reply from outbox", "err", err)
		}
	}
}

// undeliveredNote tells a thread that an answer did not reach it: the
// platform's reason in a few words, never the answer itself.
func undeliveredNote(err error) string {
	why := "it still failed after retrying for a while"
	if o, _ := Classify(err); o == Permanent {
		why = "the platform refused it"
	}
	return "An answer here could not be delivered (" + why + "); the bot's log has the details. Send a message to ask again."
}

// replyParts sends text as the platform's Splitter cuts it.
func (o *outbox) replyParts(ctx context.Context, p Platform, sp Splitter, th Thread, replyTo, text string) error {
	parts := []string{text}
	if sp != nil {
		parts = sp.SplitReply(text)
	}
	for i, part := range parts {
		if i > 0 {
			replyTo = ""
		}
		if err := p.Reply(ctx, th, replyTo, part); err != nil {
			return err
		}
	}
	return nil
}

// closeLive sends a live message's close item: the message a stopped
// process left being written ends with a note. A platform that cannot
// (any more) keeps nothing to do; the item goes either way, unless this
// replica no longer holds the session or is shutting down.
func (o *outbox) closeLive(ctx context.Context, q queued, p Platform) {
	th, it := q.item.Thread, q.item
	log := o.d.opts.Logger.With("session", th.Key, "outbox_id", q.id)
	if lr := o.d.caps[th.Platform].Live; lr != nil {
		_, err := o.d.deliver(ctx, "close_live", th, it.Created, func(ctx context.Context) error {
			if err := o.d.held(ctx, th.Key); err != nil {
				return err
			}
			actx, cancel := context.WithTimeout(ctx, replyTimeout)
			defer cancel()
			return lr.CloseLive(actx, th, *it.LiveRef, it.Text)
		})
		switch {
		case ctx.Err() != nil, errors.Is(err, agent.ErrFenced):
			return
		case err != nil:
			log.Warn("live reply left open by a stopped process not closed", "ref", it.LiveRef.ID, "err", err)
		default:
			log.Info("closed a live reply a stopped process left open", "ref", it.LiveRef.ID)
		}
	}
	if q.id != 0 {
		if err := o.store.DeleteOutbox(context.WithoutCancel(ctx), th.Key, q.id); err != nil {
			log.Warn("remove a live reply's close item", "err", err)
		}
	}
}

// planVersion is the version of the session's board content q waits
// for: the one recorded with it, or, for an answer read back from the
// store or held by a board that has been replaced since (a takeover, an
// eviction: versions count afresh on each board), what the board wants
// now.
func (o *outbox) planVersion(q queued) uint64 {
	s := o.d.session(q.item.Thread.Key, nil)
	if s == nil || q.board == s.board {
		return q.plan
	}
	if q.item.Turn > 0 || q.item.Seq > 0 {
		return s.board.wanted()
	}
	return 0
}

// planShown makes the session's plan message show version ver of what
// its board wants (0: makes it posted) before what comes next on the
// session's lane, unless the board cannot now (Board.showFirst).
func (d *deliverer) planShown(key string, ver uint64) {
	if s := d.session(key, nil); s != nil {
		s.board.showFirst(ver)
	}
}

// idle reports whether no reply is waiting for delivery.
func (o *outbox) idle() bool {
	now, cancel := context.WithCancel(context.Background())
	cancel()
	return o.d.lane.Wait(now) == nil
}

// memOutbox is the OutboxStore of a router given none: ids only, nothing
// survives a restart.
type memOutbox struct {
	mu   sync.Mutex // guards next
	next uint64
}

func (m *memOutbox) AddOutbox(_ context.Context, _ string, items [][]byte) ([]uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]uint64, len(items))
	for i := range items {
		m.next++
		ids[i] = m.next
	}
	return ids, nil
}

func (m *memOutbox) DeleteOutbox(context.Context, string, uint64) error { return nil }

func (m *memOutbox) Outbox(context.Context, func(uint64, []byte)) error { return nil }

func (m *memOutbox) OutboxOf(context.Context, string, func(uint64, []byte)) error { return nil }

// tellAttempts bounds the attempts at a Tell: a person who pressed a
// button waits for its answer, and a note a minute late is a note to
// drop rather than to hold a caller for.
const tellAttempts = 3

// Tell says text in th, to user alone when user is set (a refusal: a
// button press or Slack's own Stop decided against), else to the
// channel (Discord's note that messages were missed): the router's own
// words, through the one delivery step (classified, retried a few times
// by the one backoff, traced, and within the platform's budget for
// posts), with an idempotency key for the platforms that take one.
//
// It is no part of a session's state: not stored, fenced or ordered with
// a session's replies, so that any replica can say it, for a thread
// whose session is held elsewhere or is gone. A private note goes only
// through a PrivateReplier.
func (d *deliverer) Tell(ctx context.Context, th Thread, user, text string) error {
	p := d.opts.Platforms[th.Platform]
	if p == nil {
		return fmt.Errorf("chat: tell %s: no platform %q: %w", th.Key, th.Platform, ErrUndeliverable)
	}
	pr := d.caps[th.Platform].Private
	if user != "" && pr == nil {
		return fmt.Errorf("chat: tell %s: %s shows no private messages: %w", th.Key, th.Platform, ErrUndeliverable)
	}
	op := "tell"
	if user != "" {
		op = "tell_privately"
	}
	now := d.opts.Now()
	key := fmt.Sprintf("tell/%s/%d.%d", th.Key, now.UnixNano(), d.outbox.added.Add(1))
	unsure := false
	err := d.sendOnce(ctx, op, th, p, PriorityFinal, user == "", func(ctx context.Context) error {
		ctx = withSend(ctx, key, now, unsure)
		var err error
		if user != "" {
			err = pr.ReplyPrivately(ctx, th, user, text)
		} else {
			err = p.Reply(ctx, th, "", text)
		}
		var rl *RateLimitError
		unsure = unsure || (err != nil && !errors.As(err, &rl))
		return err
	})
	if err != nil {
		d.opts.Logger.Warn("note not delivered", "session", th.Key, "op", op, "err", err)
	}
	return err
}

// Post makes a post of the platform's own that belongs to no session yet
// (the task a Slack /pinplan command quotes in the channel, whose thread
// becomes the session) through the one delivery step: paced as a
// thread's first post in th's channel, classified, retried a few times
// by the one backoff and traced. send makes the post. A post that failed
// after it may have landed (a 5xx) is made again, so the channel may show
// the task twice; a post that did not reach the channel would lose the
// task, which is worse.
func (d *deliverer) Post(ctx context.Context, th Thread, send func(ctx context.Context) error) error {
	p := d.opts.Platforms[th.Platform]
	if p == nil {
		return fmt.Errorf("chat: post in %s: no platform %q: %w", th.Channel, th.Platform, ErrUndeliverable)
	}
	return d.sendOnce(ctx, "post", th, p, PriorityFirstPost, true, send)
}

// sendOnce is the delivery step of a send that is no part of a session's
// log (Tell, Post): paced as a post of prio in th's channel when paced is
// set, classified, retried tellAttempts times by the one backoff, each
// attempt within replyTimeout, traced as op.
func (d *deliverer) sendOnce(ctx context.Context, op string, th Thread, p Platform, prio Priority, paced bool, send func(ctx context.Context) error) error {
	pacer := d.caps[th.Platform].Paced
	now := d.opts.Now()
	_, err := d.deliver(ctx, op, th, now, func(ctx context.Context) error {
		if paced && pacer != nil {
			if err := Pace(ctx, pacer, Request{Thread: th, Method: MethodPost, Priority: func() Priority { return prio }, Since: now}); err != nil {
				return err
			}
		}
		ctx, cancel := context.WithTimeout(ctx, replyTimeout)
		defer cancel()
		return send(ctx)
	})
	return err
}
