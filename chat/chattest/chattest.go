// Package chattest has in-memory stand-ins for the chat package's
// dependencies, for tests and benchmarks of chat and the adapters.
package chattest

import (
	"context"
	"fmt"
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

// Runner is a chat.Runner that accepts every message and runs nothing.
type Runner struct{}

// Submit implements chat.Runner.
func (Runner) Submit(context.Context, string, agent.Inbound) error { return nil }

// Stop implements chat.Runner.
func (Runner) Stop(string) bool { return false }

// Revision is a committed plan revision for session key: a two-item plan
// whose second item names rev, published now.
func Revision(key string, rev int64) agent.Event {
	items := []todo.Item{{Content: "step one", Status: todo.Completed}, {Content: fmt.Sprintf("step two, revision %d", rev), Status: todo.InProgress}}
	return agent.Event{Session: key, Kind: agent.PlanChanged, Revision: rev, Plan: todo.NewSnapshot(items), At: time.Now()}
}
