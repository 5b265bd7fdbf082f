package discord

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/golden"
	"github.com/pinplan/pinplan/internal/plantest"
	"github.com/pinplan/pinplan/todo"
)

var at = time.Date(2026, 11, 30, 9, 30, 0, 0, time.UTC)

func plans() map[string]chat.Plan {
	long := strings.Repeat("very long step with *markdown* & @everyone ", 12)[:500]
	worst := chat.Plan{Revision: 50, State: chat.StateWorking, Updated: at, Stoppable: true, Activity: "running fs__read_text_file"}
	for i := 0; i < todo.MaxItems; i++ {
		st := []todo.Status{todo.Completed, todo.InProgress, todo.Pending}[i%3]
		worst.Items = append(worst.Items, todo.Item{Content: long, Status: st})
	}
	return map[string]chat.Plan{
		"typical_evidence":    typicalEvidence(),
		"worst_case_evidence": worstCaseEvidence(),
		"typical": {Revision: 3, State: chat.StateWorking, Updated: at, Items: []todo.Item{
			{Content: "Read the failing test", Status: todo.Completed},
			{Content: "Fix the parser_edge case", Status: todo.InProgress},
			{Content: "Run the suite & ping <@123>", Status: todo.Pending},
		}},
		"done": {Revision: 9, State: chat.StateDone, Updated: at, Items: []todo.Item{
			{Content: "Draft", Status: todo.Completed}, {Content: "Review", Status: todo.Completed},
		}},
		"worst_case": worst,
		"running": {Revision: 4, State: chat.StateWorking, Updated: at, Stoppable: true, Activity: "running fs__read_text_file", Items: []todo.Item{
			{Content: "Read the notes", Status: todo.InProgress},
		}},
		"stopped": {Revision: 5, State: chat.StateStopped, StoppedBy: "ann", Updated: at, Items: []todo.Item{
			{Content: "Read the notes", Status: todo.InProgress},
		}},
		"waiting_for_start": waitingForStart(),
	}
}

// waitingForStart is a turn's first plan waiting for Start
// (PINPLAN_PLAN_APPROVAL=ask) after people changed it: an item skipped
// where it was, one added, with who did each.
func waitingForStart() chat.Plan {
	return chat.Plan{Revision: 3, State: chat.StateWaiting, Updated: at, Stoppable: true, Start: chat.ButtonID(chat.ActionStart, "plan-1"),
		Items: []todo.Item{
			{Content: "Check the release branch", Status: todo.InProgress},
			{Content: "Tag the *release* candidate", Status: chat.Skipped},
			{Content: "Write the changelog", Status: todo.Pending},
			{Content: "Publish the release notes", Status: todo.Pending},
		},
		Marks: []agent.Mark{
			{Action: agent.SteerSkip, Item: "Tag the *release* candidate", After: "Check the release branch", By: "ann", At: at},
			{Action: agent.SteerAdd, Item: "Write the changelog", By: "bo", At: at, Owed: true},
		},
	}
}

func typicalEvidence() chat.Plan   { return plantest.TypicalEvidence(at, plantest.DiscordText) }
func worstCaseEvidence() chat.Plan { return plantest.WorstCaseEvidence(at, plantest.DiscordText) }

func cards() map[string]chat.Card {
	open := chat.Card{ID: "0123456789abcdef", Tool: "fs__write_file", Server: "fs", Arguments: `{"path":"notes.md","content":"a ` + "```" + ` <b> & @everyone"}`,
		Requester: "U123", Deadline: at.Add(30 * time.Minute)}
	decided := open
	decided.Outcome, decided.By, decided.At = "Allowed once", "ann", at.Add(time.Minute)
	return map[string]chat.Card{"card_open": open, "card_decided": decided}
}

func TestPlanMessageGolden(t *testing.T) {
	for name, p := range plans() {
		t.Run(name, func(t *testing.T) {
			msg := PlanMessage(p)
			e := msg.Embeds[0]
			if n := utf8.RuneCountInString(e.Description); n > maxDescription {
				t.Errorf("description of %d characters, limit %d", n, maxDescription)
			}
			if n := embedSize(e); n > maxEmbedTotal {
				t.Errorf("embed of %d characters, limit %d", n, maxEmbedTotal)
			}
			items, evidence := descriptionLines(e.Description)
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
			got, err := json.MarshalIndent(msg, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(got), "@everyone") || strings.Contains(string(got), "<@1") {
				t.Error("the plan message can mention someone")
			}
			golden.Check(t, filepath.Join("testdata", name+".json"), got)
		})
	}
	if d := PlanEmbed(plans()["worst_case"]).Description; !strings.Contains(d, "…") {
		t.Error("long items are not shortened with …")
	}
}

// descriptionLines is an embed description's item and evidence lines.
func descriptionLines(desc string) (items, evidence []string) {
	for _, l := range strings.Split(desc, "\n") {
		if strings.HasPrefix(l, "↳ ") {
			evidence = append(evidence, l)
		} else {
			items = append(items, l)
		}
	}
	return items, evidence
}

// TestEvidenceUnderItsItem: each line follows its item, escaped; in the
// worst case the evidence lines are shortened before the items, and
// every item keeps one.
func TestEvidenceUnderItsItem(t *testing.T) {
	d := PlanEmbed(plans()["typical_evidence"]).Description
	want := "✅ 1. ~~Read the failing test~~\n↳ fs\\_\\_read\\_text\\_file ×2, fs\\_\\_search\\_files\n" +
		"✅ 2. ~~Check the old notes~~\n↳ no tool activity\n" +
		"🔄 3. **Fix the parser\\_edge case**\n↳ fs\\_\\_write\\_file (denied), fs\\_\\_read\\_text\\_file (error)\n" +
		"⬜ 4. Run the suite & ping <\u200b@123\\>"
	if d != want {
		t.Errorf("description\n%s\nwant\n%s", d, want)
	}
	p := plans()["worst_case_evidence"]
	items, evidence := descriptionLines(PlanEmbed(p).Description)
	for i := range items {
		if !strings.HasSuffix(evidence[i], "…") || utf8.RuneCountInString(evidence[i]) >= utf8.RuneCountInString(items[i]) {
			t.Errorf("item %d: evidence line %q is not shorter than its item %q", i+1, evidence[i], items[i])
		}
	}
}

// TestWorstCaseThroughTheFake: Discord accepts the worst case with
// evidence, posted and edited.
func TestWorstCaseThroughTheFake(t *testing.T) {
	fake := &fakediscord.Server{}
	fake.AddChannel("C1", 0, "G1")
	srv := httptest.NewServer(fake)
	defer srv.Close()
	a, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", APIURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	th := chat.Thread{Platform: "discord", Key: Key("C1"), Channel: "C1"}
	p := plans()["worst_case_evidence"]
	ref, err := a.PostPlan(context.Background(), th, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.EditPlan(context.Background(), th, ref, p); err != nil {
		t.Fatal(err)
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Discord refused the worst case: %q", v)
	}
	if m := fake.Messages("C1"); len(m) != 1 || len(m[0].Embeds) != 1 || !strings.Contains(fmt.Sprint(m[0].Embeds[0]["description"]), "↳ ") {
		t.Errorf("messages %d, want the plan with its evidence lines", len(m))
	}
}

func TestSplitAt2000(t *testing.T) {
	text := strings.Repeat("a line of the answer\n", 300)
	parts := Split(text, maxContent)
	if len(parts) < 4 {
		t.Fatalf("%d parts", len(parts))
	}
	for _, p := range parts {
		if utf8.RuneCountInString(p) > maxContent || !strings.HasPrefix(p, "a line") {
			t.Errorf("bad part: %d runes, %.20q", utf8.RuneCountInString(p), p)
		}
	}
	if strings.Join(parts, "\n") != strings.TrimRight(text, "\n") {
		t.Error("split lost text")
	}
}

func TestInviteURL(t *testing.T) {
	id, err := ApplicationID("OTAwMDAwMDAwMDAwMDAwMDAx.fake.token")
	if err != nil || id != "900000000000000001" {
		t.Fatalf("ApplicationID = %q, %v", id, err)
	}
	u := InviteURL("https://discord.com", id)
	want := "https://discord.com/oauth2/authorize?client_id=900000000000000001&permissions=2252109051423744&scope=bot+applications.commands"
	if u != want {
		t.Errorf("InviteURL = %s\nwant        %s", u, want)
	}
	if Permissions&(1<<51) == 0 {
		t.Error("Pin Messages (1<<51) missing")
	}
	if Permissions&(1<<6) != 0 {
		t.Error("the invite asks for Add Reactions, which nothing uses")
	}
}

// TestInvite: `bot invite` takes the application id from
// DISCORD_APPLICATION_ID, else from the bot token, and refuses either
// when it is not a Discord id instead of printing a URL that invites
// nothing.
func TestInvite(t *testing.T) {
	for _, tc := range []struct {
		name, appID, token string
		want               string // in the URL, or in the error
		wantErr            bool
	}{
		{name: "from the token", token: "OTAwMDAwMDAwMDAwMDAwMDAx.fake.token", want: "client_id=900000000000000001&"},
		{name: "the application id wins", appID: "123456789012345678", token: "garbage", want: "client_id=123456789012345678&"},
		{name: "a malformed token", token: "garbage", want: "malformed", wantErr: true},
		{name: "an application id that is no id", appID: "my-app", want: "not a Discord id", wantErr: true},
		{name: "neither", want: "set DISCORD_BOT_TOKEN", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := Invite(tc.appID, tc.token)
			got := u
			if err != nil {
				got = err.Error()
			}
			if (err != nil) != tc.wantErr || !strings.Contains(got, tc.want) {
				t.Errorf("got %q (error %v), want %q", u, err, tc.want)
			}
			if err == nil && !strings.HasPrefix(u, "https://discord.com/oauth2/authorize?") {
				t.Errorf("got %q, want a discord.com OAuth2 URL", u)
			}
		})
	}
}

func TestCardGolden(t *testing.T) {
	for name, c := range cards() {
		t.Run(name, func(t *testing.T) {
			got, err := json.MarshalIndent(map[string]any{"embeds": []any{CardEmbed(c)}, "components": CardComponents(c)}, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", name+".json"), got)
			for _, label := range []string{chat.LabelAllow, chat.LabelAlways, chat.LabelDeny} {
				if strings.Contains(string(got), `"label": "`+label+`"`) != c.Open() {
					t.Errorf("button %q shown %t, want %t", label, !c.Open(), c.Open())
				}
			}
		})
	}
}

func TestStopButtonOnlyWhileRunning(t *testing.T) {
	for name, p := range plans() {
		got, err := json.Marshal(PlanMessage(p))
		if err != nil {
			t.Fatal(err)
		}
		if has := strings.Contains(string(got), `"custom_id":"`+stopID+`"`); has != p.Stoppable {
			t.Errorf("%s: Stop button %t, want %t", name, has, p.Stoppable)
		}
	}
}
