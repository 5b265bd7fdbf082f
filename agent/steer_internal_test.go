package agent

import (
	"errors"
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
	settled := settleMarks(marks, ok)
	if len(settled) != 2 || settled[1].Owed {
		t.Errorf("settled %+v: the added item is carried now", settled)
	}
	if got := settleMarks([]Mark{{Action: SteerReopen, Item: "z"}}, ok); len(got) != 0 {
		t.Errorf("the mark of an item that left the plan stays: %+v", got)
	}
}
