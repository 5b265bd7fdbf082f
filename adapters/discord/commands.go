package discord

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/pinplan/pinplan/chat"
)

// Application commands (DESIGN §7): /pinplan task:<text>, /pinplan stop,
// /pinplan reset and /pinplan status, registered at start by a bulk
// overwrite (idempotent: the same set each time, ids kept), of the global
// set, or of Options.Guild's set when one is configured (a guild's set
// shows at once; the global one can take up to an hour to reach every
// client). A command is answered within Discord's 3 s:
//
//   - task: a public reply quoting the task, attributed to the person
//     (nobody pinged); in a text channel that is the channel's session, or
//     with ThreadPerTask a new thread started on that reply; in a thread,
//     the thread's session. The person is the requester. Refused, to the
//     person alone, where they or the bot may not send messages (Send
//     Messages; Send Messages in Threads in a thread); the quote's links
//     are not unfurled.
//   - stop and reset: the router's answer, under the same rules as the
//     words and buttons (DESIGN §12): a refusal only the person sees.
//   - status: deferred (Discord shows "pinplan is thinking..." to the
//     person alone), then the sessions of this channel and its threads
//     that are working or waiting for approval, with links: what the
//     person can see here, never another channel's, and a private thread
//     only to its members and those with Manage Threads.
//
// Commands need no MessageContent intent: without it pinplan still works
// through mentions, DMs and commands.

// maxTaskOption is the longest task the command takes: the most Discord
// allows a string option.
const maxTaskOption = 6000

// commandName is the one command pinplan registers.
const commandName = "pinplan"

// commandSet is the command pinplan registers, with its subcommands.
func commandSet() []*discordgo.ApplicationCommand {
	return []*discordgo.ApplicationCommand{{
		Name: commandName, Type: discordgo.ChatApplicationCommand,
		Description: "Plan and work through a task as a pinned checklist",
		Options: []*discordgo.ApplicationCommandOption{
			{Type: discordgo.ApplicationCommandOptionSubCommand, Name: "task", Description: "Give pinplan a task here (a thread goes on with its session)",
				Options: []*discordgo.ApplicationCommandOption{{Type: discordgo.ApplicationCommandOptionString, Name: "task", Description: "What to do", Required: true, MaxLength: maxTaskOption}}},
			{Type: discordgo.ApplicationCommandOptionSubCommand, Name: "stop", Description: "Stop the turn running here"},
			{Type: discordgo.ApplicationCommandOptionSubCommand, Name: "reset", Description: "Archive this session's history and plan, and start afresh"},
			{Type: discordgo.ApplicationCommandOptionSubCommand, Name: "status", Description: "Sessions of this channel and its threads that are working or waiting"},
		},
	}}
}

// registerCommands overwrites the application's global command set, and
// Options.Guild's too when one is set (DESIGN §9: a guild's set shows at
// once; that server then lists /pinplan twice until it is unset).
func (a *Adapter) registerCommands(ctx context.Context) {
	app := cmp.Or(a.opts.ApplicationID, a.bot())
	for _, guild := range []string{"", a.opts.Guild} {
		scope := cmp.Or(guild, "global")
		if _, err := a.s.ApplicationCommandBulkOverwrite(app, guild, commandSet(), discordgo.WithContext(ctx)); err != nil {
			a.log.Warn("discord: register the /pinplan command; mentions still work", "scope", scope, "err", err)
			continue
		}
		a.log.Info("discord: /pinplan registered", "scope", scope)
		if a.opts.Guild == "" {
			break
		}
	}
}

// command handles an application command interaction.
func (a *Adapter) command(ctx context.Context, i *discordgo.Interaction) {
	user := i.User
	if i.Member != nil && i.Member.User != nil {
		user = i.Member.User
	}
	data := i.ApplicationCommandData()
	if user == nil || data.Name != commandName || len(data.Options) == 0 {
		a.respond(ctx, i, "I don't know that command: try `/pinplan task`.", true)
		return
	}
	sub := data.Options[0]
	name := cmp.Or(user.GlobalName, user.Username)
	th := chat.Thread{Platform: "discord", Key: Key(i.ChannelID), Channel: i.ChannelID}
	switch sub.Name {
	case "task":
		text := ""
		for _, o := range sub.Options {
			if o.Name == "task" {
				text, _ = o.Value.(string)
			}
		}
		a.commandTask(ctx, i, user.ID, name, strings.TrimSpace(text))
	case "stop", "reset":
		a.commandThreadAction(ctx, i, th, sub.Name, user.ID, name)
	case "status":
		a.commandStatus(ctx, i, user.ID)
	default:
		a.respond(ctx, i, "I don't know `/pinplan "+sub.Name+"`: try `/pinplan task`.", true)
	}
}

// actionAnswerWithin is how long a stop or reset may take before its
// command is deferred: Discord wants an answer within 3 s.
const actionAnswerWithin = 2 * time.Second

// commandThreadAction runs /pinplan stop or reset as the words do, and
// answers with the router's reply: a refusal to the person alone. One
// that takes longer (a reset unpins the plan, which the pin budget can
// hold back) is deferred first, to the person alone, and filled in.
func (a *Adapter) commandThreadAction(ctx context.Context, i *discordgo.Interaction, th chat.Thread, action, userID, name string) {
	type result struct {
		text    string
		private bool
	}
	done := make(chan result, 1)
	go func() {
		err := a.in.Handle(ctx, chat.Incoming{Thread: th, Text: action, Author: name, AuthorID: userID, Event: "discord/cmd/" + i.ID, Sync: true})
		var rej *chat.Rejection
		switch {
		case errors.As(err, &rej):
			done <- result{rej.Reason, rej.Refused || rej.Private}
		case err != nil:
			a.log.Error("discord /pinplan "+action, "session", th.Key, "err", err)
			done <- result{"I could not do that just now (the bot's log has the details).", true}
		default:
			done <- result{"Done.", false}
		}
	}()
	t := time.NewTimer(actionAnswerWithin)
	defer t.Stop()
	select {
	case r := <-done:
		a.respond(ctx, i, r.text, r.private)
		return
	case <-t.C:
	}
	deferred := &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredChannelMessageWithSource, Data: &discordgo.InteractionResponseData{Flags: discordgo.MessageFlagsEphemeral}}
	if err := a.s.InteractionRespond(i, deferred, discordgo.WithContext(ctx)); err != nil {
		a.log.Warn("discord: defer /pinplan "+action, "interaction", i.ID, "err", err)
	}
	r := <-done
	if _, err := a.s.InteractionResponseEdit(i, &discordgo.WebhookEdit{Content: &r.text, AllowedMentions: noMentions()}, discordgo.WithContext(ctx)); err != nil {
		a.log.Warn("discord: answer /pinplan "+action, "interaction", i.ID, "err", err)
	}
}

// commandTask starts or continues a session with the task of a command.
func (a *Adapter) commandTask(ctx context.Context, i *discordgo.Interaction, userID, name, text string) {
	if text == "" {
		a.respond(ctx, i, "Tell me the task, for example `/pinplan task: plan the release checklist for v2`.", true)
		return
	}
	inThread := i.GuildID != "" && isThread(a.channelType(ctx, i.ChannelID))
	if why := mayPostTask(i, inThread); why != "" {
		a.respond(ctx, i, why, true)
		return
	}
	quoted := "> " + strings.ReplaceAll(text, "\n", "\n> ")
	msg, err := a.respondWith(ctx, i, chat.Shorten(fmt.Sprintf("<@%s> asked pinplan:\n%s", userID, quoted), maxContent))
	if err != nil {
		a.log.Warn("discord: answer /pinplan task", "interaction", i.ID, "err", err)
		return // the person sees that the command failed, and nothing ran
	}
	channel := i.ChannelID
	trigger := msg
	if i.GuildID != "" && a.opts.ThreadPerTask && msg != "" && !inThread {
		th, err := a.s.MessageThreadStartComplex(channel, msg, &discordgo.ThreadStart{
			Name: chat.Shorten(firstLine(chat.StripBidi(text), "pinplan task"), 90), AutoArchiveDuration: 1440, Type: discordgo.ChannelTypeGuildPublicThread,
		}, discordgo.WithContext(ctx))
		if err != nil {
			a.log.Error("discord: start a thread for the task; using the channel", "err", err)
		} else {
			a.mu.Lock()
			a.chanTypes[th.ID] = discordgo.ChannelTypeGuildPublicThread
			a.mu.Unlock()
			channel, trigger = th.ID, ""
		}
	}
	thread := chat.Thread{Platform: "discord", Key: Key(channel), Channel: channel}
	err = a.in.Handle(ctx, chat.Incoming{Thread: thread, Text: text, Author: name, AuthorID: userID, MessageID: trigger, Event: "discord/cmd/" + i.ID})
	if err != nil && !errors.Is(err, chat.ErrRejected) {
		a.log.Error("discord /pinplan task not handled", "session", thread.Key, "err", err)
	}
}

// commandStatus answers /pinplan status for user: deferred, then the
// list.
func (a *Adapter) commandStatus(ctx context.Context, i *discordgo.Interaction, user string) {
	defer0 := &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredChannelMessageWithSource, Data: &discordgo.InteractionResponseData{Flags: discordgo.MessageFlagsEphemeral}}
	if err := a.s.InteractionRespond(i, defer0, discordgo.WithContext(ctx)); err != nil {
		a.log.Warn("discord: defer /pinplan status", "interaction", i.ID, "err", err)
		return
	}
	var perms int64
	if i.Member != nil {
		perms = i.Member.Permissions
	}
	text := a.status(ctx, i.GuildID, i.ChannelID, user, perms)
	content := text
	if _, err := a.s.InteractionResponseEdit(i, &discordgo.WebhookEdit{Content: &content, AllowedMentions: noMentions()}, discordgo.WithContext(ctx)); err != nil {
		a.log.Warn("discord: answer /pinplan status", "interaction", i.ID, "err", err)
	}
}

// status lists the sessions of here and its threads that are working or
// waiting, as user (with perms here) sees them.
func (a *Adapter) status(ctx context.Context, guild, here, user string, perms int64) string {
	if a.opts.Sessions == nil {
		return "`/pinplan status` is not available here: each thread's plan message shows its state."
	}
	all, err := a.opts.Sessions(ctx)
	if err != nil {
		a.log.Error("discord: list sessions for /pinplan status", "err", err)
		return "I could not read the sessions just now (the bot's log has the details); try again in a moment."
	}
	shown := func(s chat.Listed) bool {
		channel, ok := strings.CutPrefix(s.Key, "discord/")
		// Only what the person sees here: this channel and its threads,
		// a private one only if they are in it or manage threads.
		return ok && (channel == here || guild != "" && a.parentOf(ctx, channel) == here && a.mayView(ctx, channel, user, perms))
	}
	return chat.StatusList(all, shown, "here", func(s chat.Listed, state string) string {
		return fmt.Sprintf("<#%s> %s: %s", strings.TrimPrefix(s.Key, "discord/"), escapeMarkdown(chat.Shorten(cmp.Or(s.Title, "a task"), 80)), state)
	})
}

// parentOf is a thread's parent channel ("" for a channel that is no
// thread, or unknown), looked up once and cached.
func (a *Adapter) parentOf(ctx context.Context, channel string) string {
	a.mu.Lock()
	g, ok := a.chanParents[channel]
	a.mu.Unlock()
	if ok {
		return g
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ch, err := a.s.Channel(channel, discordgo.WithContext(lctx))
	if err != nil {
		a.log.Warn("discord: look up channel", "channel", channel, "err", err)
		return ""
	}
	parent := ""
	if isThread(ch.Type) {
		parent = ch.ParentID
	}
	a.mu.Lock()
	a.chanParents[channel] = parent
	a.chanTypes[channel] = ch.Type
	a.mu.Unlock()
	return parent
}

// respond answers an interaction with a message, to the person alone when
// private.
func (a *Adapter) respond(ctx context.Context, i *discordgo.Interaction, text string, private bool) {
	resp := &discordgo.InteractionResponse{Type: discordgo.InteractionResponseChannelMessageWithSource,
		Data: &discordgo.InteractionResponseData{Content: text, AllowedMentions: noMentions()}}
	if private {
		resp.Data.Flags = discordgo.MessageFlagsEphemeral
	}
	if err := a.s.InteractionRespond(i, resp, discordgo.WithContext(ctx)); err != nil {
		a.log.Warn("discord: answer a command", "interaction", i.ID, "err", err)
	}
}

// respondWith answers an interaction with a public message, its embeds
// suppressed, and returns the message's id (with_response), "" if
// Discord did not say.
func (a *Adapter) respondWith(ctx context.Context, i *discordgo.Interaction, text string) (string, error) {
	endpoint := discordgo.EndpointInteractionResponse(i.ID, i.Token)
	// The text is someone's task: its links are not unfurled into embeds
	// the bot would seem to vouch for.
	resp := &discordgo.InteractionResponse{Type: discordgo.InteractionResponseChannelMessageWithSource,
		Data: &discordgo.InteractionResponseData{Content: text, AllowedMentions: noMentions(), Flags: discordgo.MessageFlagsSuppressEmbeds}}
	body, err := a.s.RequestWithBucketID(http.MethodPost, endpoint+"?with_response=true", resp, endpoint, discordgo.WithContext(ctx))
	if err != nil {
		return "", err
	}
	var out struct {
		Resource struct {
			Message struct {
				ID string `json:"id"`
			} `json:"message"`
		} `json:"resource"`
	}
	json.Unmarshal(body, &out)
	return out.Resource.Message.ID, nil
}
