package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/todo"
)

var longPlanItems = []todo.Item{{Content: "answer each question", Status: todo.InProgress}, {Content: "keep notes", Status: todo.Pending}}

// TestLongThreadThroughTheConsole runs 26 turns of about 3,000 characters
// each through the real binary against a fake model whose context window
// is 8,000 tokens (it answers longer requests with OpenAI's
// context_length_exceeded error), then kills the bot right after a summary
// was stored, restarts it, resets the thread and checks the next request
// starts fresh.
func TestLongThreadThroughTheConsole(t *testing.T) {
	t.Parallel()
	var summaries atomic.Int32
	fake := &fakeopenai.Server{ContextWindow: 8000}
	fake.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		if strings.Contains(req.Messages[0].Content, "running summary") {
			summaries.Add(1)
			return fakeopenai.Reply{Content: "A long series of questions, each answered."}
		}
		last := req.Messages[len(req.Messages)-1]
		if last.Role == openai.ChatMessageRoleUser && strings.Contains(last.Content, "question 01 ") {
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: todo.ToolName, Arguments: todo.Encode(longPlanItems)}}}
		}
		return fakeopenai.Reply{Content: "answered " + strings.Repeat("with detail ", 40)}
	}
	ms := httptest.NewServer(fake)
	defer ms.Close()
	env := map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "long.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"OPENAI_BASE_URL": ms.URL + "/v1", "OPENAI_API_KEY": "sk-test", "PINPLAN_CONTEXT_TOKENS": "8000"}
	p := startBot(t, env, botBinary)
	ctx := context.Background()
	question := func(i int) string {
		return fmt.Sprintf("question %02d %s", i, strings.Repeat("lorem ipsum dolor sit amet ", 120))[:3000]
	}
	answers := func(id string) int {
		var view threadView
		getJSON(t, p.URL+"/api/threads/"+id, &view)
		n := 0
		for _, m := range view.Messages {
			if m.Role == "assistant" && strings.HasPrefix(m.Text, "answered") {
				n++
			}
		}
		return n
	}
	out, err := postJSON(ctx, p.URL+"/api/threads", map[string]string{"text": question(1)})
	if err != nil {
		t.Fatal(err)
	}
	id := out["id"].(string)
	waitFor(t, 30*time.Second, "the first answer", func() bool { return answers(id) == 1 })
	killed, want := false, 1
	for i := 2; i <= 26; i++ {
		if _, err := postJSON(ctx, p.URL+"/api/threads/"+id+"/messages", map[string]string{"text": question(i)}); err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		want++
		waitFor(t, 30*time.Second, fmt.Sprintf("answer %d", want), func() bool { return answers(id) == want })
		if !killed && summaries.Load() > 0 {
			// The summary is stored before the request that used it.
			before := summaries.Load()
			p.kill()
			killed = true
			p = startBot(t, env, botBinary)
			if _, err := postJSON(ctx, p.URL+"/api/threads/"+id+"/messages", map[string]string{"text": "short follow-up"}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 30*time.Second, "the follow-up after the restart", func() bool {
				reqs := fake.Requests()
				last := reqs[len(reqs)-1].Messages
				return strings.Contains(last[len(last)-1].Content, "short follow-up")
			})
			if summaries.Load() != before {
				t.Errorf("%d summary calls after the restart, want still %d", summaries.Load(), before)
			}
			want++
			waitFor(t, 30*time.Second, "its answer", func() bool { return answers(id) == want })
		}
	}
	if !killed {
		t.Fatal("26 turns never needed a summary: the window is not exercised")
	}
	if n := fake.Rejected(); n != 0 {
		t.Errorf("%d requests exceeded the model's window", n)
	}
	reqs := fake.Requests()
	var last strings.Builder
	for _, m := range reqs[len(reqs)-1].Messages {
		last.WriteString(m.Content + "\n")
	}
	if !strings.Contains(last.String(), todo.NewSnapshot(longPlanItems).String()) || !strings.Contains(last.String(), strings.TrimSpace(question(26))) {
		var roles []string
		for _, m := range reqs[len(reqs)-1].Messages {
			roles = append(roles, fmt.Sprintf("%s:%.60q", m.Role, m.Content))
		}
		t.Errorf("the last request lacks the plan snapshot or the newest message: %v", roles)
	}
	// reset: the next request carries none of the earlier history.
	if _, err := postJSON(ctx, p.URL+"/api/threads/"+id+"/messages", map[string]string{"text": "reset"}); err != nil {
		t.Fatal(err)
	}
	if _, err := postJSON(ctx, p.URL+"/api/threads/"+id+"/messages", map[string]string{"text": "a fresh start"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the request after reset", func() bool {
		reqs := fake.Requests()
		msgs := reqs[len(reqs)-1].Messages
		return strings.Contains(msgs[len(msgs)-1].Content, "a fresh start")
	})
	reqs = fake.Requests()
	for _, m := range reqs[len(reqs)-1].Messages {
		if strings.Contains(m.Content, "question") || strings.Contains(m.Content, "Summary of this thread") {
			t.Errorf("the request after reset carries earlier history: %.80q", m.Content)
		}
	}
	p.stop(t)
}
