package discord

import (
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
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

// TestForgetDropsAnIdleChannelsPace: a session that left memory takes its
// channel's limiter with it once the limiter has its burst back (a new
// one paces the same), never while edits are owed to it; other
// platforms' threads are ignored.
func TestForgetDropsAnIdleChannelsPace(t *testing.T) {
	a := &Adapter{opts: Options{EditEvery: time.Hour}, limiters: map[string]*rate.Limiter{}, chanTypes: map[string]discordgo.ChannelType{}}
	th := chat.Thread{Platform: "discord", Key: Key("C1"), Channel: "C1"}
	busy := chat.Thread{Platform: "discord", Key: Key("C2"), Channel: "C2"}
	a.Limiter(th)
	a.Limiter(busy).(*rate.Limiter).Allow() // an edit spent: an hour to get it back
	a.chanTypes["C1"] = discordgo.ChannelTypeGuildPublicThread
	a.Forget(chat.Thread{Platform: "slack", Key: "slack/T1/C1/1.1", Channel: "C1"})
	if len(a.limiters) != 2 || len(a.chanTypes) != 1 {
		t.Fatalf("another platform's Forget dropped %d limiters and %d types", 2-len(a.limiters), 1-len(a.chanTypes))
	}
	a.Forget(th)
	a.Forget(busy)
	if _, ok := a.limiters["C1"]; ok {
		t.Error("the idle channel's full limiter was kept")
	}
	if _, ok := a.limiters["C2"]; !ok {
		t.Error("a limiter with an edit owed was dropped: a new one would let the next edit through early")
	}
	if _, ok := a.chanTypes["C1"]; ok {
		t.Error("the channel type was kept")
	}
}
