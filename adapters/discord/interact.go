package discord

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/bwmarrin/discordgo"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
)

var (
	_ chat.Interactive = (*Adapter)(nil)
	_ chat.History     = (*Adapter)(nil)
)

// PostCard implements chat.Interactive: the card as a message in the
// session's channel, answering nobody, pinging nobody.
//
// A post with a key (chat.SendKey) carries its nonce with enforce_nonce,
// as replies do: an attempt after one whose answer was lost, or the next
// process's after a kill, gets back the card Discord created instead of
// a second one (within the few minutes Discord holds a nonce).
func (a *Adapter) PostCard(ctx context.Context, th chat.Thread, c chat.Card) (chat.MessageRef, error) {
	msg := nonceSend{MessageSend: &discordgo.MessageSend{Embeds: []*discordgo.MessageEmbed{CardEmbed(c)}, Components: CardComponents(c), AllowedMentions: noMentions()}}
	if key := chat.SendKey(ctx); key != "" {
		msg.Nonce, msg.EnforceNonce = nonce(key), true
	}
	endpoint := discordgo.EndpointChannelMessages(th.Channel)
	body, err := a.s.RequestWithBucketID(http.MethodPost, endpoint, msg, endpoint, discordgo.WithContext(ctx))
	if err != nil {
		return chat.MessageRef{}, classify("post approval card", err, false)
	}
	var m struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &m); err != nil || m.ID == "" {
		return chat.MessageRef{}, fmt.Errorf("discord: post approval card: no message id in the answer (%v)", err)
	}
	return chat.MessageRef{Channel: th.Channel, ID: m.ID}, nil
}

// EditCard implements chat.Interactive.
func (a *Adapter) EditCard(ctx context.Context, _ chat.Thread, ref chat.MessageRef, c chat.Card) error {
	embeds := []*discordgo.MessageEmbed{CardEmbed(c)}
	components := CardComponents(c)
	_, err := a.s.ChannelMessageEditComplex(&discordgo.MessageEdit{ID: ref.ID, Channel: ref.Channel, Embeds: &embeds, Components: &components, AllowedMentions: noMentions()}, discordgo.WithContext(ctx))
	return classify("edit approval card "+ref.ID, err, false)
}

// History implements chat.History: the channel's messages before the one
// that starts the session, oldest first, without bots' messages.
func (a *Adapter) History(ctx context.Context, th chat.Thread, before string, limit int) ([]agent.Quoted, error) {
	msgs, err := a.s.ChannelMessages(th.Channel, min(limit, 100), before, "", "", discordgo.WithContext(ctx))
	if err != nil {
		return nil, classify("read channel history", err, false)
	}
	bot := a.bot()
	var out []agent.Quoted
	for _, m := range slices.Backward(msgs) {
		if a.ignorable(m, bot) {
			continue
		}
		_, text := a.mention(m, bot)
		out = append(out, agent.Quoted{Author: cmp.Or(m.Author.GlobalName, m.Author.Username), Text: text})
	}
	return out, nil
}

// onInteraction answers a button press, a choice in the item menu or a
// submitted Add form within Discord's 3 seconds: with the pressed message
// updated (type 7), a form (type 9), or an ephemeral note for the
// presser (type 4, flags 64). It runs off the gateway goroutine.
func (a *Adapter) onInteraction(_ *discordgo.Session, i *discordgo.InteractionCreate) {
	if i.Interaction == nil || a.ctx == nil {
		return
	}
	switch i.Type {
	case discordgo.InteractionMessageComponent:
		a.queue.Add("interaction/"+i.ID, func() { a.interact(a.ctx, i.Interaction) })
	case discordgo.InteractionModalSubmit:
		a.queue.Add("interaction/"+i.ID, func() { a.submit(a.ctx, i.Interaction) })
	case discordgo.InteractionApplicationCommand:
		a.queue.Add("interaction/"+i.ID, func() { a.command(a.ctx, i.Interaction) })
	}
}

// interact handles a message component: the item menu (steer.go), Change,
// or a button the router knows (Stop, Start, a card's).
func (a *Adapter) interact(ctx context.Context, i *discordgo.Interaction) {
	c, ok := clicker(i)
	if !ok {
		return
	}
	data := i.MessageComponentData()
	switch data.CustomID {
	case itemMenuID:
		a.pick(ctx, i, c, data.Values)
		return
	case changeID:
		a.respond(ctx, i, changeAnswer, true)
		return
	}
	c.Button = data.CustomID
	a.answer(ctx, i, a.in.Click(ctx, c))
}

// submit handles a submitted form: the Add form is the only one.
func (a *Adapter) submit(ctx context.Context, i *discordgo.Interaction) {
	if c, ok := clicker(i); ok {
		a.submitAdd(ctx, i, c)
	}
}

// answer answers interaction i with the router's result: the message
// updated to the card or plan it now shows, else a note for the presser
// alone.
func (a *Adapter) answer(ctx context.Context, i *discordgo.Interaction, res chat.ClickResult) {
	if res.Plan != nil && i.Message != nil {
		a.remember(i.ChannelID, i.Message.ID, *res.Plan, false)
		a.forumPlan(i.ChannelID, *res.Plan) // a press that moves the plan moves its post's tag
	}
	if res.Plan != nil && i.Message != nil && i.Message.Flags&discordgo.MessageFlagsIsComponentsV2 != 0 {
		// A Components V2 plan is updated as one: the flag and the
		// container, no content or embeds (discordgo's response data
		// always sends both).
		endpoint := discordgo.EndpointInteractionResponse(i.ID, i.Token)
		update := struct {
			Type discordgo.InteractionResponseType `json:"type"`
			Data *V2Message                        `json:"data"`
		}{discordgo.InteractionResponseUpdateMessage, PlanMessageV2(*res.Plan)}
		if _, err := a.s.RequestWithBucketID(http.MethodPost, endpoint, update, endpoint, discordgo.WithContext(ctx)); err != nil {
			a.log.Warn("discord answer a button press", "interaction", i.ID, "err", err)
		}
		return
	}
	resp := &discordgo.InteractionResponse{Type: discordgo.InteractionResponseUpdateMessage, Data: &discordgo.InteractionResponseData{AllowedMentions: noMentions()}}
	switch {
	case res.Card != nil:
		resp.Data.Embeds = []*discordgo.MessageEmbed{CardEmbed(*res.Card)}
		resp.Data.Components = CardComponents(*res.Card)
	case res.Plan != nil && i.Message != nil:
		resp.Data.Embeds = []*discordgo.MessageEmbed{PlanEmbed(*res.Plan)}
		resp.Data.Components = PlanComponents(*res.Plan)
	default:
		resp.Type = discordgo.InteractionResponseChannelMessageWithSource
		resp.Data.Content = cmp.Or(res.Private, "Nothing to do.")
		resp.Data.Flags = discordgo.MessageFlagsEphemeral
	}
	if err := a.s.InteractionRespond(i, resp, discordgo.WithContext(ctx)); err != nil {
		a.log.Warn("discord answer a button press", "interaction", i.ID, "err", err)
	}
}
