package agent_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/store"
	"github.com/pinplan/pinplan/todo"
)

const plan3 = `{"todos":[{"content":"a","status":"in_progress"},{"content":"b","status":"pending"},{"content":"c","status":"pending"}]}`

// TestSteerReachesTheModelAndSticks (DESIGN §19): a person skips an item
// while the turn waits for an approval; the plan changes at once, with
// who did it, without a model request; the model reads the change, by
// name, at its next request; a snapshot that brings the skipped item
// back is refused, with the person named, and the plan keeps the skip;
// a change made on a revision a newer one replaced is refused.
func TestSteerReachesTheModelAndSticks(t *testing.T) {
	var runs atomic.Int32
	var mu sync.Mutex
	var reqs []openai.ChatCompletionRequest
	fake := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		mu.Lock()
		reqs = append(reqs, *req)
		n := len(reqs)
		mu.Unlock()
		switch n {
		case 1:
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{call("todo_write", plan3)}}
		case 2:
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{call("fs__write_file", `{"path":"notes.txt"}`)}}
		case 3: // undoes the skip
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{call("todo_write", `{"todos":[{"content":"a","status":"completed"},{"content":"b","status":"in_progress"},{"content":"c","status":"pending"}]}`)}}
		case 4:
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{call("todo_write", `{"todos":[{"content":"a","status":"completed"},{"content":"c","status":"completed"}]}`)}}
		}
		return fakeopenai.Reply{Content: "done"}
	}}
	h := newHarness(t, fake, harnessOpts{tools: []agent.Tool{writeTool(&runs)}})
	ctx := context.Background()
	const key = "web/steer"
	if err := h.runner.Submit(ctx, key, agent.Inbound{Text: "do a, b, c", Author: "ann", AuthorID: "U1"}); err != nil {
		t.Fatal(err)
	}
	h.waitKind(t, key, agent.PlanChanged)
	need := h.waitKind(t, key, agent.ApprovalNeeded)

	stale := agent.Steer{Action: agent.SteerSkip, Item: "b", Revision: 0, By: "bo", ByID: "U2"}
	var refused *agent.SteerError
	if err := h.runner.Steer(ctx, key, stale); !errors.As(err, &refused) {
		t.Fatalf("a change on revision 0 of a plan at revision 1: %v, want a SteerError", err)
	}
	if err := h.runner.Steer(ctx, key, agent.Steer{Action: agent.SteerSkip, Item: "b", Revision: 1, By: "bo", ByID: "U2"}); err != nil {
		t.Fatal(err)
	}
	if err := h.runner.Steer(ctx, key, agent.Steer{Action: agent.SteerSkip, Item: "b", Revision: 1, By: "cy", ByID: "U3"}); !errors.As(err, &refused) {
		t.Errorf("skipping an item a queued change skips already: %v, want a SteerError", err)
	}
	changed := h.waitKind(t, key, agent.PlanChanged)
	if changed.Steer == nil || changed.Steer.By != "bo" || changed.Seq == 0 {
		t.Errorf("the change's log entry: steer %+v, seq %d", changed.Steer, changed.Seq)
	}
	if got := changed.Plan.String(); got != `{"todos":[{"content":"a","status":"in_progress"},{"content":"c","status":"pending"}]}` {
		t.Errorf("the plan after the skip: %s", got)
	}
	if len(changed.Marks) != 1 || changed.Marks[0].Action != agent.SteerSkip || changed.Marks[0].Item != "b" || changed.Marks[0].After != "a" || changed.Marks[0].By != "bo" {
		t.Errorf("marks after the skip: %+v", changed.Marks)
	}
	mu.Lock()
	asked := len(reqs)
	mu.Unlock()
	if asked != 2 {
		t.Errorf("%d model requests while the turn waits, want 2", asked)
	}
	// The card is not announced again for the change (its edit would
	// spend the platform's budget): this process announced it already.
	select {
	case e := <-h.ch(key):
		if e.Kind == agent.ApprovalNeeded {
			t.Errorf("the approval announced again after a plan change: %+v", e)
		}
	case <-time.After(200 * time.Millisecond):
	}

	if _, err := h.runner.Decide(ctx, key, need.Approval.CallID, agent.Decision{Allow: true, By: "U1", ByName: "ann"}); err != nil {
		t.Fatal(err)
	}
	h.waitEnd(t, key)
	mu.Lock()
	defer mu.Unlock()
	if len(reqs) != 5 {
		t.Fatalf("%d model requests, want 5", len(reqs))
	}
	told := false
	for _, m := range reqs[2].Messages {
		if m.Role == openai.ChatMessageRoleUser && strings.Contains(m.Content, `bo skipped "b"`) {
			told = true
		}
	}
	if !told {
		t.Errorf("the request after the skip does not tell the model who skipped what:\n%+v", reqs[1].Messages)
	}
	if got := lastToolResult(t, reqs[3]); !strings.Contains(got, `bo skipped \"b\"`) || !strings.Contains(got, "invalid_arguments") {
		t.Errorf("the result of a snapshot that undoes the skip: %s", got)
	}
	cp, _, _, err := h.db.Load(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got := todo.Encode(cp.Plan); got != `{"todos":[{"content":"a","status":"completed"},{"content":"c","status":"completed"}]}` {
		t.Errorf("the plan at the end: %s", got)
	}
	if len(cp.Marks) != 1 || cp.Marks[0].Item != "b" {
		t.Errorf("marks at the end: %+v, want the skip of b kept", cp.Marks)
	}
	if runs.Load() != 1 {
		t.Errorf("the approved tool ran %d times", runs.Load())
	}
}

// TestSteerWhileIdleStartsNoTurn: a change made after the turn ended is
// applied at once, starts no turn, and is what the model reads first at
// the next turn; a reopened item is owed to its next snapshot.
func TestSteerWhileIdleStartsNoTurn(t *testing.T) {
	var mu sync.Mutex
	var reqs []openai.ChatCompletionRequest
	fake := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		mu.Lock()
		reqs = append(reqs, *req)
		n := len(reqs)
		mu.Unlock()
		switch n {
		case 1:
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{call("todo_write", `{"todos":[{"content":"a","status":"completed"},{"content":"b","status":"completed"}]}`)}}
		case 3: // leaves the reopened item out
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{call("todo_write", `{"todos":[{"content":"a","status":"completed"}]}`)}}
		case 4:
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{call("todo_write", `{"todos":[{"content":"a","status":"completed"},{"content":"b","status":"completed"},{"content":"d","status":"completed"}]}`)}}
		}
		return fakeopenai.Reply{Content: "done"}
	}}
	h := newHarness(t, fake, harnessOpts{})
	ctx := context.Background()
	const key = "web/idle"
	h.send(t, key, "do a and b")
	h.waitEnd(t, key)
	if err := h.runner.Steer(ctx, key, agent.Steer{Action: agent.SteerReopen, Item: "b", Revision: 1, By: "ann"}); err != nil {
		t.Fatal(err)
	}
	first := h.waitKind(t, key, agent.PlanChanged)
	if first.Revision != 2 {
		t.Errorf("the reopen's revision: %d, want 2 (a revision of its own)", first.Revision)
	}
	var stale *agent.SteerError
	if err := h.runner.Steer(ctx, key, agent.Steer{Action: agent.SteerAdd, Item: "b", Text: "d", Revision: 1, By: "bo"}); !errors.As(err, &stale) {
		t.Errorf("a change on the revision the reopen replaced: %v, want a SteerError", err)
	}
	if err := h.runner.Steer(ctx, key, agent.Steer{Action: agent.SteerAdd, Item: "b", Text: "  d\u200b ", Revision: 2, By: "ann"}); err != nil {
		t.Fatal(err)
	}
	last := h.waitKind(t, key, agent.PlanChanged)
	if got := last.Plan.String(); got != `{"todos":[{"content":"a","status":"completed"},{"content":"b","status":"pending"},{"content":"d","status":"pending"}]}` {
		t.Errorf("the plan after reopen and add: %s", got)
	}
	plans, err := h.db.Plans(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) != 3 || plans[0].Change != nil || plans[1].Change == nil || plans[1].Change.Action != agent.SteerReopen || plans[1].Change.By != "ann" ||
		plans[2].Revision != 3 || plans[2].Change == nil || plans[2].Change.Action != agent.SteerAdd {
		t.Errorf("the plan's history: %+v, want the agent's revision and the two changes with who made them", plans)
	}
	mu.Lock()
	n := len(reqs)
	mu.Unlock()
	if n != 2 {
		t.Fatalf("%d model requests after the changes, want 2 (no turn started)", n)
	}
	h.send(t, key, "go on")
	h.waitEnd(t, key)
	mu.Lock()
	defer mu.Unlock()
	if got := lastToolResult(t, reqs[3]); !strings.Contains(got, `ann reopened \"b\"`) {
		t.Errorf("a snapshot without the reopened item: %s", got)
	}
	var users []string
	for _, m := range reqs[2].Messages {
		if m.Role == openai.ChatMessageRoleUser {
			users = append(users, m.Content)
		}
	}
	if len(users) < 3 || !strings.Contains(users[len(users)-3], `ann reopened "b"`) || !strings.Contains(users[len(users)-2], `ann added "d"`) || users[len(users)-1] != "go on" {
		t.Errorf("the next turn's user messages end %q", users)
	}
}

// TestPlanWaitsForStart (DESIGN §19, PINPLAN_PLAN_APPROVAL=ask): a turn's
// first plan waits for Start with no model request after it; a change
// made while it waits reaches the model after Start; a Stop or the
// deadline ends the turn, stopped, with no further request; the turn's
// later plans do not wait again.
func TestPlanWaitsForStart(t *testing.T) {
	script := func(reqs *[]openai.ChatCompletionRequest, mu *sync.Mutex) *fakeopenai.Server {
		return &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
			mu.Lock()
			*reqs = append(*reqs, *req)
			n := len(*reqs)
			mu.Unlock()
			switch n {
			case 1:
				return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{call("todo_write", plan3)}}
			case 2:
				return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{call("todo_write", `{"todos":[{"content":"a","status":"completed"},{"content":"c","status":"completed"}]}`)}}
			}
			return fakeopenai.Reply{Content: "done"}
		}}
	}
	ctx := context.Background()
	count := func(mu *sync.Mutex, reqs *[]openai.ChatCompletionRequest) int {
		mu.Lock()
		defer mu.Unlock()
		return len(*reqs)
	}

	t.Run("start", func(t *testing.T) {
		var mu sync.Mutex
		var reqs []openai.ChatCompletionRequest
		h := newHarness(t, script(&reqs, &mu), harnessOpts{planApproval: true})
		const key = "web/start"
		h.send(t, key, "do a, b, c")
		need := h.waitKind(t, key, agent.ApprovalNeeded)
		if need.Approval == nil || !need.Approval.Plan || need.Approval.CallID != agent.PlanCallID(1) || need.Plan.Len() != 3 {
			t.Fatalf("the plan's wait: %+v, plan %s", need.Approval, need.Plan)
		}
		if err := h.runner.Steer(ctx, key, agent.Steer{Action: agent.SteerSkip, Item: "b", Revision: 1, By: "bo"}); err != nil {
			t.Fatal(err)
		}
		h.waitKind(t, key, agent.PlanChanged)
		if n := count(&mu, &reqs); n != 1 {
			t.Fatalf("%d model requests before Start, want 1", n)
		}
		if _, err := h.runner.Decide(ctx, key, need.Approval.CallID, agent.Decision{Allow: true, By: "U1", ByName: "ann"}); err != nil {
			t.Fatal(err)
		}
		var ended agent.Event
		for _, e := range h.waitEnd(t, key) {
			if e.Kind == agent.ApprovalNeeded && e.Seq != 0 { // Seq 0: the wait announced again after the change
				t.Errorf("the turn's second plan waited again")
			}
			ended = e
		}
		if ended.Outcome != agent.Done || count(&mu, &reqs) != 3 {
			t.Errorf("after Start: %s with %d requests, want done with 3", ended.Outcome, count(&mu, &reqs))
		}
		mu.Lock()
		defer mu.Unlock()
		if !strings.Contains(reqs[1].Messages[len(reqs[1].Messages)-1].Content, `bo skipped "b"`) {
			t.Errorf("the request after Start ends %+v, want the change", reqs[1].Messages[len(reqs[1].Messages)-1])
		}
	})

	t.Run("stop", func(t *testing.T) {
		var mu sync.Mutex
		var reqs []openai.ChatCompletionRequest
		h := newHarness(t, script(&reqs, &mu), harnessOpts{planApproval: true})
		const key = "web/stop"
		h.send(t, key, "do a, b, c")
		h.waitKind(t, key, agent.ApprovalNeeded)
		if !h.runner.Stop(key, "bo") {
			t.Fatal("Stop found nothing to stop while the plan waits")
		}
		evs := h.waitEnd(t, key)
		if e := evs[len(evs)-1]; e.Outcome != agent.Stopped || e.StoppedBy != "bo" {
			t.Errorf("the end: %s by %q, want stopped by bo", e.Outcome, e.StoppedBy)
		}
		if n := count(&mu, &reqs); n != 1 {
			t.Errorf("%d model requests, want 1", n)
		}
	})

	t.Run("deadline", func(t *testing.T) {
		var mu sync.Mutex
		var reqs []openai.ChatCompletionRequest
		h := newHarness(t, script(&reqs, &mu), harnessOpts{planApproval: true, approvalTimeout: 300 * time.Millisecond})
		const key = "web/late"
		h.send(t, key, "do a, b, c")
		evs := h.waitEnd(t, key)
		if e := evs[len(evs)-1]; e.Outcome != agent.Stopped || !strings.Contains(e.Text, "Start") {
			t.Errorf("the end: %s %q, want stopped, saying nobody pressed Start", e.Outcome, e.Text)
		}
		if n := count(&mu, &reqs); n != 1 {
			t.Errorf("%d model requests, want 1", n)
		}
	})
}

// commitLog is a store that records the rounds it commits.
type commitLog struct {
	*store.DB
	mu     sync.Mutex
	rounds []agent.Round
}

func (c *commitLog) Commit(ctx context.Context, r *agent.Round) error {
	c.mu.Lock()
	c.rounds = append(c.rounds, *r)
	c.mu.Unlock()
	return c.DB.Commit(ctx, r)
}

// TestPlanAndItsWaitInOneCommit: the round that writes a turn's first
// plan also writes its wait for Start, so no kill can come between them
// and let a restarted turn go on without Start; an empty plan, which no
// message shows, does not wait.
func TestPlanAndItsWaitInOneCommit(t *testing.T) {
	for _, tt := range []struct {
		name string
		plan string
		wait bool
	}{
		{"a plan", plan3, true},
		{"an empty plan", `{"todos":[]}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
				if req.Messages[len(req.Messages)-1].Role == openai.ChatMessageRoleTool {
					return fakeopenai.Reply{Content: "done"}
				}
				return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{call("todo_write", tt.plan)}}
			}}
			db, err := store.Open(filepath.Join(t.TempDir(), "pinplan.db"), store.Options{BatchDelay: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			cl := &commitLog{DB: db}
			h := newHarness(t, fake, harnessOpts{planApproval: true, db: db})
			r, err := agent.NewRunner(agent.Options{Model: h.model, Store: cl, PlanApproval: true, Events: publishTo(func(e agent.Event) { h.ch(e.Session) <- e })})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(r.Close)
			if err := r.Submit(context.Background(), "web/one", agent.Inbound{Text: "go"}); err != nil {
				t.Fatal(err)
			}
			if tt.wait {
				h.waitKind(t, "web/one", agent.ApprovalNeeded)
			} else {
				h.waitEnd(t, "web/one")
			}
			cl.mu.Lock()
			defer cl.mu.Unlock()
			for _, rd := range cl.rounds {
				if len(rd.Plans) == 0 {
					continue
				}
				waits := rd.Checkpoint.State == agent.Waiting && rd.Checkpoint.Waiting != nil && rd.Checkpoint.Waiting.Plan
				if waits != tt.wait {
					t.Errorf("the round that wrote the plan: state %s, waiting %+v; want a wait: %v", rd.Checkpoint.State, rd.Checkpoint.Waiting, tt.wait)
				}
				return
			}
			t.Error("no round wrote the plan")
		})
	}
}
