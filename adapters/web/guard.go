package web

import (
	"crypto/subtle"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Security of the console (DESIGN.md §7, issue 10): other websites must
// not drive it, on loopback too.
//
//   - Every answer carries a CSP without inline script, frame-ancestors
//     'none' with X-Frame-Options DENY, and Referrer-Policy no-referrer.
//   - On a loopback listener the Host must be the listen address, or
//     localhost, 127.0.0.1 or [::1] with its port: anything else is 421
//     (DNS rebinding). The signed Slack endpoints and /healthz, /readyz
//     are exempt. On other addresses the token is the guard.
//   - A state-changing request needs Content-Type application/json (the
//     login form excepted) and, from a browser, an Origin or
//     Sec-Fetch-Site of the console itself. A request with neither header
//     comes from no browser (a script, curl), which no website can make.
//   - With PINPLAN_WEB_TOKEN set, every request needs it: a bearer header,
//     or the HttpOnly SameSite=Strict cookie that /login or ?token= sets
//     (?token= is then redirected away, so it stays out of the address
//     bar, history and links).

const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"

// exempt paths skip the Host check: signed by Slack, or probed by
// supervisors with whatever Host they use.
func exempt(path string) bool {
	switch path {
	case "/slack/events", "/slack/interactions", "/healthz", "/readyz":
		return true
	}
	return false
}

// guard wraps the whole mux.
func (c *Console) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Content-Type-Options", "nosniff")
		if exempt(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		if !c.hostAllowed(r.Host) {
			c.opts.Logger.Warn("web: request for another host refused (DNS rebinding?)", "host", r.Host, "remote", r.RemoteAddr)
			http.Error(w, "misdirected request: this console answers only to its own address", http.StatusMisdirectedRequest)
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			if !sameOrigin(r) {
				writeErr(w, http.StatusForbidden, "cross-site request refused")
				return
			}
			// A DELETE carries no body; other methods must send JSON,
			// which no form or simple cross-site request can.
			if r.URL.Path != "/login" && r.Method != http.MethodDelete && !isJSON(r) {
				writeErr(w, http.StatusUnsupportedMediaType, "send Content-Type: application/json")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed applies the DNS-rebinding rule on loopback listeners.
func (c *Console) hostAllowed(host string) bool {
	c.mu.Lock()
	addr := c.addr
	c.mu.Unlock()
	if addr == "" {
		return true // not serving on a known listener (tests with their own mux)
	}
	lhost, lport, err := net.SplitHostPort(addr)
	if err != nil || !isLoopback(lhost) {
		return true // beyond loopback the token guards
	}
	if strings.EqualFold(host, addr) {
		return true
	}
	h, p, err := net.SplitHostPort(host)
	if err != nil || p != lport {
		return false
	}
	switch strings.ToLower(strings.Trim(h, "[]")) {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	return false
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// sameOrigin: the browser says the request comes from the console's own
// page, or no browser sent it.
func sameOrigin(r *http.Request) bool {
	// With Referrer-Policy no-referrer a browser sends "Origin: null" on a
	// form post, even from the console's own page: Sec-Fetch-Site decides.
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		return err == nil && strings.EqualFold(u.Host, r.Host)
	}
	if r.Header.Get("Origin") == "null" && r.Header.Get("Sec-Fetch-Site") == "" {
		return false // an opaque origin and nothing else to go by
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return true
	case "":
		return true // no browser: neither header
	}
	return false
}

func isJSON(r *http.Request) bool {
	ct := strings.ToLower(strings.TrimSpace(strings.SplitN(r.Header.Get("Content-Type"), ";", 2)[0]))
	return ct == "application/json"
}

const cookieName = "pinplan_token"

// auth requires the token when one is set.
func (c *Console) auth(next http.Handler) http.Handler {
	if c.opts.Token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query().Get("token"); q != "" && !strings.HasPrefix(r.URL.Path, "/api/") && r.URL.Path != "/metrics" {
			if !c.tokenOK(q) {
				c.loginPage(w, r, "That token is not right.", http.StatusUnauthorized)
				return
			}
			// A page: exchange it for the cookie and take it out of the
			// address bar.
			c.setCookie(w, q)
			u := *r.URL
			qs := u.Query()
			qs.Del("token")
			u.RawQuery = qs.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if ck, err := r.Cookie(cookieName); got == "" && err == nil {
			got = ck.Value
		}
		if got == "" {
			got = r.URL.Query().Get("token") // API clients that cannot set headers
		}
		if !c.tokenOK(got) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="pinplan"`)
			if strings.HasPrefix(r.URL.Path, "/api/") || r.URL.Path == "/metrics" {
				writeErr(w, http.StatusUnauthorized, "this console needs PINPLAN_WEB_TOKEN: sign in at /login, or send it as a bearer token")
				return
			}
			c.loginPage(w, r, "", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (c *Console) tokenOK(got string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(c.opts.Token)) == 1
}

func (c *Console) setCookie(w http.ResponseWriter, token string) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
}

var loginTmpl = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in · pinplan console</title><link rel="stylesheet" href="/app.css"></head>
<body class="login"><main class="login-box">
<h1>pinplan</h1>
<form method="post" action="/login">
<label for="token">Console token (PINPLAN_WEB_TOKEN)</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
{{if .Error}}<p class="error" role="alert">{{.Error}}</p>{{end}}
<button type="submit">Sign in</button>
</form></main></body></html>
`))

// loginPage serves the sign-in form.
func (c *Console) loginPage(w http.ResponseWriter, _ *http.Request, msg string, status int) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	loginTmpl.Execute(w, struct{ Error string }{msg})
}

// login handles GET and POST /login.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if c.opts.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if r.Method != http.MethodPost {
		c.loginPage(w, r, "", http.StatusOK)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil || !c.tokenOK(r.PostForm.Get("token")) {
		c.loginPage(w, r, "That token is not right.", http.StatusUnauthorized)
		return
	}
	c.setCookie(w, r.PostForm.Get("token"))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}
