package fakediscord

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
)

// restSession is a discordgo session for REST calls to the fake.
func restSession(t *testing.T, base string) *discordgo.Session {
	t.Helper()
	target, _ := url.Parse(base)
	dg, err := discordgo.New("Bot test-token")
	if err != nil {
		t.Fatal(err)
	}
	dg.Client = &http.Client{Transport: rewrite{target}}
	dg.ShouldRetryOnRateLimit = false
	return dg
}

func restCode(err error) int {
	var re *discordgo.RESTError
	if errors.As(err, &re) && re.Message != nil {
		return re.Message.Code
	}
	return 0
}

func forumFixture(t *testing.T) (*Server, string) {
	t.Helper()
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	if err := s.AddForum("F1", "G1", Tag{Name: "planning"}, Tag{Name: "done", EmojiName: "✅"}, Tag{Name: "triaged", Moderated: true}); err != nil {
		t.Fatal(err)
	}
	return s, serve(t, s)
}

func TestAddForumLimits(t *testing.T) {
	s := &Server{}
	var tags []Tag
	for i := range 21 {
		tags = append(tags, Tag{Name: "t" + string(rune('a'+i))})
	}
	if err := s.AddForum("F1", "G1", tags...); !errors.Is(err, ErrForum) {
		t.Errorf("21 tags: %v, want ErrForum", err)
	}
	if err := s.AddForum("F2", "G1", tags[:20]...); err != nil {
		t.Errorf("20 tags: %v", err)
	}
	if err := s.AddForum("F3", "G1", Tag{Name: strings.Repeat("x", 21)}); !errors.Is(err, ErrForum) {
		t.Errorf("a 21-character tag name: %v, want ErrForum", err)
	}
	if err := s.AddMediaChannel("M1", "G1", Tag{Name: "pics"}); err != nil {
		t.Fatal(err)
	}
	dg := restSession(t, serve(t, s))
	for id, typ := range map[string]discordgo.ChannelType{"F2": discordgo.ChannelTypeGuildForum, "M1": discordgo.ChannelTypeGuildMedia} {
		ch, err := dg.Channel(id)
		if err != nil || ch.Type != typ {
			t.Fatalf("GET %s: %v %+v, want type %d", id, err, ch, typ)
		}
		for _, tag := range ch.AvailableTags {
			if tag.ID == "" {
				t.Errorf("%s: a tag without an id: %+v", id, tag)
			}
		}
	}
	if ch, _ := dg.Channel("F2"); len(ch.AvailableTags) != 20 {
		t.Errorf("F2 has %d tags, want 20", len(ch.AvailableTags))
	}
}

func TestEditForumTags(t *testing.T) {
	s, base := forumFixture(t)
	dg := restSession(t, base)
	tags := append(s.Tags("F1"), Tag{Name: "waiting"})
	var edit []discordgo.ForumTag
	for _, tag := range tags {
		edit = append(edit, discordgo.ForumTag{ID: tag.ID, Name: tag.Name, Moderated: tag.Moderated, EmojiName: tag.EmojiName})
	}
	_, err := dg.ChannelEditComplex("F1", &discordgo.ChannelEdit{AvailableTags: &edit})
	if restCode(err) != codeMissingPerms {
		t.Fatalf("editing tags without MANAGE_CHANNELS: %v, want %d", err, codeMissingPerms)
	}
	s.SetPermissions("G1", BotID, DefaultBotPermissions|PermManageChannels)
	ch, err := dg.ChannelEditComplex("F1", &discordgo.ChannelEdit{AvailableTags: &edit})
	if err != nil || len(ch.AvailableTags) != 4 || s.TagID("F1", "waiting") == "" {
		t.Fatalf("editing tags with MANAGE_CHANNELS: %v %+v", err, ch)
	}
	long := append(slices.Clone(edit), discordgo.ForumTag{Name: strings.Repeat("x", 21)})
	if _, err := dg.ChannelEditComplex("F1", &discordgo.ChannelEdit{AvailableTags: &long}); restCode(err) != codeInvalidForm {
		t.Errorf("a 21-character tag name: %v, want %d", err, codeInvalidForm)
	}
	var many []discordgo.ForumTag
	for i := range 21 {
		many = append(many, discordgo.ForumTag{Name: "t" + string(rune('a'+i))})
	}
	if _, err := dg.ChannelEditComplex("F1", &discordgo.ChannelEdit{AvailableTags: &many}); restCode(err) != codeInvalidForm {
		t.Errorf("21 tags: %v, want %d", err, codeInvalidForm)
	}
	if got := len(s.Tags("F1")); got != 4 {
		t.Errorf("a refused edit changed the tags: %d", got)
	}
}

func TestPost(t *testing.T) {
	s, base := forumFixture(t)
	g := dialGateway(t, base)
	g.identify(allIntents)
	g.dispatch("GUILD_CREATE")
	planning := s.TagID("F1", "planning")
	id, err := s.Post("F1", "U1", "Fix the build", "it is red", true, planning)
	if err != nil {
		t.Fatal(err)
	}
	tc := g.dispatch("THREAD_CREATE")["d"].(map[string]any)
	if tc["id"] != id || tc["parent_id"] != "F1" || tc["type"] != 11.0 || tc["newly_created"] != true || tc["owner_id"] != "U1" {
		t.Errorf("THREAD_CREATE %v", tc)
	}
	if tags, _ := tc["applied_tags"].([]any); len(tags) != 1 || tags[0] != planning {
		t.Errorf("THREAD_CREATE applied_tags %v", tc["applied_tags"])
	}
	mc := g.dispatch("MESSAGE_CREATE")["d"].(map[string]any)
	if mc["id"] != id || mc["channel_id"] != id || !strings.Contains(mc["content"].(string), "<@"+BotID+">") {
		t.Errorf("starter MESSAGE_CREATE %v", mc)
	}
	ch, err := restSession(t, base).Channel(id)
	if err != nil || ch.ParentID != "F1" || !slices.Equal(ch.AppliedTags, []string{planning}) || ch.ThreadMetadata == nil || ch.ThreadMetadata.Archived {
		t.Errorf("GET the post: %v %+v", err, ch)
	}

	triaged := s.TagID("F1", "triaged")
	for name, tags := range map[string][]string{
		"an unknown tag":                     {"123"},
		"six tags":                           {planning, planning, planning, planning, planning, planning},
		"a moderated tag, no MANAGE_THREADS": {triaged},
	} {
		if _, err := s.Post("F1", "U1", "x", "y", false, tags...); !errors.Is(err, ErrForum) {
			t.Errorf("a post with %s: %v, want ErrForum", name, err)
		}
	}
	s.SetOverwrite("F1", "MUTED", 0, PermSendMessages)
	if _, err := s.Post("F1", "MUTED", "x", "y", false); !errors.Is(err, ErrForum) {
		t.Errorf("a post by a user without SEND_MESSAGES: %v, want ErrForum", err)
	}
	if _, err := s.Post("F1", "U1", strings.Repeat("x", 101), "y", false); !errors.Is(err, ErrForum) {
		t.Errorf("a 101-character title: %v, want ErrForum", err)
	}
	if _, err := s.Post("C1", "U1", "x", "y", false); !errors.Is(err, ErrForum) {
		t.Errorf("a post in a text channel: %v, want ErrForum", err)
	}
	s.SetPermissions("G1", "MOD", DefaultPermissions|PermManageThreads)
	if _, err := s.Post("F1", "MOD", "x", "y", false, triaged); err != nil {
		t.Errorf("a moderator's post with a moderated tag: %v", err)
	}
	if _, err := restSession(t, base).ChannelMessageSend("F1", "hi"); restCode(err) != codeNonText {
		t.Errorf("a message in the forum itself: %v, want %d", err, codeNonText)
	}
}

func TestPostTags(t *testing.T) {
	s, base := forumFixture(t)
	dg := restSession(t, base)
	planning, done, triaged := s.TagID("F1", "planning"), s.TagID("F1", "done"), s.TagID("F1", "triaged")
	id, err := s.Post("F1", "U1", "task", "do it", true, planning)
	if err != nil {
		t.Fatal(err)
	}
	set := func(tags ...string) error {
		_, err := dg.ChannelEditComplex(id, &discordgo.ChannelEdit{AppliedTags: &tags})
		return err
	}
	if err := set(done); restCode(err) != codeMissingPerms {
		t.Errorf("the bot re-tagging another's post without MANAGE_THREADS: %v, want %d", err, codeMissingPerms)
	}
	s.SetPermissions("G1", BotID, DefaultBotPermissions|PermManageThreads)
	g := dialGateway(t, base)
	g.identify(allIntents)
	g.dispatch("GUILD_CREATE")
	if err := set(done, triaged); err != nil {
		t.Fatalf("re-tagging with MANAGE_THREADS: %v", err)
	}
	if d := g.dispatch("THREAD_UPDATE")["d"].(map[string]any); len(d["applied_tags"].([]any)) != 2 {
		t.Errorf("THREAD_UPDATE %v", d)
	}
	if err := set("123"); restCode(err) != codeInvalidForm {
		t.Errorf("an unknown tag: %v, want %d", err, codeInvalidForm)
	}
	if err := set(done, done, done, done, done, done); restCode(err) != codeInvalidForm {
		t.Errorf("six tags: %v, want %d", err, codeInvalidForm)
	}
	// The post's author may re-tag it, but not touch a moderated tag.
	if err := s.SetPostTags(id, "U1", done); !errors.Is(err, ErrForum) {
		t.Errorf("the author removing a moderated tag: %v, want ErrForum", err)
	}
	if err := s.SetPostTags(id, "U1", done, triaged, planning); err != nil {
		t.Errorf("the author adding a tag: %v", err)
	}
	if err := s.SetPostTags(id, "U2", done); !errors.Is(err, ErrForum) {
		t.Errorf("another user re-tagging: %v, want ErrForum", err)
	}
	want := [][]string{{planning}, {done, triaged}, {done, triaged, planning}}
	if got := s.TagHistory(id); len(got) != len(want) || !slices.Equal(got[1], want[1]) || !slices.Equal(got[2], want[2]) {
		t.Errorf("TagHistory %v, want %v", got, want)
	}
}

func TestClosedPost(t *testing.T) {
	s, base := forumFixture(t)
	dg := restSession(t, base)
	id, _ := s.Post("F1", "U1", "task", "do it", true)
	g := dialGateway(t, base)
	g.identify(allIntents)
	g.dispatch("GUILD_CREATE")
	if err := s.ClosePost(id, "U2"); !errors.Is(err, ErrForum) {
		t.Errorf("another user closing the post: %v, want ErrForum", err)
	}
	if err := s.ClosePost(id, "U1"); err != nil {
		t.Fatal(err)
	}
	meta := func(d map[string]any) map[string]any { return d["thread_metadata"].(map[string]any) }
	if d := g.dispatch("THREAD_UPDATE")["d"].(map[string]any); meta(d)["archived"] != true {
		t.Errorf("close: THREAD_UPDATE %v", d)
	}
	if err := s.ReopenPost(id, "U1"); err != nil {
		t.Fatal(err)
	}
	if d := g.dispatch("THREAD_UPDATE")["d"].(map[string]any); meta(d)["archived"] != false {
		t.Errorf("reopen: THREAD_UPDATE %v", d)
	}
	// The bot's message unarchives a closed post that is not locked.
	s.ClosePost(id, "U1")
	g.dispatch("THREAD_UPDATE")
	if _, err := dg.ChannelMessageSend(id, "still here"); err != nil {
		t.Fatalf("a message in a closed post: %v", err)
	}
	if d := g.dispatch("THREAD_UPDATE")["d"].(map[string]any); meta(d)["archived"] != false {
		t.Errorf("send: THREAD_UPDATE %v", d)
	}
	g.dispatch("MESSAGE_CREATE")
	// A locked one refuses it without MANAGE_THREADS, and only a
	// moderator reopens it.
	s.LockThread(id)
	if _, err := dg.ChannelMessageSend(id, "x"); restCode(err) != codeThreadArchived {
		t.Errorf("a message in a locked post: %v, want %d", err, codeThreadArchived)
	}
	if err := s.ReopenPost(id, "U1"); !errors.Is(err, ErrForum) {
		t.Errorf("the author reopening a locked post: %v, want ErrForum", err)
	}
	archived := false
	if _, err := dg.ChannelEditComplex(id, &discordgo.ChannelEdit{Archived: &archived}); restCode(err) != codeMissingPerms {
		t.Errorf("the bot unarchiving a locked post: %v, want %d", err, codeMissingPerms)
	}
	s.SetPermissions("G1", BotID, DefaultBotPermissions|PermManageThreads)
	if _, err := dg.ChannelMessageSend(id, "moderator"); err != nil {
		t.Errorf("a message in a locked post with MANAGE_THREADS: %v", err)
	}
	// A change to an archived thread must unarchive it.
	s.ClosePost(id, "U1")
	name := "renamed"
	if _, err := dg.ChannelEditComplex(id, &discordgo.ChannelEdit{Name: name}); restCode(err) != codeThreadArchived {
		t.Errorf("renaming an archived post: %v, want %d", err, codeThreadArchived)
	}
}

// TestBotsOwnThread: the bot archives and renames a thread it started
// without MANAGE_THREADS, but not one a person started.
func TestBotsOwnThread(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	base := serve(t, s)
	dg := restSession(t, base)
	m, err := dg.ChannelMessageSend("C1", "plan")
	if err != nil {
		t.Fatal(err)
	}
	th, err := dg.MessageThreadStartComplex("C1", m.ID, &discordgo.ThreadStart{Name: "run", AutoArchiveDuration: 60})
	if err != nil || th.OwnerID != BotID {
		t.Fatalf("start a thread: %v %+v", err, th)
	}
	archived := true
	if _, err := dg.ChannelEditComplex(th.ID, &discordgo.ChannelEdit{Name: "run 2", Archived: &archived}); err != nil {
		t.Errorf("the bot archiving its own thread: %v", err)
	}
	locked := true
	archived = false
	if _, err := dg.ChannelEditComplex(th.ID, &discordgo.ChannelEdit{Archived: &archived, Locked: &locked}); restCode(err) != codeMissingPerms {
		t.Errorf("the bot locking without MANAGE_THREADS: %v, want %d", err, codeMissingPerms)
	}
	s.AddForum("F1", "G1")
	post, _ := s.Post("F1", "U1", "a person's", "text", false)
	archived = true
	if _, err := dg.ChannelEditComplex(post, &discordgo.ChannelEdit{Archived: &archived}); restCode(err) != codeMissingPerms {
		t.Errorf("the bot closing a person's post without MANAGE_THREADS: %v, want %d", err, codeMissingPerms)
	}
}

// TestBotStartsPost: the bot's own post in a forum, as discordgo makes
// one.
func TestBotStartsPost(t *testing.T) {
	s, base := forumFixture(t)
	dg := restSession(t, base)
	g := dialGateway(t, base)
	g.identify(allIntents)
	g.dispatch("GUILD_CREATE")
	planning := s.TagID("F1", "planning")
	th, err := dg.ForumThreadStartComplex("F1", &discordgo.ThreadStart{Name: "nightly", AppliedTags: []string{planning}},
		&discordgo.MessageSend{Content: "the plan"})
	if err != nil || th.ParentID != "F1" || th.OwnerID != BotID || !slices.Equal(th.AppliedTags, []string{planning}) {
		t.Fatalf("ForumThreadStartComplex: %v %+v", err, th)
	}
	if d := g.dispatch("THREAD_CREATE")["d"].(map[string]any); d["id"] != th.ID {
		t.Errorf("THREAD_CREATE %v", d)
	}
	if d := g.dispatch("MESSAGE_CREATE")["d"].(map[string]any); d["id"] != th.ID || d["channel_id"] != th.ID {
		t.Errorf("the starter's MESSAGE_CREATE %v", d)
	}
	if _, err := dg.ForumThreadStartComplex("F1", &discordgo.ThreadStart{Name: "x", AppliedTags: []string{s.TagID("F1", "triaged")}},
		&discordgo.MessageSend{Content: "y"}); restCode(err) != codeMissingPerms {
		t.Errorf("a moderated tag without MANAGE_THREADS: %v, want %d", err, codeMissingPerms)
	}
	if _, err := dg.ForumThreadStartComplex("F1", &discordgo.ThreadStart{Name: "x"}, &discordgo.MessageSend{}); restCode(err) != codeEmptyMessage {
		t.Errorf("an empty starter: %v, want %d", err, codeEmptyMessage)
	}
	if _, err := dg.ForumThreadStartComplex("C1", &discordgo.ThreadStart{Name: "x"}, &discordgo.MessageSend{Content: "y"}); restCode(err) != codeWrongChannelType {
		t.Errorf("a post in a text channel: %v, want %d", err, codeWrongChannelType)
	}
}

// TestArchiveTimestamps: a thread's THREAD_UPDATE carries what tells
// Discord's archive after inactivity from a person's close, as Discord's
// does: last_message_id (a snowflake with its time), the
// auto_archive_duration and archive_timestamp, when the archive state
// last changed.
func TestArchiveTimestamps(t *testing.T) {
	s, base := forumFixture(t)
	id, _ := s.Post("F1", "U1", "task", "do it", true)
	last := s.UserMessage(id, "U1", "more", false)
	g := dialGateway(t, base)
	g.identify(allIntents)
	g.dispatch("GUILD_CREATE")
	meta := func(d map[string]any) (time.Time, time.Duration) {
		t.Helper()
		md := d["thread_metadata"].(map[string]any)
		at, err := time.Parse(time.RFC3339Nano, md["archive_timestamp"].(string))
		if err != nil {
			t.Fatal(err)
		}
		return at, time.Duration(md["auto_archive_duration"].(float64)) * time.Minute
	}
	sent := snowflakeTime(last)
	if sent.IsZero() || time.Since(sent) > time.Minute || time.Since(sent) < 0 {
		t.Fatalf("message id %s holds the time %s, want about now", last, sent)
	}
	s.ArchiveThread(id)
	d := g.dispatch("THREAD_UPDATE")["d"].(map[string]any)
	at, idle := meta(d)
	if d["last_message_id"] != last || idle != 24*time.Hour || at.Before(sent.Add(idle)) {
		t.Errorf("inactivity archive: last_message_id %v, duration %s, archive_timestamp %s; want %s, a day, a day after %s",
			d["last_message_id"], idle, at, last, sent)
	}
	s.UserMessage(id, "U1", "back", false) // unarchives it
	g.dispatch("THREAD_UPDATE")
	g.dispatch("MESSAGE_CREATE")
	if err := s.ClosePost(id, "U1"); err != nil {
		t.Fatal(err)
	}
	d = g.dispatch("THREAD_UPDATE")["d"].(map[string]any)
	if at, idle := meta(d); !at.Before(snowflakeTime(d["last_message_id"].(string)).Add(idle)) {
		t.Errorf("a person's close stamped %s, want before the post's inactivity ran out", at)
	}
}
