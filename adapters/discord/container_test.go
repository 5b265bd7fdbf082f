package discord

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/golden"
	"github.com/pinplan/pinplan/internal/inboxtest"
	"github.com/pinplan/pinplan/todo"
)

// v2Parts is a V2 payload read back from its JSON: every component, the
// text displays' content, the custom_ids, and the container's accent.
type v2Parts struct {
	components int
	texts      []string
	customIDs  []string
	accent     float64
	raw        map[string]any
}

func readV2(t testing.TB, payload any) v2Parts {
	t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	var out v2Parts
	if err := json.Unmarshal(b, &out.raw); err != nil {
		t.Fatal(err)
	}
	var walk func(c map[string]any)
	walk = func(c map[string]any) {
		out.components++
		switch c["type"] {
		case float64(discordgo.TextDisplayComponent):
			out.texts = append(out.texts, c["content"].(string))
		case float64(discordgo.ContainerComponent):
			out.accent, _ = c["accent_color"].(float64)
		}
		if id, ok := c["custom_id"].(string); ok {
			out.customIDs = append(out.customIDs, id)
		}
		children, _ := c["components"].([]any)
		for _, ch := range children {
			walk(ch.(map[string]any))
		}
	}
	list, _ := out.raw["components"].([]any)
	for _, c := range list {
		walk(c.(map[string]any))
	}
	return out
}

func (p v2Parts) textLength() (runes, units int) {
	for _, s := range p.texts {
		runes += utf8.RuneCountInString(s)
		units += utf16Len(s)
	}
	return runes, units
}

// TestPlanContainerGolden: the V2 payload of every plan, the worst case
// with evidence among them, within Discord's limits, every item and
// evidence line shown, nobody mentioned.
func TestPlanContainerGolden(t *testing.T) {
	for name, p := range plans() {
		t.Run(name, func(t *testing.T) {
			msg := PlanMessageV2(p)
			got, err := json.MarshalIndent(msg, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", "v2_"+name+".json"), got)
			parts := readV2(t, msg)
			if f := parts.raw["flags"]; f != float64(1<<15) {
				t.Errorf("flags %v, want IS_COMPONENTS_V2 (32768)", f)
			}
			for _, k := range []string{"content", "embeds", "sticker_ids", "poll"} {
				if _, ok := parts.raw[k]; ok {
					t.Errorf("the V2 payload carries %q", k)
				}
			}
			if top := parts.raw["components"].([]any); len(top) != 1 || top[0].(map[string]any)["type"] != float64(discordgo.ContainerComponent) {
				t.Errorf("top level %v, want one container", top)
			}
			if parts.components > maxV2Components {
				t.Errorf("%d components, limit %d", parts.components, maxV2Components)
			}
			if runes, units := parts.textLength(); units > maxV2Text {
				t.Errorf("text displays of %d characters (%d UTF-16 units), limit %d", runes, units, maxV2Text)
			}
			if len(parts.texts) != 2 || !strings.HasPrefix(parts.texts[0], "### "+p.Title()+"\n") || !strings.HasPrefix(parts.texts[1], "-# Updated ") {
				t.Fatalf("text displays %q, want the title with the items, then the footer", parts.texts)
			}
			items, evidence := descriptionLines(strings.TrimPrefix(parts.texts[0], "### "+p.Title()+"\n"))
			if len(items) != len(p.Items) {
				t.Errorf("%d item lines for %d items", len(items), len(p.Items))
			}
			want := 0
			for _, it := range p.Items {
				if p.EvidenceLine(it) != "" {
					want++
				}
			}
			if len(evidence) != want {
				t.Errorf("%d evidence lines, want %d", len(evidence), want)
			}
			if has := slices.Contains(parts.customIDs, stopID); has != p.Stoppable {
				t.Errorf("Stop button %t, want %t", has, p.Stoppable)
			}
			if strings.Contains(string(got), "@everyone") || strings.Contains(string(got), "<@1") {
				t.Error("the plan message can mention someone")
			}
		})
	}
}

// TestWorstCaseContainerShortens: the worst case fits by shortening the
// evidence lines, then the items, with …, as the embed does; every item
// keeps its line and its evidence line.
func TestWorstCaseContainerShortens(t *testing.T) {
	p := worstCaseEvidence()
	parts := readV2(t, PlanMessageV2(p))
	runes, units := parts.textLength()
	t.Logf("worst case: %d components, %d characters (%d UTF-16 units) of text", parts.components, runes, units)
	if parts.components != 8 {
		t.Errorf("%d components, want 8: container, two text displays, separator, the item menu in its row, Stop in its row", parts.components)
	}
	items, evidence := descriptionLines(parts.texts[0])
	if len(items) != len(p.Items)+1 || len(evidence) != len(p.Items) {
		t.Fatalf("%d lines and %d evidence lines for %d items", len(items), len(evidence), len(p.Items))
	}
	for i, ev := range evidence {
		if !strings.HasSuffix(ev, "…") {
			t.Errorf("evidence line %d not shortened: %q", i+1, ev)
		}
	}
	if !strings.Contains(parts.texts[0], "…") {
		t.Error("long items are not shortened with …")
	}
}

// TestFitSaysWhatIsLeftOut: when even the shortest lines do not fit, the
// items that do not are left out and counted, never silently dropped.
func TestFitSaysWhatIsLeftOut(t *testing.T) {
	var p chat.Plan
	for i := range 10 {
		p.Items = append(p.Items, todo.Item{Content: fmt.Sprintf("step %d of the task", i+1), Status: todo.Pending})
	}
	tests := []struct {
		name  string
		room  int
		shown int
		last  string
	}{
		{"all fit", 1000, 10, "⬜ step 10 of the task"},
		{"shortened", 150, 10, "⬜ step 10 of …"},
		{"three left out", 105, 7, "… 3 more items not shown"},
		{"none fit", 30, 0, "… 10 more items not shown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fitWithin(p, tt.room, utf16Len)
			lines := strings.Split(got, "\n")
			if n := utf16Len(got); n > tt.room {
				t.Errorf("%d characters, room %d: %q", n, tt.room, got)
			}
			shown := 0
			for _, l := range lines {
				if strings.HasPrefix(l, "⬜") {
					shown++
				}
			}
			if shown != tt.shown || lines[len(lines)-1] != tt.last {
				t.Errorf("got %d items ending %q, want %d ending %q:\n%s", shown, lines[len(lines)-1], tt.shown, tt.last, got)
			}
		})
	}
}

func TestAccentByRunState(t *testing.T) {
	tests := []struct {
		state chat.PlanState
		want  int
	}{
		{chat.StateWorking, colorWorking},
		{chat.StateResumed, colorWorking},
		{chat.StateWaiting, colorWaiting},
		{chat.StateDone, colorDone},
		{chat.StateStopped, colorStopped},
		{chat.StateLimited, colorStopped},
		{chat.StateFailed, colorFailed},
	}
	for _, tt := range tests {
		t.Run(string(tt.state), func(t *testing.T) {
			p := chat.Plan{State: tt.state, Revision: 1, Updated: at, Items: []todo.Item{{Content: "a", Status: todo.Pending}}}
			if got := readV2(t, PlanMessageV2(p)).accent; got != float64(tt.want) {
				t.Errorf("accent %#x, want %#x", int(got), tt.want)
			}
		})
	}
}

func v2Rig(t *testing.T, v2 bool) (*Adapter, *fakediscord.Server, string) {
	t.Helper()
	fake := &fakediscord.Server{}
	fake.AddChannel("C1", 0, "G1")
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	a, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", APIURL: srv.URL, ComponentsV2: v2})
	if err != nil {
		t.Fatal(err)
	}
	return a, fake, srv.URL
}

var v2Thread = chat.Thread{Platform: "discord", Key: Key("C1"), Channel: "C1"}

// planMessage is the channel's one message.
func planMessage(t *testing.T, fake *fakediscord.Server) fakediscord.Message {
	t.Helper()
	msgs := fake.Messages("C1")
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want the plan", len(msgs))
	}
	return msgs[0]
}

// TestV2PlanPostedAndEdited: the worst case is accepted as V2, posted and
// edited within the limits; every edit sends the flag and the container
// and neither content nor embeds; the Stop button goes with the turn.
func TestV2PlanPostedAndEdited(t *testing.T) {
	a, fake, _ := v2Rig(t, true)
	ctx := context.Background()
	worst := worstCaseEvidence()
	ref, err := a.PostPlan(ctx, v2Thread, worst)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Kind != refComponentsV2 {
		t.Errorf("ref kind %q, want %q", ref.Kind, refComponentsV2)
	}
	m := planMessage(t, fake)
	if !m.IsComponentsV2() || len(m.Embeds) != 0 || m.Content != "" {
		t.Fatalf("posted flags %d, %d embeds, content %q: want a V2 message", m.Flags, len(m.Embeds), m.Content)
	}
	if n := m.ComponentCount(); n > maxV2Components {
		t.Errorf("%d components, limit %d", n, maxV2Components)
	}
	if n := utf8.RuneCountInString(strings.Join(m.TextDisplays(), "")); n > maxV2Text {
		t.Errorf("%d characters of text, limit %d", n, maxV2Text)
	}
	if !slices.Contains(m.CustomIDs(), stopID) {
		t.Errorf("no Stop button while the turn runs: %q", m.CustomIDs())
	}

	done := typicalEvidence()
	done.State, done.Stoppable, done.Revision = chat.StateDone, false, 7
	for _, p := range []chat.Plan{worst, done} {
		if err := a.EditPlan(ctx, v2Thread, ref, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range fake.Calls("PATCH channels/C1/messages/" + ref.ID) {
		if c.Body["flags"] != float64(1<<15) || c.Body["components"] == nil {
			t.Errorf("edit body flags %v, components %v: want the flag and the container", c.Body["flags"], c.Body["components"] != nil)
		}
		for _, k := range []string{"content", "embeds"} {
			if _, ok := c.Body[k]; ok {
				t.Errorf("an edit of the V2 message sends %q", k)
			}
		}
	}
	m = planMessage(t, fake)
	if !m.IsComponentsV2() || m.Edits != 2 {
		t.Errorf("after the edits: flags %d, %d edits, want V2 and 2", m.Flags, m.Edits)
	}
	if slices.Contains(m.CustomIDs(), stopID) {
		t.Error("the Stop button stayed after the turn ended")
	}
	if texts := m.TextDisplays(); len(texts) != 2 || !strings.Contains(texts[1], "revision 7 · done") {
		t.Errorf("text displays %q, want the last revision's footer", texts)
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Discord refused: %q", v)
	}
}

// TestV2RefusedFallsBackToEmbed: a V2 post Discord refuses (50035) is
// posted as the embed, and that message is edited as an embed even once
// V2 is accepted again.
func TestV2RefusedFallsBackToEmbed(t *testing.T) {
	a, fake, _ := v2Rig(t, true)
	ctx := context.Background()
	fake.RefuseComponentsV2(true)
	p := plans()["running"]
	ref, err := a.PostPlan(ctx, v2Thread, p)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Kind != "" {
		t.Errorf("ref kind %q, want an embed's", ref.Kind)
	}
	posts := fake.Calls("POST channels/C1/messages")
	if len(posts) != 2 || posts[0].Status != 400 || posts[0].Code != codeInvalidForm || posts[1].Status != 200 {
		t.Fatalf("posts %+v, want the V2 one refused with 50035, then the embed", posts)
	}
	fake.RefuseComponentsV2(false)
	done := plans()["done"]
	if err := a.EditPlan(ctx, v2Thread, ref, done); err != nil {
		t.Fatal(err)
	}
	edit := fake.Calls("PATCH channels/C1/messages/" + ref.ID)
	if len(edit) != 1 || edit[0].Body["embeds"] == nil || edit[0].Body["flags"] != nil {
		t.Errorf("edit %+v, want embeds and no flags", edit)
	}
	m := planMessage(t, fake)
	if m.IsComponentsV2() || len(m.Embeds) != 1 || !strings.Contains(fmt.Sprint(m.Embeds[0]["footer"]), "revision 9 · done") {
		t.Errorf("message flags %d, embeds %v: want the embed at its last revision", m.Flags, m.Embeds)
	}
}

// TestV2OtherRefusalIsNotAFallback: any other refusal of the V2 post is the
// post's error; it is not posted again as an embed.
func TestV2OtherRefusalIsNotAFallback(t *testing.T) {
	a, fake, _ := v2Rig(t, true)
	fake.Fail("POST messages", 403, 50013)
	if _, err := a.PostPlan(context.Background(), v2Thread, plans()["running"]); err == nil {
		t.Fatal("a refused post succeeded")
	}
	if n := len(fake.Calls("POST channels/C1/messages")); n != 1 {
		t.Errorf("%d posts, want 1: a missing permission is no reason to post an embed", n)
	}
}

// TestRefKindSurvivesARestart: a stored ref tells a new adapter how to
// edit its message; a ref stored before Kind existed is an embed's.
func TestRefKindSurvivesARestart(t *testing.T) {
	a, fake, url := v2Rig(t, true)
	ctx := context.Background()
	ref, err := a.PostPlan(ctx, v2Thread, plans()["running"])
	if err != nil {
		t.Fatal(err)
	}
	stored, err := json.Marshal(ref)
	if err != nil {
		t.Fatal(err)
	}
	var loaded chat.MessageRef
	if err := json.Unmarshal(stored, &loaded); err != nil || loaded != ref {
		t.Fatalf("ref %s read back as %+v, %v", stored, loaded, err)
	}
	for _, v2 := range []bool{true, false} { // whatever the setting now says
		b, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", APIURL: url, ComponentsV2: v2})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.EditPlan(ctx, v2Thread, loaded, plans()["done"]); err != nil {
			t.Errorf("setting %t: edit of the V2 message: %v", v2, err)
		}
	}
	if !planMessage(t, fake).IsComponentsV2() {
		t.Error("the message lost its flag")
	}

	var old chat.MessageRef
	if err := json.Unmarshal([]byte(`{"channel":"C1","id":"1"}`), &old); err != nil || old.Kind != "" {
		t.Fatalf("an old ref reads as %+v, %v", old, err)
	}
}

// stopInbox answers a click on the plan's Stop button with the stopped
// plan, as the router does.
type stopInbox struct {
	inboxtest.Inbox
	plan chat.Plan
}

func (s *stopInbox) Click(context.Context, chat.Click) chat.ClickResult {
	p := s.plan
	return chat.ClickResult{Plan: &p}
}

// TestV2StopClickUpdatesAsV2: Stop inside the container can be clicked,
// and the message is updated in place as V2, without the button.
func TestV2StopClickUpdatesAsV2(t *testing.T) {
	fake := &fakediscord.Server{HeartbeatInterval: time.Second}
	fake.AddChannel("C1", 0, "G1")
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	stopped := plans()["stopped"]
	a, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", APIURL: srv.URL, ComponentsV2: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.Start(ctx, &stopInbox{plan: stopped}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); a.Close() })
	ref, err := a.PostPlan(ctx, v2Thread, plans()["running"])
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); fake.Connected() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no gateway connection")
		}
	}
	id, err := fake.Click("C1", ref.ID, "111", stopID)
	if err != nil {
		t.Fatal(err)
	}
	var res []fakediscord.Response
	for deadline := time.Now().Add(10 * time.Second); len(res) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the click was not answered")
		}
		res = fake.Responses(id)
	}
	if r := res[0]; r.Type != 7 || r.Status >= 300 || r.Data["flags"] != float64(1<<15) || r.Data["content"] != nil || r.Data["embeds"] != nil {
		t.Errorf("answer %+v, want a V2 update (type 7, the flag, no content or embeds)", r)
	}
	m := planMessage(t, fake)
	if !m.IsComponentsV2() || slices.Contains(m.CustomIDs(), stopID) || !strings.Contains(strings.Join(m.TextDisplays(), "\n"), "stopped by ann") {
		t.Errorf("after Stop: flags %d, buttons %q, text %q", m.Flags, m.CustomIDs(), m.TextDisplays())
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Discord refused: %q", v)
	}
}
