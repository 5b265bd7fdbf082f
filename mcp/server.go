package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pinplan/pinplan/agent"
)

// Reconnect backoff: 1s doubling to 1 min, each wait drawn from [d/2, d).
const (
	minBackoff = time.Second
	maxBackoff = time.Minute
)

// server is one configured server: its run loop (connect, list, serve,
// reconnect) and the state the calls and Tools read.
type server struct {
	m      *Manager
	cfg    Server
	log    *slog.Logger
	redact *redactor
	client *sdk.Client
	http   *http.Transport // HTTP servers: its idle connections are closed by Close
	stderr *stderrGate     // stdio servers: their stderr's way to the log

	first  chan struct{} // closed when the first connection attempt is over
	relist chan struct{} // cap 1: the server said its tool list changed
	kick   chan struct{} // cap 1: a call found the session dead

	mu      sync.Mutex // guards session, cmd, tools, state and detail
	session *sdk.ClientSession
	cmd     *exec.Cmd    // the stdio server's process while it runs
	tools   []agent.Tool // as last listed; kept while reconnecting
	state   string
	detail  string

	warned map[string]bool // tools whose problem was logged; run loop only
}

func newServer(m *Manager, cfg Server) *server {
	r := newRedactor(cfg)
	s := &server{
		m:   m,
		cfg: cfg,
		// Every line logged for this server, the SDK's among them, is
		// redacted on its way out.
		log:    slog.New(&redactHandler{next: m.log.With("server", cfg.Name).Handler(), r: r}),
		redact: r,
		first:  make(chan struct{}),
		relist: make(chan struct{}, 1),
		kick:   make(chan struct{}, 1),
		state:  StateConnecting,
		warned: map[string]bool{},
	}
	s.stderr = newStderrGate(s)
	if cfg.URL != "" {
		s.http = newHTTPTransport()
	}
	s.client = sdk.NewClient(&sdk.Implementation{Name: "pinplan", Version: "1"}, &sdk.ClientOptions{
		Logger: s.log,
		// pinplan has no roots, sampling or elicitation to offer.
		Capabilities: &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			// The run loop re-lists; calling back into the session from
			// a notification handler could stall its reader.
			signal(s.relist)
		},
		KeepAlive:                 keepAlive(cfg),
		KeepAliveFailureThreshold: 3,
	})
	return s
}

// keepAlive pings HTTP servers so one that vanished while idle is noticed;
// a stdio server's exit is noticed by its pipe closing.
func keepAlive(cfg Server) time.Duration {
	if cfg.URL != "" {
		return 30 * time.Second
	}
	return 0
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// run connects, serves and reconnects until ctx ends.
func (s *server) run(ctx context.Context) {
	backoff := minBackoff
	first := true
	firstDone := func() {
		// After the state is set: WaitStarted's caller reads Status.
		if first {
			close(s.first)
			first = false
		}
	}
	defer firstDone()
	for {
		cs, err := s.connect(ctx)
		if err != nil && ctx.Err() != nil {
			return
		}
		wait := jitter(backoff)
		if err != nil {
			s.setState(StateFailed, err.Error())
			firstDone()
			s.log.Error("mcp server failed to start; retrying", "error", s.redact.Log(err.Error()), "retry_in", wait.Round(time.Millisecond))
		} else {
			firstDone()
			up := time.Now()
			s.serve(ctx, cs) // closes cs, at once if ctx has ended meanwhile
			if ctx.Err() != nil {
				return
			}
			if time.Since(up) >= maxBackoff {
				// It ran a while: a fresh failure, not a crash loop.
				backoff = minBackoff
				wait = jitter(backoff)
			}
			s.setState(StateConnecting, "")
			s.log.Warn("mcp server connection lost; reconnecting", "retry_in", wait.Round(time.Millisecond))
		}
		if !sleep(ctx, wait) {
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// connect starts the server, initializes the session and lists the tools.
func (s *server) connect(ctx context.Context) (*sdk.ClientSession, error) {
	ctx, cancel := context.WithTimeout(ctx, s.m.opts.ConnectTimeout)
	defer cancel()
	t, cmd, err := s.transport()
	if err != nil {
		return nil, err
	}
	cs, err := s.client.Connect(ctx, t, nil)
	if err != nil {
		s.reap(cmd)
		return nil, connectErr(ctx, cmd, s.m.opts.ConnectTimeout, err)
	}
	tools, err := s.list(ctx, cs)
	if err != nil {
		_ = cs.Close()
		s.reap(cmd)
		return nil, connectErr(ctx, cmd, s.m.opts.ConnectTimeout, fmt.Errorf("list tools: %w", err))
	}
	s.mu.Lock()
	s.session, s.cmd, s.tools = cs, cmd, tools
	s.mu.Unlock()
	s.setState(StateReady, "")
	protocol := ""
	if r := cs.InitializeResult(); r != nil {
		protocol = r.ProtocolVersion
	}
	s.log.Info("mcp server ready", "tools", len(tools), "protocol", protocol)
	return cs, nil
}

// connectErr says why a connection attempt failed in words an operator can
// act on.
func connectErr(ctx context.Context, cmd *exec.Cmd, timeout time.Duration, err error) error {
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return fmt.Errorf("no answer within %s: %w", timeout, err)
	case cmd != nil && strings.Contains(err.Error(), "invalid character"):
		return fmt.Errorf("it wrote something other than JSON-RPC to stdout: %w", err)
	case cmd != nil && cmd.ProcessState != nil && cmd.ProcessState.Exited():
		// The SDK waited for the process when it closed the session.
		return fmt.Errorf("%w (the process ended: %s)", err, cmd.ProcessState)
	}
	return err
}

// serve waits until the session ends, a call finds it dead or ctx ends,
// re-listing the tools when the server says they changed; then it closes
// the session and stops the process.
func (s *server) serve(ctx context.Context, cs *sdk.ClientSession) {
	ended := make(chan struct{})
	go func() {
		_ = cs.Wait()
		close(ended)
	}()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-ended:
			break loop
		case <-s.kick:
			s.mu.Lock()
			dead := s.session != cs
			s.mu.Unlock()
			if dead {
				break loop
			}
		case <-s.relist:
			lctx, cancel := context.WithTimeout(ctx, s.m.opts.Timeout)
			tools, err := s.list(lctx, cs)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("mcp server tools re-list failed", "error", s.redact.Log(err.Error()))
				}
				if connectionLost(err) {
					break loop
				}
				continue
			}
			s.mu.Lock()
			s.tools = tools
			s.mu.Unlock()
			s.log.Info("mcp server tools changed", "tools", len(tools))
		}
	}
	s.mu.Lock()
	if s.session == cs {
		s.session = nil
	}
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	_ = cs.Close()
	<-ended
	s.reap(cmd)
}

// lost marks cs dead after a call found it so; the run loop reconnects.
func (s *server) lost(cs *sdk.ClientSession) {
	s.mu.Lock()
	current := s.session == cs
	if current {
		s.session = nil
	}
	s.mu.Unlock()
	if current {
		s.setState(StateConnecting, "")
	}
	signal(s.kick)
}

// current returns the live session, or nil.
func (s *server) current() *sdk.ClientSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.session
}

func (s *server) setState(state, detail string) {
	detail = s.redact.Log(detail)
	s.mu.Lock()
	changed := s.state != state || s.detail != detail
	s.state, s.detail = state, detail
	s.mu.Unlock()
	if changed && s.m.opts.Hooks.State != nil {
		s.m.opts.Hooks.State(s.cfg.Name, state, detail)
	}
}

func (s *server) status() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statusLocked()
}

func (s *server) statusLocked() string {
	if s.state == StateFailed {
		return StateFailed + ": " + s.detail
	}
	return s.state
}

// closeIdle lets go of what the server holds once its run loop ended.
func (s *server) closeIdle() {
	if s.http != nil {
		s.http.CloseIdleConnections()
	}
	s.stderr.close()
}

// connectionLost reports whether err means the session is gone, not that
// one request failed.
func connectionLost(err error) bool {
	return errors.Is(err, sdk.ErrConnectionClosed) || errors.Is(err, sdk.ErrSessionMissing)
}

// jitter returns a wait in [d/2, d).
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2)
}

// sleep waits d or until ctx ends; false means ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
