package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// botBinary is the cmd/bot binary built once for the end-to-end tests.
var botBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pinplan-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	botBinary = filepath.Join(dir, "bot")
	args := []string{"build", "-o", botBinary}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build bot: %v\n%s", err, out)
		os.Exit(1)
	}
	http.DefaultTransport = signedIn
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// anonymous sends requests as they are, with no console token: for the
// tests of the token itself.
var anonymous = &http.Client{Transport: http.DefaultTransport}

// signedIn is the tests' default transport: a request to a bot started by
// startBot carries the console token that bot printed (or was given), as
// a bearer header, unless the request has an Authorization of its own.
// The console always needs its token (DESIGN §7); tests of other things
// sign in the way a script would.
var signedIn = &tokenTransport{base: http.DefaultTransport, tokens: map[string]string{}}

type tokenTransport struct {
	base   http.RoundTripper
	mu     sync.Mutex
	tokens map[string]string // by host:port
}

func (t *tokenTransport) set(host, token string) {
	t.mu.Lock()
	t.tokens[host] = token
	t.mu.Unlock()
}

func (t *tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.mu.Lock()
	tok := t.tokens[req.URL.Host]
	t.mu.Unlock()
	if tok != "" && req.Header.Get("Authorization") == "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return t.base.RoundTrip(req)
}

// botProc is a running bot subprocess.
type botProc struct {
	cmd    *exec.Cmd
	URL    string // the web console, e.g. http://127.0.0.1:40123
	Token  string // the console token: printed at start, or PINPLAN_WEB_TOKEN
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan struct{}
	err    error
}

var consoleLine = regexp.MustCompile(`web console at (http://[^/\s]+)/(?:\?token=([0-9a-f]+))?`)

// startBot starts argv with env (on top of a minimal base environment) and
// waits until it prints its console address.
func startBot(t testing.TB, env map[string]string, argv ...string) *botProc {
	t.Helper()
	return startBotIn(t, "", env, argv...)
}

// startBotIn is startBot with the working directory dir.
func startBotIn(t testing.TB, dir string, env map[string]string, argv ...string) *botProc {
	t.Helper()
	p := &botProc{stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "GOCACHE=" + goEnv("GOCACHE"), "GOPATH=" + goEnv("GOPATH"), "GOFLAGS=" + os.Getenv("GOFLAGS")}
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Dir = dir
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Stderr = p.stderr
	pipe, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			p.stdout.Write([]byte(line + "\n"))
			if m := consoleLine.FindStringSubmatch(line); m != nil {
				select {
				case found <- m:
				default:
				}
			}
		}
		io.Copy(io.Discard, pipe)
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if strings.Contains(p.stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("the bot reported a data race:\n%s", p.stderr)
		}
	})
	select {
	case m := <-found:
		p.URL, p.Token = m[1], m[2]
		if p.Token == "" {
			p.Token = env["PINPLAN_WEB_TOKEN"]
		}
		signedIn.set(strings.TrimPrefix(p.URL, "http://"), p.Token)
	case <-p.done:
		t.Fatalf("bot exited before serving: %v\nstdout:\n%s\nstderr:\n%s", p.err, p.stdout, p.stderr)
	case <-time.After(120 * time.Second):
		t.Fatalf("bot did not start\nstderr:\n%s", p.stderr)
	}
	return p
}

// link is the console URL with the token, as the startup line prints a
// generated one.
func (p *botProc) link() string { return p.URL + "/?token=" + p.Token }

func goEnv(key string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	out, _ := exec.Command("go", "env", key).Output()
	return strings.TrimSpace(string(out))
}

// kill sends SIGKILL to the bot's process group and waits for it.
func (p *botProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// stop sends SIGINT (which go run passes on) and waits for a clean exit.
func (p *botProc) stop(t testing.TB) {
	t.Helper()
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-p.done:
		// go run exits 1 after any interrupt, so the bot's own word for a
		// clean stop is its last log line.
		clean := p.err == nil
		if p.cmd.Args[0] == "go" {
			clean = strings.Contains(p.stderr.String(), "msg=stopped")
		}
		if !clean {
			t.Errorf("bot exited with %v after SIGINT\nstderr:\n%s", p.err, p.stderr)
		}
	case <-time.After(30 * time.Second):
		// Its goroutines, for what holds it: SIGQUIT makes a Go binary
		// print them and exit.
		syscall.Kill(p.cmd.Process.Pid, syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			p.kill()
		}
		t.Errorf("bot did not stop on SIGINT\nstderr:\n%s", p.stderr)
	}
}

func postJSON(ctx context.Context, url string, body any) (map[string]any, error) {
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("%s: %w", resp.Status, err)
	}
	if resp.StatusCode >= 300 {
		return out, fmt.Errorf("%s: %v", resp.Status, out)
	}
	return out, nil
}

func getJSON(t testing.TB, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it is true or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// watchEvents reads the console's SSE stream into a buffer until the test ends.
func watchEvents(t testing.TB, base string) *syncBuffer {
	t.Helper()
	buf := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(buf, resp.Body)
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	return buf
}
