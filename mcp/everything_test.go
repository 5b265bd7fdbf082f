package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
)

// longRun asks server-everything's slow tool for a 30-second operation.
const longRun = `{"duration":30,"steps":30}`

func everything(t *testing.T, opts Options) *harness {
	t.Helper()
	opts.Servers = append(opts.Servers, Server{Name: "ev", Command: []string{nodeServer(t, "everything")}})
	h := start(t, opts)
	h.waitReady(t, "ev")
	return h
}

// pid returns the process id of a stdio server, 0 if it has none.
func (m *Manager) pid(name string) int {
	for _, s := range m.servers {
		if s.cfg.Name == name {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.cmd != nil && s.cmd.Process != nil {
				return s.cmd.Process.Pid
			}
		}
	}
	return 0
}

func TestEverythingEchoAndNonText(t *testing.T) {
	h := everything(t, Options{})
	if tool := h.tool(t, "ev__trigger-long-running-operation"); tool.Ask || !tool.Idempotent {
		t.Errorf("long-running: ask=%t idempotent=%t, want read-only (allow, idempotent)", tool.Ask, tool.Idempotent)
	}
	out, err := h.run(t, "ev__echo", `{"message":"hello ✓"}`)
	if err != nil || out != "Echo: hello ✓" {
		t.Errorf("echo: got %q, %v", out, err)
	}
	out, err = h.run(t, "ev__get-tiny-image", "")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^\[image/png, \d+ bytes\]$`).MatchString(lines[1]) ||
		lines[0] != "Here's the image you requested:" {
		t.Errorf("got %q; want the text lines joined with the image summarised as [image/png, N bytes]", out)
	}
	if n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[image/png, "), " bytes]")); n < 1000 || n > 10000 {
		t.Errorf("image size %d: want the decoded PNG's size", n)
	}
}

func TestEverythingInvalidArguments(t *testing.T) {
	h := everything(t, Options{})
	for _, args := range []string{`not json`, `[1]`, `"x"`, `{"message":"a"} {}`, `{"message":`} {
		_, err := h.run(t, "ev__echo", args)
		if te := toolError(t, err); te.Code != "invalid_arguments" {
			t.Errorf("%s: got %s, want invalid_arguments", args, te.Code)
		}
	}
	// Valid JSON the server's schema rejects: the server says so.
	_, err := h.run(t, "ev__echo", `{"message":5}`)
	if te := toolError(t, err); te.Code != "tool_failed" && te.Code != "invalid_arguments" {
		t.Errorf("wrong type: got %s %q, want the server's error", te.Code, te.Message)
	}
}

func TestEverythingSlowToolCancelledByContext(t *testing.T) {
	h := everything(t, Options{})
	tool := h.tool(t, "ev__trigger-long-running-operation")
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("stopped by alice")
	time.AfterFunc(300*time.Millisecond, func() { cancel(stop) })
	start := time.Now()
	_, err := tool.Run(ctx, &agent.ToolEnv{}, longRun)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, stop) {
		t.Fatalf("got %v, want ctx's error with its cause", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the call returned after %s; want soon after the cancel", took)
	}
	// The session survives a cancelled call.
	if out, err := h.run(t, "ev__echo", `{"message":"still here"}`); err != nil || out != "Echo: still here" {
		t.Errorf("echo after cancel: %q, %v", out, err)
	}
	calls, _, _ := h.events.snapshot()
	if strings.Join(calls, " ") != "ev/trigger-long-running-operation/canceled ev/echo/ok" {
		t.Errorf("hooks saw %v", calls)
	}
}

func TestEverythingSlowToolTimeout(t *testing.T) {
	h := everything(t, Options{Timeout: 500 * time.Millisecond})
	_, err := h.run(t, "ev__trigger-long-running-operation", longRun)
	if te := toolError(t, err); te.Code != "timeout" || !strings.Contains(te.Message, "500ms") {
		t.Errorf("got %s %q, want timeout naming the limit", te.Code, te.Message)
	}
	if out, err := h.run(t, "ev__echo", `{"message":"next"}`); err != nil || out != "Echo: next" {
		t.Errorf("echo after timeout: %q, %v", out, err)
	}
}

func TestEverythingKilledMidCallReconnects(t *testing.T) {
	h := everything(t, Options{})
	pid := h.m.pid("ev")
	if pid == 0 {
		t.Fatal("no server process")
	}
	tool := h.tool(t, "ev__trigger-long-running-operation")
	var (
		wg  sync.WaitGroup
		err error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err = tool.Run(ctx, &agent.ToolEnv{}, longRun)
	}()
	// Let the request reach the server (the operation takes 30 s), then kill it.
	time.Sleep(500 * time.Millisecond)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if te := toolError(t, err); te.Code != "tool_unavailable" {
		t.Fatalf("got %s %q, want tool_unavailable", te.Code, te.Message)
	}
	// The tools stay offered while the server is restarted...
	h.tool(t, "ev__echo")
	// ...and it comes back as a new process that answers.
	h.waitReady(t, "ev")
	if got := h.m.pid("ev"); got == pid || got == 0 {
		t.Errorf("pid %d after restart, was %d", got, pid)
	}
	if out, err := h.run(t, "ev__echo", `{"message":"back"}`); err != nil || out != "Echo: back" {
		t.Errorf("echo after restart: %q, %v", out, err)
	}
	_, states, _ := h.events.snapshot()
	if got := strings.Join(states, " "); !strings.HasSuffix(got, "ev/ready ev/connecting ev/ready") {
		t.Errorf("states %s, want ready, connecting, ready", got)
	}
}

func TestEverythingListChanged(t *testing.T) {
	// server-everything registers more tools once initialized and sends
	// notifications/tools/list_changed: the manager lists again.
	h := everything(t, Options{})
	waitFor(t, 10*time.Second, "a second listing after list_changed", func() (bool, string) {
		_, _, lists := h.events.snapshot()
		return lists["ev"] >= 2, strconv.Itoa(lists["ev"]) + " listings"
	})
	if !strings.Contains(h.logs.String(), "mcp server tools changed") {
		t.Error("the re-listing was not logged")
	}
	h.tool(t, "ev__simulate-research-query") // registered after initialization
}

func TestChildEnvironment(t *testing.T) {
	botEnv := map[string]string{"PATH": os.Getenv("PATH"), "HOME": t.TempDir(), "OPENAI_API_KEY": "sk-bot-only-secret"}
	h := start(t, Options{
		Env:     func(k string) string { return botEnv[k] },
		Servers: []Server{{Name: "ev", Command: []string{nodeServer(t, "everything")}, Env: map[string]string{"EXTRA_SETTING": "on"}}},
	})
	h.waitReady(t, "ev")
	out, err := h.run(t, "ev__get-env", "")
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]string
	if err := json.Unmarshal([]byte(out), &env); err != nil {
		t.Fatalf("get-env: %v in %q", err, out)
	}
	if env["EXTRA_SETTING"] != "on" || env["HOME"] != botEnv["HOME"] || env["PATH"] == "" {
		t.Errorf("the server got %v; want PATH, HOME and its own EXTRA_SETTING", env)
	}
	if _, ok := env["OPENAI_API_KEY"]; ok {
		t.Error("the bot's OPENAI_API_KEY reached the MCP server")
	}
}
