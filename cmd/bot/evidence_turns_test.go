package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/todo"
)

// TestEvidenceOfAnEarlierTurnThroughTheBinary: evidence is per turn
// (DESIGN §15). The first turn calls current_time while "Search the
// notes" is in progress, again while "Draft the result" is, and once more
// after both were ticked. A follow-up in the same thread writes a plan
// with the same texts, calls current_time once while "Search the notes"
// is in progress, ticks it and leaves "Draft the result" pending. The
// plan message then shows one line, `↳ current_time` under "Search the
// notes" (no `×2`, no `×3`), nothing under the pending item, and the
// footer counts the follow-up's one call.
func TestEvidenceOfAnEarlierTurnThroughTheBinary(t *testing.T) {
	t.Parallel()
	P, I, C := todo.Pending, todo.InProgress, todo.Completed
	plan := func(search, draft todo.Status) fakeopenai.Call {
		return fakeopenai.Call{Name: todo.ToolName, Arguments: todo.Encode([]todo.Item{
			{Content: "Search the notes", Status: search}, {Content: "Draft the result", Status: draft}})}
	}
	clock := fakeopenai.Call{Name: "current_time", Arguments: `{}`}
	replies := []fakeopenai.Reply{
		// The first turn.
		{ToolCalls: []fakeopenai.Call{plan(I, P)}},
		{ToolCalls: []fakeopenai.Call{clock}},
		{ToolCalls: []fakeopenai.Call{plan(C, I)}},
		{ToolCalls: []fakeopenai.Call{clock}},
		{ToolCalls: []fakeopenai.Call{plan(C, C)}},
		{ToolCalls: []fakeopenai.Call{clock}}, // with every item ticked
		{Content: "first task done"},
		// The follow-up.
		{ToolCalls: []fakeopenai.Call{plan(I, P)}},
		{ToolCalls: []fakeopenai.Call{clock}},
		{ToolCalls: []fakeopenai.Call{plan(C, P)}},
		{Content: "follow-up done"},
	}
	r := newSlackRig(t, 1, 0, true)
	r.model.Respond = fakeopenai.Script(func(string) []fakeopenai.Reply { return replies })
	p := r.start(t)
	defer p.stop(t)
	thread := "1700040000.000100"
	id := "slack~T1~C1~" + thread
	if _, err := r.slack.Push("EvT1", mention("C1", thread, "search and draft")); err != nil {
		t.Fatal(err)
	}
	waitReply(t, r.slack, "C1", thread, "first task done")
	var revs []agent.PlanRevision
	getJSON(t, p.URL+"/api/threads/"+id+"/plans", &revs)
	if len(revs) != 3 || revs[2].Evidence["Draft the result"].Count() != 1 {
		t.Fatalf("the first turn: %d revisions, the last %+v; want 3 with a call for \"Draft the result\"", len(revs), revs[len(revs)-1].Evidence)
	}

	followUp := map[string]any{"type": "message", "channel_type": "channel", "user": "U1", "text": "now the follow-up",
		"ts": "1700040001.000100", "thread_ts": thread, "channel": "C1"}
	if _, err := r.slack.Push("EvT2", followUp); err != nil {
		t.Fatal(err)
	}
	waitReply(t, r.slack, "C1", thread, "follow-up done")

	// The stored revisions: the follow-up's count only its own call.
	getJSON(t, p.URL+"/api/threads/"+id+"/plans", &revs)
	if len(revs) != 5 {
		t.Fatalf("%d plan revisions, want 5", len(revs))
	}
	for _, rev := range revs[3:] {
		if n := rev.Evidence["Draft the result"].Count(); n != 0 {
			t.Errorf("revision %d: the pending \"Draft the result\" has %d calls of the first turn, want none", rev.Revision, n)
		}
	}
	if n := revs[3].Evidence["Search the notes"].Count(); n != 0 {
		t.Errorf("revision 4, the follow-up's first: \"Search the notes\" has %d calls, want none yet", n)
	}
	if n := revs[4].Evidence["Search the notes"].Count(); n != 1 {
		t.Errorf("revision 5: \"Search the notes\" counts %d calls, want the follow-up's 1", n)
	}

	// The console's footer counts the follow-up's one call.
	var view struct {
		Thread struct {
			Plan struct{ Revision, Calls int } `json:"plan"`
		} `json:"thread"`
	}
	shown := func() bool {
		resp, err := http.Get(p.URL + "/api/threads/" + id)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&view)
		return view.Thread.Plan.Revision == 5
	}
	deadline := time.Now().Add(10 * time.Second)
	for !shown() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if view.Thread.Plan.Revision != 5 || view.Thread.Plan.Calls != 1 {
		t.Errorf("the console's plan: revision %d, %d calls; want revision 5 and 1 call", view.Thread.Plan.Revision, view.Thread.Plan.Calls)
	}

	// The plan message, at its final state: one evidence line.
	var blocks string
	waitFor(t, 20*time.Second, "the plan message's final state at revision 5", func() bool {
		for _, m := range planMessages(r.slack, "C1") {
			if f := footerRE.FindStringSubmatch(m.Blocks); m.ThreadTS == thread && f != nil && f[1] == "5" && !strings.HasPrefix(strings.TrimSpace(f[2]), "working") {
				blocks = m.Blocks
				return true
			}
		}
		return false
	})
	if n := strings.Count(blocks, "↳"); n != 1 || !strings.Contains(blocks, "↳ current_time") || strings.Contains(blocks, "×") {
		t.Errorf("the plan message shows %d evidence lines, want one `↳ current_time` without a count:\n%s", n, blocks)
	}
}
