package chat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pinplan/pinplan/agent"
)

// Files in (DESIGN §12): what a message's files give the model. Files
// reads them for the agent (agent.FileReader), through the platform the
// session is on (FileFetcher), and decides what is given and what is
// described: text-like files (text/*, JSON, YAML, CSV, XML, source code,
// logs) up to MaxBytes each are given as text; anything else (images
// included: the model is given text only), anything over the limit, and
// anything whose fetch fails or times out is described with the reason,
// and the thread is told (the agent's Notice).

// FileFetcher is a platform that serves the files attached to its
// messages.
type FileFetcher interface {
	// FetchFile returns f's bytes, attached in session's thread,
	// reading at most max+1 of them: more than max means the file is
	// over the limit. The session names where the file was shared
	// (Slack fetches it with that workspace's token).
	FetchFile(ctx context.Context, session string, f agent.File, max int64) ([]byte, error)
}

// DefaultFileBytes is PINPLAN_FILE_BYTES' default: 256 KiB.
const DefaultFileBytes = 256 << 10

// fileTimeout bounds the fetch of one file.
const fileTimeout = 15 * time.Second

// Files reads messages' files for the agent.
type Files struct {
	// Platforms are the platforms by name, as the router has them.
	Platforms map[string]Platform
	// MaxBytes is the most a file may be to be given (PINPLAN_FILE_BYTES);
	// 0 means DefaultFileBytes.
	MaxBytes int64
	// Timeout bounds each fetch; 0 means 15 s.
	Timeout time.Duration
	// Vision gives images (PNG, JPEG, GIF, WebP) up to MaxBytes to the
	// model as image parts (PINPLAN_MODEL_VISION): the model takes them.
	Vision bool
	Logger *slog.Logger
}

// imageTypes are the image formats a model with vision takes.
var imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

var _ agent.FileReader = (*Files)(nil)

// ReadFiles implements agent.FileReader.
func (fs *Files) ReadFiles(ctx context.Context, session string, files []agent.File) []agent.FileText {
	max := fs.MaxBytes
	if max <= 0 {
		max = DefaultFileBytes
	}
	timeout := fs.Timeout
	if timeout <= 0 {
		timeout = fileTimeout
	}
	log := fs.Logger
	if log == nil {
		log = slog.Default()
	}
	platform, _, _ := strings.Cut(session, "/")
	var fetcher FileFetcher
	if p := fs.Platforms[platform]; p != nil {
		fetcher = p.Caps().Files
	}
	out := make([]agent.FileText, len(files))
	for i, f := range files {
		out[i] = agent.FileText{File: f}
		mt, _, _ := mime.ParseMediaType(f.Type)
		image := imageTypes[mt]
		switch {
		case image && !fs.Vision:
			out[i].Left = "an image: this model is given text files only (PINPLAN_MODEL_VISION is off)"
			continue
		case strings.HasPrefix(f.Type, "image/") && !image:
			out[i].Left = "an image in a format the model does not take (PNG, JPEG, GIF and WebP are)"
			continue
		case !image && !TextLike(f.Type, f.Name):
			out[i].Left = "not a text file (" + kindOf(f) + "); only text files are read"
			continue
		}
		switch {
		case f.Size > max:
			out[i].Left = fmt.Sprintf("%s, over the %s limit", size(f.Size), size(max))
			continue
		case fetcher == nil || f.URL == "":
			out[i].Left = "this platform's files cannot be fetched"
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, timeout)
		raw, err := fetcher.FetchFile(fctx, session, f, max)
		cancel()
		switch {
		case err != nil:
			log.Warn("fetch an attached file", "session", session, "file", f.Name, "err", err)
			reason := "could not be fetched (the bot's log has the details)"
			if errors.Is(err, context.DeadlineExceeded) {
				reason = fmt.Sprintf("could not be fetched within %s", timeout)
			}
			var fe *FileError
			if errors.As(err, &fe) {
				reason = "could not be fetched: " + fe.Reason
			}
			out[i].Left = reason
		case int64(len(raw)) > max:
			out[i].Left = fmt.Sprintf("over the %s limit", size(max))
		case image:
			if got := http.DetectContentType(raw); got != mt {
				out[i].Left = fmt.Sprintf("not the %s image it says it is", mt)
				continue
			}
			out[i].Image, out[i].Type, out[i].Size = raw, mt, int64(len(raw))
		case !utf8.Valid(raw) || bytes.IndexByte(raw, 0) >= 0:
			out[i].Left = "not text: its content is binary"
		default:
			out[i].Text = string(raw)
			if out[i].Size == 0 {
				out[i].Size = int64(len(raw))
			}
		}
	}
	return out
}

// FileError is a fetch refused for a reason worth saying in the thread
// (Slack serving its sign-in page for want of files:read).
type FileError struct{ Reason string }

func (e *FileError) Error() string { return "file: " + e.Reason }

// textTypes are the MIME types outside text/* that are text.
var textTypes = map[string]bool{
	"application/json": true, "application/x-ndjson": true, "application/ld+json": true,
	"application/yaml": true, "application/x-yaml": true, "application/toml": true,
	"application/xml": true, "application/csv": true, "application/javascript": true,
	"application/x-javascript": true, "application/typescript": true, "application/x-sh": true,
	"application/x-shellscript": true, "application/sql": true, "application/x-python": true,
	"application/graphql": true, "application/x-httpd-php": true, "application/x-tex": true,
	"application/x-log": true,
}

// textExtensions are the file name endings of text, for a type the
// platform left empty or generic (application/octet-stream).
var textExtensions = map[string]bool{
	".txt": true, ".md": true, ".markdown": true, ".rst": true, ".log": true, ".csv": true, ".tsv": true,
	".json": true, ".jsonl": true, ".ndjson": true, ".yaml": true, ".yml": true, ".toml": true, ".ini": true,
	".cfg": true, ".conf": true, ".env": true, ".xml": true, ".html": true, ".htm": true, ".css": true,
	".go": true, ".py": true, ".js": true, ".mjs": true, ".ts": true, ".tsx": true, ".jsx": true, ".rs": true,
	".java": true, ".kt": true, ".swift": true, ".c": true, ".h": true, ".cc": true, ".cpp": true, ".hpp": true,
	".cs": true, ".rb": true, ".php": true, ".sh": true, ".bash": true, ".zsh": true, ".sql": true,
	".diff": true, ".patch": true, ".proto": true, ".graphql": true, ".tf": true, ".lua": true, ".r": true,
	".scala": true, ".ex": true, ".exs": true, ".erl": true, ".hs": true, ".ml": true, ".vue": true,
	".svelte": true, ".dockerfile": true, ".mk": true, ".gradle": true, ".properties": true, ".tex": true,
}

// TextLike reports whether a file of MIME type typ named name is text:
// the files given to the model.
func TextLike(typ, name string) bool {
	mt, _, err := mime.ParseMediaType(typ)
	if err == nil {
		if strings.HasPrefix(mt, "text/") || textTypes[mt] || strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "+xml") {
			return true
		}
		if mt != "application/octet-stream" && mt != "binary/octet-stream" {
			return false
		}
	}
	base := strings.ToLower(path.Base(name))
	return textExtensions[path.Ext(base)] || base == "dockerfile" || base == "makefile"
}

// kindOf names a file's type for a person.
func kindOf(f agent.File) string {
	if mt, _, err := mime.ParseMediaType(f.Type); err == nil {
		return mt
	}
	if ext := path.Ext(f.Name); ext != "" {
		return strings.TrimPrefix(strings.ToLower(ext), ".")
	}
	return "such"
}

// size says n bytes for a person: 256 KiB, 1.5 MiB.
func size(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
