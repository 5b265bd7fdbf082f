package discord

import (
	"unicode/utf16"

	"github.com/bwmarrin/discordgo"

	"github.com/pinplan/pinplan/chat"
)

// Discord's limits on a Components V2 message (Component reference): the
// components counted with every nested one, and the text of all its text
// displays together.
const (
	maxV2Components = 40
	maxV2Text       = 4000
	// maxV2Footer is the footer's length in runes before escaping; it is
	// generated text, long only with a long name of who stopped the turn.
	maxV2Footer = 500
	// v2TextRoom is what the title, items, evidence and footer may take:
	// some room is kept, as descriptionRoom keeps it, and the text is
	// measured in UTF-16 code units, never fewer than Discord counts.
	v2TextRoom = maxV2Text - 96
)

// refComponentsV2 is the chat.MessageRef Kind of a plan message posted
// with IS_COMPONENTS_V2; a ref without it is an embed message. The flag
// cannot be removed from a message, so the kind decides every edit.
const refComponentsV2 = "components_v2"

// Accent colours of the container by run state.
const (
	colorWorking = 0x2457c5
	colorWaiting = 0xd9a400
	colorDone    = 0x2e8b57
	colorStopped = 0x7a828e
	colorFailed  = 0xc5303a
)

// accent is the container's colour for the plan's run state.
func accent(p chat.Plan) int {
	switch p.State {
	case chat.StateWaiting:
		return colorWaiting
	case chat.StateDone:
		return colorDone
	case chat.StateStopped, chat.StateLimited, chat.StateTurnBudget, chat.StateDayBudget:
		return colorStopped
	case chat.StateFailed:
		return colorFailed
	}
	return colorWorking // working, resumed after restart
}

// utf16Len is the length of s in UTF-16 code units: a character outside
// the Basic Multilingual Plane (🔄) counts twice.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += max(1, utf16.RuneLen(r))
	}
	return n
}

// PlanContainer renders a plan as Components V2: one container, its
// accent colour by run state, holding a text display with the title and
// the items with their evidence lines (as the embed shows them), a
// separator, a text display with the footer and the controls
// (planControls): the item menu while the plan is steerable, and an
// action row with Start and Change while the turn waits for Start and
// Stop while it runs. Ten components at most, and the text is shortened
// as the embed's description is until all of it fits in Discord's 4,000
// characters.
func PlanContainer(p chat.Plan) []discordgo.MessageComponent {
	controls := planControls(p) // before Clean: its ids hash the items as chat knows them
	p = cleanPlan(p)
	head := "### " + p.Title() + "\n"
	footer := "-# " + escapeMarkdown(chat.Shorten(p.Footer(), maxV2Footer))
	body := head + fitWithin(p, v2TextRoom-utf16Len(head)-utf16Len(footer), utf16Len)
	color := accent(p)
	divider, spacing := true, discordgo.SeparatorSpacingSizeSmall
	children := []discordgo.MessageComponent{
		discordgo.TextDisplay{Content: body},
		discordgo.Separator{Divider: &divider, Spacing: &spacing},
		discordgo.TextDisplay{Content: footer},
	}
	children = append(children, controls...)
	return []discordgo.MessageComponent{discordgo.Container{AccentColor: &color, Components: children}}
}

// V2Message is the body that posts or edits a plan message with
// IS_COMPONENTS_V2: the flag, the container and nobody pinged. It never
// carries content or embeds, which the flag forbids (discordgo's
// MessageSend always sends "embeds").
type V2Message struct {
	Flags           discordgo.MessageFlags            `json:"flags"`
	Components      []discordgo.MessageComponent      `json:"components"`
	AllowedMentions *discordgo.MessageAllowedMentions `json:"allowed_mentions"`
}

// PlanMessageV2 is the payload that posts a plan as Components V2, and
// edits it: an edit sends the flag again, so it is never dropped.
func PlanMessageV2(p chat.Plan) *V2Message {
	return &V2Message{Flags: discordgo.MessageFlagsIsComponentsV2, Components: PlanContainer(p), AllowedMentions: noMentions()}
}
