package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestConsoleAlwaysNeedsToken: with nothing set, the bot generates a token,
// keeps it beside the DB with mode 0600, prints the console URL with it,
// and no console route answers without it, on loopback too and with the
// Host a reverse proxy on the same machine forwards. Health checks stay
// open. A restart keeps the same token.
func TestConsoleAlwaysNeedsToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := map[string]string{"PINPLAN_DB": filepath.Join(dir, "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0"}
	p := startBot(t, env, botBinary)
	if !regexp.MustCompile(`web console at http://127\.0\.0\.1:\d+/\?token=[0-9a-f]{64}\n`).MatchString(p.stdout.String()) {
		t.Fatalf("startup output has no tokenized console URL:\n%s", p.stdout)
	}
	kept := filepath.Join(dir, "web-token")
	st, err := os.Stat(kept)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file %s: %v, mode %v; want 0600", kept, err, st.Mode().Perm())
	}
	if raw, _ := os.ReadFile(kept); strings.TrimSpace(string(raw)) != p.Token {
		t.Errorf("the kept token is not the printed one")
	}
	host := strings.TrimPrefix(p.URL, "http://")
	for _, tc := range []struct{ method, path, host string }{
		{"GET", "/", ""}, {"GET", "/app.js", ""}, {"GET", "/api/threads", ""}, {"GET", "/api/events", ""},
		{"GET", "/api/backup", ""}, {"GET", "/metrics", ""}, {"GET", "/api/info", ""},
		{"POST", "/api/threads", ""},
		// What nginx's default proxy_pass forwards for Host: bot.example.com.
		{"POST", "/api/threads", host}, {"GET", "/api/backup", host},
	} {
		req, _ := http.NewRequest(tc.method, p.URL+tc.path, strings.NewReader(`{"text":"run something"}`))
		req.Header.Set("Content-Type", "application/json")
		if tc.host != "" {
			req.Host = tc.host
			req.Header.Set("X-Forwarded-Host", "bot.example.com")
		}
		resp, err := anonymous.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s (Host %q) without the token: %d, want 401", tc.method, tc.path, tc.host, resp.StatusCode)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := anonymous.Get(p.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d, want 200 without a token", path, resp.StatusCode)
		}
	}
	// The printed URL just works: it signs a browser in with a cookie.
	noFollow := &http.Client{Transport: anonymous.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(p.link())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) == 0 {
		t.Errorf("the printed URL: %d with cookies %v, want a redirect that sets the cookie", resp.StatusCode, resp.Cookies())
	}
	for _, path := range []string{"/api/threads", "/api/backup", "/metrics"} {
		req, _ := http.NewRequest("GET", p.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+p.Token)
		resp, err := anonymous.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s with the token: %d", path, resp.StatusCode)
		}
	}
	if strings.Contains(p.stderr.String(), p.Token) {
		t.Error("the generated token appears in the log")
	}
	first := p.Token
	p.stop(t)
	q := startBot(t, env, botBinary)
	defer q.stop(t)
	if q.Token != first {
		t.Errorf("after a restart the token changed")
	}
}

// TestSlowBodiesAreCutOff: connections that trickle a request body, on the
// Slack Events endpoint, the sign-in form and the API, are closed by the
// server's read timeout well within a minute, and the bot keeps serving.
func TestSlowBodiesAreCutOff(t *testing.T) {
	// In parallel: it waits on the server's timeouts, with a wide margin.
	t.Parallel()
	p := newSlackRig(t, 1, 0, false).start(t) // Events API over HTTP
	defer p.stop(t)
	host := strings.TrimPrefix(p.URL, "http://")
	paths := []string{"/slack/events", "/login", "/api/threads"}
	var wg sync.WaitGroup
	closedAfter := make([]time.Duration, len(paths))
	for i, path := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", host)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			start := time.Now()
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAuthorization: Bearer %s\r\nContent-Length: 100000\r\n\r\n", path, host, p.Token)
			// One byte a second, for up to 90 s; the server must hang up first.
			done := make(chan struct{})
			go func() {
				defer close(done)
				br := bufio.NewReader(conn)
				br.ReadString(0) // returns when the server closes the connection
			}()
			for time.Since(start) < 90*time.Second {
				select {
				case <-done:
					closedAfter[i] = time.Since(start)
					return
				case <-time.After(time.Second):
				}
				if _, err := conn.Write([]byte("a")); err != nil {
					closedAfter[i] = time.Since(start)
					return
				}
			}
			closedAfter[i] = time.Since(start)
		}()
	}
	wg.Wait()
	for i, d := range closedAfter {
		if d >= 60*time.Second {
			t.Errorf("%s: a trickling body was kept open for %s, want it cut off within 60 s", paths[i], d.Round(time.Second))
		}
	}
	if code, _ := httpGet(t, p.URL+"/healthz"); code != 200 {
		t.Errorf("healthz after the slow clients: %d", code)
	}
}

// TestInvisibleMessageRefused: a message of only zero-width and format
// characters, or with an endless author name, gets a 4xx and starts no
// run.
func TestInvisibleMessageRefused(t *testing.T) {
	t.Parallel()
	p := demoBot(t, "1ms")
	defer p.stop(t)
	api := apiClient{t: t, base: p.URL}
	for _, body := range []map[string]string{
		{"text": "\u200b\u200b\ufeff"},
		{"text": "plan it", "author": strings.Repeat("n", 50000)},
	} {
		if status, out := api.do("POST", "/api/threads", body); status != http.StatusUnprocessableEntity {
			t.Errorf("POST /api/threads %.40q: %d %s, want 422", body, status, out)
		}
	}
	if n := len(api.threads()); n != 0 {
		t.Errorf("%d threads exist after refused messages, want none", n)
	}
}
