package agent_test

import (
	"slices"
	"testing"

	"github.com/pinplan/pinplan/agent"
)

// TestEventsInSubscriptionOrder: every subscriber sees every event, one
// after the other in the order they subscribed, before Publish returns.
func TestEventsInSubscriptionOrder(t *testing.T) {
	var ev agent.Events
	var got []string
	for _, name := range []string{"metrics", "router", "console"} {
		ev.Subscribe(agent.SubscriberFunc(func(e agent.Event) { got = append(got, name+":"+e.Session) }))
	}
	ev.Publish(agent.Event{Session: "a"})
	ev.Publish(agent.Event{Session: "b"})
	want := []string{"metrics:a", "router:a", "console:a", "metrics:b", "router:b", "console:b"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
