package discord

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/pinplan/pinplan/chat"
)

// dedupeTTL covers gateway replays after a resume.
const dedupeTTL = 24 * time.Hour

func (a *Adapter) onMessage(_ *discordgo.Session, m *discordgo.MessageCreate) {
	if m.Author == nil || a.ctx == nil {
		return
	}
	ctx := a.ctx
	a.mu.Lock()
	bot := a.botID
	a.mu.Unlock()
	if m.Type == discordgo.MessageTypeChannelPinnedMessage && m.Author.ID == bot {
		a.removePinNotice(ctx, m.ChannelID, m.ID)
		return
	}
	if m.Author.Bot || m.Author.ID == bot {
		return
	}
	if m.Type != discordgo.MessageTypeDefault && m.Type != discordgo.MessageTypeReply {
		return
	}
	if first, err := a.opts.Dedupe.FirstSeen(ctx, "discord/msg/"+m.ID, dedupeTTL); err != nil {
		a.log.Error("discord dedupe", "message", m.ID, "err", err)
	} else if !first {
		a.log.Info("discord message replayed; ignored", "message", m.ID)
		return
	}
	mentioned := false
	for _, u := range m.Mentions {
		if u.ID == bot {
			mentioned = true
		}
	}
	text := strings.TrimSpace(strings.NewReplacer("<@"+bot+">", "", "<@!"+bot+">", "").Replace(m.Content))
	channel := m.ChannelID
	switch {
	case m.GuildID == "": // a DM channel is the session
	case mentioned:
		if a.opts.ThreadPerTask && !isThread(a.channelType(ctx, channel)) {
			th, err := a.s.MessageThreadStartComplex(channel, m.ID, &discordgo.ThreadStart{
				Name: chat.Shorten(firstLine(text, "pinplan task"), 90), AutoArchiveDuration: 1440, Type: discordgo.ChannelTypeGuildPublicThread,
			}, discordgo.WithContext(ctx))
			if err != nil {
				a.log.Error("discord: start a thread for the task; using the channel", "err", err)
			} else {
				a.mu.Lock()
				a.chanTypes[th.ID] = discordgo.ChannelTypeGuildPublicThread
				a.mu.Unlock()
				channel = th.ID
			}
		}
	default:
		// Without a mention only threads with a session hear the bot's ear.
		if !isThread(a.channelType(ctx, channel)) || !a.opts.Handler.Known(Key(channel)) {
			return
		}
	}
	th := chat.Thread{Platform: "discord", Key: Key(channel), Channel: channel}
	trigger := m.ID
	if channel != m.ChannelID {
		trigger = "" // the message is in the parent channel, not the thread
	}
	err := a.opts.Handler.Handle(ctx, chat.Incoming{Thread: th, Text: text, Author: m.Author.Username, MessageID: trigger})
	if err != nil && !errors.Is(err, chat.ErrRejected) {
		a.log.Error("discord message not handled", "session", th.Key, "err", err)
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
