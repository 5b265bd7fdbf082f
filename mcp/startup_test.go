package mcp

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// slowServer is the test binary as an MCP server that starts after delay.
func slowServer(tb testing.TB, name string, delay time.Duration) Server {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	return Server{Name: name, Command: []string{exe}, Env: map[string]string{testServerEnv: "1", testDelayEnv: delay.String()}}
}

// TestWaitToolsForSlowServer: a turn that starts right after Start, while
// a server is still connecting, waits for it and then has its tools.
func TestWaitToolsForSlowServer(t *testing.T) {
	m := New(Options{Servers: []Server{slowServer(t, "slow", 1500*time.Millisecond)}, StartupTimeout: 30 * time.Second})
	t.Cleanup(func() { m.Close() })
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	if got := toolNames(m.Tools()); got != "" {
		t.Fatalf("tools %q right after Start; the server sleeps first", got)
	}
	if missing := m.WaitTools(context.Background()); len(missing) != 0 {
		t.Fatalf("WaitTools left %v missing; status %v", missing, m.Status())
	}
	if got := toolNames(m.Tools()); !strings.Contains(got, "slow__echo") {
		t.Errorf("after WaitTools: tools %q, want slow__echo", got)
	}
	// Started: no wait at all from now on.
	began := time.Now()
	if missing := m.WaitTools(context.Background()); len(missing) != 0 || time.Since(began) > time.Second {
		t.Errorf("second WaitTools: missing %v after %s", missing, time.Since(began))
	}
}

// TestWaitToolsGivesUp: a server slower than StartupTimeout is named
// missing after the timeout, and a ready one is not.
func TestWaitToolsGivesUp(t *testing.T) {
	m := New(Options{Servers: []Server{slowServer(t, "fast", 0), slowServer(t, "slow", time.Minute)}, StartupTimeout: 5 * time.Second})
	t.Cleanup(func() { m.Close() })
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	missing := m.WaitTools(context.Background())
	took := time.Since(began)
	if strings.Join(missing, ",") != "slow" {
		t.Errorf("missing %v, want [slow]; status %v", missing, m.Status())
	}
	if took < 5*time.Second || took > 20*time.Second {
		t.Errorf("WaitTools returned after %s, want about the 5s StartupTimeout", took)
	}
	if got := toolNames(m.Tools()); !strings.Contains(got, "fast__echo") {
		t.Errorf("tools %q, want fast__echo", got)
	}
	// ctx ends the wait sooner.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if missing := m.WaitTools(ctx); strings.Join(missing, ",") != "slow" {
		t.Errorf("with a short ctx: missing %v, want [slow]", missing)
	}
}
