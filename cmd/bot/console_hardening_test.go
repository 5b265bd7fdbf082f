package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Issue 40, items 10 and 14: the console on every replica, and its plan
// box, cards, footer and token counter.

// TestConsoleCardsLiveOnEveryReplica: replica r1 runs a console thread
// whose turn waits on an approval card. The console of the other
// replica shows the card live (an event on its stream, no reload), takes
// the decision from there, and shows the decided card live too.
func TestConsoleCardsLiveOnEveryReplica(t *testing.T) {
	t.Parallel()
	r := newReplicaRig(t, 1)
	dir := t.TempDir()
	r.model.Respond = toolScript(dir)
	cfg := fmt.Sprintf("[mcp.fs]\ncommand = [%q, %q]\n", mcpServerPath(t, "filesystem"), dir)
	path := filepath.Join(t.TempDir(), "pinplan.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r.env["PINPLAN_CONFIG"] = path
	var ps []*botProc
	for i := range 2 {
		ps = append(ps, r.start(t, i))
		waitMCPReady(t, ps[i], "fs")
	}
	streams := []*syncBuffer{watchEvents(t, ps[0].URL), watchEvents(t, ps[1].URL)}
	api := apiClient{t, ps[0].URL}
	status, body := api.do("POST", "/api/threads", map[string]string{"text": "write once"})
	if status != http.StatusCreated {
		t.Fatalf("POST /api/threads: %d %s", status, body)
	}
	var created struct{ ID, Key string }
	if err := json.Unmarshal(body, &created); err != nil {
		t.Fatal(err)
	}
	owner := -1
	waitFor(t, 30*time.Second, "an owner of "+created.Key, func() bool { owner = ownerOf(ps, created.Key); return owner >= 0 })
	other := 1 - owner
	// The card, live on the stream of the replica that does not run the
	// thread.
	cardEvent := regexp.MustCompile(`"type":"card","thread":"` + regexp.QuoteMeta(created.Key) + `"[^\n]*"id":"([0-9a-f]+)","tool":"fs__write_file"`)
	var cardID string
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := cardEvent.FindStringSubmatch(streams[other].String()); m != nil {
			cardID = m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d (not the owner) showed no approval card live; its stream:\n%s\n%s", other, streams[other], stderrs(ps...))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Decided from there.
	click := apiClient{t, ps[other].URL}
	status, body = click.do("POST", "/api/threads/"+created.ID+"/click", map[string]string{"button": "pinplan:allow:" + cardID})
	if status != http.StatusOK || strings.Contains(string(body), `"private"`) {
		t.Fatalf("allow from replica %d: %d %s", other, status, body)
	}
	waitFor(t, 60*time.Second, "the approved write", func() bool { return readOut(dir) == "once" })
	waitFor(t, 30*time.Second, "the decided card on the other replica's stream", func() bool {
		for _, line := range strings.Split(streams[other].String(), "\n") {
			if strings.Contains(line, `"type":"card"`) && strings.Contains(line, `"id":"`+cardID+`"`) && strings.Contains(line, `"outcome":"Allowed once"`) {
				return true
			}
		}
		return false
	})
}

// demoThread starts a console thread on the demo bot and waits for its
// approval card; it returns the thread's id.
func demoThread(t *testing.T, api apiClient, text string) string {
	t.Helper()
	status, body := api.do("POST", "/api/threads", map[string]string{"text": text})
	if status != http.StatusCreated {
		t.Fatalf("POST /api/threads: %d %s", status, body)
	}
	var created struct{ ID string }
	if err := json.Unmarshal(body, &created); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the demo's approval card", func() bool {
		_, body := api.do("GET", "/api/threads/"+created.ID, nil)
		return strings.Contains(string(body), `"tool":"demo__write_note"`)
	})
	return created.ID
}

// TestConsoleFooterCountsCallsRun: the demo searches (a call that runs),
// then asks to write; Stop while the card waits. The write never ran:
// the footer counts one tool call, not two.
func TestConsoleFooterCountsCallsRun(t *testing.T) {
	t.Parallel()
	p := demoBot(t, "30ms")
	defer p.stop(t)
	api := apiClient{t, p.URL}
	id := demoThread(t, api, "plan the offsite")
	status, body := api.do("POST", "/api/threads/"+id+"/click", map[string]string{"button": "pinplan:stop:plan"})
	if status != http.StatusOK || strings.Contains(string(body), `"private"`) {
		t.Fatalf("Stop: %d %s", status, body)
	}
	var th apiThread
	waitFor(t, 30*time.Second, "the stopped plan", func() bool {
		th = api.thread(id)
		return th.Thread.Plan != nil && th.Thread.Plan.State == "stopped"
	})
	footer := th.Thread.Plan.Footer()
	if th.Thread.Plan.Calls != 1 || !strings.Contains(footer, " · 1 tool call") {
		t.Errorf("footer %q (%d calls), want the one call that ran: the write was stopped before it ran", footer, th.Thread.Plan.Calls)
	}
}

// TestBrowserStoppedCardNotAllowed: a card closed by Stop (its call never
// ran) is not shown as allowed: its border is not the allowed card's
// green, nor the open card's.
func TestBrowserStoppedCardNotAllowed(t *testing.T) {
	t.Parallel()
	p := demoBot(t, "30ms")
	defer p.stop(t)
	bctx := newBrowser(t, 3*time.Minute)
	b := openTab(t, bctx, p, viewports[0], p.URL+"/")
	// An allowed card, for its colour.
	b.newThread()
	b.send("allowed card")
	b.approveAndFinish()
	allowed := b.eval(`getComputedStyle(document.querySelector("#messages li.card")).borderLeftColor`)
	// A card closed by Stop.
	b.newThread()
	b.send("stopped card")
	b.waitJS(60*time.Second, "the approval card", `document.querySelectorAll("#messages li.card button.allow").length === 1`)
	open := b.eval(`getComputedStyle(document.querySelector("#messages li.card")).borderLeftColor`)
	b.click("#stop")
	b.waitJS(30*time.Second, "the card closed by Stop", `(document.querySelector("#messages li.card .status") || {}).textContent.startsWith("Not run")`)
	b.shot("console-stopped-card")
	stopped := b.eval(`getComputedStyle(document.querySelector("#messages li.card")).borderLeftColor`)
	if stopped == allowed || stopped == open {
		t.Errorf("a card closed by Stop has border %s; the allowed card's is %s, the open card's %s: want neither", stopped, allowed, open)
	}
	b.checkNoCSPViolations()
}

// TestBrowserPlanFooterWithEvidenceOpen: with an item's calls opened, the
// plan box still shows its footer whole, inside the box and not scrolled
// out of it, at a laptop's and a phone's size.
func TestBrowserPlanFooterWithEvidenceOpen(t *testing.T) {
	t.Parallel()
	p := demoBot(t, "30ms")
	defer p.stop(t)
	bctx := newBrowser(t, 3*time.Minute)
	for _, vp := range viewports {
		b := openTab(t, bctx, p, vp, p.URL+"/")
		b.newThread()
		b.send("a plan with evidence (" + vp.name + ")")
		b.approveAndFinish()
		// Open every item's calls.
		b.eval(`(() => { for (const d of document.querySelectorAll("#plan-items details.evidence")) d.open = true; return "ok"; })()`)
		b.waitJS(5*time.Second, "the calls listed", `document.querySelectorAll("#plan-items .calls li.call").length >= 2`)
		b.shot("console-evidence-open")
		var box struct{ PlanTop, PlanBottom, FootTop, FootBottom, FootHeight float64 }
		b.evalJSON(`(() => { const p = document.getElementById("plan"), f = document.getElementById("plan-footer");
		  const pr = p.getBoundingClientRect(), fr = f.getBoundingClientRect();
		  return { PlanTop: pr.top + p.clientTop, PlanBottom: pr.top + p.clientTop + p.clientHeight, FootTop: fr.top, FootBottom: fr.bottom, FootHeight: fr.height }; })()`, &box)
		if box.FootHeight == 0 || box.FootTop < box.PlanTop-0.5 || box.FootBottom > box.PlanBottom+0.5 {
			t.Errorf("%s: the footer spans %.1f-%.1f px, the plan box shows %.1f-%.1f: want the footer whole inside it", vp.name, box.FootTop, box.FootBottom, box.PlanTop, box.PlanBottom)
		}
		b.checkNoCSPViolations()
	}
}

// TestBrowserUsageFollowsTheSession: the thread's token counter follows
// the session's usage as the turn goes on, without a reload: when the
// turn is over it says what the store says.
func TestBrowserUsageFollowsTheSession(t *testing.T) {
	t.Parallel()
	p := demoBot(t, "30ms")
	defer p.stop(t)
	bctx := newBrowser(t, 3*time.Minute)
	b := openTab(t, bctx, p, viewports[0], p.URL+"/")
	b.newThread()
	b.send("count my tokens")
	b.approveAndFinish()
	var want string
	waitFor(t, 10*time.Second, "usage in the API", func() bool {
		var view struct {
			Thread struct {
				UsageText string `json:"usage_text"`
			} `json:"thread"`
		}
		getJSON(t, p.URL+"/api/threads/"+b.openID(), &view)
		want = view.Thread.UsageText
		return want != ""
	})
	b.waitJS(10*time.Second, "the counter to say "+want, `document.getElementById("usage").textContent === `+jsString(want))
}
