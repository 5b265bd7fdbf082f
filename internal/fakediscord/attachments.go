package fakediscord

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Attachments, as Discord serves them: a message's attachments name each
// file's url on the CDN, signed (ex, is, hm query parameters: since 2024
// an unsigned or tampered URL is answered 404, "This content is no longer
// available"). The fake serves them at /attachments/ on its own address.

const attachmentsPrefix = "/attachments/"

// Attachment is a file on a user's message.
type Attachment struct {
	Filename    string
	ContentType string // "" when Discord could not tell
	Content     []byte
}

type attachments struct {
	mu      sync.Mutex
	byPath  map[string]Attachment
	fetches []string // paths requested, signed or not
}

// cdnKey signs the fake's attachment URLs.
var cdnKey = []byte("fakediscord-cdn")

func sign(path, ex string) string {
	mac := hmac.New(sha256.New, cdnKey)
	fmt.Fprintf(mac, "%s?%s", path, ex)
	return hex.EncodeToString(mac.Sum(nil))
}

// attachmentJSON stores a and returns it as a message carries it.
func (s *Server) attachmentJSON(channel, id string, a Attachment) map[string]any {
	path := fmt.Sprintf("%s%s/%s/%s", attachmentsPrefix, channel, id, a.Filename)
	s.files.mu.Lock()
	if s.files.byPath == nil {
		s.files.byPath = map[string]Attachment{}
	}
	s.files.byPath[path] = a
	s.files.mu.Unlock()
	ex := fmt.Sprintf("%x", time.Now().Add(24*time.Hour).Unix())
	base := strings.TrimSuffix(s.BaseURL, "/")
	if base == "" {
		base = "http://" + s.host
	}
	u := fmt.Sprintf("%s%s?ex=%s&is=%x&hm=%s&", base, path, ex, time.Now().Unix(), sign(path, ex))
	out := map[string]any{"id": id, "filename": a.Filename, "size": len(a.Content), "url": u, "proxy_url": u}
	if a.ContentType != "" {
		out["content_type"] = a.ContentType
	}
	return out
}

// AttachmentFetches lists the attachment paths requested, oldest first.
func (s *Server) AttachmentFetches() []string {
	s.files.mu.Lock()
	defer s.files.mu.Unlock()
	return append([]string(nil), s.files.fetches...)
}

// serveAttachment serves an attachment to a request with its signed URL.
func (s *Server) serveAttachment(w http.ResponseWriter, r *http.Request) {
	s.files.mu.Lock()
	a, ok := s.files.byPath[r.URL.Path]
	s.files.fetches = append(s.files.fetches, r.URL.Path)
	s.files.mu.Unlock()
	q := r.URL.Query()
	if !ok || !hmac.Equal([]byte(q.Get("hm")), []byte(sign(r.URL.Path, q.Get("ex")))) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, "This content is no longer available.")
		return
	}
	if a.ContentType != "" {
		w.Header().Set("Content-Type", a.ContentType)
	}
	w.Write(a.Content)
}

// UserMessageWithFiles is UserMessage with attachments.
func (s *Server) UserMessageWithFiles(channel, userID, content string, mentionBot bool, files ...Attachment) string {
	if mentionBot {
		content = "<@" + BotID + "> " + content
	}
	return s.userMessage(channel, userID, content, files...)
}
