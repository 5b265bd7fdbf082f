package install

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/internal/fakeslack"
)

// flowRig is the install flow of a pinplan served at srv against the
// fake Slack, with a browser (a client with a cookie jar that follows no
// redirects).
type flowRig struct {
	fake    *fakeslack.Server
	flow    *Flow
	srv     *httptest.Server
	browser *http.Client
	x       *Installations
	now     time.Time
}

func newFlowRig(t *testing.T, rotation bool) *flowRig {
	t.Helper()
	rig := &flowRig{now: time.Now()}
	mux := http.NewServeMux()
	rig.srv = httptest.NewServer(mux)
	t.Cleanup(rig.srv.Close)
	rig.fake = &fakeslack.Server{App: &fakeslack.App{ClientID: "111.222", ClientSecret: "s3cret", RedirectURL: rig.srv.URL + "/slack/oauth_redirect", TokenRotation: rotation}}
	slackSrv := httptest.NewServer(rig.fake)
	t.Cleanup(slackSrv.Close)
	db := openDB(t)
	seal := sealer(t, key1)
	rig.x = New(db, seal)
	rig.flow = &Flow{ClientID: "111.222", ClientSecret: "s3cret", RedirectURL: rig.srv.URL + "/slack/oauth_redirect", Scopes: fakeslack.BotScopes,
		AuthorizeURL: "https://slack.com/oauth/v2/authorize", APIURL: slackSrv.URL + "/api/", Seal: seal, Once: db.FirstSeen,
		Installations: rig.x, Now: func() time.Time { return rig.now }}
	mux.HandleFunc("GET /slack/install", rig.flow.Install)
	mux.HandleFunc("GET /slack/oauth_redirect", rig.flow.Redirect)
	jar, _ := cookiejar.New(nil)
	rig.browser = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return rig
}

// begin opens the install link and returns where it sends the browser.
func (rig *flowRig) begin(t *testing.T) string {
	t.Helper()
	resp, err := rig.browser.Get(rig.srv.URL + "/slack/install")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("/slack/install: %s", resp.Status)
	}
	return resp.Header.Get("Location")
}

func (rig *flowRig) open(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestInstallFlow (DESIGN §14): an install by OAuth stores the
// installation with its tokens; the link's state is refused when it is
// missing, forged, reused, expired or brought by another browser, each
// with a page that says so.
func TestInstallFlow(t *testing.T) {
	rig := newFlowRig(t, true)
	ctx := context.Background()
	authorize := rig.begin(t)
	u, _ := url.Parse(authorize)
	if q := u.Query(); q.Get("client_id") != "111.222" || !strings.Contains(q.Get("scope"), "chat:write") || q.Get("state") == "" || q.Get("redirect_uri") != rig.flow.RedirectURL {
		t.Fatalf("authorize URL %s", authorize)
	}
	back, err := rig.fake.Authorize(authorize, fakeslack.Install{TeamID: "T2", TeamName: "Two", UserID: "U9"})
	if err != nil {
		t.Fatal(err)
	}

	stranger := &http.Client{CheckRedirect: rig.browser.CheckRedirect}
	if code, body := rig.open(t, stranger, back); code != http.StatusBadRequest || !strings.Contains(body, "another browser") {
		t.Errorf("the redirect in another browser: %d %s", code, body)
	}
	if code, body := rig.open(t, rig.browser, back); code != http.StatusOK || !strings.Contains(body, "installed in Two") {
		t.Fatalf("the redirect: %d %s", code, body)
	}
	in, err := rig.x.Get(ctx, "T2")
	if err != nil || !strings.HasPrefix(in.BotToken, "xoxe.xoxb-") || in.RefreshToken == "" || in.Expires.IsZero() || in.InstalledBy != "U9" || in.BotUserID == "" {
		t.Fatalf("stored: %+v, %v", in, err)
	}
	// The browser keeps no cookie now; a second install link's cookie
	// does not make the first link's state good again.
	rig.begin(t)
	if code, body := rig.open(t, rig.browser, back); code != http.StatusBadRequest || !strings.Contains(body, "another browser") && !strings.Contains(body, "used already") {
		t.Errorf("the redirect opened again: %d %s", code, body)
	}

	forged := strings.Replace(back, "state=", "state=AAAA", 1)
	if code, body := rig.open(t, rig.browser, forged); code != http.StatusBadRequest || !strings.Contains(body, "forged") {
		t.Errorf("a forged state: %d %s", code, body)
	}
	noState := rig.srv.URL + "/slack/oauth_redirect?code=x"
	if code, body := rig.open(t, rig.browser, noState); code != http.StatusBadRequest || !strings.Contains(body, "without") {
		t.Errorf("no state: %d %s", code, body)
	}
	late, _ := rig.fake.Authorize(rig.begin(t), fakeslack.Install{TeamID: "T3", TeamName: "Three"})
	rig.now = rig.now.Add(StateLife + time.Second)
	if code, body := rig.open(t, rig.browser, late); code != http.StatusBadRequest || !strings.Contains(body, "expired") {
		t.Errorf("an expired link: %d %s", code, body)
	}
	if _, err := rig.x.Get(ctx, "T3"); err == nil {
		t.Error("an expired link installed")
	}
}

// TestInstallReusedState: the same state, cookie and all, works once.
func TestInstallReusedState(t *testing.T) {
	rig := newFlowRig(t, false)
	authorize := rig.begin(t)
	back, err := rig.fake.Authorize(authorize, fakeslack.Install{TeamID: "T2", TeamName: "Two"})
	if err != nil {
		t.Fatal(err)
	}
	jarCookies := rig.browser.Jar.Cookies(mustURL(rig.srv.URL + "/slack/"))
	if code, _ := rig.open(t, rig.browser, back); code != http.StatusOK {
		t.Fatalf("first use: %d", code)
	}
	rig.browser.Jar.SetCookies(mustURL(rig.srv.URL+"/slack/"), jarCookies) // the cookie put back
	if code, body := rig.open(t, rig.browser, back); code != http.StatusBadRequest || !strings.Contains(body, "used already") {
		t.Errorf("a reused state: %d %s", code, body)
	}
}

// TestOrgInstall: an org-wide install serves every workspace of the org.
func TestOrgInstall(t *testing.T) {
	rig := newFlowRig(t, false)
	back, err := rig.fake.Authorize(rig.begin(t), fakeslack.Install{EnterpriseID: "E1", Enterprise: true, UserID: "U1"})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := rig.open(t, rig.browser, back); code != http.StatusOK || !strings.Contains(body, "every workspace") {
		t.Fatalf("org install: %d %s", code, body)
	}
	for _, team := range []string{"T5", "T6"} {
		if in, err := rig.x.Find(context.Background(), team, "E1"); err != nil || in.ID != "E1" {
			t.Errorf("workspace %s of the org: %+v, %v", team, in, err)
		}
	}
}

// TestRefreshThroughSlack: Installations.Token refreshes through the
// flow's oauth.v2.access once the token is near its end.
func TestRefreshThroughSlack(t *testing.T) {
	rig := newFlowRig(t, true)
	back, _ := rig.fake.Authorize(rig.begin(t), fakeslack.Install{TeamID: "T2", TeamName: "Two"})
	if code, _ := rig.open(t, rig.browser, back); code != http.StatusOK {
		t.Fatal("install failed")
	}
	ctx := context.Background()
	before, _ := rig.x.Get(ctx, "T2")
	rig.x.now = func() time.Time { return before.Expires.Add(-time.Minute) } // within RefreshEarly
	after, err := rig.x.Token(ctx, "T2", rig.flow.Refresh)
	if err != nil || after.BotToken == before.BotToken || rig.fake.Refreshes() != 1 {
		t.Errorf("refresh: %q -> %q, %v, %d refreshes", before.BotToken, after.BotToken, err, rig.fake.Refreshes())
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}
