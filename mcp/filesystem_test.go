package mcp

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// fsServers starts the reference filesystem server on a temp folder twice:
// "fs" as annotations decide, and "fsconf" with a server policy and
// per-tool settings.
func fsServers(t *testing.T, resultBytes int) (*harness, string) {
	t.Helper()
	dir := t.TempDir()
	bin := nodeServer(t, "filesystem")
	h := start(t, Options{ResultBytes: resultBytes, Servers: []Server{
		{Name: "fs", Command: []string{bin, dir}},
		{Name: "fsconf", Command: []string{bin, dir}, Policy: "deny",
			Tools: map[string]string{"read_text_file": "ask", "write_file": "allow", "list_directory": "deny"}},
	}})
	if st := h.m.Status(); st["fs"] != StateReady || st["fsconf"] != StateReady {
		t.Fatalf("status %v, want both ready", st)
	}
	return h, dir
}

func TestFilesystemToolsAndPolicy(t *testing.T) {
	h, _ := fsServers(t, 0)
	tests := []struct {
		name       string
		ask        bool
		idempotent bool
	}{
		{"fs__read_text_file", false, true}, // readOnlyHint
		{"fs__list_directory", false, true},
		{"fs__write_file", true, true}, // idempotentHint, not read-only
		{"fs__move_file", true, false},
		{"fs__edit_file", true, false},
		{"fsconf__read_text_file", true, true}, // per tool, over the annotations
		{"fsconf__write_file", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool := h.tool(t, tt.name)
			if tool.Ask != tt.ask || tool.Idempotent != tt.idempotent {
				t.Errorf("got ask=%t idempotent=%t, want ask=%t idempotent=%t", tool.Ask, tool.Idempotent, tt.ask, tt.idempotent)
			}
			if tool.Server != strings.Split(tt.name, "__")[0] || tool.Description == "" || tool.Run == nil {
				t.Errorf("got server=%q description=%q run=%t", tool.Server, tool.Description, tool.Run != nil)
			}
			schema, ok := tool.Parameters.(map[string]any)
			if !ok || schema["type"] != "object" {
				t.Errorf("parameters = %v, want the server's object schema", tool.Parameters)
			}
		})
	}
	var conf []string
	for _, tool := range h.m.Tools() {
		if tool.Server == "fsconf" {
			conf = append(conf, tool.Name)
		}
	}
	if got := strings.Join(conf, " "); got != "fsconf__read_text_file fsconf__write_file" {
		t.Errorf("fsconf offers %s; want only the two tools its policy does not deny", got)
	}
}

func TestFilesystemWriteThenRead(t *testing.T) {
	h, dir := fsServers(t, 0)
	path := filepath.Join(dir, "notes.md")
	out, err := h.run(t, "fs__write_file", `{"path":`+strconv.Quote(path)+`,"content":"# Plan\nship it ✓\n"}`)
	if err != nil {
		t.Fatalf("write_file: %v", err)
	}
	if !strings.Contains(out, "Successfully wrote") {
		t.Errorf("write_file said %q", out)
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "# Plan\nship it ✓\n" {
		t.Fatalf("file holds %q (%v), want what was written", b, err)
	}
	out, err = h.run(t, "fs__read_text_file", `{"path":`+strconv.Quote(path)+`}`)
	if err != nil || out != "# Plan\nship it ✓\n" {
		t.Errorf("read_text_file: got %q, %v; want the file's text", out, err)
	}
	calls, _, _ := h.events.snapshot()
	if strings.Join(calls, " ") != "fs/write_file/ok fs/read_text_file/ok" {
		t.Errorf("hooks saw calls %v", calls)
	}
}

func TestFilesystemToolFailed(t *testing.T) {
	h, _ := fsServers(t, 0)
	_, err := h.run(t, "fs__read_text_file", `{"path":"/etc/hostname"}`)
	te := toolError(t, err)
	if te.Code != "tool_failed" || !strings.Contains(te.Message, "denied") {
		t.Errorf("got %s: %q, want tool_failed with the server's access-denied text", te.Code, te.Message)
	}
	_, err = h.run(t, "fs__read_text_file", `{"path":`)
	if te := toolError(t, err); te.Code != "invalid_arguments" {
		t.Errorf("truncated JSON: got %s, want invalid_arguments", te.Code)
	}
}

func TestFilesystemResultCut(t *testing.T) {
	const limit = 1000
	h, dir := fsServers(t, limit)
	path := filepath.Join(dir, "big.txt")
	text := strings.Repeat("é", 25000) // 2 bytes each: a cut at an odd offset must back up
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := h.run(t, "fs__read_text_file", `{"path":`+strconv.Quote(path)+`}`)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`\n\[result cut: (\d+) of (\d+) bytes left out\]$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("result does not end with the cut note: ...%q", out[max(len(out)-80, 0):])
	}
	kept := strings.TrimSuffix(out, m[0])
	left, _ := strconv.Atoi(m[1])
	total, _ := strconv.Atoi(m[2])
	if len(out) > limit || !utf8.ValidString(out) || total != len(text) || len(kept)+left != total || !strings.HasPrefix(text, kept) {
		t.Errorf("got %d bytes (valid UTF-8 %t), kept %d, note says %d of %d left out; want at most %d, a prefix of the %d-byte text",
			len(out), utf8.ValidString(out), len(kept), left, total, limit, len(text))
	}
}
