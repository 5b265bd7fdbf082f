package discord

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/golden"
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
	}
}

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
			if lines := strings.Count(e.Description, "\n") + 1; lines != len(p.Items) {
				t.Errorf("%d lines for %d items", lines, len(p.Items))
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
