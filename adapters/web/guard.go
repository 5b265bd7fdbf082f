package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
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
//   - Every console request needs the token (PINPLAN_WEB_TOKEN or the
//     generated one): a bearer header, or the HttpOnly SameSite=Strict
//     cookie that /login or ?token= sets (?token= is then redirected
//     away, so it stays out of the address bar, history and links).

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
	if err != nil {
		// No port: browsers and curl leave out the scheme's default,
		// so on port 80 (or 443) a bare host is the same host.
		if lport != "80" && lport != "443" {
			return false
		}
		h, p = host, lport
	}
	if p != lport {
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

// auth requires the token (DESIGN §7): a loopback address is no boundary,
// so every console route needs it, always. A console built without a
// token refuses everything rather than serve the world.
//
// Credentials, in the order looked at: a bearer header, the cookie (which
// holds a value derived from the token, never the token itself), then
// ?token= (API clients that cannot set headers; on a page it is exchanged
// for the cookie and redirected away). A client that keeps presenting
// wrong credentials is slowed: past a small burst, its attempts are
// answered 429 until its budget refills (failureRate a second).
func (c *Console) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api := strings.HasPrefix(r.URL.Path, "/api/") || r.URL.Path == "/metrics"
		presented := r.Header.Get("Authorization") != "" || r.URL.Query().Get("token") != ""
		if ck, err := r.Cookie(cookieName); err == nil && ck.Value != "" {
			presented = true
		}
		if presented && !c.failures.allowed(clientIP(r)) {
			w.Header().Set("Retry-After", "1")
			writeErr(w, http.StatusTooManyRequests, "too many wrong tokens from this address; wait a moment")
			return
		}
		if q := r.URL.Query().Get("token"); q != "" && !api {
			if !c.tokenOK(q) {
				c.failures.failed(clientIP(r))
				c.loginPage(w, r, "That token is not right.", http.StatusUnauthorized)
				return
			}
			// A page: exchange it for the cookie and take it out of the
			// address bar.
			c.setCookie(w, r)
			u := *r.URL
			qs := u.Query()
			qs.Del("token")
			u.RawQuery = qs.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		ok := false
		switch {
		case strings.HasPrefix(r.Header.Get("Authorization"), "Bearer "):
			ok = c.tokenOK(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		case r.Header.Get("Authorization") != "":
			ok = false
		default:
			if ck, err := r.Cookie(cookieName); err == nil && ck.Value != "" {
				ok = c.cookieOK(ck.Value)
			} else if q := r.URL.Query().Get("token"); q != "" {
				ok = c.tokenOK(q)
			}
		}
		if !ok {
			if presented {
				c.failures.failed(clientIP(r))
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="pinplan"`)
			if api {
				writeErr(w, http.StatusUnauthorized, "this console needs its token (PINPLAN_WEB_TOKEN, or the one in the URL the bot printed at start): sign in at /login, or send it as a bearer token")
				return
			}
			c.loginPage(w, r, "", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Protect wraps h with the console's token check, for routes the process
// serves beside the console (the backup download).
func (c *Console) Protect(h http.Handler) http.Handler { return c.auth(h) }

func (c *Console) tokenOK(got string) bool {
	return c.opts.Token != "" && got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(c.opts.Token)) == 1
}

func (c *Console) cookieOK(got string) bool {
	return c.opts.Token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(c.cookieValue())) == 1
}

// cookieValue is what the cookie holds: an HMAC of a fixed label under the
// token, so a leaked cookie jar does not reveal the token (which also
// works as a bearer token for /metrics and scripts).
func (c *Console) cookieValue() string {
	m := hmac.New(sha256.New, []byte(c.opts.Token))
	m.Write([]byte("pinplan console cookie v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// setCookie signs the browser in. Secure when the request came over
// HTTPS, directly or through a proxy that says so.
func (c *Console) setCookie(w http.ResponseWriter, r *http.Request) {
	secure := r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: c.cookieValue(), Path: "/", HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode})
}

// clientIP is the remote address without its port: the unit wrong guesses
// are counted by. Behind a reverse proxy every client shares the proxy's
// address; a guesser there slows everyone's wrong attempts, not the
// right ones of others' requests that carry no wrong credential.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// Wrong-guess pacing: a burst of failureBurst, then failureRate a second.
const (
	failureRate  = 2
	failureBurst = 10
	maxClients   = 4096
)

// failureLimiter counts wrong credentials per client address.
type failureLimiter struct {
	mu   sync.Mutex
	by   map[string]*rate.Limiter
	now  func() time.Time
	seen map[string]time.Time
}

// allowed reports whether ip may present a credential now.
func (f *failureLimiter) allowed(ip string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.by[ip]
	return !ok || l.TokensAt(f.now()) >= 1
}

// failed spends one attempt of ip's budget.
func (f *failureLimiter) failed(ip string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if f.by == nil {
		f.by, f.seen = map[string]*rate.Limiter{}, map[string]time.Time{}
	}
	if len(f.by) >= maxClients {
		// Forget clients whose budget has refilled.
		for k, at := range f.seen {
			if now.Sub(at) > failureBurst*time.Second/failureRate {
				delete(f.by, k)
				delete(f.seen, k)
			}
		}
	}
	l, ok := f.by[ip]
	if !ok {
		if len(f.by) >= maxClients {
			return // a flood of addresses: each still meets the token check
		}
		l = rate.NewLimiter(failureRate, failureBurst)
		f.by[ip] = l
	}
	l.AllowN(now, 1)
	f.seen[ip] = now
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
	if r.Method != http.MethodPost {
		c.loginPage(w, r, "", http.StatusOK)
		return
	}
	if !c.failures.allowed(clientIP(r)) {
		w.Header().Set("Retry-After", "1")
		c.loginPage(w, r, "Too many wrong tokens from this address; wait a moment and try again.", http.StatusTooManyRequests)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil || !c.tokenOK(r.PostForm.Get("token")) {
		c.failures.failed(clientIP(r))
		c.loginPage(w, r, "That token is not right.", http.StatusUnauthorized)
		return
	}
	c.setCookie(w, r)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}
