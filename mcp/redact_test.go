package mcp

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
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
