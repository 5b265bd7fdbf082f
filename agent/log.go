package agent

import (
	"errors"
	"slices"
	"time"

	"github.com/pinplan/pinplan/todo"
)

// LogEntry is one effect of a turn on its thread (DESIGN.md §1): the
// turn started, the plan was revised, the round's tool calls were
// committed, a card was opened or decided, the turn ended and how. Each
// session has one log, numbered from 1 without gaps (Seq), written by
// the runner in the same transaction as the round that caused the
// entries (Round.Log), so what a person is shown can never run ahead of
// or fall behind what the agent did: the chat layer projects the log
// onto the platform from a cursor it persists, and after a kill -9 or a
// takeover it resumes from that cursor.
//
// What is not durable is not logged: a tool call in progress (ToolStarted,
// ToolEnded), a resumed turn's start, a session that cannot be read at
// all, a reset (its effect is the archive itself). Those are published as
// events with Seq 0 and mean nothing after a restart. A turn that ends
// because its round could not be saved ends with a saved entry like any
// other, or, when nothing can be saved, shows nothing and is tried again.
//
// The store keeps entries as they are and interprets none of them, but
// for Compactable, which says which entries the delivery cursor has
// passed for good.
type LogEntry struct {
	Seq       int64       `json:"seq"`
	Kind      EventKind   `json:"kind"`
	Turn      int64       `json:"turn,omitempty"`
	Plan      []todo.Item `json:"plan,omitempty"`
	Revision  int64       `json:"revision,omitempty"`
	Text      string      `json:"text,omitempty"`
	Outcome   Outcome     `json:"outcome,omitempty"`
	Error     string      `json:"error,omitempty"`
	StoppedBy string      `json:"stopped_by,omitempty"`
	Requester string      `json:"requester,omitempty"`
	Trigger   string      `json:"trigger,omitempty"`
	Approval  *Approval   `json:"approval,omitempty"`
	Decision  *Decision   `json:"decision,omitempty"`
	Evidence  Evidence    `json:"evidence,omitempty"`
	Calls     int         `json:"calls,omitempty"`
	Approvals int         `json:"approvals,omitempty"`
	Marks     []Mark      `json:"marks,omitempty"`
	Steer     *Steer      `json:"steer,omitempty"`
	At        time.Time   `json:"at"`
}

// logEntry is e as a log entry, without its number.
func logEntry(e Event) LogEntry {
	l := LogEntry{Kind: e.Kind, Turn: e.Turn, Plan: e.Plan.Items(), Revision: e.Revision, Text: e.Text,
		Outcome: e.Outcome, StoppedBy: e.StoppedBy, Requester: e.Requester, Trigger: e.Trigger, Evidence: e.Evidence.Clone(),
		Calls: e.Calls, Approvals: e.Approvals, Marks: slices.Clone(e.Marks), Steer: copyOf(e.Steer), At: e.At}
	if e.Err != nil {
		l.Error = e.Err.Error()
	}
	l.Approval, l.Decision = copyOf(e.Approval), copyOf(e.Decision)
	return l
}

// Event returns the entry of session key's log as the event it records
// (Event.Seq set).
func (l LogEntry) Event(key string) Event {
	e := Event{Session: key, Seq: l.Seq, Kind: l.Kind, Turn: l.Turn, Plan: todo.NewSnapshot(l.Plan), Revision: l.Revision,
		Text: l.Text, Outcome: l.Outcome, StoppedBy: l.StoppedBy, Requester: l.Requester, Trigger: l.Trigger, Evidence: l.Evidence.Clone(),
		Calls: l.Calls, Approvals: l.Approvals, Marks: slices.Clone(l.Marks), Steer: copyOf(l.Steer), At: l.At}
	if l.Error != "" {
		e.Err = errors.New(l.Error)
	}
	e.Approval, e.Decision = copyOf(l.Approval), copyOf(l.Decision)
	return e
}

// copyOf returns a pointer to a copy of *p, nil for nil.
func copyOf[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// Compactable returns the numbers of the entries of entries (a session's
// log from its start up to its delivery cursor, in order) that nothing
// needs any more (DESIGN §1: entries the cursor has passed are
// compacted): all but what the thread's projections are folded from
// after a restart: the last entry that carries a plan revision and the
// last PlanChanged (with its marks), the last TurnStarted, TurnEnded,
// ApprovalDecided and EvidenceChanged, and the last EvidenceChanged
// before that TurnEnded (the run's state, the finished plan a later turn
// took over as it showed, the evidence under the items), and the last
// request of each approval still open (ApprovalNeeded with
// no ApprovalDecided after it). The stores delete them when the cursor
// is saved, so a session's log stays small however many turns it had.
func Compactable(entries []LogEntry) []int64 {
	type approval struct {
		call string
		turn int64
	}
	plan, ended := int64(-1), int64(-1)
	last := map[EventKind]int64{}
	open := map[approval]int64{}
	for _, e := range entries {
		if len(e.Plan) > 0 || e.Revision > 0 {
			plan = e.Seq
		}
		switch e.Kind {
		case TurnStarted, TurnEnded, EvidenceChanged, PlanChanged, ApprovalDecided:
			if e.Kind == TurnEnded {
				ended = last[EvidenceChanged]
			}
			last[e.Kind] = e.Seq
		}
		if e.Approval == nil {
			continue
		}
		id := approval{e.Approval.CallID, e.Approval.Turn}
		switch e.Kind {
		case ApprovalNeeded:
			open[id] = e.Seq
		case ApprovalDecided:
			delete(open, id)
		}
	}
	var drop []int64
	for _, e := range entries {
		if e.Seq == plan || last[e.Kind] == e.Seq || e.Kind == EvidenceChanged && e.Seq == ended {
			continue
		}
		if e.Approval != nil && e.Kind == ApprovalNeeded && open[approval{e.Approval.CallID, e.Approval.Turn}] == e.Seq {
			continue
		}
		drop = append(drop, e.Seq)
	}
	return drop
}
