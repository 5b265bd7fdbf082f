package slack

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/todo"
)

// Slack's Block Kit limits the plan message must stay within.
const (
	maxBlocks       = 50
	maxSectionText  = 3000
	maxHeaderText   = 150
	maxItemRunes    = 300 // an item's content in a block, before escaping
	maxFallbackItem = 100 // an item's content, or its evidence line, in the plain text fallback
	maxReplyRunes   = 3500
	maxText         = 40000 // a message's text, else msg_too_long
)

// Evidence lines (DESIGN §15) give way to items: they are shortened, from
// maxEvidenceRunes down in evidenceStep steps and then dropped, before an
// item is left out of the message.
const (
	maxEvidenceRunes = 300 // an item's evidence line, before escaping
	evidenceStep     = 20
)

// escape makes text inert in mrkdwn: no links, mentions or @channel.
func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// itemLine is p's item it with its mark, escaped for mrkdwn.
func itemLine(p chat.Plan, it todo.Item) string {
	text := escape(chat.Shorten(strings.Join(strings.Fields(it.Content), " "), maxItemRunes))
	switch it.Status {
	case todo.Completed, chat.Skipped: // a skipped item stays, struck, where it was
		return p.ItemMark(it) + " ~" + text + "~"
	case todo.InProgress:
		return p.ItemMark(it) + " *" + text + "*"
	}
	return p.ItemMark(it) + " " + text
}

// evidenceLine is the evidence line under it, cut to max runes and
// escaped for mrkdwn; "" when it has none or max is 0.
func evidenceLine(p chat.Plan, it todo.Item, max int) string {
	line := p.EvidenceLine(it)
	if line == "" || max <= 0 {
		return ""
	}
	return escape(chat.Shorten(line, max))
}

// PlanBlocks renders a plan as standard Block Kit: a header with progress,
// the items, each with its evidence line under it, packed into sections
// of at most 3,000 characters, a context footer and the plan's controls
// (controls); never more than 50 blocks. When the items would not all
// fit, the evidence lines are shortened first, then dropped; only then
// are items left out.
func PlanBlocks(p chat.Plan) []slack.Block {
	ctl := controls(p) // of the plan as the router has it: its item hashes are the router's
	p = p.Clean()
	for ev := maxEvidenceRunes; ; ev -= evidenceStep {
		if ev < 0 {
			ev = 0
		}
		blocks, all := planBlocks(p, ev, ctl)
		if all || ev == 0 {
			return blocks
		}
	}
}

// planBlocks renders p with evidence lines of at most ev runes (none for
// 0) and the controls ctl, and reports whether every item fit.
func planBlocks(p chat.Plan, ev int, ctl slack.Block) ([]slack.Block, bool) {
	blocks := []slack.Block{slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, chat.Shorten(p.Title(), maxHeaderText), true, false))}
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			blocks = append(blocks, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, cur.String(), false, true), nil, nil))
			cur.Reset()
		}
	}
	if len(p.Items) == 0 {
		cur.WriteString("_No items._")
	}
	all := true
	for i, it := range p.Items {
		line := itemLine(p, it)
		if utf8.RuneCountInString(line) > maxSectionText {
			line = chat.Shorten(line, maxSectionText)
		}
		if evidence := evidenceLine(p, it, ev); evidence != "" {
			// The item and its evidence stay in one section, the
			// item whole.
			room := maxSectionText - utf8.RuneCountInString(line) - 1
			if room > 1 {
				line += "\n" + chat.Shorten(evidence, room)
			}
		}
		if cur.Len() > 0 && utf8.RuneCountInString(cur.String())+1+utf8.RuneCountInString(line) > maxSectionText {
			flush()
		}
		if len(blocks) >= maxBlocks-3 { // keep room for this section, the footer and the controls
			cur.Reset()
			cur.WriteString(fmt.Sprintf(moreItems, len(p.Items)-i))
			all = false
			break
		}
		if cur.Len() > 0 {
			cur.WriteByte('\n')
		}
		cur.WriteString(line)
	}
	flush()
	blocks = append(blocks, slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, escape(p.Footer()), false, true)))
	return withControls(blocks, ctl), all
}

// The plan's buttons; the session comes from the message's thread. Edit
// plan and Change open the same modal (steer.go), so they share an id:
// the message carries one or the other.
var (
	stopID = chat.ButtonID(chat.ActionStop, "plan")
	editID = chat.ButtonID(chat.ActionChange, "plan")
)

// labelEdit is the label of the button that opens the plan's modal.
const labelEdit = "Edit plan"

// controls is the plan message's one actions block, nil when it has no
// button: while the plan waits for Start (p.Start), Start and Change;
// otherwise, on a plan people may steer (p.Steerable), Edit plan; and
// while a turn runs, Stop.
//
// The item controls of DESIGN §19 are one "Edit plan" modal, not an
// overflow menu per item row: the rendering packs several items into
// each section block to stay within Slack's 50 blocks, and an overflow
// menu is a section's accessory, one per block; giving each of 50 items
// a section of its own, with the header, the footer and the buttons,
// would pass 50 blocks. The modal lists every item as the message shows
// it, in a select, and the plan keeps its one block of buttons. Edit
// plan and Change carry what the modal needs of the plan in their value
// (editValue), so the modal is built from the message the person
// pressed, on any replica and after a restart.
func controls(p chat.Plan) slack.Block {
	var els []slack.BlockElement
	switch {
	case p.Start != "":
		els = append(els, slack.NewButtonBlockElement(p.Start, "start", plainText(chat.LabelStart)).WithStyle(slack.StylePrimary),
			slack.NewButtonBlockElement(editID, editValue(p), plainText(chat.LabelChange)))
	case p.Steerable():
		els = append(els, slack.NewButtonBlockElement(editID, editValue(p), plainText(labelEdit)))
	}
	if p.Stoppable {
		els = append(els, slack.NewButtonBlockElement(stopID, "stop", plainText(chat.LabelStop)).WithStyle(slack.StyleDanger))
	}
	if len(els) == 0 {
		return nil
	}
	return slack.NewActionBlock("pinplan-controls", els...)
}

// plainText is a plain_text object, emoji shown as typed.
func plainText(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.PlainTextType, s, false, false)
}

// withControls adds the controls block ctl, if any.
func withControls(blocks []slack.Block, ctl slack.Block) []slack.Block {
	if ctl == nil {
		return blocks
	}
	return append(blocks, ctl)
}

// CardBlocks renders an approval card: the tool and its server, the
// arguments, who may decide, and while it is open the three buttons.
func CardBlocks(c chat.Card) []slack.Block {
	c = c.Clean()
	args := strings.ReplaceAll(c.Arguments, "```", "`\u200b``")
	text := fmt.Sprintf("*%s*\n```%s```", escape(c.Title()), escape(args))
	blocks := []slack.Block{
		slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, chat.Shorten(text, maxSectionText), false, true), nil, nil),
		slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, cardStatus(c), false, true)),
	}
	if !c.Open() {
		return blocks
	}
	button := func(action, label string) *slack.ButtonBlockElement {
		return slack.NewButtonBlockElement(chat.ButtonID(action, c.ID), action, slack.NewTextBlockObject(slack.PlainTextType, label, false, false))
	}
	return append(blocks, slack.NewActionBlock("pinplan-card-"+c.ID,
		button(chat.ActionAllow, chat.LabelAllow).WithStyle(slack.StylePrimary),
		button(chat.ActionAlways, chat.LabelAlways),
		button(chat.ActionDeny, chat.LabelDeny).WithStyle(slack.StyleDanger)))
}

// cardStatus is the card's status line; the requester is mentioned so
// Slack tells them a decision waits.
func cardStatus(c chat.Card) string {
	status := escape(c.Status())
	if c.Requester != "" {
		status = strings.ReplaceAll(status, escape("<@"+c.Requester+">"), "<@"+c.Requester+">")
	}
	return status
}

// CardText is an approval card's plain text fallback.
func CardText(c chat.Card) string {
	c = c.Clean()
	if c.Open() {
		return c.Title() + ": " + chat.LabelAllow + ", " + chat.LabelAlways + " or " + chat.LabelDeny + "?"
	}
	return c.Title() + ": " + c.Status()
}

// NativePlanBlocks renders a plan with Slack's plan and task-card blocks
// and its controls; an item's evidence line is its task card's details.
func NativePlanBlocks(p chat.Plan) []slack.Block {
	ctl := controls(p)
	p = p.Clean()
	plan := slack.NewPlanBlock(chat.Shorten(p.Title(), maxHeaderText))
	tasks := make([]*slack.TaskCardBlock, 0, len(p.Items))
	for i, it := range p.Items {
		status := slack.TaskCardStatusPending
		switch it.Status {
		case todo.Completed:
			status = slack.TaskCardStatusComplete
		case todo.InProgress:
			if !p.Halted(it) { // an ended run's open item is not working: pending
				status = slack.TaskCardStatusInProgress
			}
		}
		title := chat.Shorten(it.Content, maxItemRunes)
		var details []slack.RichTextSectionElement
		if it.Status == chat.Skipped {
			// A task card's title is plain text: the skipped item's
			// card carries its mark there, and its text struck
			// through in the details, above who skipped it.
			title = chat.Shorten(chat.MarkSkipped+" "+it.Content, maxItemRunes)
			details = append(details, slack.NewRichTextSectionTextElement(chat.Shorten(it.Content, maxEvidenceRunes), &slack.RichTextSectionTextStyle{Strike: true}))
		}
		tc := slack.NewTaskCardBlock(fmt.Sprintf("item-%d", i+1), title)
		tc.Status = status
		if line := p.EvidenceLine(it); line != "" {
			// Rich text is literal: nothing to escape, no mention.
			if len(details) > 0 {
				line = "\n" + line
			}
			details = append(details, slack.NewRichTextSectionTextElement(chat.Shorten(line, maxEvidenceRunes), nil))
		}
		if len(details) > 0 {
			tc.Details = slack.NewRichTextBlock("", slack.NewRichTextSection(details...))
		}
		tasks = append(tasks, tc)
	}
	plan.WithTasks(tasks...)
	return withControls([]slack.Block{plan, slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, escape(p.Footer()), false, true))}, ctl)
}

// PlanText is the plain text fallback (notifications, old clients): the
// items and their evidence lines, shortened, within Slack's 40,000
// characters of a message's text: the items past them are counted in a
// last line, "… and 3 more items" (moreItems).
func PlanText(p chat.Plan) string {
	p = p.Clean()
	var b strings.Builder
	b.WriteString(p.Title())
	footer := "\n" + escape(p.Footer())
	n := utf8.RuneCountInString(b.String()) + utf8.RuneCountInString(footer)
	for i, it := range p.Items {
		lines := "\n" + p.ItemMark(it) + " " + escape(chat.Shorten(strings.Join(strings.Fields(it.Content), " "), maxFallbackItem))
		if line := evidenceLine(p, it, maxFallbackItem); line != "" {
			lines += "\n" + line
		}
		// Room for this item, and for the line that would count the
		// items after it; that line, counting this one too, has room.
		after := 0
		if left := len(p.Items) - i - 1; left > 0 {
			after = utf8.RuneCountInString("\n" + fmt.Sprintf(moreItems, left))
		}
		if n+utf8.RuneCountInString(lines)+after > maxText {
			b.WriteString("\n" + fmt.Sprintf(moreItems, len(p.Items)-i))
			break
		}
		n += utf8.RuneCountInString(lines)
		b.WriteString(lines)
	}
	b.WriteString(footer)
	return b.String()
}

// moreItems is the line that counts the items a plan's text leaves out.
const moreItems = "… and %d more items"

var (
	reBold   = regexp.MustCompile(`\*\*(.+?)\*\*|__(.+?)__`)
	reItalic = regexp.MustCompile(`(^|[^*\w])\*([^*\s][^*]*?)\*([^*\w]|$)`)
	reStrike = regexp.MustCompile(`~~(.+?)~~`)
	reLink   = regexp.MustCompile(`\[([^\]]+)\]\((https?://[^)\s]+)\)`)
	reHead   = regexp.MustCompile(`^#{1,6}\s+(.+)$`)
	reBullet = regexp.MustCompile(`^(\s*)[-*+]\s+`)
	reCode   = regexp.MustCompile("`[^`]*`")
)

// Mrkdwn converts the model's Markdown to Slack mrkdwn: bold, italics,
// strikethrough, links, headings and bullets; code is left alone; &, < and
// > are escaped so the text cannot mention anyone.
func Mrkdwn(md string) string {
	lines := strings.Split(md, "\n")
	inFence := false
	for i, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			if !inFence {
				lines[i] = "```" // Slack shows no language tag
			}
			inFence = !inFence
			continue
		}
		if inFence {
			lines[i] = escape(line)
			continue
		}
		lines[i] = convertLine(line)
	}
	return strings.Join(lines, "\n")
}

func convertLine(line string) string {
	// Keep inline code spans out of the rewriting.
	var spans []string
	line = reCode.ReplaceAllStringFunc(line, func(s string) string {
		spans = append(spans, escape(s))
		return fmt.Sprintf("\x00%d\x00", len(spans)-1)
	})
	line = escape(line)
	if m := reHead.FindStringSubmatch(line); m != nil {
		line = "\x01" + m[1] + "\x01"
	}
	line = reBullet.ReplaceAllString(line, "${1}• ")
	line = reBold.ReplaceAllStringFunc(line, func(s string) string {
		m := reBold.FindStringSubmatch(s)
		return "\x01" + m[1] + m[2] + "\x01"
	})
	line = reItalic.ReplaceAllString(line, "${1}_${2}_${3}")
	line = strings.ReplaceAll(line, "\x01", "*")
	line = reStrike.ReplaceAllString(line, "~$1~")
	line = reLink.ReplaceAllString(line, "<$2|$1>")
	for i, s := range spans {
		line = strings.Replace(line, fmt.Sprintf("\x00%d\x00", i), s, 1)
	}
	return line
}

// Split cuts text into pieces of at most max runes, at line breaks where it
// can, inside a long line where it must.
func Split(text string, max int) []string {
	var parts []string
	var cur strings.Builder
	n := 0
	push := func() {
		if cur.Len() > 0 {
			parts = append(parts, cur.String())
			cur.Reset()
			n = 0
		}
	}
	for _, line := range strings.SplitAfter(text, "\n") {
		l := utf8.RuneCountInString(line)
		if n+l > max {
			push()
		}
		for l > max {
			r := []rune(line)
			parts = append(parts, string(r[:max]))
			line = string(r[max:])
			l -= max
		}
		cur.WriteString(line)
		n += l
	}
	push()
	for i := range parts {
		parts[i] = strings.TrimRight(parts[i], "\n")
	}
	return parts
}
