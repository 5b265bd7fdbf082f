package mcp

import (
	"testing"
	"time"
)

func TestBackoffJitter(t *testing.T) {
	d := minBackoff
	var waits []time.Duration
	for range 10 {
		w := jitter(d)
		if w < d/2 || w >= d {
			t.Errorf("jitter(%s) = %s, want within [%s, %s)", d, w, d/2, d)
		}
		waits = append(waits, d)
		d = min(2*d, maxBackoff)
	}
	if waits[0] != time.Second || waits[6] != time.Minute || waits[9] != time.Minute {
		t.Errorf("backoff steps %v, want 1s doubling to 1m", waits)
	}
}
