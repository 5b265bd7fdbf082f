package mcp

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/pinplan/pinplan/config"
)

// redactor hides a server's secrets. Replace is for what the model gets
// (results and errors of calls); Log is for what an operator sees (logs,
// /readyz, metrics), and hides more.
type redactor struct {
	secrets *strings.Replacer // header values, ${VAR} values, URL credentials
	logged  *strings.Replacer // secrets and the values of Env
}

// newRedactor replaces a server's secrets (header values, the values its
// ${VAR} references resolved to, its URL's password and long query values)
// with "[redacted]", and in logs also every query value and its Env values,
// literal ones included: a server may print its environment on stderr. Values shorter than 4
// bytes are left alone; hiding "on" or "1" everywhere would garble the
// text and hide nothing. Longest first, so that "Bearer tok" goes whole
// before "tok" alone.
func newRedactor(cfg Server) *redactor {
	var secrets []string
	add := func(list *[]string, v string) {
		if len(v) >= 4 && !slices.Contains(*list, v) {
			*list = append(*list, v)
		}
	}
	for _, v := range cfg.Headers {
		add(&secrets, v)
		// "Bearer <token>": the token alone may show up too.
		if _, tok, ok := strings.Cut(v, " "); ok {
			add(&secrets, strings.TrimSpace(tok))
		}
	}
	for _, v := range cfg.Secrets {
		add(&secrets, v)
	}
	var query []string
	if u, err := url.Parse(cfg.URL); err == nil {
		if u.User != nil {
			if p, ok := u.User.Password(); ok {
				add(&secrets, p)
			} else {
				// https://<token>@host: the name is the credential.
				add(&secrets, u.User.Username())
			}
		}
		for _, vs := range u.Query() {
			query = append(query, vs...)
		}
	}
	for _, v := range query {
		// A key is long; "json" in ?format=json is not worth garbling
		// every result that says json.
		if len(v) >= 8 {
			add(&secrets, v)
		}
	}
	logged := slices.Clone(secrets)
	for _, v := range query {
		add(&logged, v)
	}
	for _, v := range cfg.Env {
		add(&logged, v)
	}
	return &redactor{secrets: replacer(secrets), logged: replacer(logged)}
}

func replacer(secrets []string) *strings.Replacer {
	secrets = slices.Clone(secrets)
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	var pairs []string
	for _, v := range secrets {
		pairs = append(pairs, v, "[redacted]")
	}
	return strings.NewReplacer(pairs...)
}

// Replace hides the server's secrets in text for the model.
func (r *redactor) Replace(s string) string { return r.secrets.Replace(s) }

// Log hides, in text for a log line, an error or a status, the server's
// secrets, its Env values, and the credentials of every URL in it, however
// short (an SDK error quotes the URL it failed to reach).
func (r *redactor) Log(s string) string {
	return urlPattern.ReplaceAllStringFunc(r.logged.Replace(s), redactURL)
}

// urlPattern finds URLs in free text: a scheme, "://", and everything up to
// a space or a quote.
var urlPattern = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"'<>` + "`" + `]+`)

// redactURL is config.RedactURL: a URL's scheme, host and path stay
// readable, its user info, query values and fragment become "***".
func redactURL(raw string) string { return config.RedactURL(raw) }

// redactHandler passes log records on with Log applied to the message and
// to every attribute's text, so that nothing logged through a server's
// logger, the SDK's own lines included, shows its secrets.
type redactHandler struct {
	next slog.Handler
	r    *redactor
}

func (h *redactHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h *redactHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.Log(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *redactHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clean[i] = h.attr(a)
	}
	return &redactHandler{next: h.next.WithAttrs(clean), r: h.r}
}

func (h *redactHandler) WithGroup(name string) slog.Handler {
	return &redactHandler{next: h.next.WithGroup(name), r: h.r}
}

// attr redacts a's text: strings, errors and Stringers become redacted
// strings; numbers, times and the like pass as they are.
func (h *redactHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.r.Log(v.String()))
	case slog.KindGroup:
		group := v.Group()
		clean := make([]any, len(group))
		for i, g := range group {
			clean[i] = h.attr(g)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, h.r.Log(x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, h.r.Log(x.String()))
		}
		return slog.Any(a.Key, v.Any())
	}
	return slog.Attr{Key: a.Key, Value: v}
}
