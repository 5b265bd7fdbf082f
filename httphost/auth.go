package httphost

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/hex"
	"html/template"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The token (DESIGN §7): a loopback address is no boundary (a reverse
// proxy on the same host forwards Host: 127.0.0.1:PORT; other local users
// reach it too), so every Handle route needs it, always: a bearer header,
// or the HttpOnly SameSite=Strict cookie that /login or ?token= sets
// (?token= on a page is then redirected away, so it stays out of the
// address bar, history and links).

const cookieName = "pinplan_token"

// auth requires the token (DESIGN §7): a loopback address is no boundary,
// so every console route needs it, always. A console built without a
// token refuses everything rather than serve the world.
//
// Credentials, in the order looked at: a bearer header, the cookie (which
// holds a value derived from the token, never the token itself), then
// ?token= (API clients that cannot set headers; on a page it is exchanged
// for the cookie and redirected away). A client that keeps presenting
// wrong tokens is slowed: past a small burst, its attempts are answered
// 429 until its budget refills (failureRate a second). A wrong cookie is
// not counted (see below).
func (h *Host) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Not pages: ?token= is taken as it is, not exchanged for the
		// cookie (go tool pprof fetches a URL and sends no header).
		api := strings.HasPrefix(r.URL.Path, "/api/") || r.URL.Path == "/metrics" || strings.HasPrefix(r.URL.Path, "/debug/pprof/")
		// Only a presented token counts as a guess: a cookie holds a
		// 256-bit HMAC nobody can guess, and a stale one (the token was
		// changed) must not lock its browser's address out of signing in.
		presented := r.Header.Get("Authorization") != "" || r.URL.Query().Get("token") != ""
		if presented && !h.failures.allowed(clientIP(r)) {
			w.Header().Set("Retry-After", "1")
			WriteError(w, http.StatusTooManyRequests, "too many wrong tokens from this address; wait a moment")
			return
		}
		if q := r.URL.Query().Get("token"); q != "" && !api {
			if !h.tokenOK(q) {
				h.failures.failed(clientIP(r))
				h.loginPage(w, r, "That token is not right.", http.StatusUnauthorized)
				return
			}
			// A page: exchange it for the cookie and take it out of the
			// address bar.
			h.setCookie(w, r)
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
			ok = h.tokenOK(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		case r.Header.Get("Authorization") != "":
			ok = false
		default:
			if ck, err := r.Cookie(cookieName); err == nil && ck.Value != "" {
				ok = h.cookieOK(ck.Value)
			}
			if q := r.URL.Query().Get("token"); !ok && q != "" {
				ok = h.tokenOK(q)
			}
		}
		if !ok {
			if presented {
				h.failures.failed(clientIP(r))
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="pinplan"`)
			if api {
				WriteError(w, http.StatusUnauthorized, "this console needs its token (PINPLAN_WEB_TOKEN, or the one in the URL the bot printed at start): sign in at /login, or send it as a bearer token")
				return
			}
			h.loginPage(w, r, "", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (h *Host) tokenOK(got string) bool {
	return h.opts.Token != "" && got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(h.opts.Token)) == 1
}

func (h *Host) cookieOK(got string) bool {
	return h.opts.Token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(h.cookieValue())) == 1
}

// cookieValue is what the cookie holds: an HMAC of a fixed label under the
// token, so a leaked cookie jar does not reveal the token (which also
// works as a bearer token for /metrics and scripts).
func (h *Host) cookieValue() string {
	m := hmac.New(sha256.New, []byte(h.opts.Token))
	m.Write([]byte("pinplan console cookie v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// setCookie signs the browser in. Secure when the request came over
// HTTPS, directly or through a proxy that says so.
func (h *Host) setCookie(w http.ResponseWriter, r *http.Request) {
	secure := r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: h.cookieValue(), Path: "/", HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode})
}

// clientIP is the remote address without its port: the unit wrong guesses
// are counted by. X-Forwarded-For is not trusted (a local user could send
// any). So behind a reverse proxy every client shares the proxy's address:
// while someone there keeps guessing, token sign-ins and bearer clients
// behind the same proxy get 429 too; browsers already holding the cookie
// are not affected. Brute force is refused over availability by choice.
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
<title>Sign in · pinplan console</title><link rel="stylesheet" href="/login.css"></head>
<body class="login"><main class="login-box">
<h1>pinplan</h1>
<form method="post" action="/login">
<label for="token">Console token (PINPLAN_WEB_TOKEN)</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
{{if .Error}}<p class="error" role="alert">{{.Error}}</p>{{end}}
<button type="submit">Sign in</button>
</form>
<p class="hint">The token is <code>PINPLAN_WEB_TOKEN</code>, or, where that is not set, the one pinplan generated at its first start and keeps in <code>web-token</code> beside its database (<code>&lt;db dir&gt;/web-token</code>, for example <code>data/web-token</code>). The line pinplan logs at start has a link that signs you in.</p>
<p class="hint">Replicas behind one address must share one <code>PINPLAN_WEB_TOKEN</code>: each would otherwise generate its own and refuse the others' sign-ins.</p>
</main></body></html>
`))

// loginPage serves the sign-in form.
func (h *Host) loginPage(w http.ResponseWriter, _ *http.Request, msg string, status int) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	loginTmpl.Execute(w, struct{ Error string }{msg})
}

// login handles GET and POST /login.
func (h *Host) login(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		h.loginPage(w, r, "", http.StatusOK)
		return
	}
	if !h.failures.allowed(clientIP(r)) {
		w.Header().Set("Retry-After", "1")
		h.loginPage(w, r, "Too many wrong tokens from this address; wait a moment and try again.", http.StatusTooManyRequests)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil || !h.tokenOK(r.PostForm.Get("token")) {
		h.failures.failed(clientIP(r))
		h.loginPage(w, r, "That token is not right.", http.StatusUnauthorized)
		return
	}
	h.setCookie(w, r)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

//go:embed login.css
var loginStyles []byte

func loginCSS(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Write(loginStyles)
}
