package main

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// TestBrowserAnswerGrowsLive (issue 29): with PINPLAN_STREAM=true the
// console shows the answer growing as the model writes it, word by word
// over SSE, in one message that the stored answer replaces at the end:
// one answer on the page, before and after a reload.
func TestBrowserAnswerGrowsLive(t *testing.T) {
	t.Parallel()
	answer := strings.Join(numberedWords(40), " ")
	script := fakeopenai.Script(func(string) []fakeopenai.Reply {
		return []fakeopenai.Reply{donePlan(), {Content: answer, Pace: 80 * time.Millisecond}}
	})
	fake := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply { return script(req) }}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	p := startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": "sk-test", "PINPLAN_STREAM": "true"}, botBinary)
	defer p.stop(t)
	bctx := newBrowser(t, 3*time.Minute)
	b := openTab(t, bctx, p, viewports[0], p.URL+"/")
	b.newThread()
	// Every text the answer's message shows, as it changes.
	b.eval(`(() => { window.__seen = []; setInterval(() => {
		const e = document.querySelector("#messages > li.assistant .body");
		if (!e) return;
		const t = e.innerText.trim();
		if (window.__seen[window.__seen.length - 1] !== t) window.__seen.push(t);
	}, 20); return true; })()`)
	b.send("write it as you go")
	b.waitJS(30*time.Second, "the whole answer", `document.querySelectorAll("#messages > li.assistant").length === 1 && document.querySelector("#messages > li.assistant .body").innerText.trim() === `+jsString(answer))
	// The sampler runs every 20 ms: let it see the final text too.
	b.waitJS(5*time.Second, "the sampler to see the whole answer", `window.__seen[window.__seen.length - 1] === `+jsString(answer))
	var seen []string
	b.evalJSON(`window.__seen`, &seen)
	if len(seen) < 5 {
		t.Fatalf("the answer showed %d texts (%q); want it to grow word by word", len(seen), seen)
	}
	for i, s := range seen {
		if !strings.HasPrefix(answer, s) {
			t.Errorf("text %d %q is not the start of the answer", i, s)
		}
		if i > 0 && len(s) <= len(seen[i-1]) {
			t.Errorf("text %d %q does not grow on %q", i, s, seen[i-1])
		}
	}
	if seen[len(seen)-1] != answer {
		t.Errorf("the answer ends as %q", seen[len(seen)-1])
	}
	b.do(chromedp.Reload()) // waits for the load: a script run meanwhile would meet the navigation
	b.waitLive()
	b.waitJS(20*time.Second, "the thread after a reload", `!!document.querySelector("#messages > li.assistant")`)
	if n := b.eval(`document.querySelectorAll("#messages > li.assistant").length`); n != "1" {
		t.Errorf("%s answers after a reload, want 1", n)
	}
	b.checkNoCSPViolations()
}
