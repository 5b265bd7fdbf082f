package discord

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

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

func line(it todo.Item, max int) string {
	text := escapeMarkdown(chat.Shorten(strings.Join(strings.Fields(it.Content), " "), max))
	switch it.Status {
	case todo.Completed:
		return chat.Mark(it.Status) + " ~~" + text + "~~"
	case todo.InProgress:
		return chat.Mark(it.Status) + " **" + text + "**"
	}
	return chat.Mark(it.Status) + " " + text
}

func describe(p chat.Plan, max int) string {
	if len(p.Items) == 0 {
		return "_No items._"
	}
	lines := make([]string, len(p.Items))
	for i, it := range p.Items {
		lines[i] = line(it, max)
	}
	return strings.Join(lines, "\n")
}

// PlanEmbed renders a plan as an embed: the title with progress, one line
// per item (completed struck through, in progress bold), and a footer with
// time, revision and run state. Long items are shortened with … until the
// description fits Discord's 4,096 characters.
func PlanEmbed(p chat.Plan) *discordgo.MessageEmbed {
	desc := ""
	for max := 300; max >= 8; max -= 8 {
		desc = describe(p, max)
		if utf8.RuneCountInString(desc) <= maxDescription-96 {
			break
		}
	}
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

// PlanComponents is the Stop button while a turn runs, else none (an
// empty list, so an edit removes the button).
func PlanComponents(p chat.Plan) []discordgo.MessageComponent {
	if !p.Stoppable {
		return []discordgo.MessageComponent{}
	}
	return []discordgo.MessageComponent{discordgo.ActionsRow{Components: []discordgo.MessageComponent{
		discordgo.Button{Label: chat.LabelStop, Style: discordgo.DangerButton, CustomID: stopID},
	}}}
}

// CardEmbed renders an approval card: the tool and its server, the
// arguments and who may decide, or what was decided.
func CardEmbed(c chat.Card) *discordgo.MessageEmbed {
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
