package main

import (
	"strings"
	"testing"
	"time"
)

// TestSlackStartAfterTheOwnerDies (DESIGN §19 with §14): with two
// replicas on etcd and PINPLAN_PLAN_APPROVAL=ask, the plan waits for
// Start; the replica that owns the session is killed (-9); Start pressed
// on the message reaches the other one, which takes the session once the
// dead one's lease ends and goes on with the turn: one answer, the plan
// done on the same message.
func TestSlackStartAfterTheOwnerDies(t *testing.T) {
	t.Parallel()
	r := newReplicaRig(t, 2)
	r.env["PINPLAN_PLAN_APPROVAL"] = "ask"
	ps := []*botProc{r.start(t, 0), r.start(t, 1)}
	thread := "1700000000.000900"
	if _, err := r.slack.Push("EvOwner", mention("C1", thread, "task C1")); err != nil {
		t.Fatal(err)
	}
	plan, start := slackPlanWaiting(t, r.slack, thread)
	key := "slack/T1/C1/" + thread
	owner := -1
	waitFor(t, 10*time.Second, "an owner", func() bool { owner = ownerOf(ps, key); return owner >= 0 })
	asked := len(r.model.Requests())
	ps[owner].kill()
	survivor := ps[1-owner]
	slackPress(t, r.slack, "U1", plan.TS, start)
	waitFor(t, replicaTTL+60*time.Second, "the answer from the surviving replica", func() bool { return len(answers(r.slack, "C1")) >= 1 })
	if ownerOf([]*botProc{survivor}, key) != 0 {
		t.Errorf("the answer came, but the survivor never took the session\n%s", stderrs(survivor))
	}
	waitFor(t, 30*time.Second, "the plan done on its message", func() bool {
		m := slackPlanMessage(t, r.slack, plan.TS)
		return strings.Contains(m.Blocks, "· done") && slackStartButton(m) == ""
	})
	if n := len(answers(r.slack, "C1")); n != 1 {
		t.Errorf("%d answers, want 1", n)
	}
	if n := len(planMessages(r.slack, "C1")); n != 1 {
		t.Errorf("%d plan messages, want the one", n)
	}
	if asked != 1 {
		t.Errorf("%d model requests before Start, want 1", asked)
	}
}
