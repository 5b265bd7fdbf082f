package agent

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// turn is a session's turn as a state machine. Its state is what the
// checkpoint records (State, Pending, Waiting, Decisions); each method is
// one event: it says whether the event is allowed in that state and makes
// the transition on the checkpoint. The runner applies events to a clone
// of its working checkpoint and commits the result; Decide, and a Stop of
// a turn that waits, apply them to the stored checkpoint through
// Store.UpdateCheckpoint, so two clicks cannot both decide one call.
//
//	idle    --start-->   running   a message starts the turn
//	running --intend-->  running   a round's calls are about to run
//	running --wait-->    waiting   a round's calls need a person's decision
//	waiting --ask-->     waiting   the first undecided call is the one shown
//	waiting --decide-->  waiting   a decision on the call shown
//	waiting --stop-->    waiting   the call shown and every undecided one: "stopped"
//	waiting --proceed--> running   every call that asks is decided
//	running --answer-->  running   the round's tool results are in
//	running --end-->     idle      an answer, a stop, a failure, the limit
//	any     --reset-->   idle      Checkpoint.Reset, written by Store.Archive
//
// A running turn is stopped through its context (Runner.Stop cancels it):
// its model request or tool call is cut short and the round ends the turn
// (end, outcome Stopped). A waiting turn holds no goroutine, so its stop is
// the stop event on the stored checkpoint; the next run answers every call
// "stopped" and ends the turn. A reset is Runner.Reset: it holds the
// session, stops its turn, waits until nothing runs it, and archives it.
type turn struct{ cp *Checkpoint }

// errTransition is wrapped by an event the turn's state does not allow.
var errTransition = errors.New("agent: event not allowed in this state of the turn")

// errNotWaiting: a stop found no turn waiting for a decision.
var errNotWaiting = fmt.Errorf("%w: the turn is not waiting", errTransition)

func (t turn) refuse(event string) error {
	return fmt.Errorf("%w: %s while %s", errTransition, event, t.cp.State)
}

// start begins a turn for in, the first queued message: idle -> running.
func (t turn) start(in Inbound) error {
	if t.cp.State != Idle {
		return t.refuse("start")
	}
	t.cp.State, t.cp.TurnRounds = Running, 0
	t.cp.TurnCalls, t.cp.TurnApprovals = 0, 0
	// Evidence is per turn (DESIGN §15): an earlier turn's calls, shown
	// or still waiting for a snapshot, never go under this turn's items
	// by their text.
	t.cp.Evidence, t.cp.Unattributed = nil, nil
	t.cp.TurnBase = t.cp.Usage.Tokens()
	if t.cp.Requester == "" {
		// The session's first turn: a new session, or the first after a
		// reset (Checkpoint.Reset keeps no requester). One whose turns
		// began before starters were kept gets none.
		t.cp.Starter = in.AuthorID
	}
	t.cp.Requester, t.cp.RequesterName = in.AuthorID, in.Author
	t.cp.Trigger = in.MessageID
	t.cp.Turns++
	t.cp.Ended = nil
	return nil
}

// intend records asst, a round whose calls are about to run, before they
// run: after a crash its non-idempotent calls are answered "interrupted"
// instead of running again.
func (t turn) intend(asst Entry) error {
	if t.cp.State != Running || t.cp.Pending != nil {
		return t.refuse("intend")
	}
	m := cloneMessage(asst.Message)
	t.cp.Pending, t.cp.PendingExtra = &m, asst.Extra
	return nil
}

// wait pauses the turn on asst, a round whose calls need decisions:
// running -> waiting, nothing decided yet.
func (t turn) wait(asst Entry) error {
	if t.cp.State != Running || t.cp.Pending != nil {
		return t.refuse("wait")
	}
	m := cloneMessage(asst.Message)
	t.cp.State, t.cp.Pending, t.cp.PendingExtra = Waiting, &m, asst.Extra
	t.cp.Waiting, t.cp.Decisions = nil, nil
	return nil
}

// waitPlan pauses the turn on its first plan until a person presses
// Start (Approval.Plan): running -> waiting, nothing pending.
func (t turn) waitPlan(a Approval) error {
	if t.cp.State != Running || t.cp.Pending != nil {
		return t.refuse("wait for the plan's start")
	}
	t.cp.State, t.cp.Waiting, t.cp.Decisions = Waiting, &a, nil
	return nil
}

// planDecided goes on from a plan's wait once it is decided: waiting ->
// running. Started (allowed) or not, the turn's plan waits no more; a
// plan not started ends the turn (the runner ends it, stopped).
func (t turn) planDecided() error {
	w := t.cp.Waiting
	if t.cp.State != Waiting || w == nil || !w.Plan {
		return t.refuse("go on from the plan's wait")
	}
	t.cp.State, t.cp.Waiting, t.cp.Decisions = Running, nil, nil
	t.cp.PlanApproved = t.cp.Turns
	return nil
}

// pendingEntry is the pending round's assistant message as an entry.
func (t turn) pendingEntry() Entry {
	return Entry{Message: *t.cp.Pending, Extra: t.cp.PendingExtra}
}

// ask makes a, one of the pending calls with no decision yet, the
// approval the turn waits for.
func (t turn) ask(a Approval) error {
	if t.cp.State != Waiting || !t.pending(a.CallID) {
		return t.refuse("ask for " + a.CallID)
	}
	if _, done := t.cp.Decisions[a.CallID]; done {
		return t.refuse("ask for decided " + a.CallID)
	}
	t.cp.Waiting = &a
	return nil
}

// decide records d for callID and returns the approval it decides. Only
// the approval the turn waits for can be decided, and only once: anything
// else is ErrNotPending (a second click, a card of an earlier turn, a
// deadline that fires after a click).
func (t turn) decide(callID string, d Decision) (Approval, error) {
	w := t.cp.Waiting
	if t.cp.State != Waiting || w == nil || w.CallID != callID {
		return Approval{}, ErrNotPending
	}
	if _, done := t.cp.Decisions[callID]; done {
		return Approval{}, ErrNotPending
	}
	t.cp.Decisions = maps.Clone(t.cp.Decisions)
	if t.cp.Decisions == nil {
		t.cp.Decisions = map[string]Decision{}
	}
	d.Asked = w.Asked
	t.cp.Decisions[callID] = d
	t.cp.Changed++
	return *w, nil
}

// stop stops a turn parked on an approval: the call it waits for and
// every other pending call with no decision yet are decided "stopped" by
// by, so none of the round's calls runs and the turn ends once the runner
// picks it up. A turn that does not wait for a decision is errNotWaiting
// (a running turn is stopped through its context); one whose approval was
// decided already (or stopped) is ErrNotPending, as for decide: the
// runner is about to go on with it and owns its checkpoint until then.
func (t turn) stop(by string, at time.Time) error {
	w := t.cp.Waiting
	if t.cp.State != Waiting || w == nil || t.cp.Pending == nil && !w.Plan {
		return errNotWaiting
	}
	if _, done := t.cp.Decisions[w.CallID]; done {
		return ErrNotPending
	}
	decisions := maps.Clone(t.cp.Decisions)
	if decisions == nil {
		decisions = map[string]Decision{}
	}
	stop := Decision{ByName: by, At: at, Reason: ReasonStopped}
	shown := stop
	shown.Asked = w.Asked
	decisions[w.CallID] = shown
	if t.cp.Pending != nil {
		for _, tc := range t.cp.Pending.ToolCalls {
			if _, done := decisions[tc.ID]; !done {
				decisions[tc.ID] = stop
			}
		}
	}
	t.cp.Decisions = decisions
	t.cp.Changed++
	return nil
}

// stoppedBy is who stopped the waiting turn, "" when nobody did.
func (t turn) stoppedBy() string { return stoppedIn(t.cp.Decisions) }

// stoppedIn is who stopped a turn with these decisions, "" when nobody did.
func stoppedIn(decisions map[string]Decision) string {
	for _, d := range decisions {
		if d.Reason == ReasonStopped {
			return cmp.Or(d.ByName, "someone")
		}
	}
	return ""
}

// proceed goes on with a turn whose calls that ask are all decided:
// waiting -> running, the pending message kept until its results are in.
func (t turn) proceed() error {
	if t.cp.State != Waiting || t.cp.Pending == nil {
		return t.refuse("proceed")
	}
	t.cp.State, t.cp.Waiting = Running, nil
	return nil
}

// answer closes a round whose tool results are all in: nothing is
// pending or decided any more.
func (t turn) answer() error {
	if t.cp.State != Running {
		return t.refuse("answer")
	}
	t.cp.Pending, t.cp.PendingExtra, t.cp.Waiting, t.cp.Decisions = nil, nil, nil, nil
	return nil
}

// end ends the turn, whatever its outcome: -> idle. How it ended is
// kept with it (Checkpoint.Ended, for Runner.Ending).
func (t turn) end(e Ending) error {
	if t.cp.State == Idle {
		return t.refuse("end")
	}
	t.cp.State = Idle
	t.cp.Pending, t.cp.PendingExtra, t.cp.Waiting, t.cp.Decisions = nil, nil, nil, nil
	e.Turn = t.cp.Turns
	if e.Outcome == Done {
		e.Text = "" // the answer is the last history entry
	}
	t.cp.Ended = &e
	return nil
}

// pending reports whether callID is one of the pending message's calls.
func (t turn) pending(callID string) bool {
	if t.cp.Pending == nil {
		return false
	}
	return slices.ContainsFunc(t.cp.Pending.ToolCalls, func(tc openai.ToolCall) bool { return tc.ID == callID })
}

// Reset is the checkpoint a reset leaves (DESIGN.md §13): an idle turn
// with nothing pending, no history, plan or grants; only the turn count is
// kept, since approvals and card ids are named by it. Store.Archive writes
// it in place of the archived record.
func (cp Checkpoint) Reset(now time.Time) Checkpoint {
	return Checkpoint{Key: cp.Key, State: Idle, Turns: cp.Turns, LogSeq: cp.LogSeq, Created: now, Updated: now}
}

// clone returns a copy of cp that shares no map, slice or pointer with it,
// so that preparing the next checkpoint cannot change the committed one.
func (cp Checkpoint) clone() Checkpoint {
	c := cp
	c.Plan = slices.Clone(cp.Plan)
	if cp.Pending != nil {
		m := cloneMessage(*cp.Pending)
		c.Pending = &m
	}
	// PendingExtra is shared: an Extra is never changed once made.
	if cp.Waiting != nil {
		w := *cp.Waiting
		c.Waiting = &w
	}
	c.Decisions = maps.Clone(cp.Decisions)
	if cp.Ended != nil {
		e := *cp.Ended
		c.Ended = &e
	}
	c.Grants = slices.Clone(cp.Grants)
	c.Marks = slices.Clone(cp.Marks)
	c.Evidence = cp.Evidence.Clone()
	c.Unattributed = slices.Clone(cp.Unattributed)
	if cp.Summary != nil {
		s := *cp.Summary
		c.Summary = &s
	}
	return c
}

// cloneMessage copies m with its own slices of parts and tool calls.
func cloneMessage(m openai.ChatCompletionMessage) openai.ChatCompletionMessage {
	m.MultiContent = slices.Clone(m.MultiContent)
	m.ToolCalls = slices.Clone(m.ToolCalls)
	if m.FunctionCall != nil {
		f := *m.FunctionCall
		m.FunctionCall = &f
	}
	return m
}
