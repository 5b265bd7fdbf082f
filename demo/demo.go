// Package demo is the built-in scripted model of `bot -demo`: a
// multi-step task with plan revisions, tool rounds and an approval card,
// with no key and no model server.
package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/todo"
)

// Tools are the demo's tools: a search and a check that run at once, and a
// write that asks for approval first.
func Tools() []agent.Tool {
	obj := map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}}
	return []agent.Tool{
		{Name: "demo_search", Description: "Demo: search the team's notes.", Idempotent: true, Parameters: obj,
			Run: func(_ context.Context, _ *agent.ToolEnv, args string) (string, error) {
				return `{"results":["notes/release.md: checklist from the last release","notes/oncall.md: who to tell"]}`, nil
			}},
		{Name: "demo_check", Description: "Demo: run the checks.", Idempotent: true, Parameters: obj,
			Run: func(context.Context, *agent.ToolEnv, string) (string, error) {
				return `{"passed":12,"failed":0}`, nil
			}},
		// A write that asks first, so the console shows an approval card
		// with no key and no MCP server.
		{Name: "demo__write_note", Server: "demo", Description: "Demo: save a note for the team (asks for approval).", Ask: true,
			Parameters: map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}, "content": map[string]any{"type": "string"}}},
			Run: func(_ context.Context, _ *agent.ToolEnv, args string) (string, error) {
				var a struct{ Path string }
				json.Unmarshal([]byte(args), &a)
				return fmt.Sprintf(`{"saved":%q}`, a.Path), nil
			}},
	}
}

// Model plays a realistic multi-step task with plan revisions and tool
// rounds, through the same agent, store and plan board as a real model. It
// is stateless: the round is read from the request, so a restart resumes
// it. Delay is how long each round takes (PINPLAN_DEMO_DELAY).
type Model struct{ Delay time.Duration }

var _ agent.Model = Model{}

// Complete implements agent.Model.
func (d Model) Complete(ctx context.Context, req openai.ChatCompletionRequest) (agent.Reply, error) {
	t := time.NewTimer(d.Delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return agent.Reply{}, context.Cause(ctx)
	case <-t.C:
	}
	task, round, saved := "", 0, ""
	for _, m := range req.Messages {
		switch m.Role {
		case openai.ChatMessageRoleUser:
			if m.Content != todo.ReminderText && !strings.HasPrefix(m.Content, "Earlier messages in this thread") && !agent.IsFilesEntry(m.Content) {
				task, round, saved = m.Content, 0, ""
			}
		case openai.ChatMessageRoleAssistant:
			round++
		case openai.ChatMessageRoleTool:
			if strings.HasPrefix(m.ToolCallID, "demo_") && strings.HasSuffix(m.ToolCallID, "_demo__write_note") {
				saved = m.Content
			}
		}
	}
	subject := shorten(task, 60)
	steps := []string{"Read the request: " + subject, "Gather context from the team's notes", "Draft the result", "Check the draft and report back"}
	plan := func(done, doing int) openai.ToolCall {
		var items []todo.Item
		for i, s := range steps {
			st := todo.Pending
			if i < done {
				st = todo.Completed
			} else if i == doing {
				st = todo.InProgress
			}
			items = append(items, todo.Item{Content: s, Status: st})
		}
		args, _ := json.Marshal(map[string]any{"todos": items})
		return call(round, todo.ToolName, string(args))
	}
	var msg openai.ChatCompletionMessage
	switch round {
	case 0:
		msg.ToolCalls = []openai.ToolCall{plan(0, 0)}
	case 1:
		msg.ToolCalls = []openai.ToolCall{plan(1, 1)}
	case 2:
		msg.ToolCalls = []openai.ToolCall{call(round, "demo_search", `{"query":"release checklist"}`)}
	case 3:
		msg.ToolCalls = []openai.ToolCall{plan(2, 2)}
	case 4:
		note, _ := json.Marshal(map[string]string{"path": "notes/draft.md", "content": "Draft for: " + subject})
		msg.ToolCalls = []openai.ToolCall{call(round, "demo__write_note", string(note))}
	case 5:
		msg.ToolCalls = []openai.ToolCall{plan(3, 3), call(round, "demo_check", `{"query":"all"}`)}
	case 6:
		msg.ToolCalls = []openai.ToolCall{plan(4, -1)}
	default:
		outcome := "The draft was saved to notes/draft.md."
		if strings.Contains(saved, `"code":"denied"`) {
			outcome = "The draft was not saved: saving it was not approved."
		}
		msg.Content = fmt.Sprintf("Done: %s\n\n%s\n\nThis was the built-in demo (no model was called). Set OPENAI_API_KEY to work with a real model.", subject, outcome)
	}
	msg.Role = openai.ChatMessageRoleAssistant
	return agent.Reply{Message: msg, Usage: openai.Usage{PromptTokens: 20 * len(req.Messages), CompletionTokens: 30, TotalTokens: 20*len(req.Messages) + 30}}, nil
}

func call(round int, name, args string) openai.ToolCall {
	return openai.ToolCall{ID: "demo_" + strconv.Itoa(round) + "_" + name, Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: name, Arguments: args}}
}

// shorten cuts s to max characters, the last an ellipsis.
func shorten(s string, max int) string {
	if r := []rune(s); len(r) > max {
		return string(r[:max-1]) + "…"
	}
	return s
}
