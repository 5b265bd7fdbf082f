package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath finds Debian's chromium (.ci/run installs it).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: run `apt-get install -y chromium` (bash .ci/run does)")
	return ""
}

// TestBrowserConsole drives the console in real headless Chromium: start a
// thread, send a task, watch the pinned plan move through its revisions to
// done without a reload, then reload and see the same state.
func TestBrowserConsole(t *testing.T) {
	exe := chromiumPath(t)
	p := startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0", "PINPLAN_DEMO_DELAY": "250ms"}, botBinary, "-demo")
	defer p.stop(t)

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true), chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1100, 800),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	go func() { // bound the whole test without stopping the browser early
		select {
		case <-time.After(120 * time.Second):
			cancel()
		case <-ctx.Done():
		}
	}()

	err := chromedp.Do(ctx,
		chromedp.Navigate(p.URL+"/"),
		chromedp.WaitVisible(chromedp.ID("new-thread")),
	)
	if err != nil {
		t.Fatalf("open the console: %v\nbot stderr:\n%s", err, p.stderr)
	}
	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return v
	}
	eval(`window.__noReload = "yes"; "ok"`)
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("new-thread")),
		chromedp.SendKeys(chromedp.ID("text"), "prepare the v2 release notes"),
		chromedp.Click(chromedp.CSS(`#send button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.ID("plan")),
	)
	if err != nil {
		t.Fatalf("start a thread: %v\nbot stderr:\n%s", err, p.stderr)
	}
	revisions := map[string]bool{}
	var state, rev string
	sawStop, approved := false, false
	deadline := time.Now().Add(60 * time.Second)
	for state != "done" {
		if time.Now().After(deadline) {
			t.Fatalf("plan never reached done; saw revisions %v, state %q", revisions, state)
		}
		rev = eval(`document.getElementById("plan").dataset.revision || ""`)
		state = eval(`document.getElementById("plan").dataset.state || ""`)
		if rev != "" {
			revisions[rev] = true
		}
		if eval(`String(!document.getElementById("stop").hidden)`) == "true" {
			sawStop = true
		}
		// The demo's write asks first: press Allow once on its card.
		if !approved && eval(`String(document.querySelectorAll("#messages li.card button.allow").length)`) == "1" {
			if state != "waiting for approval" {
				t.Errorf("plan state %q while a card waits, want waiting for approval", state)
			}
			saveScreenshot(t, ctx, "console-approval-card.png")
			if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#messages li.card button.allow"))); err != nil {
				t.Fatal(err)
			}
			approved = true
		}
		time.Sleep(40 * time.Millisecond)
	}
	if !approved || !sawStop {
		t.Errorf("approval card pressed %t, Stop button seen %t; want both", approved, sawStop)
	}
	if got := eval(`document.querySelector("#messages li.card .status").textContent`); !strings.HasPrefix(got, "Allowed once by") {
		t.Errorf("card after the click says %q, want the outcome", got)
	}
	if eval(`String(document.querySelectorAll("#messages li.card button").length)`) != "0" || eval(`String(document.getElementById("stop").hidden)`) != "true" {
		t.Error("buttons left on the decided card or Stop left after the turn")
	}
	if len(revisions) < 3 {
		t.Errorf("saw revisions %v live, want the plan to move through several", revisions)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#messages li.assistant"))); err != nil {
		t.Fatal(err)
	}
	title := eval(`document.getElementById("plan-title").textContent`)
	footer := eval(`document.getElementById("plan-footer").textContent`)
	completed := eval(`String(document.querySelectorAll("#plan-items li.completed s").length)`)
	messages := eval(`document.getElementById("messages").textContent`)
	if eval(`String(window.__noReload)`) != "yes" {
		t.Error("the page reloaded while the plan moved")
	}
	if title != "Plan · 4/4 done" || completed != "4" || !strings.Contains(footer, "done") {
		t.Errorf("final plan: title %q, %s completed and struck through, footer %q", title, completed, footer)
	}
	if !strings.Contains(messages, "prepare the v2 release notes") || !strings.Contains(messages, "Done:") {
		t.Errorf("messages: %q", messages)
	}
	// The revision history opens with every stored revision.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#plan-history summary")), chromedp.WaitVisible(chromedp.CSS("#plan-revisions li"))); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for eval(`String(document.querySelectorAll("#plan-revisions li").length)`) != rev {
		if time.Now().After(deadline) {
			t.Fatalf("revision history shows %s entries, want %s", eval(`String(document.querySelectorAll("#plan-revisions li").length)`), rev)
		}
		time.Sleep(50 * time.Millisecond)
	}
	saveScreenshot(t, ctx, "console-done.png")

	// Reload: the same state comes back from the server.
	if err := chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("plan"))); err != nil {
		t.Fatal(err)
	}
	title2 := eval(`document.getElementById("plan-title").textContent`)
	rev2 := eval(`document.getElementById("plan").dataset.revision`)
	if title2 != title || rev2 != rev {
		t.Errorf("after reload: %q revision %s, want %q revision %s", title2, rev2, title, rev)
	}
	saveScreenshot(t, ctx, "console-reloaded.png")
}

func saveScreenshot(t *testing.T, ctx context.Context, name string) {
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
