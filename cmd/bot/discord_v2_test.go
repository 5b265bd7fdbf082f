package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/internal/fakediscord"
)

const (
	flagComponentsV2 = 1 << 15
	discordStopID    = "pinplan:stop:plan"
)

// refusedCalls is every REST call the fake answered with a 4xx.
func refusedCalls(s *fakediscord.Server) []fakediscord.Call {
	var out []fakediscord.Call
	for _, c := range s.Calls("") {
		if c.Status >= 400 && c.Status < 500 {
			out = append(out, c)
		}
	}
	return out
}

// hasStop reports whether a plan post or edit carried the Stop button.
func hasStop(body map[string]any) bool {
	m := fakediscord.Message{}
	cs, _ := body["components"].([]any)
	for _, c := range cs {
		m.Components = append(m.Components, c.(map[string]any))
	}
	return slices.Contains(m.CustomIDs(), discordStopID)
}

// TestDiscordPlanComponentsV2: by default the plan is posted as one
// Components V2 container with Stop inside while the turn runs, every
// edit keeps the flag and sends neither content nor embeds, and it ends
// on its last revision without Stop; Discord refused nothing.
func TestDiscordPlanComponentsV2(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 5, 40*time.Millisecond)
	p := r.start(t)
	defer p.stop(t)
	r.dc.UserMessage("C1", "111", "plan in a container", true)
	waitDiscordReply(t, r.dc, "C1", "All done.")
	waitFor(t, 10*time.Second, "the final revision", func() bool {
		pl := discordPlans(r.dc, "C1")
		return len(pl) == 1 && strings.Contains(planText(pl[0]), "revision 5 · done")
	})
	plan := discordPlans(r.dc, "C1")[0]
	if !plan.IsComponentsV2() || len(plan.Embeds) != 0 || plan.Content != "" {
		t.Fatalf("plan message flags %d, %d embeds, content %q: want Components V2", plan.Flags, len(plan.Embeds), plan.Content)
	}
	if plan.ComponentCount() > 40 || len(plan.Components) != 1 || plan.Components[0]["type"] != float64(17) {
		t.Errorf("components %v, want one container of at most 40", plan.Components)
	}
	if slices.Contains(plan.CustomIDs(), discordStopID) {
		t.Error("the Stop button stayed after the turn ended")
	}
	if e := planText(plan); !strings.Contains(e, "Plan · 3/3 done") || !strings.Contains(e, "~~") {
		t.Errorf("final plan: %s", e)
	}
	var post fakediscord.Call
	for _, c := range okDiscord(r.dc, "POST channels/C1/messages") {
		if c.Body["flags"] == float64(flagComponentsV2) {
			post = c
		}
	}
	if post.Body == nil || !hasStop(post.Body) {
		t.Errorf("the V2 post %v, want the Stop button inside while the turn runs", post.Body)
	}
	edits := okDiscord(r.dc, "PATCH channels/C1/messages/"+plan.ID)
	// Revisions come faster than the channel's edits may (DESIGN §6):
	// intermediate ones are skipped, never applied out of order, and the
	// last edit shows the last revision.
	if revs := editRevisions(edits); len(revs) == 0 || !slices.IsSorted(revs) || revs[len(revs)-1] != 5 {
		t.Errorf("edits showed revisions %v; want them in order, ending on 5", revs)
	}
	stops := 0
	for _, c := range edits {
		if c.Body["flags"] != float64(flagComponentsV2) || c.Body["components"] == nil || c.Body["content"] != nil || c.Body["embeds"] != nil {
			t.Errorf("edit body %v: want the flag and the container only", c.Body)
		}
		if hasStop(c.Body) {
			stops++
		}
	}
	if stops == 0 {
		t.Error("no edit while the turn ran carried Stop")
	}
	if pins := r.dc.Pinned("C1"); len(pins) != 1 || pins[0] != plan.ID {
		t.Errorf("pinned %v, want the plan %s", pins, plan.ID)
	}
	if bad := refusedCalls(r.dc); len(bad) != 0 {
		t.Errorf("Discord refused %d requests:%s", len(bad), callList(bad))
	}
	if v := r.dc.Violations(); len(v) > 0 {
		t.Errorf("violations %q", v)
	}
}

// TestDiscordPlanV2RefusedIsEmbed: where Discord refuses the V2 post
// (50035), the plan is posted as the embed and edited as one to its last
// revision; the refused post is the only refusal.
func TestDiscordPlanV2RefusedIsEmbed(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 5, 40*time.Millisecond)
	r.dc.RefuseComponentsV2(true)
	p := r.start(t)
	defer p.stop(t)
	r.dc.UserMessage("C1", "111", "plan as an embed", true)
	waitDiscordReply(t, r.dc, "C1", "All done.")
	waitFor(t, 10*time.Second, "the final revision", func() bool {
		pl := discordPlans(r.dc, "C1")
		return len(pl) == 1 && strings.Contains(planText(pl[0]), "revision 5 · done")
	})
	plan := discordPlans(r.dc, "C1")[0]
	if plan.IsComponentsV2() || len(plan.Embeds) != 1 {
		t.Fatalf("plan message flags %d, %d embeds: want the embed", plan.Flags, len(plan.Embeds))
	}
	bad := refusedCalls(r.dc)
	if len(bad) != 1 || bad[0].Method != "POST" || bad[0].Code != 50035 || bad[0].Body["flags"] != float64(flagComponentsV2) {
		t.Errorf("refused:%s\nwant only the V2 post, with 50035", callList(bad))
	}
	edits := okDiscord(r.dc, "PATCH channels/C1/messages/"+plan.ID)
	// Revisions come faster than the channel's edits may (DESIGN §6):
	// intermediate ones are skipped, never applied out of order, and the
	// last edit shows the last revision.
	if revs := editRevisions(edits); len(revs) == 0 || !slices.IsSorted(revs) || revs[len(revs)-1] != 5 {
		t.Errorf("edits showed revisions %v; want them in order, ending on 5", revs)
	}
	for _, c := range edits {
		if c.Body["embeds"] == nil || c.Body["flags"] != nil {
			t.Errorf("edit body %v: want the embed, no flags", c.Body)
		}
	}
	if pins := r.dc.Pinned("C1"); len(pins) != 1 || pins[0] != plan.ID {
		t.Errorf("pinned %v, want the plan %s", pins, plan.ID)
	}
}
