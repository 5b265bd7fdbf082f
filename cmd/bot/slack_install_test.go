package main

import (
	"bytes"
	"fmt"
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

// workspaceRig is a bot on the OAuth app (no SLACK_BOT_TOKEN) with the
// fake's workspaces T2 and T3, and T4 and T5 of the org E1, each with
// its channel C2 to C5.
func workspaceRig(t *testing.T) *slackRig {
	t.Helper()
	r := newSlackRig(t, 3, 20*time.Millisecond, true)
	r.slack.App = &fakeslack.App{ClientID: oauthClientID, ClientSecret: oauthClientSecret, RedirectURL: oauthRedirect, TokenRotation: true}
	for _, tm := range []fakeslack.Team{{ID: "T2", Name: "Second", Channels: []string{"C2"}}, {ID: "T3", Name: "Third", Channels: []string{"C3"}},
		{ID: "T4", Name: "Org one", EnterpriseID: "E1", Channels: []string{"C4"}}, {ID: "T5", Name: "Org two", EnterpriseID: "E1", Channels: []string{"C5"}}} {
		r.slack.AddTeam(tm)
	}
	env := oauthEnv(r.env["PINPLAN_DB"], r.slackURL)
	for _, k := range []string{"OPENAI_BASE_URL", "OPENAI_API_KEY"} {
		env[k] = r.env[k]
	}
	r.env = env
	return r
}

// workspaceMention is a mention of the bot user bot in channel.
func workspaceMention(bot, channel, ts, text string) map[string]any {
	m := mention(channel, ts, text)
	m["text"] = "<@" + bot + "> " + text
	return m
}

// callsIn are the calls of method made on channel.
func callsIn(s *fakeslack.Server, method, channel string) []fakeslack.Call {
	var out []fakeslack.Call
	for _, c := range s.Calls(method) {
		if c.Params["channel"] == channel {
			out = append(out, c)
		}
	}
	return out
}

// TestSlackWorkspacesByOAuth: through the binary with the OAuth app and no
// SLACK_BOT_TOKEN, two workspaces and an org-wide install of two more,
// each installed by the OAuth flow, answer in their own threads with
// their own tokens; a call that meets token_expired is answered after
// one refresh; an uninstalled workspace gets nothing more, while the
// others go on.
func TestSlackWorkspacesByOAuth(t *testing.T) {
	t.Parallel()
	r := workspaceRig(t)
	p := r.start(t)
	defer p.stop(t)
	installWorkspace(t, p, r.slack, fakeslack.Install{TeamID: "T2", TeamName: "Second", UserID: "U9"})
	installWorkspace(t, p, r.slack, fakeslack.Install{TeamID: "T3", TeamName: "Third", UserID: "U9"})
	installWorkspace(t, p, r.slack, fakeslack.Install{EnterpriseID: "E1", Enterprise: true, UserID: "U9"})

	spaces := []struct{ channel, bot, install string }{{"C2", "UBT2", "T2"}, {"C3", "UBT3", "T3"}, {"C4", "UBE1", "E1"}, {"C5", "UBE1", "E1"}}
	for i, w := range spaces {
		if _, err := r.slack.Push(fmt.Sprintf("EvWs%d", i), workspaceMention(w.bot, w.channel, fmt.Sprintf("1700000%d00.000100", i), "plan it")); err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range spaces {
		waitReply(t, r.slack, w.channel, fmt.Sprintf("1700000%d00.000100", i), "All done")
		for _, c := range append(callsIn(r.slack, "chat.postMessage", w.channel), callsIn(r.slack, "chat.update", w.channel)...) {
			if c.Team != w.install {
				t.Errorf("%s on %s with the token of %q, want %s's", c.Method, w.channel, c.Team, w.install)
			}
		}
		if n := len(r.slack.Pinned(w.channel)); n != 1 {
			t.Errorf("%s: %d pinned, want the plan", w.channel, n)
		}
	}
	for _, c := range r.slack.Calls("") {
		if c.Error == "channel_not_found" || c.Error == "not_authed" || c.Error == "invalid_auth" {
			t.Errorf("%s on %s answered %s", c.Method, c.Params["channel"], c.Error)
		}
	}

	// T2's token expires under it: the next call meets token_expired and
	// goes through after one refresh.
	before := r.slack.Refreshes()
	r.slack.ExpireTokens("T2")
	if _, err := r.slack.Push("EvWsExpired", workspaceMention("UBT2", "C2", "1700000900.000100", "plan it again")); err != nil {
		t.Fatal(err)
	}
	waitReply(t, r.slack, "C2", "1700000900.000100", "All done")
	expired := 0
	for _, c := range r.slack.Calls("") {
		if c.Error == "token_expired" {
			expired++
		}
	}
	if got := r.slack.Refreshes() - before; got != 1 || expired != 1 {
		t.Errorf("after T2's token expired: %d refreshes, %d calls answered token_expired; want 1 and 1", got, expired)
	}

	// T3 uninstalls: nothing more is sent there; T2 goes on.
	r.slack.Uninstall("T3")
	waitFor(t, 10*time.Second, "the uninstall handled", func() bool { return strings.Contains(p.stderr.String(), "Slack workspace uninstalled") })
	sent := len(r.slack.Calls(""))
	if _, err := r.slack.Push("EvWsGone", workspaceMention("UBT3", "C3", "1700000950.000100", "are you there")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.slack.Push("EvWsStill", workspaceMention("UBT2", "C2", "1700000960.000100", "still here")); err != nil {
		t.Fatal(err)
	}
	waitReply(t, r.slack, "C2", "1700000960.000100", "All done")
	for _, c := range r.slack.Calls("")[sent:] {
		if c.Team == "T3" || c.Params["channel"] == "C3" {
			t.Errorf("after T3's uninstall: %s on %q (%s)", c.Method, c.Params["channel"], c.Team)
		}
	}
}

// TestSlackWorkspacesOnReplicas: the same on three replicas on etcd. An
// install begun at one replica is finished at another; both workspaces
// answer in their own threads, spread over the replicas' connections;
// when T2's token expires under mentions that reach every replica, it is
// refreshed once across them.
func TestSlackWorkspacesOnReplicas(t *testing.T) {
	t.Parallel()
	r := newReplicaRig(t, 2)
	r.slack.App = &fakeslack.App{ClientID: oauthClientID, ClientSecret: oauthClientSecret, RedirectURL: oauthRedirect, TokenRotation: true}
	r.slack.AddTeam(fakeslack.Team{ID: "T2", Name: "Second", Channels: []string{"C2"}})
	r.slack.AddTeam(fakeslack.Team{ID: "T3", Name: "Third", Channels: []string{"C3"}})
	delete(r.env, "SLACK_BOT_TOKEN")
	for k, v := range oauthEnv("", "") {
		if k != "PINPLAN_DB" && k != "SLACK_API_URL" && k != "PINPLAN_HTTP_ADDR" {
			r.env[k] = v
		}
	}
	ps := []*botProc{r.start(t, 0), r.start(t, 1), r.start(t, 2)}
	defer func() {
		for _, p := range ps {
			p.stop(t)
		}
	}()
	b := newInstallBrowser(t)
	back := b.beginInstall(t, ps[0], r.slack, fakeslack.Install{TeamID: "T2", TeamName: "Second", UserID: "U9"})
	if status, _, body := b.get(t, ps[1].URL, back); status != http.StatusOK || !strings.Contains(body, "installed in Second") {
		t.Fatalf("install begun at r0, finished at r1: %d %s\n%s", status, body, stderrs(ps...))
	}
	installWorkspace(t, ps[2], r.slack, fakeslack.Install{TeamID: "T3", TeamName: "Third", UserID: "U9"})

	threads := func(prefix string, round int) {
		for i := range 3 {
			for _, w := range []struct{ channel, bot string }{{"C2", "UBT2"}, {"C3", "UBT3"}} {
				ts := fmt.Sprintf("17%s%d%d0.000100", w.channel[1:], round, i)
				if _, err := r.slack.Push(fmt.Sprintf("%s%s%d", prefix, w.channel, i), workspaceMention(w.bot, w.channel, ts, "plan it")); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i := range 3 {
			for _, ch := range []string{"C2", "C3"} {
				waitReply(t, r.slack, ch, fmt.Sprintf("17%s%d%d0.000100", ch[1:], round, i), "All done")
			}
		}
	}
	threads("EvRep", 1)
	for _, c := range r.slack.Calls("") {
		if ch := c.Params["channel"]; (ch == "C2" && c.Team != "T2") || (ch == "C3" && c.Team != "T3") {
			t.Errorf("%s on %s with the token of %q", c.Method, ch, c.Team)
		}
	}

	before := r.slack.Refreshes()
	r.slack.ExpireTokens("T2")
	threads("EvRepExp", 2)
	expired := 0
	for _, c := range r.slack.Calls("") {
		if c.Error == "token_expired" {
			expired++
		}
	}
	if got := r.slack.Refreshes() - before; got != 1 || expired == 0 {
		t.Errorf("%d refreshes of T2's expired token across three replicas, %d calls met token_expired; want 1 refresh\n%s", got, expired, stderrs(ps...))
	}
	t.Logf("%d calls met token_expired; 1 refresh", expired)
}
