package main

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/todo"
)

// dialectScript is the model of TestDialects. A thread's first message
// gets a plan, a read, the plan's next revision and an answer; "write
// <text>" gets a write (which asks for approval) and an answer. Every
// reply comes with reasoning, which the thread must never show.
func dialectScript(dir string) func(*openai.ChatCompletionRequest) fakeopenai.Reply {
	return func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		last, n := "", 0
		for _, m := range req.Messages {
			switch m.Role {
			case openai.ChatMessageRoleUser:
				last, n = m.Content, 0
			case openai.ChatMessageRoleAssistant:
				n++
			}
		}
		var replies []fakeopenai.Reply
		if i := strings.Index(last, "write "); i >= 0 {
			replies = []fakeopenai.Reply{
				{ToolCalls: []fakeopenai.Call{{Name: "fs__write_file", Arguments: fmt.Sprintf(`{"path":%q,"content":%q}`, filepath.Join(dir, "out.txt"), strings.TrimSpace(last[i+6:]))}}},
				{Content: "Wrote it to out.txt."},
			}
		} else {
			plan := func(done bool) fakeopenai.Call {
				items := []todo.Item{{Content: "read the notes", Status: todo.InProgress}, {Content: "answer", Status: todo.Pending}}
				if done {
					items[0].Status, items[1].Status = todo.Completed, todo.InProgress
				}
				return fakeopenai.Call{Name: todo.ToolName, Arguments: todo.Encode(items)}
			}
			replies = []fakeopenai.Reply{
				{ToolCalls: []fakeopenai.Call{plan(false)}},
				{ToolCalls: []fakeopenai.Call{{Name: "fs__read_text_file", Arguments: fmt.Sprintf(`{"path":%q}`, filepath.Join(dir, "notes.txt"))}}},
				{ToolCalls: []fakeopenai.Call{plan(true)}},
				{Content: "The notes say: release on friday, after the freeze.", Pace: time.Millisecond},
			}
		}
		r := fakeopenai.Reply{Content: "done"}
		if n < len(replies) {
			r = replies[n]
		}
		r.Reasoning = "private scratch reasoning"
		return r
	}
}

// TestDialects runs a thread through the binary against each server
// dialect of the model fake: a plan in two revisions, a second tool, a
// streamed answer, then a follow-up whose write asks for approval.
func TestDialects(t *testing.T) {
	t.Parallel()
	fsServer := mcpServerPath(t, "filesystem")
	for _, d := range fakeopenai.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			r := newSlackRig(t, 1, 0, true)
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("release on friday"), 0o644); err != nil {
				t.Fatal(err)
			}
			// A model of its own: the rig's serves the rig's script.
			r.model = &fakeopenai.Server{Dialect: d, Respond: dialectScript(dir)}
			if d == fakeopenai.OpenRouter {
				// The answer's first attempt fails mid-stream, with status
				// 200: retried, not shown cut.
				r.model.Fail(fakeopenai.Fault{}, fakeopenai.Fault{}, fakeopenai.Fault{}, fakeopenai.Fault{MidStreamError: true})
			}
			ms := httptest.NewServer(r.model)
			t.Cleanup(ms.Close)
			cfg := filepath.Join(t.TempDir(), "pinplan.toml")
			if err := os.WriteFile(cfg, []byte(fmt.Sprintf("[mcp.fs]\ncommand = [%q, %q]\n", fsServer, dir)), 0o600); err != nil {
				t.Fatal(err)
			}
			r.env["OPENAI_BASE_URL"] = ms.URL + "/v1"
			r.env["PINPLAN_CONFIG"] = cfg
			r.env["PINPLAN_STREAM"] = "true"
			r.env["PINPLAN_STALE_ROUNDS"] = "1" // the reminder follows a tool result
			r.slack.AddUser("U1", "ann")
			p := r.start(t)
			waitMCPReady(t, p, "fs")
			defer func() {
				if t.Failed() {
					t.Logf("stderr:\n%s", p.stderr)
				}
			}()

			thread := "1700090000.000100"
			if _, err := r.slack.Push("EvD1", mention("C1", thread, "plan the notes")); err != nil {
				t.Fatal(err)
			}
			waitReply(t, r.slack, "C1", thread, "release on friday, after the freeze")
			waitFor(t, 20*time.Second, "the plan's last revision, done", func() bool {
				for _, m := range planMessages(r.slack, "C1") {
					if m.ThreadTS == thread && strings.Contains(m.Blocks, "revision 2 · done") {
						return true
					}
				}
				return false
			})

			// The follow-up's write asks; allowed, it runs and is answered.
			ev := map[string]any{"type": "message", "channel_type": "channel", "user": "U1", "text": "write hello", "ts": "1700090001.000100", "thread_ts": thread, "channel": "C1"}
			if _, err := r.slack.Push("EvD2", ev); err != nil {
				t.Fatal(err)
			}
			card, allow := waitCard(t, r.slack, thread, "fs__write_file", "allow")
			tr := &toolRig{slackRig: r, dir: dir}
			tr.press(t, "U1", thread, card.TS, allow)
			waitReply(t, r.slack, "C1", thread, "Wrote it to out.txt.")
			if got := readOut(dir); got != "hello" {
				t.Errorf("out.txt = %q, want hello", got)
			}
			for _, m := range r.slack.Messages("C1") {
				if strings.Contains(m.Text, "scratch reasoning") || strings.Contains(m.Blocks, "scratch reasoning") || strings.Contains(m.Text, "<think>") {
					t.Errorf("the thread shows the model's reasoning: %q", m.Text)
				}
			}
			if v := r.slack.Violations(); len(v) > 0 {
				t.Errorf("Slack would have refused: %v", v)
			}
		})
	}
}
