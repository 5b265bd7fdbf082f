package slack

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/pinplan/pinplan/adapters/slack/install"
	"github.com/pinplan/pinplan/chat"
)

// Many workspaces (DESIGN §14): with Options.Installations one adapter
// serves every workspace pinplan is installed in, each through a
// workspace of its own: its Web API client with its own bot token, its
// budgets (its append pace among them), its Retry-After holds, as Slack counts
// them per workspace, so a burst in one never slows another. Every call
// picks the workspace of its thread's team (on), the team its session
// key names; events name theirs (team_id, enterprise_id). Without
// Installations there is one workspace, SLACK_BOT_TOKEN's.

// ErrUninstalled is the error of a call for a workspace pinplan is not
// (or no longer) installed in: app_uninstalled, tokens_revoked, or no
// installation serves its team. It is permanent: chat drops the send
// (chat.ErrUndeliverable).
var ErrUninstalled = fmt.Errorf("slack: pinplan is not installed in this workspace: %w", chat.ErrUndeliverable)

// workspace is the adapter in one Slack workspace.
type workspace struct {
	team    string         // "" for SLACK_BOT_TOKEN's until auth.test names it
	api     *slack.Client  // its calls go with its own token
	budgets *budgets       // posts, edits and pins (pace.go)
	held    *heldTransport // its Retry-After holds (retryafter.go)
	// tokens resolves the bot token from the installations; nil for
	// SLACK_BOT_TOKEN's workspace, whose token slack-go sends itself.
	tokens *tokenSource

	mu         sync.Mutex // guards the fields below
	enterprise string     // its Enterprise Grid org, as events name it
	botUserID  string
	// noSessions: the token or app may not use agent sessions
	// (sessionsDenied), so the workspace falls back to the reaction.
	noSessions bool
	// noStreams: the token or app may not stream (streamsDenied), so
	// replies are posted whole.
	noStreams bool
}

// bot is the workspace's bot user id, "" while unknown.
func (w *workspace) bot() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.botUserID
}

// learn records what an event says of the workspace: its org, and the
// bot user it was delivered for (authorizations), where not known yet.
func (w *workspace) learn(enterprise, bot string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if enterprise != "" {
		w.enterprise = enterprise
	}
	if w.botUserID == "" {
		w.botUserID = bot
	}
}

// org is the workspace's Enterprise Grid org, "" if none is known.
func (w *workspace) org() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.enterprise
}

// reset makes the workspace start fresh (installed again): its
// installation is read again, its bot user and fallbacks forgotten.
func (w *workspace) reset() {
	w.mu.Lock()
	w.botUserID, w.noSessions, w.noStreams = "", false, false
	w.mu.Unlock()
	if w.tokens != nil {
		w.tokens.reset()
	}
}

// flag reads one of the workspace's fallbacks (noSessions, noStreams).
func (w *workspace) flag(f *bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return *f
}

// turnOff sets a fallback for the workspace, reporting whether it was
// off until now (the caller logs it once).
func (w *workspace) turnOff(f *bool) (first bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	first = !*f
	*f = true
	return first
}

// newWorkspace builds a workspace of team: with tokens, its calls go
// with the installation's token (a tokenTransport); without, with
// token, SLACK_BOT_TOKEN.
func (a *Adapter) newWorkspace(team, token string, tokens *tokenSource) *workspace {
	client, held := holdRetryAfter(a.opts.HTTPClient, a.opts.Now)
	opts := []slack.Option{slack.OptionAPIURL(a.opts.APIURL), slack.OptionHTTPClient(client)}
	if tokens != nil {
		c := *client
		c.Transport = &tokenTransport{base: client.Transport, tokens: tokens}
		opts[1] = slack.OptionHTTPClient(&c)
	} else {
		opts = append(opts, slack.OptionAppLevelToken(a.opts.AppToken))
	}
	return &workspace{team: team, api: slack.New(token, opts...), held: held, tokens: tokens,
		budgets: newBudgets(a.opts.EditsPerMinute, a.opts.AppendsPerMinute)}
}

// adopt gives a workspace of many the replicas' share of its budgets
// (Share) and whom its Retry-Afters are told to (OnRetryAfter), its
// keys prefixed with its team.
func (w *workspace) adopt(n int, say func(key string, until time.Time)) {
	if n > 1 {
		w.budgets.setShare(n)
	}
	if say != nil {
		w.held.sayHolds(func(key string, until time.Time) { say(w.team+":"+key, until) })
	}
}

// on is the workspace of a thread: the team its session key names.
func (a *Adapter) on(th chat.Thread) *workspace { return a.space(teamOf(th.Key)) }

// space is the workspace of team: SLACK_BOT_TOKEN's in the one-workspace
// mode, else the team's own, made on first use (no I/O: its token is
// read from the installations at its first call).
func (a *Adapter) space(team string) *workspace {
	if a.opts.Installations == nil {
		return a.one
	}
	a.mu.Lock()
	w, ok := a.spaces[team]
	a.mu.Unlock()
	if ok {
		return w
	}
	fresh := a.newWorkspace(team, "", &tokenSource{a: a, team: team})
	a.mu.Lock()
	if w, ok := a.spaces[team]; ok {
		a.mu.Unlock()
		return w // made meanwhile
	}
	if len(a.spaces) >= maxSpaces {
		a.dropIdleLocked()
	}
	a.spaces[team] = fresh
	// Read with the insertion: a Share or OnRetryAfter after it sees
	// fresh among the spaces, one before it is read here.
	n, say := a.share, a.say
	a.mu.Unlock()
	fresh.adopt(n, say)
	return fresh
}

// maxSpaces bounds the workspaces kept in memory; past it, those no
// session uses now are dropped (made again, from the store, when used).
const maxSpaces = 10000

// dropIdleLocked drops the workspaces whose budgets nobody waits on.
func (a *Adapter) dropIdleLocked() {
	for team, w := range a.spaces {
		if w.budgets.idle() {
			delete(a.spaces, team)
		}
	}
}

// teamOf is the team a session key names ("slack/<team>/<channel>/<ts>").
func teamOf(key string) string {
	rest, ok := strings.CutPrefix(key, "slack/")
	if !ok {
		return ""
	}
	team, _, _ := strings.Cut(rest, "/")
	return team
}

// team is the workspace an event or payload without a team_id is of:
// SLACK_BOT_TOKEN's.
func (a *Adapter) team() string {
	if a.one == nil {
		return ""
	}
	a.one.mu.Lock()
	defer a.one.mu.Unlock()
	return a.one.team
}

// tokenSource is a workspace's bot token, from its installation: its
// own, or its org's org-wide one.
type tokenSource struct {
	a    *Adapter
	team string

	mu    sync.Mutex // guards the fields below
	in    install.Installation
	found bool      // in is the installation that serves the team
	gone  time.Time // when it was uninstalled or found not installed; zero while served
	// told: gone was told by an uninstall event; else the store had no
	// installation serving the team (absent).
	told bool
	// checked is when the store was last read for a reinstall of an
	// uninstalled workspace (reinstalled).
	checked time.Time
	// warned is until when a failed refresh was logged (stale).
	warned time.Time
}

// recheckGone is how often an uninstalled workspace's calls read the
// store for a reinstall made through another replica; between two
// reads they fail at once.
const recheckGone = 30 * time.Second

// token returns a bot token good for a while yet: the one in hand, or
// refreshed before it expires (Installations.Token, once across
// replicas); while the refresh fails, the token in hand serves until it
// expires, and the refresh is tried again after install.RefreshBackoff.
// An uninstalled workspace fails at once with ErrUninstalled, unless it
// was installed again (reinstalled).
func (s *tokenSource) token(ctx context.Context) (string, error) {
	s.mu.Lock()
	in, found, gone := s.in, s.found, s.gone
	s.mu.Unlock()
	switch {
	case !gone.IsZero() && !s.reinstalled(ctx):
		return "", fmt.Errorf("slack: workspace %s: %w", s.team, ErrUninstalled)
	case !gone.IsZero():
		found = false // installed again: read it below
	case found && good(in, s.a.opts.Now()):
		return in.BotToken, nil
	}
	in, err := s.load(ctx, in, found)
	if err != nil {
		return "", err
	}
	return in.BotToken, nil
}

// good reports whether in's token serves a call at now without asking
// the store: it does not expire, or not within install.RefreshEarly, or
// a failed refresh is held off (RetryRefresh) while it is still good.
func good(in install.Installation, now time.Time) bool {
	return in.Expires.IsZero() || now.Add(install.RefreshEarly).Before(in.Expires) ||
		(now.Before(in.RetryRefresh) && now.Before(in.Expires))
}

// load reads the installation that serves the team (found: the one in
// hand names it) and refreshes its token if it is near its end.
func (s *tokenSource) load(ctx context.Context, in install.Installation, found bool) (install.Installation, error) {
	x := s.a.opts.Installations
	if !found {
		var err error
		if in, err = s.find(ctx); err != nil {
			if errors.Is(err, ErrUninstalled) {
				s.absent(s.a.opts.Now())
			}
			return in, err
		}
	}
	got, err := x.Token(ctx, in.ID, s.a.opts.Refresh)
	if errors.Is(err, install.ErrNotInstalled) {
		s.absent(s.a.opts.Now())
		return got, fmt.Errorf("slack: workspace %s: %w", s.team, ErrUninstalled)
	}
	if err != nil {
		if got.BotToken == "" {
			got = in // the store did not answer: the installation in hand
		}
		if !s.stale(got, err) {
			return got, fmt.Errorf("slack: workspace %s: the bot token: %w", s.team, err)
		}
	}
	s.mu.Lock()
	s.in, s.found = got, true
	s.mu.Unlock()
	w := s.a.space(s.team)
	w.learn(got.EnterpriseID, got.BotUserID)
	return got, nil
}

// stale reports whether in's token, which was to be refreshed but
// could not be (err), is still good for a call; if so it logs the
// failure, once per refresh backoff.
func (s *tokenSource) stale(in install.Installation, err error) bool {
	now := s.a.opts.Now()
	if in.BotToken == "" || !now.Before(in.Expires) {
		return false
	}
	s.mu.Lock()
	first := !now.Before(s.warned)
	if first {
		s.warned = now.Add(install.RefreshBackoff)
		if in.RetryRefresh.After(s.warned) {
			s.warned = in.RetryRefresh
		}
	}
	s.mu.Unlock()
	if first {
		s.a.log.Warn("slack bot token not refreshed; the token in hand serves until it expires",
			"team", s.team, "installation", in.ID, "expires", in.Expires, "retry", in.RetryRefresh, "err", err)
	}
	return true
}

// find looks the team's installation up: its own, else its org's (by
// the org events named), else, for a team no event named yet (a session
// resumed after a restart), the org-wide install whose token sees the
// team (team.info).
func (s *tokenSource) find(ctx context.Context) (install.Installation, error) {
	w := s.a.space(s.team)
	enterprise := w.org()
	x := s.a.opts.Installations
	in, err := x.Find(ctx, s.team, enterprise)
	if err == nil || !errors.Is(err, install.ErrNotInstalled) {
		return in, err
	}
	if enterprise == "" {
		all, err := x.List(ctx)
		if err != nil {
			return in, err
		}
		for _, o := range all {
			if !o.Enterprise || !o.Serves(s.team) {
				continue
			}
			switch ok, err := s.inOrg(ctx, o); {
			case err != nil:
				return in, err // not known: tried again at the next call
			case ok:
				w.learn(o.EnterpriseID, "")
				return o, nil
			}
		}
	}
	return in, fmt.Errorf("slack: workspace %s: %w", s.team, ErrUninstalled)
}

// inOrg reports whether the org-wide install org serves the team: its
// token sees the team (team.info answers). Slack's refusal says it does
// not; an error is a failure to ask (a rate limit, the network), which
// says nothing of it.
func (s *tokenSource) inOrg(ctx context.Context, org install.Installation) (bool, error) {
	api := slack.New(org.BotToken, slack.OptionAPIURL(s.a.opts.APIURL), slack.OptionHTTPClient(s.a.opts.HTTPClient))
	_, err := api.GetOtherTeamInfoContext(ctx, s.team)
	var refused slack.SlackErrorResponse
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &refused):
		s.a.log.Debug("slack team.info with an org's token", "team", s.team, "org", org.ID, "err", err)
		return false, nil
	}
	return false, fmt.Errorf("slack: workspace %s: ask whether the org-wide install %s serves it: %w", s.team, org.ID, err)
}

// renew answers a call that met token_expired: unless the installation
// holds another token already (refreshed meanwhile, here or on another
// replica), stale is marked expired so that it is refreshed now, once
// across replicas; the token to retry with is returned.
func (s *tokenSource) renew(ctx context.Context, stale string) (string, error) {
	s.mu.Lock()
	in, found := s.in, s.found
	s.mu.Unlock()
	if !found {
		return s.token(ctx)
	}
	if err := s.a.opts.Installations.Expired(ctx, in.ID, stale); err != nil {
		return "", fmt.Errorf("slack: workspace %s: %w", s.team, err)
	}
	in, err := s.load(ctx, in, true)
	if err != nil {
		return "", err
	}
	return in.BotToken, nil
}

// drop forgets the installation in hand if its token is still token
// (Slack refused it): the next call reads the installation again.
func (s *tokenSource) drop(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token != "" && s.in.BotToken == token {
		s.in, s.found = install.Installation{}, false
	}
}

// orgToken is the bot token in hand if it is org's org-wide install's,
// "" otherwise.
func (s *tokenSource) orgToken(org string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.found && s.in.ID == org {
		return s.in.BotToken
	}
	return ""
}

// reinstalled reports whether an uninstalled workspace was installed
// again (an installation that serves it, made after an uninstall event,
// or any one where the store had none), reading the store at most every
// recheckGone; the workspace then serves again.
func (s *tokenSource) reinstalled(ctx context.Context) bool {
	now := s.a.opts.Now()
	s.mu.Lock()
	if now.Sub(s.checked) < recheckGone {
		s.mu.Unlock()
		return false
	}
	s.checked = now
	gone, told := s.gone, s.told
	s.mu.Unlock()
	w := s.a.space(s.team)
	in, err := s.a.opts.Installations.Find(ctx, s.team, w.org())
	if err != nil || (told && !in.InstalledAt.IsZero() && !in.InstalledAt.After(gone)) {
		return false
	}
	w.reset()
	return true
}

// reset forgets the installation in hand and any uninstall.
func (s *tokenSource) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.in, s.found, s.gone, s.checked, s.told = install.Installation{}, false, time.Time{}, time.Time{}, false
}

// uninstall marks the workspace uninstalled (an event told it): its
// calls fail at once.
func (s *tokenSource) uninstall(at time.Time) (install.Installation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gone, s.checked, s.told = at, at, true
	return s.in, s.found
}

// absent marks the workspace not installed, as the store said (an
// uninstall another replica handled, an org install removed from it):
// its calls fail at once, and any installation found for it later
// serves it (reinstalled).
func (s *tokenSource) absent(at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.in, s.found = install.Installation{}, false
	s.gone, s.checked, s.told = at, at, false
}

// uninstalledBefore reports whether the workspace was uninstalled before
// t (an event sent after it means pinplan was installed again).
func (s *tokenSource) uninstalledBefore(t time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.gone.IsZero() && s.gone.Before(t)
}

// toldGone reports whether an uninstall event marked the workspace
// uninstalled (not the store's having no installation for it: absent).
func (s *tokenSource) toldGone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.gone.IsZero() && s.told
}
