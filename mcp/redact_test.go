package mcp

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestServerNeverPrintsSecrets(t *testing.T) {
	s := Server{Name: "tracker", URL: "https://bot:hunter2pass@mcp.example.com/mcp",
		Headers: map[string]string{"Authorization": "Bearer tok-abcdef123456"}, Env: map[string]string{"GITHUB_TOKEN": "ghp_abcdef"},
		Secrets: []string{"tok-abcdef123456"}}
	var logs strings.Builder
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "server", s)
	for _, out := range []string{s.String(), fmt.Sprintf("%v %+v %#v", s, s, s), logs.String()} {
		for _, secret := range []string{"tok-abcdef123456", "ghp_abcdef", "hunter2pass"} {
			if strings.Contains(out, secret) {
				t.Errorf("%q printed in %s", secret, out)
			}
		}
	}
	r := newRedactor(s)
	if got := r.Replace("401: Bearer tok-abcdef123456 / tok-abcdef123456 / hunter2pass"); got != "401: [redacted] / [redacted] / [redacted]" {
		t.Errorf("redacted: %q", got)
	}
}

func TestURLCredentialsNeverShown(t *testing.T) {
	// Nothing listens on port 1: the server fails, and its status and the
	// log carry the error, which names the URL.
	raw := "https://user:pw@127.0.0.1:1/mcp?api_key=SECRET&v=2"
	s := Server{Name: "tracker", URL: raw}
	h := start(t, Options{Servers: []Server{s}, ConnectTimeout: 5 * time.Second})
	waitFor(t, 10*time.Second, "tracker failed", func() (bool, string) {
		st := h.m.Status()["tracker"]
		return strings.HasPrefix(st, StateFailed), st
	})
	var logs strings.Builder
	slog.New(slog.NewTextHandler(&logs, nil)).Info("x", "server", s)
	shown := map[string]string{
		"status":   h.m.Status()["tracker"],
		"Ready":    fmt.Sprint(h.m.Ready()),
		"log":      h.logs.String(),
		"String":   fmt.Sprintf("%v %+v %#v", s, s, s),
		"LogValue": logs.String(),
	}
	for where, out := range shown {
		for _, secret := range []string{"SECRET", "pw"} {
			if strings.Contains(out, secret) {
				t.Errorf("%s shows %q: %s", where, secret, out)
			}
		}
	}
	if !strings.Contains(shown["status"], "127.0.0.1:1/mcp") {
		t.Errorf("status %q does not name the server's host and path", shown["status"])
	}
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://mcp.example.com/mcp", "https://mcp.example.com/mcp"},
		{"https://user:pw@host/mcp?api_key=SECRET", "https://***@host/mcp?api_key=***"},
		{"https://token@host/mcp", "https://***@host/mcp"},
		{"http://host:8080/a/b?x=1&x=2&y=&z", "http://host:8080/a/b?x=***&x=***&y=***&z=***"},
		{"https://host/mcp#frag", "https://host/mcp#***"},
	}
	for _, tt := range tests {
		if got := redactURL(tt.in); got != tt.want {
			t.Errorf("redactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestEnvValuesNeverLogged(t *testing.T) {
	srv := Server{Name: "chatty", Command: []string{script(t, `echo "key is $MY_SECRET, short is $SHORT" >&2
echo "$MY_SECRET" >&2
exec sleep 30
`)}, Env: map[string]string{"MY_SECRET": "literal-secret-value", "SHORT": "on"}}
	h := start(t, Options{Servers: []Server{srv}, ConnectTimeout: 2 * time.Second})
	waitFor(t, 10*time.Second, "the server's stderr logged", func() (bool, string) {
		logs := h.logs.String()
		return strings.Count(logs, "mcp server stderr") >= 2, logs
	})
	logs := h.logs.String()
	if strings.Contains(logs, "literal-secret-value") {
		t.Errorf("an env value was logged:\n%s", logs)
	}
	if !strings.Contains(logs, "key is ") {
		t.Errorf("the stderr line was not logged:\n%s", logs)
	}
}

// TestMCPStatusRedactsURL is what /readyz shows for a URL server whose
// URL carries credentials.
func TestMCPStatusRedactsURL(t *testing.T) {
	// Nothing listens on port 1: the error names the URL.
	m := New(Options{Servers: []Server{{Name: "tracker", URL: "https://user:pw@127.0.0.1:1/mcp?api_key=SECRET"}}})
	t.Cleanup(func() { m.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	if err := m.WaitStarted(ctx); err != nil {
		t.Fatal(err)
	}
	got := m.StatusText()
	if !strings.HasPrefix(got, "mcp tracker: failed: ") {
		t.Fatalf("got %q, want the server failed", got)
	}
	for _, secret := range []string{"SECRET", "pw"} {
		if strings.Contains(got, secret) {
			t.Errorf("/readyz shows %q: %q", secret, got)
		}
	}
}
