package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/internal/fakediscord"
)

// runTags are the tags pinplan moves a forum post through (DESIGN §20).
var runTags = []string{"planning", "working", "waiting", "done", "stopped"}

// runTagMoves is the run tag each of post's tag changes left on it, by
// name, each once in a row: what people saw the tag move through.
func runTagMoves(s *fakediscord.Server, forum, post string) []string {
	names := map[string]string{}
	for _, tag := range s.Tags(forum) {
		names[tag.ID] = strings.ToLower(tag.Name)
	}
	var out []string
	for _, applied := range s.TagHistory(post) {
		for _, id := range applied {
			if n := names[id]; slices.Contains(runTags, n) && (len(out) == 0 || out[len(out)-1] != n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// forumRig is a Discord rig with forums: F1 where the bot may manage
// tags, F2 listed in PINPLAN_DISCORD_FORUMS, F3 where it may not.
func forumRig(t *testing.T, delay time.Duration) *discordRig {
	t.Helper()
	r := newDiscordRig(t, 3, delay)
	for _, f := range []string{"F1", "F2", "F3"} {
		if err := r.dc.AddForum(f, "G1"); err != nil {
			t.Fatal(err)
		}
	}
	// Tags need Manage Channels (the forum's tags) and Manage Threads
	// (tags on people's posts): granted for the server, denied on F3.
	r.dc.SetPermissions("G1", fakediscord.BotID, fakediscord.DefaultBotPermissions|fakediscord.PermManageChannels|fakediscord.PermManageThreads)
	r.dc.SetOverwrite("F3", fakediscord.BotID, 0, fakediscord.PermManageChannels|fakediscord.PermManageThreads)
	r.env["PINPLAN_DISCORD_FORUMS"] = "F2"
	return r
}

// TestDiscordForumPostIsATask: through the binary, a mention in a new
// forum post starts a session whose plan is pinned in the post and whose
// tag moves planning → working → done; a post in a listed forum needs no
// mention; a forum where the bot may not manage tags still works, its
// tags left alone and said once in the log.
func TestDiscordForumPostIsATask(t *testing.T) {
	t.Parallel()
	r := forumRig(t, 300*time.Millisecond)
	p := r.start(t)
	defer p.stop(t)

	post, err := r.dc.Post("F1", "111", "Ship v2", "plan the release", true)
	if err != nil {
		t.Fatal(err)
	}
	listed, err := r.dc.Post("F2", "111", "Tidy the docs", "tidy them", false)
	if err != nil {
		t.Fatal(err)
	}
	bare, err := r.dc.Post("F3", "111", "Count the files", "count them", true)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []string{post, listed, bare} {
		waitDiscordReply(t, r.dc, ch, "All done.")
		plans := discordPlans(r.dc, ch)
		if len(plans) != 1 || !slices.Equal(r.dc.Pinned(ch), []string{plans[0].ID}) {
			t.Errorf("post %s: %d plan messages, pinned %v; want one plan, pinned", ch, len(plans), r.dc.Pinned(ch))
		}
	}
	waitFor(t, 10*time.Second, "the post's tag at done", func() bool {
		m := runTagMoves(r.dc, "F1", post)
		return len(m) > 0 && m[len(m)-1] == "done"
	})
	if got := runTagMoves(r.dc, "F1", post); !slices.Equal(got, []string{"planning", "working", "done"}) {
		t.Errorf("the post's run tag moved %v, want [planning working done]", got)
	}
	waitFor(t, 10*time.Second, "the listed post's tag at done", func() bool {
		m := runTagMoves(r.dc, "F2", listed)
		return len(m) > 0 && m[len(m)-1] == "done"
	})
	if tags := r.dc.AppliedTags(bare); len(tags) != 0 || len(r.dc.Tags("F3")) != 0 {
		t.Errorf("the forum without the permission got tags %v on the post, %v on the forum", tags, r.dc.Tags("F3"))
	}
	if n := strings.Count(p.stderr.String(), "forum tags are left alone"); n != 1 {
		t.Errorf("said %d times that F3's tags are left alone, want once\nstderr:\n%s", n, p.stderr)
	}
}

// TestDiscordForumPostClosedStopsItsTurn: a person closing the post
// mid-turn ends the turn like Stop: the plan says stopped, the tag moves
// to stopped, and no further model round runs.
func TestDiscordForumPostClosedStopsItsTurn(t *testing.T) {
	t.Parallel()
	r := forumRig(t, 1500*time.Millisecond)
	p := r.start(t)
	defer p.stop(t)
	post, err := r.dc.Post("F1", "111", "A long job", "do the long job", true)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the plan in the post", func() bool { return len(discordPlans(r.dc, post)) == 1 })
	if err := r.dc.ClosePost(post, "111"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the plan stopped", func() bool {
		return strings.Contains(planText(discordPlans(r.dc, post)[0]), "stopped")
	})
	waitFor(t, 10*time.Second, "the tag at stopped", func() bool {
		m := runTagMoves(r.dc, "F1", post)
		return len(m) > 0 && m[len(m)-1] == "stopped"
	})
	if m := runTagMoves(r.dc, "F1", post); slices.Contains(m, "done") {
		t.Errorf("a closed post's tag moved %v", m)
	}
	if !strings.Contains(p.stderr.String(), "forum post closed; its turn stopped") {
		t.Errorf("no log line for the stop\nstderr:\n%s", p.stderr)
	}
}
