package discord

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/todo"
)

// logBuf is a log the adapter writes from several goroutines.
type logBuf struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuf) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

type forumRig struct {
	a    *Adapter
	fake *fakediscord.Server
	in   *clickInbox
	log  *logBuf
}

// newForumRig serves a fake with forum F1 (tags given), a text channel
// C1, and the adapter started with opts.
func newForumRig(t *testing.T, manage bool, opts Options, tags ...fakediscord.Tag) *forumRig {
	t.Helper()
	fake := &fakediscord.Server{HeartbeatInterval: time.Second}
	fake.AddChannel("C1", 0, "G1")
	if err := fake.AddForum("F1", "G1", tags...); err != nil {
		t.Fatal(err)
	}
	if manage {
		fake.SetPermissions("G1", fakediscord.BotID, fakediscord.DefaultBotPermissions|fakediscord.PermManageChannels|fakediscord.PermManageThreads)
	}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	r := &forumRig{fake: fake, in: &clickInbox{}, log: &logBuf{}}
	opts.Token, opts.APIURL = "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", srv.URL
	opts.Logger = slog.New(slog.NewTextHandler(r.log, nil))
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.Start(ctx, r.in); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); a.Close() })
	r.a = a
	return r
}

// waitFor polls cond until it holds, failing with what was seen.
func waitFor(t *testing.T, what string, cond func() bool, seen func() any) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 15 s; saw %v", what, seen())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tagNames are a post's tags by name.
func (r *forumRig) tagNames(post string) []string {
	var out []string
	for _, id := range r.fake.AppliedTags(post) {
		for _, t := range r.fake.Tags("F1") {
			if t.ID == id {
				out = append(out, t.Name)
			}
		}
	}
	return out
}

// waitTags waits until the post's tags are want, by name.
func (r *forumRig) waitTags(t *testing.T, post string, want ...string) {
	t.Helper()
	waitFor(t, "tags "+strings.Join(want, ","), func() bool { return slices.Equal(r.tagNames(post), want) },
		func() any { return r.tagNames(post) })
}

// idle waits for the adapter's queued work (tag changes) to be done.
func (r *forumRig) idle(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	r.a.queue.Wait(ctx)
	if ctx.Err() != nil {
		t.Fatal("the adapter's queue did not drain in 15 s")
	}
}

func forumPlan(state chat.PlanState) chat.Plan {
	return chat.Plan{Revision: 1, State: state, Stoppable: state == chat.StateWorking,
		Items: []todo.Item{{Content: "write the checklist", Status: todo.InProgress}}}
}

// TestForumPostMentionIsASession: a mention in a new post starts its
// session with the title and text as the task; the plan is posted and
// pinned in the post; the run tags move planning → working → done,
// made on the forum, beside a person's own tag.
func TestForumPostMentionIsASession(t *testing.T) {
	r := newForumRig(t, true, Options{}, fakediscord.Tag{Name: "bug"})
	bug := r.fake.TagID("F1", "bug")
	post, err := r.fake.Post("F1", "111", "Release checklist", "plan the v2 release", true, bug)
	if err != nil {
		t.Fatal(err)
	}
	got := waitTexts(t, &r.in.Inbox, 1)
	if want := "Release checklist\n\nplan the v2 release"; got[0] != want {
		t.Errorf("task %q, want %q", got[0], want)
	}
	in := r.in.Incoming()[0]
	if in.Thread.Key != Key(post) || in.Thread.Channel != post || in.MessageID != post || in.FollowUp {
		t.Errorf("incoming %+v, want the post's session, answering its starter", in)
	}
	r.waitTags(t, post, "bug", "planning")
	if calls := r.fake.Calls("GET channels/" + post); len(calls) != 0 {
		t.Errorf("%d lookups of a post the gateway told of", len(calls))
	}

	ctx := context.Background()
	th := in.Thread
	ref, err := r.a.PostPlan(ctx, th, forumPlan(chat.StateWorking))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.a.Pin(ctx, th, ref, true); err != nil {
		t.Fatal(err)
	}
	if pins := r.fake.Pinned(post); !slices.Contains(pins, ref.ID) {
		t.Errorf("pinned in the post: %v, want the plan %s", pins, ref.ID)
	}
	r.waitTags(t, post, "bug", "working")
	if err := r.a.EditPlan(ctx, th, ref, forumPlan(chat.StateDone)); err != nil {
		t.Fatal(err)
	}
	r.waitTags(t, post, "bug", "done")

	var history []string
	for _, h := range r.fake.TagHistory(post) {
		history = append(history, strings.Join(h, "+"))
	}
	want := []string{bug, bug + "+" + r.fake.TagID("F1", "planning"), bug + "+" + r.fake.TagID("F1", "working"), bug + "+" + r.fake.TagID("F1", "done")}
	if !slices.Equal(history, want) {
		t.Errorf("tag history %v, want %v: one change per run tag", history, want)
	}
	if n := len(r.fake.Tags("F1")); n != 1+len(runTags) {
		t.Errorf("the forum has %d tags, want bug and the %d run tags", n, len(runTags))
	}
}

// TestForumListedTakesPostsWithoutMention: a forum of Options.Forums
// takes every post; another forum's post without a mention starts
// nothing.
func TestForumListedTakesPostsWithoutMention(t *testing.T) {
	r := newForumRig(t, true, Options{Forums: []string{"F1"}})
	if err := r.fake.AddForum("F2", "G1"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.fake.Post("F2", "111", "Not for the bot", "chatter", false); err != nil {
		t.Fatal(err)
	}
	post, err := r.fake.Post("F1", "111", "Triage", "sort the inbox", false)
	if err != nil {
		t.Fatal(err)
	}
	got := waitTexts(t, &r.in.Inbox, 1)
	if len(got) != 1 || got[0] != "Triage\n\nsort the inbox" {
		t.Fatalf("handled %q, want only the listed forum's post", got)
	}
	if in := r.in.Incoming()[0]; in.Thread.Key != Key(post) || in.FollowUp {
		t.Errorf("incoming %+v, want a new session for post %s", in, post)
	}
	r.waitTags(t, post, "planning")
}

// TestForumWithoutPermissionLeavesTags: without Manage Channels and
// Manage Threads the sessions work and no tag is touched; the log says
// so once for the forum.
func TestForumWithoutPermissionLeavesTags(t *testing.T) {
	r := newForumRig(t, false, Options{})
	ctx := context.Background()
	var posts []string
	for i, title := range []string{"First", "Second"} {
		post, err := r.fake.Post("F1", "111", title, "a task", true)
		if err != nil {
			t.Fatal(err)
		}
		posts = append(posts, post)
		waitTexts(t, &r.in.Inbox, i+1)
		th := chat.Thread{Platform: "discord", Key: Key(post), Channel: post}
		ref, err := r.a.PostPlan(ctx, th, forumPlan(chat.StateWorking))
		if err != nil {
			t.Fatalf("plan in a forum the bot may not tag: %v", err)
		}
		if err := r.a.EditPlan(ctx, th, ref, forumPlan(chat.StateDone)); err != nil {
			t.Fatalf("plan edit in a forum the bot may not tag: %v", err)
		}
		r.idle(t)
	}
	for _, post := range posts {
		if h := r.fake.TagHistory(post); len(h) != 1 {
			t.Errorf("post %s tag history %v, want untouched", post, h)
		}
	}
	if n := len(r.fake.Tags("F1")); n != 0 {
		t.Errorf("the forum has %d tags, want none made", n)
	}
	if n := r.log.count("forum tags are left alone"); n != 1 {
		t.Errorf("said %d times that the forum's tags are left alone, want once", n)
	}

	// Granted the permissions, the forum changes (Discord sends
	// CHANNEL_UPDATE for a change of its overwrites): tags are tried
	// again at the next run tag.
	r.fake.SetPermissions("G1", fakediscord.BotID, fakediscord.DefaultBotPermissions|fakediscord.PermManageChannels|fakediscord.PermManageThreads)
	r.a.onChannelUpdate(nil, &discordgo.ChannelUpdate{Channel: &discordgo.Channel{ID: "F1", Type: discordgo.ChannelTypeGuildForum}})
	th := chat.Thread{Platform: "discord", Key: Key(posts[1]), Channel: posts[1]}
	if _, err := r.a.PostPlan(ctx, th, forumPlan(chat.StateWorking)); err != nil {
		t.Fatal(err)
	}
	r.waitTags(t, posts[1], "working")
}

// TestForumPostFullOfPeoplesTags: a post with 5 tags of people's keeps
// them, and the log says so once.
func TestForumPostFullOfPeoplesTags(t *testing.T) {
	var tags []fakediscord.Tag
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		tags = append(tags, fakediscord.Tag{Name: n})
	}
	r := newForumRig(t, true, Options{}, tags...)
	var ids []string
	for _, tg := range r.fake.Tags("F1") {
		ids = append(ids, tg.ID)
	}
	post, err := r.fake.Post("F1", "111", "Busy post", "a task", true, ids...)
	if err != nil {
		t.Fatal(err)
	}
	waitTexts(t, &r.in.Inbox, 1)
	th := chat.Thread{Platform: "discord", Key: Key(post), Channel: post}
	ctx := context.Background()
	ref, err := r.a.PostPlan(ctx, th, forumPlan(chat.StateWorking))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.a.EditPlan(ctx, th, ref, forumPlan(chat.StateDone)); err != nil {
		t.Fatal(err)
	}
	r.idle(t)
	if got := r.fake.AppliedTags(post); !slices.Equal(got, ids) {
		t.Errorf("tags %v, want the people's %v", got, ids)
	}
	if n := r.log.count("5 tags of people's"); n != 1 {
		t.Errorf("said %d times that the post is full, want once", n)
	}
}

// TestForumFullOfTags: a forum with room for one more tag gets the run
// tag wanted first; later ones it has no room for are left off, said
// once; a run tag of its own ("Done") is used as it is.
func TestForumFullOfTags(t *testing.T) {
	tags := []fakediscord.Tag{{Name: "Done"}}
	for i := range 18 {
		tags = append(tags, fakediscord.Tag{Name: "topic " + string(rune('a'+i))})
	}
	r := newForumRig(t, true, Options{}, tags...)
	post, err := r.fake.Post("F1", "111", "Crowded", "a task", true)
	if err != nil {
		t.Fatal(err)
	}
	waitTexts(t, &r.in.Inbox, 1)
	r.waitTags(t, post, "planning")
	th := chat.Thread{Platform: "discord", Key: Key(post), Channel: post}
	ctx := context.Background()
	ref, err := r.a.PostPlan(ctx, th, forumPlan(chat.StateWorking))
	if err != nil {
		t.Fatal(err)
	}
	r.idle(t)
	if got := r.tagNames(post); !slices.Equal(got, []string{"planning"}) {
		t.Errorf("tags %v with the forum full, want planning kept", got)
	}
	if err := r.a.EditPlan(ctx, th, ref, forumPlan(chat.StateDone)); err != nil {
		t.Fatal(err)
	}
	r.waitTags(t, post, "Done")
	if n := len(r.fake.Tags("F1")); n != 20 {
		t.Errorf("the forum has %d tags, want 20", n)
	}
	if n := r.log.count("no room for the run tags"); n != 1 {
		t.Errorf("said %d times that the forum is full, want once", n)
	}
}

// TestForumPostClosedStopsTheTurn: a person closing a post with a
// session stops its turn, as its owner pressing Stop; the stopped plan
// is shown all the same (the post reopened, as Discord reopens it for
// the bot's answer), its tag stopped; a post closed and reopened by a
// person goes on with its next message as a follow-up.
func TestForumPostClosedStopsTheTurn(t *testing.T) {
	r := newForumRig(t, true, Options{})
	post, err := r.fake.Post("F1", "111", "Long job", "crunch the numbers", true)
	if err != nil {
		t.Fatal(err)
	}
	waitTexts(t, &r.in.Inbox, 1)
	ctx := context.Background()
	th := chat.Thread{Platform: "discord", Key: Key(post), Channel: post}
	ref, err := r.a.PostPlan(ctx, th, forumPlan(chat.StateWorking))
	if err != nil {
		t.Fatal(err)
	}
	r.waitTags(t, post, "working")
	if err := r.fake.ClosePost(post, "111"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a stop", func() bool { return len(r.in.got()) == 1 }, func() any { return r.in.got() })
	c := r.in.got()[0]
	if action, _, _ := chat.ParseButtonID(c.Button); action != chat.ActionStop || c.UserID != "111" || c.Thread.Key != Key(post) {
		t.Errorf("click %+v, want Stop of %s by the post's owner", c, Key(post))
	}
	if err := r.a.EditPlan(ctx, th, ref, forumPlan(chat.StateStopped)); err != nil {
		t.Fatalf("the stopped plan in the closed post: %v\n%s", err, r.log.String())
	}
	r.waitTags(t, post, "stopped")

	if err := r.fake.ClosePost(post, "111"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a second stop", func() bool { return len(r.in.got()) == 2 }, func() any { return r.in.got() })
	if err := r.fake.ReopenPost(post, "111"); err != nil {
		t.Fatal(err)
	}
	r.fake.UserMessage(post, "111", "go on", false)
	got := waitTexts(t, &r.in.Inbox, 2)
	if in := r.in.Incoming()[1]; got[1] != "go on" || !in.FollowUp || in.Thread.Key != Key(post) {
		t.Errorf("after reopening: %+v, want the follow-up of the post's session", in)
	}
	if n := len(r.in.got()); n != 2 {
		t.Errorf("%d stops, want 2: one per close, none for reopening", n)
	}
}

// TestClosedByPerson: an archive stamped at or after the post's last
// activity plus its auto_archive_duration is Discord's, whatever this
// process saw of the post; an earlier one is a person's.
func TestClosedByPerson(t *testing.T) {
	created := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	snowflake := func(at time.Time) string {
		return strconv.FormatUint(uint64(at.UnixMilli()-discordEpoch)<<22, 10)
	}
	id := snowflake(created)
	lastMsg := snowflake(created.Add(time.Hour))
	archived := func(at time.Time, last string) forumPost {
		return forumPost{archived: true, autoArchive: day, archivedAt: at, last: last}
	}
	tests := []struct {
		name         string
		before, post forumPost
		want         bool
	}{
		{"closed within a day of the last message", forumPost{}, archived(created.Add(2*time.Hour), lastMsg), true},
		{"a day after the last message", forumPost{}, archived(created.Add(25*time.Hour), lastMsg), false},
		{"a day after creation, no message since", forumPost{}, archived(created.Add(day), ""), false},
		{"within a day of a reopening", forumPost{archivedAt: created.Add(30 * time.Hour)}, archived(created.Add(31*time.Hour), lastMsg), true},
		{"within a day of a message seen here", forumPost{active: created.Add(10 * time.Hour)}, archived(created.Add(26*time.Hour), lastMsg), true},
		{"no archive time", forumPost{}, forumPost{archived: true, autoArchive: day, last: lastMsg}, true},
		{"no duration", forumPost{}, forumPost{archived: true, archivedAt: created.Add(48 * time.Hour)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := closedByPerson(id, tt.before, tt.post); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestForumMentionLaterInAPost: a post that was no task becomes one
// when a later message in it mentions the bot (that message is the
// task); and a post whose plan is rendered before the adapter knew it
// (a session begun before a restart) is looked up and tagged.
func TestForumMentionLaterInAPost(t *testing.T) {
	r := newForumRig(t, true, Options{})
	post, err := r.fake.Post("F1", "111", "Idea", "maybe later", false)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the starter held", func() bool { return len(r.in.Held()) == 1 }, func() any { return r.in.Texts() })
	if _, ok := r.a.forums.post(post); ok {
		t.Errorf("post %s kept though it is no task", post)
	}
	r.fake.UserMessage(post, "222", "now do it", true)
	if got := waitTexts(t, &r.in.Inbox, 1); got[0] != "now do it" {
		t.Errorf("task %q, want the mentioning message", got[0])
	}
	r.waitTags(t, post, "planning")

	other, err := r.fake.Post("F1", "111", "Old task", "from before", false)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second starter held", func() bool { return slices.Contains(r.in.Held(), "Old task\n\nfrom before") },
		func() any { return r.in.Held() })
	th := chat.Thread{Platform: "discord", Key: Key(other), Channel: other}
	if _, err := r.a.PostPlan(context.Background(), th, forumPlan(chat.StateWorking)); err != nil {
		t.Fatal(err)
	}
	r.waitTags(t, other, "working")
	if n := len(r.fake.Calls("GET channels/" + other)); n != 1 {
		t.Errorf("%d lookups of the post, want 1", n)
	}
}

// TestMediaChannelPostIsASession: a media channel's post is a task as a
// forum's is.
func TestMediaChannelPostIsASession(t *testing.T) {
	r := newForumRig(t, true, Options{})
	if err := r.fake.AddMediaChannel("M1", "G1"); err != nil {
		t.Fatal(err)
	}
	post, err := r.fake.Post("M1", "111", "Cover art", "pick the best", true)
	if err != nil {
		t.Fatal(err)
	}
	if got := waitTexts(t, &r.in.Inbox, 1); got[0] != "Cover art\n\npick the best" {
		t.Errorf("task %q, want the title and the text", got[0])
	}
	waitFor(t, "the planning tag", func() bool {
		id := r.fake.TagID("M1", "planning")
		return id != "" && slices.Equal(r.fake.AppliedTags(post), []string{id})
	}, func() any { return r.fake.AppliedTags(post) })
}

// TestForumInactivityArchiveAfterRestart: a process that never saw a
// post's messages (restarted, or the shard moved to it) tells Discord's
// archive of the post after its inactivity from a person's close by the
// THREAD_UPDATE alone: the first leaves the session going, the second
// stops its turn.
func TestForumInactivityArchiveAfterRestart(t *testing.T) {
	fake := &fakediscord.Server{HeartbeatInterval: time.Second}
	if err := fake.AddForum("F1", "G1"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	in := &clickInbox{} // the store: it outlives the process
	start := func() (*Adapter, func()) {
		a, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", APIURL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		if err := a.Start(ctx, in); err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		stop := func() { once.Do(func() { cancel(); a.Close() }) }
		t.Cleanup(stop)
		return a, stop
	}
	_, stop := start()
	post, err := fake.Post("F1", "111", "Long job", "crunch the numbers", true)
	if err != nil {
		t.Fatal(err)
	}
	waitTexts(t, &in.Inbox, 1)
	stop()
	waitGateway(t, fake, 0)
	start() // knows the post from GUILD_CREATE alone
	waitGateway(t, fake, 1)

	fake.ArchiveThread(post) // Discord, after the post's inactivity
	fake.UserMessage(post, "111", "still there?", false)
	waitTexts(t, &in.Inbox, 2) // the archive was handled before it, on the post's queue
	if got := in.got(); len(got) != 0 {
		t.Fatalf("clicks %+v after Discord archived the post for its inactivity, want none", got)
	}
	if err := fake.ClosePost(post, "111"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a stop for the person's close", func() bool { return len(in.got()) == 1 }, func() any { return in.got() })
	if action, _, _ := chat.ParseButtonID(in.got()[0].Button); action != chat.ActionStop {
		t.Errorf("click %+v, want Stop", in.got()[0])
	}
}
