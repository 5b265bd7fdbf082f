package main

import (
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/todo"
)

// tallPlan is n items, the first done, the next in progress, the rest
// to do.
func tallPlan(n int) string {
	items := make([]todo.Item, n)
	for i := range items {
		items[i] = todo.Item{Content: fmt.Sprintf("step %02d of a long plan that needs a line of its own", i+1), Status: todo.Pending}
	}
	items[0].Status, items[1].Status = todo.Completed, todo.InProgress
	return todo.Encode(items)
}

// TestBrowserPlanLayout: a tall plan, stopped, in real Chromium at a
// laptop's and a phone's width. The plan leaves a gap above the
// messages; its border follows the run state; the item it was working
// on is no longer shown working; the revision history opens outside the
// plan's box, whole; on a phone the plan takes at most a third of the
// screen.
func TestBrowserPlanLayout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	script := fakeopenai.Script(func(string) []fakeopenai.Reply {
		return []fakeopenai.Reply{
			{ToolCalls: []fakeopenai.Call{{Name: todo.ToolName, Arguments: tallPlan(24)}}},
			{ToolCalls: []fakeopenai.Call{{Name: "current_time", Arguments: "{}"}}},
			{ToolCalls: []fakeopenai.Call{{Name: todo.ToolName, Arguments: tallPlan(25)}}},
			{Content: "never reached: the turn is stopped first"},
		}
	})
	fake := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		r := script(req)
		if r.Content != "" {
			<-release // wait for the Stop
		}
		return r
	}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	defer close(release)
	p := startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": "sk-test"}, botBinary)
	defer p.stop(t)
	bctx := newBrowser(t, 3*time.Minute)

	for _, vp := range viewports {
		b := openTab(t, bctx, p, vp, p.URL+"/")
		b.newThread()
		b.send("a task with a tall plan (" + vp.name + ")")
		b.waitJS(30*time.Second, "the second plan revision with the Stop button", `document.querySelectorAll("#plan-items > li").length === 25 && !document.getElementById("stop").hidden`)
		working := b.eval(`getComputedStyle(document.getElementById("plan")).borderLeftColor`)
		if mark := b.eval(`document.querySelector("#plan-items > li.in_progress .mark").textContent`); mark != "🔄" {
			t.Errorf("%s: the working item's mark %q, want 🔄", vp.name, mark)
		}
		b.shot("layout-working")
		b.click("#stop")
		b.waitJS(30*time.Second, "the stopped plan", `document.getElementById("plan").dataset.state === "stopped"`)
		b.waitJS(10*time.Second, "a message below the plan", `document.querySelectorAll("#messages > li").length >= 2`)
		b.shot("layout-stopped")

		// A gap between the plan and the messages, which scroll away
		// under it rather than against it.
		var box struct{ PlanBottom, ScrollerTop, PlanHeight, ViewHeight float64 }
		b.evalJSON(`(() => { const p = document.getElementById("plan").getBoundingClientRect(), s = document.getElementById("scroller").getBoundingClientRect();
		  return { PlanBottom: p.bottom, ScrollerTop: s.top, PlanHeight: p.height, ViewHeight: window.innerHeight }; })()`, &box)
		if gap := box.ScrollerTop - box.PlanBottom; gap < 8 {
			t.Errorf("%s: %.1f px between the plan and the messages, want a gap of at least 8", vp.name, gap)
		}
		if vp.mobile && box.PlanHeight > box.ViewHeight/3 {
			t.Errorf("%s: the plan is %.0f px of a %.0f px screen, want at most a third", vp.name, box.PlanHeight, box.ViewHeight)
		}
		// The border says the run state; the item worked on is not shown
		// working any more.
		if stopped := b.eval(`getComputedStyle(document.getElementById("plan")).borderLeftColor`); stopped == working {
			t.Errorf("%s: the plan's border is %s working and stopped, want the run state's colour", vp.name, stopped)
		}
		if mark := b.eval(`document.querySelector("#plan-items > li.in_progress .mark").textContent`); mark == "🔄" {
			t.Errorf("%s: the stopped plan's item still shows %q", vp.name, mark)
		}
		// The evidence's times are UTC, as the footer's.
		b.click("#plan-items > li.in_progress details.evidence > summary")
		b.waitJS(5*time.Second, "the item's calls", `!!document.querySelector("#plan-items > li.in_progress .calls time.when")`)
		if when := b.eval(`document.querySelector("#plan-items > li.in_progress .calls time.when").textContent`); !strings.HasSuffix(when, " UTC") {
			t.Errorf("%s: a call's time reads %q, want UTC as the footer (%q)", vp.name, when, b.eval(`document.getElementById("plan-footer").textContent`))
		}

		// The history opens outside the plan's box, with room of its own:
		// on screen, and tall enough to read (or whole).
		b.click("#plan-history-toggle")
		b.waitJS(10*time.Second, "the history", `document.querySelectorAll("#plan-revisions > li").length === 2`)
		b.shot("layout-history")
		var hist struct {
			InPlan                             bool
			Top, Bottom, Height, Scroll, ViewH float64
		}
		b.evalJSON(`(() => { const h = document.getElementById("plan-history"), r = h.getBoundingClientRect();
		  return { InPlan: document.getElementById("plan").contains(document.getElementById("plan-revisions")), Top: r.top, Bottom: r.bottom, Height: h.clientHeight, Scroll: h.scrollHeight, ViewH: window.innerHeight }; })()`, &hist)
		if hist.InPlan {
			t.Errorf("%s: the revision history opens inside the plan's box", vp.name)
		}
		if hist.Top < 0 || hist.Bottom > hist.ViewH || (hist.Scroll > hist.Height+1 && hist.Height < hist.ViewH*0.4) {
			t.Errorf("%s: the history shows %.0f of its %.0f px at %.0f-%.0f on a %.0f px screen, want it on screen with room", vp.name, hist.Height, hist.Scroll, hist.Top, hist.Bottom, hist.ViewH)
		}
		b.click("#plan-history-close")
		b.waitJS(5*time.Second, "the history closed", `document.getElementById("plan-history").hidden`)
		b.checkNoCSPViolations()
	}
}
