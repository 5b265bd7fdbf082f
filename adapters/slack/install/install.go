package install

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Installation is pinplan installed in one Slack workspace, or in every
// workspace of an Enterprise Grid org (Enterprise).
type Installation struct {
	// ID is the key it is stored under: TeamID, or EnterpriseID for an
	// org-wide install.
	ID           string    `json:"id"`
	TeamID       string    `json:"team_id,omitempty"`
	TeamName     string    `json:"team_name,omitempty"`
	EnterpriseID string    `json:"enterprise_id,omitempty"`
	Enterprise   bool      `json:"is_enterprise_install,omitempty"`
	AppID        string    `json:"app_id,omitempty"`
	BotToken     string    `json:"bot_token"` // sealed in the store
	BotUserID    string    `json:"bot_user_id,omitempty"`
	Scopes       []string  `json:"scopes,omitempty"`
	RefreshToken string    `json:"refresh_token,omitempty"` // sealed; with token rotation only
	Expires      time.Time `json:"expires,omitzero"`        // zero without token rotation
	InstalledBy  string    `json:"installed_by,omitempty"`
	InstalledAt  time.Time `json:"installed_at,omitzero"`
	// Refreshing is when the refresh one replica claimed ends: until
	// then the others use the token they have (Token).
	Refreshing time.Time `json:"refreshing,omitzero"`
	// RetryRefresh is when a refresh may be tried again after one
	// failed: until then no replica tries, and the token in hand serves
	// while it is good (Token).
	RetryRefresh time.Time `json:"retry_refresh,omitzero"`
	// Revoked are the workspaces an org-wide install no longer serves:
	// an org admin removed it from them (team_access_revoked).
	Revoked []string `json:"revoked_teams,omitempty"`
}

// Serves reports whether the installation serves team: it is the
// team's own, or its org's org-wide one not removed from the team.
// That team is of the org is the caller's to know (events name it).
func (in Installation) Serves(team string) bool {
	return in.ID == team || (in.Enterprise && !slices.Contains(in.Revoked, team))
}

// Store keeps installation records by id, opaque to it: store.DB and
// etcdstore.Store implement it.
type Store interface {
	Installation(ctx context.Context, id string) ([]byte, error)
	// UpdateInstallation changes a record by compare-and-set: fn gets
	// it (nil for none) and returns the new one (nil deletes it); fn may
	// run more than once.
	UpdateInstallation(ctx context.Context, id string, fn func(cur []byte) ([]byte, error)) error
	Installations(ctx context.Context) ([]string, error)
}

// Installations reads and writes installations in a Store, their tokens
// sealed.
type Installations struct {
	store Store
	seal  *Sealer
	now   func() time.Time
}

// New returns the installations kept in store, sealed by seal.
func New(store Store, seal *Sealer) *Installations {
	return &Installations{store: store, seal: seal, now: time.Now}
}

// ErrNotInstalled: no installation serves the workspace.
var ErrNotInstalled = errors.New("pinplan is not installed in this Slack workspace")

func (x *Installations) encode(in Installation) ([]byte, error) {
	in.BotToken = x.seal.Seal(in.ID, in.BotToken)
	in.RefreshToken = x.seal.Seal(in.ID, in.RefreshToken)
	return json.Marshal(in)
}

func (x *Installations) decode(id string, raw []byte) (Installation, error) {
	var in Installation
	if err := json.Unmarshal(raw, &in); err != nil {
		return Installation{}, fmt.Errorf("installation %s: unreadable record: %w", id, err)
	}
	var err error
	if in.BotToken, err = x.seal.Open(id, in.BotToken); err != nil {
		return Installation{}, fmt.Errorf("installation %s: %w", id, err)
	}
	if in.RefreshToken, err = x.seal.Open(id, in.RefreshToken); err != nil {
		return Installation{}, fmt.Errorf("installation %s: %w", id, err)
	}
	return in, nil
}

// Save stores in under its ID, replacing what was there (a reinstall
// starts fresh), but for an org-wide install's Revoked workspaces: an
// org admin's install again (new scopes, say) does not give the org's
// install back to the workspaces it was removed from; only
// team_access_granted does (GrantTeams).
func (x *Installations) Save(ctx context.Context, in Installation) error {
	if in.ID == "" || in.BotToken == "" {
		return errors.New("install: an installation needs an id and a bot token")
	}
	return x.store.UpdateInstallation(ctx, in.ID, func(cur []byte) ([]byte, error) {
		next := in
		if in.Enterprise && cur != nil {
			if was, err := x.decode(in.ID, cur); err == nil && was.Enterprise {
				next.Revoked = slices.Clone(was.Revoked)
			}
		}
		return x.encode(next)
	})
}

// Get returns installation id.
func (x *Installations) Get(ctx context.Context, id string) (Installation, error) {
	raw, err := x.store.Installation(ctx, id)
	if err != nil {
		return Installation{}, err
	}
	if raw == nil {
		return Installation{}, ErrNotInstalled
	}
	return x.decode(id, raw)
}

// Find returns the installation that serves a workspace: its own, else
// its org's org-wide one (events carry both ids).
func (x *Installations) Find(ctx context.Context, teamID, enterpriseID string) (Installation, error) {
	if teamID != "" {
		in, err := x.Get(ctx, teamID)
		if !errors.Is(err, ErrNotInstalled) {
			return in, err
		}
	}
	if enterpriseID != "" {
		in, err := x.Get(ctx, enterpriseID)
		if err == nil && (!in.Enterprise || !in.Serves(teamID)) {
			return Installation{}, ErrNotInstalled
		}
		return in, err
	}
	return Installation{}, ErrNotInstalled
}

// Delete removes installation id (app_uninstalled, tokens_revoked).
func (x *Installations) Delete(ctx context.Context, id string) error {
	return x.store.UpdateInstallation(ctx, id, func([]byte) ([]byte, error) { return nil, nil })
}

// DeleteBefore removes installation id if it was installed before t,
// and reports whether it did: an uninstall Slack sent at t is not of an
// installation made after it (installed again meanwhile).
func (x *Installations) DeleteBefore(ctx context.Context, id string, t time.Time) (bool, error) {
	var deleted bool
	err := x.store.UpdateInstallation(ctx, id, func(cur []byte) ([]byte, error) {
		deleted = false
		if cur == nil {
			return nil, nil
		}
		var rec Installation
		if err := json.Unmarshal(cur, &rec); err == nil && rec.InstalledAt.After(t) {
			return cur, nil
		}
		deleted = true
		return nil, nil
	})
	return deleted, err
}

// RevokeTeams records that the org-wide install id no longer serves
// teams (team_access_revoked): Find does not give it for them. A
// reinstall (Save) or GrantTeams serves them again.
func (x *Installations) RevokeTeams(ctx context.Context, id string, teams []string) error {
	return x.revoked(ctx, id, func(rec *Installation) {
		for _, t := range teams {
			if !slices.Contains(rec.Revoked, t) {
				rec.Revoked = append(rec.Revoked, t)
			}
		}
	})
}

// GrantTeams records that the org-wide install id serves teams again
// (team_access_granted).
func (x *Installations) GrantTeams(ctx context.Context, id string, teams []string) error {
	return x.revoked(ctx, id, func(rec *Installation) {
		rec.Revoked = slices.DeleteFunc(rec.Revoked, func(t string) bool { return slices.Contains(teams, t) })
	})
}

// revoked changes the Revoked teams of installation id by fn.
func (x *Installations) revoked(ctx context.Context, id string, fn func(rec *Installation)) error {
	return x.store.UpdateInstallation(ctx, id, func(cur []byte) ([]byte, error) {
		if cur == nil {
			return nil, ErrNotInstalled
		}
		var rec Installation
		if err := json.Unmarshal(cur, &rec); err != nil {
			return nil, fmt.Errorf("installation %s: unreadable record: %w", id, err)
		}
		fn(&rec)
		return json.Marshal(rec) // tokens as stored, sealed
	})
}

// List returns every installation, in id order.
func (x *Installations) List(ctx context.Context) ([]Installation, error) {
	ids, err := x.store.Installations(ctx)
	if err != nil {
		return nil, err
	}
	slices.Sort(ids)
	out := make([]Installation, 0, len(ids))
	for _, id := range ids {
		in, err := x.Get(ctx, id)
		if errors.Is(err, ErrNotInstalled) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

// Refreshed is what a token refresh (oauth.v2.access with a refresh
// token) gave.
type Refreshed struct {
	BotToken     string
	RefreshToken string
	Expires      time.Time
}

// Refresh timing: a token is refreshed this long before it expires, a
// replica's claim on the refresh lasts claimFor, and after a failed
// refresh no replica tries again for RefreshBackoff.
const (
	RefreshEarly   = 10 * time.Minute
	RefreshBackoff = time.Minute
	claimFor       = 30 * time.Second
)

// ErrRefreshFailed is Token's error while a token's refresh fails: the
// installation it returns with it holds the token as it was (good until
// its Expires, if that is still ahead) and when the refresh is tried
// again (RetryRefresh).
var ErrRefreshFailed = errors.New("the bot token's refresh failed")

// Token returns installation id with a bot token good for at least
// RefreshEarly more when token rotation is on: refreshed first if it
// expires sooner, once across replicas. The refresh is claimed in the
// record by compare-and-set; the replica whose claim lands calls refresh
// and stores its result, the others go on with the token they have (it
// is still good) until the new one is stored. A token already expired
// with a claim of another replica's running is waited for, up to the
// claim's end. A failed refresh holds every replica's next attempt for
// RefreshBackoff (RetryRefresh): meanwhile Token returns the
// installation as it is with ErrRefreshFailed, and the caller may use
// its token until it expires.
func (x *Installations) Token(ctx context.Context, id string, refresh func(ctx context.Context, refreshToken string) (Refreshed, error)) (Installation, error) {
	for {
		in, err := x.Get(ctx, id)
		if err != nil || in.Expires.IsZero() || in.RefreshToken == "" {
			return in, err
		}
		now := x.now()
		if now.Add(RefreshEarly).Before(in.Expires) {
			return in, nil // good for a while yet
		}
		if now.Before(in.RetryRefresh) {
			return in, fmt.Errorf("install: %s: %w; tried again after %s", id, ErrRefreshFailed, in.RetryRefresh.UTC().Format(time.RFC3339))
		}
		claimed, err := x.claim(ctx, id, now)
		if err != nil {
			return in, err
		}
		if !claimed {
			if now.Before(in.Expires) {
				return in, nil // another replica refreshes it; this one is still good
			}
			if err := sleep(ctx, time.Second); err != nil {
				return in, err
			}
			continue
		}
		return x.refresh(ctx, in, now, refresh)
	}
}

// refresh refreshes in's token under this replica's claim and stores
// the result; a failure holds the next attempt for RefreshBackoff.
func (x *Installations) refresh(ctx context.Context, in Installation, now time.Time, refresh func(ctx context.Context, refreshToken string) (Refreshed, error)) (Installation, error) {
	got, err := refresh(ctx, in.RefreshToken)
	if err != nil {
		in.RetryRefresh = now.Add(RefreshBackoff)
		x.backOff(ctx, in.ID, in.RetryRefresh)
		return in, fmt.Errorf("install: refresh the token of %s: %w: %w", in.ID, ErrRefreshFailed, err)
	}
	err = x.store.UpdateInstallation(ctx, in.ID, func(cur []byte) ([]byte, error) {
		if cur == nil {
			return nil, ErrNotInstalled // uninstalled meanwhile
		}
		c, err := x.decode(in.ID, cur)
		if err != nil {
			return nil, err
		}
		c.BotToken, c.Expires, c.Refreshing, c.RetryRefresh = got.BotToken, got.Expires, time.Time{}, time.Time{}
		if got.RefreshToken != "" {
			c.RefreshToken = got.RefreshToken
		}
		return x.encode(c)
	})
	if err != nil {
		return in, err
	}
	return x.Get(ctx, in.ID)
}

// claim takes the refresh of installation id for claimFor unless another
// replica's claim runs; it reports whether this one holds it.
func (x *Installations) claim(ctx context.Context, id string, now time.Time) (bool, error) {
	var claimed bool
	err := x.store.UpdateInstallation(ctx, id, func(cur []byte) ([]byte, error) {
		claimed = false
		if cur == nil {
			return nil, ErrNotInstalled
		}
		var rec Installation
		if err := json.Unmarshal(cur, &rec); err != nil {
			return nil, err
		}
		if now.Add(RefreshEarly).Before(rec.Expires) || now.Before(rec.Refreshing) || now.Before(rec.RetryRefresh) {
			return cur, nil // refreshed already, another's claim runs, or a failed one holds
		}
		rec.Refreshing = now.Add(claimFor)
		claimed = true
		return json.Marshal(rec) // tokens as stored, sealed
	})
	return claimed, err
}

// backOff gives a claim back after a failed refresh, holding the next
// attempt, this replica's or another's, until retry.
func (x *Installations) backOff(ctx context.Context, id string, retry time.Time) {
	_ = x.store.UpdateInstallation(ctx, id, func(cur []byte) ([]byte, error) {
		if cur == nil {
			return nil, nil
		}
		var rec Installation
		if err := json.Unmarshal(cur, &rec); err != nil {
			return cur, nil
		}
		rec.Refreshing, rec.RetryRefresh = time.Time{}, retry
		return json.Marshal(rec)
	})
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Expired records that Slack answered token_expired to token, an
// installation's bot token: unless the installation holds another token
// already (refreshed meanwhile, here or on another replica), its expiry
// is moved to now, so that the next Token refreshes it, once across
// replicas. An installation without token rotation is left as it is
// (its token cannot be refreshed).
func (x *Installations) Expired(ctx context.Context, id, token string) error {
	now := x.now()
	return x.store.UpdateInstallation(ctx, id, func(cur []byte) ([]byte, error) {
		if cur == nil {
			return nil, ErrNotInstalled
		}
		c, err := x.decode(id, cur)
		if err != nil {
			return nil, err
		}
		if c.BotToken != token || c.RefreshToken == "" || !c.Expires.After(now) {
			return cur, nil
		}
		c.Expires = now
		return x.encode(c)
	})
}
