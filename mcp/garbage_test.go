package mcp

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// script writes an executable shell script and returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "server.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestGarbageOnStdout(t *testing.T) {
	servers := []Server{
		// Not JSON at all, then silence.
		{Name: "words", Command: []string{script(t, "echo 'Server starting... listening on stdio'\nexec sleep 30\n")}},
		// Binary noise.
		{Name: "binary", Command: []string{script(t, "printf '\\000\\377\\376garbage\\n'\nexec sleep 30\n")}},
		// Half a JSON-RPC answer to initialize that never ends: only the
		// connect timeout ends the wait.
		{Name: "half", Command: []string{script(t, "read line\nprintf '{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{'\nexec sleep 30\n")}},
		// A program that exits at once.
		{Name: "exits", Command: []string{script(t, "exit 3\n")}},
		// A program that does not exist.
		{Name: "missing", Command: []string{filepath.Join(t.TempDir(), "no-such-server")}},
		{Name: "ev", Command: []string{nodeServer(t, "everything")}},
	}
	begin := time.Now()
	h := start(t, Options{Servers: servers, ConnectTimeout: 3 * time.Second})
	if took := time.Since(begin); took > 20*time.Second {
		t.Errorf("Start took %s; a bad server must not hold it up beyond its connect timeout", took)
	}
	status := h.m.Status()
	for _, s := range servers[:5] {
		if !strings.HasPrefix(status[s.Name], "failed: ") {
			t.Errorf("%s: status %q, want failed: <reason>", s.Name, status[s.Name])
		}
	}
	if !strings.Contains(status["half"], "no answer within 3s") {
		t.Errorf("half: status %q, want the connect timeout named", status["half"])
	}
	h.waitReady(t, "ev")
	if out, err := h.run(t, "ev__echo", `{"message":"fine"}`); err != nil || out != "Echo: fine" {
		t.Errorf("the good server: %q, %v", out, err)
	}
	for _, tool := range h.m.Tools() {
		if tool.Server != "ev" {
			t.Errorf("a failed server offers %s", tool.Name)
		}
	}
	err := h.m.Ready()
	if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "words failed: ") || strings.Contains(err.Error(), "ev ") {
		t.Errorf("Ready() = %v, want ErrNotReady naming the failed servers only", err)
	}
	if !strings.Contains(h.logs.String(), `msg="mcp server failed to start; retrying" component=mcp server=words`) {
		t.Errorf("the failure was not logged:\n%s", h.logs.String())
	}
}

func TestGarbageMidSession(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, Options{Servers: []Server{{Name: "gotest", Command: []string{exe}, Env: map[string]string{testServerEnv: "1"}}}})
	h.waitReady(t, "gotest")
	pid := h.m.pid("gotest")
	_, err = h.run(t, "gotest__corrupt", "{}")
	if te := toolError(t, err); te.Code != "tool_unavailable" {
		t.Fatalf("got %s %q, want tool_unavailable", te.Code, te.Message)
	}
	h.waitReady(t, "gotest")
	if got := h.m.pid("gotest"); got == pid || got == 0 {
		t.Errorf("pid %d after the restart, was %d", got, pid)
	}
	if out, err := h.run(t, "gotest__echo", `{"message":"clean again"}`); err != nil || out != "Echo: clean again" {
		t.Errorf("echo after the restart: %q, %v", out, err)
	}
	if !strings.Contains(h.logs.String(), "invalid character 'p'") {
		t.Errorf("the log does not say what broke the session:\n%s", h.logs.String())
	}
}
