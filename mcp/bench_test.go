package mcp

import (
	"context"
	"log/slog"
	"net/http"
	"os/exec"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pinplan/pinplan/agent"
)

// BenchmarkCall compares one tool call through the Manager (agent.Tool.Run:
// argument check, timeout, result conversion, hooks) with the same call
// made directly on a go-sdk client session, against the same server in the
// same run: the in-process streamable-HTTP server, and server-everything
// over stdio.
//
//	go test -run '^$' -bench BenchmarkCall -benchmem ./mcp/
func BenchmarkCall(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(&logBuffer{}, &slog.HandlerOptions{Level: slog.LevelInfo})) // as in production
	b.Run("http", func(b *testing.B) {
		const token = "tok-bench-0123456789"
		srv := newHTTPServer(b, token)
		headers := map[string]string{"Authorization": "Bearer " + token}
		h := start(b, Options{Logger: quiet, Servers: []Server{{Name: "remote", URL: srv.ts.URL, Headers: headers}}})
		base := newHTTPTransport()
		b.Cleanup(base.CloseIdleConnections)
		direct := &sdk.StreamableClientTransport{Endpoint: srv.ts.URL, HTTPClient: &http.Client{Transport: &headerTransport{base: base, headers: headers}}}
		benchPair(b, h.tool(b, "remote__echo"), direct)
	})
	b.Run("stdio", func(b *testing.B) {
		bin := nodeServer(b, "everything")
		h := start(b, Options{Logger: quiet, Servers: []Server{{Name: "ev", Command: []string{bin}}}})
		h.waitReady(b, "ev")
		direct := &sdk.CommandTransport{Command: exec.Command(bin), TerminateDuration: stopWait}
		benchPair(b, h.tool(b, "ev__echo"), direct)
	})
}

// benchPair runs the echo call through tool and through a session of its
// own over direct.
func benchPair(b *testing.B, tool agent.Tool, direct sdk.Transport) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, &sdk.ClientOptions{Capabilities: &sdk.ClientCapabilities{}})
	cs, err := client.Connect(ctx, direct, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	env := &agent.ToolEnv{Session: "bench"}
	b.Run("manager", func(b *testing.B) {
		for b.Loop() {
			if out, err := tool.Run(ctx, env, `{"message":"hi"}`); err != nil || out != "Echo: hi" {
				b.Fatalf("got %q, %v", out, err)
			}
		}
	})
	b.Run("sdk", func(b *testing.B) {
		for b.Loop() {
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hi"}})
			if err != nil || res.IsError || len(res.Content) != 1 {
				b.Fatalf("got %v, %v", res, err)
			}
		}
	})
}
