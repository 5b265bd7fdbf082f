package slack

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakeslack"
)

// TestTokenAndHookHosts: the bot token goes to Slack's file hosts over
// https or to the API URL's own scheme and host; a response_url is
// posted to only at Slack's hooks host or the API URL's own origin.
func TestTokenAndHookHosts(t *testing.T) {
	tests := []struct {
		name, api, url string
		token, hook    bool
	}{
		{"files host", "", "https://files.slack.com/files-pri/T1-F1/a.txt", true, false},
		{"plain http to slack.com", "", "http://slack.com/files-pri/T1-F1/a.txt", false, false},
		{"plain http to files", "", "http://files.slack.com/files-pri/T1-F1/a.txt", false, false},
		{"another host", "", "https://slack.com.evil.example/a.txt", false, false},
		{"credentials in the URL", "", "https://user:pw@files.slack.com/a.txt", false, false},
		{"hooks", "", "https://hooks.slack.com/commands/T1/1/x", true, true},
		{"hooks over http", "", "http://hooks.slack.com/commands/T1/1/x", false, false},
		{"hooks on another port", "", "https://hooks.slack.com:8443/commands/T1/1/x", true, false},
		{"a local server", "", "http://127.0.0.1:9999/commands/T1/1/x", false, false},
		{"the fake's own origin", "http://127.0.0.1:4000/api/", "http://127.0.0.1:4000/actions/T1/1/x", true, true},
		{"the fake's host on another port", "http://127.0.0.1:4000/api/", "http://127.0.0.1:4001/actions/T1/1/x", false, false},
		{"the API host over http when it is https", "https://127.0.0.1:4000/api/", "http://127.0.0.1:4000/files-pri/a.txt", false, false},
		{"GovSlack hooks", "https://slack-gov.com/api/", "https://hooks.slack-gov.com/commands/T1/1/x", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New(Options{BotToken: "xoxb-t", APIURL: tt.api})
			u, err := url.Parse(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			if got := a.tokenHost(u); got != tt.token {
				t.Errorf("tokenHost(%s) = %v, want %v", tt.url, got, tt.token)
			}
			if got := a.hookURL(u); got != tt.hook {
				t.Errorf("hookURL(%s) = %v, want %v", tt.url, got, tt.hook)
			}
		})
	}
}

// TestFetchFileRedirectStaysOnSlack: a file address on Slack's host that
// redirects elsewhere is not followed: the token stays home.
func TestFetchFileRedirectStaysOnSlack(t *testing.T) {
	var seen []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = append(seen, r.Header.Get("Authorization")) }))
	defer other.Close()
	fake := &fakeslack.Server{}
	mux := http.NewServeMux()
	mux.Handle("/", fake)
	mux.HandleFunc("/moved/", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/a.txt", http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	a := New(Options{BotToken: "xoxb-t", APIURL: srv.URL + "/api/"})
	if _, err := a.FetchFile(context.Background(), "slack/T1/C1/1.1", agent.File{Name: "a.txt", URL: srv.URL + "/moved/a.txt"}, 100); err == nil {
		t.Errorf("a redirect away from Slack was followed")
	}
	if len(seen) != 0 {
		t.Errorf("the other host was asked: %q", seen)
	}
}

// TestHTTPRefusalsAreUndeliverable: a 4xx with no Slack error body (an
// egress proxy's 403) is undeliverable; 408 and a 429 without
// Retry-After are retried, as a 5xx is.
func TestHTTPRefusalsAreUndeliverable(t *testing.T) {
	th := chat.Thread{Platform: "slack", Channel: "C1", ThreadID: "1.1"}
	for _, tt := range []struct {
		status int
		want   chat.Outcome
	}{
		{http.StatusForbidden, chat.Permanent},
		{http.StatusUnauthorized, chat.Permanent},
		{http.StatusRequestEntityTooLarge, chat.Permanent},
		{http.StatusRequestTimeout, chat.Retry},
		{http.StatusBadGateway, chat.Retry},
	} {
		a, fake := testAdapter(t, false)
		fake.RefuseAtProxy("chat.postMessage", "", tt.status, 1)
		err := a.Reply(context.Background(), th, "", "the answer")
		if got, _ := chat.Classify(err); got != tt.want {
			t.Errorf("a reply answered %d: %v (%v), want %v", tt.status, got, err, tt.want)
		}
		if tt.want == chat.Permanent && !errors.Is(err, chat.ErrUndeliverable) {
			t.Errorf("a reply answered %d: %v, want it to wrap ErrUndeliverable", tt.status, err)
		}
	}
}
