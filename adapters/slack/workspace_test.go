package slack

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/pinplan/pinplan/adapters/slack/install"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/internal/inboxtest"
	"github.com/pinplan/pinplan/todo"
)

// memInstalls is an install.Store in memory.
type memInstalls struct {
	mu   sync.Mutex // guards recs
	recs map[string][]byte
}

func (m *memInstalls) Installation(_ context.Context, id string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recs[id], nil
}

func (m *memInstalls) UpdateInstallation(_ context.Context, id string, fn func(cur []byte) ([]byte, error)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	next, err := fn(m.recs[id])
	if err != nil {
		return err
	}
	if m.recs == nil {
		m.recs = map[string][]byte{}
	}
	if next == nil {
		delete(m.recs, id)
	} else {
		m.recs[id] = next
	}
	return nil
}

func (m *memInstalls) Installations(context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, 0, len(m.recs))
	for id := range m.recs {
		ids = append(ids, id)
	}
	return ids, nil
}

// manyRig is an adapter serving the workspaces installed in a fake Slack
// by its OAuth flow.
type manyRig struct {
	a    *Adapter
	fake *fakeslack.Server
	x    *install.Installations
	flow *install.Flow
	rec  *inboxtest.Inbox
	api  string

	mu          sync.Mutex // guards uninstalled and skew
	uninstalled []string
	skew        time.Duration // the adapter's clock ahead of the wall's
}

// later moves the adapter's clock d ahead.
func (r *manyRig) later(d time.Duration) {
	r.mu.Lock()
	r.skew += d
	r.mu.Unlock()
}

func newManyRig(t *testing.T, rotation bool, teams ...fakeslack.Team) *manyRig {
	t.Helper()
	fake := &fakeslack.Server{App: &fakeslack.App{ClientID: "1.2", ClientSecret: "s3cret", RedirectURL: "https://bot.example/slack/oauth_redirect", TokenRotation: rotation}}
	for _, tm := range teams {
		fake.AddTeam(tm)
	}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	seal, err := install.NewSealer("0123456789abcdef0123456789abcdef-test")
	if err != nil {
		t.Fatal(err)
	}
	r := &manyRig{fake: fake, x: install.New(&memInstalls{}, seal), rec: &inboxtest.Inbox{}, api: srv.URL + "/api/"}
	r.flow = &install.Flow{ClientID: "1.2", ClientSecret: "s3cret", APIURL: r.api, HTTP: srv.Client()}
	now := func() time.Time {
		r.mu.Lock()
		defer r.mu.Unlock()
		return time.Now().Add(r.skew)
	}
	r.a = New(Options{APIURL: r.api, SigningSecret: "secret", Installations: r.x, Refresh: r.flow.Refresh, Dedupe: &inboxtest.Dedupe{}, Now: now,
		Uninstalled: func(id string, teams []string) {
			r.mu.Lock()
			r.uninstalled = append(r.uninstalled, id+":"+strings.Join(teams, ","))
			r.mu.Unlock()
		}})
	if err := r.a.Start(t.Context(), r.rec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.a.Wait)
	return r
}

// install runs the OAuth exchange for in as the Flow does, stores the
// installation and tells the adapter (the Flow's Installed).
func (r *manyRig) install(t *testing.T, in fakeslack.Install) install.Installation {
	t.Helper()
	got := r.installQuietly(t, in)
	r.a.Installed(got)
	return got
}

// installQuietly is install as another replica's Flow makes it: the
// adapter is not told.
func (r *manyRig) installQuietly(t *testing.T, in fakeslack.Install) install.Installation {
	t.Helper()
	back, err := r.fake.Authorize("https://slack.com/oauth/v2/authorize?client_id=1.2&scope=chat:write&state=s", in)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(back)
	ctx := context.Background()
	resp, err := slack.GetOAuthV2ResponseContext(ctx, http.DefaultClient, "1.2", "s3cret", u.Query().Get("code"), "", slack.OAuthOptionAPIURL(r.api))
	if err != nil {
		t.Fatal(err)
	}
	got := install.Installation{ID: resp.Team.ID, TeamID: resp.Team.ID, EnterpriseID: resp.Enterprise.ID, Enterprise: resp.IsEnterpriseInstall,
		BotToken: resp.AccessToken, BotUserID: resp.BotUserID, RefreshToken: resp.RefreshToken, InstalledAt: time.Now()}
	if got.Enterprise {
		got.ID = got.EnterpriseID
	}
	if resp.ExpiresIn > 0 {
		got.Expires = time.Now().Add(time.Duration(resp.ExpiresIn) * time.Second)
	}
	if err := r.x.Save(ctx, got); err != nil {
		t.Fatal(err)
	}
	return got
}

// mention pushes a mention of the workspace's bot in channel and waits
// for it to be handed on; it returns the session's thread.
func (r *manyRig) mention(t *testing.T, id, channel, bot, ts string) chat.Thread {
	t.Helper()
	push(t, r.a, r.fake, id, map[string]any{"type": "app_mention", "user": "U1", "channel": channel, "ts": ts, "text": "<@" + bot + "> the task"})
	r.a.queue.Wait(context.Background())
	for _, in := range r.rec.Incoming() {
		if in.Thread.Channel == channel && in.MessageID == ts {
			return in.Thread
		}
	}
	t.Fatalf("the mention in %s was not handed on: %+v", channel, r.rec.Incoming())
	return chat.Thread{}
}

func plan() chat.Plan {
	return chat.Plan{Revision: 1, Updated: time.Now(), Items: []todo.Item{{Content: "a", Status: todo.Pending}}}
}

// botPosts lists who posted the bot messages of channel.
func botPosts(fake *fakeslack.Server, channel string) []string {
	var out []string
	for _, m := range fake.Messages(channel) {
		if m.BotID != "" {
			out = append(out, m.User)
		}
	}
	return out
}

// TestWorkspacesAnswerInTheirOwnThreads: two installed workspaces, each
// mention handed on under its own team's key with the mention of its own
// bot stripped, and each answered with its own token (the fake refuses
// another team's token on the channel).
func TestWorkspacesAnswerInTheirOwnThreads(t *testing.T) {
	r := newManyRig(t, false, fakeslack.Team{ID: "T2", Channels: []string{"C2"}}, fakeslack.Team{ID: "T3", Channels: []string{"C3"}})
	r.install(t, fakeslack.Install{TeamID: "T2"})
	r.install(t, fakeslack.Install{TeamID: "T3"})
	ctx := context.Background()
	for _, w := range []struct{ team, channel, bot string }{{"T2", "C2", "UBT2"}, {"T3", "C3", "UBT3"}} {
		th := r.mention(t, "Ev"+w.team, w.channel, w.bot, "1.00000"+w.team[1:])
		if th.Key != Key(w.team, w.channel, th.ThreadID) {
			t.Errorf("session key %s, want team %s", th.Key, w.team)
		}
		ref, err := r.a.PostPlan(ctx, th, plan())
		if err != nil {
			t.Fatalf("%s: post plan: %v", w.team, err)
		}
		if err := r.a.EditPlan(ctx, th, ref, plan()); err != nil {
			t.Fatalf("%s: edit plan: %v", w.team, err)
		}
		if err := r.a.Pin(ctx, th, ref, true); err != nil {
			t.Fatalf("%s: pin: %v", w.team, err)
		}
		if err := r.a.Reply(ctx, th, "", "done"); err != nil {
			t.Fatalf("%s: reply: %v", w.team, err)
		}
		if got := botPosts(r.fake, w.channel); len(got) != 2 || got[0] != w.bot || got[1] != w.bot {
			t.Errorf("%s: bot messages by %v, want two by %s", w.team, got, w.bot)
		}
	}
	for _, in := range r.rec.Incoming() {
		if in.Text != "the task" {
			t.Errorf("got text %q, want the bot's mention stripped", in.Text)
		}
	}
	for _, c := range r.fake.Calls("") {
		if c.Error != "" && c.Method != "users.info" { // U1 is no user the fake knows
			t.Errorf("%s for %s answered %s", c.Method, c.Team, c.Error)
		}
		if ch := c.Params["channel"]; ch != "" && c.Team != "T"+ch[1:] {
			t.Errorf("%s in %s with a token of %s", c.Method, ch, c.Team)
		}
	}
}

// TestWorkspaceBudgetsApart: a burst that spends one workspace's edit
// budget and meets a Retry-After leaves the other's budget and holds
// untouched: its first edit goes at once.
func TestWorkspaceBudgetsApart(t *testing.T) {
	r := newManyRig(t, false, fakeslack.Team{ID: "T2", Channels: []string{"C2"}}, fakeslack.Team{ID: "T3", Channels: []string{"C3"}})
	r.install(t, fakeslack.Install{TeamID: "T2"})
	r.install(t, fakeslack.Install{TeamID: "T3"})
	ctx := context.Background()
	two := chat.Thread{Platform: "slack", Key: Key("T2", "C2", "1.1"), Channel: "C2", ThreadID: "1.1"}
	three := chat.Thread{Platform: "slack", Key: Key("T3", "C3", "1.1"), Channel: "C3", ThreadID: "1.1"}
	edit := func(th chat.Thread) *chat.Budget {
		return r.a.Budget(chat.Request{Thread: th, Method: chat.MethodEdit})
	}
	if edit(two) == edit(three) {
		t.Fatal("the two workspaces share one edit budget")
	}
	spent := 0
	for edit(two).TryNow(0) {
		spent++
	}
	if spent != editBurst || !edit(three).TryNow(0) {
		t.Errorf("T2 spent %d (want its burst, %d); T3's first edit waits: %v", spent, editBurst, !edit(three).Idle())
	}
	ref2, err := r.a.PostPlan(ctx, two, plan())
	if err != nil {
		t.Fatal(err)
	}
	ref3, err := r.a.PostPlan(ctx, three, plan())
	if err != nil {
		t.Fatal(err)
	}
	r.fake.Limit("chat.update", 1, time.Minute) // per workspace, as Slack counts
	if err := r.a.EditPlan(ctx, two, ref2, plan()); err != nil {
		t.Fatal(err)
	}
	var rl *chat.RateLimitError
	if err := r.a.EditPlan(ctx, two, ref2, plan()); !errors.As(err, &rl) {
		t.Fatalf("T2's second edit: %v, want a 429", err)
	}
	held2, held3 := heldUntil(r.a.space("T2"), "chat.update"), heldUntil(r.a.space("T3"), "chat.update")
	if !held2.After(time.Now()) || !held3.IsZero() {
		t.Errorf("holds: T2 until %v, T3 until %v; want T2's only", held2, held3)
	}
	if err := r.a.EditPlan(ctx, three, ref3, plan()); err != nil {
		t.Errorf("T3's edit during T2's Retry-After: %v", err)
	}
	if v := r.fake.Violations(); len(v) != 0 {
		t.Errorf("violations: %v", v)
	}
}

func heldUntil(w *workspace, method string) time.Time {
	w.held.mu.Lock()
	defer w.held.mu.Unlock()
	return w.held.until[method]
}

// TestTokenRefreshedBeforeExpiry: a token within install.RefreshEarly of
// its end is refreshed before the call, which goes with the new one.
func TestTokenRefreshedBeforeExpiry(t *testing.T) {
	r := newManyRig(t, true, fakeslack.Team{ID: "T2", Channels: []string{"C2"}})
	in := r.install(t, fakeslack.Install{TeamID: "T2"})
	ctx := context.Background()
	in.Expires = time.Now().Add(install.RefreshEarly / 2)
	if err := r.x.Save(ctx, in); err != nil {
		t.Fatal(err)
	}
	r.a.Installed(in)
	th := chat.Thread{Platform: "slack", Key: Key("T2", "C2", "1.1"), Channel: "C2", ThreadID: "1.1"}
	if _, err := r.a.PostPlan(ctx, th, plan()); err != nil {
		t.Fatal(err)
	}
	now, _ := r.x.Get(ctx, "T2")
	if r.fake.Refreshes() != 1 || now.BotToken == in.BotToken || !now.Expires.After(time.Now().Add(install.RefreshEarly)) {
		t.Errorf("%d refreshes, token %q -> %q; want one refresh", r.fake.Refreshes(), in.BotToken, now.BotToken)
	}
	for _, c := range r.fake.Calls("chat.postMessage") {
		if c.Error != "" {
			t.Errorf("post answered %s", c.Error)
		}
	}
	if _, err := r.a.PostPlan(ctx, th, plan()); err != nil || r.fake.Refreshes() != 1 {
		t.Errorf("the next call: %v, %d refreshes; want no other", err, r.fake.Refreshes())
	}
}

// TestTokenExpiredRetriedOnce: a call Slack answers token_expired (the
// token ended sooner than the installation said) succeeds after exactly
// one refresh.
func TestTokenExpiredRetriedOnce(t *testing.T) {
	r := newManyRig(t, true, fakeslack.Team{ID: "T2", Channels: []string{"C2"}})
	in := r.install(t, fakeslack.Install{TeamID: "T2"})
	ctx := context.Background()
	th := chat.Thread{Platform: "slack", Key: Key("T2", "C2", "1.1"), Channel: "C2", ThreadID: "1.1"}
	ref, err := r.a.PostPlan(ctx, th, plan())
	if err != nil {
		t.Fatal(err)
	}
	r.fake.ExpireToken(in.BotToken)
	if err := r.a.EditPlan(ctx, th, ref, plan()); err != nil {
		t.Fatalf("edit with an expired token: %v", err)
	}
	var codes []string
	for _, c := range r.fake.Calls("chat.update") {
		codes = append(codes, cmpOr(c.Error, "ok"))
	}
	if r.fake.Refreshes() != 1 || !slices.Equal(codes, []string{"token_expired", "ok"}) {
		t.Errorf("%d refreshes, chat.update answered %v; want one refresh, token_expired then ok", r.fake.Refreshes(), codes)
	}
	if err := r.a.Reply(ctx, th, "", "done"); err != nil || r.fake.Refreshes() != 1 {
		t.Errorf("the next call: %v, %d refreshes", err, r.fake.Refreshes())
	}
}

func cmpOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}

// postEvent posts an Events API body to the adapter's HTTP handler,
// signed, and waits for what it queued.
func postEvent(t *testing.T, a *Adapter, body []byte) {
	t.Helper()
	w := httptest.NewRecorder()
	a.HTTPHandler(context.Background()).ServeHTTP(w, signed(t, "/slack/events", "secret", body))
	if w.Code != http.StatusOK {
		t.Fatalf("event answered %d %s", w.Code, w.Body)
	}
	a.queue.Wait(context.Background())
}

// TestUninstallDeletesAndStops: app_uninstalled and tokens_revoked
// delete the installation, tell Uninstalled once, and the workspace's
// later sends fail at once as undeliverable, with no call to Slack; the
// other workspace goes on, and a reinstall starts fresh.
func TestUninstallDeletesAndStops(t *testing.T) {
	r := newManyRig(t, false, fakeslack.Team{ID: "T2", Channels: []string{"C2"}}, fakeslack.Team{ID: "T3", Channels: []string{"C3"}})
	r.install(t, fakeslack.Install{TeamID: "T2"})
	r.install(t, fakeslack.Install{TeamID: "T3"})
	ctx := context.Background()
	two := chat.Thread{Platform: "slack", Key: Key("T2", "C2", "1.1"), Channel: "C2", ThreadID: "1.1"}
	three := chat.Thread{Platform: "slack", Key: Key("T3", "C3", "1.1"), Channel: "C3", ThreadID: "1.1"}
	if err := r.a.Reply(ctx, two, "", "before"); err != nil {
		t.Fatal(err)
	}
	for _, body := range r.fake.Uninstall("T2") {
		postEvent(t, r.a, body)
	}
	if _, err := r.x.Get(ctx, "T2"); !errors.Is(err, install.ErrNotInstalled) {
		t.Errorf("installation after uninstall: %v", err)
	}
	r.mu.Lock()
	told := slices.Clone(r.uninstalled)
	r.mu.Unlock()
	if !slices.Equal(told, []string{"T2:T2"}) {
		t.Errorf("Uninstalled told %v, want T2 once", told)
	}
	calls := len(r.fake.Calls(""))
	err := r.a.Reply(ctx, two, "", "after")
	if o, _ := chat.Classify(err); !errors.Is(err, ErrUninstalled) || o != chat.Permanent {
		t.Errorf("a reply after uninstall: %v, want ErrUninstalled, permanent", err)
	}
	if n := len(r.fake.Calls("")); n != calls {
		t.Errorf("%d calls to Slack after the uninstall", n-calls)
	}
	if err := r.a.Reply(ctx, three, "", "still here"); err != nil {
		t.Errorf("the other workspace: %v", err)
	}
	r.install(t, fakeslack.Install{TeamID: "T2"})
	if err := r.a.Reply(ctx, two, "", "again"); err != nil {
		t.Errorf("after a reinstall: %v", err)
	}
	if got := botPosts(r.fake, "C2"); len(got) != 2 {
		t.Errorf("C2 has %d bot messages, want before and again", len(got))
	}
}

// TestOrgInstallServesItsWorkspaces: an org-wide install answers in
// every workspace of the org, with the org's token and bot, and in no
// workspace outside it.
func TestOrgInstallServesItsWorkspaces(t *testing.T) {
	r := newManyRig(t, false, fakeslack.Team{ID: "T5", EnterpriseID: "E1", Channels: []string{"C5"}},
		fakeslack.Team{ID: "T6", EnterpriseID: "E1", Channels: []string{"C6"}}, fakeslack.Team{ID: "T7", Channels: []string{"C7"}})
	org := r.install(t, fakeslack.Install{EnterpriseID: "E1", Enterprise: true})
	if org.ID != "E1" || org.BotUserID != "UBE1" {
		t.Fatalf("org install %+v", org)
	}
	ctx := context.Background()
	for _, ch := range []string{"C5", "C6"} {
		th := r.mention(t, "Ev"+ch, ch, "UBE1", "2.00000"+ch[1:])
		if _, err := r.a.PostPlan(ctx, th, plan()); err != nil {
			t.Fatalf("%s: %v", ch, err)
		}
		if got := botPosts(r.fake, ch); len(got) != 1 || got[0] != "UBE1" {
			t.Errorf("%s: bot messages by %v, want the org's bot", ch, got)
		}
	}
	// After a restart: a session of the org that no event named yet.
	r.a.Installed(org)
	resumed := chat.Thread{Platform: "slack", Key: Key("T6", "C6", "3.1"), Channel: "C6", ThreadID: "3.1"}
	if _, err := r.a.PostPlan(ctx, resumed, plan()); err != nil {
		t.Errorf("a resumed session of the org: %v", err)
	}
	outside := chat.Thread{Platform: "slack", Key: Key("T7", "C7", "1.1"), Channel: "C7", ThreadID: "1.1"}
	if _, err := r.a.PostPlan(ctx, outside, plan()); !errors.Is(err, ErrUninstalled) {
		t.Errorf("a workspace outside the org: %v, want ErrUninstalled", err)
	}
	for _, body := range r.fake.Uninstall("E1") {
		postEvent(t, r.a, body)
	}
	r.mu.Lock()
	told := slices.Clone(r.uninstalled)
	r.mu.Unlock()
	if _, err := r.x.Get(ctx, "E1"); !errors.Is(err, install.ErrNotInstalled) || !slices.Equal(told, []string{"E1:T5,T6"}) {
		t.Errorf("the org's uninstall: installation %v, told %v; want it deleted, E1:T5,T6 told", err, told)
	}
	if _, err := r.a.PostPlan(ctx, resumed, plan()); !errors.Is(err, ErrUninstalled) {
		t.Errorf("a workspace of the uninstalled org: %v, want ErrUninstalled", err)
	}
}

// TestSocketModeServesEveryWorkspace: one app-level connection takes the
// events of every installed workspace, routed by team, and the
// uninstall events Slack sends over it.
func TestSocketModeServesEveryWorkspace(t *testing.T) {
	fake := &fakeslack.Server{App: &fakeslack.App{ClientID: "1.2", ClientSecret: "s3cret", RedirectURL: "https://bot.example/slack/oauth_redirect"}}
	fake.AddTeam(fakeslack.Team{ID: "T2", Channels: []string{"C2"}})
	fake.AddTeam(fakeslack.Team{ID: "T3", Channels: []string{"C3"}})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	seal, err := install.NewSealer("0123456789abcdef0123456789abcdef-test")
	if err != nil {
		t.Fatal(err)
	}
	r := &manyRig{fake: fake, x: install.New(&memInstalls{}, seal), rec: &inboxtest.Inbox{}, api: srv.URL + "/api/"}
	var gone []string
	var mu sync.Mutex
	r.a = New(Options{APIURL: r.api, AppToken: "xapp-1", Installations: r.x, Dedupe: &inboxtest.Dedupe{},
		Uninstalled: func(id string, _ []string) { mu.Lock(); gone = append(gone, id); mu.Unlock() }})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); r.a.Wait() })
	if err := r.a.Start(ctx, r.rec); err != nil {
		t.Fatal(err)
	}
	r.install(t, fakeslack.Install{TeamID: "T2"})
	r.install(t, fakeslack.Install{TeamID: "T3"})
	fake.Push("EvS2", map[string]any{"type": "app_mention", "user": "U1", "channel": "C2", "ts": "4.000002", "text": "<@UBT2> two"})
	fake.Push("EvS3", map[string]any{"type": "app_mention", "user": "U1", "channel": "C3", "ts": "4.000003", "text": "<@UBT3> three"})
	waitFor(t, "both mentions", func() bool { return len(r.rec.Incoming()) == 2 })
	keys := []string{}
	for _, in := range r.rec.Incoming() {
		keys = append(keys, in.Thread.Key)
	}
	slices.Sort(keys)
	if want := []string{Key("T2", "C2", "4.000002"), Key("T3", "C3", "4.000003")}; !slices.Equal(keys, want) {
		t.Errorf("got sessions %v, want %v", keys, want)
	}
	fake.Uninstall("T3")
	waitFor(t, "the uninstall", func() bool { mu.Lock(); defer mu.Unlock(); return len(gone) == 1 })
	if _, err := r.x.Get(ctx, "T3"); !errors.Is(err, install.ErrNotInstalled) {
		t.Errorf("T3's installation: %v", err)
	}
	if _, err := r.x.Get(ctx, "T2"); err != nil {
		t.Errorf("T2's installation: %v", err)
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFilesFetchedWithTheirWorkspacesToken: a file is fetched with the
// token of the workspace its address names.
func TestFilesFetchedWithTheirWorkspacesToken(t *testing.T) {
	r := newManyRig(t, false, fakeslack.Team{ID: "T2", Channels: []string{"C2"}}, fakeslack.Team{ID: "T3", Channels: []string{"C3"}})
	two := r.install(t, fakeslack.Install{TeamID: "T2"})
	r.install(t, fakeslack.Install{TeamID: "T3"})
	for _, team := range []string{"T2", "T3"} {
		f := r.a.filesOf([]slack.File{fileOf(r.fake.AddTeamFile(team, "notes.txt", "text/plain", []byte("of "+team)))})[0]
		got, err := r.a.FetchFile(context.Background(), Key(team, "C"+team[1:], "1.1"), f, 1<<20)
		if err != nil || string(got) != "of "+team {
			t.Errorf("%s's file: %q, %v", team, got, err)
		}
	}
	if fetches := r.fake.FileFetches(); len(fetches) != 2 || fetches[0].Token != two.BotToken || !fetches[1].OK {
		t.Errorf("fetches %+v, want T2's with T2's token, both served", fetches)
	}
}

// fileOf is a file as a message event carries it.
func fileOf(m map[string]any) slack.File {
	raw, _ := json.Marshal(m)
	var f slack.File
	json.Unmarshal(raw, &f)
	return f
}

// TestClicksAnsweredInTheirWorkspace: a press of a plan's Edit button in
// each workspace opens the modal with that workspace's token.
func TestClicksAnsweredInTheirWorkspace(t *testing.T) {
	r := newManyRig(t, false, fakeslack.Team{ID: "T2", Channels: []string{"C2"}}, fakeslack.Team{ID: "T3", Channels: []string{"C3"}})
	r.install(t, fakeslack.Install{TeamID: "T2"})
	r.install(t, fakeslack.Install{TeamID: "T3"})
	ctx := context.Background()
	for _, team := range []string{"T2", "T3"} {
		ch := "C" + team[1:]
		th := chat.Thread{Platform: "slack", Key: Key(team, ch, "1.1"), Channel: ch, ThreadID: "1.1"}
		ref, err := r.a.PostPlan(ctx, th, plan())
		if err != nil {
			t.Fatal(err)
		}
		payload := r.fake.BlockActions("U1", ch, ref.ID, editID)
		if payload == nil {
			t.Fatalf("%s: no Edit plan button", team)
		}
		req := signed(t, "/slack/interactions", "secret", r.fake.InteractionBody(payload))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		r.a.InteractionsHandler(ctx).ServeHTTP(w, req)
		r.a.queue.Wait(ctx)
		opened := r.fake.Calls("views.open")
		if len(opened) == 0 || opened[len(opened)-1].Team != team || opened[len(opened)-1].Error != "" {
			t.Errorf("%s: views.open %+v, want one with %s's token", team, opened, team)
		}
	}
}

// TestTokenExpiredRefreshedOnceAcrossReplicas: two replicas over one
// store meet token_expired at once; the token is refreshed once and
// both calls succeed.
func TestTokenExpiredRefreshedOnceAcrossReplicas(t *testing.T) {
	r := newManyRig(t, true, fakeslack.Team{ID: "T2", Channels: []string{"C2"}})
	in := r.install(t, fakeslack.Install{TeamID: "T2"})
	other := New(Options{APIURL: r.api, Installations: r.x, Refresh: r.flow.Refresh, Dedupe: &inboxtest.Dedupe{}})
	if err := other.Start(t.Context(), &inboxtest.Inbox{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	th := chat.Thread{Platform: "slack", Key: Key("T2", "C2", "1.1"), Channel: "C2", ThreadID: "1.1"}
	ref, err := r.a.PostPlan(ctx, th, plan())
	if err != nil {
		t.Fatal(err)
	}
	if err := other.EditPlan(ctx, th, ref, plan()); err != nil { // the other replica has the token in hand too
		t.Fatal(err)
	}
	r.fake.ExpireToken(in.BotToken)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, a := range []*Adapter{r.a, other} {
		wg.Go(func() { errs[i] = a.EditPlan(ctx, th, ref, plan()) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || r.fake.Refreshes() != 1 {
		t.Errorf("edits: %v, %v; %d refreshes, want both done after one", errs[0], errs[1], r.fake.Refreshes())
	}
}

// TestReinstallThroughAnotherReplica: a workspace uninstalled here and
// installed again through another replica's Flow serves again once its
// calls read the store again (recheckGone); until then they fail at
// once.
func TestReinstallThroughAnotherReplica(t *testing.T) {
	r := newManyRig(t, false, fakeslack.Team{ID: "T2", Channels: []string{"C2"}})
	r.install(t, fakeslack.Install{TeamID: "T2"})
	ctx := context.Background()
	th := chat.Thread{Platform: "slack", Key: Key("T2", "C2", "1.1"), Channel: "C2", ThreadID: "1.1"}
	for _, body := range r.fake.Uninstall("T2") {
		postEvent(t, r.a, body)
	}
	r.installQuietly(t, fakeslack.Install{TeamID: "T2"})
	if err := r.a.Reply(ctx, th, "", "too soon"); !errors.Is(err, ErrUninstalled) {
		t.Errorf("before the store is read again: %v, want ErrUninstalled", err)
	}
	r.later(recheckGone + time.Second)
	if err := r.a.Reply(ctx, th, "", "again"); err != nil {
		t.Errorf("after the reinstall: %v", err)
	}
}

// TestHoldsSharedPerWorkspace: with replicas, a Retry-After is told
// with its workspace's team, and one another replica met holds that
// workspace's calls only.
func TestHoldsSharedPerWorkspace(t *testing.T) {
	r := newManyRig(t, false, fakeslack.Team{ID: "T2", Channels: []string{"C2"}}, fakeslack.Team{ID: "T3", Channels: []string{"C3"}})
	r.install(t, fakeslack.Install{TeamID: "T2"})
	var mu sync.Mutex
	var said []string
	r.a.OnRetryAfter(func(key string, _ time.Time) { mu.Lock(); said = append(said, key); mu.Unlock() })
	ctx := context.Background()
	th := chat.Thread{Platform: "slack", Key: Key("T2", "C2", "1.1"), Channel: "C2", ThreadID: "1.1"}
	ref, err := r.a.PostPlan(ctx, th, plan())
	if err != nil {
		t.Fatal(err)
	}
	r.fake.FailHTTP("chat.update", http.StatusTooManyRequests, 1)
	r.a.EditPlan(ctx, th, ref, plan())
	mu.Lock()
	got := slices.Clone(said)
	mu.Unlock()
	if !slices.Equal(got, []string{"T2:chat.update"}) {
		t.Errorf("told %v, want T2:chat.update", got)
	}
	until := time.Now().Add(time.Minute)
	r.a.HoldRetryAfter("T3:chat.update", until)
	if got := heldUntil(r.a.space("T3"), "chat.update"); !got.Equal(until) {
		t.Errorf("T3 held until %v, want %v (the other replica's hold)", got, until)
	}
	// T2 is held by its own 429 alone (Retry-After: 1), never by T3's.
	if got := heldUntil(r.a.space("T2"), "chat.update"); !got.IsZero() && got.After(time.Now().Add(2*time.Second)) {
		t.Errorf("T2 held until %v, %v from now; want no hold or its own second, not T3's minute", got, time.Until(got).Round(time.Second))
	}
}

// TestFailedEarlyRefreshUsesTokenInHand: a token 5 minutes from its end
// whose early refresh fails still serves the calls, here and on another
// replica, and the refresh is not tried again by every call.
func TestFailedEarlyRefreshUsesTokenInHand(t *testing.T) {
	r := newManyRig(t, true, fakeslack.Team{ID: "T2", Channels: []string{"C2"}})
	in := r.install(t, fakeslack.Install{TeamID: "T2"})
	ctx := context.Background()
	in.Expires = time.Now().Add(install.RefreshEarly / 2)
	if err := r.x.Save(ctx, in); err != nil {
		t.Fatal(err)
	}
	r.a.Installed(in)
	var n atomic.Int32
	refresh := func(context.Context, string) (install.Refreshed, error) {
		n.Add(1)
		return install.Refreshed{}, errors.New("oauth.v2.access: http 503")
	}
	r.a.opts.Refresh = refresh
	other := New(Options{APIURL: r.api, Installations: r.x, Refresh: refresh, Dedupe: &inboxtest.Dedupe{}})
	if err := other.Start(t.Context(), &inboxtest.Inbox{}); err != nil {
		t.Fatal(err)
	}
	th := chat.Thread{Platform: "slack", Key: Key("T2", "C2", "1.1"), Channel: "C2", ThreadID: "1.1"}
	for i, a := range []*Adapter{r.a, r.a, r.a, other, other} {
		if _, err := a.PostPlan(ctx, th, plan()); err != nil {
			t.Errorf("call %d: %v; want it sent with the token in hand", i, err)
		}
	}
	if got := n.Load(); got != 1 {
		t.Errorf("%d refresh attempts, want 1 (then a backoff across replicas)", got)
	}
	if got := len(r.fake.Calls("chat.postMessage")); got != 5 {
		t.Errorf("%d chat.postMessage calls, want 5", got)
	}
}

// TestFilesFetchedWithTheThreadsToken: files shared into a Slack Connect
// channel name their uploader's workspace in their address; they are
// fetched with the token of the thread's workspace, whether the
// uploader's has pinplan installed too (T3) or not (T9).
func TestFilesFetchedWithTheThreadsToken(t *testing.T) {
	r := newManyRig(t, false, fakeslack.Team{ID: "T2", Channels: []string{"C2"}}, fakeslack.Team{ID: "T3", Channels: []string{"C3"}})
	two := r.install(t, fakeslack.Install{TeamID: "T2"})
	r.install(t, fakeslack.Install{TeamID: "T3"})
	files := []any{r.fake.ShareFile("T3", "C2", "three.txt", "text/plain", []byte("of T3")),
		r.fake.ShareFile("T9", "C2", "nine.txt", "text/plain", []byte("of T9"))}
	push(t, r.a, r.fake, "EvF1", map[string]any{"type": "app_mention", "user": "U1", "channel": "C2", "ts": "5.1",
		"text": "<@UBT2> read these", "files": files})
	r.a.queue.Wait(context.Background())
	var got []string
	for _, in := range r.rec.Incoming() {
		for _, f := range in.Files {
			raw, err := r.a.FetchFile(context.Background(), in.Thread.Key, f, 1<<20)
			got = append(got, string(raw))
			if err != nil {
				t.Errorf("%s: %v", f.Name, err)
			}
		}
	}
	if !slices.Equal(got, []string{"of T3", "of T9"}) {
		t.Errorf("fetched %q, want both files", got)
	}
	for _, f := range r.fake.FileFetches() {
		if f.Token != two.BotToken || !f.OK {
			t.Errorf("fetch of %s: with T2's token %v, served %v; want T2's, the thread's", f.Path, f.Token == two.BotToken, f.OK)
		}
	}
}

// TestUninstallSeenElsewhereCachedAsGone: a replica that did not get
// the uninstall events meets token_revoked once; its later calls for
// the workspace fail at once, without reading every installation and
// asking team.info of each org install, until recheckGone, when a
// reinstall made meanwhile serves again.
func TestUninstallSeenElsewhereCachedAsGone(t *testing.T) {
	r := newManyRig(t, false, fakeslack.Team{ID: "T2", Channels: []string{"C2"}}, fakeslack.Team{ID: "T5", EnterpriseID: "E1", Channels: []string{"C5"}})
	r.install(t, fakeslack.Install{TeamID: "T2"})
	r.install(t, fakeslack.Install{EnterpriseID: "E1", Enterprise: true})
	other := New(Options{APIURL: r.api, Installations: r.x, Dedupe: &inboxtest.Dedupe{}, Now: r.a.opts.Now})
	if err := other.Start(t.Context(), &inboxtest.Inbox{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	th := chat.Thread{Platform: "slack", Key: Key("T2", "C2", "1.1"), Channel: "C2", ThreadID: "1.1"}
	if err := other.Reply(ctx, th, "", "before"); err != nil {
		t.Fatal(err)
	}
	for _, body := range r.fake.Uninstall("T2") {
		postEvent(t, r.a, body) // this replica only
	}
	if err := other.Reply(ctx, th, "", "revoked"); err == nil {
		t.Error("a reply with a revoked token succeeded")
	}
	if err := other.Reply(ctx, th, "", "after"); !errors.Is(err, ErrUninstalled) { // reads the store once
		t.Errorf("the call after token_revoked: %v, want ErrUninstalled", err)
	}
	calls := len(r.fake.Calls(""))
	for i := range 3 {
		if err := other.Reply(ctx, th, "", "after"); !errors.Is(err, ErrUninstalled) {
			t.Errorf("call %d after the uninstall: %v, want ErrUninstalled", i, err)
		}
	}
	if n := len(r.fake.Calls("")); n != calls {
		t.Errorf("%d calls to Slack (team.info: %d) for an uninstalled workspace, want none", n-calls, len(r.fake.Calls("team.info")))
	}
	r.installQuietly(t, fakeslack.Install{TeamID: "T2"})
	r.later(recheckGone + time.Second)
	if err := other.Reply(ctx, th, "", "again"); err != nil {
		t.Errorf("after a reinstall: %v", err)
	}
}

// TestUninstallAgainAfterReinstallElsewhere: uninstalled here,
// installed again through another replica, and uninstalled again within
// recheckGone: the new installation is deleted too, and told.
func TestUninstallAgainAfterReinstallElsewhere(t *testing.T) {
	r := newManyRig(t, false, fakeslack.Team{ID: "T2", Channels: []string{"C2"}})
	r.install(t, fakeslack.Install{TeamID: "T2"})
	ctx := context.Background()
	for _, body := range r.fake.Uninstall("T2") {
		postEvent(t, r.a, body)
	}
	r.installQuietly(t, fakeslack.Install{TeamID: "T2"})
	for _, body := range r.fake.Uninstall("T2") {
		postEvent(t, r.a, body)
	}
	if in, err := r.x.Get(ctx, "T2"); !errors.Is(err, install.ErrNotInstalled) {
		t.Errorf("the second installation after its uninstall: %+v, %v; want it deleted", in.ID, err)
	}
	r.mu.Lock()
	told := slices.Clone(r.uninstalled)
	r.mu.Unlock()
	if !slices.Equal(told, []string{"T2:T2", "T2:T2"}) {
		t.Errorf("Uninstalled told %v, want T2 twice", told)
	}
}

// TestTeamAccessRevoked: an org admin removes the org-wide install from
// one workspace (team_access_revoked): that workspace is no longer
// served by the org's token, here or on another replica, its sessions
// are told to stop, and the org's other workspace goes on.
func TestTeamAccessRevoked(t *testing.T) {
	r := newManyRig(t, false, fakeslack.Team{ID: "T5", EnterpriseID: "E1", Channels: []string{"C5"}},
		fakeslack.Team{ID: "T6", EnterpriseID: "E1", Channels: []string{"C6"}})
	r.install(t, fakeslack.Install{EnterpriseID: "E1", Enterprise: true})
	ctx := context.Background()
	five := r.mention(t, "Ev5", "C5", "UBE1", "5.1")
	six := r.mention(t, "Ev6", "C6", "UBE1", "6.1")
	for _, body := range r.fake.RevokeTeamAccess("E1", "T5") {
		postEvent(t, r.a, body)
	}
	calls := len(r.fake.Calls(""))
	if err := r.a.Reply(ctx, five, "", "after"); !errors.Is(err, ErrUninstalled) {
		t.Errorf("a reply in the removed workspace: %v, want ErrUninstalled", err)
	}
	if n := len(r.fake.Calls("")); n != calls {
		t.Errorf("%d calls to Slack for the removed workspace", n-calls)
	}
	if err := r.a.Reply(ctx, six, "", "still"); err != nil {
		t.Errorf("the org's other workspace: %v", err)
	}
	if _, err := r.x.Get(ctx, "E1"); err != nil {
		t.Errorf("the org install: %v, want it kept", err)
	}
	r.mu.Lock()
	told := slices.Clone(r.uninstalled)
	r.mu.Unlock()
	if !slices.Equal(told, []string{"E1:T5"}) {
		t.Errorf("Uninstalled told %v, want E1:T5", told)
	}
	other := New(Options{APIURL: r.api, Installations: r.x, Dedupe: &inboxtest.Dedupe{}})
	if err := other.Start(t.Context(), &inboxtest.Inbox{}); err != nil {
		t.Fatal(err)
	}
	other.space("T5").learn("E1", "") // as an event of T5 told it
	if err := other.Reply(ctx, five, "", "elsewhere"); !errors.Is(err, ErrUninstalled) {
		t.Errorf("another replica's reply in the removed workspace: %v, want ErrUninstalled", err)
	}
}

// TestUninstallOlderThanTheInstallationKeepsIt: an uninstall event sent
// before the installation in the store was made (a late delivery, the
// workspace installed again since) deletes nothing and stops nothing.
func TestUninstallOlderThanTheInstallationKeepsIt(t *testing.T) {
	r := newManyRig(t, false, fakeslack.Team{ID: "T2", Channels: []string{"C2"}})
	r.install(t, fakeslack.Install{TeamID: "T2"})
	ctx := context.Background()
	bodies := r.fake.Uninstall("T2")
	again := r.installQuietly(t, fakeslack.Install{TeamID: "T2"})
	again.InstalledAt = time.Now().Add(time.Minute) // made well after the events were sent
	if err := r.x.Save(ctx, again); err != nil {
		t.Fatal(err)
	}
	r.a.Installed(again)
	for _, body := range bodies {
		postEvent(t, r.a, body)
	}
	if _, err := r.x.Get(ctx, "T2"); err != nil {
		t.Errorf("the newer installation: %v, want it kept", err)
	}
	th := chat.Thread{Platform: "slack", Key: Key("T2", "C2", "1.1"), Channel: "C2", ThreadID: "1.1"}
	if err := r.a.Reply(ctx, th, "", "still here"); err != nil {
		t.Errorf("a reply after a stale uninstall: %v", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.uninstalled) != 0 {
		t.Errorf("Uninstalled told %v, want nothing", r.uninstalled)
	}
}

// TestTeamAccessGrantedAgain: a workspace the org-wide install was
// removed from and then given again (team_access_granted) is served by
// the org's token again, here at once and on another replica once it
// reads the store again (recheckGone).
func TestTeamAccessGrantedAgain(t *testing.T) {
	r := newManyRig(t, false, fakeslack.Team{ID: "T5", EnterpriseID: "E1", Channels: []string{"C5"}})
	r.install(t, fakeslack.Install{EnterpriseID: "E1", Enterprise: true})
	ctx := context.Background()
	five := r.mention(t, "Ev5", "C5", "UBE1", "5.1")
	other := New(Options{APIURL: r.api, Installations: r.x, Dedupe: &inboxtest.Dedupe{}, Now: r.a.opts.Now})
	if err := other.Start(t.Context(), &inboxtest.Inbox{}); err != nil {
		t.Fatal(err)
	}
	other.space("T5").learn("E1", "")
	for _, body := range r.fake.RevokeTeamAccess("E1", "T5") {
		postEvent(t, r.a, body)
	}
	if err := other.Reply(ctx, five, "", "removed"); err == nil {
		t.Error("another replica's reply in the removed workspace succeeded")
	}
	for _, body := range r.fake.GrantTeamAccess("E1", "T5") {
		postEvent(t, r.a, body)
	}
	if err := r.a.Reply(ctx, five, "", "back"); err != nil {
		t.Errorf("a reply after team_access_granted: %v", err)
	}
	r.later(recheckGone + time.Second)
	if err := other.Reply(ctx, five, "", "back elsewhere"); err != nil {
		t.Errorf("another replica's reply after team_access_granted: %v", err)
	}
}

// TestDisplayNamesPerWorkspace: a user's display name is cached per
// workspace: what users.info answered with one workspace's token (here
// a failure, cached as no name) is not taken for another's.
func TestDisplayNamesPerWorkspace(t *testing.T) {
	r := newManyRig(t, false, fakeslack.Team{ID: "T2", Channels: []string{"C2"}}, fakeslack.Team{ID: "T3", Channels: []string{"C3"}})
	r.install(t, fakeslack.Install{TeamID: "T2"})
	r.install(t, fakeslack.Install{TeamID: "T3"})
	r.fake.AddUser("U777", "Rita")
	r.fake.Fail("users.info", "user_not_found", "user_not_found") // T2's token sees neither the author nor U777
	push(t, r.a, r.fake, "EvN2", map[string]any{"type": "app_mention", "user": "U1", "channel": "C2", "ts": "7.1", "text": "<@UBT2> ask <@U777>"})
	r.a.queue.Wait(context.Background())
	push(t, r.a, r.fake, "EvN3", map[string]any{"type": "app_mention", "user": "U1", "channel": "C3", "ts": "7.2", "text": "<@UBT3> ask <@U777>"})
	r.a.queue.Wait(context.Background())
	got := map[string]string{}
	for _, in := range r.rec.Incoming() {
		got[in.Thread.Channel] = in.Text
	}
	if got["C2"] != "ask <@U777>" || got["C3"] != "ask @Rita" {
		t.Errorf("got C2 %q, C3 %q; want ask <@U777> and ask @Rita", got["C2"], got["C3"])
	}
}

// TestWorkspaceUninstallKeepsItsOrgsInstall: a workspace of an org with
// an installation of its own, besides the org-wide one, removes its own
// app: its installation goes, the org's stays and serves the org's other
// workspaces, and only that workspace is told.
func TestWorkspaceUninstallKeepsItsOrgsInstall(t *testing.T) {
	r := newManyRig(t, false, fakeslack.Team{ID: "T5", EnterpriseID: "E1", Channels: []string{"C5"}},
		fakeslack.Team{ID: "T6", EnterpriseID: "E1", Channels: []string{"C6"}})
	r.install(t, fakeslack.Install{EnterpriseID: "E1", Enterprise: true})
	r.install(t, fakeslack.Install{TeamID: "T5", EnterpriseID: "E1"})
	ctx := context.Background()
	six := r.mention(t, "EvC6", "C6", "UBE1", "2.000006")
	if _, err := r.a.PostPlan(ctx, six, plan()); err != nil {
		t.Fatalf("T6 by the org's install: %v", err)
	}
	for _, body := range r.fake.Uninstall("T5") {
		postEvent(t, r.a, body)
	}
	r.mu.Lock()
	told := slices.Clone(r.uninstalled)
	r.mu.Unlock()
	_, errOwn := r.x.Get(ctx, "T5")
	_, errOrg := r.x.Get(ctx, "E1")
	if !errors.Is(errOwn, install.ErrNotInstalled) || errOrg != nil || !slices.Equal(told, []string{"T5:T5"}) {
		t.Errorf("T5's own uninstall: its installation %v, the org's %v, told %v; want T5's deleted, E1's kept, T5:T5 told", errOwn, errOrg, told)
	}
	if _, err := r.a.PostPlan(ctx, six, plan()); err != nil {
		t.Errorf("T6 after T5's own uninstall: %v", err)
	}
}

// TestUninstallToldWhereTheStoreSawItGone: one replica handles
// tokens_revoked and deletes the installation; another, whose call found
// the store empty already, gets app_uninstalled: it still tells
// Uninstalled, to stop the turns it runs there.
func TestUninstallToldWhereTheStoreSawItGone(t *testing.T) {
	r := newManyRig(t, false, fakeslack.Team{ID: "T2", Channels: []string{"C2"}})
	r.install(t, fakeslack.Install{TeamID: "T2"})
	var told []string
	var mu sync.Mutex
	other := New(Options{APIURL: r.api, SigningSecret: "secret", Installations: r.x, Dedupe: &inboxtest.Dedupe{}, Now: r.a.opts.Now,
		Uninstalled: func(id string, teams []string) { mu.Lock(); told = append(told, id); mu.Unlock() }})
	if err := other.Start(t.Context(), &inboxtest.Inbox{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Wait)
	ctx := context.Background()
	th := chat.Thread{Platform: "slack", Key: Key("T2", "C2", "1.1"), Channel: "C2", ThreadID: "1.1"}
	if err := other.Reply(ctx, th, "", "before"); err != nil {
		t.Fatal(err)
	}
	bodies := r.fake.Uninstall("T2") // tokens_revoked, then app_uninstalled
	postEvent(t, r.a, bodies[0])
	if err := other.Reply(ctx, th, "", "revoked"); err == nil {
		t.Error("a reply with a revoked token succeeded")
	}
	if err := other.Reply(ctx, th, "", "after"); !errors.Is(err, ErrUninstalled) { // the store has none now
		t.Fatalf("the call after the uninstall elsewhere: %v, want ErrUninstalled", err)
	}
	postEvent(t, other, bodies[1])
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(told, []string{"T2"}) {
		t.Errorf("the replica that got app_uninstalled told %v, want T2", told)
	}
}

// TestOrgProbeFailureIsNotAnUninstall: a session of an org's workspace
// that no event named yet is matched to the org-wide install by
// team.info; a team.info that fails (a 500) says nothing of the
// install: that call fails, and the next one asks again and is served,
// not refused as uninstalled for recheckGone.
func TestOrgProbeFailureIsNotAnUninstall(t *testing.T) {
	r := newManyRig(t, false, fakeslack.Team{ID: "T6", EnterpriseID: "E1", Channels: []string{"C6"}})
	r.install(t, fakeslack.Install{EnterpriseID: "E1", Enterprise: true})
	resumed := chat.Thread{Platform: "slack", Key: Key("T6", "C6", "3.1"), Channel: "C6", ThreadID: "3.1"}
	r.fake.FailHTTP("team.info", http.StatusInternalServerError, 1)
	ctx := context.Background()
	_, err := r.a.PostPlan(ctx, resumed, plan())
	t.Logf("the post while team.info fails: %v", err)
	if err == nil || errors.Is(err, ErrUninstalled) {
		t.Errorf("a post while team.info fails: %v, want a failure that is not ErrUninstalled", err)
	}
	if _, err := r.a.PostPlan(ctx, resumed, plan()); err != nil {
		t.Errorf("the next post: %v, want it served by the org's install", err)
	}
}
