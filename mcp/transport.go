package mcp

import (
	"errors"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// stopWait is how long a stdio server gets to exit after its stdin closes,
// and then after SIGTERM, before it is killed.
const stopWait = 2 * time.Second

// inherited are the variables of the bot's environment a stdio server
// gets; the MCP TypeScript SDK passes about the same few. The bot's tokens
// stay out of the children.
var inherited = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR", "TZ"}

// transport returns a fresh transport for one connection attempt and, for
// a stdio server, the command it will start.
func (s *server) transport() (sdk.Transport, *exec.Cmd, error) {
	if s.cfg.URL != "" {
		return &sdk.StreamableClientTransport{
			Endpoint:     s.cfg.URL,
			HTTPClient:   &http.Client{Transport: &headerTransport{base: s.http, headers: s.cfg.Headers, cut: s.cutter}},
			MaxEventSize: maxFrame,
		}, nil, nil
	}
	if len(s.cfg.Command) == 0 || s.cfg.Command[0] == "" {
		return nil, nil, errors.New("no command or url configured")
	}
	cmd := exec.Command(s.cfg.Command[0], s.cfg.Command[1:]...)
	cmd.Env = s.childEnv()
	cmd.Stderr = &stderrLog{g: s.stderr}
	cmd.WaitDelay = stopWait // a grandchild holding stderr open must not stall Wait
	setProcessGroup(cmd)
	return &commandTransport{cmd: cmd, cut: s.cutter, wait: stopWait}, cmd, nil
}

func (s *server) childEnv() []string {
	var env []string
	for _, k := range inherited {
		if _, set := s.cfg.Env[k]; set {
			continue
		}
		if v := s.m.opts.Env(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	keys := make([]string, 0, len(s.cfg.Env))
	for k := range s.cfg.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		env = append(env, k+"="+s.cfg.Env[k])
	}
	return env
}

// reap kills whatever is left of a stdio server's process group once its
// session is closed (the SDK has already waited for the process itself).
func (s *server) reap(cmd *exec.Cmd) {
	if cmd != nil && cmd.Process != nil {
		killProcessGroup(cmd)
	}
}

func newHTTPTransport() *http.Transport {
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		return t.Clone()
	}
	return &http.Transport{}
}

// cutter returns r read through a cutter for this server's result limit.
func (s *server) cutter(r io.Reader) io.Reader {
	return newCutter(r, cutAt(s.m.opts.ResultBytes), s.m.cutMark)
}

// headerTransport adds the configured headers to every request and reads
// every response through a cutter.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
	cut     func(io.Reader) io.Reader
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(t.headers) > 0 {
		req = req.Clone(req.Context())
		for k, v := range t.headers {
			req.Header.Set(k, v)
		}
	}
	resp, err := t.base.RoundTrip(req)
	if err == nil && resp.Body != nil && t.cut != nil {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{t.cut(resp.Body), resp.Body}
	}
	return resp, err
}
