package agent_test

import (
	"context"
	"encoding/json"
	"sort"
	"sync"

	"github.com/pinplan/pinplan/agent"
)

// memStore is agent.Store in memory, for measuring what the bbolt store
// costs (BenchmarkRoundsStores). It copies values through JSON as the real
// store does, so the two differ only in durability.
type memStore struct {
	mu       sync.Mutex // guards sessions, nextID and spent
	sessions map[string]*memSession
	nextID   uint64
	spent    map[agent.Spend]int64 // by person and day (Tokens 0)
}

type memSession struct {
	record []byte
	hist   [][]byte
	inbox  map[uint64][]byte
}

var _ agent.Store = (*memStore)(nil)

func (m *memStore) sessionLocked(key string) *memSession {
	if m.sessions == nil {
		m.sessions = map[string]*memSession{}
	}
	s, ok := m.sessions[key]
	if !ok {
		s = &memSession{inbox: map[uint64][]byte{}}
		m.sessions[key] = s
	}
	return s
}

func (m *memStore) Load(_ context.Context, key string) (*agent.Checkpoint, []agent.Entry, []agent.Inbound, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[key]
	if !ok {
		return nil, nil, nil, nil
	}
	var cp *agent.Checkpoint
	if s.record != nil {
		cp = new(agent.Checkpoint)
		if err := json.Unmarshal(s.record, cp); err != nil {
			return nil, nil, nil, err
		}
	}
	hist := make([]agent.Entry, len(s.hist))
	for i, raw := range s.hist {
		if err := json.Unmarshal(raw, &hist[i]); err != nil {
			return nil, nil, nil, err
		}
	}
	return cp, hist, m.inboxLocked(s), nil
}

func (m *memStore) inboxLocked(s *memSession) []agent.Inbound {
	ids := make([]uint64, 0, len(s.inbox))
	for id := range s.inbox {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out := make([]agent.Inbound, len(ids))
	for i, id := range ids {
		json.Unmarshal(s.inbox[id], &out[i])
	}
	return out
}

func (m *memStore) Commit(_ context.Context, r *agent.Round) error {
	record, err := json.Marshal(r.Checkpoint)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessionLocked(r.Checkpoint.Key)
	if r.Guard && s.record != nil {
		var cur agent.Checkpoint
		if err := json.Unmarshal(s.record, &cur); err != nil {
			return err
		}
		if cur.Changed != r.Checkpoint.Changed {
			return agent.ErrChanged
		}
	}
	s.hist = s.hist[:min(r.Base, len(s.hist))]
	for _, e := range r.Append {
		raw, err := json.Marshal(e)
		if err != nil {
			return err
		}
		s.hist = append(s.hist, raw)
	}
	for _, id := range r.Drained {
		delete(s.inbox, id)
	}
	if sp := r.Spend; sp != nil {
		if m.spent == nil {
			m.spent = map[agent.Spend]int64{}
		}
		k := agent.Spend{Person: sp.Person, Day: sp.Day}
		m.spent[k] = max(m.spent[k]+sp.Tokens, 0)
	}
	s.record = record
	return nil
}

func (m *memStore) Spent(_ context.Context, person, day string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.spent[agent.Spend{Person: person, Day: day}], nil
}

func (m *memStore) Reserve(_ context.Context, person, day string, need, want, budget int64) (int64, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := agent.Spend{Person: person, Day: day}
	spent := m.spent[k]
	n, err := agent.Reservation(need, want, budget, spent)
	if err != nil {
		return 0, spent, err
	}
	if m.spent == nil {
		m.spent = map[agent.Spend]int64{}
	}
	m.spent[k] = max(spent+n, 0)
	return n, spent, nil
}

func (m *memStore) Inbox(_ context.Context, key string) ([]agent.Inbound, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inboxLocked(m.sessionLocked(key)), nil
}

func (m *memStore) Enqueue(_ context.Context, key string, in agent.Inbound) (agent.Inbound, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nextID++
	in.ID = m.nextID
	raw, err := json.Marshal(in)
	if err != nil {
		return in, err
	}
	m.sessionLocked(key).inbox[in.ID] = raw
	return in, nil
}

func (m *memStore) Resumable(context.Context) ([]string, error) { return nil, nil }

func (m *memStore) UpdateCheckpoint(_ context.Context, key string, fn func(*agent.Checkpoint) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[key]
	if !ok || s.record == nil {
		return fn(nil)
	}
	var cp agent.Checkpoint
	if err := json.Unmarshal(s.record, &cp); err != nil {
		return err
	}
	if err := fn(&cp); err != nil {
		return err
	}
	raw, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	s.record = raw
	return nil
}

func (m *memStore) Archive(context.Context, string) error { return nil }
