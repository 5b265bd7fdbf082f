package slack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/slack-go/slack"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
)

var _ chat.FileFetcher = (*Adapter)(nil)

// Files in (DESIGN §12): a message's files come with its event (files,
// with the files:read scope), by reference; the agent reads them when
// the turn takes the message in, through FetchFile.
//
// With many workspaces a file is fetched with the token of the workspace
// of the thread it was shared in (its session key's team): a file shared
// into a Slack Connect channel names its uploader's workspace in its
// address, which may have no pinplan, or another installation.

// filesOf is a message's files as the agent takes them.
func (a *Adapter) filesOf(fs []slack.File) []agent.File {
	var out []agent.File
	for _, f := range fs {
		name := f.Name
		if name == "" {
			name = f.Title
		}
		u := f.URLPrivateDownload
		if u == "" {
			u = f.URLPrivate
		}
		out = append(out, agent.File{Name: name, Type: f.Mimetype, Size: int64(f.Size), URL: u})
	}
	return out
}

// FetchFile implements chat.FileFetcher: the file from its
// url_private_download, with the bot token. The token goes only to
// Slack's hosts over https (files.slack.com, slack-files.com) or to the
// configured API URL's own scheme and host (tokenHost), redirects
// included; any other address is refused and logged, the token never
// sent. Without files:read Slack answers with its sign-in page, an HTML
// page with status 200: that is told as such, not given as the file.
func (a *Adapter) FetchFile(ctx context.Context, session string, f agent.File, max int64) ([]byte, error) {
	u, err := url.Parse(f.URL)
	if err != nil || !a.tokenHost(u) {
		a.log.Warn("slack: a file's address is not Slack's over https; not fetched, the token not sent", "file", f.Name, "scheme", schemeOf(u), "host", hostOf(u))
		return nil, &chat.FileError{Reason: "its address is not Slack's (https)"}
	}
	token, err := a.fileToken(ctx, session, u)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	client := *a.opts.HTTPClient
	client.CheckRedirect = func(next *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("slack: fetch file: too many redirects")
		}
		if !a.tokenHost(next.URL) {
			a.log.Warn("slack: a file's address redirects away from Slack's https hosts; not followed", "file", f.Name, "scheme", next.URL.Scheme, "host", next.URL.Host)
			return fmt.Errorf("slack: fetch file: redirected to %s://%s, not Slack's", next.URL.Scheme, next.URL.Host)
		}
		return nil
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("slack: fetch file: %s", resp.Status)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/html" && !strings.HasPrefix(f.Type, "text/html") {
		return nil, &chat.FileError{Reason: "Slack served its sign-in page instead of the file; the app needs the files:read scope (add it and reinstall the app)"}
	}
	return io.ReadAll(io.LimitReader(resp.Body, max+1))
}

// tokenHost reports whether the bot token may go to u: https to one of
// Slack's file hosts (slack.com, slack-files.com and their subdomains),
// or exactly the configured API URL's scheme and host (GovSlack, a
// gateway, the fake in tests). Never plain http to anything else: an
// http://slack.com address would carry the token in clear text.
func (a *Adapter) tokenHost(u *url.URL) bool {
	if u == nil || u.User != nil {
		return false
	}
	if api := a.apiURL(); api != nil && sameOrigin(api, u) {
		return true
	}
	if u.Scheme != "https" {
		return false
	}
	return underDomain(u.Hostname(), "slack.com", "slack-files.com")
}

// hookURL reports whether u is where Slack's response_urls point:
// https://hooks.slack.com, https://hooks.<API host> when the API URL is
// https (hooks.slack-gov.com for GovSlack), or exactly the configured
// API URL's scheme and host (the fake in tests).
func (a *Adapter) hookURL(u *url.URL) bool {
	if u == nil || u.User != nil {
		return false
	}
	api := a.apiURL()
	if api != nil && sameOrigin(api, u) {
		return true
	}
	if u.Scheme != "https" || (u.Port() != "" && u.Port() != "443") {
		return false
	}
	host := strings.ToLower(u.Hostname())
	if host == "hooks.slack.com" {
		return true
	}
	return api != nil && api.Scheme == "https" && host == "hooks."+strings.ToLower(api.Hostname())
}

// apiURL is the configured API URL (Slack's own without one), nil if it
// does not parse.
func (a *Adapter) apiURL() *url.URL {
	raw := a.opts.APIURL
	if raw == "" {
		raw = slack.APIURL
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil
	}
	return u
}

// sameOrigin reports whether a and b have the same scheme and host (with
// the port).
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Host, b.Host)
}

// underDomain reports whether host is one of domains or under one.
func underDomain(host string, domains ...string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, d := range domains {
		if host == d || strings.HasSuffix(host, "."+d) {
			return true
		}
	}
	return false
}

// schemeOf and hostOf name where a URL points for a log line, without
// its path or query (a response_url's path is its secret).
func schemeOf(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.Scheme
}

func hostOf(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.Host
}

// fileToken is the bot token a file is fetched with: SLACK_BOT_TOKEN,
// or with many workspaces the token of the workspace of session, the
// thread it was shared in; a session that names none (not Slack's)
// falls back to the workspace the file's address names
// (.../files-pri/<team>-<file>/...).
func (a *Adapter) fileToken(ctx context.Context, session string, u *url.URL) (string, error) {
	if a.one != nil {
		return a.opts.BotToken, nil
	}
	if team := teamOf(session); team != "" {
		return a.space(team).tokens.token(ctx)
	}
	segs := strings.Split(u.Path, "/")
	for i, seg := range segs[:len(segs)-1] {
		if seg != "files-pri" {
			continue
		}
		if team, _, ok := strings.Cut(segs[i+1], "-"); ok && team != "" {
			return a.space(team).tokens.token(ctx)
		}
	}
	return "", &chat.FileError{Reason: "its address names no Slack workspace"}
}
