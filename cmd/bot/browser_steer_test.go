package main

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/todo"
)

// steerItems is the plan the model of TestBrowserSteerPlan writes.
var steerItems = []todo.Item{
	{Content: "Check the release branch", Status: todo.InProgress},
	{Content: "Tag the release candidate", Status: todo.Pending},
	{Content: "Publish the release notes", Status: todo.Pending},
}

// steerScript is the model of TestBrowserSteerPlan: it writes
// steerItems, then writes a file in dir (a tool that asks, so the turn
// waits on its card), then answers.
func steerScript(dir string) func(*openai.ChatCompletionRequest) fakeopenai.Reply {
	return func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		// The stale reminder (a later system message) is not a request.
		last := req.Messages[len(req.Messages)-1]
		for i := len(req.Messages) - 1; i > 0 && last.Role == openai.ChatMessageRoleSystem; i-- {
			last = req.Messages[i-1]
		}
		switch {
		case last.Role == openai.ChatMessageRoleUser:
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: todo.ToolName, Arguments: todo.Encode(steerItems)}}}
		case last.Role == openai.ChatMessageRoleTool && strings.HasPrefix(last.Content, `{"todos"`):
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: "fs__write_file", Arguments: fmt.Sprintf(`{"path":%q,"content":"v2"}`, filepath.Join(dir, "out.txt"))}}}
		}
		return fakeopenai.Reply{Content: "Done: the release is under way."}
	}
}

// planRendersJS records, each time the plan's items are built anew (one
// plan update), how its second item shows: status, text's tag and line.
const planRendersJS = `(() => {
  window.__renders = [];
  const items = document.getElementById("plan-items");
  new MutationObserver(() => {
    const li = items.children[1];
    const line = li && li.querySelector(".evidence");
    window.__renders.push(li ? li.dataset.status + "|" + li.querySelector(".text").tagName + "|" + (line ? line.textContent : "") : "none");
  }).observe(items, { childList: true });
  return "ok";
})()`

// planItemsJS lists the shown plan's items as "status: text".
const planItemsJS = `[...document.querySelectorAll("#plan-items > li")].map((li) => li.dataset.status + ": " + li.querySelector(".text").textContent)`

// TestBrowserSteerPlan: the console's inline item controls (DESIGN §19)
// in real Chromium, on a laptop and a phone. A thread's model writes a
// three-item plan, then waits on an approval card. Skip on item 2 shows
// it struck with who skipped it in the next plan update, and a note by
// the plan for the presser; Add opens a field under an item (Escape
// cancels it, Enter sends) and the new item shows pending after it; the
// model's next request, once the card is allowed, reads both changes as
// user messages naming them; a reload shows the same plan, and the
// revision history says who made the two changes.
func TestBrowserSteerPlan(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fake := &fakeopenai.Server{Respond: steerScript(dir)}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	cfg := filepath.Join(t.TempDir(), "pinplan.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("[mcp.fs]\ncommand = [%q, %q]\n", mcpServerPath(t, "filesystem"), dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": "sk-test", "PINPLAN_CONFIG": cfg}, botBinary)
	defer p.stop(t)
	waitMCPReady(t, p, "fs")
	bctx := newBrowser(t, 4*time.Minute)
	skipped, added, last := steerItems[1].Content, "Write the changelog", steerItems[2].Content

	for _, vp := range viewports {
		b := openTab(t, bctx, p, vp, p.URL+"/")
		task := "ship the release (" + vp.name + ")"
		b.newThread()
		b.send(task)
		b.waitJS(60*time.Second, "the plan's three items with their controls, waiting on the card",
			`document.querySelectorAll("#plan-items > li .item-controls").length === 3 && document.getElementById("plan").dataset.state === "waiting for approval" && !!document.querySelector("#messages li.card button.allow")`)
		if got := b.eval(`[...document.querySelectorAll("#plan-items > li:nth-child(2) .item-controls button")].map((b) => b.textContent).join(",")`); got != "Skip,Add an item after" {
			t.Errorf("%s: item 2's controls %q, want chat's Skip and Add an item after", vp.name, got)
		}

		// Skip item 2: struck, with who skipped it, in the next plan
		// update; the presser reads what happened by the plan.
		b.eval(planRendersJS)
		b.click("#plan-items > li:nth-child(2) button.skip")
		b.waitJS(20*time.Second, "item 2 skipped on the plan", `(() => { const li = document.querySelector("#plan-items > li:nth-child(2)"); return li.dataset.status === "skipped"; })()`)
		var renders []string
		b.evalJSON(`window.__renders`, &renders)
		want := "skipped|S|↳ skipped by the console user"
		if len(renders) == 0 || renders[0] != want {
			t.Errorf("%s: the plan's updates after Skip showed item 2 as %q, want the first to be %q", vp.name, renders, want)
		}
		if got := b.eval(`getComputedStyle(document.querySelector("#plan-items > li:nth-child(2) .text")).textDecorationLine`); got != "line-through" {
			t.Errorf("%s: the skipped item's text is drawn with %q, want line-through", vp.name, got)
		}
		b.waitJS(10*time.Second, "the note by the plan", `(() => { const n = document.getElementById("plan-note"); return !n.hidden && n.textContent.includes("“`+skipped+`”"); })()`)
		if got := b.eval(`document.getElementById("plan-title").textContent`); got != "Plan · 0/2 done" {
			t.Errorf("%s: title %q after the skip, want Plan · 0/2 done", vp.name, got)
		}
		if got := b.eval(`[...document.querySelectorAll("#plan-items > li:nth-child(2) .item-controls button")].map((b) => b.textContent).join(",")`); got != "Reopen,Add an item after" {
			t.Errorf("%s: the skipped item's controls %q, want Reopen and Add an item after", vp.name, got)
		}
		b.shot("steer-skipped")

		// Add on item 3, then Escape: the field goes, nothing is sent,
		// the focus is back on the button.
		b.click("#plan-items > li:nth-child(3) button.add")
		b.waitJS(5*time.Second, "the Add field under item 3", `document.activeElement === document.querySelector("#plan-items > li:nth-child(3) .add-input")`)
		b.do(chromedp.SendKeys(chromedp.CSS("#plan-items > li:nth-child(3) .add-input"), "never sent"), chromedp.KeyEvent(kb.Escape))
		b.waitJS(5*time.Second, "Escape to close the field", `!document.querySelector(".add-item") && document.activeElement === document.querySelector("#plan-items > li:nth-child(3) button.add")`)

		// Add after the skipped item: typed, Enter sends it, and it
		// shows right after it, pending, with who added it.
		b.click("#plan-items > li:nth-child(2) button.add")
		b.waitJS(5*time.Second, "the Add field under item 2", `document.activeElement === document.querySelector("#plan-items > li:nth-child(2) .add-input")`)
		b.shot("steer-add-field")
		b.do(chromedp.SendKeys(chromedp.CSS("#plan-items > li:nth-child(2) .add-input"), added+kb.Enter))
		b.waitJS(20*time.Second, "the added item on the plan", `document.querySelectorAll("#plan-items > li").length === 4`)
		var items []string
		b.evalJSON(planItemsJS, &items)
		wantItems := []string{"in_progress: " + steerItems[0].Content, "skipped: " + skipped, "pending: " + added, "pending: " + last}
		if strings.Join(items, "|") != strings.Join(wantItems, "|") {
			t.Errorf("%s: plan after Add %q, want %q", vp.name, items, wantItems)
		}
		if got := b.eval(`document.querySelector("#plan-items > li:nth-child(3) .evidence").textContent`); got != "↳ added by the console user" {
			t.Errorf("%s: the added item's line %q", vp.name, got)
		}
		b.waitJS(10*time.Second, "the note of the Add", `document.getElementById("plan-note").textContent.includes("“`+added+`”")`)
		if got := b.eval(`!!document.querySelector(".add-item")`); got != "false" {
			t.Errorf("%s: the Add field is still open after the item was taken", vp.name)
		}
		if got := b.eval(overflowCheck); got != "[]" {
			t.Errorf("%s: the page overflows with the item controls: %s", vp.name, got)
		}
		b.shot("steer-added")

		// Allow the write: the model's next request reads both changes.
		b.click("#messages li.card button.allow")
		b.waitJS(60*time.Second, "the answer", `!!document.querySelector("#messages li.assistant") && document.getElementById("plan").dataset.state === "done"`)
		var convo [][]openai.ChatCompletionMessage
		for _, req := range fake.Requests() {
			for _, m := range req.Messages {
				if m.Role == openai.ChatMessageRoleUser && strings.Contains(m.Content, task) {
					convo = append(convo, req.Messages)
					break
				}
			}
		}
		if len(convo) != 3 {
			t.Fatalf("%s: the model got %d requests of this thread, want 3 (plan, write, answer)", vp.name, len(convo))
		}
		changes := func(msgs []openai.ChatCompletionMessage) (skip, add bool) {
			for _, m := range msgs {
				if m.Role != openai.ChatMessageRoleUser {
					continue
				}
				skip = skip || strings.Contains(m.Content, fmt.Sprintf("the console user skipped %q", skipped))
				add = add || strings.Contains(m.Content, fmt.Sprintf("the console user added %q", added))
			}
			return skip, add
		}
		if skip, add := changes(convo[1]); skip || add {
			t.Errorf("%s: the request before the changes reads them (skip %t, add %t)", vp.name, skip, add)
		}
		if skip, add := changes(convo[2]); !skip || !add {
			t.Errorf("%s: the model's next request names the skip %t and the add %t, want both; its user messages:\n%s", vp.name, skip, add, userMessages(convo[2]))
		}

		// A reload shows the plan as the person left it.
		b.do(chromedp.Reload())
		b.waitLive()
		b.waitJS(10*time.Second, "the plan after a reload", `document.querySelectorAll("#plan-items > li").length === 4`)
		if got := b.eval(`(() => { const li = document.querySelector("#plan-items > li:nth-child(2)"); return li.dataset.status + "|" + li.querySelector(".text").tagName + "|" + li.querySelector(".evidence").textContent; })()`); got != want {
			t.Errorf("%s: after a reload item 2 reads %q, want %q", vp.name, got, want)
		}
		// The entries that told the model are not messages anyone wrote;
		// the history says who made the two revisions.
		b.waitJS(10*time.Second, "the thread's messages after a reload", `!!document.querySelector("#messages li.assistant")`)
		if got := b.eval(`[...document.querySelectorAll("#messages > li.user")].map((li) => li.textContent).join(" | ")`); strings.Contains(got, "plan change") {
			t.Errorf("%s: the thread shows the model's note of a change as a message: %q", vp.name, got)
		}
		b.click("#plan-history-toggle")
		b.waitJS(10*time.Second, "the history naming both changes", `(() => { const notes = [...document.querySelectorAll("#plan-revisions .rev-note.change")].map((p) => p.textContent);
		  return notes.includes("Skipped by the console user: `+skipped+`") && notes.includes("Added by the console user: `+added+`"); })()`)
		b.shot("steer-history")
		b.checkNoCSPViolations()
	}
}

// userMessages lists msgs' user messages, one a line.
func userMessages(msgs []openai.ChatCompletionMessage) string {
	var out []string
	for _, m := range msgs {
		if m.Role == openai.ChatMessageRoleUser {
			out = append(out, m.Content)
		}
	}
	return strings.Join(out, "\n")
}
