package slack

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/slack-go/slack/slackevents"

	"github.com/pinplan/pinplan/adapters/slack/install"
)

// Installs and uninstalls (DESIGN §14): app_uninstalled, and
// tokens_revoked naming the bot's token, delete the workspace's
// installation (or its org's, for an org-wide install), unless it was
// installed after the event was sent (installed again meanwhile); the
// workspace's replies being streamed are dropped with a log line, its
// later calls fail at once with ErrUninstalled (which chat drops as
// undeliverable), and Options.Uninstalled is told, to stop its
// sessions. team_access_revoked (an org admin removed the org-wide
// install from some of the org's workspaces) does the same for those
// workspaces, the org's installation kept for the others, until
// team_access_granted gives them back. An event the
// workspace sends after that means pinplan was installed again: its
// workspace starts fresh, as it does when Installed is told, or when
// its calls find a new installation in the store (recheckGone).

// routeInstall handles app_uninstalled, tokens_revoked,
// team_access_revoked and team_access_granted, on a queue of their own for the workspace (or
// org), acknowledged once handled (or after ackWithin); it reports
// whether api was one.
func (a *Adapter) routeInstall(ctx context.Context, api slackevents.EventsAPIEvent, ack func()) bool {
	var access []string
	switch ev := api.InnerEvent.Data.(type) {
	case *slackevents.AppUninstalledEvent:
	case *slackevents.TokensRevokedEvent:
		if len(ev.Tokens.Bot) == 0 {
			ack()
			return true // users' tokens only: the bot's still works
		}
	case *slackevents.TeamAccessRevokedEvent:
		access = ev.TeamIDs
	case *slackevents.TeamAccessGrantedEvent:
		access = ev.TeamIDs
	default:
		return false
	}
	var sent time.Time
	org := api.EnterpriseID
	orgWide := api.TeamID == "" || api.TeamID == org
	if cb, ok := api.Data.(*slackevents.EventsAPICallbackEvent); ok {
		sent = time.Unix(int64(cb.EventTime), 0)
		if len(cb.Authorizations) > 0 {
			// The installation the event was delivered for: an org-wide
			// one, or the workspace's own (which a workspace of an org
			// may have beside its org's). Slack's examples of
			// team_access_* name the org there only.
			auth := cb.Authorizations[0]
			orgWide, org = auth.IsEnterpriseInstall, cmp.Or(org, auth.EnterpriseID)
		}
	}
	team := cmp.Or(api.TeamID, a.team())
	late := time.AfterFunc(ackWithin, ack)
	a.queue.Add("install/"+cmp.Or(org, team), func() {
		switch api.InnerEvent.Type {
		case "team_access_revoked":
			a.revokeTeams(ctx, org, access)
		case "team_access_granted":
			a.grantTeams(ctx, org, access)
		default:
			a.uninstall(ctx, team, org, orgWide, api.InnerEvent.Type, sent)
		}
		late.Stop()
		ack()
	})
	return true
}

// uninstall deletes the installation the event was about (the org-wide
// install of enterprise, or team's own), unless it was made after the
// event was sent, and closes its workspaces.
func (a *Adapter) uninstall(ctx context.Context, team, enterprise string, orgWide bool, why string, sent time.Time) {
	if a.one != nil {
		a.log.Warn("slack app uninstalled or its bot token revoked; SLACK_BOT_TOKEN will be refused from now on", "team", team, "event", why)
		return
	}
	w := a.space(team)
	already := w.tokens.toldGone() // by the other of the two events
	id := team
	if orgWide && enterprise != "" {
		id = enterprise
	}
	deleted, ok := a.deleteInstallation(ctx, id, team, sent)
	if !ok {
		return
	}
	teams := a.closeSpaces(id, team)
	dropped := a.dropSends(teams)
	if already && !deleted {
		return // told already
	}
	a.log.Warn("slack app uninstalled; installation deleted and the workspace's pending sends dropped",
		"installation", id, "teams", teams, "event", why, "dropped", dropped)
	if a.opts.Uninstalled != nil {
		a.opts.Uninstalled(id, teams)
	}
}

// deleteInstallation deletes installation id (the one an uninstall of
// team's was about) as the store has it, if it was installed before
// the uninstall event was sent: Slack sends event_time in seconds, so
// one installed within the second after it is deleted too (no reinstall
// takes so little). It reports whether it was deleted, and ok false for
// an installation made after the event (a reinstall the event is not
// about: kept, and the workspace served).
func (a *Adapter) deleteInstallation(ctx context.Context, id, team string, sent time.Time) (deleted, ok bool) {
	got, err := a.opts.Installations.Get(ctx, id)
	switch {
	case errors.Is(err, install.ErrNotInstalled):
		return false, true // deleted already, here or on another replica
	case err != nil:
		a.log.Error("slack uninstall: look the installation up", "installation", id, "err", err)
	}
	before := a.opts.Now().Add(time.Hour) // an event without its time: any installation
	if !sent.IsZero() {
		before = sent.Add(time.Second)
	}
	deleted, err = a.opts.Installations.DeleteBefore(ctx, id, before)
	switch {
	case err != nil:
		a.log.Error("slack uninstall: delete the installation", "installation", id, "err", err)
	case !deleted && got.ID == id && got.InstalledAt.After(before):
		a.log.Info("slack uninstall sent before the installation was made; kept", "installation", id, "team", team, "sent", sent)
		return false, false
	}
	return deleted, true
}

// revokeTeams handles team_access_revoked: the org-wide install org no
// longer serves teams, which is recorded with it (install.RevokeTeams)
// for every replica; those of teams it served here are closed, their
// pending sends dropped, and Uninstalled is told of them. A team with
// an installation of its own goes on with it.
func (a *Adapter) revokeTeams(ctx context.Context, org string, teams []string) {
	if a.one != nil || org == "" || len(teams) == 0 {
		return
	}
	if err := a.opts.Installations.RevokeTeams(ctx, org, teams); err != nil && !errors.Is(err, install.ErrNotInstalled) {
		a.log.Error("slack team access revoked: record it", "installation", org, "err", err)
	}
	now := a.opts.Now()
	var closed []string
	for _, team := range teams {
		w := a.space(team)
		if own, err := a.opts.Installations.Get(ctx, team); err == nil && own.Serves(team) {
			w.tokens.drop(w.tokens.orgToken(org)) // its own installation serves it
			continue
		}
		w.tokens.absent(now)
		closed = append(closed, team)
	}
	slices.Sort(closed)
	dropped := a.dropSends(closed)
	a.log.Warn("slack org install removed from workspaces; their pending sends dropped",
		"installation", org, "teams", closed, "event", "team_access_revoked", "dropped", dropped)
	if a.opts.Uninstalled != nil && len(closed) > 0 {
		a.opts.Uninstalled(org, closed)
	}
}

// grantTeams handles team_access_granted: the org-wide install org
// serves teams again, which is recorded with it for every replica (the
// others serve them once they read the store again, recheckGone); here
// their workspaces start fresh.
func (a *Adapter) grantTeams(ctx context.Context, org string, teams []string) {
	if a.one != nil || org == "" || len(teams) == 0 {
		return
	}
	if err := a.opts.Installations.GrantTeams(ctx, org, teams); err != nil {
		a.log.Error("slack team access granted: record it", "installation", org, "err", err)
		return
	}
	for _, team := range teams {
		w := a.space(team)
		w.learn(org, "")
		w.reset()
	}
	a.log.Info("slack org install added to workspaces", "installation", org, "teams", teams)
}

// closeSpaces marks uninstalled every workspace the installation id
// served (team, and for an org-wide install the org's other workspaces
// served here), and returns their teams.
func (a *Adapter) closeSpaces(id, team string) []string {
	now := a.opts.Now()
	a.mu.Lock()
	var served []*workspace
	for t, w := range a.spaces {
		if t == team || t == id || w.org() == id {
			served = append(served, w)
		}
	}
	a.mu.Unlock()
	teams, org := []string{}, false
	for _, w := range served {
		w.tokens.uninstall(now)
		teams = append(teams, w.team)
		org = org || w.org() == id
	}
	if org { // id is the org's, not a workspace's
		teams = slices.DeleteFunc(teams, func(t string) bool { return t == id })
	}
	slices.Sort(teams)
	return teams
}

// dropSends drops what the adapter holds to send in teams' threads: the
// progress of their live replies (a next call for one fails with
// ErrUninstalled, and chat drops it). It returns how many.
func (a *Adapter) dropSends(teams []string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for id, l := range a.lives {
		if slices.Contains(teams, teamOf(l.key)) {
			delete(a.lives, id)
			n++
		}
	}
	return n
}

// Installed tells the adapter of a new installation (install.Flow's
// Installed): the workspaces it serves start fresh, with its token, bot
// user and scopes, even where an earlier installation was uninstalled.
// Their budgets and Retry-Afters go on: Slack counts them per workspace,
// whatever the installation.
func (a *Adapter) Installed(in install.Installation) {
	if a.opts.Installations == nil {
		return
	}
	a.mu.Lock()
	var served []*workspace
	for t, w := range a.spaces {
		if t == in.ID || (in.Enterprise && w.org() == in.ID) {
			served = append(served, w)
		}
	}
	a.mu.Unlock()
	for _, w := range served {
		w.reset()
	}
}

// botOf is the bot user of team's workspace, for an event of it: the
// installation's, or the one the event says it was delivered for
// (authorizations). ok is false for a workspace pinplan is not installed
// in: its events are dropped. An event sent after the workspace was
// uninstalled means pinplan was installed again: the workspace starts
// fresh.
func (a *Adapter) botOf(ctx context.Context, team, enterprise string, cb *slackevents.EventsAPICallbackEvent) (string, bool) {
	w := a.space(team)
	if a.one != nil {
		return w.bot(), true
	}
	if w.tokens.uninstalledBefore(time.Unix(int64(cb.EventTime), 0)) {
		w.reset()
	}
	var bot string
	for _, au := range cb.Authorizations {
		if au.IsBot {
			bot = au.UserID
			break
		}
	}
	w.learn(enterprise, bot)
	if b := w.bot(); b != "" {
		return b, true
	}
	if _, err := w.tokens.token(ctx); err != nil {
		a.log.Warn("slack event of a workspace not served; dropped", "team", team, "err", err)
		return "", false
	}
	return w.bot(), true
}
