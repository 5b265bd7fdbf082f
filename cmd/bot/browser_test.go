package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/pinplan/pinplan/chat"
)

// chromiumPath finds Debian's chromium (.ci/run installs it).
func chromiumPath(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	missing(t, os.Getenv("CI") == "true", "no chromium on PATH: install it with `apt-get install -y chromium` (as root), or run `bash .ci/run`")
	return ""
}

// missing ends a test whose tool is not installed: a skip that says how to
// get it, or under CI=true (where .ci/run installs every one) a failure.
func missing(t testing.TB, ci bool, how string) {
	t.Helper()
	if ci {
		t.Fatal(how)
	} else {
		t.Skip(how)
	}
}

// viewport is a screen the console is tried at.
type viewport struct {
	name   string
	w, h   int64
	mobile bool
}

// viewports are the widths issue 10 asks for: a laptop and a phone.
var viewports = []viewport{{"desktop", 1100, 800, false}, {"phone", 390, 844, true}}

// newBrowser starts headless Chromium for one test. The whole browser is
// stopped after limit, so no test can hang on it.
func newBrowser(t *testing.T, limit time.Duration, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true), chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1100, 800),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(opts, extra...)...)
	bctx, cancel := chromedp.NewContext(actx)
	if err := chromedp.Do(bctx); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	timer := time.AfterFunc(limit, cancel) // bound the test without a timeout on the first Run
	t.Cleanup(func() {
		timer.Stop()
		cancel()
		cancelAlloc()
	})
	return bctx
}

// pageProbe runs in every page before its own scripts: it records CSP
// violations, window.confirm calls and, on every DOM change, the status
// pills and the "working…" line, so a test sees states that last only a
// moment without polling for them.
const pageProbe = `(() => {
  window.__csp = [];
  document.addEventListener("securitypolicyviolation", (e) => window.__csp.push(e.violatedDirective + " " + e.blockedURI));
  window.__confirms = 0;
  const confirm0 = window.confirm;
  window.confirm = (...a) => { window.__confirms++; return confirm0.apply(window, a); };
  const seen = window.__seen = { pills: {}, working: 0, conn: 0 };
  const scan = () => {
    for (const p of document.querySelectorAll(".pill")) {
      if (p.hidden || !p.textContent) continue;
      const row = p.closest("[data-key]");
      const scope = row ? row.dataset.key : (p.id || "?");
      const list = seen.pills[scope] || (seen.pills[scope] = []);
      if (list[list.length - 1] !== p.textContent) list.push(p.textContent);
    }
    const w = document.getElementById("working");
    if (w && !w.hidden && w.offsetParent !== null) seen.working++;
    const c = document.getElementById("conn");
    if (c && !c.hidden) seen.conn++;
  };
  new MutationObserver(scan).observe(document, { subtree: true, childList: true, characterData: true, attributes: true });
})()`

// tab is one browser tab on the console at one viewport.
type tab struct {
	t   *testing.T
	ctx context.Context
	vp  viewport
	bot *botProc
}

// openTab opens a new tab at vp, loads url and waits until the console's
// event stream is live.
func openTab(t *testing.T, bctx context.Context, bot *botProc, vp viewport, url string, opts ...chromedp.ContextOption) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(bctx, opts...)
	t.Cleanup(cancel)
	emulate := chromedp.EmulateViewport(vp.w, vp.h)
	if vp.mobile {
		emulate = chromedp.EmulateViewport(vp.w, vp.h, chromedp.EmulateMobile, chromedp.EmulateTouch)
	}
	probe := chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: pageProbe})
		return err
	})
	if err := chromedp.Do(ctx, emulate, probe); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	tb := &tab{t: t, ctx: ctx, vp: vp, bot: bot}
	if url != "" {
		if bot != nil && bot.Token != "" && url == bot.URL+"/" {
			url = bot.link() // the URL the bot printed: it signs the browser in
		}
		tb.do(chromedp.Navigate(url))
		tb.waitLive()
	}
	return tb
}

func (b *tab) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v\npage: %s%s", b.vp.name, err, b.diag(), b.botLog())
	}
}

// eval runs a JavaScript expression and returns its value as a string.
func (b *tab) eval(expr string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`String(`+expr+`)`))
	if err != nil {
		b.t.Fatalf("%s: evaluate %s: %v%s", b.vp.name, expr, err, b.botLog())
	}
	return v
}

// evalJSON runs a JavaScript expression and decodes its JSON value into v.
func (b *tab) evalJSON(expr string, v any) {
	b.t.Helper()
	raw := b.eval(`JSON.stringify(` + expr + `)`)
	if err := json.Unmarshal([]byte(raw), v); err != nil {
		b.t.Fatalf("%s: decode %s: %v (%s)", b.vp.name, expr, err, raw)
	}
}

// waitJS polls a JavaScript condition until it is true, and fails with
// what the page showed when it is not true within d.
func (b *tab) waitJS(d time.Duration, what, cond string) {
	b.t.Helper()
	deadline := time.Now().Add(d)
	for b.eval(`!!(`+cond+`)`) != "true" {
		if time.Now().After(deadline) {
			b.t.Fatalf("%s: timed out after %v waiting for %s\npage: %s%s", b.vp.name, d, what, b.diag(), b.botLog())
		}
		time.Sleep(40 * time.Millisecond)
	}
}

// diag is what the page shows, for failure messages.
func (b *tab) diag() string {
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`JSON.stringify({
	  url: location.href,
	  title: (document.getElementById("thread-title") || {}).textContent,
	  sendError: (document.getElementById("send-error") || {}).textContent,
	  live: document.body && document.body.dataset.live,
	  threads: [...document.querySelectorAll("#thread-list > li")].map((li) => li.textContent.replace(/\s+/g, " ").trim()).slice(0, 8),
	  messages: [...document.querySelectorAll("#messages > li")].map((li) => li.className + ": " + li.textContent.replace(/\s+/g, " ").trim().slice(0, 100)),
	  plan: (document.getElementById("plan-footer") || {}).textContent,
	  note: (document.getElementById("plan-note") || {}).textContent,
	  seen: window.__seen,
	})`))
	if err != nil {
		return "(page not readable: " + err.Error() + ")"
	}
	return v
}

func (b *tab) botLog() string {
	if b.bot == nil {
		return ""
	}
	s := b.bot.stderr.String()
	if len(s) > 3000 {
		s = "…" + s[len(s)-3000:]
	}
	return "\nbot stderr (end):\n" + s
}

// shot saves a full-page screenshot as test-output/<name>-<viewport>.png.
func (b *tab) shot(name string) {
	b.t.Helper()
	saveScreenshot(b.t, b.ctx, fmt.Sprintf("%s-%s.png", name, b.vp.name))
}

// waitLive waits for the page to load and its event stream to connect.
func (b *tab) waitLive() {
	b.t.Helper()
	b.waitJS(20*time.Second, "the console to connect its event stream", `document.readyState === "complete" && document.body.dataset.live === "1"`)
}

// showThreads makes the thread list visible: on a phone it is a drawer,
// opened with the toggle in the top bar.
func (b *tab) showThreads() {
	b.t.Helper()
	toggle := `(() => { const t = document.getElementById("threads-toggle"); return !!t && t.getBoundingClientRect().width > 0; })()`
	if b.eval(toggle) != "true" {
		return // a wide screen: the list is always there
	}
	if b.eval(`document.body.classList.contains("drawer-open")`) != "true" {
		b.click("#threads-toggle")
	}
	b.waitJS(5*time.Second, "the thread drawer to open", `(() => { const r = document.getElementById("threads").getBoundingClientRect(); return r.left >= 0 && getComputedStyle(document.getElementById("threads")).visibility === "visible"; })()`)
}

// click clicks the element sel names once nothing covers it (a drawer
// sliding away, a dialog) and it stays where it is over two looks (a
// message just added may still be scrolling the page): a real click
// lands on whatever is at that point of the screen.
func (b *tab) click(sel string) {
	b.t.Helper()
	b.waitJS(10*time.Second, "nothing covering "+sel+", and it not moving", `(() => {
	  const e = document.querySelector(`+jsString(sel)+`);
	  if (!e) return false;
	  e.scrollIntoView({ block: "nearest" });
	  const r = e.getBoundingClientRect();
	  const top = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
	  if (!top || !(top === e || e.contains(top))) return false;
	  const at = [`+jsString(sel)+`, r.left, r.top, r.width, r.height].join(" ");
	  const still = window.__clickAt === at;
	  window.__clickAt = at;
	  return still;
	})()`)
	b.do(chromedp.Click(chromedp.CSS(sel)))
	b.eval(`window.__clickAt = ""`) // the next click looks twice again
}

// newThread goes to an empty composer for a new thread.
func (b *tab) newThread() {
	b.t.Helper()
	b.showThreads()
	b.click("#new-thread")
	b.waitJS(5*time.Second, "an empty new thread", `location.hash === "" || location.hash === "#"`)
}

// send types text into the composer and presses the Send button.
func (b *tab) send(text string) {
	b.t.Helper()
	b.setDraft(text)
	b.click(`#send button[type="submit"]`)
}

// setDraft puts text in the composer as if typed (typing 20,000 keys
// one by one would take minutes).
func (b *tab) setDraft(text string) {
	b.t.Helper()
	raw, _ := json.Marshal(text)
	b.eval(`(() => { const ta = document.getElementById("text"); ta.focus(); ta.value = ` + string(raw) + `; ta.dispatchEvent(new Event("input", { bubbles: true })); return "ok"; })()`)
}

// openID is the id of the open thread, from the address bar.
func (b *tab) openID() string {
	b.t.Helper()
	return b.eval(`decodeURIComponent(location.hash.slice(1))`)
}

// checkNoCSPViolations fails when the page broke its own content security
// policy (an inline style or script the server's CSP refuses).
func (b *tab) checkNoCSPViolations() {
	b.t.Helper()
	if v := b.eval(`JSON.stringify(window.__csp || [])`); v != "[]" {
		b.t.Errorf("%s: the page broke its content security policy: %s", b.vp.name, v)
	}
}

// apiClient calls the console's API as the page's own origin would.
type apiClient struct {
	t    testing.TB
	base string
}

func (c apiClient) do(method, path string, body any) (int, []byte) {
	c.t.Helper()
	var r io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		r = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", c.base)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// apiSummary is a thread as GET /api/threads lists it.
type apiSummary struct {
	ID       string     `json:"id"`
	Key      string     `json:"key"`
	Platform string     `json:"platform"`
	Title    string     `json:"title"`
	State    string     `json:"state"`
	Status   string     `json:"status"`
	Plan     *chat.Plan `json:"plan"`
	Seq      int64      `json:"seq"`
}

type apiMessage struct {
	Role string `json:"role"`
	Text string `json:"text"`
}

type apiThread struct {
	Thread   apiSummary   `json:"thread"`
	Messages []apiMessage `json:"messages"`
	Seq      int64        `json:"seq"`
}

func (c apiClient) threads() []apiSummary {
	c.t.Helper()
	status, body := c.do("GET", "/api/threads", nil)
	var list []apiSummary
	if status != http.StatusOK || json.Unmarshal(body, &list) != nil {
		c.t.Fatalf("GET /api/threads: %d %s", status, body)
	}
	return list
}

func (c apiClient) thread(id string) apiThread {
	c.t.Helper()
	status, body := c.do("GET", "/api/threads/"+id, nil)
	var th apiThread
	if status != http.StatusOK || json.Unmarshal(body, &th) != nil {
		c.t.Fatalf("GET /api/threads/%s: %d %s", id, status, body)
	}
	return th
}

// demoBot starts the bot with the scripted demo model.
func demoBot(t *testing.T, delay string) *botProc {
	t.Helper()
	return startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0", "PINPLAN_DEMO_DELAY": delay}, botBinary, "-demo")
}

// approveAndFinish presses Allow once on the demo's approval card and
// waits for the plan to reach done.
func (b *tab) approveAndFinish() {
	b.t.Helper()
	b.waitJS(60*time.Second, "the approval card", `document.querySelectorAll("#messages li.card button.allow").length === 1`)
	b.click("#messages li.card button.allow")
	b.waitJS(60*time.Second, "the plan to reach done", `document.getElementById("plan").dataset.state === "done" && !!document.querySelector("#messages li.assistant")`)
}

// messagesJS lists the messages the page shows (not the approval cards),
// each as "user: " or "bot: " and its first 30 characters.
const messagesJS = `[...document.querySelectorAll("#messages > li:not(.card)")].map((li) => {
  const body = li.querySelector(".body");
  const text = body ? body.textContent : [...li.childNodes].filter((n) => !(n.classList && n.classList.contains("who"))).map((n) => n.textContent).join("");
  return (li.classList.contains("user") ? "user" : "bot") + ": " + text.trim().slice(0, 30);
})`

// TestBrowserConsole drives the console in real headless Chromium: start a
// thread, send a task, watch the pinned plan move through its revisions to
// done without a reload, then reload and see the same state.
func TestBrowserConsole(t *testing.T) {
	t.Parallel()
	p := demoBot(t, "250ms")
	defer p.stop(t)
	bctx := newBrowser(t, 4*time.Minute)
	api := apiClient{t, p.URL}

	for _, vp := range viewports {
		b := openTab(t, bctx, p, vp, p.URL+"/")
		task := "prepare the v2 release notes (" + vp.name + ")"
		b.eval(`window.__noReload = "yes"`)
		b.newThread()
		b.send(task)
		b.waitJS(30*time.Second, "the pinned plan", `!document.getElementById("plan").hidden`)

		revisions := map[string]bool{}
		var state, rev string
		sawStop, approved := false, false
		deadline := time.Now().Add(60 * time.Second)
		for state != "done" {
			if time.Now().After(deadline) {
				t.Fatalf("%s: plan never reached done; saw revisions %v, state %q\npage: %s", vp.name, revisions, state, b.diag())
			}
			rev = b.eval(`document.getElementById("plan").dataset.revision || ""`)
			state = b.eval(`document.getElementById("plan").dataset.state || ""`)
			if rev != "" {
				revisions[rev] = true
			}
			if b.eval(`!document.getElementById("stop").hidden`) == "true" {
				sawStop = true
			}
			// The demo's write asks first: press Allow once on its card.
			if !approved && b.eval(`document.querySelectorAll("#messages li.card button.allow").length`) == "1" {
				// The card's event and the plan's can arrive in either order.
				b.waitJS(10*time.Second, "the plan to say waiting for approval while the card waits", `document.getElementById("plan").dataset.state === "waiting for approval"`)
				b.shot("console-approval-card")
				b.click("#messages li.card button.allow")
				approved = true
			}
			time.Sleep(40 * time.Millisecond)
		}
		if !approved || !sawStop {
			t.Errorf("%s: approval card pressed %t, Stop button seen %t; want both", vp.name, approved, sawStop)
		}
		b.waitJS(10*time.Second, "the card's outcome", `(document.querySelector("#messages li.card .status") || {}).textContent.startsWith("Allowed once by")`)
		if b.eval(`document.querySelectorAll("#messages li.card button").length`) != "0" || b.eval(`document.getElementById("stop").hidden`) != "true" {
			t.Errorf("%s: buttons left on the decided card or Stop left after the turn", vp.name)
		}
		if len(revisions) < 3 {
			t.Errorf("%s: saw revisions %v live, want the plan to move through several", vp.name, revisions)
		}
		b.waitJS(10*time.Second, "the answer", `!!document.querySelector("#messages li.assistant")`)
		title := b.eval(`document.getElementById("plan-title").textContent`)
		footer := b.eval(`document.getElementById("plan-footer").textContent`)
		completed := b.eval(`document.querySelectorAll("#plan-items li.completed s").length`)
		if b.eval(`window.__noReload`) != "yes" {
			t.Errorf("%s: the page reloaded while the plan moved", vp.name)
		}
		if title != "Plan · 4/4 done" || completed != "4" || !strings.Contains(footer, "done") {
			t.Errorf("%s: final plan: title %q, %s completed and struck through, footer %q", vp.name, title, completed, footer)
		}
		// The footer is the server's chat.Plan.Footer, character for character.
		th := api.thread(b.openID())
		if th.Thread.Plan == nil {
			t.Fatalf("%s: the API shows no plan for %s", vp.name, b.openID())
		}
		if want := th.Thread.Plan.Footer(); footer != want {
			t.Errorf("%s: footer %q, want chat.Plan.Footer %q", vp.name, footer, want)
		}
		// Each message once, in order: the task, then the answer.
		var msgs []string
		b.evalJSON(messagesJS, &msgs)
		if len(msgs) != 2 || !strings.HasPrefix(msgs[0], "user: "+task[:20]) || !strings.HasPrefix(msgs[1], "bot: Done:") {
			t.Errorf("%s: messages %q, want the task then one answer", vp.name, msgs)
		}
		// Relative times, with the absolute time in their title.
		if got := b.eval(`[...document.querySelectorAll("#messages > li.msg time")].map((t) => t.textContent + "|" + (t.title !== "" && t.dateTime !== "")).join(" ")`); got != "just now|true just now|true" {
			t.Errorf("%s: message times read %q, want relative times with a title", vp.name, got)
		}
		// The decided card sits where it was decided, before the answer;
		// a reload shows the same order.
		order := `[...document.querySelectorAll("#messages > li")].map((li) => li.classList.contains("card") ? "card" : li.classList.contains("user") ? "user" : "bot").join(" ")`
		if got := b.eval(order); got != "user card bot" {
			t.Errorf("%s: the thread reads %q, want the task, the card, then the answer", vp.name, got)
		}
		// The revision history opens with every stored revision.
		b.click("#plan-history-toggle")
		b.waitJS(10*time.Second, "every revision in the history", `document.querySelectorAll("#plan-revisions > li").length === `+rev)
		b.shot("console-done")

		// Reload: the same state comes back from the server.
		b.do(chromedp.Reload())
		b.waitLive()
		b.waitJS(10*time.Second, "the plan after a reload", `!document.getElementById("plan").hidden`)
		title2 := b.eval(`document.getElementById("plan-title").textContent`)
		rev2 := b.eval(`document.getElementById("plan").dataset.revision`)
		if title2 != title || rev2 != rev {
			t.Errorf("%s: after reload: %q revision %s, want %q revision %s", vp.name, title2, rev2, title, rev)
		}
		b.waitJS(10*time.Second, "the messages after a reload", `document.querySelectorAll("#messages > li").length === 3`)
		if got := b.eval(order); got != "user card bot" {
			t.Errorf("%s: after reload the thread reads %q, want the task, the card, then the answer", vp.name, got)
		}
		b.shot("console-reloaded")
		b.checkNoCSPViolations()
	}
}

func saveScreenshot(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := filepath.Join("..", "..", "test-output")
	os.MkdirAll(dir, 0o755)
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
