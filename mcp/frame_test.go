package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestHugeResultIsCut calls a stdio server whose results are larger than
// the SDK's 16 MiB frame limit: each is cut with the note, and the session
// lives on.
func TestHugeResultIsCut(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, Options{Servers: []Server{{Name: "gotest", Command: []string{exe}, Env: map[string]string{testServerEnv: "1"}}}})
	h.waitReady(t, "gotest")
	pid := h.m.pid("gotest")
	tests := []struct {
		name  string
		bytes int
		text  string
	}{
		{"ascii", 20 << 20, "a"},
		{"two-byte", 20 << 20, "é"},
		// Each byte is two on the wire: 24 MiB in JSON.
		{"escaped", 12 << 20, "\"\\\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := h.run(t, "gotest__big", fmt.Sprintf(`{"bytes":%d,"text":%q}`, tt.bytes, tt.text))
			if err != nil {
				t.Fatalf("got error %v, want the result cut", err)
			}
			kept, note, ok := strings.Cut(out, "\n[result cut: ")
			if !ok || len(out) > DefaultResultBytes || !utf8.ValidString(out) || strings.Trim(kept, tt.text) != "" {
				t.Fatalf("got %.200q... (%d bytes); want the repeated text cut to %d bytes with the note", out, len(out), DefaultResultBytes)
			}
			if want := fmt.Sprintf("%d of %d bytes left out]", tt.bytes-len(kept), tt.bytes); note != want {
				t.Errorf("note %q, want %q", note, want)
			}
		})
	}
	if out, err := h.run(t, "gotest__echo", `{"message":"still here"}`); err != nil || out != "Echo: still here" {
		t.Errorf("echo after the big results: %q, %v", out, err)
	}
	if got := h.m.pid("gotest"); got != pid {
		t.Errorf("the server was restarted: pid %d, was %d", got, pid)
	}
}

// TestHugeResultOverHTTP is TestHugeResultIsCut for a streamable-HTTP
// server, whose answer comes as one server-sent event.
func TestHugeResultOverHTTP(t *testing.T) {
	srv := newHTTPServer(t, "tok-0123456789")
	h := start(t, Options{Servers: []Server{{Name: "remote", URL: srv.ts.URL, Headers: map[string]string{"Authorization": "Bearer tok-0123456789"}}}})
	h.waitReady(t, "remote")
	const size = 20 << 20
	out, err := h.run(t, "remote__big", fmt.Sprintf(`{"bytes":%d,"text":"ab"}`, size))
	if err != nil {
		t.Fatalf("got error %v, want the result cut", err)
	}
	kept, note, ok := strings.Cut(out, "\n[result cut: ")
	if want := fmt.Sprintf("%d of %d bytes left out]", size-len(kept), size); !ok || len(out) > DefaultResultBytes || note != want {
		t.Fatalf("got %.100q...%q (%d bytes); want the text cut to %d bytes and the note %q", out, out[max(len(out)-100, 0):], len(out), DefaultResultBytes, want)
	}
	if out, err := h.run(t, "remote__echo", `{"message":"still here"}`); err != nil || out != "Echo: still here" {
		t.Errorf("echo after the big result: %q, %v", out, err)
	}
}

// cutAll runs src through a cutter that shortens strings past max bytes,
// reading in chunks of chunk bytes.
func cutAll(tb testing.TB, src string, max, chunk int) string {
	tb.Helper()
	var r io.Reader = strings.NewReader(src)
	if chunk > 0 {
		r = &chunkReader{r: r, n: chunk}
	}
	out, err := io.ReadAll(newCutter(r, max, testMark))
	if err != nil {
		tb.Fatal(err)
	}
	return string(out)
}

const testMark = "[pinplan-cut 0123456789abcdef "

type chunkReader struct {
	r io.Reader
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

func TestCutter(t *testing.T) {
	long := strings.Repeat("x", 40)
	tests := []struct {
		name, in, want string
	}{
		{"short strings pass", `{"a":"b","c":[1,"d"]}` + "\n", `{"a":"b","c":[1,"d"]}` + "\n"},
		{"long string cut", `{"text":"` + long + `"}` + "\n", `{"text":"` + long[:16] + testMark + `24]"}` + "\n"},
		{"escape kept whole", `{"text":"` + long[:15] + `\u00e9` + long + `"}`, `{"text":"` + long[:15] + `\u00e9` + testMark + `40]"}`},
		{"escapes counted as text", `{"text":"` + long[:16] + `\n\"\u00e9\ud83d\ude00"}`, `{"text":"` + long[:16] + testMark + `8]"}`},
		{"only escapes", `{"text":"` + strings.Repeat(`\n`, 20) + `"}`, `{"text":"` + strings.Repeat(`\n`, 8) + testMark + `12]"}`},
		{"character kept whole", `{"text":"` + long[:15] + `é` + long[:3] + `"}`, `{"text":"` + long[:15] + `é` + testMark + `3]"}`},
		{"base64 passes", `{"data":"` + long + `","blob":"` + long + `"}`, `{"data":"` + long + `","blob":"` + long + `"}`},
		{"key of the value decides", `{"data":"x","text":"` + long + `"}`, `{"data":"x","text":"` + long[:16] + testMark + `24]"}`},
		{"newline resets", `{"text":"` + long[:10] + "\n" + `"` + long + `"`, `{"text":"` + long[:10] + "\n" + `"` + long[:16] + testMark + `24]"`},
		{"sse", "event: message\ndata: {\"text\":\"" + long + "\"}\n\n", "event: message\ndata: {\"text\":\"" + long[:16] + testMark + "24]\"}\n\n"},
		{"not json", "garbage: \"" + long + "\"\n", "garbage: \"" + long[:16] + testMark + "24]\"\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, chunk := range []int{0, 1, 3, 7} {
				if got := cutAll(t, tt.in, 16, chunk); got != tt.want {
					t.Errorf("chunks of %d: got\n%s\nwant\n%s", chunk, got, tt.want)
				}
			}
		})
	}
}

// TestCutterKeepsJSON cuts random messages: each stays valid JSON, and each
// string is whole or a prefix of itself with the mark saying how much of it
// is left out.
func TestCutterKeepsJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", " ", "é", "€", "😀", "\"", "\\", "\n", "\t", "\x01", "<", "/"}
	randString := func() string {
		var b strings.Builder
		for range rng.IntN(80) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	cuts := 0
	for i := range 500 {
		msg := map[string]any{"jsonrpc": "2.0", "id": i, "result": map[string]any{
			"content":           []any{map[string]any{"type": "text", "text": randString()}, map[string]any{"type": "image", "data": randString()}},
			"structuredContent": map[string]any{randString(): []any{randString(), 1.5, true, nil}},
		}}
		raw, err := json.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		out := cutAll(t, string(raw)+"\n", 24, 1+rng.IntN(50))
		var got map[string]any
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%s\ncut to\n%s\nis not JSON: %v", raw, out, err)
		}
		var check func(want, got any, key string)
		check = func(want, got any, key string) {
			switch w := want.(type) {
			case string:
				g, _ := got.(string)
				if key == "data" {
					if g != w {
						t.Errorf("base64 %q became %q", w, g)
					}
					return
				}
				text, dropped := uncut(g, testMark)
				if dropped > 0 {
					cuts++
				}
				if !strings.HasPrefix(w, text) || len(text)+dropped != len(w) || (dropped > 0) != strings.Contains(g, testMark) {
					t.Errorf("%q became %q (%d bytes left out)", w, g, dropped)
				}
			case map[string]any:
				g, _ := got.(map[string]any)
				if len(g) != len(w) {
					t.Errorf("object %v became %v", w, g)
				}
				for k, v := range w {
					if gk, ok := g[k]; ok {
						check(v, gk, k)
						continue
					}
					// A long key is cut too; find it by what is kept.
					found := false
					for gk, gv := range g {
						if text, _ := uncut(gk, testMark); gk != k && strings.HasPrefix(k, text) {
							check(v, gv, k)
							found = true
						}
					}
					if !found {
						t.Errorf("key %q lost in %v", k, g)
					}
				}
			case []any:
				g, _ := got.([]any)
				if len(g) != len(w) {
					t.Fatalf("array %v became %v", w, g)
				}
				for i := range w {
					check(w[i], g[i], key)
				}
			default:
				if fmt.Sprint(want) != fmt.Sprint(got) {
					t.Errorf("%v became %v", want, got)
				}
			}
		}
		check(msg["result"], got["result"], "")
		if t.Failed() {
			t.Fatalf("message %s\ncut to %s", raw, out)
		}
	}
	if cuts < 200 {
		t.Errorf("%d strings cut; the test makes too few long ones", cuts)
	}
}

func TestUncut(t *testing.T) {
	tests := []struct {
		in, want string
		dropped  int
	}{
		{"plain", "plain", 0},
		{"ab" + testMark + "12]cd" + testMark + "3]", "abcd", 15},
		{"quoted " + testMark + "x]", "quoted " + testMark + "x]", 0},
		{"open " + testMark + "12", "open " + testMark + "12", 0},
	}
	for _, tt := range tests {
		if got, dropped := uncut(tt.in, testMark); got != tt.want || dropped != tt.dropped {
			t.Errorf("uncut(%q) = %q, %d; want %q, %d", tt.in, got, dropped, tt.want, tt.dropped)
		}
	}
}

func BenchmarkCutter(b *testing.B) {
	msg, _ := json.Marshal(map[string]any{"result": map[string]any{"content": []any{map[string]any{"type": "text", "text": strings.Repeat("some text é \"quoted\"\n", 1<<16)}}}})
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		c := newCutter(bytes.NewReader(msg), minCutString, testMark)
		if _, err := io.Copy(io.Discard, c); err != nil {
			b.Fatal(err)
		}
	}
}
