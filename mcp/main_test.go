package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/pinplan/pinplan/agent"
)

// testServerEnv makes the test binary an MCP server over stdio (see
// serveTestStdio) instead of running the tests.
const testServerEnv = "PINPLAN_MCP_TEST_SERVER"

// testDelayEnv delays the test server's start (see serveTestStdio).
const testDelayEnv = "PINPLAN_MCP_TEST_DELAY"

// testFloodEnv makes the test server write to stderr, while it serves,
// one line of floodLineBytes and then as many short lines as it says.
const testFloodEnv = "PINPLAN_MCP_TEST_FLOOD"

const floodLineBytes = 4 << 20

// flood writes one long line of "z" and then n short lines to stderr, as
// fast as they are read.
func flood(n int) {
	w := bufio.NewWriter(os.Stderr)
	w.WriteString(strings.Repeat("z", floodLineBytes) + "\n")
	for i := range n {
		fmt.Fprintf(w, "flood line %d\n", i)
	}
	w.Flush()
}

func TestMain(m *testing.M) {
	if os.Getenv(testServerEnv) == "1" {
		os.Exit(serveTestStdio())
	}
	goleak.VerifyTestMain(m)
}

// serveTestStdio serves, on stdin and stdout, "echo", "corrupt", which
// writes a line that is not JSON-RPC to stdout before it answers, and
// "big", whose result is as large as asked.
//
// With testDelayEnv set to a duration it sleeps that long first, as a
// server slow to start does.
func serveTestStdio() int {
	if d, err := time.ParseDuration(os.Getenv(testDelayEnv)); err == nil {
		time.Sleep(d)
	}
	if n, err := strconv.Atoi(os.Getenv(testFloodEnv)); err == nil {
		go flood(n)
	}
	srv := sdk.NewServer(&sdk.Implementation{Name: "gotest", Version: "1"}, nil)
	sdk.AddTool(srv, &sdk.Tool{Name: "echo", Description: "Echoes the message.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "Echo: " + in.Message}}}, nil, nil
		})
	srv.AddTool(&sdk.Tool{Name: "corrupt", Description: "Prints garbage on stdout.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			_, _ = os.Stdout.WriteString("panic: this is not JSON-RPC\n")
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "done"}}}, nil
		})
	sdk.AddTool(srv, &sdk.Tool{Name: "big", Description: "Repeats the text to the given size.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *sdk.CallToolRequest, in bigIn) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Repeat(in.Text, in.Bytes/len(in.Text))}}}, nil, nil
		})
	if err := srv.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		return 1
	}
	return 0
}

type bigIn struct {
	Bytes int    `json:"bytes" jsonschema:"the result's size"`
	Text  string `json:"text" jsonschema:"what to repeat"`
}

// installHint says how to get the reference servers the tests run.
const installHint = "run .ci/run, or from the repository root: npm install --prefix .ci/node --no-audit --no-fund --save-exact " +
	"@modelcontextprotocol/server-filesystem@2026.8.31 @modelcontextprotocol/server-everything@2026.8.31"

// nodeServer returns the command of a reference MCP server (filesystem or
// everything) installed by .ci/run. When it or Node is missing the test
// is skipped with how to get them, or fails under CI=true.
func nodeServer(tb testing.TB, name string) string {
	tb.Helper()
	path, err := filepath.Abs(filepath.Join("..", ".ci", "node", "node_modules", ".bin", "mcp-server-"+name))
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		missing(tb, os.Getenv("CI") == "true", "the reference server "+name+" is not installed: "+installHint)
	} else if _, err := exec.LookPath("node"); err != nil {
		missing(tb, os.Getenv("CI") == "true", "no node on PATH for the reference servers: install it with `apt-get install -y nodejs npm` (as root), or run .ci/run")
	}
	return path
}

// missing ends a test whose tool is not installed: a skip that says how to
// get it, or under CI=true (where .ci/run installs every one) a failure.
func missing(tb testing.TB, ci bool, how string) {
	tb.Helper()
	if ci {
		tb.Fatal(how)
	} else {
		tb.Skip(how)
	}
}

// logBuffer collects a Manager's log output for assertions.
type logBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// events records what the hooks were told.
type events struct {
	mu     sync.Mutex // guards calls, states and lists
	calls  []string   // server/tool/outcome
	states []string   // server/state
	lists  map[string]int
}

func (e *events) hooks() Hooks {
	return Hooks{
		Call: func(server, tool, outcome string, _ time.Duration) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.calls = append(e.calls, server+"/"+tool+"/"+outcome)
		},
		State: func(server, state, _ string) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.states = append(e.states, server+"/"+state)
		},
		Tools: func(server string, _ int) {
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.lists == nil {
				e.lists = map[string]int{}
			}
			e.lists[server]++
		},
	}
}

func (e *events) snapshot() (calls, states []string, lists map[string]int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	lists = map[string]int{}
	for k, v := range e.lists {
		lists[k] = v
	}
	return append([]string(nil), e.calls...), append([]string(nil), e.states...), lists
}

type harness struct {
	m      *Manager
	logs   *logBuffer
	events *events
}

// start starts a Manager for servers with the given options filled in and
// closes it when the test ends.
func start(tb testing.TB, opts Options) *harness {
	tb.Helper()
	h := &harness{logs: &logBuffer{}, events: &events{}}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	opts.Hooks = h.events.hooks()
	if opts.Env == nil {
		opts.Env = os.Getenv
	}
	if opts.ConnectTimeout == 0 {
		opts.ConnectTimeout = 30 * time.Second
	}
	h.m = New(opts)
	tb.Cleanup(func() {
		if err := h.m.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
		if tb.Failed() {
			tb.Logf("manager log:\n%s", h.logs.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.m.Start(); err != nil {
		tb.Fatalf("Start: %v", err)
	}
	if err := h.m.WaitStarted(ctx); err != nil {
		tb.Fatalf("WaitStarted: %v", err)
	}
	return h
}

// tool returns the offered tool named name.
func (h *harness) tool(tb testing.TB, name string) agent.Tool {
	tb.Helper()
	for _, t := range h.m.Tools() {
		if t.Name == name {
			return t
		}
	}
	tb.Fatalf("no tool %s; offered: %s; status %v", name, toolNames(h.m.Tools()), h.m.Status())
	return agent.Tool{}
}

// run calls the tool named name with a deadline.
func (h *harness) run(tb testing.TB, name, args string) (string, error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return h.tool(tb, name).Run(ctx, &agent.ToolEnv{Session: "test/session"}, args)
}

// waitReady polls until server is ready.
func (h *harness) waitReady(tb testing.TB, server string) {
	tb.Helper()
	waitFor(tb, 30*time.Second, "server "+server+" ready", func() (bool, string) {
		st := h.m.Status()[server]
		return st == StateReady, st
	})
}

func toolNames(tools []agent.Tool) string {
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
	}
	return strings.Join(names, " ")
}

// waitFor polls cond until it holds or the deadline passes; cond returns
// what it saw, for the failure message.
func waitFor(tb testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("waited %s for %s; last saw %s", d, what, seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// toolError returns err's code, or fails the test if err is not an
// *agent.ToolError.
func toolError(tb testing.TB, err error) *agent.ToolError {
	tb.Helper()
	var te *agent.ToolError
	if !errors.As(err, &te) {
		tb.Fatalf("got error %v (%T), want an *agent.ToolError", err, err)
	}
	return te
}

// endRecorder records how a helper ended a test instead of ending it.
type endRecorder struct {
	testing.TB
	skipped, failed string
}

func (r *endRecorder) Helper()           {}
func (r *endRecorder) Skip(args ...any)  { r.skipped = fmt.Sprint(args...) }
func (r *endRecorder) Fatal(args ...any) { r.failed = fmt.Sprint(args...) }

// TestMissingServerSkipsOutsideCI: a reference server that is not
// installed skips the test with how to install it, and fails it under
// CI=true, where .ci/run installed every one.
func TestMissingServerSkipsOutsideCI(t *testing.T) {
	r := &endRecorder{TB: t}
	nodeServer(r, "not-a-reference-server")
	ended := r.skipped
	if os.Getenv("CI") == "true" {
		ended = r.failed
	}
	if !strings.Contains(ended, "npm install --prefix .ci/node") || r.skipped != "" && r.failed != "" {
		t.Errorf("CI=%q: skipped %q, failed %q; want one of them, saying how to install the servers", os.Getenv("CI"), r.skipped, r.failed)
	}
	for _, ci := range []bool{false, true} {
		r := &endRecorder{TB: t}
		missing(r, ci, "install it")
		if got, want := [2]string{r.skipped, r.failed}, map[bool][2]string{false: {"install it", ""}, true: {"", "install it"}}[ci]; got != want {
			t.Errorf("ci=%t: got skipped, failed = %q, want %q", ci, got, want)
		}
	}
}
