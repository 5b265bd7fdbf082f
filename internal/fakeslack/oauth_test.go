package fakeslack

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
)

func TestOAuthInstall(t *testing.T) {
	fake := &Server{App: &App{ClientID: "111.222", ClientSecret: "s3cret", RedirectURL: "https://bot.example/slack/oauth_redirect", TokenRotation: true, TokenLife: time.Hour}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	ctx := context.Background()
	api := slack.OAuthOptionAPIURL(srv.URL + "/api/")
	authorize := "https://slack.com/oauth/v2/authorize?client_id=111.222&scope=chat:write,app_mentions:read&state=st8&redirect_uri=" + url.QueryEscape(fake.App.RedirectURL)

	if _, err := fake.Authorize(strings.Replace(authorize, "111.222", "999", 1), Install{TeamID: "T2"}); err == nil {
		t.Error("an authorize URL with another app's client id was taken")
	}
	if _, err := fake.Authorize(strings.Replace(authorize, "bot.example", "evil.example", 1), Install{TeamID: "T2"}); err == nil {
		t.Error("an authorize URL with a foreign redirect_uri was taken")
	}
	back, err := fake.Authorize(authorize, Install{TeamID: "T2", TeamName: "Two", UserID: "U9"})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(back)
	if u.Query().Get("state") != "st8" || u.Query().Get("code") == "" || !strings.HasPrefix(back, fake.App.RedirectURL) {
		t.Fatalf("redirect %s", back)
	}
	code := u.Query().Get("code")
	if _, err := slack.GetOAuthV2ResponseContext(ctx, http.DefaultClient, "111.222", "wrong", code, fake.App.RedirectURL, api); err == nil || !strings.Contains(err.Error(), "bad_client_secret") {
		t.Errorf("a wrong secret: %v", err)
	}
	resp, err := slack.GetOAuthV2ResponseContext(ctx, http.DefaultClient, "111.222", "s3cret", code, fake.App.RedirectURL, api)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Team.ID != "T2" || !strings.HasPrefix(resp.AccessToken, "xoxe.xoxb-") || resp.RefreshToken == "" || resp.ExpiresIn != 3600 || resp.AuthedUser.ID != "U9" || resp.BotUserID == "" {
		t.Errorf("exchange: %+v", resp)
	}
	if _, err := slack.GetOAuthV2ResponseContext(ctx, http.DefaultClient, "111.222", "s3cret", code, fake.App.RedirectURL, api); err == nil || !strings.Contains(err.Error(), "invalid_code") {
		t.Errorf("a code used twice: %v", err)
	}
	client := slack.New(resp.AccessToken, slack.OptionAPIURL(srv.URL+"/api/"))
	if _, err := client.AuthTestContext(ctx); err != nil {
		t.Errorf("the new token: %v", err)
	}
	fake.ExpireToken(resp.AccessToken)
	if _, err := client.AuthTestContext(ctx); err == nil || !strings.Contains(err.Error(), "token_expired") {
		t.Errorf("an expired token: %v", err)
	}
	fresh, err := slack.RefreshOAuthV2TokenContext(ctx, http.DefaultClient, "111.222", "s3cret", resp.RefreshToken, api)
	if err != nil || fresh.AccessToken == resp.AccessToken || fake.Refreshes() != 1 {
		t.Fatalf("refresh: %+v, %v (%d refreshes)", fresh, err, fake.Refreshes())
	}
	if _, err := slack.New(fresh.AccessToken, slack.OptionAPIURL(srv.URL+"/api/")).AuthTestContext(ctx); err != nil {
		t.Errorf("the refreshed token: %v", err)
	}
	fake.RevokeTokens("T2")
	if _, err := slack.New(fresh.AccessToken, slack.OptionAPIURL(srv.URL+"/api/")).AuthTestContext(ctx); err == nil || !strings.Contains(err.Error(), "token_revoked") {
		t.Errorf("a revoked token: %v", err)
	}
	if _, err := slack.RefreshOAuthV2TokenContext(ctx, http.DefaultClient, "111.222", "s3cret", resp.RefreshToken, api); err == nil {
		t.Error("a revoked installation's refresh token still refreshes")
	}
}

func TestOAuthOrgInstall(t *testing.T) {
	fake := &Server{App: &App{ClientID: "1", ClientSecret: "2", RedirectURL: "https://bot.example/r"}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	back, err := fake.Authorize("https://slack.com/oauth/v2/authorize?client_id=1&scope=chat:write&state=x", Install{EnterpriseID: "E1", Enterprise: true, UserID: "U1"})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(back)
	resp, err := slack.GetOAuthV2ResponseContext(context.Background(), http.DefaultClient, "1", "2", u.Query().Get("code"), "", slack.OAuthOptionAPIURL(srv.URL+"/api/"))
	if err != nil {
		t.Fatal(err)
	}
	if !resp.IsEnterpriseInstall || resp.Enterprise.ID != "E1" || resp.Team.ID != "" || !strings.HasPrefix(resp.AccessToken, "xoxb-E1") || resp.RefreshToken != "" {
		t.Errorf("an org install: %+v", resp)
	}
}
