package fakeslack

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// Files, as Slack serves them: a message event's files name each file's
// url_private_download, which Slack serves only with a token of the app
// (Authorization: Bearer xoxb-...) that has the files:read scope. Without
// one Slack does not refuse: it answers 200 with its sign-in page (HTML),
// which is what the fake does too.

const filesPrefix = "/files-pri/"

// signInPage is what Slack serves for a file to a request it does not
// authorise.
const signInPage = "<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to your workspace</body></html>"

type file struct {
	name, mimetype string
	content        []byte
	// shared is the channel the file was shared into, when that is a
	// channel of another workspace (Slack Connect): the bot of a
	// workspace that sees it may read the file too.
	shared string
}

// files are the fake's files, beside the Server's own state (a file is
// served without the Server's lock).
type files struct {
	mu      sync.Mutex
	byPath  map[string]*file
	fetches []FileFetch
}

// FileFetch is one request for a file's bytes.
type FileFetch struct {
	Path  string
	Token string // the bearer token it carried, "" for none
	OK    bool   // the file was served (not the sign-in page)
}

// AddFile stores a file and returns it as a message event's files list
// carries it (id, name, mimetype, size, url_private_download, ...).
func (s *Server) AddFile(name, mimetype string, content []byte) map[string]any {
	return s.AddTeamFile("", name, mimetype, content)
}

// AddTeamFile is AddFile for a file of team ("" for the default
// workspace): served only to a token of that workspace (or of its org's
// org-wide install).
func (s *Server) AddTeamFile(team, name, mimetype string, content []byte) map[string]any {
	return s.ShareFile(team, "", name, mimetype, content)
}

// ShareFile is AddTeamFile for a file a person of team shared into
// channel, a Slack Connect channel of another workspace ("" for none):
// its address names team, the uploader's, and Slack serves it to a
// token of team and to one that sees channel.
func (s *Server) ShareFile(team, channel, name, mimetype string, content []byte) map[string]any {
	s.mu.Lock()
	s.initLocked()
	s.seq++
	id := fmt.Sprintf("F%06d", s.seq)
	base := strings.TrimSuffix(s.BaseURL, "/")
	if base == "" {
		base = "http://" + s.host
	}
	if team == "" {
		team = s.TeamID
	}
	s.mu.Unlock()
	path := fmt.Sprintf("%s%s-%s/download/%s", filesPrefix, team, id, name)
	s.files.mu.Lock()
	if s.files.byPath == nil {
		s.files.byPath = map[string]*file{}
	}
	s.files.byPath[path] = &file{name: name, mimetype: mimetype, content: content, shared: channel}
	s.files.mu.Unlock()
	filetype := name[strings.LastIndexByte(name, '.')+1:]
	return map[string]any{"id": id, "name": name, "title": name, "mimetype": mimetype, "filetype": filetype, "size": len(content),
		"mode": "hosted", "url_private": base + strings.Replace(path, "/download/", "/", 1), "url_private_download": base + path}
}

// FileFetches lists the requests for files' bytes, oldest first.
func (s *Server) FileFetches() []FileFetch {
	s.files.mu.Lock()
	defer s.files.mu.Unlock()
	return append([]FileFetch(nil), s.files.fetches...)
}

// serveFile serves a file's bytes to a bot token when the app has
// files:read (not NoFilesRead), and the sign-in page to anything else.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request) {
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	path := strings.Replace(r.URL.Path, "/download/", "/", 1)
	s.files.mu.Lock()
	f := s.files.byPath[r.URL.Path]
	if f == nil {
		for p, g := range s.files.byPath {
			if strings.Replace(p, "/download/", "/", 1) == path {
				f = g
			}
		}
	}
	s.files.mu.Unlock()
	s.mu.Lock()
	scoped := !s.NoFilesRead
	if team, _, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, filesPrefix), "-"); ok && scoped {
		id := s.installOfLocked(token)
		scoped = id == team || s.orgServesLocked(id, team) ||
			(f != nil && f.shared != "" && s.seesLocked(token, f.shared))
	}
	s.mu.Unlock()
	ok := f != nil && strings.HasPrefix(strings.TrimPrefix(token, "xoxe."), "xoxb-") && scoped
	s.files.mu.Lock()
	s.files.fetches = append(s.files.fetches, FileFetch{Path: r.URL.Path, Token: token, OK: ok})
	s.files.mu.Unlock()
	switch {
	case f == nil:
		http.NotFound(w, r)
	case !ok:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, signInPage)
	default:
		w.Header().Set("Content-Type", f.mimetype)
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", f.name))
		w.Write(f.content)
	}
}
