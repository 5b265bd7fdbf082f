// Package mcp connects to the MCP servers configured for pinplan (stdio
// commands and streamable-HTTP URLs, DESIGN.md §12) and offers their tools
// to the agent as agent.Tool values, named <server>__<tool>.
//
// A Manager holds one client session per server, shared by every thread,
// restarts a server that exits or can't be reached (exponential backoff with
// jitter), re-lists the tools on notifications/tools/list_changed, and turns
// each call's result or failure into what DESIGN.md §12 promises the model:
// joined text, a size cap, a timeout, tool_failed, tool_unavailable.
//
// It wraps github.com/modelcontextprotocol/go-sdk the way store wraps bbolt:
// it imports agent (for agent.Tool) and nothing else of pinplan's, and only
// cmd/bot imports it.
package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pinplan/pinplan/agent"
)

// Server is one configured MCP server: exactly one of Command (a local
// program spoken to over stdin/stdout) and URL (streamable HTTP).
// Its String, GoString and LogValue never show Env or Headers values.
type Server struct {
	Name    string            // [a-z0-9_-]{1,20}; tools are offered as <Name>__<tool>
	Command []string          // stdio: the program and its arguments
	Env     map[string]string // stdio: set in the child's environment, over the inherited few
	URL     string            // streamable HTTP endpoint
	Headers map[string]string // HTTP: sent with every request (Authorization, ...)
	Policy  string            // allow, ask or deny; "" lets annotations decide
	Tools   map[string]string // MCP tool name -> allow, ask or deny; wins over Policy

	// Secrets are more values (what ${VAR} references resolved to) kept out
	// of logs, errors and results, besides the values of Headers.
	Secrets []string
}

func (s Server) String() string {
	if s.URL != "" {
		return fmt.Sprintf("%s (%s)", s.Name, redactURL(s.URL))
	}
	if len(s.Command) > 0 {
		return fmt.Sprintf("%s (%s)", s.Name, s.Command[0])
	}
	return s.Name
}

// GoString keeps %#v from printing header and env values.
func (s Server) GoString() string { return fmt.Sprintf("mcp.Server{%q}", s.String()) }

// LogValue implements slog.LogValuer.
func (s Server) LogValue() slog.Value { return slog.StringValue(s.String()) }

// Hooks are optional callbacks for metrics. They are called from the
// Manager's goroutines and from Run, so they must be safe for concurrent
// use and quick.
type Hooks struct {
	// Call reports a finished tool call: tool is the server's own name for
	// it, outcome one of the Outcome constants.
	Call func(server, tool, outcome string, took time.Duration)
	// State reports a server's new state (StateConnecting, StateReady,
	// StateFailed) with the redacted reason for StateFailed.
	State func(server, state, detail string)
	// Tools reports how many tools a server offers after each listing.
	Tools func(server string, offered int)
}

// Server states, as Status reports them ("failed: <reason>" for
// StateFailed).
const (
	StateConnecting = "connecting"
	StateReady      = "ready"
	StateFailed     = "failed"
)

// Outcomes of a call, as Hooks.Call reports them. The error ones are also the
// codes of the agent.ToolError that Run returns.
const (
	OutcomeOK               = "ok"
	OutcomeToolFailed       = "tool_failed"
	OutcomeTimeout          = "timeout"
	OutcomeUnavailable      = "tool_unavailable"
	OutcomeInvalidArguments = "invalid_arguments"
	OutcomeCanceled         = "canceled" // the ctx given to Run ended (Stop)
)

// Options configure a Manager.
type Options struct {
	Servers     []Server
	ResultBytes int           // longest result given to the model; 0 means 16384
	Timeout     time.Duration // longest call; 0 means 120s
	Logger      *slog.Logger  // nil discards; the Manager adds component=mcp
	Hooks       Hooks
	// Env reads the bot's environment (os.Getenv in main) for the few
	// variables a stdio server inherits: HOME, LOGNAME, PATH, SHELL, TERM,
	// USER, LANG, LC_ALL, TMPDIR, TZ. Nothing else of the bot's environment
	// (its tokens) reaches a server; Server.Env adds to it. It must give
	// PATH (npx and "#!/usr/bin/env node" servers need it). Nil means
	// os.Getenv.
	Env func(string) string
	// ConnectTimeout bounds starting a server, its initialization and its
	// first tool listing; 0 means 60s (npx may download the package first).
	ConnectTimeout time.Duration
	// StartupTimeout is how long a turn that starts while a server is
	// still on its first connection attempt waits for it
	// (PINPLAN_MCP_STARTUP_TIMEOUT); 0 means 10s.
	StartupTimeout time.Duration
}

// Default limits (DESIGN.md §9).
const (
	DefaultResultBytes    = 16384
	DefaultTimeout        = 120 * time.Second
	DefaultConnectTimeout = 60 * time.Second
	DefaultStartupTimeout = 10 * time.Second
)

// ErrNotReady is what Ready wraps when a server is not connected.
var ErrNotReady = errors.New("mcp: not every server is ready")

// Manager owns one session per configured server and offers their tools.
type Manager struct {
	opts    Options
	log     *slog.Logger
	servers []*server // sorted by name; fixed by New

	// cutMark starts the mark a cutter leaves in a string it shortened;
	// the nonce keeps a result that quotes one from being miscounted.
	cutMark string

	ctx    context.Context // the servers' lifetime, ended by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the servers' run loops

	mu      sync.Mutex // guards started and closed
	started bool
	closed  bool
}

var _ agent.StartingSource = (*Manager)(nil)

// New returns a Manager for opts.Servers; Start connects them.
func New(opts Options) *Manager {
	if opts.ResultBytes <= 0 {
		opts.ResultBytes = DefaultResultBytes
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = DefaultConnectTimeout
	}
	if opts.StartupTimeout <= 0 {
		opts.StartupTimeout = DefaultStartupTimeout
	}
	if opts.Env == nil {
		opts.Env = os.Getenv
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{opts: opts, log: opts.Logger.With("component", "mcp"), cutMark: fmt.Sprintf("[pinplan-cut %016x ", rand.Uint64())}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	for _, cfg := range opts.Servers {
		m.servers = append(m.servers, newServer(m, cfg))
	}
	slices.SortFunc(m.servers, func(a, b *server) int { return strings.Compare(a.cfg.Name, b.cfg.Name) })
	return m
}

// Start connects every server in parallel, in the background, and
// returns at once: a server slow to start holds nothing up (DESIGN.md
// §16), and its tools appear in Tools when it is ready. A server that
// fails is logged, reported by Status and retried with backoff until
// Close; it never makes Start fail. The sessions live until Close.
func (m *Manager) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started || m.closed {
		return errors.New("mcp: Start called twice or after Close")
	}
	m.started = true
	for _, s := range m.servers {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			s.run(m.ctx)
		}()
	}
	return nil
}

// WaitStarted returns, after Start, once every server has connected or
// failed its first attempt, or when ctx ends.
func (m *Manager) WaitStarted(ctx context.Context) error {
	for _, s := range m.servers {
		select {
		case <-s.first:
		case <-ctx.Done():
			return fmt.Errorf("mcp: start: %w", context.Cause(ctx))
		}
	}
	return nil
}

// WaitTools implements agent.StartingSource: after Start, it waits for
// the servers still on their first connection attempt, up to
// StartupTimeout or until ctx ends, and returns the names of those still
// connecting then; the turn goes on without their tools. Once every
// server has connected or failed once it returns at once: a server that
// failed, or that reconnects later, is never waited for.
func (m *Manager) WaitTools(ctx context.Context) []string {
	m.mu.Lock()
	started := m.started
	m.mu.Unlock()
	if !started {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.opts.StartupTimeout)
	defer cancel()
	var missing []string
	for _, s := range m.servers {
		select {
		case <-s.first:
			continue
		default:
		}
		select {
		case <-s.first:
		case <-ctx.Done():
			missing = append(missing, s.cfg.Name)
		}
	}
	return missing
}

// Close ends every session, stops every server process and waits for the
// Manager's goroutines. Calls in flight end with tool_unavailable.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	for _, s := range m.servers {
		s.closeIdle()
	}
	return nil
}

// Tools implements agent.ToolSource: the tools every server offers now,
// sorted by server. A server that is reconnecting keeps offering the tools
// it last listed (a call answers tool_unavailable until it is back), so the
// model's tool list does not change under a running turn.
func (m *Manager) Tools() []agent.Tool {
	var out []agent.Tool
	for _, s := range m.servers {
		s.mu.Lock()
		out = append(out, s.tools...)
		s.mu.Unlock()
	}
	return out
}

// Status returns each server's state: "ready", "connecting" or
// "failed: <reason>", for /readyz.
func (m *Manager) Status() map[string]string {
	out := make(map[string]string, len(m.servers))
	for _, s := range m.servers {
		out[s.cfg.Name] = s.status()
	}
	return out
}

// StatusText is Status as /readyz shows it: "mcp <name>: <state>" a
// line, by name. A server that is down does not make the bot unready:
// its tools answer tool_unavailable and it is retried.
func (m *Manager) StatusText() string {
	st := m.Status()
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(st)) {
		fmt.Fprintf(&b, "mcp %s: %s\n", name, st[name])
	}
	return b.String()
}

// Ready returns nil when every server is ready, else an error wrapping
// ErrNotReady that names the others and their state.
func (m *Manager) Ready() error {
	var bad []string
	for _, s := range m.servers {
		if st := s.status(); st != StateReady {
			bad = append(bad, s.cfg.Name+" "+st)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrNotReady, strings.Join(bad, "; "))
	}
	return nil
}
