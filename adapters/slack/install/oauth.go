package install

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/slack-go/slack"
)

// StateLife is how long an install link works, from /slack/install to
// Slack's redirect back.
const StateLife = 10 * time.Minute

// stateCookie binds an install's state to the browser that began it.
const stateCookie = "pinplan_slack_install"

// Flow is Slack's OAuth v2 install, as Slack's own SDKs run it: Install
// sends the browser to Slack's authorize URL with a single-use state,
// signed and bound to a cookie, good for StateLife; Redirect checks the
// state Slack sends back, exchanges the code at oauth.v2.access and
// stores the installation. With replicas any of them may take either
// step: the state is checked by its signature, and its single use is
// recorded in the shared store (Once).
type Flow struct {
	ClientID     string
	ClientSecret string
	// RedirectURL is where Slack sends the browser back: the manifest's
	// redirect URL, https://<host>/slack/oauth_redirect.
	RedirectURL string
	Scopes      []string // the bot scopes the manifest asks for
	// AuthorizeURL is Slack's (https://slack.com/oauth/v2/authorize);
	// APIURL the Web API's, for oauth.v2.access (https://slack.com/api/).
	// An empty AuthorizeURL is the one beside APIURL: .../api/ gives
	// .../oauth/v2/authorize (a fake's likewise).
	AuthorizeURL string
	APIURL       string
	HTTP         *http.Client // nil: a client with a 30 s timeout
	Seal         *Sealer
	// Once reports whether key is seen for the first time in ttl, across
	// replicas (store.DB.FirstSeen): a state is used once.
	Once          func(ctx context.Context, key string, ttl time.Duration) (bool, error)
	Installations *Installations
	// Installed, when set, is told of each new installation.
	Installed func(Installation)
	Now       func() time.Time
	Logger    *slog.Logger
}

func (f *Flow) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

func (f *Flow) log() *slog.Logger {
	if f.Logger != nil {
		return f.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// state returns a new state for an install link and the nonce its
// cookie carries: nonce, expiry and their HMAC under the secret key.
func (f *Flow) state() (state, nonce string) {
	raw := make([]byte, 16+8, 16+8+sha256.Size)
	rand.Read(raw[:16])
	binary.BigEndian.PutUint64(raw[16:], uint64(f.now().Add(StateLife).Unix()))
	raw = append(raw, f.mac(raw)...)
	return base64.RawURLEncoding.EncodeToString(raw), base64.RawURLEncoding.EncodeToString(raw[:16])
}

func (f *Flow) mac(b []byte) []byte {
	m := hmac.New(sha256.New, f.Seal.sign)
	m.Write([]byte("slack oauth state\x00"))
	m.Write(b)
	return m.Sum(nil)
}

// Install is GET /slack/install: a redirect to Slack's authorize URL.
func (f *Flow) Install(w http.ResponseWriter, r *http.Request) {
	state, nonce := f.state()
	http.SetCookie(w, &http.Cookie{Name: stateCookie, Value: nonce, Path: "/slack/", MaxAge: int(StateLife / time.Second),
		HttpOnly: true, Secure: strings.HasPrefix(f.RedirectURL, "https://"), SameSite: http.SameSiteLaxMode})
	q := url.Values{"client_id": {f.ClientID}, "scope": {strings.Join(f.Scopes, ",")}, "state": {state}, "redirect_uri": {f.RedirectURL}}
	authorize := f.AuthorizeURL
	if authorize == "" {
		authorize = strings.TrimSuffix(strings.TrimSuffix(f.APIURL, "/"), "/api") + "/oauth/v2/authorize"
	}
	http.Redirect(w, r, authorize+"?"+q.Encode(), http.StatusFound)
}

// checkState says what is wrong with the state Slack sent back, in words
// for the person installing; "" for a good one, now used.
func (f *Flow) checkState(r *http.Request, state string) string {
	const again = " Start again from the install link."
	raw, err := base64.RawURLEncoding.DecodeString(state)
	switch {
	case state == "":
		return "This page was opened without the install's state, so it cannot be trusted." + again
	case err != nil || len(raw) != 16+8+sha256.Size || !hmac.Equal(raw[24:], f.mac(raw[:24])):
		return "This install link was not made by this pinplan (its state is forged or altered)." + again
	case f.now().Unix() > int64(binary.BigEndian.Uint64(raw[16:24])):
		return "This install link expired: it works for ten minutes." + again
	}
	c, err := r.Cookie(stateCookie)
	if err != nil || !hmac.Equal([]byte(c.Value), []byte(base64.RawURLEncoding.EncodeToString(raw[:16]))) {
		return "This install was started in another browser (or its cookie was cleared)." + again
	}
	first, err := f.Once(r.Context(), "slack-oauth-state:"+c.Value, StateLife)
	switch {
	case err != nil:
		f.log().Error("record an install state's use", "err", err)
		return "pinplan could not check this install link (its database is unavailable)." + again
	case !first:
		return "This install link was used already." + again
	}
	return ""
}

// Redirect is GET /slack/oauth_redirect: Slack's answer to the install.
func (f *Flow) Redirect(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if problem := f.checkState(r, q.Get("state")); problem != "" {
		f.log().Warn("Slack install refused", "reason", problem, "remote", r.RemoteAddr)
		page(w, http.StatusBadRequest, "Not installed", problem)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: stateCookie, Path: "/slack/", MaxAge: -1})
	if e := q.Get("error"); e != "" {
		page(w, http.StatusOK, "Not installed", "The install was cancelled in Slack ("+e+"). Nothing was changed.")
		return
	}
	resp, err := slack.GetOAuthV2ResponseContext(r.Context(), f.httpClient(), f.ClientID, f.ClientSecret, q.Get("code"), f.RedirectURL, slack.OAuthOptionAPIURL(f.APIURL))
	if err != nil {
		f.log().Error("Slack install: oauth.v2.access", "err", err)
		page(w, http.StatusBadGateway, "Not installed", "Slack refused the install ("+err.Error()+"). Start again from the install link.")
		return
	}
	in := fromResponse(resp, f.now())
	if err := f.Installations.Save(r.Context(), in); err != nil {
		f.log().Error("Slack install: store the installation", "team", in.ID, "err", err)
		page(w, http.StatusInternalServerError, "Not installed", "pinplan could not store the installation (its database is unavailable). Start again in a moment.")
		return
	}
	f.log().Info("Slack installation stored", "id", in.ID, "team", in.TeamID, "enterprise", in.EnterpriseID, "org_wide", in.Enterprise, "rotating", !in.Expires.IsZero())
	if f.Installed != nil {
		f.Installed(in)
	}
	where := in.TeamName
	if in.Enterprise {
		where = "every workspace of your organization"
	}
	page(w, http.StatusOK, "pinplan is installed",
		"pinplan is installed in "+where+". Invite it to a channel (/invite @pinplan) and mention it with a task: it posts and pins its plan in the thread.")
}

// Refresh is a token refresh at oauth.v2.access (Installations.Token).
func (f *Flow) Refresh(ctx context.Context, refreshToken string) (Refreshed, error) {
	resp, err := slack.RefreshOAuthV2TokenContext(ctx, f.httpClient(), f.ClientID, f.ClientSecret, refreshToken, slack.OAuthOptionAPIURL(f.APIURL))
	if err != nil {
		return Refreshed{}, err
	}
	return Refreshed{BotToken: resp.AccessToken, RefreshToken: resp.RefreshToken, Expires: f.now().Add(time.Duration(resp.ExpiresIn) * time.Second)}, nil
}

func (f *Flow) httpClient() *http.Client {
	if f.HTTP != nil {
		return f.HTTP
	}
	return defaultHTTP
}

var defaultHTTP = &http.Client{Timeout: 30 * time.Second}

// fromResponse is the installation an oauth.v2.access answer made.
func fromResponse(resp *slack.OAuthV2Response, now time.Time) Installation {
	in := Installation{ID: resp.Team.ID, TeamID: resp.Team.ID, TeamName: resp.Team.Name, EnterpriseID: resp.Enterprise.ID,
		Enterprise: resp.IsEnterpriseInstall, AppID: resp.AppID, BotToken: resp.AccessToken, BotUserID: resp.BotUserID,
		RefreshToken: resp.RefreshToken, InstalledBy: resp.AuthedUser.ID, InstalledAt: now}
	if in.Enterprise {
		in.ID = resp.Enterprise.ID
	}
	if resp.Scope != "" {
		in.Scopes = strings.Split(resp.Scope, ",")
	}
	if resp.ExpiresIn > 0 {
		in.Expires = now.Add(time.Duration(resp.ExpiresIn) * time.Second)
	}
	return in
}

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem}</style></head>
<body><h1>{{.Title}}</h1><p>{{.Text}}</p></body></html>
`))

// page answers with a small HTML page saying what happened.
func page(w http.ResponseWriter, status int, title, text string) {
	var b bytes.Buffer
	if err := pageTmpl.Execute(&b, struct{ Title, Text string }{title, text}); err != nil {
		http.Error(w, fmt.Sprint(title, ": ", text), status)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}
