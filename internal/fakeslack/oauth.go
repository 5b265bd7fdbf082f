package fakeslack

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// OAuth v2 as Slack runs it for a distributed app
// (docs.slack.dev/authentication/installing-with-oauth): a person
// approves the install at Slack's authorize URL (here Authorize, which a
// test calls as the browser would), Slack redirects to the app's
// redirect_uri with a code and the app's state, and the app exchanges
// the code at oauth.v2.access with its client id and secret. A code is
// single use and expires after ten minutes. With token rotation on
// (docs.slack.dev/authentication/using-token-rotation), the access token
// starts with xoxe.xoxb-, expires (expires_in, twelve hours by default)
// and is refreshed at oauth.v2.access with grant_type=refresh_token; a
// call with an expired token answers token_expired.

// App is the distributed app the OAuth flow installs: its credentials,
// its redirect URL and the bot scopes its manifest asks for.
type App struct {
	ClientID     string
	ClientSecret string
	RedirectURL  string
	// TokenRotation: installs get expiring tokens and a refresh token.
	TokenRotation bool
	// TokenLife is how long a rotated token lasts; 12 hours by default.
	TokenLife time.Duration
}

// oauthState is the fake's OAuth records.
type oauthState struct {
	codes     map[string]*oauthCode
	tokens    map[string]oauthToken // issued bot tokens
	refreshes map[string]string     // refresh token -> installation (team or org id)
	refreshed int
}

type oauthCode struct {
	install     Install
	redirectURI string
	issued      time.Time
	used        bool
}

type oauthToken struct {
	team    string    // team or org id of its installation
	expires time.Time // zero: does not expire
}

// Install is what a person approves at the authorize URL.
type Install struct {
	TeamID, TeamName string
	EnterpriseID     string
	// Enterprise: an org-wide install (is_enterprise_install), for
	// every workspace of EnterpriseID.
	Enterprise bool
	UserID     string // who installs
	Scopes     []string
}

func (s *Server) oauthLocked() *oauthState {
	if s.oauth == nil {
		s.oauth = &oauthState{codes: map[string]*oauthCode{}, tokens: map[string]oauthToken{}, refreshes: map[string]string{}}
	}
	return s.oauth
}

// ErrAuthorize: the authorize URL was not one Slack would take for the
// app (wrong client id, a redirect_uri other than the app's, no scope).
var ErrAuthorize = errors.New("fakeslack: Slack refuses this authorize URL")

// Authorize is a person approving the install at Slack's authorize URL
// authorizeURL (as the app's /slack/install redirected the browser):
// it checks the URL as Slack does and returns where Slack redirects the
// browser: the app's redirect_uri with a fresh code and the app's state.
func (s *Server) Authorize(authorizeURL string, in Install) (string, error) {
	u, err := url.Parse(authorizeURL)
	if err != nil {
		return "", err
	}
	q := u.Query()
	s.mu.Lock()
	defer s.mu.Unlock()
	app := s.App
	switch {
	case app == nil || q.Get("client_id") != app.ClientID:
		return "", fmt.Errorf("%w: client_id %q", ErrAuthorize, q.Get("client_id"))
	case q.Get("redirect_uri") != "" && q.Get("redirect_uri") != app.RedirectURL:
		return "", fmt.Errorf("%w: redirect_uri %q is not the app's %q", ErrAuthorize, q.Get("redirect_uri"), app.RedirectURL)
	case q.Get("scope") == "":
		return "", fmt.Errorf("%w: no scope", ErrAuthorize)
	}
	in.Scopes = strings.Split(q.Get("scope"), ",")
	o := s.oauthLocked()
	s.seq++
	code := fmt.Sprintf("code-%d-%d", s.seq, time.Now().UnixNano())
	o.codes[code] = &oauthCode{install: in, redirectURI: q.Get("redirect_uri"), issued: time.Now()}
	back, err := url.Parse(app.RedirectURL)
	if err != nil {
		return "", err
	}
	bq := back.Query()
	bq.Set("code", code)
	bq.Set("state", q.Get("state"))
	back.RawQuery = bq.Encode()
	return back.String(), nil
}

// Refreshes is how many token refreshes oauth.v2.access made.
func (s *Server) Refreshes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.oauthLocked().refreshed
}

// ExpireToken makes an issued token expire now (a test's clock jump).
func (s *Server) ExpireToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.oauthLocked()
	if t, ok := o.tokens[token]; ok {
		t.expires = time.Now().Add(-time.Second)
		o.tokens[token] = t
	}
}

// ExpireTokens makes every token issued to installation id (a team or
// org id) expire now, as ExpireToken does for one: for a test that does
// not see the bot's tokens.
func (s *Server) ExpireTokens(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.oauthLocked()
	for tok, t := range o.tokens {
		if t.team == id {
			t.expires = time.Now().Add(-time.Second)
			o.tokens[tok] = t
		}
	}
}

// tokenCodeLocked is the error a call with an OAuth-issued token meets:
// token_expired once it expired, token_revoked once its installation
// went; "" for a good one or a token the OAuth flow did not issue.
func (s *Server) tokenCodeLocked(token string) string {
	if s.oauth == nil {
		return ""
	}
	t, ok := s.oauth.tokens[token]
	switch {
	case !ok:
		return ""
	case t.team == "":
		return "token_revoked"
	case !t.expires.IsZero() && time.Now().After(t.expires):
		return "token_expired"
	}
	return ""
}

// RevokeTokens is an uninstall: every token of the installation id (a
// team or org id) stops working (token_revoked).
func (s *Server) RevokeTokens(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.oauthLocked()
	for tok, t := range o.tokens {
		if t.team == id {
			t.team = ""
			o.tokens[tok] = t
		}
	}
	for rt, team := range o.refreshes {
		if team == id {
			delete(o.refreshes, rt)
		}
	}
}

// oauthAccessLocked answers oauth.v2.access: a code exchange, or with
// grant_type=refresh_token a refresh.
func (s *Server) oauthAccessLocked(p map[string]string) (map[string]any, string) {
	app := s.App
	switch {
	case app == nil || p["client_id"] != app.ClientID:
		return nil, "invalid_client_id"
	case p["client_secret"] != app.ClientSecret:
		return nil, "bad_client_secret"
	}
	o := s.oauthLocked()
	life := app.TokenLife
	if life <= 0 {
		life = 12 * time.Hour
	}
	if p["grant_type"] == "refresh_token" {
		id, ok := o.refreshes[p["refresh_token"]]
		if !ok {
			return nil, "invalid_refresh_token"
		}
		s.seq++
		token := fmt.Sprintf("xoxe.xoxb-%s-%d", id, s.seq)
		o.tokens[token] = oauthToken{team: id, expires: time.Now().Add(life)}
		o.refreshed++
		return map[string]any{"access_token": token, "token_type": "bot", "expires_in": int(life / time.Second),
			"refresh_token": p["refresh_token"], "team": map[string]any{"id": id}}, ""
	}
	c, ok := o.codes[p["code"]]
	switch {
	case !ok:
		return nil, "invalid_code"
	case c.used:
		return nil, "invalid_code" // a code works once
	case time.Since(c.issued) > 10*time.Minute:
		return nil, "invalid_code"
	case c.redirectURI != "" && p["redirect_uri"] != c.redirectURI:
		return nil, "bad_redirect_uri"
	}
	c.used = true
	in := c.install
	id := in.TeamID
	if in.Enterprise {
		id = in.EnterpriseID
	}
	s.seq++
	resp := map[string]any{"token_type": "bot", "scope": strings.Join(in.Scopes, ","), "bot_user_id": s.botOfLocked(id), "app_id": "A1",
		"team": map[string]any{"id": in.TeamID, "name": in.TeamName}, "enterprise": nil, "is_enterprise_install": in.Enterprise,
		"authed_user": map[string]any{"id": in.UserID}}
	if in.Enterprise {
		resp["team"] = nil
		s.teamsLocked().orgWide[id] = true
	}
	if in.EnterpriseID != "" {
		resp["enterprise"] = map[string]any{"id": in.EnterpriseID, "name": "Org " + in.EnterpriseID}
	}
	var token string
	if app.TokenRotation {
		token = fmt.Sprintf("xoxe.xoxb-%s-%d", id, s.seq)
		rt := fmt.Sprintf("xoxe-1-%s-%d", id, s.seq)
		o.tokens[token] = oauthToken{team: id, expires: time.Now().Add(life)}
		o.refreshes[rt] = id
		resp["refresh_token"], resp["expires_in"] = rt, int(life/time.Second)
	} else {
		token = fmt.Sprintf("xoxb-%s-%d", id, s.seq)
		o.tokens[token] = oauthToken{team: id}
	}
	resp["access_token"] = token
	return resp, ""
}
