package discord

import (
	"context"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/pinplan/pinplan/chat"
)

// TestShareSpreadsTheChannelPace: with two replicas each channel's edits
// come half as often from each, for channels paced before and after.
func TestShareSpreadsTheChannelPace(t *testing.T) {
	a := &Adapter{opts: Options{EditEvery: time.Second}, limiters: map[string]*chat.Budget{}}
	before := a.budget("C1")
	a.Share(2)
	after := a.budget("C2")
	for name, l := range map[string]*chat.Budget{"existing": before, "new": after} {
		if got, want := l.PerMinute(), 30.0; got < want-1e-9 || got > want+1e-9 {
			t.Errorf("%s channel: pace = %v a minute, want %v", name, got, want)
		}
	}
}

// TestForgetDropsAnIdleChannelsPace: a session that left memory takes its
// channel's limiter with it once the limiter has its burst back (a new
// one paces the same), never while edits are owed to it; other
// platforms' threads are ignored.
func TestForgetDropsAnIdleChannelsPace(t *testing.T) {
	a := &Adapter{opts: Options{EditEvery: time.Hour}, limiters: map[string]*chat.Budget{}, chanTypes: map[string]discordgo.ChannelType{}}
	th := chat.Thread{Platform: "discord", Key: Key("C1"), Channel: "C1"}
	busy := chat.Thread{Platform: "discord", Key: Key("C2"), Channel: "C2"}
	a.budget(th.Channel)
	for range 3 { // the whole burst spent: an hour to get one back
		if err := chat.Pace(context.Background(), a, chat.Request{Thread: busy, Method: chat.MethodEdit}); err != nil {
			t.Fatal(err)
		}
	}
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
