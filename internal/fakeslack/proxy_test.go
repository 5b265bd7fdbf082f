package fakeslack

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestRefuseAtProxy: a refused call answers 403 with an HTML page and no
// Slack body, posts nothing and is recorded; calls whose text does not
// match, and every call after Heal, reach Slack.
func TestRefuseAtProxy(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	s.RefuseAtProxy("chat.postMessage", "blocked words", http.StatusForbidden, -1)
	post := func(text string) (int, string, string) {
		t.Helper()
		form := url.Values{"token": {"xoxb-1"}, "channel": {"C1"}, "text": {text}}
		resp, err := http.Post(base+"/api/chat.postMessage", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
	}
	for i := range 2 {
		status, ctype, body := post("some blocked words here")
		if status != http.StatusForbidden || !strings.HasPrefix(ctype, "text/html") || strings.Contains(body, `"ok"`) {
			t.Errorf("refused call %d: %d %s %q, want a 403 HTML page without a Slack body", i+1, status, ctype, body)
		}
	}
	if status, _, body := post("a fine message"); status != http.StatusOK || !strings.Contains(body, `"ok":true`) {
		t.Errorf("a call the proxy lets through: %d %q", status, body)
	}
	if n := len(s.Messages("C1")); n != 1 {
		t.Errorf("%d messages, want the one that passed the proxy", n)
	}
	calls := s.Calls("chat.postMessage")
	if len(calls) != 3 || calls[0].Error != "proxy 403" || calls[0].Status != http.StatusForbidden || calls[2].Error != "" {
		t.Errorf("recorded calls %+v", calls)
	}
	s.Heal("chat.postMessage")
	if status, _, _ := post("more blocked words"); status != http.StatusOK {
		t.Errorf("after Heal: HTTP %d, want 200", status)
	}

	s.RefuseAtProxy("", "", http.StatusForbidden, 1)
	if status, _, _ := post("anything"); status != http.StatusForbidden {
		t.Errorf("a rule for any call: HTTP %d, want 403", status)
	}
	if status, _, _ := post("anything"); status != http.StatusOK {
		t.Errorf("after its one call: HTTP %d, want 200", status)
	}
}
