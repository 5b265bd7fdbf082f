package chat

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat/chattest"
	"github.com/pinplan/pinplan/todo"
)

// onlyPlan is the one plan message f shows.
func (f *fakePlatform) onlyPlan(t *testing.T) Plan {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.shown) != 1 {
		t.Fatalf("%d plan messages, want 1", len(f.shown))
	}
	for _, p := range f.shown {
		return p
	}
	return Plan{}
}

// TestSteerClick (DESIGN §19): an item control pressed by the requester
// goes to the agent with the item, the revision and the person; a
// stranger's press and one on a replaced revision are refused privately
// and go nowhere; a person's change the agent logged is shown in place,
// the skipped item struck with who skipped it, on a finished plan whose
// state stays done.
func TestSteerClick(t *testing.T) {
	p := &fakePlatform{}
	run := &chattest.Runner{}
	r := NewRouter(Options{Runner: run, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond})
	t.Cleanup(r.Close)
	const key = "test/1"
	th := Thread{Platform: "test", Key: key, Channel: "C1"}
	r.out.board(key, &th)
	items := []todo.Item{{Content: "a", Status: todo.Completed}, {Content: "b", Status: todo.Pending}, {Content: "c", Status: todo.Pending}}
	observe(r, agent.Event{Session: key, Kind: agent.TurnStarted, Turn: 1, Requester: "UANN"})
	observe(r, agent.Event{Session: key, Kind: agent.PlanChanged, Revision: 1, Plan: todo.NewSnapshot(items), At: time.Now()})
	observe(r, agent.Event{Session: key, Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done, Text: "done"})
	settle(t, r, key)
	shown := p.onlyPlan(t)
	ctx := context.Background()

	skipB := ItemButton(ActionSkip, shown, shown.Items[1])
	if res := r.Click(ctx, Click{Thread: th, Button: skipB, UserID: "UBO", UserName: "bo"}); !strings.Contains(res.Private, "Only") || !res.Refused {
		t.Errorf("a stranger's press: %+v, want a private refusal", res)
	}
	old := shown
	old.Revision = 0
	if res := r.Click(ctx, Click{Thread: th, Button: ItemButton(ActionSkip, old, shown.Items[1]), UserID: "UANN", UserName: "ann"}); !strings.Contains(res.Private, "changed") {
		t.Errorf("a press on a replaced revision: %+v, want a private refusal", res)
	}
	if got := run.Steers(); len(got) != 0 {
		t.Fatalf("refused presses reached the agent: %+v", got)
	}
	if res := r.Click(ctx, Click{Thread: th, Button: skipB, UserID: "UANN", UserName: "ann"}); !strings.Contains(res.Private, "skipped “b”") || res.Refused {
		t.Errorf("the requester's press: %+v", res)
	}
	add := r.Click(ctx, Click{Thread: th, Button: ItemButton(ActionAdd, shown, shown.Items[0]), UserID: "UANN", UserName: "ann", Text: " a2 "})
	if !strings.Contains(add.Private, "added “a2”") {
		t.Errorf("an add: %+v", add)
	}
	got := run.Steers()
	if len(got) != 2 || got[0] != (agent.Steer{Action: agent.SteerSkip, Item: "b", Revision: 1, By: "ann", ByID: "UANN"}) ||
		got[1].Action != agent.SteerAdd || got[1].Item != "a" || got[1].Text != " a2 " {
		t.Fatalf("steers %+v", got)
	}

	st := got[0]
	marks := []agent.Mark{{Action: agent.SteerSkip, Item: "b", After: "a", By: "ann"}}
	observe(r, agent.Event{Session: key, Kind: agent.PlanChanged, Revision: 1, Steer: &st, Marks: marks,
		Plan: todo.NewSnapshot([]todo.Item{items[0], items[2]}), At: time.Now()})
	settle(t, r, key)
	after := p.onlyPlan(t)
	if after.State != StateDone {
		t.Errorf("a change on a finished plan moved it to %s", after.State)
	}
	if len(after.Items) != 3 || after.Items[1] != (todo.Item{Content: "b", Status: Skipped}) {
		t.Fatalf("items after the skip: %+v, want b shown skipped in its place", after.Items)
	}
	if line := after.EvidenceLine(after.Items[1]); line != "↳ skipped by ann" {
		t.Errorf("the skipped item's line: %q", line)
	}
	bidi := after
	bidi.Items = slices.Clone(after.Items)
	bidi.Items[1].Content = "b\u202e"
	bidi.Marks = []agent.Mark{{Action: agent.SteerSkip, Item: "b\u202e", After: "a", By: "an\u202en"}}
	if cl := bidi.Clean(); cl.EvidenceLine(cl.Items[1]) != "↳ skipped by ann" {
		t.Errorf("a skipped item with bidi controls, cleaned: %q", cl.EvidenceLine(cl.Items[1]))
	}
	if done, total := after.Progress(); done != 1 || total != 2 {
		t.Errorf("progress %d/%d, want 1/2: a skipped item is not the agent's to do", done, total)
	}
	if acts := after.Actions(after.Items[1]); len(acts) != 2 || acts[0] != ActionReopen {
		t.Errorf("a skipped item's actions: %v, want reopen first", acts)
	}
}

// TestStartButton (DESIGN §19): a turn whose first plan waits for Start
// shows Start on its plan message, no approval card; a stranger's press
// is refused privately, the requester's starts the plan; once decided
// the button goes.
func TestStartButton(t *testing.T) {
	r, p, run := cardRig(t)
	const key = "test/1"
	th := Thread{Platform: "test", Key: key, Channel: "C1"}
	items := []todo.Item{{Content: "a", Status: todo.Pending}, {Content: "b", Status: todo.Pending}}
	observe(r, agent.Event{Session: key, Kind: agent.TurnStarted, Turn: 1, Requester: "UANN"})
	observe(r, agent.Event{Session: key, Kind: agent.PlanChanged, Revision: 1, Plan: todo.NewSnapshot(items), At: time.Now()})
	a := agent.Approval{CallID: agent.PlanCallID(1), Tool: todo.ToolName, Requester: "UANN", Deadline: time.Now().Add(time.Hour), Turn: 1, Plan: true}
	observe(r, agent.Event{Session: key, Kind: agent.ApprovalNeeded, Approval: &a, Plan: todo.NewSnapshot(items), Revision: 1})
	settle(t, r, key)
	shown := p.onlyPlan(t)
	if shown.Start != ButtonID(ActionStart, a.CallID) || shown.State != StateWaiting || !strings.Contains(shown.Footer(), "waiting for Start") {
		t.Fatalf("the plan while it waits for Start: start %q, state %s, footer %q", shown.Start, shown.State, shown.Footer())
	}
	p.cmu.Lock()
	cards := p.posts
	p.cmu.Unlock()
	if cards != 0 {
		t.Errorf("%d approval cards posted for the plan's Start", cards)
	}
	// A change while the plan waits for Start keeps Start on the message.
	st := agent.Steer{Action: agent.SteerSkip, Item: "b", Revision: 1, By: "ann"}
	observe(r, agent.Event{Session: key, Kind: agent.PlanChanged, Revision: 2, Steer: &st, Plan: todo.NewSnapshot(items[:1]),
		Marks: []agent.Mark{{Action: agent.SteerSkip, Item: "b", After: "a", By: "ann"}}, At: time.Now()})
	settle(t, r, key)
	if steered := p.onlyPlan(t); steered.Start != shown.Start || steered.Revision != 2 || !strings.Contains(steered.Footer(), "waiting for Start") {
		t.Fatalf("after a change while waiting for Start: start %q, revision %d, footer %q", steered.Start, steered.Revision, steered.Footer())
	}
	ctx := context.Background()
	if res := r.Click(ctx, Click{Thread: th, Button: shown.Start, UserID: "UBO", UserName: "bo"}); !strings.Contains(res.Private, "Only") {
		t.Errorf("a stranger's Start: %+v, want a private refusal", res)
	}
	res := r.Click(ctx, Click{Thread: th, Button: shown.Start, UserID: "UANN", UserName: "ann"})
	if res.Plan == nil || res.Plan.Start != "" || res.Plan.State != StateWorking {
		t.Errorf("the requester's Start answered %+v", res)
	}
	run.mu.Lock()
	got := slices.Clone(run.decisions)
	run.mu.Unlock()
	if len(got) != 1 || !got[0].Allow || got[0].By != "UANN" {
		t.Fatalf("decisions %+v, want the requester's start", got)
	}
	d := got[0]
	observe(r, agent.Event{Session: key, Kind: agent.ApprovalDecided, Approval: &a, Decision: &d})
	settle(t, r, key)
	if after := p.onlyPlan(t); after.Start != "" || after.State != StateWorking {
		t.Errorf("after Start: start %q, state %s", after.Start, after.State)
	}
}

// TestSteerClickOnCleanedText: a control rendered from the plan cleaned
// of bidi controls (as every renderer shows it) finds its item.
func TestSteerClickOnCleanedText(t *testing.T) {
	p := &fakePlatform{}
	run := &chattest.Runner{}
	r := NewRouter(Options{Runner: run, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond})
	t.Cleanup(r.Close)
	const key = "test/1"
	th := Thread{Platform: "test", Key: key, Channel: "C1"}
	r.out.board(key, &th)
	items := []todo.Item{{Content: "a\u202eb", Status: todo.Pending}}
	observe(r, agent.Event{Session: key, Kind: agent.TurnStarted, Turn: 1, Requester: "UANN"})
	observe(r, agent.Event{Session: key, Kind: agent.PlanChanged, Revision: 1, Plan: todo.NewSnapshot(items), At: time.Now()})
	settle(t, r, key)
	shown := p.onlyPlan(t).Clean()
	res := r.Click(context.Background(), Click{Thread: th, Button: ItemButton(ActionSkip, shown, shown.Items[0]), UserID: "UANN", UserName: "ann"})
	if got := run.Steers(); len(got) != 1 || got[0].Item != "a\u202eb" {
		t.Errorf("%+v: steers %+v, want the item by its stored text", res, got)
	}
}
