package httphost

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestNoTokenRefusesEverything: a console without a token fails closed. A
// loopback listener is no boundary (a reverse proxy on the same host
// forwards Host: 127.0.0.1:PORT), so nothing is served without it.
func TestNoTokenRefusesEverything(t *testing.T) {
	h := New(Options{Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("secret_metric 1\n")) })})
	mountConsole(h)
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	h.SetAddr(srv.Listener.Addr().String())
	for _, path := range []string{"/", "/app.js", "/api/threads", "/api/events", "/metrics", "/debug/pprof/heap", "/?token="} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without any token configured: %d, want 401", path, resp.StatusCode)
		}
	}
	resp, err := http.Post(srv.URL+"/api/threads", "application/json", strings.NewReader(`{"text":"run"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /api/threads: %d, want 401", resp.StatusCode)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d, want it open", path, resp.StatusCode)
		}
	}
}

// TestCookieIsDerived: the cookie never holds the token itself, is Secure
// behind HTTPS, and works on its own.
func TestCookieIsDerived(t *testing.T) {
	srv := newHost(t, "s3cret-token")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, https := range []bool{false, true} {
		req, _ := http.NewRequest("GET", srv.URL+"/?token=s3cret-token", nil)
		if https {
			req.Header.Set("X-Forwarded-Proto", "https")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var ck *http.Cookie
		for _, c := range resp.Cookies() {
			if c.Name == cookieName {
				ck = c
			}
		}
		if ck == nil {
			t.Fatalf("https=%t: no cookie set", https)
		}
		if strings.Contains(ck.Value, "s3cret-token") {
			t.Errorf("the cookie holds the raw token: %q", ck.Value)
		}
		if ck.Secure != https {
			t.Errorf("https=%t: cookie Secure=%t", https, ck.Secure)
		}
		req, _ = http.NewRequest("GET", srv.URL+"/api/threads", nil)
		req.AddCookie(&http.Cookie{Name: cookieName, Value: ck.Value})
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("the cookie alone: %d, want 200", resp.StatusCode)
		}
	}
	// The raw token as a cookie value is not a credential.
	req, _ := http.NewRequest("GET", srv.URL+"/api/threads", nil)
	req.AddCookie(&http.Cookie{Name: cookieName, Value: "s3cret-token"})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the raw token as a cookie: %d, want 401", resp.StatusCode)
	}
}

// TestWrongGuessesAreSlowed: after a small burst of wrong tokens a client
// is answered 429 until its budget refills, on the API and the sign-in
// form alike.
func TestWrongGuessesAreSlowed(t *testing.T) {
	srv := newHost(t, "s3cret-token")
	codes := map[int]int{}
	for i := range 40 {
		req, _ := http.NewRequest("GET", srv.URL+"/api/threads", nil)
		req.Header.Set("Authorization", "Bearer guess-"+string(rune('a'+i%26)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	if codes[http.StatusTooManyRequests] == 0 || codes[http.StatusUnauthorized] == 0 || codes[http.StatusUnauthorized] > 12 {
		t.Errorf("40 wrong guesses answered %v, want about 10 401s, then 429s", codes)
	}
	form := url.Values{"token": {"another-guess"}}.Encode()
	req, _ := http.NewRequest("POST", srv.URL+"/login", strings.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the sign-in form after the burst: %d, want 429", resp.StatusCode)
	}
}

// TestDefaultPortHost: on port 80 (and 443) browsers and curl send the Host
// without the port; it is the same host.
func TestDefaultPortHost(t *testing.T) {
	for _, port := range []string{"80", "443"} {
		h := New(Options{Token: "tok-123456789"})
		mountConsole(h)
		srv := httptest.NewServer(h.Handler())
		defer srv.Close()
		h.SetAddr("127.0.0.1:" + port)
		for host, want := range map[string]int{"127.0.0.1": 200, "localhost": 200, "127.0.0.1:" + port: 200, "evil.example": 421, "127.0.0.1:81": 421} {
			req, _ := http.NewRequest("GET", srv.URL+"/api/threads", nil)
			req.Header.Set("Authorization", "Bearer tok-123456789")
			req.Host = host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("listening on :%s, Host %q: %d, want %d", port, host, resp.StatusCode, want)
			}
		}
	}
}

// mountConsole mounts stand-ins for the console's routes.
func mountConsole(h *Host) {
	ok := func(status int) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) })
	}
	h.Handle("GET /", ok(200))
	h.Handle("GET /api/threads", ok(200))
	h.Handle("POST /api/threads", ok(201))
	h.Handle("GET /api/events", ok(200))
}

func newHost(t *testing.T, token string) *httptest.Server {
	t.Helper()
	h := New(Options{Token: token})
	mountConsole(h)
	srv := httptest.NewServer(h.Handler())
	t.Cleanup(srv.Close)
	h.SetAddr(srv.Listener.Addr().String())
	return srv
}

// TestStaleCookieDoesNotLockOut: a browser whose cookie is from an older
// token (its event stream retrying every second) does not use up its
// address's budget, so the new token still signs it in.
func TestStaleCookieDoesNotLockOut(t *testing.T) {
	srv := newHost(t, "the-new-token")
	for range 40 {
		req, _ := http.NewRequest("GET", srv.URL+"/api/events", nil)
		req.AddCookie(&http.Cookie{Name: cookieName, Value: "derived-from-the-old-token"})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a stale cookie: %d, want 401", resp.StatusCode)
		}
	}
	req, _ := http.NewRequest("GET", srv.URL+"/api/threads?token=the-new-token", nil)
	req.AddCookie(&http.Cookie{Name: cookieName, Value: "derived-from-the-old-token"})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the new token beside a stale cookie: %d, want 200", resp.StatusCode)
	}
}

// TestProfilesNeedTheToken: the runtime's profiles are served with the
// token and refused without it.
func TestProfilesNeedTheToken(t *testing.T) {
	srv := newHost(t, "s3cret-token")
	for _, tc := range []struct {
		auth, query string
		want        int
	}{
		{want: http.StatusUnauthorized},
		{auth: "Bearer wrong", want: http.StatusUnauthorized},
		{auth: "Bearer s3cret-token", want: http.StatusOK},
		{query: "&token=wrong", want: http.StatusUnauthorized},
		{query: "&token=s3cret-token", want: http.StatusOK}, // go tool pprof sends no header
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/debug/pprof/heap?debug=1"+tc.query, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("heap profile with %q %q: %d, want %d", tc.auth, tc.query, resp.StatusCode, tc.want)
		}
		if tc.want == http.StatusOK && !strings.Contains(string(body), "heap profile:") {
			t.Errorf("heap profile with the token: %.100q, want a heap profile", body)
		}
	}
}
