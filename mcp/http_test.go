package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pinplan/pinplan/agent"
)

// httpServer is a streamable-HTTP MCP server made with the go-sdk's own
// server, that wants "Authorization: Bearer <token>" like a hosted one.
type httpServer struct {
	mcp   *sdk.Server
	ts    *httptest.Server
	token string

	mu        sync.Mutex // guards cancelled and rejected
	cancelled int        // slow calls whose context the client cancelled
	rejected  []string   // Authorization headers refused
}

type echoIn struct {
	Message string `json:"message" jsonschema:"what to echo"`
}

func newHTTPServer(tb testing.TB, token string) *httpServer {
	tb.Helper()
	s := &httpServer{token: token, mcp: sdk.NewServer(&sdk.Implementation{Name: "remote", Version: "1"}, nil)}
	sdk.AddTool(s.mcp, &sdk.Tool{Name: "echo", Description: "Echoes the message.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "Echo: " + in.Message}}}, nil, nil
		})
	s.mcp.AddTool(&sdk.Tool{Name: "slow", Description: "Waits until cancelled.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			<-ctx.Done()
			s.mu.Lock()
			s.cancelled++
			s.mu.Unlock()
			return nil, ctx.Err()
		})
	// A tool that fails and, like some careless servers, repeats the
	// credentials it was sent.
	s.mcp.AddTool(&sdk.Tool{Name: "whoami", Description: "Fails, quoting the request's Authorization header.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{
				Text: "not allowed for " + req.Extra.Header.Get("Authorization")}}}, nil
		})
	// "properties" must be an object: a model API would reject the request.
	s.mcp.AddTool(&sdk.Tool{Name: "badschema", Description: "Has a broken input schema.", InputSchema: json.RawMessage(`{"type":"object","properties":["path"]}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{}, nil
		})
	sdk.AddTool(s.mcp, &sdk.Tool{Name: "big", Description: "Repeats the text to the given size.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *sdk.CallToolRequest, in bigIn) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Repeat(in.Text, in.Bytes/len(in.Text))}}}, nil, nil
		})
	s.ts = httptest.NewUnstartedServer(s.handler())
	s.ts.Start()
	tb.Cleanup(s.close)
	return s
}

func (s *httpServer) handler() http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.mcp }, nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Authorization"); got != "Bearer "+s.token {
			s.mu.Lock()
			s.rejected = append(s.rejected, got)
			s.mu.Unlock()
			// Like many servers, it echoes what it refused.
			http.Error(w, "invalid credentials: "+got, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// close stops the server, ending its open streams first, and the sessions
// of clients that left without saying so.
func (s *httpServer) close() {
	s.ts.CloseClientConnections()
	s.ts.Close()
	for ss := range s.mcp.Sessions() {
		_ = ss.Close()
	}
}

// restart serves again on the same address.
func (s *httpServer) restart(tb testing.TB) {
	tb.Helper()
	addr := s.ts.Listener.Addr().String()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatalf("listen again on %s: %v", addr, err)
	}
	s.ts = httptest.NewUnstartedServer(s.handler())
	s.ts.Listener.Close()
	s.ts.Listener = l
	s.ts.Start()
}

func (s *httpServer) counts() (cancelled int, rejected []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancelled, append([]string(nil), s.rejected...)
}

// TestHTTPBearerToken: a server's headers are sent with every request and
// never shown. The servers are what the bot makes of
//
//	[mcp.remote]
//	url = "..."
//	headers = { Authorization = "Bearer ${REMOTE_TOKEN}" }
//
// (cmd/bot's TestMCPServersFromConfig checks that conversion).
func TestHTTPBearerToken(t *testing.T) {
	const token, wrong = "tok-4f9c2e7a1b3d5c6e", "tok-wrong-0000000000"
	srv := newHTTPServer(t, token)
	servers := []Server{
		{Name: "remote", URL: srv.ts.URL, Headers: map[string]string{"Authorization": "Bearer " + token}, Secrets: []string{token}},
		{Name: "stale", URL: srv.ts.URL, Headers: map[string]string{"Authorization": "Bearer " + wrong}, Secrets: []string{wrong}},
	}
	h := start(t, Options{Servers: servers, ConnectTimeout: 5 * time.Second})
	var texts []string // every status and error the test saw, checked for the tokens at the end

	h.waitReady(t, "remote")
	status := h.m.Status()
	texts = append(texts, status["stale"], fmt.Sprint(h.m.Ready()))
	if !strings.HasPrefix(status["stale"], "failed: ") || !strings.Contains(status["stale"], "Unauthorized") {
		t.Errorf("stale: status %q, want failed: ... Unauthorized", status["stale"])
	}
	if _, rejected := srv.counts(); len(rejected) == 0 || rejected[0] != "Bearer "+wrong {
		t.Errorf("the server refused %q, want the stale server's header", rejected)
	}

	out, err := h.run(t, "remote__echo", `{"message":"over http"}`)
	if err != nil || out != "Echo: over http" {
		t.Errorf("echo: %q, %v", out, err)
	}
	if tool := h.tool(t, "remote__slow"); !tool.Ask || tool.Idempotent {
		t.Errorf("slow: ask=%t idempotent=%t; a tool without annotations asks and is not idempotent", tool.Ask, tool.Idempotent)
	}

	_, err = h.run(t, "remote__whoami", `{}`)
	te := toolError(t, err)
	texts = append(texts, te.Message)
	if te.Code != "tool_failed" || te.Message != "not allowed for [redacted]" {
		t.Errorf("whoami: got %s %q, want tool_failed with the token redacted", te.Code, te.Message)
	}

	// Stop: cancelling the call's context cancels it on the server.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	_, err = h.tool(t, "remote__slow").Run(ctx, &agent.ToolEnv{}, `{}`)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("slow: got %v, want context.Canceled", err)
	}
	texts = append(texts, fmt.Sprint(err))
	waitFor(t, 10*time.Second, "the server to see the cancellation", func() (bool, string) {
		n, _ := srv.counts()
		return n == 1, fmt.Sprintf("%d cancelled", n)
	})

	// A tool with a broken schema is skipped, and said so once.
	for _, tool := range h.m.Tools() {
		if strings.HasSuffix(tool.Name, "__badschema") {
			t.Errorf("offered %s", tool.Name)
		}
	}
	// notifications/tools/list_changed: a tool added later is offered.
	srv.mcp.AddTool(&sdk.Tool{Name: "added", Description: "Added while connected.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "new"}}}, nil
		})
	waitFor(t, 10*time.Second, "remote__added to be offered", func() (bool, string) {
		names := toolNames(h.m.Tools())
		return strings.Contains(names, "remote__added"), names
	})
	if out, err := h.run(t, "remote__added", ""); err != nil || out != "new" {
		t.Errorf("added: %q, %v", out, err)
	}
	logs := h.logs.String()
	if n := strings.Count(logs, "input schema is not a valid JSON object schema"); n != 1 {
		t.Errorf("the broken schema was logged %d times, want once (across re-listings)", n)
	}

	texts = append(texts, logs)
	for _, text := range texts {
		for _, secret := range []string{token, wrong} {
			if strings.Contains(text, secret) {
				t.Errorf("token %q appears in %q", secret, text)
			}
		}
	}
}

func TestHTTPServerDownThenBack(t *testing.T) {
	const token = "tok-down-and-back-123"
	srv := newHTTPServer(t, token)
	h := start(t, Options{Servers: []Server{{Name: "remote", URL: srv.ts.URL, Headers: map[string]string{"Authorization": "Bearer " + token}}}})
	h.waitReady(t, "remote")
	tool := h.tool(t, "remote__echo")

	srv.close()
	_, err := h.run(t, "remote__echo", `{"message":"anyone?"}`)
	if te := toolError(t, err); te.Code != "tool_unavailable" || strings.Contains(te.Message, token) {
		t.Errorf("server down: got %s %q, want tool_unavailable", te.Code, te.Message)
	}
	waitFor(t, 10*time.Second, "the server to be reported down", func() (bool, string) {
		st := h.m.Status()["remote"]
		return st != StateReady, st
	})
	h.tool(t, "remote__echo") // still offered while it reconnects

	srv.restart(t)
	h.waitReady(t, "remote")
	out, err := tool.Run(context.Background(), &agent.ToolEnv{}, `{"message":"back"}`)
	if err != nil || out != "Echo: back" {
		t.Errorf("after the server came back: %q, %v", out, err)
	}
	if strings.Contains(h.logs.String(), token) {
		t.Error("the token appears in the log")
	}
}

func TestHTTPTimeoutCancelsOnServer(t *testing.T) {
	const token = "tok-timeout-0123456789"
	srv := newHTTPServer(t, token)
	h := start(t, Options{Timeout: 300 * time.Millisecond,
		Servers: []Server{{Name: "remote", URL: srv.ts.URL, Headers: map[string]string{"Authorization": "Bearer " + token}}}})
	h.waitReady(t, "remote")
	_, err := h.run(t, "remote__slow", "{}")
	if te := toolError(t, err); te.Code != "timeout" {
		t.Fatalf("got %s %q, want timeout", te.Code, te.Message)
	}
	waitFor(t, 10*time.Second, "the server to see the cancellation", func() (bool, string) {
		n, _ := srv.counts()
		return n == 1, fmt.Sprintf("%d cancelled", n)
	})
	if out, err := h.run(t, "remote__echo", `{"message":"after"}`); err != nil || out != "Echo: after" {
		t.Errorf("echo after the timeout: %q, %v", out, err)
	}
}
