package chat

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
)

// Sessions a platform shows natively (Slack's agent sessions, DESIGN §7):
// every thread session is one, with a status that says what it is doing.
// The plan board's event methods (board.go) say which status the session
// moves to; the moves go out on the session's lane as tidy-up, when
// nothing else the session sends waits (queueMove), in the order they
// happened, each retried by the delivery layer's policy for set_status,
// its waits off the lane.
//
// On such a platform the processing status is the working indicator: the
// router does not call Platform.Working for the turn. Only when the
// platform answers ErrNoSessions (the token or app cannot use sessions
// here) does the move that starts or ends a turn fall back to Working, so
// a turn shows exactly one of the two.

// SessionState is the status of a session on a platform that shows
// sessions.
type SessionState string

// Session states, as Slack's agents.sessions.setStatus names them.
const (
	// SessionProcessing: a turn runs (the platform shows its Stop).
	SessionProcessing SessionState = "processing"
	// SessionSuspended: the turn waits for an approval card's decision.
	SessionSuspended SessionState = "suspended"
	// SessionActive: no turn runs; the session takes the next message.
	SessionActive SessionState = "active"
	// SessionClosed: the session was reset (or deleted); a later message
	// starts a new one.
	SessionClosed SessionState = "closed"
)

// SessionStatus is implemented by platforms that show each thread's
// session natively, with a status.
type SessionStatus interface {
	// SetSessionStatus moves th's session to s, creating the session if
	// it has none; title names a session this call creates ("" for
	// none), at most 200 characters (the router cuts it). An error
	// wrapping ErrNoSessions means the platform cannot show sessions
	// here at all: the working indicator stands in.
	SetSessionStatus(ctx context.Context, th Thread, s SessionState, title string) error
}

// ErrNoSessions means the platform cannot show sessions here (Slack: a
// token or app that may not use agent sessions). No retry can help; the
// router shows the working indicator (Platform.Working) instead.
var ErrNoSessions = errors.New("the platform cannot show sessions here")

// Status moves are sent with the cards' bounds: a few quick attempts,
// then the move is logged and given up.
const (
	statusAttempts = cardAttempts
	statusBackoff  = cardBackoff
	statusTimeout  = 30 * time.Second
	// maxSessionTitle is the longest title Slack takes for a session.
	maxSessionTitle = 200
)

// statusChange is one move of a session's status.
type statusChange struct {
	state SessionState
	title string // names a session the move creates
	// working is the working indicator to show (true) or clear (false)
	// on the message trigger instead, when the platform answers
	// ErrNoSessions; nil when the move has no counterpart there.
	working *bool
	trigger string
	since   time.Time // when the move was queued
}

// showsSessions reports whether the board's platform shows sessions;
// then the working indicator is left to the status moves.
func (b *Board) showsSessions() bool { return b.caps.Sessions != nil }

// moveSession queues the move of the session's status in thread th
// behind its earlier moves. It does nothing on a platform that does not
// show sessions.
func (b *Board) moveSession(th Thread, c statusChange) {
	ss := b.caps.Sessions
	if ss == nil || b.folding {
		return // a fold only says what the board shows
	}
	if c.working != nil {
		b.indicator.want(c.trigger, *c.working)
	}
	b.owner.queueStatus(ss, b, th, c)
}

// indicator is what a board's working indicator should show: set when a
// move is queued, read when it is sent on the session's lane.
type indicator struct {
	mu  sync.Mutex
	msg string // the message wanted on or off last
	on  bool
}

func (i *indicator) want(msg string, on bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.msg, i.on = msg, on
}

// shows reports whether the indicator is still wanted on msg: one still
// waiting when its turn is over (the turn's end queued behind it, or a
// log replayed after a restart) is not shown. A clearing is always sent:
// clearing what is not shown changes nothing.
func (i *indicator) shows(msg string) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.on && i.msg == msg
}

// sessionTitle is the title a new session is given: the first line of
// what the session is listed under (the task's first words, or what it
// was renamed to).
func (b *Board) sessionTitle() string {
	th, _ := b.owner.thread(b.key)
	line, _, _ := strings.Cut(th.Title, "\n")
	return Shorten(strings.TrimSpace(StripBidi(line)), maxSessionTitle)
}

func (d *deliverer) queueStatus(ss SessionStatus, b *Board, th Thread, c statusChange) {
	c.since = d.opts.Now()
	d.queueMove(b.key, d.statusMove(ss, b.platform, th, func() statusChange { return c }, &b.indicator))
}

// move is one tidy-up send of a session (a status move, the working
// indicator): it makes one attempt and returns how long to wait before
// the next one, 0 when it is done (sent, or given up), or moveParked.
type move func() time.Duration

// moveParked is what a move returns that cannot go yet: it stays first
// among the session's moves, and whoever makes it ready queues the next
// attempt (resumeMoves).
const moveParked time.Duration = -1

// queueMove queues m behind the session's earlier moves. The moves go on
// the session's lane as tidy-up (DESIGN §1: serial.Queue.AddIdle), one at
// a time and in order: each goes when nothing else the session sends
// waits, and a move that failed waits for its next attempt off the lane,
// the later moves behind it. A status or an indicator never holds up a
// plan, a card or an answer.
func (d *deliverer) queueMove(key string, m move) {
	if d.ctx.Err() != nil {
		return // shutting down: the next start sets the status again
	}
	d.movesMu.Lock()
	q := d.moves[key]
	if d.moves == nil {
		d.moves = map[string][]move{}
	}
	d.moves[key] = append(q, m)
	d.movesMu.Unlock()
	if len(q) == 0 {
		d.lane.AddIdle(key, func() { d.nextMove(key) })
	}
}

// nextMove makes the session's oldest move's next attempt, on its lane.
func (d *deliverer) nextMove(key string) {
	d.movesMu.Lock()
	q := d.moves[key]
	d.movesMu.Unlock()
	if len(q) == 0 {
		return
	}
	switch wait := q[0](); {
	case wait == moveParked && d.ctx.Err() == nil:
		return
	case wait > 0 && d.ctx.Err() == nil:
		d.lane.Later(d.ctx, key, wait, func() { d.resumeMoves(key) })
		return
	}
	d.movesMu.Lock()
	q = d.moves[key][1:]
	if len(q) == 0 {
		delete(d.moves, key)
		if len(d.moves) == 0 && d.movesIdle != nil {
			close(d.movesIdle)
			d.movesIdle = nil
		}
	} else {
		d.moves[key] = q
	}
	d.movesMu.Unlock()
	if len(q) > 0 {
		d.lane.AddIdle(key, func() { d.nextMove(key) })
	}
}

// waitMoves waits until no session has a move left, or the router is
// shut down (a move parked for a budget's slot at the end of the drain
// stays undone: the next start shows the status again).
func (d *deliverer) waitMoves() {
	d.movesMu.Lock()
	if len(d.moves) == 0 {
		d.movesMu.Unlock()
		return
	}
	if d.movesIdle == nil {
		d.movesIdle = make(chan struct{})
	}
	idle := d.movesIdle
	d.movesMu.Unlock()
	select {
	case <-idle:
	case <-d.ctx.Done():
	}
}

// resumeMoves queues the next attempt of the session's first move.
func (d *deliverer) resumeMoves(key string) {
	d.lane.AddIdle(key, func() { d.nextMove(key) })
}

// statusMove is a move of the session's status to what change says when
// the move goes; where the platform cannot show sessions it shows or
// clears the working indicator in its place. ind, if not nil, is the
// board's indicator, for the fallback.
func (d *deliverer) statusMove(ss SessionStatus, p Platform, th Thread, change func() statusChange, ind *indicator) move {
	n := 0
	var fallback move // the indicator in its place, once it is needed
	return func() time.Duration {
		if d.ctx.Err() != nil {
			return 0
		}
		if fallback != nil {
			return fallback() // parked for its slot: the status is known to be unavailable
		}
		n++
		c := change()
		wait, err := d.attempt(d.ctx, "set_status", th, c.since, n, func(ctx context.Context) error {
			if err := d.held(ctx, th.Key); err != nil {
				return err // another replica holds the session and moves its status
			}
			ctx, cancel := context.WithTimeout(ctx, statusTimeout)
			defer cancel()
			return ss.SetSessionStatus(ctx, th, c.state, c.title)
		})
		switch {
		case err == nil, wait > 0:
		case errors.Is(err, ErrNoSessions):
			if c.working == nil || *c.working && c.trigger == "" {
				break
			}
			on := *c.working
			fallback = d.indicate(p, th, c.trigger, on, c.since, func() bool { return !on || ind == nil || ind.shows(c.trigger) })
			return fallback()
		case d.leftToNext(err):
		default:
			d.opts.Logger.Warn("set the session status", "session", th.Key, "platform", th.Platform, "status", c.state, "err", err)
		}
		return wait
	}
}

// StopSession handles a platform's own Stop of th's session (Slack's
// agent_session_stopped): the Stop button's rule decides (Click), and a
// refusal comes back as Private for the adapter to tell the presser
// privately. The platform leaves the status where it was, so the router
// moves it in every case: to active when the stop goes through (the
// turn's end moves it there again), otherwise back to what the session
// is doing (processing while a turn runs, suspended while it waits for
// an approval, active when nothing runs).
//
// The move is queued before the Stop is decided (it waits, parked, if
// its turn comes first), and what a refusal moves to is read from the
// board when the move is sent: a turn that ends, or starts, meanwhile
// queues its own move behind this one, so this move is never the last
// one unless what it says still holds.
func (r *Router) StopSession(ctx context.Context, c Click) ClickResult {
	c.Button = ButtonID(ActionStop, "session")
	p := r.opts.Platforms[c.Thread.Platform]
	ss := r.caps[c.Thread.Platform].Sessions
	if ss == nil {
		return r.Click(ctx, c)
	}
	var (
		mu              sync.Mutex
		decided, parked bool
		res             ClickResult
	)
	th, since := c.Thread, r.opts.Now()
	if s := r.out.session(c.Thread.Key, nil); s != nil {
		rec, _ := s.board.state()
		th = rec.Thread
	}
	status := r.out.statusMove(ss, p, th, func() statusChange {
		st := SessionActive
		if s := r.out.session(c.Thread.Key, nil); s != nil && res.Private != "" {
			if _, want := s.board.state(); want.Stoppable { // the plan shows a turn running
				st = SessionProcessing
				if want.State == StateWaiting {
					st = SessionSuspended
				}
			}
		}
		return statusChange{state: st, since: since}
	}, nil)
	r.out.queueMove(c.Thread.Key, func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		if !decided {
			parked = true
			return moveParked
		}
		return status()
	})
	out := r.Click(ctx, c)
	mu.Lock()
	decided, res = true, out
	resume := parked
	mu.Unlock()
	if resume {
		r.out.resumeMoves(c.Thread.Key)
	}
	return out
}
