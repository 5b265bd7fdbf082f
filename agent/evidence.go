package agent

import (
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/pinplan/pinplan/todo"
)

// Evidence per plan item (DESIGN §15): the plan is the model's claim; the
// calls the bot saw are shown beside it. A call other than todo_write
// belongs to the items in progress when it is made; one made while none
// is in progress waits for the next snapshot and belongs to the items that
// snapshot moves from not completed to in progress or completed. Items are
// known by their text: an item whose text changes starts with none.
// Evidence is per turn: a turn starts with none (turn.start), so a
// follow-up's item with an earlier item's text shows only the follow-up's
// calls, and a pending item shows none.

// Call outcomes.
const (
	OutcomeOK          = "ok"
	OutcomeError       = "error"
	OutcomeDenied      = "denied"
	OutcomeTimeout     = "timeout"
	OutcomeInterrupted = "interrupted"
	OutcomeUnavailable = "unavailable"
	OutcomeStopped     = "stopped"
)

// Evidence caps.
const (
	maxCallsPerItem = 50  // beyond, calls are only counted
	maxCallArgs     = 200 // characters of arguments kept
)

// Call is one tool call as evidence.
type Call struct {
	Tool     string        `json:"tool"`
	Server   string        `json:"server,omitempty"`
	Outcome  string        `json:"outcome"`
	Approver string        `json:"approver,omitempty"` // who allowed or denied it on a card
	Start    time.Time     `json:"start"`
	Duration time.Duration `json:"duration"`
	Args     string        `json:"args,omitempty"` // the first 200 characters
}

// ItemEvidence is what was done for one item: its calls, up to
// maxCallsPerItem, and how many more there were.
type ItemEvidence struct {
	Calls []Call `json:"calls,omitempty"`
	More  int    `json:"more,omitempty"`
}

// Count is how many calls the item has, kept or counted.
func (e ItemEvidence) Count() int { return len(e.Calls) + e.More }

// Evidence is the calls attributed to each item, by item text.
type Evidence map[string]ItemEvidence

// Clone returns a copy sharing nothing with e.
func (e Evidence) Clone() Evidence {
	if e == nil {
		return nil
	}
	out := make(Evidence, len(e))
	for k, v := range e {
		out[k] = ItemEvidence{Calls: slices.Clone(v.Calls), More: v.More}
	}
	return out
}

// add attributes c to item.
func (e Evidence) add(item string, c Call) {
	ie := e[item]
	if len(ie.Calls) < maxCallsPerItem {
		ie.Calls = append(ie.Calls, c)
	} else {
		ie.More++
	}
	e[item] = ie
}

// keep drops the evidence of items no longer in the plan, and of items
// it has pending: a pending item shows none.
func (e Evidence) keep(items []todo.Item) {
	in := make(map[string]bool, len(items))
	for _, it := range items {
		in[it.Content] = it.Status != todo.Pending
	}
	maps.DeleteFunc(e, func(k string, _ ItemEvidence) bool { return !in[k] })
}

// attribution tracks one round's calls against the plan as it changes.
type attribution struct {
	ev      Evidence
	pending []Call // calls made while nothing was in progress
	calls   int    // the round's calls other than todo_write
}

func newAttribution(cp Checkpoint) *attribution {
	ev := cp.Evidence.Clone()
	if ev == nil {
		ev = Evidence{}
	}
	return &attribution{ev: ev, pending: slices.Clone(cp.Unattributed)}
}

// called records c, made while plan was the current snapshot.
func (a *attribution) called(plan []todo.Item, c Call) {
	a.calls++
	var active []string
	for _, it := range plan {
		if it.Status == todo.InProgress {
			active = append(active, it.Content)
		}
	}
	if len(active) == 0 {
		a.pending = append(a.pending, c)
		return
	}
	for _, item := range active {
		a.ev.add(item, c)
	}
}

// revised moves the plan from before to after: calls waiting for a
// snapshot go to the items it moves forward, and items that left the plan
// or went back to pending lose their evidence.
func (a *attribution) revised(before, after []todo.Item) {
	was := make(map[string]todo.Status, len(before))
	for _, it := range before {
		was[it.Content] = it.Status
	}
	var moved []string
	for _, it := range after {
		old, ok := was[it.Content]
		if (it.Status == todo.InProgress || it.Status == todo.Completed) && (!ok || old == todo.Pending) {
			moved = append(moved, it.Content)
		}
	}
	if len(moved) > 0 {
		for _, c := range a.pending {
			for _, item := range moved {
				a.ev.add(item, c)
			}
		}
		a.pending = nil
	}
	a.ev.keep(after)
}

// outcomeOf reads a call's outcome from its result.
func outcomeOf(result string) string {
	var r struct {
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(result), &r) != nil || r.Error == nil {
		return OutcomeOK
	}
	switch r.Error.Code {
	case "denied":
		return OutcomeDenied
	case "timeout":
		return OutcomeTimeout
	case "interrupted":
		return OutcomeInterrupted
	case "tool_unavailable":
		return OutcomeUnavailable
	case "stopped":
		return OutcomeStopped
	}
	return OutcomeError
}

func cutArgs(args string) string {
	r := []rune(args)
	if len(r) <= maxCallArgs {
		return args
	}
	return string(r[:maxCallArgs])
}
