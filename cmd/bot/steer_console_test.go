package main

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// TestConsolePlanWaitsForStartAcrossAKill (DESIGN §19, through the
// binary): with PINPLAN_PLAN_APPROVAL=ask a console thread's first plan
// waits for Start with no model request after it; the wait survives a
// kill -9; after the restart a Skip made on the pinned plan and Start
// go on: the model's next request names the change, and the turn
// answers once. A Reopen of the skipped item after the turn shows at
// once, and the next turn's model reads it.
func TestConsolePlanWaitsForStartAcrossAKill(t *testing.T) {
	t.Parallel()
	fake := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case last.Role == openai.ChatMessageRoleUser && strings.HasPrefix(last.Content, "[plan change]"):
			return fakeopenai.Reply{Content: "done, without the release"}
		case last.Role == openai.ChatMessageRoleTool:
			return fakeopenai.Reply{Content: "released"}
		}
		return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: "todo_write", Arguments: `{"todos":[{"content":"Write the notes","status":"in_progress"},{"content":"Tag the release","status":"pending"}]}`}}}
	}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	env := map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "steer.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": "sk-test", "PINPLAN_PLAN_APPROVAL": "ask"}
	p := startBot(t, env, botBinary)
	ctx := context.Background()
	out, err := postJSON(ctx, p.URL+"/api/threads", map[string]string{"text": "release it"})
	if err != nil {
		t.Fatal(err)
	}
	id := out["id"].(string)
	var view struct {
		Thread struct {
			State string `json:"state"`
			Plan  *struct {
				Revision int64 `json:"revision"`
				View     struct {
					Start *struct {
						ID string `json:"id"`
					} `json:"start"`
					Items []struct {
						Controls []struct {
							ID     string `json:"id"`
							Action string `json:"action"`
						} `json:"controls"`
					} `json:"items"`
				} `json:"view"`
			} `json:"plan"`
		} `json:"thread"`
		Messages []struct {
			Role string `json:"role"`
			Text string `json:"text"`
		} `json:"messages"`
	}
	read := func(p *botProc) { getJSON(t, p.URL+"/api/threads/"+id, &view) }
	waitFor(t, 30*time.Second, "the plan waiting for Start", func() bool {
		read(p)
		return view.Thread.Plan != nil && view.Thread.Plan.View.Start != nil
	})
	time.Sleep(300 * time.Millisecond) // a model request after the plan would come now
	if n := len(fake.Requests()); n != 1 {
		t.Fatalf("%d model requests while the plan waits for Start, want 1", n)
	}
	p.kill()

	p = startBot(t, env, botBinary)
	waitFor(t, 30*time.Second, "the plan still waiting for Start after the restart", func() bool {
		read(p)
		return view.Thread.Plan != nil && view.Thread.Plan.View.Start != nil && len(view.Thread.Plan.View.Items) == 2
	})
	if n := len(fake.Requests()); n != 1 {
		t.Fatalf("%d model requests after the restart, want 1", n)
	}
	skip := ""
	for _, c := range view.Thread.Plan.View.Items[1].Controls {
		if c.Action == "skip" {
			skip = c.ID
		}
	}
	res, err := postJSON(ctx, p.URL+"/api/threads/"+id+"/click", map[string]string{"button": skip})
	if err != nil || !strings.Contains(res["private"].(string), "skipped") {
		t.Fatalf("skip: %v, %v", res, err)
	}
	waitFor(t, 30*time.Second, "the plan to show the skip", func() bool {
		read(p)
		return view.Thread.Plan != nil && view.Thread.Plan.Revision == 2
	})
	if _, err := postJSON(ctx, p.URL+"/api/threads/"+id+"/click", map[string]string{"button": view.Thread.Plan.View.Start.ID}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the answer", func() bool {
		read(p)
		return view.Thread.State == "idle" && len(view.Messages) >= 2
	})
	reqs := fake.Requests()
	if len(reqs) != 2 || !strings.Contains(reqs[1].Messages[len(reqs[1].Messages)-1].Content, `skipped "Tag the release"`) {
		t.Errorf("%d model requests; the last ends %q", len(reqs), reqs[len(reqs)-1].Messages[len(reqs[len(reqs)-1].Messages)-1].Content)
	}
	answers := 0
	for _, m := range view.Messages {
		if m.Role == "assistant" {
			answers++
		}
	}
	if answers != 1 {
		t.Errorf("%d answers, want 1: %+v", answers, view.Messages)
	}

	reopen := ""
	for _, c := range view.Thread.Plan.View.Items[1].Controls {
		if c.Action == "reopen" {
			reopen = c.ID
		}
	}
	if reopen == "" {
		t.Fatalf("no Reopen on the skipped item: %+v", view.Thread.Plan.View.Items)
	}
	if res, err := postJSON(ctx, p.URL+"/api/threads/"+id+"/click", map[string]string{"button": reopen}); err != nil || !strings.Contains(res["private"].(string), "reopened") {
		t.Fatalf("reopen: %v, %v", res, err)
	}
	waitFor(t, 30*time.Second, "the plan to show the reopen", func() bool {
		read(p)
		return view.Thread.Plan != nil && view.Thread.Plan.Revision == 3
	})
	if n := len(fake.Requests()); n != 2 {
		t.Errorf("a reopen on an idle thread made model requests: %d, want 2", n)
	}
	if _, err := postJSON(ctx, p.URL+"/api/threads/"+id+"/messages", map[string]string{"text": "go on"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the second turn's plan waiting for Start", func() bool {
		read(p)
		return view.Thread.Plan != nil && view.Thread.Plan.View.Start != nil && view.Thread.Plan.Revision == 4
	})
	reqs = fake.Requests()
	told := false
	for _, m := range reqs[2].Messages {
		if m.Role == openai.ChatMessageRoleUser && strings.Contains(m.Content, `reopened "Tag the release"`) {
			told = true
		}
	}
	if !told {
		t.Errorf("the next turn's request does not tell the model of the reopen")
	}
	if _, err := postJSON(ctx, p.URL+"/api/threads/"+id+"/click", map[string]string{"button": view.Thread.Plan.View.Start.ID}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the second answer", func() bool {
		read(p)
		n := 0
		for _, m := range view.Messages {
			if m.Role == "assistant" {
				n++
			}
		}
		return view.Thread.State == "idle" && n == 2
	})
}
