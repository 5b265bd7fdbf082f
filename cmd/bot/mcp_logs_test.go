package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestMCPLogLines: an MCP server's log lines carry component=mcp once,
// and retry_in is a duration for stdio and HTTP servers alike.
func TestMCPLogLines(t *testing.T) {
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
