package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pinplan/pinplan/todo"
)

func TestApplySteer(t *testing.T) {
	plan := []todo.Item{{Content: "a", Status: todo.Completed}, {Content: "b", Status: todo.InProgress}, {Content: "c", Status: todo.Pending}}
	skipB := []Mark{{Action: SteerSkip, Item: "b", After: "a", By: "bo"}}
	tests := []struct {
		name   string
		plan   []todo.Item
		marks  []Mark
		st     Steer
		want   string // the plan's snapshot text; "" for refused
		wantMk int
	}{
		{"skip in progress", plan, nil, Steer{Action: SteerSkip, Item: "b", By: "bo"}, `{"todos":[{"content":"a","status":"completed"},{"content":"c","status":"pending"}]}`, 1},
		{"skip completed", plan, nil, Steer{Action: SteerSkip, Item: "a"}, "", 0},
		{"skip missing", plan, nil, Steer{Action: SteerSkip, Item: "zz"}, "", 0},
		{"reopen completed", plan, nil, Steer{Action: SteerReopen, Item: "a"}, `{"todos":[{"content":"a","status":"pending"},{"content":"b","status":"in_progress"},{"content":"c","status":"pending"}]}`, 1},
		{"reopen pending", plan, nil, Steer{Action: SteerReopen, Item: "c"}, "", 0},
		{"reopen skipped goes back in its place", []todo.Item{plan[0], plan[2]}, skipB, Steer{Action: SteerReopen, Item: "b"}, `{"todos":[{"content":"a","status":"completed"},{"content":"b","status":"pending"},{"content":"c","status":"pending"}]}`, 1},
		{"add after", plan, nil, Steer{Action: SteerAdd, Item: "a", Text: "a2"}, `{"todos":[{"content":"a","status":"completed"},{"content":"a2","status":"pending"},{"content":"b","status":"in_progress"},{"content":"c","status":"pending"}]}`, 1},
		{"add after a skipped item", []todo.Item{plan[0], plan[2]}, skipB, Steer{Action: SteerAdd, Item: "b", Text: "b2"}, `{"todos":[{"content":"a","status":"completed"},{"content":"b2","status":"pending"},{"content":"c","status":"pending"}]}`, 2},
		{"add empty", plan, nil, Steer{Action: SteerAdd, Item: "a", Text: ""}, "", 0},
		{"add a duplicate", plan, nil, Steer{Action: SteerAdd, Item: "a", Text: "c"}, "", 0},
		{"add to the empty plan", nil, nil, Steer{Action: SteerAdd, Text: "x"}, `{"todos":[{"content":"x","status":"pending"}]}`, 1},
		{"unknown", plan, nil, Steer{Action: "drop", Item: "a"}, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, marks, err := applySteer(tt.plan, tt.marks, tt.st)
			var se *SteerError
			if tt.want == "" {
				if !errors.As(err, &se) || se.Reason == "" {
					t.Fatalf("got %v, %v; want a SteerError with a reason", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := todo.Encode(got); s != tt.want {
				t.Errorf("plan %s, want %s", s, tt.want)
			}
			if len(marks) != tt.wantMk {
				t.Errorf("marks %+v, want %d", marks, tt.wantMk)
			}
		})
	}
	if todo.Encode(plan) != `{"todos":[{"content":"a","status":"completed"},{"content":"b","status":"in_progress"},{"content":"c","status":"pending"}]}` {
		t.Error("applySteer changed its argument")
	}
}

func TestCheckMarks(t *testing.T) {
	marks := []Mark{{Action: SteerSkip, Item: "b", By: "bo"}, {Action: SteerAdd, Item: "d", By: "ann", Owed: true}}
	ok := []todo.Item{{Content: "a", Status: todo.Completed}, {Content: "d", Status: todo.Pending}}
	if err := checkMarks(ok, marks); err != nil {
		t.Errorf("a snapshot that agrees: %v", err)
	}
	for name, items := range map[string][]todo.Item{
		"skipped back":   {{Content: "b", Status: todo.Pending}, {Content: "d", Status: todo.Pending}},
		"added left out": {{Content: "a", Status: todo.Completed}},
		"added done":     {{Content: "d", Status: todo.Completed}},
	} {
		var te *todo.Error
		if err := checkMarks(items, marks); !errors.As(err, &te) || te.Code != todo.CodeInvalidArguments {
			t.Errorf("%s: %v, want an invalid_arguments error", name, err)
		}
	}
	settled := settleMarks(marks, ok, ok)
	if len(settled) != 2 || settled[1].Owed {
		t.Errorf("settled %+v: the added item is carried now", settled)
	}
	if got := settleMarks([]Mark{{Action: SteerReopen, Item: "z"}}, ok, ok); len(got) != 0 {
		t.Errorf("the mark of an item that left the plan stays: %+v", got)
	}
}

// TestSkipsInARowKeepTheirOrder: two items skipped one after the other
// show, and come back when reopened (in either order), where they were.
func TestSkipsInARowKeepTheirOrder(t *testing.T) {
	plan := []todo.Item{{Content: "a", Status: todo.Completed}, {Content: "b", Status: todo.Pending}, {Content: "c", Status: todo.Pending}, {Content: "d", Status: todo.Pending}}
	p, m, err := applySteer(plan, nil, Steer{Action: SteerSkip, Item: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if p, m, err = applySteer(p, m, Steer{Action: SteerSkip, Item: "c"}); err != nil {
		t.Fatal(err)
	}
	order := func(items []todo.Item) string {
		var out []string
		for _, it := range items {
			out = append(out, it.Content)
		}
		return strings.Join(out, "")
	}
	if got := order(ShownItems(p, m)); got != "abcd" {
		t.Errorf("shown after two skips: %s, want abcd", got)
	}
	for _, first := range []string{"b", "c"} {
		second := map[string]string{"b": "c", "c": "b"}[first]
		p1, m1, err := applySteer(p, m, Steer{Action: SteerReopen, Item: first})
		if err != nil {
			t.Fatal(err)
		}
		if got := order(ShownItems(p1, m1)); got != "abcd" {
			t.Errorf("shown after reopening %s: %s, want abcd", first, got)
		}
		p2, _, err := applySteer(p1, m1, Steer{Action: SteerReopen, Item: second})
		if err != nil {
			t.Fatal(err)
		}
		if got := order(p2); got != "abcd" {
			t.Errorf("the plan after reopening %s then %s: %s, want abcd", first, second, got)
		}
	}
}

// TestNewTaskDropsMarks: a skip belongs to the plan it was made on: a
// new task's snapshot (sharing no item) is not held to it and drops it.
func TestNewTaskDropsMarks(t *testing.T) {
	old := []todo.Item{{Content: "a", Status: todo.Completed}}
	marks := []Mark{{Action: SteerSkip, Item: "Run tests", By: "bo"}, {Action: SteerAdd, Item: "x", Owed: true}}
	next := []todo.Item{{Content: "Fix the bug", Status: todo.InProgress}, {Content: "Run tests", Status: todo.Pending}}
	if !newTask(old, next) {
		t.Fatal("a snapshot sharing no item is not a new task")
	}
	if got := settleMarks(marks, old, next); got != nil {
		t.Errorf("marks after a new task: %+v", got)
	}
	if newTask(old, append(next, old[0])) || newTask(nil, next) {
		t.Error("a snapshot sharing an item, or a first plan, is a new task")
	}
	env := &ToolEnv{Plan: todo.Restore(old, 1, 0), Marks: marks}
	if _, err := TodoWrite().Run(context.Background(), env, todo.Encode(next)); err != nil {
		t.Errorf("a new task's snapshot refused by the old plan's marks: %v", err)
	}
}

// TestSteersAfterAMessageWaitForIt: the inbox's changes apply in order
// with its messages: a change queued after a message waits for it.
func TestSteersAfterAMessageWaitForIt(t *testing.T) {
	st := &Steer{Action: SteerSkip, Item: "b"}
	r := &Runner{}
	rest, err := r.steer(context.Background(), &session{}, []Inbound{{ID: 1, Text: "m1"}, {ID: 2, Steer: st}, {ID: 3, Text: "m2"}})
	if err != nil || len(rest) != 1 || rest[0].ID != 1 {
		t.Errorf("rest %+v, %v; want m1 alone", rest, err)
	}
}
