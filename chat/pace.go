package chat

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Priority orders the requests waiting for one short platform budget
// (DESIGN §6): what people would otherwise see wrong for longest goes
// first. A plan's first post before a final state (done, stopped,
// failed, waiting for approval) before an intermediate revision; within
// one priority, the oldest waiting first.
type Priority int

// Priorities, most urgent first.
const (
	PriorityFirstPost Priority = iota
	// PriorityAwaited: content an answer waits for on the session's
	// lane (its turn's final state, or the edit in flight ahead of the
	// answer's live words); first among the final states under a burst.
	PriorityAwaited
	PriorityFinal
	PriorityIntermediate
)

// Method names the budget a platform request counts against, as the
// platform counts it: Slack per method (chat.postMessage per channel,
// chat.update, pins.add and pins.remove, reactions.add and
// reactions.remove), Discord per route.
type Method string

// Methods the plan board, the cards, the working indicator, the outbox
// and the live answer pace.
const (
	MethodPost       Method = "post"       // a new message: a plan's first post, a card, a reply
	MethodEdit       Method = "edit"       // an edit of the plan message or of a card
	MethodPin        Method = "pin"        // a pin
	MethodUnpin      Method = "unpin"      // an unpin (Slack counts pins.remove apart from pins.add)
	MethodReaction   Method = "reaction"   // a reaction added: the working indicator
	MethodUnreaction Method = "unreaction" // a reaction removed (Slack counts reactions.remove apart)
	// MethodAppend: more of a live answer in the message being written
	// (Slack's chat.appendStream, counted per workspace; a Discord edit).
	MethodAppend Method = "append"
)

// Request is one platform request about to be made, as a budget sees it.
type Request struct {
	Thread Thread
	Method Method
	// Priority is read when a slot is handed out, not when the request
	// starts waiting: a board whose wanted revision turned final while it
	// waited moves up.
	Priority func() Priority
	// Since is when what the request sends was first wanted: the oldest
	// waiting goes first among equals.
	Since time.Time
}

// Budget is one platform budget (one Slack method in one workspace, one
// channel's posts, one Discord route): a token bucket whose slots go to
// the most urgent waiter when they come, not to whoever asked first. A
// 429 holds this budget only (Hold). Its one dispatching goroutine runs
// only while someone waits.
type Budget struct {
	lim *rate.Limiter

	mu      sync.Mutex
	waiters []*budgetWaiter
	seq     uint64
	running bool
	hold    time.Time // no slot before this (a 429's Retry-After)
	// refilling: the dispatcher waits for spare slots (NotifySpare); a
	// new waiter may take one now, so it is woken.
	refilling bool
	gone      chan struct{} // a waiter left: the dispatcher looks again
	wake      chan struct{} // the pace or the hold changed: the dispatcher reckons again
}

type budgetWaiter struct {
	prio  func() Priority
	since time.Time
	seq   uint64
	ready chan struct{}
	// notify, when set, is called with the slot instead (Notify); stop
	// ends its watch of the asker's context.
	notify func()
	stop   func() bool
	// spare: the slot is given only with this many more left in the
	// bucket (NotifySpare).
	spare int
}

// NewBudget returns a budget of perMinute requests a minute with bursts
// of burst.
func NewBudget(perMinute float64, burst int) *Budget {
	if burst < 1 {
		burst = 1
	}
	return &Budget{lim: rate.NewLimiter(rate.Limit(perMinute/60), burst), gone: make(chan struct{}, 1), wake: make(chan struct{}, 1)}
}

// SetPerMinute changes the pace (replicas sharing the platform's budget
// each take their part).
func (b *Budget) SetPerMinute(perMinute float64) {
	b.lim.SetLimit(rate.Limit(perMinute / 60))
	b.kick()
}

// SetBurst changes how many requests may go at once after a quiet time.
func (b *Budget) SetBurst(burst int) {
	b.lim.SetBurst(max(burst, 1))
	b.kick()
}

// kick makes the dispatcher reckon its next slot again.
func (b *Budget) kick() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// Idle reports whether no one waits and the whole burst is back: a new
// budget in its place would pace the same, so it may be dropped.
func (b *Budget) Idle() bool {
	return b.Waiting() == 0 && b.lim.Tokens() >= float64(b.lim.Burst())
}

// PerMinute is the pace now.
func (b *Budget) PerMinute() float64 { return float64(b.lim.Limit()) * 60 }

// Hold gives no slot for d: the platform answered 429 with Retry-After d
// for a request counted in this budget.
func (b *Budget) Hold(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if until := time.Now().Add(d); until.After(b.hold) {
		b.hold = until
		b.kick()
	}
}

// Held reports whether the budget gives no slot now: a 429's
// Retry-After holds it.
func (b *Budget) Held() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Now().Before(b.hold)
}

// TryNow takes a slot if one is free now, with reserve more left for
// the requests that wait for theirs, and no one is waiting: for a request
// that would rather go later with more (a live reply's next edit) than
// wait.
func (b *Budget) TryNow(reserve int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.waiters) > 0 || time.Now().Before(b.hold) || b.lim.Tokens() < float64(1+reserve) {
		return false
	}
	return b.lim.Allow()
}

// Waiting is the number of requests waiting for a slot.
func (b *Budget) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiters)
}

// Wait blocks until the budget gives this request a slot, or ctx ends.
func (b *Budget) Wait(ctx context.Context, prio func() Priority, since time.Time) error {
	w := &budgetWaiter{prio: prio, since: since, ready: make(chan struct{})}
	b.mu.Lock()
	b.addLocked(w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		b.leave(w)
		select {
		case <-w.ready: // given a slot as it left: the slot is spent
		default:
		}
		return context.Cause(ctx)
	}
}

// Notify asks for a slot without waiting for it: f is called when the
// budget gives this request its slot, unless ctx ended first (then f is
// never called). prio and since are Wait's. f runs on the budget's
// dispatcher and must not block: it hands the slot to whoever sends (a
// plan board waiting for its pin holds no goroutine meanwhile).
func (b *Budget) Notify(ctx context.Context, prio func() Priority, since time.Time, f func()) {
	w := &budgetWaiter{prio: prio, since: since, notify: f}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.addLocked(w)
	// Its callback takes b.mu: it runs after this returns, even for a
	// ctx that has ended already.
	w.stop = context.AfterFunc(ctx, func() { b.leave(w) })
}

// NotifySpare is Notify for a request that would rather wait than take
// the last slots of a burst: its slot is given only with spare more left
// for the requests that come after it, when those go first (a live
// answer's next append beside the plan's final state, which may come
// any moment). A burst too small for it leaves one slot to the request.
func (b *Budget) NotifySpare(ctx context.Context, spare int, prio func() Priority, since time.Time, f func()) {
	w := &budgetWaiter{prio: prio, since: since, notify: f, spare: max(spare, 0)}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.addLocked(w)
	w.stop = context.AfterFunc(ctx, func() { b.leave(w) })
}

// addLocked adds w to the waiters, with defaults for what it leaves out,
// and starts the dispatcher if it is not running. b.mu is held.
func (b *Budget) addLocked(w *budgetWaiter) {
	if w.prio == nil {
		w.prio = func() Priority { return PriorityIntermediate }
	}
	if w.since.IsZero() {
		w.since = time.Now()
	}
	b.seq++
	w.seq = b.seq
	b.waiters = append(b.waiters, w)
	if !b.running {
		b.running = true
		go b.dispatch()
	} else if b.refilling {
		b.kick()
	}
}

// leave takes w off the waiters (its asker gave up) and lets the
// dispatcher look again.
func (b *Budget) leave(w *budgetWaiter) {
	b.mu.Lock()
	b.remove(w)
	b.mu.Unlock()
	select {
	case b.gone <- struct{}{}:
	default:
	}
}

// remove takes w off the waiters, if it is one. b.mu is held.
func (b *Budget) remove(w *budgetWaiter) {
	for i, o := range b.waiters {
		if o == w {
			b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
			return
		}
	}
}

// dispatch hands out slots while anyone waits: it takes a token first,
// then gives it to the most urgent waiter of that moment.
func (b *Budget) dispatch() {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		b.mu.Lock()
		if len(b.waiters) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		hold := time.Until(b.hold)
		b.mu.Unlock()
		if hold > 0 {
			b.sleep(timer, hold)
			continue // the hold may have grown meanwhile, or everyone left
		}
		if refill := b.refill(); refill > 0 {
			// Every waiter wants spare slots: until the bucket has
			// them, or a waiter comes that takes one now.
			b.sleep(timer, refill)
			b.mu.Lock()
			b.refilling = false
			b.mu.Unlock()
			continue
		}
		r := b.lim.Reserve()
		if !b.sleep(timer, r.Delay()) {
			r.Cancel() // everyone left: give the token back
			continue
		}
		if notify := b.give(r); notify != nil {
			notify()
		}
	}
}

// refill is how long until the bucket has the spare slots every waiter
// wants beside its own (NotifySpare), 0 when one of them may have the
// next slot; it marks the wait (refilling), so that a waiter that
// wants none wakes the dispatcher. A slot taken meanwhile outside the
// dispatcher (TryNow) can leave the next one to nobody: it is spent.
func (b *Budget) refill() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	need := -1
	for _, w := range b.waiters {
		spare := b.spareOf(w)
		if spare == 0 {
			return 0
		}
		if need < 0 || spare < need {
			need = spare
		}
	}
	lim, tokens := float64(b.lim.Limit()), b.lim.Tokens()
	if need < 0 || tokens >= float64(need+1) || lim <= 0 {
		return 0
	}
	b.refilling = true
	return max(time.Duration((float64(need+1)-tokens)/lim*float64(time.Second)), time.Millisecond)
}

// spareOf is the slots w wants left after its own: a burst too small
// for them leaves it one.
func (b *Budget) spareOf(w *budgetWaiter) int { return max(min(w.spare, b.lim.Burst()-1), 0) }

// sleep waits d, or less when a waiter leaves and none is left; it
// reports whether it waited the whole d.
func (b *Budget) sleep(timer *time.Timer, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	timer.Reset(d)
	for {
		select {
		case <-timer.C:
			return true
		case <-b.gone:
			if b.Waiting() == 0 {
				if !timer.Stop() {
					<-timer.C
				}
				return false
			}
		case <-b.wake:
			if !timer.Stop() {
				<-timer.C
			}
			return false
		}
	}
}

// give hands the slot r reserved to the most urgent waiter: the lowest
// Priority, then the oldest Since, then the first to ask, among those
// whose spare slots are left after it (NotifySpare). It returns the
// waiter's notify func, for the caller to call without the lock, if the
// waiter asked with Notify.
func (b *Budget) give(r *rate.Reservation) func() {
	b.mu.Lock()
	ws := append([]*budgetWaiter(nil), b.waiters...)
	b.mu.Unlock()
	if len(ws) == 0 {
		r.Cancel()
		return nil
	}
	// Priorities are read without the budget's lock: they take their
	// owner's.
	prios := make([]Priority, len(ws))
	for i, w := range ws {
		prios[i] = w.prio()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	left := b.lim.Tokens() // after r's token
	var best *budgetWaiter
	var bestPrio Priority
	for i, w := range ws {
		if !b.present(w) || float64(b.spareOf(w)) > left {
			continue
		}
		if best == nil || prios[i] < bestPrio ||
			prios[i] == bestPrio && (w.since.Before(best.since) || w.since.Equal(best.since) && w.seq < best.seq) {
			best, bestPrio = w, prios[i]
		}
	}
	if best == nil {
		r.Cancel()
		return nil
	}
	b.remove(best)
	if best.notify == nil {
		close(best.ready)
		return nil
	}
	if !best.stop() {
		return nil // its context ended as the slot came: the slot is spent
	}
	return best.notify
}

func (b *Budget) present(w *budgetWaiter) bool {
	for _, o := range b.waiters {
		if o == w {
			return true
		}
	}
	return false
}
