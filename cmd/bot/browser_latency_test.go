package main

import (
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"
)

// TestBrowserSendToFirstPlan sends 20 new tasks from the console in
// Chromium and checks each one's plan appears; it reports the time from
// the Send press to the first plan's render, measured in the page
// (performance.now() at the click, a MutationObserver for the plan). The
// demo model answers at once (PINPLAN_DEMO_DELAY=1ms), so this is the
// bot's and the page's own latency. It asserts the plans, not the time:
// the figure goes to BENCHMARKS.md.
func TestBrowserSendToFirstPlan(t *testing.T) {
	bot := demoBot(t, "1ms")
	bctx := newBrowser(t, 150*time.Second)
	b := openTab(t, bctx, bot, viewports[0], bot.URL+"/")
	var took []float64
	for i := range 20 {
		b.newThread()
		b.eval(`(() => {
			window.__planAt = 0;
			const box = document.getElementById("plan");
			new MutationObserver((_, obs) => {
				if (!box.hidden && box.dataset.revision) { window.__planAt = performance.now(); obs.disconnect(); }
			}).observe(box, { attributes: true, subtree: true, childList: true });
			document.querySelector('#send button[type="submit"]').addEventListener("click", () => { window.__sentAt = performance.now(); }, { once: true });
			return "ok";
		})()`)
		b.send(fmt.Sprintf("plan task number %d", i))
		b.waitJS(20*time.Second, "the first plan of task "+strconv.Itoa(i), `window.__planAt > 0`)
		ms, err := strconv.ParseFloat(b.eval(`String(window.__planAt - window.__sentAt)`), 64)
		if err != nil || ms <= 0 {
			t.Fatalf("task %d: send-to-plan %q, %v", i, b.eval(`String(window.__planAt - window.__sentAt)`), err)
		}
		took = append(took, ms)
	}
	sort.Float64s(took)
	t.Logf("send to first plan render, 20 runs: p50 %.1f ms, min %.1f ms, max %.1f ms", took[len(took)/2], took[0], took[len(took)-1])
}
