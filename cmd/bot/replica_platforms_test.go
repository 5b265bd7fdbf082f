package main

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConsoleOnlyReplicaLeavesSlackThreads: two Slack replicas and a
// third on the same prefix without Slack tokens (a console-only
// deployment, or a rolling deploy missing a secret). kill -9 of both
// Slack replicas mid-turn: the third never takes the Slack thread, though
// it sees it orphaned and runs a console turn of its own after that; a
// Slack replica started again takes the thread and its answer reaches
// Slack on the same plan message. /readyz says which platforms each runs.
func TestConsoleOnlyReplicaLeavesSlackThreads(t *testing.T) {
	t.Parallel()
	r := newReplicaRig(t, 4)
	ps := []*botProc{r.start(t, 0), r.start(t, 1)}
	env := map[string]string{"PINPLAN_REPLICA_ID": "r2", "PINPLAN_DB": filepath.Join(t.TempDir(), "unused.db")}
	for k, v := range r.env {
		if !strings.HasPrefix(k, "SLACK_") {
			env[k] = v
		}
	}
	console := startBot(t, env, botBinary)
	all := append([]*botProc{console}, ps...)
	if _, body := httpGet(t, console.URL+"/readyz"); !strings.Contains(body, "replica r2: platforms web\n") {
		t.Errorf("the console-only replica's /readyz:\n%s\nwant it to say it runs the console only", body)
	}
	if _, body := httpGet(t, ps[0].URL+"/readyz"); !strings.Contains(body, "replica r0: platforms slack, web\n") {
		t.Errorf("a Slack replica's /readyz:\n%s\nwant it to say it runs Slack and the console", body)
	}

	if _, err := r.slack.Push("Ev1", mention("C1", "1700000000.000100", "task C1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the plan message", func() bool { return len(planMessages(r.slack, "C1")) == 1 })
	key := "slack/T1/C1/1700000000.000100"
	owner := -1
	waitFor(t, 10*time.Second, "an owner", func() bool { owner = ownerOf(ps, key); return owner >= 0 })
	// Mid-turn: the owner waits for the model when both die.
	gate := make(chan struct{})
	r.mu.Lock()
	r.gate = gate
	r.mu.Unlock()
	n := len(r.model.Requests())
	waitFor(t, 30*time.Second, "a model request held at the gate", func() bool { return len(r.model.Requests()) > n })
	ps[0].kill()
	ps[1].kill()
	r.mu.Lock()
	r.gate = nil
	r.mu.Unlock()
	close(gate)

	cli := r.etcd.Client(t)
	ownerKey := "/pinplan/owners/" + url.PathEscape(key)
	holder := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, ownerKey)
		if err != nil || len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	dead := fmt.Sprint("r", owner)
	waitFor(t, replicaTTL+10*time.Second, "the dead owner's lease to end", func() bool { return holder() != dead })
	// The console replica heard the owner key go; a console turn it runs
	// to the end after that shows it had its chance to take the thread.
	out, err := postJSON(context.Background(), console.URL+"/api/threads", map[string]string{"text": "console task"})
	if err != nil {
		t.Fatal(err)
	}
	var view threadView
	waitFor(t, 60*time.Second, "the console turn to finish", func() bool {
		getJSON(t, console.URL+"/api/threads/"+out["id"].(string), &view)
		return view.Thread.State == "idle" && len(view.Messages) >= 2
	})
	if got := holder(); got != "" || ownerOf([]*botProc{console}, key) >= 0 {
		t.Errorf("the console-only replica took the Slack thread (owner key: %q)\n%s", got, stderrs(all...))
	}
	if strings.Contains(console.stderr.String(), "without a platform") {
		t.Errorf("the console-only replica handled the Slack thread's events:\n%s", console.stderr)
	}

	again := r.start(t, owner)
	waitFor(t, 60*time.Second, "the answer in Slack from the Slack replica started again", func() bool { return len(answers(r.slack, "C1")) >= 1 })
	if ownerOf([]*botProc{again}, key) != 0 {
		t.Errorf("the answer came, but not from the restarted Slack replica\n%s", stderrs(console, again))
	}
	waitFor(t, 30*time.Second, "the plan to show done", func() bool {
		plans := planMessages(r.slack, "C1")
		return len(plans) == 1 && planDone(plans[0].Blocks)
	})
	if n := len(answers(r.slack, "C1")); n != 1 {
		t.Errorf("%d answers, want 1", n)
	}
}
