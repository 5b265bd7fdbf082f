package fakeslack

import (
	"encoding/json"
	"net/url"
	"testing"
)

// TestTeamsKeepTheirChannels: a token works on its own workspace's
// channels (and an org-wide install's on every workspace of the org);
// on another workspace's channel Slack answers channel_not_found.
func TestTeamsKeepTheirChannels(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	s.AddTeam(Team{ID: "T2", Token: "xoxb-two", Channels: []string{"C2"}})
	s.AddTeam(Team{ID: "T5", EnterpriseID: "E1", Token: "xoxb-five", Channels: []string{"C5"}})
	s.AddTeam(Team{ID: "T6", EnterpriseID: "E1", Channels: []string{"C6"}})
	tests := []struct {
		name, token, channel, want string
	}{
		{"default token, default channel", "xoxb-test", "C1", ""},
		{"team token, its channel", "xoxb-two", "C2", ""},
		{"team token, the default team's channel", "xoxb-two", "C1", "channel_not_found"},
		{"default token, another team's channel", "xoxb-test", "C2", "channel_not_found"},
		{"a workspace's token, another workspace of its org", "xoxb-five", "C6", "channel_not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _ := call(t, base, tt.token, "chat.postMessage", map[string]string{"channel": tt.channel, "text": "hi"})
			if got, _ := out["error"].(string); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	out, _ := call(t, base, "xoxb-two", "auth.test", nil)
	if out["team_id"] != "T2" || out["user_id"] != "UBT2" {
		t.Errorf("auth.test of a team's token: %v", out)
	}
}

// TestTeamEvents: an event names its channel's workspace, the org and
// the installation it was delivered for.
func TestTeamEvents(t *testing.T) {
	s := &Server{}
	s.AddTeam(Team{ID: "T5", EnterpriseID: "E1", Channels: []string{"C5"}})
	var env struct {
		TeamID         string `json:"team_id"`
		EnterpriseID   string `json:"enterprise_id"`
		Authorizations []struct {
			TeamID       string `json:"team_id"`
			EnterpriseID string `json:"enterprise_id"`
			UserID       string `json:"user_id"`
		} `json:"authorizations"`
	}
	body := s.CallbackBody("Ev1", map[string]any{"type": "app_mention", "user": "U1", "text": "<@UBE1> hi", "ts": "1.000001", "channel": "C5"})
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatal(err)
	}
	if env.TeamID != "T5" || env.EnterpriseID != "E1" || len(env.Authorizations) != 1 || env.Authorizations[0].UserID != "UBE1" {
		t.Errorf("got %s", body)
	}
	body = s.CallbackBody("Ev2", mention("1.000002"))
	env.EnterpriseID = ""
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatal(err)
	}
	if env.TeamID != "T1" || env.EnterpriseID != "" {
		t.Errorf("a default team's event: %s", body)
	}
}

// TestUninstall: the installation's tokens answer token_revoked, and
// tokens_revoked and app_uninstalled go out as events.
func TestUninstall(t *testing.T) {
	s := &Server{App: &App{ClientID: "1", ClientSecret: "2", RedirectURL: "https://bot.example/r"}}
	base := serve(t, s)
	s.AddTeam(Team{ID: "T2", Channels: []string{"C2"}})
	back, err := s.Authorize("https://slack.com/oauth/v2/authorize?client_id=1&scope=chat:write&state=x", Install{TeamID: "T2"})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(back)
	out, _ := call(t, base, "", "oauth.v2.access", map[string]string{"client_id": "1", "client_secret": "2", "code": u.Query().Get("code")})
	token, _ := out["access_token"].(string)
	if out, _ := call(t, base, token, "chat.postMessage", map[string]string{"channel": "C2", "text": "hi"}); out["ok"] != true {
		t.Fatalf("before: %v", out)
	}
	c := open(t, base)
	c.next() // hello
	bodies := s.Uninstall("T2")
	if len(bodies) != 2 {
		t.Fatalf("got %d bodies, want 2", len(bodies))
	}
	var types []string
	for range 2 {
		env := c.next()
		p, _ := env["payload"].(map[string]any)
		ev, _ := p["event"].(map[string]any)
		types = append(types, ev["type"].(string))
		if p["team_id"] != "T2" {
			t.Errorf("event of team %v, want T2", p["team_id"])
		}
		c.ack(env["envelope_id"])
	}
	if types[0] != "tokens_revoked" || types[1] != "app_uninstalled" {
		t.Errorf("got %v", types)
	}
	if out, _ := call(t, base, token, "chat.postMessage", map[string]string{"channel": "C2", "text": "hi"}); out["error"] != "token_revoked" {
		t.Errorf("after: %v", out)
	}
}

// TestTeamAccessRevoked: a workspace removed from an org-wide install
// is no longer served by the org's token (team_access_not_granted on
// its channels, team_not_found from team.info), while the org's other
// workspaces are; team_access_revoked goes out naming it.
func TestTeamAccessRevoked(t *testing.T) {
	s := &Server{App: &App{ClientID: "1", ClientSecret: "2", RedirectURL: "https://bot.example/r"}}
	base := serve(t, s)
	s.AddTeam(Team{ID: "T5", EnterpriseID: "E1", Channels: []string{"C5"}})
	s.AddTeam(Team{ID: "T6", EnterpriseID: "E1", Channels: []string{"C6"}})
	back, err := s.Authorize("https://slack.com/oauth/v2/authorize?client_id=1&scope=chat:write&state=x", Install{EnterpriseID: "E1", Enterprise: true})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(back)
	out, _ := call(t, base, "", "oauth.v2.access", map[string]string{"client_id": "1", "client_secret": "2", "code": u.Query().Get("code")})
	token, _ := out["access_token"].(string)
	bodies := s.RevokeTeamAccess("E1", "T5")
	if len(bodies) != 1 {
		t.Fatalf("got %d bodies, want 1", len(bodies))
	}
	var env struct {
		EnterpriseID string `json:"enterprise_id"`
		Event        struct {
			Type    string   `json:"type"`
			TeamIDs []string `json:"team_ids"`
		} `json:"event"`
	}
	if err := json.Unmarshal(bodies[0], &env); err != nil || env.EnterpriseID != "E1" || env.Event.Type != "team_access_revoked" ||
		len(env.Event.TeamIDs) != 1 || env.Event.TeamIDs[0] != "T5" {
		t.Errorf("event %s, %v", bodies[0], err)
	}
	tests := []struct {
		name, method string
		params       map[string]string
		want         string
	}{
		{"the revoked workspace's channel", "chat.postMessage", map[string]string{"channel": "C5", "text": "hi"}, "team_access_not_granted"},
		{"another workspace of the org", "chat.postMessage", map[string]string{"channel": "C6", "text": "hi"}, ""},
		{"team.info of the revoked workspace", "team.info", map[string]string{"team": "T5"}, "team_not_found"},
		{"team.info of another workspace", "team.info", map[string]string{"team": "T6"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _ := call(t, base, token, tt.method, tt.params)
			if got, _ := out["error"].(string); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	s.GrantTeamAccess("E1", "T5")
	if out, _ := call(t, base, token, "chat.postMessage", map[string]string{"channel": "C5", "text": "hi"}); out["ok"] != true {
		t.Errorf("after team_access_granted: %v", out)
	}
}
