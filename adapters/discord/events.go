package discord

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/bwmarrin/discordgo"

	"github.com/pinplan/pinplan/chat"
)

// onMessage runs in the gateway's goroutine (SyncEvents), in the order
// Discord sent the events. It drops what can be dropped without I/O and
// queues the rest behind the channel's earlier messages, so a follow-up is
// handled after the mention that created its session.
func (a *Adapter) onMessage(_ *discordgo.Session, m *discordgo.MessageCreate) {
	if m.Author == nil || a.ctx == nil {
		return
	}
	a.forums.touch(m.ChannelID, m.Timestamp) // a forum post's activity, the bot's own included
	bot := a.bot()
	if m.Type == discordgo.MessageTypeChannelPinnedMessage && m.Author.ID == bot {
		a.queue.Add(m.ChannelID, func() { a.removePinNotice(a.ctx, m.ChannelID, m.ID) })
		return
	}
	if a.ignorable(m.Message, bot) {
		return
	}
	a.queue.Add(m.ChannelID, func() { a.process(a.ctx, m.Message) })
}

func (a *Adapter) bot() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.botID
}

// ignorable: messages of bots (the bot's own included) and system messages.
func (a *Adapter) ignorable(m *discordgo.Message, bot string) bool {
	if m.Author == nil || m.Author.Bot || m.Author.ID == bot {
		return true
	}
	return m.Type != discordgo.MessageTypeDefault && m.Type != discordgo.MessageTypeReply
}

// mention reports whether m mentions the bot, by user or by its managed
// role, and returns the text without those mentions.
func (a *Adapter) mention(m *discordgo.Message, bot string) (bool, string) {
	mentioned := false
	for _, u := range m.Mentions {
		if u.ID == bot {
			mentioned = true
		}
	}
	strip := []string{"<@" + bot + ">", "", "<@!" + bot + ">", ""}
	a.mu.Lock()
	roles := a.botRoles[m.GuildID]
	a.mu.Unlock()
	for _, r := range roles {
		if slices.Contains(m.MentionRoles, r) {
			mentioned = true
		}
		strip = append(strip, "<@&"+r+">", "")
	}
	return mentioned, strings.TrimSpace(strings.NewReplacer(strip...).Replace(m.Content))
}

// process decides whether a message concerns the bot (before anything is
// written: a channel without a session costs neither a dedupe write nor a
// channel lookup), dedupes it and hands it on. It runs on the channel's
// queue.
func (a *Adapter) process(ctx context.Context, m *discordgo.Message) {
	bot := a.bot()
	mentioned, text := a.mention(m, bot)
	channel := m.ChannelID
	startThread, followUp, marked := false, false, true
	post, starter, text := a.forumMessage(ctx, m, mentioned, text)
	switch {
	case m.GuildID == "": // a DM channel is the session
	case mentioned:
		startThread = a.opts.ThreadPerTask && !isThread(a.channelType(ctx, channel))
	case starter && a.forumListed(post.forum): // a listed forum's every post is a task
	default:
		// Without a mention only threads hear the bot: a thread with a
		// session, or one whose mention has not made its session yet
		// (handed to another replica, or queued there still): the
		// follow-up waits for it (DESIGN §14). Types come from the
		// gateway (guildChannels), so chatter costs no lookup.
		a.mu.Lock()
		blank := a.noContent
		a.mu.Unlock()
		if blank || !isThread(a.channelType(ctx, channel)) {
			return // without the MessageContent intent its content is blank
		}
		followUp = true
		// A thread without a session gets no read marks: what it said
		// while the gateway was down was not for pinplan.
		marked = a.in.Known(Key(channel))
		if starter && !marked {
			a.forums.drop(channel) // a post that is no task: not kept
		}
	}
	if marked {
		// The mark moves past the message once it is handed on; a
		// channel new to the marks gets one just before it first, saved
		// before the message goes on, so that a crash in between leaves
		// it to fetch.
		a.markBefore(ctx, m.ChannelID, m.GuildID, m.ID)
		defer a.markSeen(ctx, m.ChannelID, m.GuildID, m.ID)
	}
	// Taken in once where it is queued (chat.Incoming.Event), so that a
	// crash before that cannot lose it.
	event := "discord/msg/" + m.ID
	if startThread {
		// Starting the thread is idempotent: a thread started from a
		// message has the message's id, and Discord refuses a second one
		// with 160004, so a message fetched again finds its thread.
		id := m.ID
		th, err := a.s.MessageThreadStartComplex(channel, m.ID, &discordgo.ThreadStart{
			Name: chat.Shorten(firstLine(chat.StripBidi(text), "pinplan task"), 90), AutoArchiveDuration: 1440, Type: discordgo.ChannelTypeGuildPublicThread,
		}, discordgo.WithContext(ctx))
		switch {
		case err == nil:
			id = th.ID
		case restCode(err) == codeThreadExists:
		default:
			a.log.Error("discord: start a thread for the task; using the channel", "err", err)
			id = ""
		}
		if id != "" {
			a.mu.Lock()
			a.chanTypes[id] = discordgo.ChannelTypeGuildPublicThread
			a.mu.Unlock()
			channel = id
			a.markSeen(ctx, id, m.GuildID, m.ID) // the thread's messages come after its starter
		}
	}
	th := chat.Thread{Platform: "discord", Key: Key(channel), Channel: channel}
	trigger := m.ID
	if channel != m.ChannelID {
		trigger = "" // the message is in the parent channel, not the thread
	}
	err := a.in.Handle(ctx, chat.Incoming{Thread: th, Text: text, Author: cmp.Or(m.Author.GlobalName, m.Author.Username), AuthorID: m.Author.ID, MessageID: trigger, Event: event, FollowUp: followUp, Files: filesOf(m.Attachments)})
	switch {
	case err == nil && !followUp && post.forum != "":
		a.wantTag(channel, tagPlanning, true) // a forum post's session has begun
	case err != nil && !errors.Is(err, chat.ErrRejected):
		a.log.Error("discord message not handled", "session", th.Key, "err", err)
	}
}

// onGuild learns the bot's managed role in a guild, so that a mention of
// the role counts as a mention of the bot.
func (a *Adapter) onGuild(_ *discordgo.Session, g *discordgo.GuildCreate) {
	if g.Guild == nil {
		return
	}
	a.guildChannels(g.Channels, g.Threads)
	a.forumGuild(g.Channels, g.Threads)
	bot := a.bot()
	managed := map[string]bool{}
	for _, r := range g.Roles {
		if r.Managed {
			managed[r.ID] = true
		}
	}
	if len(managed) == 0 {
		return
	}
	set := func(member *discordgo.Member) {
		var roles []string
		for _, r := range member.Roles {
			if managed[r] {
				roles = append(roles, r)
			}
		}
		a.mu.Lock()
		a.botRoles[g.ID] = roles
		a.mu.Unlock()
	}
	for _, mem := range g.Members {
		if mem.User != nil && mem.User.ID == bot {
			set(mem)
			return
		}
	}
	if a.ctx == nil {
		return
	}
	// Large guilds send no member list: ask for the bot's own member.
	a.queue.Add("guild/"+g.ID, func() {
		mem, err := a.s.GuildMember(g.ID, bot, discordgo.WithContext(a.ctx))
		if err != nil {
			a.log.Warn("discord: look up the bot's roles", "guild", g.ID, "err", err)
			return
		}
		set(mem)
	})
}

// guildChannels notes the types of the channels and active threads the
// gateway told of (GUILD_CREATE), so that deciding whether a message is
// in a thread costs no lookup (a thread started since costs one, once).
func (a *Adapter) guildChannels(lists ...[]*discordgo.Channel) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, list := range lists {
		for _, ch := range list {
			if ch != nil && ch.ID != "" {
				a.chanTypes[ch.ID] = ch.Type
				if isThread(ch.Type) && ch.ParentID != "" {
					a.chanParents[ch.ID] = ch.ParentID // a forum post or not, without a lookup
				}
			}
		}
	}
}

func firstLine(s, fallback string) string {
	s = strings.TrimSpace(strings.SplitN(s, "\n", 2)[0])
	if s == "" {
		return fallback
	}
	return s
}

func isThread(t discordgo.ChannelType) bool {
	return t == discordgo.ChannelTypeGuildPublicThread || t == discordgo.ChannelTypeGuildPrivateThread || t == discordgo.ChannelTypeGuildNewsThread
}

// channelType looks a channel's type up once and caches it.
func (a *Adapter) channelType(ctx context.Context, id string) discordgo.ChannelType {
	a.mu.Lock()
	t, ok := a.chanTypes[id]
	a.mu.Unlock()
	if ok {
		return t
	}
	ch, err := a.s.Channel(id, discordgo.WithContext(ctx))
	if err != nil {
		a.log.Warn("discord: look up channel", "channel", id, "err", err)
		return discordgo.ChannelTypeGuildText
	}
	a.mu.Lock()
	a.chanTypes[id] = ch.Type
	a.mu.Unlock()
	return ch.Type
}

// removePinNotice deletes Discord's "pinned a message" notice when the bot
// may (Manage Messages); without the permission it stops trying.
func (a *Adapter) removePinNotice(ctx context.Context, channel, id string) {
	a.mu.Lock()
	skip := a.noManage
	a.mu.Unlock()
	if skip {
		return
	}
	err := a.s.ChannelMessageDelete(channel, id, discordgo.WithContext(ctx))
	if c := restCode(err); c == codeMissingPerms || c == codeMissingAccess {
		a.mu.Lock()
		a.noManage = true
		a.mu.Unlock()
		a.log.Info("discord: no Manage Messages permission; pin notices stay")
	} else if err != nil {
		a.log.Warn("discord: delete pin notice", "err", err)
	}
}
