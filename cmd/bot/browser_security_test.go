package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// evilPage is another website the console's user visits. It tries to
// start an agent run with a text/plain fetch (no preflight), a JSON fetch
// (preflighted), a form post, to read the thread list, and to show the
// console in an iframe.
const evilPage = `<!doctype html>
<html><head><title>a page on another site</title></head><body>
<h1>Totally unrelated page</h1>
<iframe name="embed" id="embed" src="%[1]s/" width="600" height="300"></iframe>
<iframe name="sink" id="sink" width="300" height="100"></iframe>
<iframe name="control" id="control" src="%[3]s/control" width="300" height="100"></iframe>
<form id="form" method="post" action="%[1]s/api/threads" enctype="text/plain" target="sink">
<input name='{"text":"evil form post","x":"' value='"}'>
</form>
<script>
const bot = %[2]q;
window.results = {};
document.getElementById("embed").addEventListener("load", () => { results.iframe = "loaded"; });
document.getElementById("control").addEventListener("load", () => { results.control = "loaded"; });
(async () => {
  try {
    await fetch(bot + "/api/threads", { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" }, body: JSON.stringify({ text: "evil text/plain fetch" }) });
    results.fetch = "answered";
  } catch (e) { results.fetch = "network error: " + e; }
  try {
    const r = await fetch(bot + "/api/threads", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ text: "evil json fetch" }) });
    results.json = "read status " + r.status;
  } catch (e) { results.json = "blocked"; }
  try {
    const r = await fetch(bot + "/api/threads");
    results.read = "read " + r.status + " " + (await r.text()).slice(0, 80);
  } catch (e) { results.read = "blocked"; }
  const sink = document.getElementById("sink");
  await new Promise((done) => { sink.addEventListener("load", done, { once: true }); document.getElementById("form").submit(); });
  results.form = "answered";
  results.done = true;
})();
</script>
</body></html>`

// TestBrowserCrossSite: a page on another site can neither drive the
// console (a text/plain fetch, a JSON fetch, a form post), nor read it,
// nor embed it in an iframe; a DNS-rebinding host name gets 421; the
// console's own responses carry the CSP and frame headers. (Issue 10: on
// loopback with no token any website could start agent runs; no Host
// check; no CSP and no frame protection.)
func TestBrowserCrossSite(t *testing.T) {
	t.Parallel()
	p := startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0"}, botBinary)
	defer p.stop(t)
	api := apiClient{t, p.URL}
	botURL, _ := url.Parse(p.URL)

	// The console's headers.
	resp, err := http.Get(p.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("Content-Security-Policy %q allows inline script or eval", csp)
	}
	if got := resp.Header.Get("X-Frame-Options"); got != "DENY" {
		t.Errorf("X-Frame-Options %q, want DENY", got)
	}
	if got := resp.Header.Get("Referrer-Policy"); got != "no-referrer" {
		t.Errorf("Referrer-Policy %q, want no-referrer", got)
	}

	// evil.test and rebind.test are other sites that resolve to this
	// machine, as a site on the internet could through its own DNS.
	var evilURL *url.URL
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if r.URL.Path == "/control" { // a frame that lets any site embed it
			fmt.Fprint(w, "<!doctype html><title>control</title><p>an embeddable page</p>")
			return
		}
		fmt.Fprintf(w, evilPage, p.URL, p.URL, "http://localhost:"+evilURL.Port())
	}))
	defer evil.Close()
	evilURL, _ = url.Parse(evil.URL)
	bctx := newBrowser(t, 3*time.Minute, chromedp.Flag("host-resolver-rules", "MAP evil.test 127.0.0.1, MAP rebind.test 127.0.0.1"))

	for _, vp := range viewports {
		before := len(api.threads())

		// The attacks, from http://evil.test:<port>/.
		var mu sync.Mutex
		methods := map[network.RequestID]string{}
		var posts []string // "status url" of every POST the evil tab got an answer to
		listen := chromedp.WithListener(func(ev any) {
			mu.Lock()
			defer mu.Unlock()
			switch ev := ev.(type) {
			case *network.EventRequestWillBeSent:
				methods[ev.RequestID] = ev.Request.Method
			case *network.EventResponseReceived:
				if methods[ev.RequestID] == "POST" && strings.HasPrefix(ev.Response.URL, p.URL) {
					posts = append(posts, fmt.Sprintf("%d %s", ev.Response.Status, ev.Response.URL))
				}
			}
		})
		e := openTab(t, bctx, nil, vp, "", listen)
		e.do(chromedp.Navigate("http://evil.test:" + evilURL.Port() + "/"))
		e.waitJS(20*time.Second, "the evil page's attempts to be answered", `window.results && window.results.done && window.results.iframe === "loaded" && window.results.control === "loaded"`)
		var results map[string]any
		e.evalJSON(`window.results`, &results)
		t.Logf("%s: evil page results %v", vp.name, results)
		if r, _ := results["read"].(string); r != "blocked" {
			t.Errorf("%s: another site read the thread list: %q", vp.name, r)
		}
		if r, _ := results["json"].(string); r != "blocked" && !strings.HasPrefix(r, "read status 4") {
			t.Errorf("%s: another site's JSON fetch got %q", vp.name, r)
		}
		mu.Lock()
		t.Logf("%s: POST answers seen by the evil tab: %q", vp.name, posts)
		for _, s := range posts {
			if !strings.HasPrefix(s, "4") {
				t.Errorf("%s: a cross-site POST was answered %s", vp.name, s)
			}
		}
		mu.Unlock()

		// The iframe must not hold the console. A cross-site frame runs
		// as its own target: the control frame (another site that allows
		// embedding) shows that such frames are listed.
		targets, err := chromedp.Targets(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Each frame is asked what it holds: the control frame its page,
		// the console's frames an error page, never the console.
		inside := func(id target.ID) string {
			fctx, cancel := chromedp.NewContext(e.ctx, chromedp.WithTargetID(id), chromedp.WithDetachOnCancel())
			defer cancel()
			ctx, cancel2 := context.WithTimeout(fctx, 10*time.Second)
			defer cancel2()
			v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + " console=" + !!document.getElementById("new-thread") + " text=" + document.body.innerText.slice(0, 40)`))
			if err != nil {
				return "unreadable: " + err.Error()
			}
			return v
		}
		controlSeen, embeds := false, 0
		for _, ti := range targets {
			if ti.Type != "iframe" || ti.OpenerID != "" {
				continue
			}
			got := inside(ti.TargetID)
			t.Logf("%s: the frame of %s holds %q", vp.name, ti.URL, got)
			switch {
			case strings.HasPrefix(ti.URL, "http://localhost:"+evilURL.Port()+"/control"):
				controlSeen = strings.Contains(got, "an embeddable page")
			case strings.HasPrefix(ti.URL, p.URL):
				embeds++
				if strings.Contains(got, "console=true") || strings.HasPrefix(got, p.URL) {
					t.Errorf("%s: another site shows the console in an iframe: %s holds %q", vp.name, ti.URL, got)
				}
			}
		}
		t.Logf("%s: %d frames of the console on the evil page", vp.name, embeds)
		if !controlSeen {
			t.Errorf("%s: the control frame could not be read, so the frame check proves nothing", vp.name)
		}
		e.shot("cross-site-evil-page")

		// DNS rebinding: the console under another host name is refused.
		rebind := "http://rebind.test:" + botURL.Port()
		r := openTab(t, bctx, nil, vp, "")
		res, err := chromedp.Run(r.ctx, chromedp.NavigateResponse(rebind+"/"))
		if err != nil {
			t.Fatalf("%s: open %s: %v", vp.name, rebind, err)
		}
		if res.Status != http.StatusMisdirectedRequest {
			t.Errorf("%s: %s/ answered %d, want 421", vp.name, rebind, res.Status)
		}
		if got := r.eval(`!!document.getElementById("thread-list")`); got != "false" {
			t.Errorf("%s: the console rendered under the host name rebind.test", vp.name)
		}
		status, err := chromedp.Run(r.ctx, chromedp.Evaluate[string](`fetch("/api/threads", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ text: "rebound" }) }).then((r) => String(r.status), (e) => "error " + e)`, chromedp.EvalAwaitPromise))
		if err != nil || status != "421" {
			t.Errorf("%s: a same-origin POST under rebind.test answered %q (%v), want 421", vp.name, status, err)
		}

		// Every attempt was answered above; none created a thread.
		if list := api.threads(); len(list) != before {
			t.Errorf("%s: %d threads after the attacks, want %d: %+v", vp.name, len(list), before, list)
		}

		// The console itself still works.
		b := openTab(t, bctx, p, vp, p.URL+"/")
		b.newThread()
		b.send("a real task from " + vp.name)
		b.waitJS(20*time.Second, "the real thread", `location.hash.length > 1 && !!document.querySelector("#messages > li.user")`)
		waitFor(t, 10*time.Second, "the real thread on the server", func() bool { return len(api.threads()) == before+1 })
		b.checkNoCSPViolations()
	}
}

// TestBrowserToken: with PINPLAN_WEB_TOKEN set, ?token= is exchanged for
// an HttpOnly cookie and leaves the address bar; a browser without it gets
// a login form that works. (Issue 10: ?token= stayed in the address bar
// and in every thread URL; the 401 answer was bare text.)
func TestBrowserToken(t *testing.T) {
	t.Parallel()
	const token = "s3cret-console-token"
	p := startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0", "PINPLAN_WEB_TOKEN": token}, botBinary)
	defer p.stop(t)
	bctx := newBrowser(t, 3*time.Minute)

	for _, vp := range viewports {
		// A link with the token: the console opens, the token leaves the URL.
		b := openTab(t, bctx, p, vp, "", chromedp.WithNewBrowserContext())
		b.do(chromedp.Navigate(p.URL + "/?token=" + token))
		b.waitLive()
		if got := b.eval(`location.href`); strings.Contains(got, token) {
			t.Errorf("%s: the address bar still holds the token: %s", vp.name, got)
		}
		if got := b.eval(`document.cookie`); strings.Contains(got, token) {
			t.Errorf("%s: the token cookie is readable by scripts: %q", vp.name, got)
		}
		b.newThread()
		b.send("a task behind a token (" + vp.name + ")")
		b.waitJS(20*time.Second, "the thread", `location.hash.length > 1 && !!document.querySelector("#messages > li.user")`)
		if got := b.eval(`location.href + " " + [...document.querySelectorAll("a[href]")].map((a) => a.href).join(" ")`); strings.Contains(got, token) {
			t.Errorf("%s: a URL on the page holds the token: %s", vp.name, got)
		}
		b.checkNoCSPViolations()

		// A browser without the cookie: a login form, then the console.
		l := openTab(t, bctx, p, vp, "", chromedp.WithNewBrowserContext())
		l.do(chromedp.Navigate(p.URL + "/login"))
		l.waitJS(10*time.Second, "the login form", `!!document.querySelector('form input[name="token"]')`)
		l.shot("login")
		l.do(chromedp.SendKeys(chromedp.CSS(`form input[name="token"]`), token+kb.Enter))
		l.waitLive()
		if got := l.eval(`location.pathname + location.search`); got != "/" {
			t.Errorf("%s: after the login the page is %q, want /", vp.name, got)
		}
		l.waitJS(10*time.Second, "the thread in the list after the login", `document.querySelectorAll("#thread-list > li").length > 0`)
	}
}
