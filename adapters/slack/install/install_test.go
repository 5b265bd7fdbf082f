package install

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinplan/pinplan/store"
)

const key1 = "0123456789abcdef0123456789abcdef-one"

func sealer(t *testing.T, secret string) *Sealer {
	t.Helper()
	s, err := NewSealer(secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func openDB(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "pinplan.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestSeal(t *testing.T) {
	if _, err := NewSealer("short"); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("a short key: %v", err)
	}
	s := sealer(t, key1)
	sealed := s.Seal("T1", "xoxb-secret")
	if strings.Contains(sealed, "xoxb") || sealed == s.Seal("T1", "xoxb-secret") {
		t.Errorf("sealed %q: the token shows, or two seals are equal", sealed)
	}
	if got, err := s.Open("T1", sealed); err != nil || got != "xoxb-secret" {
		t.Errorf("open: %q, %v", got, err)
	}
	if _, err := s.Open("T2", sealed); !errors.Is(err, ErrWrongKey) {
		t.Errorf("a token moved to another installation: %v, want ErrWrongKey", err)
	}
	other := sealer(t, strings.Replace(key1, "one", "two", 1))
	if _, err := other.Open("T1", sealed); !errors.Is(err, ErrWrongKey) {
		t.Errorf("another key: %v, want ErrWrongKey", err)
	}
	if _, err := s.Open("T1", sealed[:len(sealed)-4]+"AAAA"); !errors.Is(err, ErrWrongKey) {
		t.Errorf("an altered token: %v, want ErrWrongKey", err)
	}
}

// TestInstallationsStored: tokens are sealed in the store; a workspace
// is served by its own installation, else by its org's org-wide one; a
// wrong key is a clear error, not a crash; delete removes it.
func TestInstallationsStored(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	x := New(db, sealer(t, key1))
	team := Installation{ID: "T1", TeamID: "T1", BotToken: "xoxb-t1", BotUserID: "UB1", Scopes: []string{"chat:write"}}
	org := Installation{ID: "E1", EnterpriseID: "E1", Enterprise: true, BotToken: "xoxb-e1", BotUserID: "UB2"}
	for _, in := range []Installation{team, org} {
		if err := x.Save(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := db.Installation(ctx, "T1")
	if strings.Contains(string(raw), "xoxb-t1") {
		t.Errorf("the stored record shows the token: %s", raw)
	}
	for _, c := range []struct{ team, ent, want string }{{"T1", "", "T1"}, {"T1", "E1", "T1"}, {"T9", "E1", "E1"}} {
		in, err := x.Find(ctx, c.team, c.ent)
		if err != nil || in.ID != c.want || in.BotToken == "" {
			t.Errorf("Find(%s, %s) = %+v, %v; want %s", c.team, c.ent, in, err, c.want)
		}
	}
	if _, err := x.Find(ctx, "T9", "E9"); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("an unknown workspace: %v", err)
	}
	wrong := New(db, sealer(t, strings.Replace(key1, "one", "two", 1)))
	if _, err := wrong.Get(ctx, "T1"); !errors.Is(err, ErrWrongKey) {
		t.Errorf("another key: %v, want ErrWrongKey", err)
	}
	if err := x.Delete(ctx, "T1"); err != nil {
		t.Fatal(err)
	}
	list, err := x.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "E1" {
		t.Errorf("after delete: %+v, %v", list, err)
	}
}

// TestTokenRefreshedOnceAcrossReplicas: three replicas (three
// Installations on one store) ask for a token about to expire at once:
// one refresh is made, and all get a good token.
func TestTokenRefreshedOnceAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	seal := sealer(t, key1)
	now := time.Now()
	first := New(db, seal)
	if err := first.Save(ctx, Installation{ID: "T1", TeamID: "T1", BotToken: "xoxe.xoxb-old", RefreshToken: "xoxe-r1", Expires: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	refresh := func(_ context.Context, rt string) (Refreshed, error) {
		calls.Add(1)
		if rt != "xoxe-r1" {
			return Refreshed{}, errors.New("unknown refresh token " + rt)
		}
		time.Sleep(50 * time.Millisecond) // Slack's answer takes a while
		return Refreshed{BotToken: "xoxe.xoxb-new", RefreshToken: "xoxe-r2", Expires: time.Now().Add(12 * time.Hour)}, nil
	}
	var wg sync.WaitGroup
	tokens := make([]string, 3)
	for i := range 3 {
		wg.Go(func() {
			in, err := New(db, seal).Token(ctx, "T1", refresh)
			if err != nil {
				t.Error(err)
			}
			tokens[i] = in.BotToken
		})
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Errorf("%d refreshes, want 1", n)
	}
	for i, tok := range tokens {
		if tok != "xoxe.xoxb-old" && tok != "xoxe.xoxb-new" {
			t.Errorf("replica %d got %q", i, tok)
		}
	}
	in, err := first.Get(ctx, "T1")
	if err != nil || in.BotToken != "xoxe.xoxb-new" || in.RefreshToken != "xoxe-r2" || !in.Refreshing.IsZero() {
		t.Errorf("after the refresh: %+v, %v", in, err)
	}
	if _, err := first.Token(ctx, "T1", refresh); err != nil || calls.Load() != 1 {
		t.Errorf("a fresh token was refreshed again (%d calls, %v)", calls.Load(), err)
	}
}

// TestExpiredTokenWaitsForTheRefresh: a token already expired, whose
// refresh another replica claimed, is waited for, not used.
func TestExpiredTokenWaitsForTheRefresh(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	seal := sealer(t, key1)
	x := New(db, seal)
	if err := x.Save(ctx, Installation{ID: "T1", BotToken: "old", RefreshToken: "r1", Expires: time.Now().Add(-time.Second), Refreshing: time.Now().Add(20 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		x.store.UpdateInstallation(ctx, "T1", func(cur []byte) ([]byte, error) {
			in, _ := x.decode("T1", cur)
			in.BotToken, in.Expires, in.Refreshing = "new", time.Now().Add(time.Hour), time.Time{}
			return x.encode(in)
		})
	}()
	in, err := x.Token(ctx, "T1", func(context.Context, string) (Refreshed, error) {
		t.Error("refreshed while another replica's claim runs")
		return Refreshed{}, errors.New("no")
	})
	if err != nil || in.BotToken != "new" {
		t.Errorf("got %q, %v; want the other replica's new token", in.BotToken, err)
	}
}

// TestFailedRefreshBacksOffAcrossReplicas: a refresh that fails keeps
// the token in hand (still good) and holds every replica's next attempt
// until the installation's RetryRefresh; after it one replica tries
// again, and its success clears the hold.
func TestFailedRefreshBacksOffAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	seal := sealer(t, key1)
	now := time.Now()
	clock := func() time.Time { return now }
	one, two := New(db, seal), New(db, seal)
	one.now, two.now = clock, clock
	if err := one.Save(ctx, Installation{ID: "T1", BotToken: "xoxe.xoxb-old", RefreshToken: "xoxe-r1", Expires: now.Add(5 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	fail := true
	refresh := func(context.Context, string) (Refreshed, error) {
		calls.Add(1)
		if fail {
			return Refreshed{}, errors.New("oauth.v2.access: http 503")
		}
		return Refreshed{BotToken: "xoxe.xoxb-new", RefreshToken: "xoxe-r2", Expires: now.Add(12 * time.Hour)}, nil
	}
	for i, x := range []*Installations{one, two, one} {
		in, err := x.Token(ctx, "T1", refresh)
		if !errors.Is(err, ErrRefreshFailed) || in.BotToken != "xoxe.xoxb-old" || !in.RetryRefresh.After(now) {
			t.Errorf("call %d: %q (retry at %v), %v; want the token in hand and ErrRefreshFailed", i, in.BotToken, in.RetryRefresh, err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d refreshes within the backoff, want 1", n)
	}
	now = now.Add(RefreshBackoff + time.Second)
	fail = false
	in, err := two.Token(ctx, "T1", refresh)
	if err != nil || in.BotToken != "xoxe.xoxb-new" || !in.RetryRefresh.IsZero() || calls.Load() != 2 {
		t.Errorf("after the backoff: %q (retry %v), %v, %d refreshes; want the new token after a second refresh", in.BotToken, in.RetryRefresh, err, calls.Load())
	}
}

// TestOrgAccessAndDeleteBefore: an org-wide install removed from a
// workspace (RevokeTeams) is not found for it until given back
// (GrantTeams), and serves the org's other workspaces meanwhile; an
// uninstall sent before an installation was made does not delete it.
func TestOrgAccessAndDeleteBefore(t *testing.T) {
	ctx := context.Background()
	x := New(openDB(t), sealer(t, key1))
	now := time.Now()
	if err := x.Save(ctx, Installation{ID: "E1", EnterpriseID: "E1", Enterprise: true, BotToken: "xoxb-org", InstalledAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := x.RevokeTeams(ctx, "E1", []string{"T5"}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Find(ctx, "T5", "E1"); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("a workspace removed from the org install: %v, want ErrNotInstalled", err)
	}
	if in, err := x.Find(ctx, "T6", "E1"); err != nil || in.BotToken != "xoxb-org" {
		t.Errorf("another workspace of the org: %q, %v", in.BotToken, err)
	}
	if err := x.GrantTeams(ctx, "E1", []string{"T5"}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Find(ctx, "T5", "E1"); err != nil {
		t.Errorf("a workspace given back: %v", err)
	}
	if deleted, err := x.DeleteBefore(ctx, "E1", now.Add(-time.Minute)); err != nil || deleted {
		t.Errorf("an uninstall sent before the install: deleted %v, %v; want kept", deleted, err)
	}
	if deleted, err := x.DeleteBefore(ctx, "E1", now.Add(time.Second)); err != nil || !deleted {
		t.Errorf("an uninstall sent after the install: deleted %v, %v; want deleted", deleted, err)
	}
	if _, err := x.Get(ctx, "E1"); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("after the uninstall: %v", err)
	}
}

// TestOrgReinstallKeepsRevokedWorkspaces: an org admin installs the
// org-wide app again (new scopes, say); the workspaces it was removed
// from stay removed until team_access_granted, and the new token is
// stored.
func TestOrgReinstallKeepsRevokedWorkspaces(t *testing.T) {
	ctx := context.Background()
	x := New(openDB(t), sealer(t, key1))
	org := Installation{ID: "E1", EnterpriseID: "E1", Enterprise: true, BotToken: "xoxb-org", InstalledAt: time.Now()}
	if err := x.Save(ctx, org); err != nil {
		t.Fatal(err)
	}
	if err := x.RevokeTeams(ctx, "E1", []string{"T5"}); err != nil {
		t.Fatal(err)
	}
	org.BotToken = "xoxb-org-again"
	if err := x.Save(ctx, org); err != nil {
		t.Fatal(err)
	}
	got, err := x.Get(ctx, "E1")
	if err != nil || got.BotToken != "xoxb-org-again" || !slices.Equal(got.Revoked, []string{"T5"}) {
		t.Errorf("after the reinstall: token %q, revoked %v, %v; want the new token and T5 still removed", got.BotToken, got.Revoked, err)
	}
}
