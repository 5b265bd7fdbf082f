package mcp

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestResultText(t *testing.T) {
	size := int64(2048)
	tests := []struct {
		name string
		res  *sdk.CallToolResult
		want string
	}{
		{"texts joined", &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "one"}, &sdk.TextContent{Text: "two"}}}, "one\ntwo"},
		{"image", &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "see:"}, &sdk.ImageContent{MIMEType: "image/png", Data: make([]byte, 12345)}}}, "see:\n[image/png, 12345 bytes]"},
		{"audio", &sdk.CallToolResult{Content: []sdk.Content{&sdk.AudioContent{MIMEType: "audio/wav", Data: make([]byte, 10)}}}, "[audio/wav, 10 bytes]"},
		{"image without type", &sdk.CallToolResult{Content: []sdk.Content{&sdk.ImageContent{Data: make([]byte, 3)}}}, "[image, 3 bytes]"},
		{"resource link", &sdk.CallToolResult{Content: []sdk.Content{&sdk.ResourceLink{URI: "file:///a.pdf", MIMEType: "application/pdf", Size: &size}}}, "[resource link file:///a.pdf, application/pdf, 2048 bytes]"},
		{"blob resource", &sdk.CallToolResult{Content: []sdk.Content{&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "file:///a.gz", MIMEType: "application/gzip", Blob: make([]byte, 99)}}}}, "[resource file:///a.gz, application/gzip, 99 bytes]"},
		{"text resource", &sdk.CallToolResult{Content: []sdk.Content{&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "file:///a.txt", MIMEType: "text/plain", Text: "hi"}}}}, "[resource file:///a.txt, text/plain]\nhi"},
		{"structured only", &sdk.CallToolResult{StructuredContent: map[string]any{"n": 3}}, `{"n":3}`},
		{"empty", &sdk.CallToolResult{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := resultText(tt.res); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCut(t *testing.T) {
	s := &server{m: &Manager{opts: Options{ResultBytes: 100}}}
	tests := []struct {
		name string
		text string
	}{
		{"ascii", strings.Repeat("a", 1000)},
		{"two-byte", strings.Repeat("é", 500)},
		{"four-byte", strings.Repeat("😀", 300)},
		{"mixed", "a" + strings.Repeat("€", 400)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := s.cut(tt.text, 0)
			kept, note, ok := strings.Cut(got, "\n[result cut: ")
			if !ok || len(got) > 100 || !utf8.ValidString(got) || !strings.HasPrefix(tt.text, kept) {
				t.Fatalf("got %q (%d bytes); want a valid UTF-8 prefix and the note within 100 bytes", got, len(got))
			}
			if want := fmt.Sprintf("%d of %d bytes left out]", len(tt.text)-len(kept), len(tt.text)); note != want {
				t.Errorf("note %q, want %q", note, want)
			}
		})
	}
	for _, short := range []string{"", "short", strings.Repeat("x", 100)} {
		if got := s.cut(short, 0); got != short {
			t.Errorf("cut(%d bytes) = %q; a result within the limit is kept whole", len(short), got)
		}
	}
}
