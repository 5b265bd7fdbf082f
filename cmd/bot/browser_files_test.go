package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// TestBrowserAttachesFiles (issue 30): in the console a file chosen with
// the attach button and one dropped on the composer go with the message;
// the model is given both as material, the message shows them, and after
// a reload it still does, from the stored history.
func TestBrowserAttachesFiles(t *testing.T) {
	t.Parallel()
	script := fakeopenai.Script(func(string) []fakeopenai.Reply {
		return []fakeopenai.Reply{donePlan(), {Content: "Both read."}}
	})
	fake := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply { return script(req) }}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	p := startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": "sk-test"}, botBinary)
	defer p.stop(t)
	notes := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(notes, []byte("ship on friday"), 0o600); err != nil {
		t.Fatal(err)
	}
	bctx := newBrowser(t, 3*time.Minute)
	b := openTab(t, bctx, p, viewports[0], p.URL+"/")
	b.newThread()
	b.do(chromedp.SetUploadFiles(chromedp.CSS("#files"), []string{notes}, chromedp.NodeReady))
	b.waitJS(5*time.Second, "the chosen file listed", `[...document.querySelectorAll("#attached li")].some((li) => li.textContent.includes("notes.txt"))`)
	b.eval(`(() => { const dt = new DataTransfer(); dt.items.add(new File(["month,total\njan,10\n"], "sales.csv", { type: "text/csv" }));
		document.getElementById("text").dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true })); return true; })()`)
	b.waitJS(5*time.Second, "the dropped file listed", `document.querySelectorAll("#attached li").length === 2`)
	b.send("what do these say?")
	b.waitJS(30*time.Second, "the answer", `[...document.querySelectorAll("#messages > li.assistant .body")].some((e) => e.innerText.includes("Both read."))`)
	var q string
	for _, req := range fake.Requests() {
		for _, m := range req.Messages {
			if strings.Contains(m.Content, "Files attached to") {
				q = m.Content
			}
		}
	}
	if !strings.Contains(q, `<file name="notes.txt"`) || !strings.Contains(q, "ship on friday") || !strings.Contains(q, `<file name="sales.csv" type="text/csv"`) || !strings.Contains(q, "jan,10") {
		t.Errorf("the model was given %q: want both files", q)
	}
	filesShown := `document.querySelectorAll("#messages > li.user .files li").length`
	b.waitJS(5*time.Second, "the files under the message", filesShown+` === 2`)
	if hidden := b.eval(`document.getElementById("attached").hidden`); hidden != "true" {
		t.Errorf("the composer still lists files after the send")
	}
	b.do(chromedp.Reload()) // waits for the load: a script run meanwhile would meet the navigation
	b.waitLive()
	b.waitJS(20*time.Second, "the thread after a reload", `!!document.querySelector("#messages > li.assistant")`)
	b.waitJS(5*time.Second, "the files under the message after a reload", filesShown+` === 2`)
	if n := b.eval(`document.querySelectorAll("#messages > li.user").length`); n != "1" {
		t.Errorf("%s user messages after a reload, want 1 (the files are not a message)", n)
	}
	b.checkNoCSPViolations()
}
