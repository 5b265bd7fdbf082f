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
	case todo.Completed:
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
// of at most 3,000 characters, and a context footer; never more than 50
// blocks. When the items would not all fit, the evidence lines are
// shortened first, then dropped; only then are items left out.
func PlanBlocks(p chat.Plan) []slack.Block {
	p = p.Clean()
	for ev := maxEvidenceRunes; ; ev -= evidenceStep {
		if ev < 0 {
			ev = 0
		}
		blocks, all := planBlocks(p, ev)
		if all || ev == 0 {
			return blocks
		}
	}
}

// planBlocks renders p with evidence lines of at most ev runes (none for
// 0) and reports whether every item fit.
func planBlocks(p chat.Plan, ev int) ([]slack.Block, bool) {
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
		if len(blocks) >= maxBlocks-3 { // keep room for this section, the footer and the Stop button
			cur.Reset()
			cur.WriteString(fmt.Sprintf("… and %d more items", len(p.Items)-i))
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
	return withStop(blocks, p), all
}

// stopID is the Stop button's id; the session comes from the message's
// thread.
var stopID = chat.ButtonID(chat.ActionStop, "plan")

// withStop adds the Stop button while a turn runs.
func withStop(blocks []slack.Block, p chat.Plan) []slack.Block {
	if !p.Stoppable {
		return blocks
	}
	stop := slack.NewButtonBlockElement(stopID, "stop", slack.NewTextBlockObject(slack.PlainTextType, chat.LabelStop, false, false)).WithStyle(slack.StyleDanger)
	return append(blocks, slack.NewActionBlock("pinplan-stop", stop))
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

// NativePlanBlocks renders a plan with Slack's plan and task-card blocks;
// an item's evidence line is its task card's details.
func NativePlanBlocks(p chat.Plan) []slack.Block {
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
		tc := slack.NewTaskCardBlock(fmt.Sprintf("item-%d", i+1), chat.Shorten(it.Content, maxItemRunes))
		tc.Status = status
		if line := p.EvidenceLine(it); line != "" {
			// Rich text is literal: nothing to escape, no mention.
			tc.Details = slack.NewRichTextBlock("", slack.NewRichTextSection(slack.NewRichTextSectionTextElement(chat.Shorten(line, maxEvidenceRunes), nil)))
		}
		tasks = append(tasks, tc)
	}
	plan.WithTasks(tasks...)
	return withStop([]slack.Block{plan, slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, escape(p.Footer()), false, true))}, p)
}

// PlanText is the plain text fallback (notifications, old clients): the
// items and their evidence lines, shortened.
func PlanText(p chat.Plan) string {
	p = p.Clean()
	var b strings.Builder
	b.WriteString(p.Title())
	for _, it := range p.Items {
		b.WriteString("\n" + p.ItemMark(it) + " " + escape(chat.Shorten(strings.Join(strings.Fields(it.Content), " "), maxFallbackItem)))
		if line := evidenceLine(p, it, maxFallbackItem); line != "" {
			b.WriteString("\n" + line)
		}
	}
	b.WriteString("\n" + escape(p.Footer()))
	return b.String()
}

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
