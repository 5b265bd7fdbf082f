package chat

import (
	"sync"
	"testing"
)

func TestSerialKeepsOrderPerKey(t *testing.T) {
	var s Serial
	var mu sync.Mutex
	got := map[string][]int{}
	for i := range 200 {
		key := []string{"a", "b", "c"}[i%3]
		s.Do(key, func() {
			mu.Lock()
			got[key] = append(got[key], i)
			mu.Unlock()
		})
	}
	s.Wait()
	for key, seq := range got {
		for j := 1; j < len(seq); j++ {
			if seq[j] < seq[j-1] {
				t.Fatalf("key %s ran %d after %d", key, seq[j], seq[j-1])
			}
		}
	}
	if n := len(got["a"]) + len(got["b"]) + len(got["c"]); n != 200 {
		t.Errorf("ran %d functions, want 200", n)
	}
}
