package fakeslack

import (
	"fmt"
	"net/http"
	"strings"
)

// An egress proxy between the bot and Slack (a corporate gateway, a
// content filter) answers some requests itself: a 403 with its own HTML
// page, no Slack body, no Retry-After. The request never reaches Slack.

// proxyPage is the body such a proxy answers with.
const proxyPage = "<!DOCTYPE html><html><head><title>403 Forbidden</title></head><body><h1>Access denied</h1><p>This request was blocked by your organisation's web gateway (policy: outbound-content).</p></body></html>"

// proxyRule is one RefuseAtProxy.
type proxyRule struct {
	method, match string
	status        int
	n             int // calls left; negative: until Heal
}

// RefuseAtProxy makes the next n calls of method ("" for any method)
// whose text has match ("" for any text) answer status (403, 407, ...)
// with an egress proxy's HTML page and no Slack error body, as a web
// gateway that blocks them does; n < 0 refuses every such call until
// Heal(method). The calls are recorded (Calls, with Error "proxy 403")
// but reach nothing: no message is posted, no rate limit counts them.
func (s *Server) RefuseAtProxy(method, match string, status, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.proxy = append(s.proxy, &proxyRule{method: method, match: match, status: status, n: n})
}

// proxyRefusesLocked reports the status a RefuseAtProxy rule answers
// this call with, using one of its calls; 0 when none applies.
func (s *Server) proxyRefusesLocked(method string, p map[string]string) int {
	for _, r := range s.proxy {
		if r.n == 0 || (r.method != "" && r.method != method) || !strings.Contains(p["text"], r.match) {
			continue
		}
		if r.n > 0 {
			r.n--
		}
		return r.status
	}
	return 0
}

// healProxyLocked drops the RefuseAtProxy rules of method.
func (s *Server) healProxyLocked(method string) {
	kept := s.proxy[:0]
	for _, r := range s.proxy {
		if r.method != method {
			kept = append(kept, r)
		}
	}
	s.proxy = kept
}

// writeProxyRefusal answers as the proxy does.
func writeProxyRefusal(w http.ResponseWriter, status int) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Via", "1.1 gateway.example (proxy)")
	w.WriteHeader(status)
	fmt.Fprint(w, proxyPage)
}
