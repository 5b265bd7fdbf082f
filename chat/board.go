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
	"github.com/pinplan/pinplan/todo"
)

// BoardStore keeps each session's board record. store.DB and
// etcdstore.Store implement it.
type BoardStore interface {
	Board(ctx context.Context, key string) ([]byte, error)
	// SaveBoard stores the record; pending says whether the board has
	// work left (Board.pendingLocked), which the store indexes for a
	// start.
	SaveBoard(ctx context.Context, key string, data []byte, pending bool) error
	// PendingBoards lists the sessions whose board was last saved with
	// work left, from that index: a start visits those, not every
	// stored board.
	PendingBoards(ctx context.Context) ([]string, error)
}

// boardRecord is what survives a restart of a plan board: the thread, the
// plan message and what the platform gave back of it (its ref, whether
// it is pinned, what it shows, earlier messages still to edit back or
// unpin). What it should show (the plan, the run's state, who may stop
// it, the finished plan a later turn took over) is folded from the
// session's log (deliverer.fold), never kept here; whether a turn runs,
// which one and who asked for it are the agent's (Runner.Turn). The
// session's approval cards (cardsRecord) and how it is listed
// (listingRecord) have records of their own.
type boardRecord struct {
	Thread Thread     `json:"thread"` // without Title: that is the listing's
	Ref    MessageRef `json:"ref"`
	Pinned bool       `json:"pinned"`
	// PinUnavailable: pinning failed and the thread was told once.
	PinUnavailable bool `json:"pin_unavailable,omitempty"`
	Shown          Plan `json:"shown"` // the content the message has
	// RefRev is the plan revision that moved a finished plan's next task
	// on to a new message (planChanged): a revision up to it applied
	// again after a restart does not move it again.
	RefRev int64 `json:"ref_rev,omitempty"`
	// From: the log's entries up to it are an earlier session's of the
	// thread (a reset); the board's content is folded from the later
	// ones.
	From int64 `json:"from,omitempty"`
	// Unpin lists earlier plan messages still to unpin.
	Unpin []MessageRef `json:"unpin,omitempty"`
	// FailureSaid: the thread was told the plan message could not be
	// updated; cleared by the next success, so it is said once per outage.
	FailureSaid bool `json:"failure_said,omitempty"`
	// Restore lists earlier plan messages to edit back to their final
	// content before they are unpinned.
	Restore []restoreEdit `json:"restore,omitempty"`
	// Sessioned: on a platform that shows sessions (status.go), the
	// session's first status move was queued, with its title; later
	// moves carry none, and a reset closes it.
	Sessioned bool `json:"sessioned,omitempty"`
	// Posting is when the board first tried to post the plan message it
	// has no ref of yet; cleared once the ref is stored. Set, it says an
	// earlier attempt (this process's or one killed before the answer)
	// may have posted it, and it names the message: the platform is
	// asked to find that one rather than post another (chat.SendKey,
	// chat.SentMaybe).
	Posting *time.Time `json:"posting,omitempty"`
}

// restoreEdit is an earlier plan message and the content it should end on.
type restoreEdit struct {
	Ref  MessageRef `json:"ref"`
	Plan Plan       `json:"plan"`
}

// Board is one session's plan message. Updates only record the wanted
// content; the board's loop, on the session's lane (Router.lane), applies
// the newest wanted content, so at most one platform request is in flight
// per message, intermediate revisions are skipped under pressure and an
// older revision is never applied after a newer one.
type Board struct {
	key      string
	platform Platform
	caps     Caps  // the platform's (Platform.Caps)
	pacer    Paced // nil: the platform paces nothing
	// indicator is what the working indicator should show (status.go).
	indicator indicator
	store     BoardStore
	log       *slog.Logger
	hooks     *Hooks
	owner     *deliverer
	fenced    atomic.Bool // a fenced save was logged (save)
	// ctx ends when the session leaves the router's memory (stop): a
	// budget's slot the board asked for is not given to it then.
	ctx  context.Context
	stop context.CancelFunc

	// saveMu orders record saves: held from taking a record's copy until it
	// is stored, so an older copy never overwrites a newer one. Taken
	// before mu.
	saveMu sync.Mutex

	mu   sync.Mutex // guards everything below
	used time.Time  // last change, for eviction
	rec  boardRecord
	// want is the content the message should show, folded from the log;
	// when it differs from what the record says the message shows, the
	// loop applies it (a final "done" edit cut short by kill -9 is
	// folded again from the log's entries at the next start).
	want Plan
	// closed: the task's plan finished; the next plan that shares no
	// item with it gets a new message. final is what the finished plan's
	// message showed when a later turn put its Stop button on it: if that
	// turn moves on to a new message, the old one gets it back (Restore).
	closed bool
	final  *Plan
	// folding: the board is being folded from the log at its load
	// (fold): only want, closed and final change; nothing is stored,
	// shown or moved. foldedBelow: the fold stopped at a revision older
	// than what the message shows (the cursor lagged it), and until the
	// entries after it bring the board there it shows nothing older.
	folding     bool
	foldedBelow int64
	// unshown: the fold left content the message does not show; the
	// first batch applied after it (unhold) starts the loop.
	unshown bool
	wantVer uint64
	doneVer uint64
	// pending is when the board last went from showing what is wanted to
	// wanting more: how long it has waited, for the budgets' "oldest
	// first".
	pending time.Time
	// asking names the methods (pin, unpin) whose budget the board asked
	// for a slot without waiting (slot); granted, when it was given a
	// slot of and has not used yet.
	asking  map[Method]bool
	granted map[Method]time.Time
	running bool
	// held: the deliverer applies a batch of entries (hold, nested
	// holds counted); the loop starts once it is done.
	held int
	idle *sync.Cond // signalled when running goes false
	// shownVer is the newest wanted version the message shows, or that
	// the board gave up on: what a thread's answer waits for (showFirst).
	shownVer uint64
	// awaited counts the answers and live answer's words queued on the
	// session's lane behind the board: its next request goes first in
	// its budget then (PriorityAwaited).
	awaited int
	// retrying: the loop backs off after a failure and is queued again
	// later; an answer does not wait for it meanwhile.
	retrying bool
	tries    tries // on the lane only
	// floor is the newest plan revision of the session the board took
	// (planChanged); an older one is an entry applied again after a
	// restart, and changes nothing. A reset, or the session's records
	// deleted while it is in use, starts it over at 0.
	floor int64
}

// slotFresh is how long a slot a budget gave may wait for its call: one
// made later would land in a later window of the platform's count beside
// the slots given then, and pass its limit.
const slotFresh = time.Second

// errSlotLater ends an apply that needs a slot of a budget that has none
// now (a pin, an unpin): the board asked to be told when it has one
// (slot), and its loop ends until then.
var errSlotLater = errors.New("chat: waiting for the budget's slot")

// Hooks observe what the router sends to the platforms: plan renders and
// rate-limit waits (metrics), what each plan message shows (the console's
// mirror) and how replies fare (metrics, the console's undelivered list).
// Every field may be nil.
type Hooks struct {
	Rendered       func(platform string, err error)
	RateLimitWait  func(platform string, d time.Duration)
	RevisionToEdit func(platform string, d time.Duration)
	// Shown is told what a plan message shows after each post or edit.
	Shown func(th Thread, p Plan)
	// Delivered is told how long a reply took from the answer to the
	// platform's acceptance, and in how many attempts.
	Delivered func(platform string, d time.Duration, attempts int)
	// Undelivered is told about a reply the platform refused for good or
	// that could not be delivered in time; it was logged and dropped.
	Undelivered func(th Thread, text string, err error)
}

// set changes the wanted content (and the record, persisted) and starts the
// render loop if it is not running.
func (b *Board) set(f func(rec *boardRecord, want *Plan)) {
	if b.folding {
		f(&b.rec, &b.want)
		return
	}
	b.change(func() {
		f(&b.rec, &b.want)
		if b.doneVer == b.wantVer {
			b.pending = time.Now()
		}
		b.wantVer++
		b.runLocked()
	})
}

// runLocked queues the render loop on the session's lane if it is not
// running. b.mu is held.
func (b *Board) runLocked() {
	if !b.running && b.held == 0 {
		b.running = true
		b.owner.wg.Add(1)
		b.owner.lane.Add(b.key, b.loop)
	}
}

// hold keeps the board's loop from starting, or going on, while the
// deliverer applies a batch of entries (a catch-up); unhold starts it if
// the batch left work, or the board has work its message does not show
// after its fold (unshown): before the answers the batch released,
// which wait for it (showFirst).
func (b *Board) hold() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held++
}

func (b *Board) unhold() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held--; b.held > 0 {
		return
	}
	b.startUnshownLocked()
	if b.doneVer != b.wantVer {
		b.runLocked()
	}
}

// startUnshown starts the loop of a board whose fold left content its
// message does not show, once, if nothing has started it since: the
// first entry applied after the fold, whatever its kind.
func (b *Board) startUnshown() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held == 0 && b.unshown {
		b.startUnshownLocked()
		if b.doneVer != b.wantVer {
			b.runLocked()
		}
	}
}

// startUnshownLocked gives an unshown fold's content a version for the
// loop to show. b.mu is held.
func (b *Board) startUnshownLocked() {
	if b.unshown && b.doneVer == b.wantVer && b.pendingLocked() && b.platform != nil {
		b.wantVer++
	}
	b.unshown = false
}

// What the board does for each thing that happens to its session: each
// changes the record and the wanted content, and the render loop shows the
// result. On a platform that shows sessions, each also moves the session's
// status (status.go): processing when a turn starts, suspended while it
// waits for an approval and processing again once it is decided, active
// when it ends, closed on reset. The router calls them and does the rest
// (cards, replies, the working indicator where the platform shows no
// sessions).

// received records where the session's thread is now, for a message of
// it, before the message is queued: a new session's record is stored
// then, so that whoever runs its turn (this process after a kill, or
// another replica) finds the session, and so does a replica holding a
// follow-up for it. Who asked and what the answer replies to are the
// log's (the agent's Checkpoint.Starter, Event.Trigger).
func (b *Board) received(th Thread) {
	b.update(func(rec *boardRecord) {
		rec.Thread.Channel, rec.Thread.ThreadID = th.Channel, th.ThreadID
	})
}

// turnStarted: a turn began (or resumed after a restart). The plan message
// says so and carries the Stop button. It returns the message the working
// indicator goes on: the newest one for the session, which the board
// records so that the indicator is cleared from it when the turn ends.
func (b *Board) turnStarted(e agent.Event) (indicated string) {
	state := StateWorking
	if e.Resumed {
		state = StateResumed
	}
	var title string
	if b.showsSessions() && !b.folding {
		title = b.sessionTitle() // before set: it reads the listing
	}
	var th Thread
	var sessioned bool
	b.set(func(rec *boardRecord, want *Plan) {
		indicated = e.Trigger
		th, sessioned = rec.Thread, rec.Sessioned
		if !b.folding {
			rec.Sessioned = rec.Sessioned || b.showsSessions()
		}
		if b.closed && b.final == nil && len(want.Items) > 0 {
			// A later turn on a finished plan: the plan message is
			// the thread's live plan again and carries the Stop
			// button; its final content is kept in case this turn
			// moves on to a new task (and a new message).
			final := *want
			b.final = &final
		}
		want.State, want.Updated = state, e.At
		want.Stoppable, want.StoppedBy, want.Activity = true, "", ""
		want.Calls, want.Approvals = e.Calls, e.Approvals
		if e.Evidence != nil {
			want.Evidence = e.Evidence
		}
	})
	on := true
	c := statusChange{state: SessionProcessing, working: &on, trigger: indicated}
	if !sessioned {
		c.title = title
	}
	b.moveSession(th, c)
	return indicated
}

// planChanged: the agent committed a plan revision. After a finished plan,
// a plan that shares no item with it is a new task and gets a new message.
//
// A revision older than the one wanted changes nothing: an entry applied
// again after a restart (the cursor's save lagged behind a kill), whose
// newer revision the board record already wants and the message may
// show. Revisions only grow in a session (a reset starts the board over
// at none), so the message never goes back to an older one (DESIGN §6).
func (b *Board) planChanged(e agent.Event) {
	b.mu.Lock()
	older := e.Revision < b.floor
	if !older {
		b.floor = e.Revision
	}
	b.mu.Unlock()
	if older {
		return
	}
	if e.Steer != nil {
		// A person's change: the same plan, on whatever state it is in.
		b.set(func(_ *boardRecord, want *Plan) {
			p := planFrom(e.Plan, e.Marks, e.Revision, want.State, e.At)
			p.Stoppable, p.Activity, p.StoppedBy, p.Start = want.Stoppable, want.Activity, want.StoppedBy, want.Start
			p.Evidence, p.Calls, p.Approvals = e.Evidence, e.Calls, e.Approvals
			*want = p
		})
		return
	}
	b.set(func(rec *boardRecord, want *Plan) {
		state := want.State
		if b.closed {
			// A new task after a plan whose run ended: a new message;
			// the old one stays in the thread with its final footer,
			// and is unpinned. Once: the record says so (RefRev), and
			// a fold, or a revision applied again after a restart,
			// finds it done.
			if !sharesItem(want.Items, e.Plan.Items()) && !b.folding && e.Revision > rec.RefRev {
				// Always: an edit to "working" may be in flight, so
				// what the record says the message shows may lag.
				if b.final != nil && !rec.Ref.IsZero() {
					rec.Restore = append(rec.Restore, restoreEdit{Ref: rec.Ref, Plan: *b.final})
				}
				if !rec.Ref.IsZero() {
					rec.Unpin = append(rec.Unpin, rec.Ref)
				}
				rec.Ref, rec.Pinned, rec.Shown, rec.RefRev = MessageRef{}, false, Plan{}, e.Revision
				b.foldedBelow = 0
			}
			b.closed, b.final = false, nil
			state = StateWorking
		}
		if state != StateResumed {
			state = StateWorking
		}
		activity := want.Activity
		*want = planFrom(e.Plan, e.Marks, e.Revision, state, e.At)
		want.Stoppable, want.Activity = true, activity
		want.Evidence, want.Calls, want.Approvals = e.Evidence, e.Calls, e.Approvals
	})
}

// foldPlan takes the plan an entry of another kind carries (a turn's
// start or end, its evidence, an approval), newer than the one folded so
// far: a log compacted before the last revision was kept for the fold,
// whose revision's marks (a person's steer) are gone with it.
func (b *Board) foldPlan(e agent.Event) {
	p := planFrom(e.Plan, e.Marks, e.Revision, b.want.State, e.At)
	p.Stoppable, p.Activity, p.StoppedBy, p.Start = b.want.Stoppable, b.want.Activity, b.want.StoppedBy, b.want.Start
	p.Evidence, p.Calls, p.Approvals = b.want.Evidence, b.want.Calls, b.want.Approvals
	if e.Evidence != nil {
		p.Evidence = e.Evidence
	}
	b.want, b.floor = p, max(b.floor, e.Revision)
}

// evidenceChanged: a round's tool calls were committed; they show under
// their items (DESIGN §15) without a new revision.
func (b *Board) evidenceChanged(e agent.Event) {
	b.set(func(_ *boardRecord, want *Plan) {
		if len(want.Items) > 0 && want.Revision == e.Revision {
			want.Evidence = e.Evidence
		}
		want.Calls, want.Approvals = e.Calls, e.Approvals
	})
}

// toolActivity: a tool call started (the footer names it) or ended.
func (b *Board) toolActivity(e agent.Event) {
	b.set(func(_ *boardRecord, want *Plan) {
		want.Activity = ""
		if e.Kind == agent.ToolStarted {
			want.Activity = "running " + e.Tool
		}
	})
}

// waiting: the turn waits for an approval.
func (b *Board) waiting(e agent.Event) {
	var th Thread
	b.set(func(rec *boardRecord, want *Plan) {
		want.State, want.Updated, want.Activity = StateWaiting, e.At, ""
		if a := e.Approval; a != nil && a.Plan {
			// The turn waits for its first plan's Start: the message
			// carries it, in the same edit.
			want.Start = ButtonID(ActionStart, a.CallID)
		}
		th = rec.Thread
	})
	b.moveSession(th, statusChange{state: SessionSuspended})
}

// approvalDecided: the approval the turn waited for was decided; it works
// on.
func (b *Board) approvalDecided(e agent.Event) {
	var th Thread
	var resumed bool
	b.set(func(rec *boardRecord, want *Plan) {
		want.Start = ""
		if want.State == StateWaiting {
			want.State, want.Updated = StateWorking, e.At
			resumed = true
		}
		th = rec.Thread
	})
	if resumed {
		b.moveSession(th, statusChange{state: SessionProcessing})
	}
}

// turnEnded: the turn is over (done, stopped, failed or at the round
// limit). The footer says how; the Stop button goes.
func (b *Board) turnEnded(e agent.Event) {
	state := StateOf(e.Outcome)
	var th Thread
	b.set(func(rec *boardRecord, want *Plan) {
		th = rec.Thread
		b.final = nil
		want.State, want.Updated = state, e.At
		want.Stoppable, want.Activity, want.StoppedBy, want.Start = false, "", e.StoppedBy, ""
		// The next turn's plan gets its own message unless it
		// continues this one.
		b.closed = len(want.Items) > 0
	})
	off := false
	b.moveSession(th, statusChange{state: SessionActive, working: &off, trigger: e.Trigger})
}

// reset starts the board over for a new session in the same thread: the
// plan message is unpinned and left in the thread (with the earlier
// messages still to restore or unpin), and everything else the record
// knew of the old session goes. The thread and the newest message for
// the session stay, and so does the message the working indicator is on.
// A session the platform shows is closed.
// from is the last entry of the old session's log: the new one's
// content is folded from the entries after it.
func (b *Board) reset(from int64) {
	var th Thread
	var sessioned bool
	b.set(func(rec *boardRecord, want *Plan) {
		th, sessioned = rec.Thread, rec.Sessioned
		unpin := rec.Unpin
		if !rec.Ref.IsZero() {
			unpin = append(unpin, rec.Ref)
		}
		*rec = boardRecord{Thread: rec.Thread, Unpin: unpin, Restore: rec.Restore, From: max(from, rec.From)}
		*want = Plan{}
		b.closed, b.final, b.foldedBelow = false, nil, 0
		b.floor = 0
	})
	if sessioned {
		b.moveSession(th, statusChange{state: SessionClosed})
	}
}

// change runs f with mu held, then persists the record. saveMu is held
// from the copy to the store, so saves land in the order of the changes.
func (b *Board) change(f func()) {
	b.saveMu.Lock()
	defer b.saveMu.Unlock()
	b.mu.Lock()
	b.used = time.Now()
	f()
	raw, err := json.Marshal(b.rec)
	pending := b.pendingLocked()
	b.mu.Unlock()
	if err == nil {
		err = b.store.SaveBoard(context.WithoutCancel(b.owner.ctx), b.key, raw, pending)
	}
	switch {
	case err == nil:
	case errors.Is(err, agent.ErrFenced):
		// Another replica holds the session now: a normal failover.
		if b.fenced.CompareAndSwap(false, true) {
			b.log.Info("plan board not saved: another replica holds the session now")
		}
	default:
		b.log.Error("save plan board", "err", err)
	}
}

// Wait blocks until the session's deliverer has applied the events
// queued so far (Router.Flush) and the board has applied everything
// wanted then (or given up on it), pins and unpins included. Tests use it; Router.Close drains
// every board itself. It must not be called on the delivery queue.
func (b *Board) Wait() {
	b.owner.Flush(b.key)
	b.mu.Lock()
	defer b.mu.Unlock()
	for (b.running || b.owesSlotLocked()) && b.owner.ctx.Err() == nil {
		b.idle.Wait()
	}
}

// state returns a copy of the record and the wanted content.
func (b *Board) state() (boardRecord, Plan) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rec, b.want
}

// Shown returns what the plan message currently shows and its ref.
func (b *Board) Shown() (Plan, MessageRef) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rec.Shown, b.rec.Ref
}

// Retry bounds of the render loop, per wanted content.
const (
	maxFailures  = 5 // failed attempts, then the thread is told once
	maxReposts   = 2 // new messages when the old one is gone (DESIGN §6)
	maxEditLater = 3 // back-offs on ErrEditLater before reposting

	// maxBoardBackoff caps the wait between failed attempts: with
	// maxFailures attempts from a 1 s start it is never reached.
	maxBoardBackoff = time.Minute
)

// loop applies what the board wants, as one function on the session's
// lane (Router.lane): it runs until the message shows the newest wanted
// content, or the board gave up on it, waits for a budget's slot
// (errSlotLater) or another replica holds the session. After a failure
// it does not wait on the lane: it queues itself again after the
// backoff (serial.Queue.Later), and the session's other sends go on
// meanwhile.
func (b *Board) loop() {
	defer b.owner.wg.Done()
	b.mu.Lock()
	b.retrying = false
	b.mu.Unlock()
	for {
		again, wait := b.step(true)
		if wait > 0 {
			b.mu.Lock()
			b.retrying = true
			b.mu.Unlock()
			b.owner.wg.Add(1)
			b.owner.lane.Later(b.owner.ctx, b.key, wait, b.loop)
			return
		}
		if !again {
			return
		}
	}
}

// showFirst applies what the board wants before a send that must come
// after the plan message shows version ver of it (0: after its first
// post): the turn's answer, or a live reply's first message (DESIGN §6).
// It runs on the session's lane, where the board's own loop runs, so
// the two never overlap: the loop queued behind the send finds the work
// done. It returns once the message shows that version or a newer one,
// or the board cannot show it now: it gave up on it, backs off after a
// failure, or stopped (shutdown, or another replica holds the session).
func (b *Board) showFirst(ver uint64) {
	for {
		b.mu.Lock()
		ready := b.readyLocked(ver) || b.retrying || b.ctx.Err() != nil
		b.mu.Unlock()
		if ready {
			return
		}
		if again, wait := b.step(false); !again || wait > 0 {
			if wait > 0 {
				// The loop queued behind this send retries it: the
				// failure counts stay for it.
				b.mu.Lock()
				b.tries.wait, b.retrying = wait, true
				b.mu.Unlock()
			}
			return
		}
	}
}

// tries counts, per wanted content, what the board's attempts at it met:
// failed attempts, reposts and "try later" answers. It is used on the
// session's lane only.
type tries struct {
	ver      uint64 // the version they count for
	failures int
	reposts  int
	later    int
	// wait: a step outside the loop (showFirst) failed, and the loop
	// backs off this long before it tries again.
	wait time.Duration
}

// step makes one attempt at the newest wanted content. It reports
// whether to go on at once (again), or after a backoff (wait > 0). With
// own, it is the board's loop, and when nothing is left to do it ends
// the loop's run in the same critical section that found so, so a
// change made then starts a new run.
func (b *Board) step(own bool) (again bool, wait time.Duration) {
	ctx := b.owner.ctx
	b.mu.Lock()
	if own && b.tries.wait > 0 {
		wait, b.tries.wait = b.tries.wait, 0
		b.mu.Unlock()
		return false, wait
	}
	if own && b.held > 0 {
		// unhold starts it again; a slot given meanwhile stays its.
		b.running = false
		b.idle.Broadcast()
		b.mu.Unlock()
		return false, 0
	}
	if b.doneVer == b.wantVer || ctx.Err() != nil || b.ctx.Err() != nil {
		if own {
			b.endRunLocked()
		}
		b.mu.Unlock()
		return false, 0
	}
	ver, want, rec := b.wantVer, b.want, b.rec
	t := &b.tries
	b.mu.Unlock()
	if ver != t.ver {
		t.ver, t.reposts = ver, 0
	}

	var ref MessageRef
	_, err := b.owner.traced(ctx, "plan", rec.Thread, func(ctx context.Context) (int, error) {
		var err error
		ref, err = b.apply(ctx, rec, want, ver)
		return 1, err
	})
	if errors.Is(err, agent.ErrFenced) {
		b.log.Warn("plan board stopped: this replica no longer holds the session", "err", err)
		b.stop() // a slot it asked for is the new holder's to use
		b.mu.Lock()
		b.asking, b.granted = nil, nil // nothing owed here: eviction may drop it
		if own {
			b.endRunLocked()
		}
		b.mu.Unlock()
		return false, 0
	}
	if errors.Is(err, errSlotLater) {
		err = nil // shown; the pin or unpin goes when its slot comes
	}
	return true, b.after(ver, rec.Thread, ref, err)
}

// after is what an attempt at version ver of the wanted content, on
// message ref, leads to: settled, a repost, a wait before the next
// attempt (the returned duration), or giving up on that content.
func (b *Board) after(ver uint64, th Thread, ref MessageRef, err error) (wait time.Duration) {
	t := &b.tries
	outcome, retryAfter := Classify(err)
	if err != nil && outcome == EditLater {
		// Discord 30046: too many edits of an old message for now.
		// Back off and edit again; repost only if it persists.
		t.later++
		if t.later <= maxEditLater {
			b.log.Info("plan message edits refused for now; backing off", "attempt", t.later, "err", err)
			return b.owner.opts.EditLaterDelay << (t.later - 1)
		}
		t.later = 0
		err = fmt.Errorf("%w: %w", ErrMessageGone, err)
		outcome = MessageGone
	}
	if err == nil || outcome != EditLater {
		t.later = 0
	}
	if err != nil && outcome == MessageGone && t.reposts >= maxReposts {
		// The new message keeps vanishing too (or the platform keeps
		// saying so): stop posting and take the failure path.
		err = fmt.Errorf("gave up after %d new plan messages: %w", t.reposts, err)
		outcome = Permanent
	}
	if err != nil && outcome == Permanent {
		t.failures = policies[opRender].attempts - 1 // no retry can help: the failure path now
	}
	switch {
	case err == nil:
		t.failures = 0
		b.mu.Lock()
		if ver > b.doneVer {
			b.doneVer = ver
		}
		b.settleLocked(ver)
		said := b.rec.FailureSaid
		b.mu.Unlock()
		if said {
			b.update(func(r *boardRecord) { r.FailureSaid = false })
		}
	case outcome == RetryAfter:
		if b.hooks != nil && b.hooks.RateLimitWait != nil {
			b.hooks.RateLimitWait(th.Platform, retryAfter)
		}
		b.log.Info("plan board rate limited", "retry_after", retryAfter)
		return b.owner.backoff(policies[opRender].max).Wait(t.failures, err)
	case outcome == MessageGone:
		t.reposts++
		b.log.Warn("plan message gone; posting a new one", "ref", ref.ID, "repost", t.reposts, "err", err)
		b.update(func(r *boardRecord) {
			if !ref.IsZero() && r.Ref == ref {
				r.Unpin = append(r.Unpin, r.Ref)
				r.Ref, r.Pinned = MessageRef{}, false
			}
		})
	default:
		t.failures++
		b.log.Error("plan board update failed", "attempt", t.failures, "err", err)
		if p := policies[opRender]; t.failures < p.attempts {
			return b.owner.backoff(p.max).Wait(t.failures, err)
		}
		// Give up on this content; the next revision tries again. The
		// thread hears about it once, the log has the detail.
		t.failures = 0
		b.mu.Lock()
		b.doneVer = ver
		b.settleLocked(ver)
		said := b.rec.FailureSaid
		b.mu.Unlock()
		if !said {
			b.update(func(r *boardRecord) { r.FailureSaid = true })
			b.owner.outbox.add(th, "", "I couldn't update the plan message here, so it may be out of date; I'll try again when the plan changes. The bot's log has the details.")
		}
	}
	return 0
}

// endRunLocked ends the loop's run: nothing is left to do, or nothing
// can be done here. b.mu is held.
func (b *Board) endRunLocked() {
	b.running = false
	clear(b.granted) // a slot this run did not use was not needed (the message moved on, or none to pin)
	b.idle.Broadcast()
}

// apply makes the platform show want: post and pin a message first, edit it
// afterwards. Before each platform request it asks whether this process
// still holds the session (Router.held): after waiting for the pace, a
// replica may not any more, and then it sends nothing. It persists the record after every change of the message ref
// and returns the ref it worked on.
//
// ver is the version of want; once the message shows it (or a newer one
// the board took while it waited for the budget), the board settles it,
// before the pin and the tidying up: the answer waiting for it goes on.
func (b *Board) apply(ctx context.Context, rec boardRecord, want Plan, ver uint64) (MessageRef, error) {
	th := rec.Thread
	if err := b.restore(ctx, rec); err != nil {
		return rec.Ref, err
	}
	if rec.Ref.IsZero() {
		if len(want.Items) == 0 {
			// Nothing to show yet: no empty plan message; the earlier
			// messages are unpinned unless a plan comes first.
			return rec.Ref, b.unpinOld(ctx, &rec, &want)
		}
		var err error
		if want, ver, err = b.post(ctx, &rec, want, ver); err != nil {
			return rec.Ref, err
		}
	}
	if b.holdsSlot(MethodPin) {
		// A pin slot the budget gave is used now, not after an edit
		// that may wait for its own budget: a slot used late would land
		// in a later window of the platform's count (Slack's Tier 2)
		// beside the slots given then.
		if err := b.pin(ctx, &rec); err != nil {
			return rec.Ref, err
		}
	}
	// The message never goes back to an older revision (DESIGN §6): after
	// a restart the board is folded from the log at its stored cursor,
	// which may lag what the message shows until the entries after it
	// are applied again.
	older := b.shownNewer(want)
	if !sameContent(rec.Shown, want) && !older {
		if err := b.pace(ctx, MethodEdit, b.priority); err != nil {
			return rec.Ref, err
		}
		want, ver = b.newest(rec.Ref, want, ver)
		if err := b.owner.held(ctx, th.Key); err != nil {
			return rec.Ref, err
		}
		err := b.platform.EditPlan(ctx, th, rec.Ref, want)
		b.rendered(th, err)
		if err != nil {
			return rec.Ref, err
		}
		if b.hooks != nil && b.hooks.RevisionToEdit != nil && !want.Updated.IsZero() {
			b.hooks.RevisionToEdit(th.Platform, time.Since(want.Updated))
		}
		b.update(func(r *boardRecord) {
			if r.Ref == rec.Ref { // not moved on to a new message meanwhile
				r.Shown = want
			}
		})
		b.shown(th, want)
	}
	b.settle(ver)
	// The pin's budget is the shortest (Slack's Tier 2): content that
	// moved on while the message was posted, or while the pin waits for
	// its slot, is edited first and the pin comes after, so that a final
	// state is not held behind other threads' pins (DESIGN §6). The ref
	// is persisted before any edit all the same.
	if err := b.pin(ctx, &rec); err != nil {
		return rec.Ref, err
	}
	return rec.Ref, b.unpinOld(ctx, &rec, &want)
}

// shownNewer reports whether the message shows a newer revision than
// want, after a fold that stopped short of it (foldedBelow).
func (b *Board) shownNewer(want Plan) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if want.Revision >= b.foldedBelow {
		b.foldedBelow = 0
	}
	return want.Revision < b.foldedBelow
}

// restore edits the earlier plan messages of rec back to their final
// content (boardRecord.Restore), before anything else.
func (b *Board) restore(ctx context.Context, rec boardRecord) error {
	th := rec.Thread
	for _, re := range rec.Restore {
		if err := b.pace(ctx, MethodEdit, func() Priority { return PriorityFinal }); err != nil {
			return err
		}
		if err := b.owner.held(ctx, th.Key); err != nil {
			return err
		}
		err := b.platform.EditPlan(ctx, th, re.Ref, re.Plan)
		b.rendered(th, err)
		var rl *RateLimitError
		if errors.As(err, &rl) {
			return err
		}
		if err != nil {
			b.log.Warn("restore the final content of an earlier plan message", "ref", re.Ref.ID, "err", err)
		}
		b.update(func(r *boardRecord) { r.Restore = r.Restore[1:] })
	}
	return nil
}

// post posts the plan message of rec, which has none yet, showing
// want (version ver) or what is wanted once the budget let it go, and
// notes its ref in rec and in the record. It returns what it posted.
func (b *Board) post(ctx context.Context, rec *boardRecord, want Plan, ver uint64) (Plan, uint64, error) {
	th := rec.Thread
	if err := b.pace(ctx, MethodPost, b.priority); err != nil {
		return want, ver, err
	}
	want, ver = b.newest(rec.Ref, want, ver) // the wait may have been long: post what is wanted now
	if err := b.owner.held(ctx, th.Key); err != nil {
		return want, ver, err
	}
	// The first attempt at this message notes when it began, before
	// it posts: a later attempt, or the next process, then knows it
	// may have landed, and under which key.
	since, unsure := time.Now(), rec.Posting != nil
	if unsure {
		since = *rec.Posting
	} else {
		b.update(func(r *boardRecord) { r.Posting = &since })
	}
	pctx := withSend(ctx, fmt.Sprintf("plan/%s/%d", th.Key, since.UnixNano()), since, unsure)
	ref, err := b.platform.PostPlan(pctx, th, want)
	b.rendered(th, err)
	switch {
	case err != nil:
		// Even a 429 leaves it in doubt: a client may have retried
		// a 5xx before it (discordgo does), or fallen back from
		// refused blocks, and met the 429 on the second try.
		return want, ver, err
	case unsure:
		// Perhaps the message an earlier attempt posted, showing what
		// that one sent: what it shows is not known, so it is edited
		// below like any message behind, then pinned. Not pinned
		// first: after a restart every board in doubt would wait for
		// the pin budget (the shortest) before its edit, and plans
		// would be left on their first revision meanwhile.
		b.update(func(r *boardRecord) { r.Ref, r.Pinned, r.Shown, r.Posting = ref, false, Plan{}, nil })
		rec.Ref, rec.Shown = ref, Plan{}
	default:
		b.update(func(r *boardRecord) { r.Ref, r.Pinned, r.Shown, r.Posting = ref, false, want, nil })
		b.shown(th, want)
		rec.Ref, rec.Shown = ref, want
	}
	return want, ver, nil
}

// unpinOld unpins the session's earlier plan messages (a new task's
// message or a reset replaced them). It comes last, after the new
// message's post, pin and edits: pins have the shortest budget (Slack's
// Tier 2), and tidying up must never hold up what people look at, nor a
// thread's answer, which waits for its plan's post. While it waits for
// the budget it gives way (nil) as soon as the board wants other content
// than shown; the loop comes back to it.
func (b *Board) unpinOld(ctx context.Context, rec *boardRecord, shown *Plan) error {
	th := rec.Thread
	for len(rec.Unpin) > 0 {
		old := rec.Unpin[0]
		if err := b.slot(MethodUnpin, PriorityIntermediate); err != nil {
			return err
		}
		if err := b.owner.held(ctx, th.Key); err != nil {
			return err
		}
		if err := b.platform.Pin(ctx, th, old, false); err != nil && !errors.Is(err, ErrMessageGone) && !errors.Is(err, ErrPinUnavailable) {
			var rl *RateLimitError
			if errors.As(err, &rl) {
				return err
			}
			b.log.Warn("unpin old plan message", "ref", old.ID, "err", err)
		}
		b.update(func(r *boardRecord) {
			if len(r.Unpin) > 0 && r.Unpin[0] == old {
				r.Unpin = r.Unpin[1:]
			}
		})
		rec.Unpin = rec.Unpin[1:]
	}
	return nil
}

// pin pins rec's message unless it is pinned or cannot be, and notes it
// in rec and in the record. When the pin's budget has no slot now it
// returns errSlotLater, and the board pins once it has one.
func (b *Board) pin(ctx context.Context, rec *boardRecord) error {
	if rec.Pinned || rec.PinUnavailable {
		return nil
	}
	th := rec.Thread
	if err := b.slot(MethodPin, PriorityFirstPost); err != nil {
		return err
	}
	if err := b.owner.held(ctx, th.Key); err != nil {
		return err
	}
	err := b.platform.Pin(ctx, th, rec.Ref, true)
	switch {
	case err == nil:
		ref := rec.Ref
		b.update(func(r *boardRecord) {
			if r.Ref == ref {
				r.Pinned = true
			}
		})
		rec.Pinned = true
	case errors.Is(err, ErrPinUnavailable):
		b.update(func(r *boardRecord) { r.PinUnavailable = true })
		rec.PinUnavailable = true
		b.log.Warn("cannot pin the plan message", "err", err)
		b.owner.outbox.add(th, "", "I can't pin the plan message here (no permission or the pin limit is reached), so it stays unpinned above. I'll keep it up to date.")
	default:
		return err
	}
	return nil
}

// slot takes a slot of method m's budget for the board's next request
// of it without holding the board's goroutine: a slot the budget gave
// earlier, or one free now. When there is none, it asks the budget to
// tell it when there is (Budget.Notify) and returns errSlotLater: the
// render loop ends, and runs again with the slot. A board that owes a
// pin costs no goroutine while it waits (an idle session costs none).
func (b *Board) slot(m Method, prio Priority) error {
	if b.pacer == nil {
		return nil
	}
	if b.ctx.Err() != nil {
		return errSlotLater // a stopped board asks for nothing: nothing is owed here
	}
	b.mu.Lock()
	th, since := b.rec.Thread, b.pending
	req := Request{Thread: th, Method: m, Priority: func() Priority { return prio }, Since: since}
	switch {
	case !b.granted[m].IsZero():
		given := b.granted[m]
		delete(b.granted, m)
		b.mu.Unlock()
		if bud := b.pacer.Budget(req); bud == nil || !bud.Held() && time.Since(given) < slotFresh {
			return nil
		}
		// A 429 came for this budget since the slot was given (the
		// slot is not used inside its Retry-After), or the slot waited
		// too long for the call (an edit went first): ask again.
		b.mu.Lock()
	case b.asking[m]:
		b.mu.Unlock()
		return errSlotLater
	}
	b.mu.Unlock()
	if m == MethodPin && b.owner.pinAwaited(b.key) {
		return errSlotLater // its key waits in the budget's queue (deliverer.awaitPin)
	}
	bud := b.pacer.Budget(req)
	if bud == nil || bud.TryNow(0) {
		return nil
	}
	b.mu.Lock()
	if b.asking == nil {
		b.asking, b.granted = map[Method]bool{}, map[Method]time.Time{}
	}
	b.asking[m] = true
	b.mu.Unlock()
	bud.Notify(b.ctx, req.Priority, since, func() {
		b.mu.Lock()
		asked := b.asking[m]
		b.mu.Unlock()
		if asked {
			b.grant(m)
		}
	})
	return errSlotLater
}

// grant gives the board the slot of method m's budget it waited for, and
// runs its loop to use it.
func (b *Board) grant(m Method) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx.Err() != nil {
		return // stopped (fenced, forgotten, shut down) as the slot came
	}
	delete(b.asking, m)
	b.owner.closeMu.RLock()
	defer b.owner.closeMu.RUnlock()
	if b.owner.closing {
		return // Close waits for the loops running now, not new ones; the next start pins it
	}
	if b.granted == nil {
		b.asking, b.granted = map[Method]bool{}, map[Method]time.Time{}
	}
	b.granted[m] = time.Now()
	b.wantVer++ // the loop has this slot to use
	b.runLocked()
}

// holdsSlot reports whether the budget gave the board a slot of method
// m that it has not used yet.
func (b *Board) holdsSlot(m Method) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.granted[m].IsZero()
}

// owesSlot reports whether the board waits for a budget's slot (slot).
// b.mu is held.
func (b *Board) owesSlotLocked() bool { return len(b.asking) > 0 || len(b.granted) > 0 }

// pace waits for the platform's budget of method m (DESIGN §6); prio is
// read when a slot is handed out.
func (b *Board) pace(ctx context.Context, m Method, prio func() Priority) error {
	if b.pacer == nil {
		return nil
	}
	b.mu.Lock()
	th, since := b.rec.Thread, b.pending
	b.mu.Unlock()
	return Pace(ctx, b.pacer, Request{Thread: th, Method: m, Priority: prio, Since: since})
}

// newest is the content wanted now, if the board still works on the
// message ref (none: the first post) and has something to show; else
// want. A request that waited for its budget sends the newest content,
// not the one it had when it began to wait: the loop then finds nothing
// left to do for the versions in between.
func (b *Board) newest(ref MessageRef, want Plan, ver uint64) (Plan, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec.Ref != ref || len(b.want.Items) == 0 {
		return want, ver
	}
	return b.want, b.wantVer
}

// priority is how urgent the board's next request is: the first post of
// a plan before anything, then content an answer waits for (the turn's
// final state), then any other final state (the run ended or waits for an
// approval), then an intermediate revision.
func (b *Board) priority() Priority {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.rec.Ref.IsZero():
		return PriorityFirstPost
	case b.awaited > 0:
		return PriorityAwaited
	case b.want.State == StateDone || b.want.State == StateStopped || b.want.State == StateFailed ||
		b.want.State == StateLimited || b.want.State == StateTurnBudget || b.want.State == StateDayBudget || b.want.State == StateWaiting:
		return PriorityFinal
	}
	return PriorityIntermediate
}

// awaitedBy counts n more (or, negative, fewer) sends of the answer
// queued on the session's lane behind the board (awaited).
func (b *Board) awaitedBy(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.awaited += n
}

// wanted is the version of the content the board wants now: an answer
// waits until the message shows it (showFirst).
func (b *Board) wanted() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.wantVer
}

// readyLocked reports whether the plan message shows version ver of the
// wanted content or a newer one (ver 0: whether it is posted), or the
// board will not show it: it has nothing to show, gave up on that
// content, or is not running. b.mu is held.
func (b *Board) readyLocked(ver uint64) bool {
	switch {
	case b.held > 0 && b.doneVer != b.wantVer:
		return false // the batch being applied has work for the loop
	case !b.running, len(b.want.Items) == 0 && b.rec.Ref.IsZero():
		return true
	case ver == 0:
		return !b.rec.Ref.IsZero() || len(b.want.Items) == 0
	}
	return ver <= b.shownVer
}

// settle notes that the message shows version ver (or the board gave up
// on it).
func (b *Board) settle(ver uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settleLocked(ver)
}

func (b *Board) settleLocked(ver uint64) {
	if ver > b.shownVer {
		b.shownVer = ver
	}
}

func (b *Board) shown(th Thread, p Plan) {
	if b.hooks != nil && b.hooks.Shown != nil {
		b.hooks.Shown(th, p)
	}
}

func (b *Board) rendered(th Thread, err error) {
	if b.hooks != nil && b.hooks.Rendered != nil {
		b.hooks.Rendered(th.Platform, err)
	}
}

// update changes the record and persists it.
func (b *Board) update(f func(r *boardRecord)) { b.change(func() { f(&b.rec) }) }

func sameContent(a, b Plan) bool {
	if a.Revision != b.Revision || a.State != b.State || len(a.Items) != len(b.Items) ||
		a.Stoppable != b.Stoppable || a.Activity != b.Activity || a.StoppedBy != b.StoppedBy ||
		a.Calls != b.Calls || a.Approvals != b.Approvals || a.Start != b.Start {
		return false
	}
	for i := range a.Items {
		// What a message shows of an item: its text, status and evidence
		// line (the console's details follow the same edits).
		if a.Items[i] != b.Items[i] || a.EvidenceLine(a.Items[i]) != b.EvidenceLine(b.Items[i]) {
			return false
		}
	}
	return true
}

func planFrom(snap todo.Snapshot, marks []agent.Mark, rev int64, state PlanState, at time.Time) Plan {
	return Plan{Items: agent.ShownItems(snap.Items(), marks), Marks: marks, Revision: rev, State: state, Updated: at}
}

// DecodeBoard reads a stored board record: the thread and what its plan
// message shows. ok is false for an empty or unreadable record. How the
// session is listed (its title, whether it was deleted) is DecodeListing's.
func DecodeBoard(raw []byte) (th Thread, shown Plan, ok bool) {
	var rec boardRecord
	if len(raw) == 0 || json.Unmarshal(raw, &rec) != nil {
		return Thread{}, Plan{}, false
	}
	rec.Thread.Title = ""
	return rec.Thread, rec.Shown, true
}
