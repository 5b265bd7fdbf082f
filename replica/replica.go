// Package replica runs pinplan on several processes that share one etcd
// prefix (DESIGN §14): which replica runs a session, how an event reaches
// it, who holds the Discord gateway, and what the others show meanwhile.
//
// Follow an event from a replica to the owner:
//
//  1. An adapter (Slack, Discord, the console) on any replica decodes a
//     message and calls its inbox, Handler.Handle.
//  2. Handle puts it at the end of the session's queue in etcd
//     (etcdstore.Replica.Forward, P fwd/K/, in the order the replicas
//     received them) and tries to take the session (TryTake): the first
//     replica that finds no live owner key and runs the session's
//     platform writes one on its lease.
//  3. The owner hears of the queued event: at once when it took the
//     session itself (Taken pumps the queue), else through its watch
//     (etcdstore.Events.Handed, started by Handler.Start).
//  4. The owner drains the queue in order on the session's serial queue
//     (drain): each message goes to its own chat.Router, which queues it
//     for the agent in the same write that removes it from the hand-over
//     queue (etcdstore.WithConsumed), so a crash neither loses nor
//     repeats it. The router and the runner then work as in one process.
//  5. When the owner's lease ends (kill -9, a partition), its owner keys
//     go with it; every replica hears Orphaned and the first that runs
//     the platform and finds work takes the session, resumes its router
//     (plan edits, replies not delivered) and its runner (Taken).
//
// Clicks and the console's questions (Known, Visible, Cards) are answered
// where they arrive, from the session's records as they are now; a stop
// for a session another replica holds is passed to it (Runner.Stop).
// Shared budgets (ShareBudgets), the console's view of threads held
// elsewhere (Follow) and the Discord gateway's election (Gateway) are
// here too. The package knows no adapter: what it needs of one is a small
// interface.
package replica

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/etcdstore"
	"github.com/pinplan/pinplan/internal/serial"
)

// Router is what the Handler needs of the replica's own router
// (chat.Router).
type Router interface {
	chat.Inbox
	chat.CardSource
	Hold(ctx context.Context, in chat.Incoming) (bool, error)
	Rename(key, title string) (chat.Thread, bool)
	Delete(ctx context.Context, key, by string) error
	Visible(key string) bool
	Thread(key string) (chat.Thread, bool)
	StopSession(ctx context.Context, c chat.Click) chat.ClickResult
	Forget(key string)
	ResumeSession(ctx context.Context, key string)
}

// Turns is what the Handler needs of the replica's runner (agent.Runner).
type Turns interface {
	Wake(key string)
	Stop(key, by string) bool
}

var (
	_ Router = (*chat.Router)(nil)
	_ Turns  = (*agent.Runner)(nil)
)

// Options configures a Handler.
type Options struct {
	Replica *etcdstore.Replica
	Store   *etcdstore.Store
	Router  Router
	Runner  Turns
	Logger  *slog.Logger
	// Takes, when set, is the replica's OnTake: the handler follows it,
	// so that each session the replica takes is Taken.
	Takes *Takes
	// Takers bounds the takeovers of orphaned sessions under way (0: 8).
	Takers int
}

// Handler is the glue between the router, the runner and the replica's
// ownership of sessions (see the package doc). It is the adapters' and
// the console's inbox with replicas.
type Handler struct {
	ctx    context.Context
	rep    *etcdstore.Replica
	st     *etcdstore.Store
	router Router
	runner Turns
	log    *slog.Logger
	pumps  serial.Queue  // handed-over events, per session
	takers chan struct{} // bounds the takeovers under way
	wg     sync.WaitGroup
}

var (
	_ chat.Inbox      = (*Handler)(nil)
	_ chat.CardSource = (*Handler)(nil)
)

// New returns a Handler that works until ctx ends.
func New(ctx context.Context, opts Options) *Handler {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Takers <= 0 {
		opts.Takers = 8
	}
	x := &Handler{ctx: ctx, rep: opts.Replica, st: opts.Store, router: opts.Router, runner: opts.Runner, log: opts.Logger,
		takers: make(chan struct{}, opts.Takers)}
	if opts.Takes != nil {
		opts.Takes.follow(x)
	}
	return x
}

// Start watches the replica's sessions (handed-over events, wakes, stops,
// orphaned sessions) and scans once for work no live replica holds. It
// returns how many sessions the scan took.
func (x *Handler) Start(ctx context.Context) (int, error) {
	// Sessions this replica holds hear of work through the watches;
	// sessions whose holder is gone are taken by whoever sees them first.
	if err := x.rep.Watch(ctx, etcdstore.Events{Handed: x.pump, Wake: x.runner.Wake, Stop: x.stop,
		Orphaned: x.orphaned, Rescan: func() { x.scan() }}); err != nil {
		return 0, err
	}
	return x.scan(), nil
}

// Wait waits for the takeovers and the hand-over queues to finish; call
// it once ctx ended.
func (x *Handler) Wait() {
	x.wg.Wait()
	x.pumps.Wait(context.Background())
}

// handed is an event in a session's queue in etcd: a message, or a
// change of how the session is listed (renamed, deleted), which only its
// holder may write.
type handed struct {
	Message *chat.Incoming `json:"message,omitempty"`
	Rename  *string        `json:"rename,omitempty"` // the new title
	Delete  *string        `json:"delete,omitempty"` // who deleted it
}

// Handle implements chat.Inbox: the message joins its session's queue,
// and the session is taken if no replica holds it.
func (x *Handler) Handle(ctx context.Context, in chat.Incoming) error {
	in.Sync = false // the holder answers in the thread, wherever that is
	if held, err := x.held(ctx, in); err != nil || held {
		return err // a thread that may not be pinplan's hears nothing
	}
	if err := x.hand(ctx, in.Thread.Key, handed{Message: &in}); err != nil {
		return &chat.Rejection{Reason: "I couldn't accept your message right now (the bot's database is unavailable). Please send it again in a moment.", Refused: true}
	}
	if x.rep.Holds(in.Thread.Key) {
		x.handled(ctx, in.Thread.Key)
	}
	return nil
}

// handled waits until the session's queue, as it is now, has been
// through this replica's router (or ctx ends): a message that reaches
// its holder is handled when Handle returns, as without replicas, so the
// console's fetch right after its POST finds the thread it made.
func (x *Handler) handled(ctx context.Context, key string) {
	done := make(chan struct{})
	x.pumps.Add(key, func() { close(done) })
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// held reports whether a follow-up (chat.Incoming.FollowUp) of a thread
// that no replica knows a session for was kept to wait for one (DESIGN
// §14): the session its mention makes takes it, on whichever replica
// holds it (chat.Router.Handle), else it expires. Such a follow-up is
// neither handed over nor taken: that would make every thread reply in
// a channel pinplan is in a session held for good. The store's hold
// checks again, in one transaction, that no session was made meanwhile;
// false means hand the message on as any other.
func (x *Handler) held(ctx context.Context, in chat.Incoming) (bool, error) {
	if !in.FollowUp || x.Known(in.Thread.Key) {
		return false, nil
	}
	held, err := x.router.Hold(ctx, in)
	if err != nil {
		x.log.Error("hold a follow-up for its thread's session", "session", in.Thread.Key, "err", err)
	}
	return held, err
}

// hand puts ev at the end of the session's queue and takes the session if
// nobody holds it.
func (x *Handler) hand(ctx context.Context, key string, ev handed) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if err := x.rep.Forward(ctx, key, data); err != nil {
		x.log.Error("hand an event over to its session", "session", key, "err", err)
		return err
	}
	held, err := x.rep.TryTake(ctx, key)
	if err != nil {
		x.log.Warn("take the session", "session", key, "err", err)
	}
	if held {
		x.pump(key)
	}
	return nil
}

// Rename renames the session (the console, Slack's title change): at
// once when this replica holds it, else through its holder.
func (x *Handler) Rename(key, title string) (chat.Thread, bool) {
	if x.rep.Holds(key) {
		return x.router.Rename(key, title)
	}
	th, ok := x.thread(key)
	if !ok {
		return chat.Thread{}, false
	}
	if err := x.hand(x.ctx, key, handed{Rename: &title}); err != nil {
		return chat.Thread{}, false
	}
	if t := chat.Shorten(strings.Join(strings.Fields(title), " "), 80); t != "" {
		th.Title = t
	}
	return th, true
}

// Delete deletes the session as reset does (the console): at once when
// this replica holds it, else through its holder.
func (x *Handler) Delete(ctx context.Context, key, by string) error {
	if x.rep.Holds(key) {
		return x.router.Delete(ctx, key, by)
	}
	if _, ok := x.thread(key); !ok {
		return errors.New("chat: no such session")
	}
	return x.hand(ctx, key, handed{Delete: &by})
}

// Visible reports whether the console lists the session, from its
// records as they are now.
func (x *Handler) Visible(key string) bool {
	if !x.rep.Holds(key) {
		x.router.Forget(key)
		defer x.router.Forget(key)
	}
	return x.router.Visible(key)
}

// Cards implements chat.CardSource from the session's records as they
// are now: the console lists a thread's approval cards on every replica.
func (x *Handler) Cards(key string) []chat.CardInfo {
	if !x.rep.Holds(key) {
		x.router.Forget(key)
	}
	return x.router.Cards(key)
}

// thread returns the session's thread from its records as they are now.
func (x *Handler) thread(key string) (chat.Thread, bool) {
	x.router.Forget(key)
	defer x.router.Forget(key)
	return x.router.Thread(key)
}

// StopSession is Slack's own Stop (agent_session_stopped) with replicas:
// decided here by the Stop rule, from the records as they are now; a
// stop goes to the holder (Runner.Stop).
func (x *Handler) StopSession(ctx context.Context, c chat.Click) chat.ClickResult {
	if !x.rep.Holds(c.Thread.Key) {
		x.router.Forget(c.Thread.Key)
		defer x.router.Forget(c.Thread.Key)
	}
	return x.router.StopSession(ctx, c)
}

// Known implements chat.Inbox from the cluster's records.
func (x *Handler) Known(key string) bool {
	if x.rep.Holds(key) {
		return x.router.Known(key)
	}
	ctx, cancel := context.WithTimeout(x.ctx, 5*time.Second)
	defer cancel()
	ok, err := x.st.Known(ctx, key)
	if err != nil {
		x.log.Warn("look a session up", "session", key, "err", err)
	}
	return ok
}

// Click implements chat.Inbox: decided here, from the records as they
// are now (the router forgets what it read for a session it does not
// hold).
func (x *Handler) Click(ctx context.Context, c chat.Click) chat.ClickResult {
	key := c.Thread.Key
	if x.rep.Holds(key) {
		return x.router.Click(ctx, c)
	}
	x.router.Forget(key)
	defer x.router.Forget(key)
	return x.router.Click(ctx, c)
}

// Tell implements chat.Inbox: said from here, whoever holds the session
// (the router's notes are no part of a session's state).
func (x *Handler) Tell(ctx context.Context, th chat.Thread, user, text string) error {
	return x.router.Tell(ctx, th, user, text)
}

// Post implements chat.Inbox: posted from here, as Tell.
func (x *Handler) Post(ctx context.Context, th chat.Thread, send func(context.Context) error) error {
	return x.router.Post(ctx, th, send)
}

// pump handles the session's handed-over events in order, on its queue.
func (x *Handler) pump(key string) {
	x.pumps.Kick(key, func() { x.drain(key) })
}

func (x *Handler) drain(key string) {
	ctx := x.ctx
	for ctx.Err() == nil && x.rep.Holds(key) {
		queued, err := x.rep.Queued(ctx, key)
		if err != nil {
			x.log.Error("read handed-over events", "session", key, "err", err)
			return
		}
		if len(queued) == 0 {
			return
		}
		for _, q := range inSentOrder(queued) {
			h, ev, err := q.h, q.ev, q.err
			switch {
			case err != nil:
				x.log.Error("unreadable handed-over event; dropped", "session", key, "err", err)
			case ev.Message != nil:
				err = x.router.Handle(etcdstore.WithConsumed(ctx, h.Key), *ev.Message)
				if err != nil && !errors.Is(err, chat.ErrRejected) {
					// Neither queued nor answered (no such platform here):
					// it stays first in the queue for a holder that can.
					x.log.Error("could not handle a handed-over message; it stays queued", "session", key, "err", err)
					return
				}
			case ev.Rename != nil:
				x.router.Rename(key, *ev.Rename)
			case ev.Delete != nil:
				err = x.router.Delete(ctx, key, *ev.Delete)
			}
			if err != nil && !errors.Is(err, chat.ErrRejected) {
				x.log.Error("handle a handed-over event", "session", key, "err", err)
			}
			// A message the router queued took its event along (WithConsumed);
			// a command or a refusal did not.
			if err := x.rep.Done(ctx, key, h); err != nil {
				x.log.Warn("remove a handled event", "session", key, "err", err)
				return
			}
		}
	}
}

// Taken runs when this replica takes a session (Options.Takes): the router reads its records afresh and finishes what the
// last holder left (plan edits, replies), the runner resumes its turn,
// and its queued events are handled.
func (x *Handler) Taken(key string) {
	x.router.ResumeSession(x.ctx, key)
	x.runner.Wake(key)
	x.pump(key)
	if by, ok, err := x.rep.PendingStop(x.ctx, key); err != nil {
		x.log.Warn("look for a stop asked of the last holder", "session", key, "err", err)
	} else if ok {
		x.stop(key, by) // the runner holds it for the turn it is resuming
	}
}

// orphaned runs when a session's holder went away: the session is taken
// if it has work (a turn running or waiting, queued messages or events,
// replies or plan edits not delivered, a board that says a turn runs).
// Takeovers run a few at a time, off the watch, so that a replica that
// held many sessions is replaced within the TTL.
func (x *Handler) orphaned(key string) {
	x.takers <- struct{}{}
	x.wg.Go(func() {
		defer func() { <-x.takers }()
		if !x.rep.Runs(key) || !x.hasWork(key) {
			return
		}
		if _, err := x.rep.TryTake(x.ctx, key); err != nil {
			x.log.Warn("take an orphaned session", "session", key, "err", err)
		}
	})
}

// hasWork reads the session's state and queues in one request.
func (x *Handler) hasWork(key string) bool {
	g, err := x.st.Glance(x.ctx, key)
	if err != nil || g.Unknown {
		return true // let the taker look
	}
	return g.State.InTurn() || g.Inbox > 0 || g.Handed > 0 || g.Outbox > 0 || g.Undelivered || g.BoardPending
}

// stop applies a stop asked of this replica (by another one, for a
// session it holds) and removes the request.
func (x *Handler) stop(key, by string) {
	x.runner.Stop(key, by)
	x.rep.StopDone(x.ctx, key)
}

// scan takes every session with work that no live replica holds, and
// goes over the sessions this replica holds as a watch would have (their
// handed-over events, a decision made elsewhere, a stop asked): at start,
// and when a watch may have missed events.
func (x *Handler) scan() int {
	ctx := x.ctx
	for _, key := range x.rep.HeldKeys() {
		x.pump(key)
		x.runner.Wake(key)
		if by, ok, err := x.rep.PendingStop(ctx, key); err == nil && ok {
			x.stop(key, by)
		}
	}
	var keys []string
	add := func(ks []string, err error) {
		if err != nil {
			x.log.Error("look for sessions with work", "err", err)
		}
		keys = append(keys, ks...)
	}
	add(x.st.Resumable(ctx))
	add(x.rep.QueuedKeys(ctx))
	add(x.st.OutboxKeys(ctx))
	add(x.st.Undelivered(ctx))   // a log its last holder did not finish showing
	add(x.st.PendingBoards(ctx)) // a plan not shown or pinned yet
	slices.Sort(keys)
	keys = slices.Compact(keys)
	n := 0
	for _, key := range keys {
		if ok, err := x.rep.TryTake(ctx, key); err != nil {
			x.log.Warn("take a session", "session", key, "err", err)
		} else if ok {
			n++
		}
	}
	return n
}

// queuedEvent is a handed-over event read from the session's queue.
type queuedEvent struct {
	h   etcdstore.Handed
	ev  handed
	err error // unreadable
}

// orderedIDs are the platforms whose message ids grow with time (Slack's
// ts, Discord's snowflakes); the console's are random.
var orderedIDs = map[string]bool{"slack": true, "discord": true}

// inSentOrder decodes the events queued together and puts their messages
// that carry a platform message id in the order of those ids: each
// replica forwards what reached it as it comes, so a reply that reached
// a slower replica can be queued after the next one (DESIGN §14: in the
// order they were sent). Other events, and messages without such an id,
// keep their places.
func inSentOrder(queued []etcdstore.Handed) []queuedEvent {
	out := make([]queuedEvent, len(queued))
	var slots []int
	for i, h := range queued {
		out[i].h = h
		out[i].err = json.Unmarshal(h.Data, &out[i].ev)
		if m := out[i].ev.Message; out[i].err == nil && m != nil && m.MessageID != "" && orderedIDs[m.Thread.Platform] {
			slots = append(slots, i)
		}
	}
	msgs := make([]queuedEvent, len(slots))
	for j, i := range slots {
		msgs[j] = out[i]
	}
	slices.SortStableFunc(msgs, func(a, b queuedEvent) int {
		return cmp.Compare(chat.MessageOrder(*a.ev.Message), chat.MessageOrder(*b.ev.Message))
	})
	for j, i := range slots {
		out[i] = msgs[j]
	}
	return out
}
