package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/internal/fakeslack"
)

// The OAuth app the many-workspaces tests install (DESIGN §14). Slack
// sends the browser back to the redirect URL's public host; the tests'
// browser goes to the bot's own address instead, as a proxy in front of
// it would.
const (
	oauthClientID     = "1111.2222"
	oauthClientSecret = "client-secret"
	oauthRedirect     = "https://pinplan.test/slack/oauth_redirect"
	oauthSecretKey    = "0123456789abcdef0123456789abcdef-test-key"
)

// oauthEnv is the bot's settings for the OAuth app against the fake at
// slackURL, its store at db, in Socket Mode.
func oauthEnv(db, slackURL string) map[string]string {
	return map[string]string{
		"PINPLAN_DB": db, "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"SLACK_CLIENT_ID": oauthClientID, "SLACK_CLIENT_SECRET": oauthClientSecret, "SLACK_REDIRECT_URL": oauthRedirect,
		"PINPLAN_SECRET_KEY": oauthSecretKey, "SLACK_APP_TOKEN": "xapp-test-token", "SLACK_API_URL": slackURL + "/api/",
	}
}

// browser is a person's browser in the install: its own cookies, and
// redirects read, not followed.
type installBrowser struct{ c *http.Client }

func newInstallBrowser(t *testing.T) *installBrowser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &installBrowser{&http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// get fetches u on the bot at base (u's own host, Slack's idea of the
// bot, is replaced by it); it returns the status, the Location and the
// page.
func (b *installBrowser) get(t *testing.T, base, u string) (int, string, string) {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	bu, _ := url.Parse(base)
	pu.Scheme, pu.Host = bu.Scheme, bu.Host
	resp, err := b.c.Get(pu.String())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), string(body)
}

// beginInstall opens /slack/install and approves it at Slack as in: it
// returns where Slack sends the browser back.
func (b *installBrowser) beginInstall(t *testing.T, p *botProc, slack *fakeslack.Server, in fakeslack.Install) string {
	t.Helper()
	status, loc, body := b.get(t, p.URL, p.URL+"/slack/install")
	if status != http.StatusFound || loc == "" {
		t.Fatalf("GET /slack/install: %d %q %s", status, loc, body)
	}
	back, err := slack.Authorize(loc, in)
	if err != nil {
		t.Fatalf("Slack refused the authorize URL %s: %v", loc, err)
	}
	return back
}

// installWorkspace runs the whole OAuth install of in through the bot, as a
// person's browser does, and checks the page says it is installed.
func installWorkspace(t *testing.T, p *botProc, slack *fakeslack.Server, in fakeslack.Install) {
	t.Helper()
	b := newInstallBrowser(t)
	status, _, body := b.get(t, p.URL, b.beginInstall(t, p, slack, in))
	if status != http.StatusOK || !strings.Contains(body, "pinplan is installed") {
		t.Fatalf("install of %+v: %d %s\nstderr:\n%s", in, status, body, p.stderr)
	}
}

// TestSlackInstallByOAuth: the install pages through the binary. A forged
// state, a reused one and one begun in another browser are refused with
// a page that says so; a good install stores the installation, its
// token sealed in the bbolt file.
func TestSlackInstallByOAuth(t *testing.T) {
	t.Parallel()
	slack := &fakeslack.Server{App: &fakeslack.App{ClientID: oauthClientID, ClientSecret: oauthClientSecret, RedirectURL: oauthRedirect}}
	ss := httptest.NewServer(slack)
	t.Cleanup(ss.Close)
	db := filepath.Join(t.TempDir(), "installs.db")
	p := startBot(t, oauthEnv(db, ss.URL), botBinary)

	a := newInstallBrowser(t)
	for _, tc := range []struct{ name, url, want string }{
		{"no state", "/slack/oauth_redirect?code=x", "opened without the install"},
		{"forged", "/slack/oauth_redirect?code=x&state=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "forged or altered"},
	} {
		if status, _, body := a.get(t, p.URL, p.URL+tc.url); status != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want 400 saying %q", tc.name, status, body, tc.want)
		}
	}

	back := a.beginInstall(t, p, slack, fakeslack.Install{TeamID: "T2", TeamName: "Second", UserID: "U9"})
	if status, _, body := newInstallBrowser(t).get(t, p.URL, back); status != http.StatusBadRequest || !strings.Contains(body, "another browser") {
		t.Errorf("state begun in another browser: %d %s", status, body)
	}
	// A copy of the browser's cookie, replayed with the same state after
	// the install: its single use is recorded in the store.
	replay := newInstallBrowser(t)
	slashURL, _ := url.Parse(p.URL + "/slack/")
	replay.c.Jar.SetCookies(slashURL, a.c.Jar.Cookies(slashURL))
	if status, _, body := a.get(t, p.URL, back); status != http.StatusOK || !strings.Contains(body, "installed in Second") {
		t.Fatalf("install: %d %s\nstderr:\n%s", status, body, p.stderr)
	}
	if status, _, body := replay.get(t, p.URL, back); status != http.StatusBadRequest || !strings.Contains(body, "used already") {
		t.Errorf("reused state: %d %s", status, body)
	}
	waitFor(t, 5*time.Second, "the installation logged", func() bool {
		return strings.Contains(p.stderr.String(), "Slack installation stored") && strings.Contains(p.stderr.String(), "id=T2")
	})
	p.stop(t)
	raw, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("xoxb-")) || !bytes.Contains(raw, []byte("T2")) {
		t.Errorf("the bbolt file holds a bot token in the clear (xoxb-), or no installation of T2")
	}
}
