package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// pillsSeen is the sequence of texts a status pill showed, as pageProbe
// recorded them: scope is a thread key for the sidebar's pill, or the id of
// the pill in the thread's header ("status", "plan-status").
func (b *tab) pillsSeen(scope string) []string {
	b.t.Helper()
	var seen []string
	b.evalJSON(`(window.__seen.pills[`+jsString(scope)+`] || [])`, &seen)
	return seen
}

func jsString(s string) string {
	return fmt.Sprintf("%q", s) // Go's quoting is valid JavaScript for these ASCII keys
}

// inOrder reports whether want appear in got in this order (not
// necessarily next to each other).
func inOrder(got []string, want ...string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// headPills is what the open thread's pills showed: the thread header's and
// the plan header's, merged in time (each records only its own changes).
func (b *tab) headPills() []string {
	return append(b.pillsSeen("status"), b.pillsSeen("plan-status")...)
}

// TestBrowserRunState: a new thread shows "working…" and a working pill at
// once, in the thread and in the sidebar; the pill says "waiting for
// approval" while the card waits and "done" at the end; a follow-up in the
// same thread shows "working…" again. (Issue 10: the sidebar said idle for
// the whole run and "working…" never showed for new threads or follow-ups.)
func TestBrowserRunState(t *testing.T) {
	t.Parallel()
	p := demoBot(t, "300ms")
	defer p.stop(t)
	bctx := newBrowser(t, 4*time.Minute)

	for _, vp := range viewports {
		b := openTab(t, bctx, p, vp, p.URL+"/")
		b.newThread()
		b.send("draft the quarterly report (" + vp.name + ")")
		b.waitJS(20*time.Second, "the new thread to open", `location.hash.length > 1`)
		b.waitJS(20*time.Second, `"working…" while the first turn runs`, `window.__seen.working > 0`)
		key := b.eval(`(document.querySelector('#thread-list li[data-id="' + CSS.escape(decodeURIComponent(location.hash.slice(1))) + '"]') || { dataset: {} }).dataset.key || ""`)
		if key == "" {
			t.Fatalf("%s: the new thread has no row in the sidebar\npage: %s", vp.name, b.diag())
		}
		b.waitJS(20*time.Second, "a working pill in the sidebar", `(window.__seen.pills[`+jsString(key)+`] || []).includes("working")`)
		b.waitJS(20*time.Second, "a working pill on the thread", `[...(window.__seen.pills.status || []), ...(window.__seen.pills["plan-status"] || [])].includes("working")`)
		b.shot("run-state-working")

		b.waitJS(60*time.Second, "the approval card", `document.querySelectorAll("#messages li.card button.allow").length === 1`)
		b.waitJS(10*time.Second, "the pills to say waiting for approval", `document.getElementById("plan-status").textContent === "waiting for approval" && document.querySelector('#thread-list li[data-key=`+jsString(key)+`] .pill').textContent === "waiting for approval"`)
		if b.eval(`document.getElementById("working").hidden`) != "true" {
			t.Errorf(`%s: "working…" shows while the turn waits for approval`, vp.name)
		}
		b.showThreads()
		b.shot("run-state-waiting")
		b.click(`#thread-list li[data-key="` + key + `"] .thread-link`)
		b.approveAndFinish()
		b.waitJS(10*time.Second, "the pills to say done", `document.getElementById("plan-status").textContent === "done" && document.querySelector('#thread-list li[data-key=`+jsString(key)+`] .pill').textContent === "done"`)
		b.waitJS(10*time.Second, `"working…" to go away after the turn`, `document.getElementById("working").hidden`)
		if side := b.pillsSeen(key); !inOrder(side, "working", "waiting for approval", "done") {
			t.Errorf("%s: sidebar pill showed %q, want working, waiting for approval, done", vp.name, side)
		}
		if head := b.headPills(); !slices.Contains(head, "working") || !slices.Contains(head, "waiting for approval") || !slices.Contains(head, "done") {
			t.Errorf("%s: thread pills showed %q, want working, waiting for approval and done", vp.name, head)
		}

		// A follow-up in the same thread: "working…" shows again.
		before := b.eval(`window.__seen.working`)
		sideBefore := len(b.pillsSeen(key))
		b.send("now make it shorter")
		b.waitJS(20*time.Second, `"working…" again for the follow-up`, `window.__seen.working > `+before)
		b.waitJS(20*time.Second, "the sidebar pill to say working again", `(window.__seen.pills[`+jsString(key)+`] || []).slice(`+fmt.Sprint(sideBefore)+`).includes("working")`)
		b.shot("run-state-followup")
		// End the follow-up with Stop. (Its approval card cannot be used:
		// the demo model repeats its tool call ids in every turn, so the
		// second card has the first card's id and the console is shown
		// the first, decided card again.)
		b.waitJS(60*time.Second, "the follow-up to wait for approval", `document.getElementById("plan").dataset.state === "waiting for approval"`)
		b.waitJS(10*time.Second, "the Stop button", `!document.getElementById("stop").hidden`)
		b.click("#stop")
		b.waitJS(20*time.Second, "the pills to say stopped", `document.getElementById("plan-status").textContent === "stopped" && document.querySelector('#thread-list li[data-key=`+jsString(key)+`] .pill').textContent === "stopped"`)
		b.waitJS(10*time.Second, `"working…" to go away after Stop`, `document.getElementById("working").hidden && document.getElementById("stop").hidden`)
		// The click's answer (the plan as it was) must not overwrite the
		// stopped plan that its live event brought first.
		b.waitJS(10*time.Second, "the footer to say who stopped it", `document.getElementById("plan-footer").textContent.includes("stopped by")`)
		b.shot("run-state-stopped")
		b.checkNoCSPViolations()
	}
}

// TestBrowserNoDuplicateMessages starts new threads against a bot with no
// model (which answers at once, the case where the live echo and the
// thread's load race) and checks every message shows once, in order, and
// as the server has them. (Issue 10: messages appeared twice or out of
// order in 2 runs out of 3.)
func TestBrowserNoDuplicateMessages(t *testing.T) {
	t.Parallel()
	p := startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0"}, botBinary)
	defer p.stop(t)
	bctx := newBrowser(t, 4*time.Minute)
	api := apiClient{t, p.URL}

	for _, vp := range viewports {
		b := openTab(t, bctx, p, vp, p.URL+"/")
		for i := range 4 {
			task := fmt.Sprintf("task %d on the %s", i+1, vp.name)
			b.newThread()
			b.send(task)
			b.waitJS(20*time.Second, "the no-model answer", `[...document.querySelectorAll("#messages > li")].some((li) => li.textContent.includes("No model is configured"))`)
			id := b.openID()
			// Proof that the page has had every event of this turn: a
			// thread created later (its event follows them on the same
			// stream) shows in the list, and no fetch is still in flight.
			marker := fmt.Sprintf("marker %d %s", i+1, vp.name)
			if status, body := api.do("POST", "/api/threads", map[string]string{"text": marker}); status != 201 {
				t.Fatalf("%s: create the marker thread: %d %s", vp.name, status, body)
			}
			b.waitJS(20*time.Second, "the marker thread in the list", `[...document.querySelectorAll("#thread-list > li")].some((li) => li.textContent.includes(`+jsString(marker)+`))`)
			b.waitJS(10*time.Second, "the open thread's fetches to finish", `document.body.dataset.loading !== "1"`)

			var got []string
			b.evalJSON(messagesJS, &got)
			server := api.thread(id)
			var want []string
			for _, m := range server.Messages {
				who := "bot"
				if m.Role == "user" {
					who = "user"
				}
				want = append(want, who+": "+firstRunes(strings.TrimSpace(m.Text), 30))
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s run %d: page shows %q, server has %q", vp.name, i+1, got, want)
			}
			if len(got) != 2 || got[0] != "user: "+firstRunes(task, 30) {
				t.Errorf("%s run %d: page shows %q, want the task once then the answer once", vp.name, i+1, got)
			}
		}
		b.shot("no-duplicates")
		b.checkNoCSPViolations()
	}

	// With 16 threads the list is longer than the screen: it scrolls on
	// its own, the page does not, and the composer stays at the bottom.
	for _, vp := range viewports {
		b := openTab(t, bctx, p, vp, p.URL+"/")
		b.waitJS(10*time.Second, "all 16 threads in the list", `document.querySelectorAll("#thread-list > li").length === 16`)
		b.showThreads()
		layout := b.eval(`JSON.stringify({
		  list: document.getElementById("threads").scrollHeight > document.getElementById("threads").clientHeight,
		  page: document.documentElement.scrollHeight <= innerHeight,
		  composer: Math.abs(document.getElementById("send").getBoundingClientRect().bottom - innerHeight) <= 1,
		})`)
		if layout != `{"list":true,"page":true,"composer":true}` {
			t.Errorf("%s: list scrolls on its own, page does not, composer at the bottom: %s", vp.name, layout)
		}
		b.eval(`document.getElementById("threads").scrollTop = 1e6`)
		b.shot("threads-scrolled")
	}
}

func firstRunes(s string, n int) string {
	r := []rune(s)
	if len(r) > n {
		r = r[:n]
	}
	return string(r)
}

// TestBrowserRevisionHistory: the revision history shows a readable diff
// of each revision of the open thread only, and refreshes while open as
// the plan moves. (Issue 10: it leaked between threads and never
// refreshed while open.)
func TestBrowserRevisionHistory(t *testing.T) {
	t.Parallel()
	p := demoBot(t, "300ms")
	defer p.stop(t)
	bctx := newBrowser(t, 5*time.Minute)
	api := apiClient{t, p.URL}

	for _, vp := range viewports {
		b := openTab(t, bctx, p, vp, p.URL+"/")
		alpha, bravo := "alpha release notes "+vp.name, "bravo launch checklist "+vp.name
		b.newThread()
		b.send(alpha)
		b.waitJS(20*time.Second, "thread alpha to open", `location.hash.length > 1`)
		alphaID := b.openID()
		b.approveAndFinish()
		alphaRevs := len(api.planRevisions(alphaID))

		b.click("#plan-history-toggle")
		b.waitJS(10*time.Second, "alpha's history", `document.querySelectorAll("#plan-revisions > li").length === `+fmt.Sprint(alphaRevs))
		// Readable: the first revision lists the items added, later ones
		// say which item changed status.
		b.waitJS(5*time.Second, "the first revision's added items", `document.querySelectorAll('#plan-revisions > li[data-revision="1"] .diff li.added').length === 4`)
		b.waitJS(5*time.Second, "a status change in a later revision", `document.querySelectorAll('#plan-revisions > li:not([data-revision="1"]) .diff li.changed').length > 0`)
		if txt := b.eval(`document.querySelector('#plan-revisions > li[data-revision="2"]').textContent`); !strings.Contains(txt, "Read the request: "+alpha[:10]) {
			t.Errorf("%s: revision 2 reads %q, want the item whose status changed", vp.name, txt)
		}
		b.shot("history-alpha")

		// Thread bravo: while it runs, its history refreshes, and never
		// shows alpha's revisions.
		b.newThread()
		b.send(bravo)
		b.waitJS(20*time.Second, "thread bravo to open", `location.hash.length > 1 && decodeURIComponent(location.hash.slice(1)) !== `+jsString(alphaID))
		bravoID := b.openID()
		counts := map[string]bool{}
		deadline := time.Now().Add(60 * time.Second)
		for b.eval(`document.querySelectorAll("#messages li.card button.allow").length`) != "1" {
			if time.Now().After(deadline) {
				t.Fatalf("%s: bravo never asked for approval\npage: %s", vp.name, b.diag())
			}
			hist := b.eval(`document.getElementById("plan-revisions").textContent`)
			if strings.Contains(hist, "alpha") {
				t.Fatalf("%s: bravo's history shows alpha's revisions: %q", vp.name, hist)
			}
			counts[b.eval(`document.querySelectorAll("#plan-revisions > li").length`)] = true
			time.Sleep(40 * time.Millisecond)
		}
		b.waitJS(10*time.Second, "bravo's history to catch up with its plan", `document.querySelectorAll("#plan-revisions > li").length === Number(document.getElementById("plan").dataset.revision)`)
		counts[b.eval(`document.querySelectorAll("#plan-revisions > li").length`)] = true
		delete(counts, "0")
		if len(counts) < 2 {
			t.Errorf("%s: bravo's open history showed %v revision counts while the plan moved, want it to refresh", vp.name, counts)
		}
		b.approveAndFinish()
		bravoRevs := len(api.planRevisions(bravoID))
		b.waitJS(10*time.Second, "bravo's full history", `document.querySelectorAll("#plan-revisions > li").length === `+fmt.Sprint(bravoRevs))
		if hist := b.eval(`document.getElementById("plan-revisions").textContent`); strings.Contains(hist, "alpha") || !strings.Contains(hist, "bravo") {
			t.Errorf("%s: bravo's history reads %q", vp.name, hist)
		}
		b.shot("history-bravo")

		// Back to alpha: its own history again.
		b.showThreads()
		b.click(`#thread-list li[data-id="` + alphaID + `"] .thread-link`)
		b.waitJS(10*time.Second, "alpha's history again", `document.querySelectorAll("#plan-revisions > li").length === `+fmt.Sprint(alphaRevs)+` && document.getElementById("plan-revisions").textContent.includes("alpha")`)
		if hist := b.eval(`document.getElementById("plan-revisions").textContent`); strings.Contains(hist, "bravo") {
			t.Errorf("%s: alpha's history shows bravo's revisions: %q", vp.name, hist)
		}
		b.checkNoCSPViolations()
	}
}

// planRevisions is GET /api/threads/{id}/plans.
func (c apiClient) planRevisions(id string) []map[string]any {
	c.t.Helper()
	status, body := c.do("GET", "/api/threads/"+id+"/plans", nil)
	var revs []map[string]any
	if status != 200 || json.Unmarshal(body, &revs) != nil {
		c.t.Fatalf("GET /api/threads/%s/plans: %d %s", id, status, body)
	}
	return revs
}

// TestBrowserReconnect kills the bot while a turn runs: the page says it
// is reconnecting and disables Send; after a restart on the same address
// it resyncs without a reload and shows "working…" again as the turn
// resumes. (Issue 10: no sign the bot was down, Send failed silently, and
// no "working…" after a restart until a reload.)
func TestBrowserReconnect(t *testing.T) {
	t.Parallel()
	bctx := newBrowser(t, 5*time.Minute)
	for _, vp := range viewports {
		db := filepath.Join(t.TempDir(), "p.db")
		env := map[string]string{"PINPLAN_DB": db, "PINPLAN_HTTP_ADDR": "127.0.0.1:0", "PINPLAN_DEMO_DELAY": "1500ms"}
		p := startBot(t, env, botBinary, "-demo")
		b := openTab(t, bctx, p, vp, p.URL+"/")
		b.eval(`window.__noReload = "yes"`)
		b.newThread()
		b.send("write the incident summary (" + vp.name + ")")
		b.waitJS(20*time.Second, "the plan while the turn runs", `Number(document.getElementById("plan").dataset.revision || 0) >= 1 && document.getElementById("plan").dataset.state === "working"`)

		p.kill()
		b.waitJS(15*time.Second, "the reconnecting banner", `(() => { const c = document.getElementById("conn"); return c && !c.hidden && /reconnecting/i.test(c.textContent); })()`)
		b.waitJS(5*time.Second, "Send to be disabled", `document.querySelector('#send button[type="submit"]').disabled`)
		// Enter while down sends nothing and keeps the draft.
		b.setDraft("one more thing")
		b.do(chromedp.KeyEvent("\r"))
		if got := b.eval(`document.getElementById("text").value`); got != "one more thing" {
			t.Errorf("%s: the draft is %q after Enter while down, want it kept", vp.name, got)
		}
		b.shot("reconnecting")
		// A thread that cannot be loaded while the bot is down is not
		// "not found"; coming back to the first thread finds its draft.
		id := b.openID()
		b.eval(`location.hash = "#ffffffffffffffff"`)
		b.waitJS(10*time.Second, "the load error for a thread opened while down", `!document.getElementById("load-error").hidden`)
		if got := b.eval(`document.getElementById("thread-title").textContent + " / " + document.getElementById("load-error").textContent`); strings.Contains(strings.ToLower(got), "not found") {
			t.Errorf("%s: a thread opened while the bot is down reads %q; only a 404 is not found", vp.name, got)
		}
		b.eval(`history.back()`)
		b.waitJS(10*time.Second, "the first thread again", `decodeURIComponent(location.hash.slice(1)) === `+jsString(id))
		if got := b.eval(`document.getElementById("text").value`); got != "one more thing" {
			t.Errorf("%s: the first thread's draft is %q after going away and back, want it kept", vp.name, got)
		}

		u, err := url.Parse(p.URL)
		if err != nil {
			t.Fatal(err)
		}
		env["PINPLAN_HTTP_ADDR"] = u.Host
		p2 := startBot(t, env, botBinary, "-demo")
		b.bot = p2
		b.waitJS(30*time.Second, "the banner to go once the bot is back", `document.getElementById("conn").hidden && document.body.dataset.live === "1"`)
		b.waitJS(10*time.Second, "Send enabled again", `!document.querySelector('#send button[type="submit"]').disabled`)
		// The resumed turn has rounds to go before its approval card: the
		// page learns from the new process that it resumed, and shows
		// "working…" for it.
		b.waitJS(30*time.Second, "the resumed turn's pill", `document.getElementById("plan-status").textContent === "resumed after restart" || document.querySelectorAll("#messages li.card button.allow").length === 1`)
		if got := b.eval(`document.getElementById("plan-status").textContent`); got != "resumed after restart" {
			t.Errorf("%s: the pill says %q after the restart, want resumed after restart\npage: %s", vp.name, got, b.diag())
		}
		if b.eval(`document.getElementById("working").hidden`) == "true" {
			t.Errorf(`%s: "working…" is not showing while the turn resumes\npage: %s`, vp.name, b.diag())
		}
		b.shot("reconnected")
		if b.eval(`window.__noReload`) != "yes" {
			t.Errorf("%s: the page reloaded", vp.name)
		}
		b.approveAndFinish()
		// The draft typed while down goes now.
		b.click(`#send button[type="submit"]`)
		b.waitJS(10*time.Second, "the draft sent after the restart", `[...document.querySelectorAll("#messages > li.user")].some((li) => li.textContent.includes("one more thing"))`)
		b.checkNoCSPViolations()
		p2.stop(t)
	}
}
