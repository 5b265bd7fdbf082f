package slack

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/golden"
	"github.com/pinplan/pinplan/internal/plantest"
	"github.com/pinplan/pinplan/todo"
)

var at = time.Date(2026, 11, 30, 9, 30, 0, 0, time.UTC)

func plans() map[string]chat.Plan {
	long := strings.Repeat("very long step with <html> & @channel ", 14)[:500]
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
			{Content: "Fix the parser <edge case>", Status: todo.InProgress},
			{Content: "Run the suite & report", Status: todo.Pending},
		}},
		"failed_open": {Revision: 7, State: chat.StateFailed, Updated: at, Items: []todo.Item{
			{Content: "Draft the notes", Status: todo.Completed},
			{Content: "Ask <!channel> for review", Status: todo.Pending},
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

func typicalEvidence() chat.Plan   { return plantest.TypicalEvidence(at, plantest.SlackText) }
func worstCaseEvidence() chat.Plan { return plantest.WorstCaseEvidence(at, plantest.SlackText) }

func cards() map[string]chat.Card {
	open := chat.Card{ID: "0123456789abcdef", Tool: "fs__write_file", Server: "fs", Arguments: `{"path":"notes.md","content":"a ` + "```" + ` <b> & @everyone"}`,
		Requester: "U123", Deadline: at.Add(30 * time.Minute)}
	decided := open
	decided.Outcome, decided.By, decided.At = "Allowed once", "ann", at.Add(time.Minute)
	return map[string]chat.Card{"card_open": open, "card_decided": decided}
}

func TestPlanBlocksGolden(t *testing.T) {
	for name, p := range plans() {
		t.Run(name, func(t *testing.T) {
			blocks := PlanBlocks(p)
			checkLimits(t, blocks, PlanText(p))
			got, err := json.MarshalIndent(map[string]any{"text": PlanText(p), "blocks": blocks}, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", name+".json"), got)
			if strings.Contains(string(got), "<!channel>") || strings.Contains(string(got), "<@") {
				t.Error("the plan message can mention someone")
			}
		})
	}
}

func TestNativePlanBlocksGolden(t *testing.T) {
	for _, name := range []string{"typical", "typical_evidence", "worst_case_evidence"} {
		t.Run(name, func(t *testing.T) {
			got, err := json.MarshalIndent(NativePlanBlocks(plans()[name]), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", "native_"+name+".json"), got)
		})
	}
}

func checkLimits(t *testing.T, blocks []slack.Block, text string) {
	t.Helper()
	if len(blocks) > maxBlocks {
		t.Errorf("%d blocks, Slack allows %d", len(blocks), maxBlocks)
	}
	if n := utf8.RuneCountInString(text); n > 40000 {
		t.Errorf("fallback text is %d characters", n)
	}
	for i, b := range blocks {
		switch b := b.(type) {
		case *slack.SectionBlock:
			if n := utf8.RuneCountInString(b.Text.Text); n > maxSectionText {
				t.Errorf("block %d: section text of %d characters, limit %d", i, n, maxSectionText)
			}
		case *slack.HeaderBlock:
			if n := utf8.RuneCountInString(b.Text.Text); n > maxHeaderText {
				t.Errorf("block %d: header of %d characters", i, n)
			}
		case *slack.ContextBlock:
			for _, e := range b.ContextElements.Elements {
				if tx, ok := e.(*slack.TextBlockObject); ok && utf8.RuneCountInString(tx.Text) > maxSectionText {
					t.Errorf("block %d: context text too long", i)
				}
			}
		}
	}
}

// sectionLines is the lines of blocks' sections: items and evidence.
func sectionLines(blocks []slack.Block) (items, evidence []string) {
	for _, b := range blocks {
		if s, ok := b.(*slack.SectionBlock); ok {
			for _, l := range strings.Split(s.Text.Text, "\n") {
				if strings.HasPrefix(l, "↳ ") {
					evidence = append(evidence, l)
				} else {
					items = append(items, l)
				}
			}
		}
	}
	return items, evidence
}

func TestWorstCaseKeepsEveryItem(t *testing.T) {
	for _, name := range []string{"worst_case", "worst_case_evidence"} {
		t.Run(name, func(t *testing.T) {
			p := plans()[name]
			items, evidence := sectionLines(PlanBlocks(p))
			if len(items) != len(p.Items) {
				t.Errorf("rendered %d item lines for %d items", len(items), len(p.Items))
			}
			want := 0
			for _, it := range p.Items {
				if p.EvidenceLine(it) != "" {
					want++
				}
			}
			if len(evidence) != want {
				t.Errorf("rendered %d evidence lines, want %d", len(evidence), want)
			}
			for i, l := range evidence {
				if long := p.EvidenceLine(p.Items[i]); len(long) > maxEvidenceRunes && !strings.HasSuffix(l, "…") {
					t.Errorf("evidence line %d is not shortened with …: %q", i, l)
				}
			}
			if !strings.Contains(PlanText(p), "…") {
				t.Error("long items are not shortened with …")
			}
		})
	}
}

// TestEvidenceGivesWayToItems: items that escape long (every & is five
// characters in mrkdwn) leave room for one item per section with whole
// evidence lines, too few for 50 items; the evidence lines are shortened
// until every item fits, two to a section.
func TestEvidenceGivesWayToItems(t *testing.T) {
	worst := worstCaseEvidence()
	p := worst
	p.Items, p.Evidence = nil, agent.Evidence{}
	for i, it := range worst.Items {
		it.Content = fmt.Sprintf("%02d ", i+1) + strings.Repeat("&", 250)
		p.Items = append(p.Items, it)
		p.Evidence[it.Content] = worst.Evidence[worst.Items[i].Content]
	}
	blocks := PlanBlocks(p)
	checkLimits(t, blocks, PlanText(p))
	items, evidence := sectionLines(blocks)
	if len(items) != len(p.Items) || len(evidence) != len(p.Items) {
		t.Fatalf("%d item and %d evidence lines for %d items", len(items), len(evidence), len(p.Items))
	}
	for i, l := range evidence {
		if n := utf8.RuneCountInString(l); n >= maxEvidenceRunes || !strings.HasSuffix(l, "…") {
			t.Errorf("evidence line %d of %d characters: %q, want it shortened to fit", i+1, n, l)
		}
	}
}

// TestEvidenceUnderItsItem: each line follows its item, in the blocks,
// in the native task cards and in the fallback text.
func TestEvidenceUnderItsItem(t *testing.T) {
	p := plans()["typical_evidence"]
	_, blockLines := sectionLines(PlanBlocks(p))
	want := []string{"↳ fs__read_text_file ×2, fs__search_files", "↳ no tool activity", "↳ fs__write_file (denied), fs__read_text_file (error)"}
	if strings.Join(blockLines, "|") != strings.Join(want, "|") {
		t.Errorf("evidence lines %q, want %q", blockLines, want)
	}
	text := PlanText(p)
	if !strings.Contains(text, "✅ Read the failing test\n"+want[0]+"\n") || !strings.Contains(text, "🔄 Fix the parser &lt;edge case&gt;\n"+want[2]+"\n⬜") {
		t.Errorf("fallback text without the evidence under its item:\n%s", text)
	}
	tasks := NativePlanBlocks(p)[0].(*slack.PlanBlock).Tasks
	details := []string{want[0], want[1], want[2], ""} // the pending item has none
	for i, tc := range tasks {
		got := ""
		if tc.Details != nil {
			got = tc.Details.Elements[0].(*slack.RichTextSection).Elements[0].(*slack.RichTextSectionTextElement).Text
		}
		if got != details[i] {
			t.Errorf("task %d details %q, want %q", i+1, got, details[i])
		}
	}
}

// TestWorstCaseThroughTheFake: Slack accepts the worst case with
// evidence, in standard blocks and in native plan blocks, posted and
// edited.
func TestWorstCaseThroughTheFake(t *testing.T) {
	for _, native := range []bool{false, true} {
		a, fake := testAdapter(t, native)
		th := chat.Thread{Platform: "slack", Key: "slack/T1/C1/1.1", Channel: "C1", ThreadID: "1.1"}
		p := plans()["worst_case_evidence"]
		ref, err := a.PostPlan(context.Background(), th, p)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.EditPlan(context.Background(), th, ref, p); err != nil {
			t.Fatal(err)
		}
		if v := fake.Violations(); len(v) > 0 {
			t.Errorf("native %t: Slack refused the worst case: %q", native, v)
		}
		posts := fake.Calls("chat.postMessage")
		if len(posts) != 1 || strings.Contains(posts[0].Params["blocks"], `"type":"plan"`) != native {
			t.Errorf("native %t: %d posts, want one in the asked-for blocks", native, len(posts))
		}
	}
}

func TestMrkdwn(t *testing.T) {
	tests := []struct{ in, want string }{
		{"**bold** and *it* and ~~gone~~", "*bold* and _it_ and ~gone~"},
		{"# Title", "*Title*"},
		{"- one\n* two", "• one\n• two"},
		{"see [docs](https://example.com/a?b=1)", "see <https://example.com/a?b=1|docs>"},
		{"a < b & <@U1>", "a &lt; b &amp; &lt;@U1&gt;"},
		{"`**x**` stays", "`**x**` stays"},
		{"```go\nif a < b {}\n```", "```\nif a &lt; b {}\n```"},
	}
	for _, tt := range tests {
		if got := Mrkdwn(tt.in); got != tt.want {
			t.Errorf("Mrkdwn(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSplit(t *testing.T) {
	text := strings.Repeat("line of text\n", 1000)
	parts := Split(text, 3500)
	var joined []string
	for _, p := range parts {
		if utf8.RuneCountInString(p) > 3500 {
			t.Fatalf("part of %d runes", utf8.RuneCountInString(p))
		}
		if strings.HasPrefix(p, "\n") || !strings.HasPrefix(p, "line") {
			t.Errorf("part does not start on a line boundary: %.20q", p)
		}
		joined = append(joined, p)
	}
	if strings.Join(joined, "\n") != strings.TrimRight(text, "\n") {
		t.Error("split lost text")
	}
	if got := Split(strings.Repeat("x", 8000), 3500); len(got) != 3 {
		t.Errorf("one long line split into %d parts", len(got))
	}
}

func TestCardBlocksGolden(t *testing.T) {
	for name, c := range cards() {
		t.Run(name, func(t *testing.T) {
			blocks := CardBlocks(c)
			checkLimits(t, blocks, CardText(c))
			got, err := json.MarshalIndent(map[string]any{"text": CardText(c), "blocks": blocks}, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", name+".json"), got)
			s := string(got)
			for _, label := range []string{chat.LabelAllow, chat.LabelAlways, chat.LabelDeny} {
				if strings.Contains(s, `"text": "`+label+`"`) != c.Open() {
					t.Errorf("button %q shown %t, want %t", label, !c.Open(), c.Open())
				}
			}
			if text := blocks[0].(*slack.SectionBlock).Text.Text; !strings.Contains(text, "&lt;b&gt; &amp;") {
				t.Errorf("arguments not escaped for mrkdwn: %q", text)
			}
		})
	}
}

func TestStopButtonOnlyWhileRunning(t *testing.T) {
	for name, p := range plans() {
		got, err := json.Marshal(PlanBlocks(p))
		if err != nil {
			t.Fatal(err)
		}
		if has := strings.Contains(string(got), `"action_id":"`+stopID+`"`); has != p.Stoppable {
			t.Errorf("%s: Stop button %t, want %t", name, has, p.Stoppable)
		}
	}
}
