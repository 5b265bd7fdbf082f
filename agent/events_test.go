package agent_test

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
)

// TestEventsFollowedInOrder: every follower sees every event, one after
// the other in the order they followed, before Publish returns.
func TestEventsFollowedInOrder(t *testing.T) {
	var ev agent.EventService
	var got []string
	for _, name := range []string{"router", "other"} {
		ev.Follow(agent.SubscriberFunc(func(e agent.Event) { got = append(got, name+":"+e.Session) }))
	}
	ev.Publish(agent.Event{Session: "a"})
	ev.Publish(agent.Event{Session: "b"})
	want := []string{"router:a", "other:a", "router:b", "other:b"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestSubscriptionDrainsInOrder: a subscription gets every event in the
// order published, on the subscriber's own goroutine, and Close ends its
// Drain once what it buffered is read.
func TestSubscriptionDrainsInOrder(t *testing.T) {
	var ev agent.EventService
	sub := ev.Subscribe("console", 16)
	var got []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sub.Drain(agent.SubscriberFunc(func(e agent.Event) { got = append(got, e.Session) }))
	}()
	for _, k := range []string{"a", "b", "c"} {
		ev.Publish(agent.Event{Session: k})
	}
	sub.Close()
	<-done
	if want := []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	ev.Publish(agent.Event{Session: "d"}) // after Close: nowhere, no panic
	sub.Close()                           // twice: nothing
}

// TestSlowSubscriberNeverBlocks: a subscriber that does not read holds up
// neither Publish nor the followers; what its full buffer cannot take is
// dropped, counted and logged once until it catches up.
func TestSlowSubscriberNeverBlocks(t *testing.T) {
	var buf bytes.Buffer
	ev := agent.EventService{Logger: slog.New(slog.NewTextHandler(&buf, nil))}
	var followed int
	ev.Follow(agent.SubscriberFunc(func(agent.Event) { followed++ }))
	slow := ev.Subscribe("metrics", 2)
	published := make(chan struct{})
	go func() {
		defer close(published)
		for range 10 {
			ev.Publish(agent.Event{Session: "s"})
		}
	}()
	select {
	case <-published:
	case <-time.After(5 * time.Second):
		t.Fatal("Publish blocked on a subscriber that does not read")
	}
	if followed != 10 {
		t.Errorf("the follower saw %d events, want 10", followed)
	}
	if got := slow.Dropped(); got != 8 {
		t.Errorf("dropped %d, want 8", got)
	}
	if n := strings.Count(buf.String(), "subscriber=metrics"); n != 1 {
		t.Errorf("logged %d times, want once: %s", n, buf.String())
	}
	<-slow.C()
	ev.Publish(agent.Event{Session: "s"}) // room again: taken, and a later drop is logged anew
	ev.Publish(agent.Event{Session: "s"})
	if got := slow.Dropped(); got != 9 {
		t.Errorf("dropped %d, want 9", got)
	}
	if n := strings.Count(buf.String(), "subscriber=metrics"); n != 2 {
		t.Errorf("logged %d times, want twice: %s", n, buf.String())
	}
	slow.Close()
}
