package chat

import "sync"

// Serial runs functions one at a time per key, in the order they were
// given, and different keys in parallel. Adapters use it so that the
// messages of one thread are handled in the order the platform sent them
// (a follow-up never overtakes the mention that created the session),
// without one slow thread holding up the others. A key's goroutine exists
// only while it has work. The zero value is ready.
type Serial struct {
	wg sync.WaitGroup

	mu     sync.Mutex // guards queues
	queues map[string][]func()
}

// Do queues f behind the functions already queued for key.
func (s *Serial) Do(key string, f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queues == nil {
		s.queues = map[string][]func(){}
	}
	q, busy := s.queues[key]
	s.queues[key] = append(q, f)
	if !busy {
		s.wg.Add(1)
		go s.run(key)
	}
}

func (s *Serial) run(key string) {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		q := s.queues[key]
		if len(q) == 0 {
			delete(s.queues, key)
			s.mu.Unlock()
			return
		}
		f := q[0]
		s.mu.Unlock()
		f()
		s.mu.Lock()
		s.queues[key] = s.queues[key][1:]
		s.mu.Unlock()
	}
}

// Wait waits until every queued function has run.
func (s *Serial) Wait() { s.wg.Wait() }
