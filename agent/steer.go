package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sashabaranov/go-openai"
	"go.opentelemetry.io/otel/trace"

	"github.com/pinplan/pinplan/todo"
)

// SteerAction is what a person does to a plan item from the pinned
// message (DESIGN §19).
type SteerAction string

// The changes a person may make to the plan.
const (
	// SteerSkip: a pending or in-progress item leaves the agent's plan;
	// the pinned message keeps it, struck, with who skipped it.
	SteerSkip SteerAction = "skip"
	// SteerReopen: a completed or skipped item is pending again.
	SteerReopen SteerAction = "reopen"
	// SteerAdd: a new pending item after the one it was made on.
	SteerAdd SteerAction = "add"
)

// Steer is one person's change of the plan, made on revision Revision
// of it as the pinned message showed it. It is queued in the session's
// inbox (Inbound.Steer) and applied in log order at the session's next
// safe point: at once when no model request or tool runs, else when the
// round in flight is committed; a running request is not cut. Applied,
// it is a plan revision of its own (PlanRevision.Change): changes queued
// on one revision apply in order, and a control of a revision a change
// or the agent replaced is refused.
type Steer struct {
	Action SteerAction `json:"action"`
	// Item is the content of the item the change was made on.
	Item string `json:"item"`
	// Text is a new item's content (SteerAdd).
	Text     string    `json:"text,omitempty"`
	Revision int64     `json:"revision"`
	By       string    `json:"by"` // who, as the thread names them
	ByID     string    `json:"by_id,omitempty"`
	At       time.Time `json:"at"`
}

// Mark is a person's change as the plan keeps it (Checkpoint.Marks): a
// skipped item stays shown, struck, and the agent's snapshots may not
// bring it back; a reopened or added item is owed to the agent's next
// snapshot, and shows who changed it while it is in the plan.
type Mark struct {
	Action SteerAction `json:"action"`
	Item   string      `json:"item"`
	// After is the item a skipped one followed: it stays shown there
	// ("" for the top).
	After string    `json:"after,omitempty"`
	By    string    `json:"by"`
	At    time.Time `json:"at"`
	// Owed: the agent's next snapshot must carry Item, pending or in
	// progress (a reopened or added item it has not written yet).
	Owed bool `json:"owed,omitempty"`
}

// SteerError is a change that cannot be made; Reason says why, in words
// for the person who tried (shown to them alone).
type SteerError struct{ Reason string }

func (e *SteerError) Error() string { return "agent: plan change refused: " + e.Reason }

// ErrChanged: a round applied while its turn waits (a plan change) was
// not written, because the stored checkpoint changed since it was read
// (a decision or a stop, Store.UpdateCheckpoint). The runner reads it
// again and applies the round anew.
var ErrChanged = errors.New("the session's checkpoint changed since it was read")

// Steer queues a person's change of the session's plan (DESIGN §19). It
// is refused (a *SteerError) when it was made on a revision a newer one
// replaced, or does not apply to the plan as it will be once the changes
// queued before it are applied; otherwise it is durable when Steer
// returns, and the session applies it at its next safe point.
func (r *Runner) Steer(ctx context.Context, key string, st Steer) error {
	if st.At.IsZero() {
		st.At = r.opts.Now()
	}
	st.Text = todo.TrimSpace(invisible.Replace(st.Text))
	var cp Checkpoint
	err := r.opts.Store.UpdateCheckpoint(ctx, key, func(c *Checkpoint) error {
		cp = Checkpoint{}
		if c != nil {
			cp = *c
		}
		return errReadOnly
	})
	if err != nil && !errors.Is(err, errReadOnly) {
		return fmt.Errorf("agent: read the plan of %s: %w", key, err)
	}
	if st.Revision != cp.Revision {
		return &SteerError{Reason: "the plan changed since you looked at it; look at the pinned plan again and make your change there."}
	}
	inbox, err := r.opts.Store.Inbox(ctx, key)
	if err != nil {
		return fmt.Errorf("agent: read the inbox of %s: %w", key, err)
	}
	plan, marks := cp.Plan, cp.Marks
	for _, in := range inbox {
		if in.Steer != nil {
			if p, m, err := applySteer(plan, marks, *in.Steer); err == nil {
				plan, marks = p, m
			}
		}
	}
	if _, _, err := applySteer(plan, marks, st); err != nil {
		return err
	}
	if _, err := r.opts.Store.Enqueue(ctx, key, Inbound{Steer: &st, Author: st.By, AuthorID: st.ByID, At: st.At}); err != nil {
		return fmt.Errorf("agent: queue a plan change in %s: %w", key, err)
	}
	r.kick(key)
	return nil
}

// invisible are the characters a new item's text loses: zero-width
// spaces and bidirectional controls, which no one typed on purpose and
// the model would have to copy back exactly (todo_write compares items
// by their text).
var invisible = strings.NewReplacer("\u200b", "", "\u2060", "", "\ufeff", "", "\u200e", "", "\u200f", "", "\u061c", "",
	"\u202a", "", "\u202b", "", "\u202c", "", "\u202d", "", "\u202e", "", "\u2066", "", "\u2067", "", "\u2068", "", "\u2069", "")

// applySteer returns the agent's plan and the marks after st, or a
// *SteerError when st does not apply to them.
func applySteer(plan []todo.Item, marks []Mark, st Steer) ([]todo.Item, []Mark, error) {
	i := slices.IndexFunc(plan, func(it todo.Item) bool { return it.Content == st.Item })
	skipped := slices.IndexFunc(marks, func(m Mark) bool { return m.Action == SteerSkip && m.Item == st.Item })
	plan, marks = slices.Clone(plan), slices.Clone(marks)
	switch st.Action {
	case SteerSkip:
		if i < 0 || plan[i].Status == todo.Completed {
			return nil, nil, &SteerError{Reason: "only a pending or in-progress item can be skipped."}
		}
		// It stays shown after what it follows on the message now, a
		// skipped item included, so that skips in a row keep their order.
		after := ""
		shown := ShownItems(plan, marks)
		if j := slices.IndexFunc(shown, func(it todo.Item) bool { return it.Content == st.Item }); j > 0 {
			after = shown[j-1].Content
		}
		plan = slices.Delete(plan, i, i+1)
		marks = dropMarks(marks, st.Item)
		marks = append(marks, Mark{Action: SteerSkip, Item: st.Item, After: after, By: st.By, At: st.At})
	case SteerReopen:
		switch {
		case skipped >= 0:
			at := anchor(plan, marks, marks[skipped].After)
			if len(plan) >= todo.MaxItems {
				return nil, nil, &SteerError{Reason: fmt.Sprintf("the plan has %d items already, the most it may have.", todo.MaxItems)}
			}
			plan = slices.Insert(plan, at, todo.Item{Content: st.Item, Status: todo.Pending})
		case i >= 0 && plan[i].Status == todo.Completed:
			plan[i].Status = todo.Pending
		default:
			return nil, nil, &SteerError{Reason: "only a completed or skipped item can be reopened."}
		}
		marks = dropMarks(marks, st.Item)
		marks = append(marks, Mark{Action: SteerReopen, Item: st.Item, By: st.By, At: st.At, Owed: true})
	case SteerAdd:
		n := utf8.RuneCountInString(st.Text)
		switch {
		case n == 0:
			return nil, nil, &SteerError{Reason: "the new item has no text."}
		case n > todo.MaxContentLength:
			return nil, nil, &SteerError{Reason: fmt.Sprintf("the new item is %d characters long; the most is %d.", n, todo.MaxContentLength)}
		case len(plan) >= todo.MaxItems:
			return nil, nil, &SteerError{Reason: fmt.Sprintf("the plan has %d items already, the most it may have.", todo.MaxItems)}
		case slices.ContainsFunc(plan, func(it todo.Item) bool { return it.Content == st.Text }) ||
			slices.ContainsFunc(marks, func(m Mark) bool { return m.Action == SteerSkip && m.Item == st.Text }):
			return nil, nil, &SteerError{Reason: "the plan has that item already."}
		}
		at := len(plan)
		switch {
		case i >= 0:
			at = i + 1
		case skipped >= 0:
			at = anchor(plan, marks, marks[skipped].After)
		case st.Item != "" || len(plan) > 0:
			return nil, nil, &SteerError{Reason: "that item is no longer in the plan."}
		}
		plan = slices.Insert(plan, at, todo.Item{Content: st.Text, Status: todo.Pending})
		marks = append(marks, Mark{Action: SteerAdd, Item: st.Text, By: st.By, At: st.At, Owed: true})
	default:
		return nil, nil, &SteerError{Reason: "unknown change " + strconv.Quote(string(st.Action)) + "."}
	}
	return plan, marks, nil
}

// StatusSkipped is the status ShownItems gives an item a person skipped:
// not one of the agent's three (todo), the person's mark.
const StatusSkipped todo.Status = "skipped"

// ShownItems is the plan as its message shows it: the agent's items, and
// each item a person skipped (status StatusSkipped) where it was, after
// the item it followed (anchor).
func ShownItems(plan []todo.Item, marks []Mark) []todo.Item {
	out := slices.Clone(plan)
	for _, m := range marks {
		if m.Action != SteerSkip {
			continue
		}
		out = slices.Insert(out, anchor(out, marks, m.After), todo.Item{Content: m.Item, Status: StatusSkipped})
	}
	return out
}

// anchor is where an item that followed after goes in items: right after
// it; when after is itself a skipped item not in items, where that one
// would go; the top for "", the end when after is gone.
func anchor(items []todo.Item, marks []Mark, after string) int {
	for range len(marks) + 1 {
		if after == "" {
			return 0
		}
		if i := slices.IndexFunc(items, func(it todo.Item) bool { return it.Content == after }); i >= 0 {
			return i + 1
		}
		j := slices.IndexFunc(marks, func(m Mark) bool { return m.Action == SteerSkip && m.Item == after })
		if j < 0 {
			break
		}
		after = marks[j].After
	}
	return len(items)
}

// dropMarks returns marks without those of item.
func dropMarks(marks []Mark, item string) []Mark {
	return slices.DeleteFunc(marks, func(m Mark) bool { return m.Item == item })
}

// checkMarks is what a todo_write snapshot must agree with (DESIGN §19):
// no item a person skipped, and every item a person reopened or added
// that the agent has not written since, pending or in progress. The
// error is the tool's result, as for an invalid snapshot.
func checkMarks(items []todo.Item, marks []Mark) error {
	for _, m := range marks {
		i := slices.IndexFunc(items, func(it todo.Item) bool { return it.Content == m.Item })
		switch {
		case m.Action == SteerSkip && i >= 0:
			return &todo.Error{Code: todo.CodeInvalidArguments, Message: fmt.Sprintf(
				"%s skipped %q on the plan; leave it out of the list. If it must still be done, say why in your answer instead. The list was not changed.", m.By, m.Item)}
		case m.Owed && (i < 0 || items[i].Status == todo.Completed):
			what := "reopened"
			if m.Action == SteerAdd {
				what = "added"
			}
			return &todo.Error{Code: todo.CodeInvalidArguments, Message: fmt.Sprintf(
				"%s %s %q on the plan; keep it in the list as pending or in_progress until it is done. The list was not changed.", m.By, what, m.Item)}
		}
	}
	return nil
}

// newTask reports whether the snapshot items replaces plan with another
// task: they share no item. People's marks belong to the plan they were
// made on: a new task's snapshot is not held to them, and drops them.
func newTask(plan, items []todo.Item) bool {
	for _, it := range items {
		if slices.ContainsFunc(plan, func(p todo.Item) bool { return p.Content == it.Content }) {
			return false
		}
	}
	return len(plan) > 0
}

// settleMarks returns marks after the agent's snapshot items replaced
// plan: what was owed is carried now, and the mark of an item that left
// the plan goes, but a skip's; a new task (newTask) drops them all.
func settleMarks(marks []Mark, plan, items []todo.Item) []Mark {
	if newTask(plan, items) {
		return nil
	}
	var out []Mark
	for _, m := range marks {
		if m.Action != SteerSkip && !slices.ContainsFunc(items, func(it todo.Item) bool { return it.Content == m.Item }) {
			continue
		}
		m.Owed = false
		out = append(out, m)
	}
	return out
}

// steerText is what the model reads of a person's change: a user message
// naming the person and the change, and the list as it now is.
func steerText(st Steer, plan []todo.Item) string {
	var what string
	switch st.Action {
	case SteerSkip:
		what = fmt.Sprintf("%s skipped %q on the plan. Leave it out of your todo_write lists from now on; if it must still be done, say why in your answer.", st.By, st.Item)
	case SteerReopen:
		what = fmt.Sprintf("%s reopened %q on the plan: it is pending again. Keep it in your next todo_write list.", st.By, st.Item)
	case SteerAdd:
		what = fmt.Sprintf("%s added %q to the plan. Keep it in your next todo_write list.", st.By, st.Text)
	}
	return "[plan change] " + what + "\nCurrent TODO list: " + todo.Encode(plan)
}

// steer applies the plan changes at the head of the inbox, in their
// order, in one commit: the plan and its marks change, a PlanChanged
// entry per change says who made it, and the model reads each at its
// next request. It returns the messages that follow them, up to the next
// change: a change queued after a message is applied after it. While the
// turn waits for a decision the commit is written only over the
// checkpoint it read (ErrChanged: read again, apply again).
func (r *Runner) steer(ctx context.Context, s *session, inbox []Inbound) ([]Inbound, error) {
	n := 0
	for n < len(inbox) && inbox[n].Steer != nil {
		n++
	}
	steers, rest := inbox[:n], inbox[n:]
	if i := slices.IndexFunc(rest, func(in Inbound) bool { return in.Steer != nil }); i >= 0 {
		rest = rest[:i]
	}
	if len(steers) == 0 {
		return rest, nil
	}
	if ctx == nil {
		ctx = r.ctx
	}
	for attempt := 0; ; attempt++ {
		err := r.applySteers(ctx, s, steers)
		if !errors.Is(err, ErrChanged) || attempt >= 5 {
			return rest, err
		}
		if err := r.reload(s); err != nil {
			return rest, err
		}
	}
}

// applySteers commits steers (steer).
func (r *Runner) applySteers(ctx context.Context, s *session, steers []Inbound) error {
	plan, marks := s.tracker.Snapshot().Items(), s.cp.Marks
	rev := s.tracker.Revision()
	rd := &Round{Guard: s.cp.State == Waiting}
	var spans []trace.Span
	defer func() {
		for _, sp := range spans {
			sp.End()
		}
	}()
	for _, in := range steers {
		st := *in.Steer
		spans = append(spans, r.traceSteer(ctx, s.key, st))
		rd.Drained = append(rd.Drained, in.ID)
		p, m, err := applySteer(plan, marks, st)
		if err != nil {
			// Taken when it was made, and no longer applicable: a
			// second press of the same change, or one that a change
			// queued just before it made moot. The person was told
			// privately it was taken; the thread hears nothing.
			r.opts.Logger.Info("plan change no longer applies; dropped", "session", s.key, "action", st.Action, "by", st.By, "reason", err)
			continue
		}
		plan, marks = p, m
		rev++ // a revision of its own: a control of the one before is stale now
		rd.Append = append(rd.Append, Entry{Message: openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: steerText(st, plan)}, At: in.At, Steer: true})
		rd.Plans = append(rd.Plans, PlanRevision{Revision: rev, Items: slices.Clone(plan), At: r.opts.Now(), Evidence: s.cp.Evidence.Clone(), Change: copyOf(&st)})
		r.record(s, Event{Kind: PlanChanged, Plan: todo.NewSnapshot(plan), Revision: rev, Marks: slices.Clone(marks), Steer: &st,
			Evidence: s.cp.Evidence.Clone(), Calls: s.cp.TurnCalls, Approvals: s.cp.TurnApprovals, At: st.At})
	}
	next := s.cp.clone()
	next.Marks = marks
	work := todo.Restore(plan, rev, s.tracker.Stale())
	return r.commit(ctx, s, rd, next, work)
}

// askPlan makes the turn wait for a person's Start on its first plan
// (Options.PlanApproval) when the round rd wrote it: the wait goes in
// next, and its announcement in the round's log, so one commit writes
// the plan and its wait. It returns the approval to arm once committed,
// nil when nothing waits (approval off, no plan written, an empty plan
// nobody could press Start on, or this turn's plan started already).
func (r *Runner) askPlan(s *session, rd *Round, next *Checkpoint, work *todo.Tracker) (*Approval, error) {
	if !r.opts.PlanApproval || len(rd.Plans) == 0 || next.PlanApproved >= next.Turns || work.Snapshot().Len() == 0 {
		return nil, nil
	}
	now := r.opts.Now()
	a := Approval{CallID: PlanCallID(next.Turns), Tool: todo.ToolName, Arguments: work.Snapshot().String(),
		Requester: next.Requester, Deadline: now.Add(r.opts.ApprovalTimeout), Turn: next.Turns, Asked: now, Plan: true}
	if err := (turn{next}).waitPlan(a); err != nil {
		return nil, err
	}
	r.record(s, Event{Kind: ApprovalNeeded, Approval: &a, Plan: work.Snapshot(), Revision: work.Revision(), At: now})
	return &a, nil
}

// awaitPlan goes on from a turn that waits for its plan's Start: started,
// it runs on; stopped, or not started in time, it ends, stopped. Not
// decided yet, the wait is announced again (after a restart or a
// takeover; unlogged) and its deadline armed: waiting is true.
func (r *Runner) awaitPlan(ctx context.Context, s *session) (waiting bool, err error) {
	if by, ok := stopped(ctx); ok && (turn{&s.cp}).stoppedBy() == "" {
		if err := r.stopWaiting(context.WithoutCancel(ctx), s.key, by); err != nil && !errors.Is(err, ErrNotPending) {
			return false, fmt.Errorf("record stop: %w", err)
		}
		if err := r.reload(s); err != nil {
			return false, err
		}
	}
	a := *s.cp.Waiting
	d, decided := s.cp.Decisions[a.CallID]
	if !decided {
		if !r.announcedHere(s.key, a.CallID) {
			// After a restart or a takeover: announced again, unlogged.
			r.publish(Event{Session: s.key, Kind: ApprovalNeeded, Approval: &a, Plan: s.tracker.Snapshot(), Revision: s.tracker.Revision(), Marks: s.cp.Marks})
		}
		r.arm(s.key, a)
		return true, nil
	}
	r.record(s, Event{Kind: ApprovalDecided, Approval: &a, Decision: &d})
	next := s.cp.clone()
	if err := (turn{&next}).planDecided(); err != nil {
		return false, err
	}
	if d.Allow {
		return false, r.commit(ctx, s, &Round{}, next, s.tracker.Clone())
	}
	s.cp = next // the wait is over; the turn ends from here, in one commit
	if d.Reason == ReasonTimeout {
		return false, r.endTurn(context.WithoutCancel(ctx), s, nil, Stopped, "Nobody pressed Start on the plan in time, so I did not begin. Send a message to try again.", nil)
	}
	return false, r.endStopped(ctx, s, nil, cmp.Or(d.ByName, "someone"))
}
