package httphost

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// The guard keeps other websites from driving the console (DESIGN §7), on
// loopback too:
//
//   - Every answer carries a CSP without inline script, frame-ancestors
//     'none' with X-Frame-Options DENY, and Referrer-Policy no-referrer.
//   - On a loopback listener the Host must be the listen address, or
//     localhost, 127.0.0.1 or [::1] with its port (without it on port 80
//     or 443): anything else is 421 (DNS rebinding). On other addresses
//     the token is the guard.
//   - A state-changing request needs Content-Type application/json (the
//     sign-in form excepted) and, from a browser, an Origin or
//     Sec-Fetch-Site of the console itself. A request with neither header
//     comes from no browser (a script, curl), which no website can make.

const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"

func (h *Host) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.hostAllowed(r.Host) {
			h.opts.Logger.Warn("request for another host refused (DNS rebinding?)", "host", r.Host, "remote", r.RemoteAddr)
			http.Error(w, "misdirected request: this console answers only to its own address", http.StatusMisdirectedRequest)
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			if !sameOrigin(r) {
				WriteError(w, http.StatusForbidden, "cross-site request refused")
				return
			}
			// A DELETE carries no body; other methods must send JSON,
			// which no form or simple cross-site request can.
			if r.URL.Path != "/login" && r.Method != http.MethodDelete && !isJSON(r) {
				WriteError(w, http.StatusUnsupportedMediaType, "send Content-Type: application/json")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed applies the DNS-rebinding rule on loopback listeners.
func (h *Host) hostAllowed(host string) bool {
	h.mu.Lock()
	addr := h.addr
	h.mu.Unlock()
	if addr == "" {
		return true // not serving on a known listener
	}
	lhost, lport, err := net.SplitHostPort(addr)
	if err != nil || !isLoopback(lhost) {
		return true // beyond loopback the token guards
	}
	if strings.EqualFold(host, addr) {
		return true
	}
	name, port, err := net.SplitHostPort(host)
	if err != nil {
		// No port: browsers and curl leave out the scheme's default,
		// so on port 80 (or 443) a bare host is the same host.
		if lport != "80" && lport != "443" {
			return false
		}
		name, port = host, lport
	}
	if port != lport {
		return false
	}
	switch strings.ToLower(strings.Trim(name, "[]")) {
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
