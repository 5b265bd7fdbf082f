package agent

import (
	"errors"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// waitingOn is a checkpoint whose turn waits for c1, the first of three
// calls; decided are the decisions made so far.
func waitingOn(decided map[string]Decision) Checkpoint {
	msg := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{
		{ID: "c1", Function: openai.FunctionCall{Name: "fs__write"}},
		{ID: "c2", Function: openai.FunctionCall{Name: "fs__write"}},
		{ID: "c3", Function: openai.FunctionCall{Name: "read"}},
	}}
	return Checkpoint{Key: "web/t", State: Waiting, Pending: &msg, Waiting: &Approval{CallID: "c1", Tool: "fs__write", Turn: 1}, Decisions: decided}
}

// TestTurnTransitions: each event is allowed in the states the machine
// names and refused, changing nothing, in the others.
func TestTurnTransitions(t *testing.T) {
	msg := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{ID: "c1"}}}
	for _, tt := range []struct {
		name  string
		from  Checkpoint
		event func(turn) error
		want  RunState // state after; "" when the event is refused
	}{
		{name: "start from idle", from: Checkpoint{State: Idle}, event: func(t turn) error { return t.start(Inbound{AuthorID: "U1"}) }, want: Running},
		{name: "start while running", from: Checkpoint{State: Running}, event: func(t turn) error { return t.start(Inbound{}) }},
		{name: "start while waiting", from: waitingOn(nil), event: func(t turn) error { return t.start(Inbound{}) }},
		{name: "wait from running", from: Checkpoint{State: Running}, event: func(t turn) error { return t.wait(Entry{Message: msg}) }, want: Waiting},
		{name: "wait while idle", from: Checkpoint{State: Idle}, event: func(t turn) error { return t.wait(Entry{Message: msg}) }},
		{name: "intend from running", from: Checkpoint{State: Running}, event: func(t turn) error { return t.intend(Entry{Message: msg}) }, want: Running},
		{name: "intend while waiting", from: waitingOn(nil), event: func(t turn) error { return t.intend(Entry{Message: msg}) }},
		{name: "ask while waiting", from: waitingOn(nil), event: func(t turn) error { return t.ask(Approval{CallID: "c2"}) }, want: Waiting},
		{name: "ask for a call not pending", from: waitingOn(nil), event: func(t turn) error { return t.ask(Approval{CallID: "c9"}) }},
		{name: "ask for a decided call", from: waitingOn(map[string]Decision{"c2": {Allow: true}}), event: func(t turn) error { return t.ask(Approval{CallID: "c2"}) }},
		{name: "proceed from waiting", from: waitingOn(map[string]Decision{"c1": {Allow: true}}), event: func(t turn) error { return t.proceed() }, want: Running},
		{name: "proceed while running", from: Checkpoint{State: Running}, event: func(t turn) error { return t.proceed() }},
		{name: "answer while running", from: Checkpoint{State: Running, Pending: &msg}, event: func(t turn) error { return t.answer() }, want: Running},
		{name: "answer while waiting", from: waitingOn(nil), event: func(t turn) error { return t.answer() }},
		{name: "end from running", from: Checkpoint{State: Running, Pending: &msg}, event: func(t turn) error { return t.end(Ending{Outcome: Done}) }, want: Idle},
		{name: "end from waiting", from: waitingOn(nil), event: func(t turn) error { return t.end(Ending{Outcome: Done}) }, want: Idle},
		{name: "end while idle", from: Checkpoint{State: Idle}, event: func(t turn) error { return t.end(Ending{Outcome: Done}) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cp := tt.from.clone()
			err := tt.event(turn{&cp})
			switch {
			case tt.want == "" && !errors.Is(err, errTransition):
				t.Fatalf("got %v, want a refusal", err)
			case tt.want == "" && cp.State != tt.from.State:
				t.Errorf("refused, yet the state moved from %s to %s", tt.from.State, cp.State)
			case tt.want != "" && err != nil:
				t.Fatalf("got %v, want the move to %s", err, tt.want)
			case tt.want != "" && cp.State != tt.want:
				t.Errorf("got state %s, want %s", cp.State, tt.want)
			}
			if tt.want == Idle && (cp.Pending != nil || cp.Waiting != nil || cp.Decisions != nil) {
				t.Errorf("an ended turn keeps pending %v, waiting %v, decisions %v", cp.Pending, cp.Waiting, cp.Decisions)
			}
		})
	}
}

// TestTurnDecide: only the approval the turn waits for may be decided,
// and only once.
func TestTurnDecide(t *testing.T) {
	for _, tt := range []struct {
		name   string
		from   Checkpoint
		callID string
		ok     bool
	}{
		{name: "the call shown", from: waitingOn(nil), callID: "c1", ok: true},
		{name: "another pending call", from: waitingOn(nil), callID: "c2"},
		{name: "decided already", from: waitingOn(map[string]Decision{"c1": {Allow: true}}), callID: "c1"},
		{name: "stopped already", from: waitingOn(map[string]Decision{"c1": {Reason: ReasonStopped}}), callID: "c1"},
		{name: "turn running", from: Checkpoint{State: Running}, callID: "c1"},
		{name: "turn idle", from: Checkpoint{State: Idle}, callID: "c1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cp := tt.from.clone()
			a, err := turn{&cp}.decide(tt.callID, Decision{Allow: true, By: "U1"})
			if !tt.ok {
				if !errors.Is(err, ErrNotPending) {
					t.Fatalf("got %v, want ErrNotPending", err)
				}
				if len(cp.Decisions) != len(tt.from.Decisions) {
					t.Errorf("refused, yet decisions went from %v to %v", tt.from.Decisions, cp.Decisions)
				}
				return
			}
			if err != nil || a.CallID != tt.callID || !cp.Decisions[tt.callID].Allow {
				t.Fatalf("got %+v, %v, decisions %v; want %s allowed", a, err, cp.Decisions, tt.callID)
			}
		})
	}
}

// TestTurnStop: a stop decides every pending call not decided yet and
// keeps what was decided; it is refused when nothing waits, and a second
// stop finds nothing pending.
func TestTurnStop(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	cp := waitingOn(map[string]Decision{"c3": {Allow: true, By: "U1"}})
	before := cp.clone()
	if err := (turn{&cp}).stop("bob", at); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c1", "c2"} {
		if d := cp.Decisions[id]; d.Reason != ReasonStopped || d.ByName != "bob" || !d.At.Equal(at) || d.Allow {
			t.Errorf("%s: got %+v, want stopped by bob at %s", id, d, at)
		}
	}
	if d := cp.Decisions["c3"]; !d.Allow || d.Reason != "" {
		t.Errorf("c3: got %+v, want the earlier decision kept", d)
	}
	if got := (turn{&cp}).stoppedBy(); got != "bob" {
		t.Errorf("stoppedBy = %q, want bob", got)
	}
	if len(before.Decisions) != 1 {
		t.Errorf("the stop changed the checkpoint it was cloned from: %v", before.Decisions)
	}
	if err := (turn{&cp}).stop("carol", at); !errors.Is(err, ErrNotPending) {
		t.Errorf("second stop: got %v, want ErrNotPending", err)
	}
	for _, from := range []Checkpoint{{State: Idle}, {State: Running}, {State: Waiting}} {
		if err := (turn{&from}).stop("bob", at); !errors.Is(err, errNotWaiting) {
			t.Errorf("stop while %s (waiting for %v): got %v, want errNotWaiting", from.State, from.Waiting, err)
		}
	}
}

// TestCheckpointClone: a clone shares no map, slice or pointer with the
// checkpoint it was made from.
func TestCheckpointClone(t *testing.T) {
	cp := waitingOn(map[string]Decision{"c1": {Allow: true}})
	cp.Grants = []Grant{{Tool: "fs__write", Requester: "U1"}}
	cp.Summary = &Summary{Text: "so far"}
	c := cp.clone()
	c.Decisions["c2"] = Decision{}
	c.Grants[0].Tool = "other"
	c.Pending.ToolCalls[0].ID = "changed"
	c.Waiting.CallID = "changed"
	c.Summary.Text = "changed"
	if len(cp.Decisions) != 1 || cp.Grants[0].Tool != "fs__write" || cp.Pending.ToolCalls[0].ID != "c1" || cp.Waiting.CallID != "c1" || cp.Summary.Text != "so far" {
		t.Errorf("changing the clone changed the original: %+v", cp)
	}
}
