// Package serial is pinplan's one serial executor (DESIGN.md §1): a
// Queue runs functions one at a time per key, in the order they were
// queued, and different keys in parallel. The adapters queue a thread's
// platform events on it, the agent a session's turns, chat's outbox a
// session's replies. It is tailscale's util/execqueue with a key.
//
// It imports only the standard library; any package of this module may
// import it.
package serial

import (
	"context"
	"sync"
	"time"
)

// Queue runs functions one at a time per key. The zero value is ready; a
// Queue must not be copied after first use.
//
// What callers may rely on:
//   - The functions queued for one key run one at a time, in the order Add
//     and Kick queued them; each starts after the one before it returned,
//     so what one did is visible to the next without more locking.
//   - Different keys run in parallel, with no limit: each key with work has
//     its own goroutine, which ends as soon as the key has nothing left.
//     An idle key costs nothing, not even a map entry.
//   - A function queued with AddIdle runs only when nothing queued with
//     Add or Kick waits for its key, even what was queued after it: the
//     key's tidy-up goes last. AddIdle's functions keep their order among
//     themselves.
//   - Add, AddIdle and Kick never block on the functions (they may be
//     called from one, for any key, its own included: the new function
//     runs after the caller returns).
//
// A function must not wait for anything queued behind it on its own key,
// directly or through Wait: that cannot start before it returns, so it
// would wait forever. A panic in a function is not recovered, as in any
// goroutine.
type Queue struct {
	mu   sync.Mutex       // guards keys and idle
	keys map[string]*fifo // the keys with work queued or running
	// idle is closed, and set to nil, when keys becomes empty; nil while
	// no Wait is waiting.
	idle chan struct{}
}

// fifo is one key's functions not started yet, oldest first.
type fifo struct {
	fs []func()
	// idle are AddIdle's functions, run when fs is empty.
	idle []func()
	// kicked: the last of fs came from Kick. It is false when fs is
	// empty, so a Kick while the key's last function runs queues another.
	kicked bool
}

// Add queues f behind the functions already queued for key, starting the
// key's goroutine if it has none.
func (q *Queue) Add(key string, f func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := q.fifoLocked(key)
	k.fs = append(k.fs, f)
	k.kicked = false
}

// AddIdle queues f for key to run when nothing queued with Add or Kick
// waits: behind what is queued for key now, and behind what Add and Kick
// queue for it later, until f starts. It is for what only tidies up
// (DESIGN §1: unpins, a status, a clearing), which must never hold up what
// the key's other functions send. A function AddIdle queued runs after the
// ones it queued before.
func (q *Queue) AddIdle(key string, f func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := q.fifoLocked(key)
	k.idle = append(k.idle, f)
}

// Later queues f on key d from now, behind what is queued for key then:
// a retry after a backoff, or a save that covers a busy second. The
// queue holds no goroutine for it meanwhile. Wait does not wait for f
// before it is queued; f checks for itself whether it still has work.
// If ctx ends first, f is queued then, and finds ctx done: a shutdown
// that waits for f is not held for the rest of d.
func (q *Queue) Later(ctx context.Context, key string, d time.Duration, f func()) {
	var once sync.Once
	add := func() { once.Do(func() { q.Add(key, f) }) }
	stop := context.AfterFunc(ctx, add)
	time.AfterFunc(d, func() {
		stop()
		add()
	})
}

// Kick makes sure f runs on key after everything queued for key so far:
// it is Add, except when the last function queued for key came from Kick
// and has not started, because that one already runs after all of it.
// Then Kick does nothing and f is dropped; so at most one kicked function
// waits behind the others, however often Kick is called.
//
// It is for "look again" work whose every run does whatever is pending
// when it starts (a session's turn reads its inbox first): one run that
// starts after the latest Kick is all that is needed, and callers pass
// functions that do the same thing.
func (q *Queue) Kick(key string, f func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := q.fifoLocked(key)
	if k.kicked {
		return
	}
	k.fs = append(k.fs, f)
	k.kicked = true
}

// fifoLocked returns key's fifo, creating it and starting its goroutine
// when the key is idle.
func (q *Queue) fifoLocked(key string) *fifo {
	if q.keys == nil {
		q.keys = map[string]*fifo{}
	}
	k, ok := q.keys[key]
	if !ok {
		k = &fifo{}
		q.keys[key] = k
		go q.run(key, k)
	}
	return k
}

// run is key's goroutine: it runs the key's functions until none is left,
// then forgets the key, under the same lock Add takes, so a function
// queued at that moment either is run here or starts a new goroutine.
func (q *Queue) run(key string, k *fifo) {
	for {
		q.mu.Lock()
		if len(k.fs) == 0 && len(k.idle) > 0 {
			f := k.idle[0]
			k.idle[0] = nil
			k.idle = k.idle[1:]
			q.mu.Unlock()
			f()
			continue
		}
		if len(k.fs) == 0 {
			delete(q.keys, key)
			if len(q.keys) == 0 && q.idle != nil {
				close(q.idle)
				q.idle = nil
			}
			q.mu.Unlock()
			return
		}
		f := k.fs[0]
		k.fs[0] = nil // garbage once run
		k.fs = k.fs[1:]
		if len(k.fs) == 0 {
			k.kicked = false
		}
		q.mu.Unlock()
		f()
	}
}

// Busy reports whether key has a function queued or running.
func (q *Queue) Busy(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.keys[key]
	return ok
}

// Wait waits until no key has a function queued or running, and returns
// nil; or, if ctx is done first, its cause. When nothing is queued or
// running it returns nil at once, whatever the state of ctx, so a done
// context asks "idle now?" without waiting.
//
// Functions may be queued while Wait waits, and keep it waiting until
// they have run too. Wait does not stop anyone from queueing more: work
// queued after the moment it saw the queue idle may already be running
// when it returns. Callers that shut down refuse new work themselves
// first.
func (q *Queue) Wait(ctx context.Context) error {
	q.mu.Lock()
	if len(q.keys) == 0 {
		q.mu.Unlock()
		return nil
	}
	if q.idle == nil {
		q.idle = make(chan struct{})
	}
	idle := q.idle
	q.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
