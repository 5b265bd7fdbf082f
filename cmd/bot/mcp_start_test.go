package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/mcp"
)

// mcpStartupWait is how long serve used to wait for the MCP servers before
// it opened the listener.
const mcpStartupWait = 10 * time.Second

// TestSlowMCPServerDoesNotDelayListener configures a stdio server that
// never answers: the listener serves /healthz while it is still starting.
func TestSlowMCPServerDoesNotDelayListener(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "pinplan.toml")
	if err := os.WriteFile(cfg, []byte("[mcp.slow]\ncommand = [\"sleep\", \"60\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	p := startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"PINPLAN_CONFIG": cfg}, botBinary, "-demo")
	defer p.stop(t)
	if code, body := httpGet(t, p.URL+"/healthz"); code != 200 {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	took := time.Since(begin)
	if took >= mcpStartupWait {
		t.Errorf("/healthz answered %s after the start; the hanging MCP server held the listener up", took.Round(time.Millisecond))
	}
	if code, body := httpGet(t, p.URL+"/readyz"); !strings.Contains(body, "mcp slow: "+mcp.StateConnecting) {
		t.Errorf("/readyz: %d %q; want the server still connecting", code, body)
	}
}

// waitMCPReady waits until /readyz says each named MCP server is ready.
func waitMCPReady(t *testing.T, p *botProc, names ...string) {
	t.Helper()
	var body string
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, body = httpGet(t, p.URL+"/readyz")
		ready := true
		for _, name := range names {
			ready = ready && strings.Contains(body, "mcp "+name+": "+mcp.StateReady+"\n")
		}
		if ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("MCP servers %v not ready; /readyz:\n%s\nstderr:\n%s", names, body, p.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
