package chat

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
)

// filePlatform serves files by URL.
type filePlatform struct {
	fakePlatform
	files map[string]string
	slow  time.Duration
}

func (p *filePlatform) Caps() Caps { return testCaps(p) }

func (p *filePlatform) FetchFile(ctx context.Context, _ string, f agent.File, max int64) ([]byte, error) {
	if p.slow > 0 {
		select {
		case <-time.After(p.slow):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	body, ok := p.files[f.URL]
	if !ok {
		return nil, errors.New("404 not found")
	}
	if f.URL == "signin" {
		return nil, &FileError{Reason: "Slack served its sign-in page"}
	}
	if int64(len(body)) > max+1 {
		body = body[:max+1]
	}
	return []byte(body), nil
}

func TestTextLike(t *testing.T) {
	for _, c := range []struct {
		typ, name string
		want      bool
	}{
		{"text/plain", "a.txt", true},
		{"text/csv; charset=utf-8", "a.csv", true},
		{"application/json", "a.json", true},
		{"application/vnd.api+json", "a", true},
		{"application/x-yaml", "a.yaml", true},
		{"", "main.go", true},
		{"application/octet-stream", "server.log", true},
		{"", "Dockerfile", true},
		{"application/pdf", "a.pdf", false},
		{"image/png", "a.png", false},
		{"application/zip", "a.txt", false}, // the type says what it is
		{"", "a.bin", false},
	} {
		if got := TextLike(c.typ, c.name); got != c.want {
			t.Errorf("TextLike(%q, %q) = %v, want %v", c.typ, c.name, got, c.want)
		}
	}
}

// TestFilesGivenOrDescribed: a text file is given; an image, a PDF, a
// file over the limit, a binary one, one whose fetch fails, one Slack
// refused and one too slow are described, each with its reason.
func TestFilesGivenOrDescribed(t *testing.T) {
	p := &filePlatform{files: map[string]string{
		"ok": "hello\nworld", "big": strings.Repeat("x", 2000), "bin": "PK\x00\x03", "signin": "<html>",
	}}
	fs := &Files{Platforms: map[string]Platform{"test": p}, MaxBytes: 1000}
	got := fs.ReadFiles(context.Background(), "test/1", []agent.File{
		{Name: "notes.txt", Type: "text/plain", Size: 11, URL: "ok"},
		{Name: "cat.png", Type: "image/png", Size: 10, URL: "ok"},
		{Name: "deck.pdf", Type: "application/pdf", Size: 10, URL: "ok"},
		{Name: "huge.log", Type: "text/plain", Size: 5000, URL: "big"},
		{Name: "liar.log", Type: "text/plain", Size: 10, URL: "big"}, // says 10 bytes, serves 2000
		{Name: "data.txt", Type: "text/plain", Size: 4, URL: "bin"},
		{Name: "gone.txt", Type: "text/plain", Size: 4, URL: "missing"},
		{Name: "private.txt", Type: "text/plain", Size: 4, URL: "signin"},
	})
	want := []struct{ text, left string }{
		{"hello\nworld", ""},
		{"", "an image"},
		{"", "not a text file (application/pdf)"},
		{"", "4 KiB, over the 1000 bytes limit"},
		{"", "over the 1000 bytes limit"},
		{"", "not text"},
		{"", "could not be fetched"},
		{"", "Slack served its sign-in page"},
	}
	for i, w := range want {
		if got[i].Text != w.text || !strings.Contains(got[i].Left, w.left) || (w.left == "") != (got[i].Left == "") {
			t.Errorf("%s: text %q left %q, want text %q left containing %q", got[i].Name, got[i].Text, got[i].Left, w.text, w.left)
		}
	}
	p.slow = time.Second
	fs.Timeout = 20 * time.Millisecond
	slow := fs.ReadFiles(context.Background(), "test/1", []agent.File{{Name: "slow.txt", Type: "text/plain", Size: 4, URL: "ok"}})
	if !strings.Contains(slow[0].Left, "within 20ms") {
		t.Errorf("a slow fetch: %+v, want it described as timed out", slow[0])
	}
	other := fs.ReadFiles(context.Background(), "nofiles/1", []agent.File{{Name: "a.txt", Type: "text/plain", Size: 4, URL: "ok"}})
	if other[0].Left == "" {
		t.Errorf("a platform that fetches no files gave %+v", other[0])
	}
}

// pngBytes is a PNG's signature and header chunk: enough for sniffing.
var pngBytes = "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"

// TestImagesWithVision: with Vision a PNG is given as an image, its bytes
// checked against its type; without it an image is described.
func TestImagesWithVision(t *testing.T) {
	p := &filePlatform{files: map[string]string{"png": pngBytes, "fake": "not a png at all"}}
	fs := &Files{Platforms: map[string]Platform{"test": p}, Vision: true}
	got := fs.ReadFiles(context.Background(), "test/1", []agent.File{
		{Name: "chart.png", Type: "image/png", Size: int64(len(pngBytes)), URL: "png"},
		{Name: "liar.png", Type: "image/png", Size: 16, URL: "fake"},
		{Name: "icon.svg", Type: "image/svg+xml", Size: 10, URL: "png"},
	})
	if string(got[0].Image) != pngBytes || got[0].Left != "" || got[0].Type != "image/png" {
		t.Errorf("chart.png: %+v, want given as an image", got[0])
	}
	if got[1].Image != nil || !strings.Contains(got[1].Left, "not the image/png image") {
		t.Errorf("liar.png: left %q, want refused as not a PNG", got[1].Left)
	}
	if got[2].Image != nil || got[2].Left == "" {
		t.Errorf("icon.svg: %+v, want described", got[2])
	}
	fs.Vision = false
	off := fs.ReadFiles(context.Background(), "test/1", []agent.File{{Name: "chart.png", Type: "image/png", Size: 10, URL: "png"}})
	if off[0].Image != nil || !strings.Contains(off[0].Left, "PINPLAN_MODEL_VISION") {
		t.Errorf("without vision: %+v", off[0])
	}
}
