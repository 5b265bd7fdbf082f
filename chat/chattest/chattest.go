// Package chattest has in-memory stand-ins for the chat package's
// dependencies, for tests and benchmarks of chat and the adapters.
package chattest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/todo"
)

// Boards is an in-memory chat.BoardStore. The zero value is ready.
type Boards struct {
	mu      sync.Mutex // guards m and pending
	m       map[string][]byte
	pending map[string]bool
}

// Board implements chat.BoardStore.
func (s *Boards) Board(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key], nil
}

// SaveBoard implements chat.BoardStore.
func (s *Boards) SaveBoard(_ context.Context, key string, data []byte, pending bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m, s.pending = map[string][]byte{}, map[string]bool{}
	}
	s.m[key] = append([]byte(nil), data...)
	if pending {
		s.pending[key] = true
	} else {
		delete(s.pending, key)
	}
	return nil
}

// PendingBoards implements chat.BoardStore.
func (s *Boards) PendingBoards(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.pending)), nil
}

// Cards is an in-memory chat.CardStore. The zero value is ready.
type Cards struct{ records }

// Cards implements chat.CardStore.
func (s *Cards) Cards(_ context.Context, key string) ([]byte, error) { return s.get(key), nil }

// SaveCards implements chat.CardStore.
func (s *Cards) SaveCards(_ context.Context, key string, data []byte) error {
	s.put(key, data)
	return nil
}

// Listings is an in-memory chat.ListingStore. The zero value is ready.
type Listings struct{ records }

// Listing implements chat.ListingStore.
func (s *Listings) Listing(_ context.Context, key string) ([]byte, error) { return s.get(key), nil }

// SaveListing implements chat.ListingStore.
func (s *Listings) SaveListing(_ context.Context, key string, data []byte) error {
	s.put(key, data)
	return nil
}

// records is one record per session key.
type records struct {
	mu sync.Mutex // guards m
	m  map[string][]byte
}

func (r *records) get(key string) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]byte(nil), r.m[key]...)
}

func (r *records) put(key string, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string][]byte{}
	}
	r.m[key] = append([]byte(nil), data...)
}

// Runner is a chat.Runner that accepts every message and runs nothing.
// What Turn reports is what Note was told, as the agent's store has a
// turn's start and end before the agent publishes them. The zero value
// is ready; use it by pointer.
type Runner struct {
	mu     sync.Mutex // guards turns and steers
	turns  map[string]agent.TurnInfo
	steers []agent.Steer
}

// Steer implements chat.Runner: it records the change, and refuses
// none.
func (r *Runner) Steer(_ context.Context, _ string, st agent.Steer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steers = append(r.steers, st)
	return nil
}

// Steers returns the plan changes Steer was given, in order.
func (r *Runner) Steers() []agent.Steer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.steers)
}

// Note records a published turn event as the agent's checkpoint has it:
// TurnStarted makes the session's turn run (with its requester, and the
// session's starter),
// TurnEnded ends it.
func (r *Runner) Note(e agent.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.turns == nil {
		r.turns = map[string]agent.TurnInfo{}
	}
	switch e.Kind {
	case agent.TurnStarted:
		// The session's starter is its first turn's requester, as the
		// agent's checkpoint keeps it (Checkpoint.Starter).
		starter := cmp.Or(r.turns[e.Session].Starter, e.Requester)
		r.turns[e.Session] = agent.TurnInfo{Running: true, Turn: e.Turn, Requester: e.Requester, Starter: starter}
	case agent.TurnEnded:
		t := r.turns[e.Session]
		t.Running = false
		r.turns[e.Session] = t
	}
}

// Turn implements chat.Runner.
func (r *Runner) Turn(_ context.Context, key string) (agent.TurnInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.turns[key], nil
}

// Submit implements chat.Runner.
func (*Runner) Submit(context.Context, string, agent.Inbound) error { return nil }

// Stop implements chat.Runner.
func (*Runner) Stop(string, string) bool { return false }

// Reset implements chat.Runner.
// A reset begins a new session, as the agent's Checkpoint.Reset does:
// its turn count stays, nothing runs and nobody is its starter yet.
func (r *Runner) Reset(_ context.Context, key, _ string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.turns[key]; ok {
		r.turns[key] = agent.TurnInfo{Turn: t.Turn}
	}
	return nil
}

// Decide implements chat.Runner.
func (*Runner) Decide(context.Context, string, string, agent.Decision) (agent.Approval, error) {
	return agent.Approval{}, agent.ErrNotPending
}

// Revision is a committed plan revision for session key: a two-item plan
// whose second item names rev, published now.
func Revision(key string, rev int64) agent.Event {
	items := []todo.Item{{Content: "step one", Status: todo.Completed}, {Content: fmt.Sprintf("step two, revision %d", rev), Status: todo.InProgress}}
	return agent.Event{Session: key, Kind: agent.PlanChanged, Revision: rev, Plan: todo.NewSnapshot(items), At: time.Now()}
}

// Outbox is an in-memory chat.OutboxStore that outlives a router, like
// the database does. The zero value is ready.
type Outbox struct {
	mu    sync.Mutex // guards next and items
	next  uint64
	items map[uint64][]byte
}

// AddOutbox implements chat.OutboxStore.
func (o *Outbox) AddOutbox(_ context.Context, _ string, items [][]byte) ([]uint64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.items == nil {
		o.items = map[uint64][]byte{}
	}
	ids := make([]uint64, len(items))
	for i, it := range items {
		o.next++
		ids[i] = o.next
		o.items[o.next] = append([]byte(nil), it...)
	}
	return ids, nil
}

// DeleteOutbox implements chat.OutboxStore.
func (o *Outbox) DeleteOutbox(_ context.Context, _ string, id uint64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.items, id)
	return nil
}

// OutboxOf implements chat.OutboxStore: every item, as store.DB's does;
// the caller keeps the session's.
func (o *Outbox) OutboxOf(ctx context.Context, _ string, f func(uint64, []byte)) error {
	return o.Outbox(ctx, f)
}

// Outbox implements chat.OutboxStore.
func (o *Outbox) Outbox(_ context.Context, f func(uint64, []byte)) error {
	o.mu.Lock()
	ids := make([]uint64, 0, len(o.items))
	for id := range o.items {
		ids = append(ids, id)
	}
	items := o.items
	o.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		o.mu.Lock()
		data := items[id]
		o.mu.Unlock()
		f(id, data)
	}
	return nil
}

// Len is the number of stored items.
func (o *Outbox) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.items)
}

// Log is an in-memory chat.LogStore that outlives a router, like the
// database does: the sessions' logs, as the agent commits them (Append),
// and their delivery cursors. The zero value is ready.
type Log struct {
	mu        sync.Mutex // guards entries, last and delivered
	entries   map[string][]agent.LogEntry
	last      map[string]int64 // each log's last number, compacted or not
	delivered map[string]int64
}

// Append adds e to session key's log, numbered after its last entry, and
// returns it as the agent publishes it.
func (l *Log) Append(key string, e agent.Event) agent.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.entries == nil {
		l.entries, l.last = map[string][]agent.LogEntry{}, map[string]int64{}
	}
	l.last[key]++
	e.Session, e.Seq = key, l.last[key]
	if e.At.IsZero() {
		e.At = time.Now()
	}
	entry := agent.LogEntry{Seq: e.Seq, Kind: e.Kind, Turn: e.Turn, Plan: e.Plan.Items(), Revision: e.Revision, Text: e.Text,
		Outcome: e.Outcome, StoppedBy: e.StoppedBy, Requester: e.Requester, Approval: e.Approval, Decision: e.Decision,
		Evidence: e.Evidence, Calls: e.Calls, Approvals: e.Approvals, Marks: e.Marks, Steer: e.Steer, Trigger: e.Trigger, At: e.At}
	l.entries[key] = append(l.entries[key], entry)
	return entry.Event(key)
}

// Log implements chat.LogStore.
func (l *Log) Log(_ context.Context, key string, after int64) ([]agent.LogEntry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []agent.LogEntry
	for _, e := range l.entries[key] {
		if e.Seq > after {
			out = append(out, e)
		}
	}
	return out, nil
}

// Delivered implements chat.LogStore.
func (l *Log) Delivered(_ context.Context, key string) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.delivered[key], nil
}

// SaveDelivered implements chat.LogStore.
func (l *Log) SaveDelivered(_ context.Context, key string, seq int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.delivered == nil {
		l.delivered = map[string]int64{}
	}
	l.delivered[key] = seq // as the stores do: the last save wins
	// And as they do, the entries the cursor passed are compacted to
	// what the thread's plan is folded from (agent.Compactable).
	var passed []agent.LogEntry
	for _, e := range l.entries[key] {
		if e.Seq <= seq {
			passed = append(passed, e)
		}
	}
	drop := map[int64]bool{}
	for _, n := range agent.Compactable(passed) {
		drop[n] = true
	}
	kept := l.entries[key][:0]
	for _, e := range l.entries[key] {
		if !drop[e.Seq] {
			kept = append(kept, e)
		}
	}
	l.entries[key] = kept
	return nil
}

// Drop deletes entries seqs of session key's log, as a compaction does.
func (l *Log) Drop(key string, seqs ...int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	kept := l.entries[key][:0]
	for _, e := range l.entries[key] {
		if !slices.Contains(seqs, e.Seq) {
			kept = append(kept, e)
		}
	}
	l.entries[key] = kept
}

// Delete drops session key's log and cursor, as retention deletes a
// session from the store: its next entries are numbered from 1 again.
func (l *Log) Delete(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.entries, key)
	delete(l.last, key)
	delete(l.delivered, key)
}

// Undelivered implements chat.LogStore.
func (l *Log) Undelivered(context.Context) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var keys []string
	for key, es := range l.entries {
		if len(es) > 0 && es[len(es)-1].Seq > l.delivered[key] {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	return keys, nil
}
