package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pinplan/pinplan/agent"
)

// runner returns the Run function of the server's tool named tool.
func (s *server) runner(tool string) func(context.Context, *agent.ToolEnv, string) (string, error) {
	return func(ctx context.Context, _ *agent.ToolEnv, arguments string) (string, error) {
		start := time.Now()
		out, outcome, err := s.call(ctx, tool, arguments)
		took := time.Since(start)
		if h := s.m.opts.Hooks.Call; h != nil {
			h(s.cfg.Name, tool, outcome, took)
		}
		s.log.Debug("mcp tool call", "tool", tool, "outcome", outcome, "took", took)
		return out, err
	}
}

// call runs one tool call. Failures the model can act on are
// *agent.ToolError; the end of ctx (Stop) is returned as ctx's error.
func (s *server) call(ctx context.Context, tool, arguments string) (string, string, error) {
	args := strings.TrimSpace(arguments)
	if args == "" {
		args = "{}" // some models send nothing for a tool without parameters
	}
	if !json.Valid([]byte(args)) || args[0] != '{' {
		why := "not an object"
		var v any
		if err := json.Unmarshal([]byte(args), &v); err != nil {
			why = err.Error()
		}
		return "", OutcomeInvalidArguments, &agent.ToolError{Code: OutcomeInvalidArguments,
			Message: fmt.Sprintf("the arguments of %s__%s must be one JSON object, as its input schema describes (%s)", s.cfg.Name, tool, why)}
	}
	if err := ctx.Err(); err != nil {
		return "", OutcomeCanceled, canceled(ctx, tool)
	}
	cs := s.current()
	if cs == nil {
		return "", OutcomeUnavailable, unavailable(s.cfg.Name)
	}
	cctx, cancel := context.WithTimeout(ctx, s.m.opts.Timeout)
	defer cancel()
	// Cancelling cctx (timeout or Stop) makes the SDK send
	// notifications/cancelled for the request.
	res, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: tool, Arguments: json.RawMessage(args)})
	if err != nil {
		var rpcErr *jsonrpc.Error
		switch {
		case ctx.Err() != nil:
			return "", OutcomeCanceled, canceled(ctx, tool)
		case cctx.Err() != nil:
			return "", OutcomeTimeout, &agent.ToolError{Code: OutcomeTimeout,
				Message: fmt.Sprintf("%s__%s did not finish within %s; the call was cancelled", s.cfg.Name, tool, s.m.opts.Timeout)}
		case errors.As(err, &rpcErr) && rpcErr.Code != codeRejected:
			// The server answered with a protocol error: the session is fine.
			code := OutcomeToolFailed
			if rpcErr.Code == jsonrpc.CodeInvalidParams {
				code = OutcomeInvalidArguments
			}
			msg, dropped := uncut(rpcErr.Message, s.m.cutMark)
			return "", code, &agent.ToolError{Code: code, Message: s.cut(s.redact.Replace(msg), dropped)}
		default:
			s.lost(cs)
			s.log.Warn("mcp tool call failed; reconnecting the server", "tool", tool, "error", s.redact.Log(err.Error()))
			return "", OutcomeUnavailable, unavailable(s.cfg.Name)
		}
	}
	if res == nil {
		res = &sdk.CallToolResult{}
	}
	text, dropped := uncut(resultText(res), s.m.cutMark)
	text = s.cut(s.redact.Replace(text), dropped)
	if res.IsError {
		if text == "" {
			text = "the tool reported an error without saying what it was"
		}
		return "", OutcomeToolFailed, &agent.ToolError{Code: OutcomeToolFailed, Message: text}
	}
	return text, OutcomeOK, nil
}

// unavailable is the error for a call to a server that is down; the
// detail goes to the log, the model gets a plain sentence.
func unavailable(server string) error {
	return &agent.ToolError{Code: OutcomeUnavailable, Message: fmt.Sprintf(
		"the MCP server %q can't be reached right now; pinplan is reconnecting it. Try again later or go on without it.", server)}
}

// codeRejected is the SDK's "rejected by transport": the request never
// reached the server (connection refused, HTTP failure).
const codeRejected = -32005

// canceled is the error for a call whose ctx ended: ctx's error, with its
// cause when there is one.
func canceled(ctx context.Context, tool string) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause != nil && cause != err {
		return fmt.Errorf("mcp: call %s: %w: %w", tool, err, cause)
	}
	return fmt.Errorf("mcp: call %s: %w", tool, err)
}

// resultText joins a result's text content with newlines and summarises the
// rest by type and size ("[image/png, 12345 bytes]"). A result with only
// structured content gives that as JSON.
func resultText(res *sdk.CallToolResult) string {
	parts := make([]string, 0, len(res.Content))
	for _, c := range res.Content {
		parts = append(parts, contentText(c))
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			return string(b)
		}
	}
	return strings.Join(parts, "\n")
}

func contentText(c sdk.Content) string {
	switch c := c.(type) {
	case *sdk.TextContent:
		return c.Text
	case *sdk.ImageContent:
		return fmt.Sprintf("[%s, %d bytes]", orDefault(c.MIMEType, "image"), len(c.Data))
	case *sdk.AudioContent:
		return fmt.Sprintf("[%s, %d bytes]", orDefault(c.MIMEType, "audio"), len(c.Data))
	case *sdk.ResourceLink:
		size := ""
		if c.Size != nil {
			size = fmt.Sprintf(", %d bytes", *c.Size)
		}
		return fmt.Sprintf("[resource link %s, %s%s]", c.URI, orDefault(c.MIMEType, "unknown type"), size)
	case *sdk.EmbeddedResource:
		r := c.Resource
		if r == nil {
			return "[resource]"
		}
		if r.Blob != nil || r.Text == "" {
			return fmt.Sprintf("[resource %s, %s, %d bytes]", r.URI, orDefault(r.MIMEType, "unknown type"), len(r.Blob))
		}
		// A text resource is text: the model gets it, under its name.
		return fmt.Sprintf("[resource %s, %s]\n%s", r.URI, orDefault(r.MIMEType, "text"), r.Text)
	default:
		b, _ := c.MarshalJSON()
		var typ struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(b, &typ)
		return fmt.Sprintf("[%s, %d bytes]", orDefault(typ.Type, "content"), len(b))
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// cutNote is appended to a cut result; %d is the bytes left out and the
// whole result's size.
const cutNote = "\n[result cut: %d of %d bytes left out]"

// cut shortens text to the result limit, on a UTF-8 boundary, with a note
// saying how much was left out; the note fits within the limit. dropped is
// what the transport's cutter already left out of the result.
func (s *server) cut(text string, dropped int) string {
	limit := s.m.opts.ResultBytes
	total := len(text) + dropped
	if total <= limit {
		return text
	}
	// The note is longest when everything is left out.
	keep := max(limit-len(fmt.Sprintf(cutNote, total, total)), 0)
	kept := cutUTF8(text, keep)
	return kept + fmt.Sprintf(cutNote, total-len(kept), total)
}

// cutUTF8 returns the longest prefix of s of at most n bytes that does not
// split a character.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
