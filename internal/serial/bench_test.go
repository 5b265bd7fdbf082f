package serial

import (
	"context"
	"strconv"
	"sync"
	"testing"
)

// oldSerial is chat.Serial as it was before this package replaced it (git
// show 9d16f15:chat/serial.go), kept to compare against in one run.
type oldSerial struct {
	wg sync.WaitGroup

	mu     sync.Mutex // guards queues
	queues map[string][]func()
}

func (s *oldSerial) Do(key string, f func()) {
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

func (s *oldSerial) run(key string) {
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

func (s *oldSerial) Wait() { s.wg.Wait() }

// BenchmarkAdd measures queueing and running b.N empty functions spread
// over 1, 64 and 4096 keys, with the old chat.Serial beside the Queue.
// ns/op is the cost of one function, goroutine starts included (more keys:
// more of them).
func BenchmarkAdd(b *testing.B) {
	for _, keys := range []int{1, 64, 4096} {
		names := make([]string, keys)
		for i := range names {
			names[i] = "slack/T1/C1/" + strconv.Itoa(i)
		}
		f := func() {}
		b.Run("keys="+strconv.Itoa(keys)+"/queue", func(b *testing.B) {
			b.ReportAllocs()
			var q Queue
			for i := range b.N {
				q.Add(names[i%keys], f)
			}
			q.Wait(context.Background())
		})
		b.Run("keys="+strconv.Itoa(keys)+"/old", func(b *testing.B) {
			b.ReportAllocs()
			var s oldSerial
			for i := range b.N {
				s.Do(names[i%keys], f)
			}
			s.Wait()
		})
	}
}

// BenchmarkAddParallel queues from every CPU at once, each goroutine on
// its own keys, as adapters' event handlers do.
func BenchmarkAddParallel(b *testing.B) {
	f := func() {}
	b.Run("queue", func(b *testing.B) {
		var q Queue
		var n sync.Mutex
		id := 0
		b.RunParallel(func(pb *testing.PB) {
			n.Lock()
			key := "discord/" + strconv.Itoa(id)
			id++
			n.Unlock()
			for pb.Next() {
				q.Add(key, f)
			}
		})
		q.Wait(context.Background())
	})
	b.Run("old", func(b *testing.B) {
		var s oldSerial
		var n sync.Mutex
		id := 0
		b.RunParallel(func(pb *testing.PB) {
			n.Lock()
			key := "discord/" + strconv.Itoa(id)
			id++
			n.Unlock()
			for pb.Next() {
				s.Do(key, f)
			}
		})
		s.Wait()
	})
}

// BenchmarkKick measures Kick while the key's run is busy: the coalescing
// path a session takes for every message during a turn.
func BenchmarkKick(b *testing.B) {
	b.ReportAllocs()
	var q Queue
	release := make(chan struct{})
	q.Add("k", func() { <-release })
	f := func() {}
	for range b.N {
		q.Kick("k", f)
	}
	close(release)
	q.Wait(context.Background())
}
