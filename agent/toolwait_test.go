package agent_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/store"
)

// startingSource is a tool source whose one tool appears when ready is
// closed, as an MCP server's do once it has connected. WaitTools waits for
// ready, or gives up after giveUp, as mcp.Manager does after its startup
// timeout.
type startingSource struct {
	ready  chan struct{}
	giveUp time.Duration

	mu     sync.Mutex // guards waited
	waited int
}

func (s *startingSource) Tools() []agent.Tool {
	select {
	case <-s.ready:
		return []agent.Tool{{Name: "slow__lookup", Server: "slow", Idempotent: true,
			Parameters: map[string]any{"type": "object"},
			Run:        func(context.Context, *agent.ToolEnv, string) (string, error) { return "found", nil }}}
	default:
		return nil
	}
}

func (s *startingSource) WaitTools(ctx context.Context) []string {
	s.mu.Lock()
	s.waited++
	s.mu.Unlock()
	t := time.NewTimer(s.giveUp)
	defer t.Stop()
	select {
	case <-s.ready:
		return nil
	case <-ctx.Done():
	case <-t.C:
	}
	return []string{"slow"}
}

// offered lists the tool names of a request.
func offered(req openai.ChatCompletionRequest) string {
	var names []string
	for _, t := range req.Tools {
		names = append(names, t.Function.Name)
	}
	return strings.Join(names, " ")
}

func newWaitHarness(t *testing.T, fake *fakeopenai.Server, src agent.ToolSource, logs *bytes.Buffer) *harness {
	t.Helper()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	db, err := store.Open(filepath.Join(t.TempDir(), "pinplan.db"), store.Options{BatchDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	model := agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: srv.URL + "/v1", APIKey: "sk-test", Timeout: 5 * time.Second})
	reg, err := agent.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	reg.AddSource(src)
	h := &harness{fake: fake, db: db, events: map[string]chan agent.Event{}, model: model}
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, logs}, nil))
	h.runner, err = agent.NewRunner(agent.Options{Model: model, Store: db, Tools: reg, ModelName: "fake", Logger: logger,
		Events: publishTo(func(e agent.Event) { h.ch(e.Session) <- e })})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.runner.Close)
	return h
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// TestFirstTurnWaitsForStartingTools: a turn that starts while a tool
// source is still starting waits for it, so its first request offers the
// source's tools (DESIGN.md §16).
func TestFirstTurnWaitsForStartingTools(t *testing.T) {
	fake := &fakeopenai.Server{}
	src := &startingSource{ready: make(chan struct{}), giveUp: 20 * time.Second}
	h := newWaitHarness(t, fake, src, &bytes.Buffer{})
	time.AfterFunc(300*time.Millisecond, func() { close(src.ready) })
	h.send(t, "web/w", "look it up")
	events := h.waitEnd(t, "web/w")
	if end := events[len(events)-1]; end.Outcome != agent.Done {
		t.Fatalf("outcome %s (%v), want done", end.Outcome, end.Err)
	}
	reqs := fake.Requests()
	if len(reqs) == 0 {
		t.Fatal("no model request")
	}
	if got := offered(reqs[0]); !strings.Contains(got, "slow__lookup") {
		t.Errorf("the first request offered %q; want slow__lookup, whose source was still starting when the turn began", got)
	}
}

// TestTurnGoesOnWithoutAMissingSource: a source that is not ready when it
// gives up waiting leaves the turn to go on without its tools, and the log
// names it.
func TestTurnGoesOnWithoutAMissingSource(t *testing.T) {
	fake := &fakeopenai.Server{}
	src := &startingSource{ready: make(chan struct{}), giveUp: 200 * time.Millisecond}
	var logs bytes.Buffer
	h := newWaitHarness(t, fake, src, &logs)
	h.send(t, "web/m", "go")
	events := h.waitEnd(t, "web/m")
	if end := events[len(events)-1]; end.Outcome != agent.Done {
		t.Fatalf("outcome %s (%v), want done without the missing tools", end.Outcome, end.Err)
	}
	if got := offered(fake.Requests()[0]); strings.Contains(got, "slow__") {
		t.Errorf("offered %q, want no tool of the missing source", got)
	}
	h.runner.Close()
	if log := logs.String(); !strings.Contains(log, "slow") || !strings.Contains(log, "session=web/m") {
		t.Errorf("log does not name the missing server and the session:\n%s", log)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.waited != 1 {
		t.Errorf("WaitTools called %d times in a one-round turn, want once", src.waited)
	}
}
