package slack

import (
	"testing"

	"golang.org/x/time/rate"
)

// TestShareDividesTheWorkspacePace: three replicas each take a third of
// the workspace's pace, so together they keep to it.
func TestShareDividesTheWorkspacePace(t *testing.T) {
	a := New(Options{EditsPerMinute: 45, AppendsPerMinute: 90})
	a.Share(3)
	if got, want := a.limiter.Limit(), rate.Limit(45.0/60/3); got != want {
		t.Errorf("edit pace = %v/s, want %v/s", got, want)
	}
	if got, want := a.appends.Limit(), rate.Limit(90.0/60/3); got != want {
		t.Errorf("append pace = %v/s, want %v/s", got, want)
	}
	if b := a.limiter.Burst(); b*3 > 5 {
		t.Errorf("burst %d per replica lets three replicas burst %d, over the one-process 5", b, b*3)
	}
	a.Share(1)
	if got := a.limiter.Limit(); got != rate.Limit(45.0/60) {
		t.Errorf("back to one replica: pace = %v/s, want the whole budget", got)
	}
}
