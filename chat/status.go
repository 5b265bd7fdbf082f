package chat

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/pinplan/pinplan/agent"
)

// Sessions a platform shows natively (Slack's agent sessions, DESIGN §7):
// every thread session is one, with a status that says what it is doing.
// The plan board's event methods (board.go) say which status the session
// moves to; the moves go out on the router's status queue, one session's
// in the order they happened, each through the delivery layer's policy
// (sendUntil and Classify), like every other send.
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
	if ss == nil {
		return
	}
	if c.working != nil {
		b.indicator.want(c.trigger, *c.working)
	}
	b.owner.queueStatus(ss, b, th, c)
}

// indicator is what a board's working indicator should show: set when a
// move is queued, read when it is sent on the session's status queue.
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
	d.queueMove(b.key, func() { d.sendStatus(ss, b.platform, th, c, &b.indicator) })
}

// queueMove queues f on the session's status queue, behind its earlier
// moves.
func (d *deliverer) queueMove(key string, f func()) {
	if d.ctx.Err() != nil {
		return // shutting down: the next start sets the status again
	}
	d.statuses.Add(key, f)
}

// sendStatus applies one move, retried by the delivery policy; where the
// platform cannot show sessions it shows or clears the working indicator
// in its place.
// ind, if not nil, is the board's indicator, for the fallback.
func (d *deliverer) sendStatus(ss SessionStatus, p Platform, th Thread, c statusChange, ind *indicator) {
	ctx := d.ctx
	log := d.opts.Logger.With("session", th.Key, "platform", th.Platform)
	_, err := d.deliver(ctx, "set_status", th, c.since, func(ctx context.Context) error {
		if err := d.held(ctx, th.Key); err != nil {
			return err // another replica holds the session and moves its status
		}
		ctx, cancel := context.WithTimeout(ctx, statusTimeout)
		defer cancel()
		return ss.SetSessionStatus(ctx, th, c.state, c.title)
	})
	switch {
	case err == nil:
	case errors.Is(err, ErrNoSessions):
		if c.working == nil || *c.working && (c.trigger == "" || ind != nil && !ind.shows(c.trigger)) {
			return
		}
		if err := d.indicate(p, th, c.trigger, *c.working, c.since); err != nil && !d.leftToNext(err) {
			log.Warn("working indicator in place of the session status", "on", *c.working, "err", err)
		}
	case ctx.Err() != nil, errors.Is(err, agent.ErrFenced):
	default:
		log.Warn("set the session status", "status", c.state, "err", err)
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
// The move is queued before the Stop is decided, and what a refusal moves
// to is read from the board when the move is sent: a turn that ends, or
// starts, meanwhile queues its own move behind this one, so this move is
// never the last one unless what it says still holds.
func (r *Router) StopSession(ctx context.Context, c Click) ClickResult {
	c.Button = ButtonID(ActionStop, "session")
	p := r.opts.Platforms[c.Thread.Platform]
	ss := r.caps[c.Thread.Platform].Sessions
	if ss == nil {
		return r.Click(ctx, c)
	}
	decided := make(chan ClickResult, 1)
	r.out.queueMove(c.Thread.Key, func() {
		var res ClickResult
		select {
		case res = <-decided:
		case <-r.ctx.Done():
			return
		}
		th, st := c.Thread, SessionActive
		if s := r.out.session(c.Thread.Key, nil); s != nil {
			rec, want := s.board.state()
			th = rec.Thread
			if res.Private != "" && want.Stoppable { // the plan shows a turn running
				st = SessionProcessing
				if want.State == StateWaiting {
					st = SessionSuspended
				}
			}
		}
		r.out.sendStatus(ss, p, th, statusChange{state: st}, nil)
	})
	res := r.Click(ctx, c)
	decided <- res
	return res
}
