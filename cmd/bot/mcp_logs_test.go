package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMCPLogLines: an MCP server's log lines carry component=mcp once,
// and retry_in is a duration for stdio and HTTP servers alike.
func TestMCPLogLines(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "pinplan.toml")
	if err := os.WriteFile(cfg, []byte("[mcp.cli]\ncommand = [\"false\"]\n\n[mcp.web]\nurl = \"http://127.0.0.1:1/mcp\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"PINPLAN_CONFIG": cfg}, botBinary, "-demo")
	defer p.stop(t)
	failed := regexp.MustCompile(`(?m)^.*msg="mcp server failed to start; retrying".*$`)
	var lines []string
	waitFor(t, 30*time.Second, "both servers to fail once", func() bool {
		lines = failed.FindAllString(p.stderr.String(), -1)
		return strings.Contains(strings.Join(lines, "\n"), "server=cli") && strings.Contains(strings.Join(lines, "\n"), "server=web")
	})
	duration := regexp.MustCompile(` retry_in=\d+(\.\d+)?(ms|s|m)( |$)`)
	for _, l := range lines {
		if n := strings.Count(l, "component="); n != 1 {
			t.Errorf("%d component attributes, want 1: %s", n, l)
		}
		if !duration.MatchString(l) {
			t.Errorf("retry_in is not a duration: %s", l)
		}
	}
}

// TestMCPStderrFloodLogIsBounded: a server that writes its stderr in a
// loop (yes) gets a few lines a second into the bot's log and a count of
// the rest, not a line per line (DESIGN §16).
func TestMCPStderrFloodLogIsBounded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "pinplan.toml")
	toml := fmt.Sprintf("[mcp.noisy]\ncommand = [\"sh\", \"-c\", \"yes 'flood line' >&2 & exec %s %s\"]\n", mcpServerPath(t, "filesystem"), dir)
	if err := os.WriteFile(cfg, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	p := startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"PINPLAN_CONFIG": cfg}, botBinary, "-demo")
	defer p.stop(t)
	counted := regexp.MustCompile(`msg="mcp server stderr lines not logged".* count=(\d+)`)
	// The count proves the flood was read; a log past 1 MiB proves it was
	// written out.
	waitFor(t, 60*time.Second, "a count of lines not logged", func() bool {
		log := p.stderr.String()
		if len(log) > 1<<20 {
			return true
		}
		for _, m := range counted.FindAllStringSubmatch(log, -1) {
			if n, _ := strconv.Atoi(m[1]); n > 10_000 {
				return true
			}
		}
		return false
	})
	took := time.Since(began)
	log := p.stderr.String()
	logged := strings.Count(log, `line="flood line"`)
	if limit := 20 + int(took.Seconds()*10); logged > limit || len(log) > 1<<20 {
		t.Errorf("%d flood lines (%d KiB of log) in %s, want at most %d lines", logged, len(log)>>10, took.Round(time.Millisecond), limit)
	}
}
