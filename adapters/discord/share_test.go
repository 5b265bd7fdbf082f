package discord

import (
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/pinplan/pinplan/chat"
)

// TestShareSpreadsTheChannelPace: with two replicas each channel's edits
// come half as often from each, for channels paced before and after.
func TestShareSpreadsTheChannelPace(t *testing.T) {
	a := &Adapter{opts: Options{EditEvery: time.Second}, limiters: map[string]*rate.Limiter{}}
	before := a.Limiter(chat.Thread{Channel: "C1"}).(*rate.Limiter)
	a.Share(2)
	after := a.Limiter(chat.Thread{Channel: "C2"}).(*rate.Limiter)
	for name, l := range map[string]*rate.Limiter{"existing": before, "new": after} {
		if got, want := l.Limit(), rate.Every(2*time.Second); got != want {
			t.Errorf("%s channel: pace = %v/s, want %v/s", name, got, want)
		}
	}
}
