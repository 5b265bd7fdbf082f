package fakeslack

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/slack-go/slack"
)

func blocksJSON(t testing.TB, blocks ...slack.Block) string {
	t.Helper()
	b, err := json.Marshal(blocks)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mrkdwn(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.MarkdownType, s, false, true)
}
func plain(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.PlainTextType, s, true, false)
}

func button(text, actionID, value string) *slack.ButtonBlockElement {
	return slack.NewButtonBlockElement(actionID, value, plain(text))
}

func TestBlockKitLimits(t *testing.T) {
	section := func(s string) slack.Block { return slack.NewSectionBlock(mrkdwn(s), nil, nil) }
	many := func(n int, b slack.Block) []slack.Block {
		out := make([]slack.Block, n)
		for i := range out {
			out[i] = b
		}
		return out
	}
	fields := func(n, size int) []*slack.TextBlockObject {
		out := make([]*slack.TextBlockObject, n)
		for i := range out {
			out[i] = mrkdwn(strings.Repeat("f", size))
		}
		return out
	}
	contextOf := func(n int) slack.Block {
		els := make([]slack.MixedElement, n)
		for i := range els {
			els[i] = mrkdwn("c")
		}
		return slack.NewContextBlock("", els...)
	}
	plan := slack.NewPlanBlock("Plan · 1/2 done").WithTasks(
		slack.NewTaskCardBlock("item-1", "Read").WithStatus(slack.TaskCardStatusComplete),
		slack.NewTaskCardBlock("item-2", "Write").WithStatus(slack.TaskCardStatusInProgress))
	long := func(n int) string { return strings.Repeat("é", n) } // runes, not bytes

	tests := []struct {
		name     string
		text     *string // nil: no text parameter
		blocks   string  // "": no blocks parameter
		rejectPl bool
		want     string
	}{
		{name: "standard plan message", blocks: blocksJSON(t,
			slack.NewHeaderBlock(plain("Plan · 1/3 done")), section("✅ ~a~\n🔄 *b*"), slack.NewDividerBlock(), contextOf(1))},
		{name: "50 blocks", blocks: blocksJSON(t, many(50, slack.NewDividerBlock())...)},
		{name: "51 blocks", blocks: blocksJSON(t, many(51, slack.NewDividerBlock())...), want: "invalid_blocks"},
		{name: "unknown block type", blocks: `[{"type":"fancy"}]`, want: "invalid_blocks"},
		{name: "block without type", blocks: `[{"text":"x"}]`, want: "invalid_blocks"},
		{name: "not JSON", blocks: `[{"type":`, want: "invalid_blocks_format"},
		{name: "section text of 3000", blocks: blocksJSON(t, section(long(3000)))},
		{name: "section text of 3001", blocks: blocksJSON(t, section(long(3001))), want: "invalid_blocks"},
		{name: "empty section text", blocks: `[{"type":"section","text":{"type":"mrkdwn","text":""}}]`, want: "invalid_blocks"},
		{name: "section without text or fields", blocks: `[{"type":"section"}]`, want: "invalid_blocks"},
		{name: "unknown text type", blocks: `[{"type":"section","text":{"type":"html","text":"x"}}]`, want: "invalid_blocks"},
		{name: "10 fields of 2000", blocks: blocksJSON(t, slack.NewSectionBlock(nil, fields(10, 2000), nil))},
		{name: "11 fields", blocks: blocksJSON(t, slack.NewSectionBlock(nil, fields(11, 1), nil)), want: "invalid_blocks"},
		{name: "field of 2001", blocks: blocksJSON(t, slack.NewSectionBlock(nil, fields(1, 2001), nil)), want: "invalid_blocks"},
		{name: "header of 150", blocks: blocksJSON(t, slack.NewHeaderBlock(plain(long(150))))},
		{name: "header of 151", blocks: blocksJSON(t, slack.NewHeaderBlock(plain(long(151)))), want: "invalid_blocks"},
		{name: "mrkdwn header", blocks: blocksJSON(t, slack.NewHeaderBlock(mrkdwn("x"))), want: "invalid_blocks"},
		{name: "context of 10", blocks: blocksJSON(t, contextOf(10))},
		{name: "context of 11", blocks: blocksJSON(t, contextOf(11)), want: "invalid_blocks"},
		{name: "empty context", blocks: `[{"type":"context","elements":[]}]`, want: "invalid_blocks"},
		{name: "buttons at their limits", blocks: blocksJSON(t, slack.NewActionBlock("", button(long(75), long(255), long(2000))))},
		{name: "button text of 76", blocks: blocksJSON(t, slack.NewActionBlock("", button(long(76), "a", "v"))), want: "invalid_blocks"},
		{name: "action_id of 256", blocks: blocksJSON(t, slack.NewActionBlock("", button("ok", long(256), "v"))), want: "invalid_blocks"},
		{name: "button value of 2001", blocks: blocksJSON(t, slack.NewActionBlock("", button("ok", "a", long(2001)))), want: "invalid_blocks"},
		{name: "button accessory too long", blocks: blocksJSON(t, slack.NewSectionBlock(mrkdwn("x"), nil, slack.NewAccessory(button(long(76), "a", "v")))), want: "invalid_blocks"},
		{name: "block_id of 255", blocks: blocksJSON(t, slack.NewDividerBlock(), slack.NewSectionBlock(mrkdwn("x"), nil, nil, slack.SectionBlockOptionBlockID(long(255))))},
		{name: "block_id of 256", blocks: blocksJSON(t, slack.NewSectionBlock(mrkdwn("x"), nil, nil, slack.SectionBlockOptionBlockID(long(256)))), want: "invalid_blocks"},
		{name: "duplicate block_id", blocks: `[{"type":"divider","block_id":"a"},{"type":"divider","block_id":"a"}]`, want: "invalid_blocks"},
		{name: "native plan blocks", blocks: blocksJSON(t, plan, contextOf(1))},
		{name: "native plan refused by the workspace", blocks: blocksJSON(t, plan, contextOf(1)), rejectPl: true, want: "invalid_blocks"},
		{name: "task card without a title", blocks: `[{"type":"plan","title":"P","tasks":[{"type":"task_card","task_id":"1"}]}]`, want: "invalid_blocks"},
		{name: "task card with details and output", blocks: `[{"type":"task_card","task_id":"1","title":"t","details":{"type":"rich_text","elements":[{"type":"rich_text_section","elements":[{"type":"text","text":"↳ fs__read ×2"}]}]},"output":{"type":"rich_text","elements":[{"type":"rich_text_section","elements":[{"type":"text","text":"ok"}]}]}}]`},
		{name: "task card details as mrkdwn", blocks: `[{"type":"task_card","task_id":"1","title":"t","details":{"type":"mrkdwn","text":"x"}}]`, want: "invalid_blocks"},
		{name: "task card details without elements", blocks: `[{"type":"task_card","task_id":"1","title":"t","details":{"type":"rich_text","elements":[]}}]`, want: "invalid_blocks"},
		{name: "task card output with an empty text", blocks: `[{"type":"plan","title":"P","tasks":[{"type":"task_card","task_id":"1","title":"t","output":{"type":"rich_text","elements":[{"type":"rich_text_section","elements":[{"type":"text","text":""}]}]}}]}]`, want: "invalid_blocks"},
		{name: "task card details with an unknown element", blocks: `[{"type":"task_card","task_id":"1","title":"t","details":{"type":"rich_text","elements":[{"type":"paragraph","elements":[]}]}}]`, want: "invalid_blocks"},
		{name: "task card with an unknown status", blocks: `[{"type":"task_card","task_id":"1","title":"t","status":"done"}]`, want: "invalid_blocks"},
		{name: "markdown blocks over 12000 together", blocks: `[{"type":"markdown","text":"` + long(6000) + `"},{"type":"markdown","text":"` + long(6001) + `"}]`, want: "invalid_blocks"},
		{name: "text of 40000", text: ptr(long(40000))},
		{name: "text of 40001", text: ptr(long(40001)), want: "msg_too_long"},
		{name: "neither text nor blocks", want: "no_text"},
		{name: "empty text", text: ptr(""), want: "no_text"},
		{name: "empty blocks and no text", blocks: "[]", want: "no_text"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{RejectNativePlan: tt.rejectPl}
			base := serve(t, s)
			ts := post(t, base, "C1", "first")
			for _, method := range []string{"chat.postMessage", "chat.update"} {
				params := map[string]string{"channel": "C1", "ts": ts}
				if tt.text != nil {
					params["text"] = *tt.text
				}
				if tt.blocks != "" {
					params["blocks"] = tt.blocks
				}
				if _, got := bot(t, base, method, params); got != tt.want {
					t.Errorf("%s: got %q, want %q", method, got, tt.want)
				}
			}
			v := s.Violations()
			switch {
			case tt.want == "" && len(v) > 0:
				t.Errorf("violations %q for an accepted message", v)
			case tt.rejectPl:
				if len(v) > 0 {
					t.Errorf("violations %q: a workspace refusing plan blocks is not the client's fault", v)
				}
			case tt.want != "" && len(v) != 2:
				t.Errorf("violations %q, want one per refused call", v)
			case tt.want != "" && !strings.Contains(v[0], tt.want+": "):
				t.Errorf("violation %q does not name %s and the reason", v[0], tt.want)
			}
			if tt.want != "" {
				if n := len(s.Messages("C1")); n != 1 {
					t.Errorf("%d messages: a refused post landed", n)
				}
				if m := s.Messages("C1")[0]; m.Edits != 0 {
					t.Errorf("a refused update was applied: %+v", m)
				}
			}
		})
	}
}

func ptr(s string) *string { return &s }

// TestViolationDetail checks the detail says which block broke which rule.
func TestViolationDetail(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	blocks := fmt.Sprintf(`[{"type":"divider"},{"type":"section","text":{"type":"mrkdwn","text":%q}}]`, strings.Repeat("x", 3001))
	bot(t, base, "chat.postMessage", map[string]string{"channel": "C1", "text": "t", "blocks": blocks})
	v := s.Violations()
	want := "chat.postMessage: invalid_blocks: block 1 (section): text.text is 3001 characters, limit 3000"
	if len(v) != 1 || v[0] != want {
		t.Errorf("got %q, want [%q]", v, want)
	}
}
