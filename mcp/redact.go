package mcp

import (
	"net/url"
	"slices"
	"strings"
)

// newRedactor replaces a server's secrets (header values, the values its
// ${VAR} references resolved to) with "[redacted]", longest first so that
// "Bearer tok" goes whole before "tok" alone.
func newRedactor(cfg Server) *strings.Replacer {
	var secrets []string
	add := func(v string) {
		if len(v) >= 4 && !slices.Contains(secrets, v) {
			secrets = append(secrets, v)
		}
	}
	for _, v := range cfg.Headers {
		add(v)
		// "Bearer <token>": the token alone may show up too.
		if _, tok, ok := strings.Cut(v, " "); ok {
			add(strings.TrimSpace(tok))
		}
	}
	for _, v := range cfg.Secrets {
		add(v)
	}
	if u, err := url.Parse(cfg.URL); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok {
			add(p)
		}
	}
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	var pairs []string
	for _, v := range secrets {
		pairs = append(pairs, v, "[redacted]")
	}
	return strings.NewReplacer(pairs...)
}

// redactURL hides a password in a URL's user info.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
