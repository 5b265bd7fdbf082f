// Package chattest has in-memory stand-ins for the chat package's
// dependencies, for tests and benchmarks of chat and the adapters.
package chattest

import (
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
	mu sync.Mutex // guards m
	m  map[string][]byte
}

// Board implements chat.BoardStore.
func (s *Boards) Board(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key], nil
}

// SaveBoard implements chat.BoardStore.
func (s *Boards) SaveBoard(_ context.Context, key string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string][]byte{}
	}
	s.m[key] = append([]byte(nil), data...)
	return nil
}

// Boards implements chat.BoardLister.
func (s *Boards) Boards(_ context.Context, f func(string, []byte)) error {
	s.mu.Lock()
	m := maps.Clone(s.m)
	s.mu.Unlock()
	for k, v := range m {
		f(k, v)
	}
	return nil
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
// Ended holds what Ending reports, by session key.
type Runner struct {
	Ended map[string]agent.Event
}

// Ending implements chat.Runner.
func (r Runner) Ending(_ context.Context, key string) (agent.Event, bool, error) {
	e, ok := r.Ended[key]
	return e, ok, nil
}

// Submit implements chat.Runner.
func (Runner) Submit(context.Context, string, agent.Inbound) error { return nil }

// Stop implements chat.Runner.
func (Runner) Stop(string, string) bool { return false }

// Reset implements chat.Runner.
func (Runner) Reset(context.Context, string, string) error { return nil }

// Decide implements chat.Runner.
func (Runner) Decide(context.Context, string, string, agent.Decision) (agent.Approval, error) {
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
