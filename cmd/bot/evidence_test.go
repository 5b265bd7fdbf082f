package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/todo"
)

// evidenceScript plays DESIGN §15's example with the reference filesystem
// server: two reads while item 1 is in progress, item 2 ticked with
// nothing done for it, a write (denied) while item 3 is in progress, item
// 4 ticked with nothing, then an answer. It works from the number of tool
// results since the task's message, so a resumed turn carries on.
func evidenceScript(dir string) func(*openai.ChatCompletionRequest) fakeopenai.Reply {
	plan := func(statuses ...todo.Status) fakeopenai.Call {
		var it []todo.Item
		for i, s := range statuses {
			it = append(it, todo.Item{Content: fmt.Sprintf("item %d", i+1), Status: s})
		}
		return fakeopenai.Call{Name: todo.ToolName, Arguments: todo.Encode(it)}
	}
	P, I, C := todo.Pending, todo.InProgress, todo.Completed
	read := fakeopenai.Call{Name: "fs__read_text_file", Arguments: fmt.Sprintf(`{"path":%q}`, filepath.Join(dir, "notes.txt"))}
	write := fakeopenai.Call{Name: "fs__write_file", Arguments: fmt.Sprintf(`{"path":%q,"content":"x"}`, filepath.Join(dir, "out.txt"))}
	steps := []fakeopenai.Call{plan(I, P, P, P), read, read, plan(C, C, I, P), write, plan(C, C, C, C)}
	return func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		results := 0
		for _, m := range req.Messages {
			switch {
			case m.Role == openai.ChatMessageRoleUser && strings.Contains(m.Content, "gather evidence"):
				results = 0
			case m.Role == openai.ChatMessageRoleTool:
				results++
			}
		}
		if results < len(steps) {
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{steps[results]}}
		}
		return fakeopenai.Reply{Content: "evidence gathered"}
	}
}

// TestEvidenceThroughTheBinary: the plan shows what was done for each
// item (DESIGN §15): `×2` under item 1, nothing under item 2 (flagged), a
// denied write under item 3, nothing under item 4 (flagged). The
// todo_write results stay the canonical snapshot, and a kill -9 while the
// turn waits on the card keeps the evidence.
func TestEvidenceThroughTheBinary(t *testing.T) {
	t.Parallel()
	r := newToolRig(t, true, nil)
	r.model.Respond = evidenceScript(r.dir)
	p := r.start(t)
	thread := "1700030000.000100"
	if _, err := r.slack.Push("EvE", mention("C1", thread, "gather evidence")); err != nil {
		t.Fatal(err)
	}
	card, _ := waitCard(t, r.slack, thread, "fs__write_file", "deny")
	p.kill() // mid-turn, waiting on the card, after the reads
	p = r.start(t)
	defer p.stop(t)
	_, deny := waitCard(t, r.slack, thread, "fs__write_file", "deny")
	r.press(t, "U1", thread, card.TS, deny)
	waitReply(t, r.slack, "C1", thread, "evidence gathered")

	// The stored revisions carry the evidence, through the restart.
	var revs []agent.PlanRevision
	getJSON(t, p.URL+"/api/threads/slack~T1~C1~"+thread+"/plans", &revs)
	if len(revs) != 3 {
		t.Fatalf("%d plan revisions, want 3", len(revs))
	}
	last := revs[len(revs)-1].Evidence
	reads, writes := last["item 1"], last["item 3"]
	if reads.Count() != 2 || reads.Calls[0].Tool != "fs__read_text_file" || reads.Calls[0].Outcome != agent.OutcomeOK || reads.Calls[0].Server != "fs" {
		t.Errorf("item 1's evidence: %+v, want the two reads", reads)
	}
	if writes.Count() != 1 || writes.Calls[0].Outcome != agent.OutcomeDenied || writes.Calls[0].Approver != "ann" {
		t.Errorf("item 3's evidence: %+v, want the write denied by ann", writes)
	}
	if last["item 2"].Count() != 0 || last["item 4"].Count() != 0 {
		t.Errorf("items 2 and 4 have evidence: %+v", last)
	}
	if !strings.Contains(reads.Calls[0].Args, "notes.txt") {
		t.Errorf("the read's arguments: %q", reads.Calls[0].Args)
	}
	if r2 := revs[1].Evidence["item 1"]; r2.Count() != 2 {
		t.Errorf("revision 2 kept %d calls for item 1, want 2", r2.Count())
	}

	// The model saw only the canonical snapshot, never the evidence.
	for _, req := range r.model.Requests() {
		for i, m := range req.Messages {
			if m.Role != openai.ChatMessageRoleTool || i == 0 {
				continue
			}
			prev := req.Messages[i-1]
			for _, tc := range prev.ToolCalls {
				if tc.ID == m.ToolCallID && tc.Function.Name == todo.ToolName {
					items, err := todo.Parse(tc.Function.Arguments)
					if err != nil || m.Content != todo.Encode(items) {
						t.Fatalf("a todo_write result is not the canonical snapshot: %s", m.Content)
					}
				}
			}
			if strings.Contains(m.Content, "↳") || strings.Contains(m.Content, `"evidence"`) {
				t.Fatalf("evidence reached the model: %s", m.Content)
			}
		}
	}

	// The console lists the plan as its message shows it, edited after
	// the answer went out: wait for the last edit.
	var view struct {
		Thread struct {
			Plan struct {
				Calls, Approvals int
			} `json:"plan"`
		} `json:"thread"`
	}
	counted := func() bool {
		resp, err := http.Get(p.URL + "/api/threads/slack~T1~C1~" + thread)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&view)
		return view.Thread.Plan.Calls == 3 && view.Thread.Plan.Approvals == 1
	}
	deadline := time.Now().Add(10 * time.Second)
	for !counted() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if view.Thread.Plan.Calls != 3 || view.Thread.Plan.Approvals != 1 {
		t.Errorf("the plan counts %d calls and %d approvals, want 3 and 1", view.Thread.Plan.Calls, view.Thread.Plan.Approvals)
	}
	// The plan message shows the lines.
	waitFor(t, 20*time.Second, "the evidence lines on the plan message", func() bool {
		for _, m := range planMessages(r.slack, "C1") {
			if m.ThreadTS == thread {
				b := m.Blocks
				return strings.Contains(b, "fs__read_text_file ×2") && strings.Contains(b, "fs__write_file (denied)") && strings.Count(b, "no tool activity") == 2
			}
		}
		return false
	})
}
