package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// slowMCPConfig writes a config whose one server, fs, is the reference
// filesystem server started after a pause of delay, as npx is while it
// checks the registry.
func slowMCPConfig(t *testing.T, delay string) string {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "slow-fs.sh")
	body := fmt.Sprintf("#!/bin/sh\nsleep %s\nexec %q %q\n", delay, mcpServerPath(t, "filesystem"), dir)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "pinplan.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("[mcp.fs]\ncommand = [%q]\n", script)), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// offeredTools lists the tool names of a model request.
func offeredTools(req openai.ChatCompletionRequest) string {
	var names []string
	for _, tl := range req.Tools {
		names = append(names, tl.Function.Name)
	}
	return strings.Join(names, " ")
}

// TestFirstTurnAfterStartHasMCPTools: a message sent the moment the bot
// serves, while its MCP server is still starting, gets a turn whose first
// model request offers that server's tools (DESIGN §16); a server that
// does not start within PINPLAN_MCP_STARTUP_TIMEOUT leaves the turn to go
// on without it, and the log names it.
func TestFirstTurnAfterStartHasMCPTools(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		delay   string // before the server starts
		timeout string // PINPLAN_MCP_STARTUP_TIMEOUT
		want    bool   // the first request offers fs__ tools
	}{
		{"slow server", "3", "30s", true},
		{"too slow", "60", "1s", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeopenai.Server{}
			srv := httptest.NewServer(fake)
			defer srv.Close()
			p := startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
				"OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": "sk-test", "PINPLAN_CONFIG": slowMCPConfig(t, tt.delay),
				"PINPLAN_MCP_STARTUP_TIMEOUT": tt.timeout}, botBinary)
			defer p.stop(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := postJSON(ctx, p.URL+"/api/threads", map[string]string{"text": "what is in the folder?"}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 60*time.Second, "the first model request", func() bool { return len(fake.Requests()) > 0 })
			got := offeredTools(fake.Requests()[0])
			if has := strings.Contains(got, "fs__list_directory"); has != tt.want {
				t.Errorf("the first request offered %q; want fs__ tools: %v\nstderr:\n%s", got, tt.want, p.stderr)
			}
			if !tt.want {
				waitFor(t, 10*time.Second, "the log to name the missing server", func() bool {
					return strings.Contains(p.stderr.String(), "the turn goes on without their tools") && strings.Contains(p.stderr.String(), "missing=fs")
				})
			}
		})
	}
}
