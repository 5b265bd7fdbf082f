package discord

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/todo"
)

// Discord's message limits the plan and replies stay within.
const (
	maxContent     = 2000
	maxDescription = 4096
	maxEmbedTotal  = 6000
	maxTitle       = 256
	maxFooter      = 2048
)

var mdEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "_", `\_`, "~", `\~`, "`", "\\`", "|", `\|`, ">", `\>`, "#", `\#`,
	"@everyone", "@\u200beveryone", "@here", "@\u200bhere", "<@", "<\u200b@", "<#", "<\u200b#")

// escapeMarkdown makes text show as typed: no formatting, no mentions.
func escapeMarkdown(s string) string { return mdEscaper.Replace(s) }

// line is p's item it, the n-th of the plan (1 on), cut to max runes,
// with its mark: completed and skipped items struck through, the item in
// progress bold. A steerable plan numbers its items: the item menu and
// the Add form name them by these numbers (steer.go).
func line(p chat.Plan, n int, it todo.Item, max int) string {
	text := escapeMarkdown(chat.Shorten(strings.Join(strings.Fields(it.Content), " "), max))
	mark := p.ItemMark(it)
	if p.Steerable() {
		mark += " " + strconv.Itoa(n) + "."
	}
	switch it.Status {
	case todo.Completed, chat.Skipped:
		return mark + " ~~" + text + "~~"
	case todo.InProgress:
		return mark + " **" + text + "**"
	}
	return mark + " " + text
}

// Lengths an item and its evidence line are cut to, in runes before
// escaping. To fit the description, evidence lines are shortened first,
// down to minEvidenceRunes, then items, down to minItemRunes; only then
// are the evidence lines dropped.
const (
	maxItemRunes     = 300
	minItemRunes     = 8
	maxEvidenceRunes = 300
	minEvidenceRunes = 20
	fitStep          = 8
	descriptionRoom  = maxDescription - 96
)

// describe is the description: each of p's items (the first of them, or
// all) on its line, cut to max runes, and under it its evidence line
// (evidence[i], "" for none), cut to ev runes (none for 0).
func describe(p chat.Plan, items []todo.Item, evidence []string, max, ev int) string {
	if len(items) == 0 {
		return "_No items._"
	}
	lines := make([]string, 0, 2*len(items))
	for i, it := range items {
		lines = append(lines, line(p, i+1, it, max))
		if evidence[i] != "" && ev > 0 {
			lines = append(lines, escapeMarkdown(chat.Shorten(evidence[i], ev)))
		}
	}
	return strings.Join(lines, "\n")
}

// fit is the longest description within the embed's limit.
func fit(p chat.Plan) string { return fitWithin(p, descriptionRoom, utf8.RuneCountInString) }

// fitWithin is the longest rendering of the items and their evidence
// lines whose length, as count measures it, is within room: evidence
// lines give way before items do. When even the shortest lines are too
// long, the items that do not fit are left out and a last line says how
// many.
func fitWithin(p chat.Plan, room int, count func(string) int) string {
	evidence := make([]string, len(p.Items))
	ev := 0 // the shortest evidence lines while items shrink
	for i, it := range p.Items {
		if evidence[i] = p.EvidenceLine(it); evidence[i] != "" {
			ev = minEvidenceRunes
		}
	}
	fits := func(d string) bool { return count(d) <= room }
	if ev > 0 {
		for e := maxEvidenceRunes; e >= minEvidenceRunes; e -= fitStep {
			if d := describe(p, p.Items, evidence, maxItemRunes, e); fits(d) {
				return d
			}
		}
	}
	for max := maxItemRunes; max >= minItemRunes; max -= fitStep {
		if d := describe(p, p.Items, evidence, max, ev); fits(d) {
			return d
		}
	}
	if d := describe(p, p.Items, evidence, minItemRunes, 0); fits(d) {
		return d
	}
	for n := len(p.Items) - 1; n >= 0; n-- {
		d := leftOut(len(p.Items) - n)
		if n > 0 {
			d = describe(p, p.Items[:n], evidence[:n], minItemRunes, 0) + "\n" + d
		}
		if fits(d) {
			return d
		}
	}
	return ""
}

// leftOut is the line that stands for n items the message had no room for.
func leftOut(n int) string {
	if n == 1 {
		return "… 1 more item not shown"
	}
	return fmt.Sprintf("… %d more items not shown", n)
}

// PlanEmbed renders a plan as an embed: the title with progress, one line
// per item (completed struck through, in progress bold) with its evidence
// line under it, and a footer with time, revision and run state. Evidence
// lines, then items, are shortened with … until the description fits
// Discord's 4,096 characters.
func PlanEmbed(p chat.Plan) *discordgo.MessageEmbed {
	p = cleanPlan(p)
	desc := fit(p)
	color := 0x2457c5
	done, total := p.Progress()
	switch {
	case p.State == chat.StateFailed:
		color = 0xc5303a
	case total > 0 && done == total:
		color = 0x2e8b57
	}
	return &discordgo.MessageEmbed{
		Title:       chat.Shorten(p.Title(), maxTitle),
		Description: desc,
		Color:       color,
		Footer:      &discordgo.MessageEmbedFooter{Text: chat.Shorten(p.Footer(), maxFooter)},
	}
}

// cleanPlan is p without bidirectional control characters (chat.Plan.Clean),
// in its marks too: a mark names its item by the item's text, so both are
// cleaned alike for the item's line to say who changed it, and the name
// of who did is shown as typed but for them.
func cleanPlan(p chat.Plan) chat.Plan {
	p = p.Clean()
	if p.Marks != nil {
		marks := make([]agent.Mark, len(p.Marks))
		for i, m := range p.Marks {
			m.Item, m.After, m.By = chat.StripBidi(m.Item), chat.StripBidi(m.After), chat.StripBidi(m.By)
			marks[i] = m
		}
		p.Marks = marks
	}
	return p
}

// embedSize counts the characters Discord limits to 6,000 per message.
func embedSize(e *discordgo.MessageEmbed) int {
	n := utf8.RuneCountInString(e.Title) + utf8.RuneCountInString(e.Description)
	if e.Footer != nil {
		n += utf8.RuneCountInString(e.Footer.Text)
	}
	return n
}

// noMentions is sent with every message: nobody is pinged, ever.
func noMentions() *discordgo.MessageAllowedMentions {
	return &discordgo.MessageAllowedMentions{Parse: []discordgo.AllowedMentionType{}}
}

// PlanMessage is the payload that posts a plan.
func PlanMessage(p chat.Plan) *discordgo.MessageSend {
	return &discordgo.MessageSend{Embeds: []*discordgo.MessageEmbed{PlanEmbed(p)}, Components: PlanComponents(p), AllowedMentions: noMentions()}
}

// stopID is the Stop button's custom_id; the session is the channel.
var stopID = chat.ButtonID(chat.ActionStop, "plan")

// PlanComponents are the embed's controls (planControls): the item menu
// while the plan is steerable, Start and Change while it waits for Start,
// Stop while a turn runs; else none (an empty list, so an edit removes
// them).
func PlanComponents(p chat.Plan) []discordgo.MessageComponent {
	if rows := planControls(p); len(rows) > 0 {
		return rows
	}
	return []discordgo.MessageComponent{}
}

// stopButton is the plan message's Stop button, as an embed's component
// or inside the Components V2 container.
func stopButton() discordgo.Button {
	return discordgo.Button{Label: chat.LabelStop, Style: discordgo.DangerButton, CustomID: stopID}
}

// CardEmbed renders an approval card: the tool and its server, the
// arguments and who may decide, or what was decided.
func CardEmbed(c chat.Card) *discordgo.MessageEmbed {
	c = c.Clean()
	args := strings.ReplaceAll(c.Arguments, "```", "`\u200b``")
	color := 0xd9a400
	switch {
	case strings.HasPrefix(c.Outcome, "Allowed"), strings.HasPrefix(c.Outcome, "Always"):
		color = 0x2e8b57
	case !c.Open():
		color = 0xc5303a
	}
	return &discordgo.MessageEmbed{
		Title:       chat.Shorten(c.Title(), maxTitle),
		Description: chat.Shorten("```json\n"+args+"\n```", maxDescription-16) + "\n" + c.Status(),
		Color:       color,
	}
}

// CardComponents is the card's three buttons while it is open, else none.
func CardComponents(c chat.Card) []discordgo.MessageComponent {
	if !c.Open() {
		return []discordgo.MessageComponent{}
	}
	return []discordgo.MessageComponent{discordgo.ActionsRow{Components: []discordgo.MessageComponent{
		discordgo.Button{Label: chat.LabelAllow, Style: discordgo.SuccessButton, CustomID: chat.ButtonID(chat.ActionAllow, c.ID)},
		discordgo.Button{Label: chat.LabelAlways, Style: discordgo.PrimaryButton, CustomID: chat.ButtonID(chat.ActionAlways, c.ID)},
		discordgo.Button{Label: chat.LabelDeny, Style: discordgo.DangerButton, CustomID: chat.ButtonID(chat.ActionDeny, c.ID)},
	}}}
}

// Split cuts text into messages of at most max characters, at line breaks
// where it can.
func Split(text string, max int) []string {
	var parts []string
	var cur strings.Builder
	n := 0
	for _, l := range strings.SplitAfter(text, "\n") {
		ln := utf8.RuneCountInString(l)
		if n+ln > max && cur.Len() > 0 {
			parts = append(parts, strings.TrimRight(cur.String(), "\n"))
			cur.Reset()
			n = 0
		}
		for ln > max {
			r := []rune(l)
			parts = append(parts, string(r[:max]))
			l = string(r[max:])
			ln -= max
		}
		cur.WriteString(l)
		n += ln
	}
	if s := strings.TrimRight(cur.String(), "\n"); s != "" {
		parts = append(parts, s)
	}
	return parts
}

// Permission bits the bot uses (Discord's permission flags).
const (
	permViewChannel         int64 = 1 << 10
	permSendMessages        int64 = 1 << 11
	permManageMessages      int64 = 1 << 13 // deletes the "pinned a message" notice
	permEmbedLinks          int64 = 1 << 14
	permReadMessageHistory  int64 = 1 << 16
	permCreatePublicThreads int64 = 1 << 35
	permSendInThreads       int64 = 1 << 38
	permPinMessages         int64 = 1 << 51

	// Permissions is what the invite asks for: only what pinplan uses.
	// Read Message History is for the catch-up after a reconnect.
	Permissions = permViewChannel | permSendMessages | permSendInThreads | permCreatePublicThreads |
		permReadMessageHistory | permEmbedLinks | permPinMessages | permManageMessages
)

// InviteURL is the OAuth2 URL that adds the bot to a server.
func InviteURL(base, applicationID string) string {
	return fmt.Sprintf("%s/oauth2/authorize?client_id=%s&permissions=%d&scope=bot+applications.commands", strings.TrimRight(base, "/"), applicationID, Permissions)
}

// Invite is `bot invite`: the OAuth2 URL on discord.com that adds the bot
// to a server, with the scopes and permissions pinplan uses. The
// application's id is appID (DISCORD_APPLICATION_ID), else the first part
// of the bot token; either must be a snowflake (a decimal id), or the URL
// would invite nothing.
func Invite(appID, token string) (string, error) {
	if appID != "" {
		if !Snowflake(appID) {
			return "", fmt.Errorf("invite: DISCORD_APPLICATION_ID %q is not a Discord id (a number such as 123456789012345678; Developer Portal -> your application -> General Information -> Application ID)", appID)
		}
		return InviteURL("https://discord.com", appID), nil
	}
	if token == "" {
		return "", errors.New("invite: set DISCORD_BOT_TOKEN (or DISCORD_APPLICATION_ID)")
	}
	appID, err := ApplicationID(token)
	if err != nil {
		return "", fmt.Errorf("invite: %w; check that it is the bot's token (Developer Portal -> Bot -> Reset Token), or set DISCORD_APPLICATION_ID", err)
	}
	return InviteURL("https://discord.com", appID), nil
}
