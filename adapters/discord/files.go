package discord

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/bwmarrin/discordgo"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
)

var _ chat.FileFetcher = (*Adapter)(nil)

// Files in (DESIGN §12): a message's attachments come with it, by
// reference (their signed CDN URLs); the agent reads them when the turn
// takes the message in, through FetchFile. Without the MessageContent
// intent Discord sends no attachments of a message that does not mention
// the bot.

// filesOf is a message's attachments as the agent takes them.
func filesOf(as []*discordgo.MessageAttachment) []agent.File {
	var out []agent.File
	for _, a := range as {
		if a == nil {
			continue
		}
		out = append(out, agent.File{Name: a.Filename, Type: a.ContentType, Size: int64(a.Size), URL: a.URL})
	}
	return out
}

// FetchFile implements chat.FileFetcher: the attachment from its signed
// CDN URL, which needs no token (none is sent). Only Discord's CDN hosts
// are fetched from (or DISCORD_API_URL's, for a stand-in).
func (a *Adapter) FetchFile(ctx context.Context, _ string, f agent.File, max int64) ([]byte, error) {
	u, err := url.Parse(f.URL)
	if err != nil || !a.cdnHost(u) {
		return nil, &chat.FileError{Reason: "its address is not Discord's"}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, &chat.FileError{Reason: "Discord says it is no longer available"}
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("discord: fetch attachment: %s", resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, max+1))
}

// cdnHost reports whether u is where Discord serves attachments.
func (a *Adapter) cdnHost(u *url.URL) bool {
	if api, err := url.Parse(a.opts.APIURL); err == nil && a.opts.APIURL != "" && strings.EqualFold(api.Host, u.Host) {
		return true
	}
	host := strings.ToLower(u.Hostname())
	return u.Scheme == "https" && (host == "cdn.discordapp.com" || host == "media.discordapp.net")
}
