package main

import (
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// TestBrowserRejectedMessage: a message the bot rejects (20,000
// characters, over the 16,000 limit) shows the reason next to the composer
// and keeps the draft, both as a first message and in a thread; nothing is
// created. Enter sends and Shift+Enter starts a new line. (Issue 10: a long
// first message showed "Thread not found" and erased the text; in a thread
// the draft was cleared and no reason shown.)
func TestBrowserRejectedMessage(t *testing.T) {
	t.Parallel()
	p := demoBot(t, "300ms")
	defer p.stop(t)
	bctx := newBrowser(t, 4*time.Minute)
	api := apiClient{t, p.URL}
	long := strings.Repeat("lorem ipsum ", 1666) + "dolor sit" // 20,001 characters

	for _, vp := range viewports {
		b := openTab(t, bctx, p, vp, p.URL+"/")
		before := len(api.threads())

		// A first message: no thread, the reason, the draft kept.
		b.newThread()
		b.send(long)
		b.waitJS(10*time.Second, "the reason the message was refused", `(() => { const e = document.getElementById("send-error"); return e && !e.hidden && e.textContent.trim().length > 0; })()`)
		if got := b.eval(`document.getElementById("text").value.length`); got != fmt.Sprint(len(long)) {
			t.Errorf("%s: the draft has %s characters after the refusal, want all %d kept", vp.name, got, len(long))
		}
		if got := b.eval(`document.getElementById("thread-title").textContent`); strings.Contains(got, "not found") {
			t.Errorf("%s: the page says %q for a refused first message", vp.name, got)
		}
		if got := b.openID(); got != "" {
			t.Errorf("%s: the page went to thread %q for a refused first message", vp.name, got)
		}
		if n := len(api.threads()); n != before {
			t.Errorf("%s: %d threads after a refused first message, want %d", vp.name, n, before)
		}
		reason := b.eval(`document.getElementById("send-error").textContent`)
		b.shot("rejected-first-message")

		// Enter sends; Shift+Enter is a new line.
		b.setDraft("")
		b.do(
			chromedp.SendKeys(chromedp.ID("text"), "line one"),
			chromedp.KeyEvent(kb.Enter, chromedp.KeyModifiers(chromedp.ModifierShift)),
			chromedp.SendKeys(chromedp.ID("text"), "line two"),
		)
		if got := b.eval(`document.getElementById("text").value`); got != "line one\nline two" {
			t.Fatalf("%s: Shift+Enter left %q in the composer, want two lines", vp.name, got)
		}
		b.do(chromedp.KeyEvent(kb.Enter))
		b.waitJS(20*time.Second, "the thread started with Enter", `location.hash.length > 1 && !!document.querySelector("#messages > li.user")`)
		if got := b.eval(`document.querySelector("#messages > li.user .body").innerText`); got != "line one\nline two" {
			t.Errorf("%s: the sent message reads %q, want the two lines", vp.name, got)
		}
		if got := b.eval(`document.getElementById("send-error").hidden`); got != "true" {
			t.Errorf("%s: the old refusal still shows after a successful send", vp.name)
		}

		// In the thread: the same refusal, shown, and the draft kept.
		b.send(long)
		b.waitJS(10*time.Second, "the reason a message in the thread was refused", `(() => { const e = document.getElementById("send-error"); return e && !e.hidden && e.textContent.trim().length > 0; })()`)
		if got := b.eval(`document.getElementById("text").value.length`); got != fmt.Sprint(len(long)) {
			t.Errorf("%s: the draft has %s characters after a refusal in a thread, want all %d kept", vp.name, got, len(long))
		}
		if got := b.eval(`document.querySelectorAll("#messages > li.user").length`); got != "1" {
			t.Errorf("%s: %s user messages shown after the refusal, want 1", vp.name, got)
		}
		if th := api.thread(b.openID()); countRole(th.Messages, "user") != 1 {
			t.Errorf("%s: the server has %d user messages, want 1", vp.name, countRole(th.Messages, "user"))
		}
		t.Logf("%s: refusal reads %q", vp.name, reason)
		b.shot("rejected-in-thread")
		b.approveAndFinish() // leave no turn running

		// A thread that does not exist (a real 404): "Thread not found",
		// Send disabled, and what is typed stays.
		b.eval(`location.hash = "#ffffffffffffffff"`)
		b.waitJS(10*time.Second, "Thread not found", `document.getElementById("thread-title").textContent === "Thread not found"`)
		b.setDraft("typed on a missing thread")
		b.waitJS(5*time.Second, "Send disabled on a missing thread", `document.querySelector('#send button[type="submit"]').disabled`)
		b.do(chromedp.KeyEvent(kb.Enter))
		if got := b.eval(`document.getElementById("text").value`); got != "typed on a missing thread" {
			t.Errorf("%s: the draft on a missing thread is %q after Enter, want it kept", vp.name, got)
		}
		b.shot("thread-not-found")
		b.checkNoCSPViolations()
	}
}

func countRole(ms []apiMessage, role string) int {
	n := 0
	for _, m := range ms {
		if m.Role == role {
			n++
		}
	}
	return n
}

// overflowCheck is the widest thing on the page against the screen:
// nothing may make the page scroll sideways, and nothing in the thread or
// the sidebar may stick out of its column.
const overflowCheck = `(() => {
  const out = [];
  const vw = document.documentElement.clientWidth;
  if (document.documentElement.scrollWidth > vw) out.push("page " + document.documentElement.scrollWidth + " > " + vw);
  const col = (sel, root) => {
    const r = document.querySelector(root);
    if (!r) return;
    const box = r.getBoundingClientRect();
    if (box.width === 0 || box.right <= 0) return; // a closed drawer
    for (const e of r.querySelectorAll(sel)) {
      const b = e.getBoundingClientRect();
      if (b.width === 0 || e.closest(".visually-hidden")) continue;
      if (b.right > box.right + 1 || b.left < box.left - 1) out.push(root + " " + e.tagName + "." + e.className + " " + Math.round(b.left) + ".." + Math.round(b.right) + " outside " + Math.round(box.left) + ".." + Math.round(box.right));
    }
  };
  col("*", "#thread");
  col("*", "#threads");
  return JSON.stringify(out.slice(0, 5));
})()`

// TestBrowserLongText: a long unbroken word and a long URL wrap; the page
// never gets wider than the screen. (Issue 10: they spilled over the
// sidebar, and on a phone made the page 703 px wide in a 390 px screen.)
func TestBrowserLongText(t *testing.T) {
	t.Parallel()
	p := demoBot(t, "300ms")
	defer p.stop(t)
	bctx := newBrowser(t, 4*time.Minute)

	word := strings.Repeat("x", 3000)
	link := "https://example.com/" + strings.Repeat("a", 1500)
	for _, vp := range viewports {
		b := openTab(t, bctx, p, vp, p.URL+"/")
		b.newThread()
		b.send("Look at " + word + " and " + link + " please")
		b.waitJS(20*time.Second, "the message and the plan", `!!document.querySelector("#messages > li.user") && !document.getElementById("plan").hidden`)
		b.waitJS(60*time.Second, "the approval card", `!!document.querySelector("#messages li.card")`)
		if got := b.eval(overflowCheck); got != "[]" {
			t.Errorf("%s: the page overflows: %s", vp.name, got)
		}
		if got := b.eval(`document.documentElement.scrollWidth <= ` + fmt.Sprint(vp.w)); got != "true" {
			t.Errorf("%s: document is %s px wide in a %d px screen", vp.name, b.eval(`document.documentElement.scrollWidth`), vp.w)
		}
		if got := b.eval(`Math.abs(document.getElementById("send").getBoundingClientRect().bottom - innerHeight) <= 1`); got != "true" {
			t.Errorf("%s: the composer is not at the bottom of the screen with a long thread", vp.name)
		}
		b.shot("long-text")
		b.showThreads()
		if got := b.eval(overflowCheck); got != "[]" {
			t.Errorf("%s: with the thread list shown, the page overflows: %s", vp.name, got)
		}
		b.shot("long-text-threads")
		b.click(`#thread-list li.current .thread-link`)
		b.approveAndFinish()
		if got := b.eval(overflowCheck); got != "[]" {
			t.Errorf("%s: after the answer the page overflows: %s", vp.name, got)
		}
		b.checkNoCSPViolations()
	}
}

// TestBrowserThreadList: a new thread goes to the top of the list at once;
// on a phone the list is a drawer; a web thread can be renamed, and deleted
// after a confirmation dialog (a real <dialog>, not window.confirm).
// (Issue 10: new threads landed at the bottom, off-screen.)
func TestBrowserThreadList(t *testing.T) {
	t.Parallel()
	p := startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0"}, botBinary)
	defer p.stop(t)
	bctx := newBrowser(t, 4*time.Minute)
	api := apiClient{t, p.URL}

	for _, vp := range viewports {
		b := openTab(t, bctx, p, vp, p.URL+"/")
		var titles []string
		for i := range 3 {
			text := fmt.Sprintf("%s thread %d", vp.name, i+1)
			b.newThread()
			b.send(text)
			b.waitJS(10*time.Second, "the new thread at the top of the list", `(() => { const li = document.querySelector("#thread-list > li"); return !!li && li.textContent.includes(`+jsString(text)+`); })()`)
			titles = append(titles, text)
		}
		b.showThreads()
		if vp.mobile {
			if got := b.eval(`document.getElementById("threads-toggle").getAttribute("aria-expanded")`); got != "true" {
				t.Errorf("phone: the drawer toggle says aria-expanded=%s while open", got)
			}
		}
		b.shot("threads-new-on-top")
		if got := b.eval(overflowCheck); got != "[]" {
			t.Errorf("%s: the thread list overflows: %s", vp.name, got)
		}

		// Pick the oldest: on a phone the drawer closes.
		first := `#thread-list li[data-id="` + idOfTitle(t, api, titles[0]) + `"]`
		b.click(first + ` .thread-link`)
		b.waitJS(10*time.Second, "the oldest thread open", `document.getElementById("thread-title").textContent.includes(`+jsString(titles[0])+`)`)
		if vp.mobile {
			b.waitJS(5*time.Second, "the drawer to close", `getComputedStyle(document.getElementById("threads")).visibility === "hidden"`)
		}

		// Rename it.
		b.showThreads()
		renamed := vp.name + " renamed"
		b.click(first + ` button.rename`)
		b.waitJS(5*time.Second, "the rename field", `!!document.querySelector(".rename-input")`)
		b.eval(`(() => { const i = document.querySelector(".rename-input"); i.select(); return "ok"; })()`)
		b.do(chromedp.SendKeys(chromedp.CSS(".rename-input"), renamed+kb.Enter))
		b.waitJS(10*time.Second, "the new title in the list", `document.querySelector(`+jsString(first+" .title")+`).textContent === `+jsString(renamed))
		waitFor(t, 10*time.Second, "the rename on the server", func() bool {
			for _, s := range api.threads() {
				if s.Title == renamed {
					return true
				}
			}
			return false
		})
		b.waitJS(10*time.Second, "the new title on the open thread", `document.getElementById("thread-title").textContent === `+jsString(renamed))

		// Delete another: a dialog asks first; Cancel keeps it.
		second := `#thread-list li[data-id="` + idOfTitle(t, api, titles[1]) + `"]`
		b.showThreads()
		b.click(second + ` button.delete`)
		b.waitJS(5*time.Second, "the delete dialog", `(() => { const d = document.querySelector("dialog[open]"); return d instanceof HTMLDialogElement && d.id === "confirm-delete"; })()`)
		b.shot("threads-delete-dialog")
		b.click(`#confirm-delete button[value="cancel"]`)
		b.waitJS(5*time.Second, "the dialog to close", `!document.querySelector("dialog[open]")`)
		if b.eval(`!!document.querySelector(`+jsString(second)+`)`) != "true" {
			t.Fatalf("%s: Cancel deleted the thread", vp.name)
		}
		b.showThreads()
		b.click(second + ` button.delete`)
		b.waitJS(5*time.Second, "the delete dialog again", `!!document.querySelector("dialog#confirm-delete[open]")`)
		b.click("#confirm-delete-ok")
		b.waitJS(10*time.Second, "the thread to leave the list", `!document.querySelector(`+jsString(second)+`)`)
		waitFor(t, 10*time.Second, "the thread gone from the server's list", func() bool {
			for _, s := range api.threads() {
				if s.Title == titles[1] {
					return false
				}
			}
			return true
		})
		if got := b.eval(`window.__confirms`); got != "0" {
			t.Errorf("%s: window.confirm was called %s times", vp.name, got)
		}
		b.shot("threads-after-delete")
		b.checkNoCSPViolations()
	}
}

func idOfTitle(t *testing.T, api apiClient, title string) string {
	t.Helper()
	for _, s := range api.threads() {
		if s.Title == title || strings.HasPrefix(s.Title, title) {
			return s.ID
		}
	}
	t.Fatalf("no thread titled %q in %+v", title, api.threads())
	return ""
}

// markdownReply is a model answer with markdown and with things a page must
// not run or follow.
const markdownReply = "**Bold** and *italic* and `code` and a [safe link](https://example.com/a) " +
	"and a [bad link](javascript:window.__pwned=1) and <img src=x onerror=\"window.__pwned=2\"> and <b>raw</b>.\n\n" +
	"- one\n- two\n\n1. first\n2. second\n\n```go\nfmt.Println(\"<script>window.__pwned=3</script>\")\n```\n\n" +
	"See https://example.com/" + "b" + " for more."

// TestBrowserMarkdown: the model's markdown is rendered as elements, and
// HTML in it stays text; only http(s) links become links, opened with
// rel="noopener noreferrer".
func TestBrowserMarkdown(t *testing.T) {
	t.Parallel()
	fake := &fakeopenai.Server{Respond: func(*openai.ChatCompletionRequest) fakeopenai.Reply {
		return fakeopenai.Reply{Content: markdownReply}
	}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	p := startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": "sk-test"}, botBinary)
	defer p.stop(t)
	bctx := newBrowser(t, 3*time.Minute)

	for _, vp := range viewports {
		b := openTab(t, bctx, p, vp, p.URL+"/")
		b.newThread()
		b.send("format **this** <i>as typed</i>")
		b.waitJS(20*time.Second, "the answer", `!!document.querySelector("#messages > li.assistant")`)
		body := `document.querySelector("#messages > li.assistant .body")`
		checks := []struct{ what, expr, want string }{
			{"bold", body + `.querySelector("strong").textContent`, "Bold"},
			{"italic", body + `.querySelector("em").textContent`, "italic"},
			{"inline code", body + `.querySelector(":scope > p code").textContent`, "code"},
			{"bullets", body + `.querySelectorAll("ul > li").length`, "2"},
			{"numbers", body + `.querySelectorAll("ol > li").length`, "2"},
			{"code block", body + `.querySelector("pre code").textContent`, `fmt.Println("<script>window.__pwned=3</script>")`},
			{"links", body + `.querySelectorAll("a").length`, "2"},
			{"safe link", body + `.querySelector("a").href + " " + ` + body + `.querySelector("a").rel + " " + ` + body + `.querySelector("a").target`, "https://example.com/a noopener noreferrer _blank"},
			{"bare link", body + `.querySelectorAll("a")[1].href`, "https://example.com/b"},
			{"no javascript: link", `[...document.querySelectorAll("#messages a")].filter((a) => !/^https?:/.test(a.href)).length`, "0"},
			{"no elements from HTML", `document.querySelectorAll("#messages img, #messages script, #messages b, #messages i").length`, "0"},
			{"HTML shown as text", `(` + body + `.textContent.includes("<img src=x") && ` + body + `.textContent.includes("<b>raw</b>"))`, "true"},
			{"nothing ran", `typeof window.__pwned`, "undefined"},
			{"the user's text as typed", `document.querySelector("#messages > li.user .body").textContent`, "format **this** <i>as typed</i>"},
		}
		for _, c := range checks {
			if got := b.eval(c.expr); got != c.want {
				t.Errorf("%s: %s: got %q, want %q", vp.name, c.what, got, c.want)
			}
		}
		if got := b.eval(overflowCheck); got != "[]" {
			t.Errorf("%s: the page overflows: %s", vp.name, got)
		}
		b.shot("markdown")
		b.checkNoCSPViolations()
	}
}
