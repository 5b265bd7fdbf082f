package todo

// Tracker holds one session's plan: the current snapshot, its revision and
// the stale-round counter of the reminder. It is not safe for concurrent use;
// a session owns it and runs one turn at a time. Copy it by value (Clone) to
// prepare a round and keep the original until the round is committed.
type Tracker struct {
	snap     Snapshot
	revision int64
	stale    int
}

// Restore returns a tracker in a checkpointed state.
func Restore(items []Item, revision int64, stale int) *Tracker {
	return &Tracker{snap: NewSnapshot(items), revision: revision, stale: stale}
}

// Clone returns an independent copy.
func (t *Tracker) Clone() *Tracker { c := *t; return &c }

// Snapshot returns the current plan. It cannot change the tracker.
func (t *Tracker) Snapshot() Snapshot { return t.snap }

// Revision counts accepted todo_write calls.
func (t *Tracker) Revision() int64 { return t.revision }

// Stale is the number of tool rounds since the last todo_write round.
func (t *Tracker) Stale() int { return t.stale }

// Write validates arguments and, only if they are valid, replaces the whole
// list and bumps the revision. A rejected call leaves everything as it was.
func (t *Tracker) Write(arguments string) (Snapshot, error) {
	items, err := Parse(arguments)
	if err != nil {
		return Snapshot{}, err
	}
	t.snap = NewSnapshot(items)
	t.revision++
	return t.snap, nil
}

// EndRound counts one tool round, given the names of the tools its assistant
// message called: a round that called todo_write resets the counter, any
// other round with at least one call adds one, a round without calls is not
// counted.
func (t *Tracker) EndRound(toolNames []string) {
	if len(toolNames) == 0 {
		return
	}
	for _, n := range toolNames {
		if n == ToolName {
			t.stale = 0
			return
		}
	}
	t.stale++
}

// TakeReminder is called before each model request. It reports whether the
// request must carry the reminder (the counter reached threshold) and then
// resets the counter.
func (t *Tracker) TakeReminder(threshold int) bool {
	if threshold <= 0 || t.stale < threshold {
		return false
	}
	t.stale = 0
	return true
}
