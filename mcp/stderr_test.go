package mcp

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	stderrLine = regexp.MustCompile(`(?m)^.*msg="mcp server stderr".*$`)
	notLogged  = regexp.MustCompile(`msg="mcp server stderr lines not logged".* count=(\d+)`)
)

// TestStderrFloodIsBounded: a server that floods its stderr (DESIGN §16:
// 614 MB of log in 48 s) gets a few lines a second into the log; the rest
// are counted, and the counts add up to what it wrote. A line of 4 MiB is
// one cut log line.
func TestStderrFloodIsBounded(t *testing.T) {
	const lines = 200_000
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	h := start(t, Options{Servers: []Server{{Name: "noisy", Command: []string{exe},
		Env: map[string]string{testServerEnv: "1", testFloodEnv: strconv.Itoa(lines)}}}})
	h.waitReady(t, "noisy")
	var logged, counted int
	waitFor(t, 60*time.Second, "every flood line logged or counted", func() (bool, string) {
		log := h.logs.String()
		logged, counted = 0, 0
		for _, l := range stderrLine.FindAllString(log, -1) {
			if strings.Contains(l, "flood line") {
				logged++
			}
		}
		for _, m := range notLogged.FindAllStringSubmatch(log, -1) {
			n, _ := strconv.Atoi(m[1])
			counted += n
		}
		return logged+counted == lines, strconv.Itoa(logged) + " logged and " + strconv.Itoa(counted) + " counted of " + strconv.Itoa(lines)
	})
	took := time.Since(began)
	// A few a second, with a burst at the start.
	if limit := 20 + int(took.Seconds()*10); logged > limit {
		t.Errorf("%d flood lines logged in %s, want at most %d", logged, took.Round(time.Millisecond), limit)
	}
	log := h.logs.String()
	if len(log) > 256<<10 {
		t.Errorf("the log grew to %d KiB", len(log)>>10)
	}
	var long []string
	for _, l := range stderrLine.FindAllString(log, -1) {
		if strings.Contains(l, "zzzz") {
			long = append(long, l)
		}
	}
	if len(long) != 1 || len(long[0]) > 2048 {
		sizes := make([]int, len(long))
		for i, l := range long {
			sizes[i] = len(l)
		}
		t.Errorf("the %d-byte line was logged as %d lines of %v bytes, want one cut line", floodLineBytes, len(long), sizes)
	}
}
