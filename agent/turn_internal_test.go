package agent

import "testing"

// TestStarterIsTheFirstTurns: a session's starter is its first turn's
// requester; a session whose turns began before starters were kept
// (an upgrade) gets none, rather than its next requester: the rules
// then fall back to each turn's requester and the approvers.
func TestStarterIsTheFirstTurns(t *testing.T) {
	fresh := Checkpoint{State: Idle}
	if err := (turn{&fresh}).start(Inbound{AuthorID: "U1", MessageID: "m1"}); err != nil {
		t.Fatal(err)
	}
	if fresh.Starter != "U1" || fresh.Trigger != "m1" {
		t.Errorf("a new session's first turn: starter %q, trigger %q; want U1 and m1", fresh.Starter, fresh.Trigger)
	}
	fresh.State = Idle
	if err := (turn{&fresh}).start(Inbound{AuthorID: "U2", MessageID: "m2"}); err != nil {
		t.Fatal(err)
	}
	if fresh.Starter != "U1" || fresh.Trigger != "m2" {
		t.Errorf("its second turn: starter %q, trigger %q; want U1 and m2", fresh.Starter, fresh.Trigger)
	}
	old := Checkpoint{State: Idle, Turns: 3, Requester: "U1"} // stored before starters were kept
	if err := (turn{&old}).start(Inbound{AuthorID: "U2", MessageID: "m9"}); err != nil {
		t.Fatal(err)
	}
	if old.Starter != "" {
		t.Errorf("an older session's next turn made %q its starter, want none", old.Starter)
	}
}
