package slack

import (
	"context"
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

// filesOf is a message's files as the agent takes them.
func filesOf(fs []slack.File) []agent.File {
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
// Slack's hosts (slack.com, slack-files.com) or the API URL's. Without
// files:read Slack answers with its sign-in page, an HTML page with
// status 200: that is told as such, not given as the file.
func (a *Adapter) FetchFile(ctx context.Context, f agent.File, max int64) ([]byte, error) {
	u, err := url.Parse(f.URL)
	if err != nil || !a.slackHost(u) {
		return nil, &chat.FileError{Reason: "its address is not Slack's"}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.opts.BotToken)
	resp, err := a.opts.HTTPClient.Do(req)
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

// slackHost reports whether u is a Slack host the bot token may go to.
func (a *Adapter) slackHost(u *url.URL) bool {
	host := strings.ToLower(u.Hostname())
	if api, err := url.Parse(a.opts.APIURL); err == nil && a.opts.APIURL != "" && strings.EqualFold(api.Host, u.Host) {
		return true
	}
	if u.Scheme != "https" {
		return false
	}
	for _, h := range []string{"slack.com", "slack-files.com"} {
		if host == h || strings.HasSuffix(host, "."+h) {
			return true
		}
	}
	return false
}
