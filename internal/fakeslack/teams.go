package fakeslack

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Many workspaces, as Slack keeps them apart: each Team has its own
// channels, bot user and tokens (a fixed one, and those the OAuth flow
// issues for it or for its Enterprise Grid org). A token works only on
// the channels of the workspace it was issued for, or of every workspace
// of its org for an org-wide install: on another team's channel Slack
// answers channel_not_found, as it does for a channel the token cannot
// see. Channels never given to a Team, and tokens the fake knows no team
// of, are the default workspace's (TeamID), as before teams existed.
// Events carry their channel's team_id, the org's enterprise_id and the
// authorizations they were delivered for, as Events API payloads do.

// Team is a workspace the fake serves besides its default one.
type Team struct {
	ID, Name string
	// EnterpriseID is the Enterprise Grid org the workspace belongs to;
	// "" for a standalone workspace.
	EnterpriseID string
	// BotUserID is the bot's user in the workspace; by default "UB" and
	// the team id, or the org id for a workspace of an org (an org-wide
	// install has one bot user across the org).
	BotUserID string
	// Token is a fixed bot token of the workspace, as a single-workspace
	// install gives; "" for none (tokens then come from the OAuth flow).
	Token    string
	Channels []string
}

// teams is the fake's workspaces besides the default one.
type teams struct {
	byID     map[string]*Team
	channels map[string]string // channel -> team id
	tokens   map[string]string // fixed token -> team id
	orgWide  map[string]bool   // org ids installed org-wide by OAuth
	// revoked are the workspaces removed from their org's org-wide
	// install (RevokeTeamAccess): its token no longer serves them.
	revoked map[string]bool
}

func (s *Server) teamsLocked() *teams {
	if s.teams == nil {
		s.teams = &teams{byID: map[string]*Team{}, channels: map[string]string{}, tokens: map[string]string{}, orgWide: map[string]bool{}, revoked: map[string]bool{}}
	}
	return s.teams
}

// AddTeam adds a workspace with its channels and, when t.Token is set,
// its fixed bot token.
func (s *Server) AddTeam(t Team) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	ts := s.teamsLocked()
	if t.BotUserID == "" {
		t.BotUserID = "UB" + t.ID
		if t.EnterpriseID != "" {
			t.BotUserID = "UB" + t.EnterpriseID
		}
	}
	ts.byID[t.ID] = &t
	for _, c := range t.Channels {
		ts.channels[c] = t.ID
	}
	if t.Token != "" {
		ts.tokens[t.Token] = t.ID
	}
	if _, ok := s.users[t.BotUserID]; !ok {
		s.users[t.BotUserID] = "pinplan"
	}
}

// channelTeamLocked is the team a channel belongs to.
func (s *Server) channelTeamLocked(channel string) string {
	if s.teams != nil {
		if t, ok := s.teams.channels[channel]; ok {
			return t
		}
	}
	return s.TeamID
}

// enterpriseOfLocked is the org of team, "" for none.
func (s *Server) enterpriseOfLocked(team string) string {
	if s.teams != nil {
		if t, ok := s.teams.byID[team]; ok {
			return t.EnterpriseID
		}
	}
	return ""
}

// installOfLocked is the installation a token belongs to: a team id, an
// org id for an org-wide install, or the default team for a token the
// fake gave no team.
func (s *Server) installOfLocked(token string) string {
	if s.teams != nil {
		if t, ok := s.teams.tokens[token]; ok {
			return t
		}
	}
	if s.oauth != nil {
		if t, ok := s.oauth.tokens[token]; ok && t.team != "" {
			return t.team
		}
	}
	return s.TeamID
}

// botOfLocked is the bot user of an installation (team or org id).
func (s *Server) botOfLocked(id string) string {
	if s.teams != nil {
		if t, ok := s.teams.byID[id]; ok {
			return t.BotUserID
		}
		for _, t := range s.teams.byID {
			if t.EnterpriseID == id {
				return t.BotUserID
			}
		}
	}
	return s.BotUserID
}

// seesLocked reports whether token may act in channel: the channel is of
// the token's workspace, or of a workspace of its org-wide install.
func (s *Server) seesLocked(token, channel string) bool {
	id, team := s.installOfLocked(token), s.channelTeamLocked(channel)
	return id == team || s.orgServesLocked(id, team)
}

// orgServesLocked reports whether id is an org-wide install that serves
// team: a workspace of the org whose access was not revoked.
func (s *Server) orgServesLocked(id, team string) bool {
	return s.teams != nil && s.teams.orgWide[id] && s.enterpriseOfLocked(team) == id && !s.teams.revoked[team]
}

// revokedLocked reports whether token is an org-wide install's and
// channel is of a workspace removed from it: Slack answers
// team_access_not_granted there.
func (s *Server) revokedLocked(token, channel string) bool {
	id, team := s.installOfLocked(token), s.channelTeamLocked(channel)
	return s.teams != nil && s.teams.orgWide[id] && s.enterpriseOfLocked(team) == id && s.teams.revoked[team]
}

// eventEnvelopeLocked is an Events API event_callback for event: its
// channel's team_id, the org's enterprise_id, and the authorizations
// (the bot's installation) it was delivered for.
func (s *Server) eventEnvelopeLocked(eventID, team string, event map[string]any) map[string]any {
	ent := s.enterpriseOfLocked(team)
	if team == "" {
		team = s.TeamID
	}
	installed := team
	if ent != "" && s.orgServesLocked(ent, team) {
		installed = ent
	}
	auth := map[string]any{"enterprise_id": nilIfEmpty(ent), "team_id": team, "user_id": s.botOfLocked(installed),
		"is_bot": true, "is_enterprise_install": installed == ent && ent != ""}
	out := map[string]any{"token": "legacy", "team_id": team, "api_app_id": "A1", "type": "event_callback",
		"event_id": eventID, "event_time": time.Now().Unix(), "event": event, "authorizations": []any{auth},
		"is_ext_shared_channel": false, "event_context": "4-" + eventID}
	if ent != "" {
		out["enterprise_id"] = ent
	}
	return out
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Uninstall is a person removing the app from a workspace (a team id) or
// from an org (an org id, for an org-wide install): every token of the
// installation is revoked (token_revoked from then on), and Slack sends
// tokens_revoked (the bot's user) and then app_uninstalled, as events of
// that workspace. They go to Socket Mode like any event (Push); the
// bodies are returned for a test that posts them to an HTTP Request URL
// (each signed as CallbackBody's are).
func (s *Server) Uninstall(id string) [][]byte {
	s.RevokeTokens(id)
	s.mu.Lock()
	s.initLocked()
	s.seq++
	n := s.seq
	team := id
	revoked := map[string]any{"type": "tokens_revoked", "tokens": map[string]any{"oauth": []string{}, "bot": []string{s.botOfLocked(id)}},
		"event_ts": s.tsLocked()}
	gone := map[string]any{"type": "app_uninstalled", "event_ts": s.tsLocked()}
	var bodies [][]byte
	for i, ev := range []map[string]any{revoked, gone} {
		eventID := fmt.Sprintf("EvUninstall%d-%d", n, i)
		env := s.eventEnvelopeLocked(eventID, team, ev)
		org := s.teamsLocked().orgWide[id]
		if org {
			env["enterprise_id"] = id // an org's uninstall names the org
		}
		// Delivered for the installation removed: a workspace's own, even
		// where its org's org-wide install serves it too.
		env["authorizations"] = []any{map[string]any{"enterprise_id": env["enterprise_id"], "team_id": team, "user_id": s.botOfLocked(id),
			"is_bot": true, "is_enterprise_install": org}}
		b, _ := json.Marshal(env)
		bodies = append(bodies, b)
		s.seq++
		e := &envelope{id: fmt.Sprintf("env-%d", s.seq), eventID: eventID, payload: b}
		s.pending = append(s.pending, e)
	}
	s.flushLocked()
	s.mu.Unlock()
	return bodies
}

// RevokeTeamAccess is an org admin removing the org-wide install org
// from some of the org's workspaces: its token no longer serves them,
// and Slack sends team_access_revoked naming them, an event of the org
// (Push); its body is returned for a test that posts it to an HTTP
// Request URL.
func (s *Server) RevokeTeamAccess(org string, teams ...string) [][]byte {
	return s.teamAccess("team_access_revoked", org, teams)
}

// GrantTeamAccess is an org admin adding the org-wide install org to
// some of the org's workspaces again: its token serves them, and Slack
// sends team_access_granted naming them.
func (s *Server) GrantTeamAccess(org string, teams ...string) [][]byte {
	return s.teamAccess("team_access_granted", org, teams)
}

// teamAccess changes which of org's workspaces its org-wide install
// serves and sends the event (kind) that says so.
func (s *Server) teamAccess(kind, org string, teams []string) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	ts := s.teamsLocked()
	for _, t := range teams {
		if kind == "team_access_revoked" {
			ts.revoked[t] = true
		} else {
			delete(ts.revoked, t)
		}
	}
	s.seq++
	eventID := fmt.Sprintf("EvAccess%d", s.seq)
	ev := map[string]any{"type": kind, "team_ids": teams, "event_ts": s.tsLocked()}
	env := s.eventEnvelopeLocked(eventID, teams[0], ev)
	env["enterprise_id"] = org
	b, _ := json.Marshal(env)
	s.seq++
	s.pending = append(s.pending, &envelope{id: fmt.Sprintf("env-%d", s.seq), eventID: eventID, payload: b})
	s.flushLocked()
	return [][]byte{b}
}

// authTestLocked answers auth.test for the caller's token: its bot user
// and workspace, or for an org-wide install the org.
func (s *Server) authTestLocked() map[string]any {
	id := s.callerInstall
	out := map[string]any{"user_id": s.caller, "team_id": id, "user": "pinplan", "bot_id": "B1"}
	if s.teams != nil && s.teams.orgWide[id] {
		out["team_id"], out["enterprise_id"], out["is_enterprise_install"] = "", id, true
	} else if ent := s.enterpriseOfLocked(id); ent != "" {
		out["enterprise_id"] = ent
	}
	return out
}

// orgWideLocked reports whether team's org installed the app org-wide.
func (s *Server) orgWideLocked(team string) bool {
	ent := s.enterpriseOfLocked(team)
	return ent != "" && s.orgServesLocked(ent, team)
}

// enterpriseJSON is an interaction payload's enterprise: null outside an
// org.
func enterpriseJSON(id string) any {
	if id == "" {
		return nil
	}
	return map[string]any{"id": id, "name": "Org " + id}
}

// teamInfoLocked answers team.info for the caller: its own workspace
// (team "" or its id), or with an org-wide install's token any
// workspace of the org; another is team_not_found.
func (s *Server) teamInfoLocked(team string) (map[string]any, string) {
	id := s.callerInstall
	if team == "" {
		team = id
	}
	if team != id && !s.orgServesLocked(id, team) {
		return nil, "team_not_found"
	}
	info := map[string]any{"id": team, "name": "Team " + team, "domain": strings.ToLower(team)}
	if ent := s.enterpriseOfLocked(team); ent != "" {
		info["enterprise_id"] = ent
	}
	return map[string]any{"team": info}, ""
}
