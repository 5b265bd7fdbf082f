package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/todo"
)

// mcpServerPath is a reference MCP server installed by .ci/run.
func mcpServerPath(t *testing.T, name string) string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("..", "..", ".ci", "node", "node_modules", ".bin", "mcp-server-"+name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		missing(t, os.Getenv("CI") == "true", "the reference MCP server "+name+" is not in .ci/node: run `bash .ci/run`, or install Node and `npm install --prefix .ci/node` the servers .ci/run names")
	} else if _, err := exec.LookPath("node"); err != nil {
		missing(t, os.Getenv("CI") == "true", "no node on PATH for the reference MCP servers: install it with `apt-get install -y nodejs npm` (as root), or run `bash .ci/run`")
	}
	return path
}

// toolScript is the model for the tool tests. The newest user message
// picks the call: "read" reads notes.txt, "write <text>" writes out.txt,
// "sleep" plans and then runs a 30 s operation; a tool result is answered
// "tool said: ...".
func toolScript(dir string) func(*openai.ChatCompletionRequest) fakeopenai.Reply {
	return func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		// The stale reminder (a later system message) is not a request.
		last := req.Messages[len(req.Messages)-1]
		for i := len(req.Messages) - 1; i > 0 && last.Role == openai.ChatMessageRoleSystem; i-- {
			last = req.Messages[i-1]
		}
		if last.Role == openai.ChatMessageRoleTool {
			if strings.HasPrefix(last.Content, `{"todos"`) {
				return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: "ev__trigger-long-running-operation", Arguments: `{"duration":30,"steps":30}`}}}
			}
			return fakeopenai.Reply{Content: "tool said: " + last.Content}
		}
		text := last.Content
		switch {
		case strings.Contains(text, "read"):
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: "fs__read_text_file", Arguments: fmt.Sprintf(`{"path":%q}`, filepath.Join(dir, "notes.txt"))}}}
		case strings.Contains(text, "write "):
			body := strings.TrimSpace(text[strings.Index(text, "write ")+6:])
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: "fs__write_file", Arguments: fmt.Sprintf(`{"path":%q,"content":%q}`, filepath.Join(dir, "out.txt"), body)}}}
		case strings.Contains(text, "sleep"):
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: todo.ToolName, Arguments: todo.Encode([]todo.Item{{Content: "wait for the long operation", Status: todo.InProgress}})}}}
		}
		return fakeopenai.Reply{Content: "nothing to do"}
	}
}

type toolRig struct {
	*slackRig
	dir string
}

func newToolRig(t *testing.T, socket bool, extra map[string]string) *toolRig {
	t.Helper()
	r := &toolRig{slackRig: newSlackRig(t, 1, 0, socket), dir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(r.dir, "notes.txt"), []byte("release on friday"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.model.Respond = toolScript(r.dir)
	cfg := fmt.Sprintf(`
[mcp.fs]
command = [%q, %q]

[mcp.ev]
command = [%q]
tools = { "trigger-long-running-operation" = "allow" }
`, mcpServerPath(t, "filesystem"), r.dir, mcpServerPath(t, "everything"))
	path := filepath.Join(t.TempDir(), "pinplan.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r.env["PINPLAN_CONFIG"] = path
	for k, v := range extra {
		r.env[k] = v
	}
	r.slack.AddUser("U1", "ann")
	r.slack.AddUser("U2", "bob")
	return r
}

// start starts the bot and waits until both MCP servers are ready: they
// connect in the background, and a turn started sooner would not have
// their tools.
func (r *toolRig) start(t *testing.T) *botProc {
	t.Helper()
	p := r.slackRig.start(t)
	waitMCPReady(t, p, "fs", "ev")
	return p
}

// botMessages returns the bot's messages in a thread whose text or blocks
// contain s.
func botMessages(s *fakeslack.Server, channel, thread, contains string) []fakeslack.Message {
	var out []fakeslack.Message
	for _, m := range s.Messages(channel) {
		if m.BotID != "" && m.ThreadTS == thread && (strings.Contains(m.Text, contains) || strings.Contains(m.Blocks, contains)) {
			out = append(out, m)
		}
	}
	return out
}

// waitCard waits for an approval card for tool in the thread and returns
// it with the action id of the button labelled label.
func waitCard(t *testing.T, s *fakeslack.Server, thread, tool, action string) (fakeslack.Message, string) {
	t.Helper()
	var card fakeslack.Message
	waitFor(t, 60*time.Second, "an approval card for "+tool, func() bool {
		for _, m := range botMessages(s, "C1", thread, "Approval needed: "+tool) {
			if strings.Contains(m.Blocks, `"actions"`) {
				card = m
				return true
			}
		}
		return false
	})
	var blocks []map[string]any
	if err := json.Unmarshal([]byte(card.Blocks), &blocks); err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		els, _ := b["elements"].([]any)
		for _, e := range els {
			el, _ := e.(map[string]any)
			if id, _ := el["action_id"].(string); strings.HasPrefix(id, "pinplan:"+action+":") {
				return card, id
			}
		}
	}
	t.Fatalf("card %s has no %s button: %s", card.TS, action, card.Blocks)
	return card, ""
}

// press clicks a button as user over Socket Mode.
func (r *toolRig) press(t *testing.T, user, thread, msgTS, actionID string) {
	t.Helper()
	payload := r.slack.BlockActions(user, "C1", msgTS, actionID)
	if payload == nil {
		t.Fatalf("no button %s on message %s", actionID, msgTS)
	}
	if _, err := r.slack.PushInteraction(payload); err != nil {
		t.Fatal(err)
	}
}

func readOut(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "out.txt"))
	return string(b)
}

func TestSlackToolsAndApprovals(t *testing.T) {
	r := newToolRig(t, true, nil)
	p := r.start(t)
	defer p.stop(t)

	// A read-only tool runs at once: no card.
	if _, err := r.slack.Push("EvR", mention("C1", "1700010000.000100", "read the notes")); err != nil {
		t.Fatal(err)
	}
	waitReply(t, r.slack, "C1", "1700010000.000100", "release on friday")
	if cards := botMessages(r.slack, "C1", "1700010000.000100", "Approval needed"); len(cards) != 0 {
		t.Errorf("a read-only tool asked for approval: %+v", cards)
	}

	// A write asks. Someone else's click is refused privately.
	thread := "1700010100.000100"
	if _, err := r.slack.Push("EvW", mention("C1", thread, "write hello")); err != nil {
		t.Fatal(err)
	}
	card, allow := waitCard(t, r.slack, thread, "fs__write_file", "allow")
	r.press(t, "U2", thread, card.TS, allow)
	defer func() {
		if t.Failed() {
			t.Logf("ephemeral calls %+v\nstderr:\n%s", r.slack.Calls("chat.postEphemeral"), p.stderr)
		}
	}()
	waitFor(t, 20*time.Second, "the private refusal", func() bool {
		for _, m := range r.slack.Ephemerals("C1") {
			if m.Recipient == "U2" && strings.Contains(m.Text, "Only") {
				return true
			}
		}
		return false
	})
	if readOut(r.dir) != "" {
		t.Fatal("someone else's click ran the write")
	}
	// The requester's Allow once runs it, once, and the card says so.
	r.press(t, "U1", thread, card.TS, allow)
	waitReply(t, r.slack, "C1", thread, "tool said:")
	if got := readOut(r.dir); got != "hello" {
		t.Errorf("out.txt = %q, want hello", got)
	}
	waitFor(t, 20*time.Second, "the decided card", func() bool {
		for _, m := range r.slack.Messages("C1") {
			if m.TS == card.TS {
				return strings.Contains(m.Blocks, "Allowed once by ann") && !strings.Contains(m.Blocks, `"actions"`)
			}
		}
		return false
	})

	// Always allow here: the next write in this thread does not ask.
	reply := func(id, ts, text string) {
		t.Helper()
		ev := map[string]any{"type": "message", "channel_type": "channel", "user": "U1", "text": text, "ts": ts, "thread_ts": thread, "channel": "C1"}
		if _, err := r.slack.Push(id, ev); err != nil {
			t.Fatal(err)
		}
	}
	reply("EvW2", "1700010101.000100", "write second")
	card2, always := waitCard(t, r.slack, thread, "fs__write_file", "always")
	if card2.TS == card.TS {
		t.Fatal("no new card for the second write")
	}
	r.press(t, "U1", thread, card2.TS, always)
	waitFor(t, 30*time.Second, "the second write", func() bool { return readOut(r.dir) == "second" })
	reply("EvW3", "1700010102.000100", "write third")
	waitFor(t, 30*time.Second, "the third write, unasked", func() bool { return readOut(r.dir) == "third" })
	if n := len(botMessages(r.slack, "C1", thread, "Approval needed")); n != 2 {
		t.Errorf("%d cards in the thread after Always allow here, want 2", n)
	}

	// Another thread still asks; Deny answers the model "denied".
	other := "1700010200.000100"
	if _, err := r.slack.Push("EvO", mention("C1", other, "write elsewhere")); err != nil {
		t.Fatal(err)
	}
	card3, deny := waitCard(t, r.slack, other, "fs__write_file", "deny")
	r.press(t, "U1", other, card3.TS, deny)
	waitReply(t, r.slack, "C1", other, `"code":"denied"`)
	if got := readOut(r.dir); got != "third" {
		t.Errorf("a denied write changed out.txt to %q", got)
	}

	// Stop on the plan message cancels the long MCP call.
	slow := "1700010300.000100"
	if _, err := r.slack.Push("EvS", mention("C1", slow, "sleep a while")); err != nil {
		t.Fatal(err)
	}
	var plan fakeslack.Message
	waitFor(t, 30*time.Second, "the Stop button while the tool runs", func() bool {
		for _, m := range planMessages(r.slack, "C1") {
			if m.ThreadTS == slow && strings.Contains(m.Blocks, "running ev__trigger-long-running-operation") && strings.Contains(m.Blocks, "pinplan:stop:plan") {
				plan = m
				return true
			}
		}
		return false
	})
	start := time.Now()
	r.press(t, "U1", slow, plan.TS, "pinplan:stop:plan")
	waitFor(t, 20*time.Second, "the stopped footer", func() bool {
		for _, m := range planMessages(r.slack, "C1") {
			if m.TS == plan.TS {
				return strings.Contains(m.Blocks, "stopped by ann") && !strings.Contains(m.Blocks, "pinplan:stop:plan")
			}
		}
		return false
	})
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("Stop took %s against a 30 s operation", took)
	}
	if v := r.slack.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

func TestSlackApprovalSurvivesKill(t *testing.T) {
	t.Parallel()
	r := newToolRig(t, true, nil)
	p := r.start(t)
	thread := "1700020000.000100"
	if _, err := r.slack.Push("EvK", mention("C1", thread, "write survived")); err != nil {
		t.Fatal(err)
	}
	card, allow := waitCard(t, r.slack, thread, "fs__write_file", "allow")
	p.kill() // kill -9 with the card open
	p = r.start(t)
	defer p.stop(t)
	r.press(t, "U1", thread, card.TS, allow)
	waitReply(t, r.slack, "C1", thread, "tool said:")
	if got := readOut(r.dir); got != "survived" {
		t.Errorf("out.txt = %q, want the approved write", got)
	}
	// Killed between posting the card and storing its ref, the restarted
	// bot posts it once more; either copy carries the same buttons, so
	// the old one still works (as pressed above) and the call runs once.
	cards := botMessages(r.slack, "C1", thread, "Approval needed")
	if len(cards) < 1 || len(cards) > 2 {
		t.Errorf("%d cards after the restart, want the same one (or its copy)", len(cards))
	}
	for _, c := range cards {
		if !strings.Contains(c.Blocks, `\"content\":\"survived\"`) {
			t.Errorf("card %s after the restart is for another approval: %s", c.TS, c.Blocks)
		}
	}
	writes := 0
	for _, req := range r.model.Requests() {
		for _, m := range req.Messages {
			if m.Role == openai.ChatMessageRoleTool && strings.Contains(m.Content, "Successfully wrote") {
				writes++
				break
			}
		}
	}
	if writes == 0 {
		t.Error("the model never saw the write's result")
	}
}

func TestSlackApprovalExpires(t *testing.T) {
	t.Parallel()
	r := newToolRig(t, true, map[string]string{"PINPLAN_APPROVAL_TIMEOUT": "2s"})
	p := r.start(t)
	defer p.stop(t)
	thread := "1700030000.000100"
	if _, err := r.slack.Push("EvX", mention("C1", thread, "write never")); err != nil {
		t.Fatal(err)
	}
	waitCard(t, r.slack, thread, "fs__write_file", "allow")
	waitReply(t, r.slack, "C1", thread, `"code":"denied"`)
	if readOut(r.dir) != "" {
		t.Error("an expired approval ran the write")
	}
	waitFor(t, 20*time.Second, "the expired card", func() bool {
		cards := botMessages(r.slack, "C1", thread, "no decision in time")
		return len(cards) == 1 && !strings.Contains(cards[0].Blocks, `"actions"`)
	})
}

func TestSlackInteractionsOverHTTP(t *testing.T) {
	t.Parallel()
	r := newToolRig(t, false, nil)
	p := r.start(t)
	defer p.stop(t)
	thread := "1700040000.000100"
	body := r.slack.CallbackBody("EvH", mention("C1", thread, "write over http"))
	if code, _ := do(t, signedRequest(t, p.URL+"/slack/events", "signing-secret", body, time.Now())); code != 200 {
		t.Fatalf("event: %d", code)
	}
	card, allow := waitCard(t, r.slack, thread, "fs__write_file", "allow")
	form := r.slack.InteractionBody(r.slack.BlockActions("U1", "C1", card.TS, allow))
	forged := signedRequest(t, p.URL+"/slack/interactions", "wrong-secret", form, time.Now())
	forged.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if code, _ := do(t, forged); code != http.StatusUnauthorized {
		t.Errorf("forged interaction: %d, want 401", code)
	}
	if readOut(r.dir) != "" {
		t.Fatal("a forged click ran the write")
	}
	req := signedRequest(t, p.URL+"/slack/interactions", "signing-secret", form, time.Now())
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if code, _ := do(t, req); code != 200 {
		t.Fatalf("signed interaction: %d", code)
	}
	waitReply(t, r.slack, "C1", thread, "tool said:")
	if got := readOut(r.dir); got != "over http" {
		t.Errorf("out.txt = %q", got)
	}
}

func TestDiscordApprovalButtons(t *testing.T) {
	r := newDiscordRig(t, 1, 0)
	dir := t.TempDir()
	r.model.Respond = toolScript(dir)
	cfg := fmt.Sprintf("[mcp.fs]\ncommand = [%q, %q]\n", mcpServerPath(t, "filesystem"), dir)
	path := filepath.Join(t.TempDir(), "pinplan.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r.env["PINPLAN_CONFIG"] = path
	p := r.start(t)
	defer p.stop(t)
	waitMCPReady(t, p, "fs")
	r.dc.UserMessage("C1", "111", "write from discord", true)
	var card fakediscord.Message
	waitFor(t, 60*time.Second, "the approval card", func() bool {
		for _, m := range r.dc.Messages("C1") {
			if m.AuthorID == fakediscord.BotID && strings.Contains(embedOf(m), "Approval needed: fs__write_file") && len(m.Components) > 0 {
				card = m
				return true
			}
		}
		return false
	})
	allowID := ""
	for _, row := range card.Components {
		buttons, _ := row["components"].([]any)
		for _, b := range buttons {
			if id, _ := b.(map[string]any)["custom_id"].(string); strings.HasPrefix(id, "pinplan:allow:") {
				allowID = id
			}
		}
	}
	if allowID == "" {
		t.Fatalf("no Allow once button: %+v", card.Components)
	}
	// Someone else: an ephemeral answer, within 3 s, and nothing runs.
	other, err := r.dc.Click("C1", card.ID, "222", allowID)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the answer to someone else's click", func() bool { return len(r.dc.Responses(other)) > 0 })
	if res := r.dc.Responses(other)[0]; res.Type != 4 || res.Status >= 300 || res.Latency > 3*time.Second || res.Data["flags"] != float64(64) {
		t.Errorf("answer to someone else's click: %+v, want an ephemeral message within 3 s", res)
	}
	if readOut(dir) != "" {
		t.Fatal("someone else's click ran the write")
	}
	// The requester: the card is updated in place (type 7), within 3 s.
	id, err := r.dc.Click("C1", card.ID, "111", allowID)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the answer to the requester's click", func() bool { return len(r.dc.Responses(id)) > 0 })
	res := r.dc.Responses(id)[0]
	if res.Type != 7 || res.Status >= 300 || res.Latency > 3*time.Second {
		t.Errorf("answer to the requester's click: %+v, want an update within 3 s", res)
	}
	waitDiscordReply(t, r.dc, "C1", "tool said:")
	if got := readOut(dir); got != "from discord" {
		t.Errorf("out.txt = %q", got)
	}
	for _, m := range r.dc.Messages("C1") {
		if m.ID == card.ID && (len(m.Components) != 0 || !strings.Contains(embedOf(m), "Allowed once")) {
			t.Errorf("the card after the decision: components %v, %q", m.Components, embedOf(m))
		}
	}
	if v := r.dc.Violations(); len(v) > 0 {
		t.Errorf("Discord would have refused: %v", v)
	}
}

// TestRepeatedCallIDGetsItsOwnCard: a server that answers call_0 for every
// call (llama.cpp-style) asks twice in one turn; the second call gets its
// own working card instead of reusing the first, decided one.
func TestRepeatedCallIDGetsItsOwnCard(t *testing.T) {
	t.Parallel()
	r := newToolRig(t, true, nil)
	var mu sync.Mutex
	writes := 0
	r.model.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		mu.Lock()
		defer mu.Unlock()
		if last := req.Messages[len(req.Messages)-1]; last.Role == openai.ChatMessageRoleTool && writes >= 2 {
			return fakeopenai.Reply{Content: "wrote both"}
		}
		writes++
		args := fmt.Sprintf(`{"path":%q,"content":"note %d"}`, filepath.Join(r.dir, "out.txt"), writes)
		return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{ID: "call_0", Name: "fs__write_file", Arguments: args}}}
	}
	p := r.start(t)
	defer p.stop(t)
	thread := "1700019000.000100"
	if _, err := r.slack.Push("EvDup", mention("C1", thread, "write two notes")); err != nil {
		t.Fatal(err)
	}
	first, allow := waitCard(t, r.slack, thread, "fs__write_file", "allow")
	r.press(t, "U1", thread, first.TS, allow)
	var second fakeslack.Message
	var allow2 string
	waitFor(t, 60*time.Second, "a second, open card", func() bool {
		for _, m := range botMessages(r.slack, "C1", thread, "Approval needed: fs__write_file") {
			if m.TS != first.TS && strings.Contains(m.Blocks, `"actions"`) {
				second = m
				return true
			}
		}
		return false
	})
	var blocks []map[string]any
	json.Unmarshal([]byte(second.Blocks), &blocks)
	for _, b := range blocks {
		els, _ := b["elements"].([]any)
		for _, e := range els {
			if id, _ := e.(map[string]any)["action_id"].(string); strings.HasPrefix(id, "pinplan:allow:") {
				allow2 = id
			}
		}
	}
	if allow2 == "" || allow2 == allow {
		t.Fatalf("the second card's Allow button %q, first %q: want a button of its own", allow2, allow)
	}
	r.press(t, "U1", thread, second.TS, allow2)
	waitReply(t, r.slack, "C1", thread, "wrote both")
	if got := readOut(r.dir); got != "note 2" {
		t.Errorf("out.txt = %q, want the second write", got)
	}
}

// TestSecondTurnOnlyTheRightPeopleAct: in the second turn of U1's session,
// a turn that works without a new todo_write and waits on a card, U2's
// `stop`, `reset` and Stop click change nothing; the plan message carries
// the Stop button meanwhile.
func TestSecondTurnOnlyTheRightPeopleAct(t *testing.T) {
	t.Parallel()
	r := newToolRig(t, true, nil)
	write := r.model.Respond
	r.model.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		last := req.Messages[len(req.Messages)-1]
		if last.Role == openai.ChatMessageRoleUser && strings.Contains(last.Content, "plan the release") {
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: todo.ToolName, Arguments: todo.Encode([]todo.Item{
				{Content: "draft the notes", Status: todo.Completed}, {Content: "tag it", Status: todo.Pending}, {Content: "announce", Status: todo.Pending}})}}}
		}
		if last.Role == openai.ChatMessageRoleTool && strings.HasPrefix(last.Content, `{"todos"`) {
			return fakeopenai.Reply{Content: "planned"}
		}
		return write(req)
	}
	p := r.start(t)
	defer p.stop(t)
	thread := "1700021000.000100"
	if _, err := r.slack.Push("Ev2a", mention("C1", thread, "plan the release")); err != nil {
		t.Fatal(err)
	}
	waitReply(t, r.slack, "C1", thread, "planned")
	reply := func(id, user, text string) {
		t.Helper()
		ev := map[string]any{"type": "message", "channel_type": "channel", "user": user, "text": text, "ts": "1700021001." + id, "thread_ts": thread, "channel": "C1"}
		if _, err := r.slack.Push("Ev2"+id, ev); err != nil {
			t.Fatal(err)
		}
	}
	reply("000100", "U1", "write second turn")
	card, _ := waitCard(t, r.slack, thread, "fs__write_file", "allow")
	var plan fakeslack.Message
	var stop string
	waitFor(t, 30*time.Second, "the Stop button on the plan during the second turn", func() bool {
		for _, m := range planMessages(r.slack, "C1") {
			if m.ThreadTS == thread && strings.Contains(m.Blocks, `"pinplan:stop:`) {
				plan = m
				return true
			}
		}
		return false
	})
	var blocks []map[string]any
	json.Unmarshal([]byte(plan.Blocks), &blocks)
	for _, b := range blocks {
		els, _ := b["elements"].([]any)
		for _, e := range els {
			if id, _ := e.(map[string]any)["action_id"].(string); strings.HasPrefix(id, "pinplan:stop:") {
				stop = id
			}
		}
	}
	reply("000200", "U2", "stop")
	reply("000300", "U2", "reset")
	r.press(t, "U2", thread, plan.TS, stop)
	// Every refusal is private (DESIGN §16): the text stop and reset as
	// the button's, none of them in the thread.
	waitFor(t, 30*time.Second, "U2 told no three times, privately", func() bool {
		private := 0
		for _, m := range r.slack.Ephemerals("C1") {
			if m.Recipient == "U2" && strings.Contains(m.Text, "Only") {
				private++
			}
		}
		return private == 3
	})
	for _, m := range botMessages(r.slack, "C1", thread, "Only") {
		if m.Blocks == "" {
			t.Errorf("a refusal in the thread for all to see: %q", m.Text)
		}
	}
	for _, bad := range []string{"Stopping the current turn", "Started fresh", "Stopped."} {
		if got := botMessages(r.slack, "C1", thread, bad); len(got) != 0 {
			t.Errorf("U2 changed U1's turn: %q in the thread", bad)
		}
	}
	// U1's turn goes on: the card still works.
	_, allow := waitCard(t, r.slack, thread, "fs__write_file", "allow")
	r.press(t, "U1", thread, card.TS, allow)
	waitReply(t, r.slack, "C1", thread, "tool said:")
	if got := readOut(r.dir); got != "second turn" {
		t.Errorf("out.txt = %q, want U1's write", got)
	}
}

// TestSlackClickCardEditRetried: the card edit a click makes goes through
// the delivery step, so a chat.update that fails (Slack's 503) is tried
// again and the card shows the decision; before, the adapter edited the
// card itself, once, and a failed edit left its buttons for good.
func TestSlackClickCardEditRetried(t *testing.T) {
	t.Parallel()
	r := newToolRig(t, true, nil)
	p := r.start(t)
	defer p.stop(t)
	thread := "1700010900.000100"
	if _, err := r.slack.Push("EvRetry", mention("C1", thread, "write hello")); err != nil {
		t.Fatal(err)
	}
	card, allow := waitCard(t, r.slack, thread, "fs__write_file", "allow")
	// The next chat.update calls fail: the plan's and the card's.
	r.slack.FailHTTP("chat.update", http.StatusServiceUnavailable, 3)
	r.press(t, "U1", thread, card.TS, allow)
	waitFor(t, 40*time.Second, "the decided card", func() bool {
		for _, m := range r.slack.Messages("C1") {
			if m.TS == card.TS {
				return strings.Contains(m.Blocks, "Allowed once by ann") && !strings.Contains(m.Blocks, `"actions"`)
			}
		}
		return false
	})
	if v := r.slack.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}
