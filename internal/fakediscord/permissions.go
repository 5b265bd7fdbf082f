package fakediscord

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Permissions, as Discord computes them (discord.com/developers/docs,
// Permissions): a member's guild permissions (SetPermissions; by default
// DefaultPermissions, the bot's DefaultBotPermissions), ADMINISTRATOR
// granting everything, then the channel's overwrites (SetOverwrite): the
// @everyone one (keyed by the guild's id) and then the member's own, deny
// before allow. A thread has its parent's permissions. Without
// VIEW_CHANNEL a member has none in the channel; a private thread (type
// 12) is seen only by its members (AddThread, a message posted in it)
// and by those with MANAGE_THREADS.
//
// An interaction carries the invoking member's permissions in the channel
// (member.permissions) and the bot's (app_permissions), both as decimal
// strings; a member cannot run a command or click in a channel they
// cannot see (ErrNoAccess). The bot's REST calls are held to its own:
// a channel it cannot see answers 403 code 50001 Missing Access, a
// message without SEND_MESSAGES (SEND_MESSAGES_IN_THREADS in a thread)
// and a thread without CREATE_PUBLIC_THREADS 403 code 50013 Missing
// Permissions. GET /channels/{thread}/thread-members/{user} answers the
// member, or 404 code 10007 Unknown Member for someone who is not one.

// Permission bits (Permissions, bitwise permission flags).
const (
	PermAdministrator         int64 = 1 << 3
	PermViewChannel           int64 = 1 << 10
	PermSendMessages          int64 = 1 << 11
	PermManageMessages        int64 = 1 << 13
	PermEmbedLinks            int64 = 1 << 14
	PermManageThreads         int64 = 1 << 34
	PermCreatePublicThreads   int64 = 1 << 35
	PermSendMessagesInThreads int64 = 1 << 38
	PermPinMessages           int64 = 1 << 51

	// permAll is every permission Discord defines, what ADMINISTRATOR
	// grants.
	permAll int64 = 1<<52 - 1

	// DefaultPermissions are a member's where nothing else is set: what
	// a new server's @everyone role allows (view, send, send in threads,
	// embed links, create threads, history, application commands, ...),
	// without managing messages or threads.
	DefaultPermissions int64 = 2248473465835073
	// DefaultBotPermissions are the bot's where nothing else is set: the
	// invite's, which add Manage Messages (pin notices) and Pin Messages.
	DefaultBotPermissions = DefaultPermissions | PermManageMessages | PermPinMessages
)

// Discord's answers to a missing permission.
const (
	codeMissingAccess = 50001
	codeMissingPerms  = 50013
)

// ErrNoAccess is Command's and Click's error for a user who cannot see
// the channel: Discord shows them no command or button there.
var ErrNoAccess = errors.New("fakediscord: the user cannot see the channel")

// overwrite is a channel permission overwrite.
type overwrite struct{ allow, deny int64 }

// SetPermissions sets user's permissions in guild, as their roles give
// them (a moderator's MANAGE_THREADS, an administrator's ADMINISTRATOR).
func (s *Server) SetPermissions(guild, user string, perms int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	if s.guildPerms == nil {
		s.guildPerms = map[string]int64{}
	}
	s.guildPerms[guild+"/"+user] = perms
}

// SetOverwrite sets channel's permission overwrite for id: a user's id
// (BotID for the bot), or the guild's id for @everyone. A read-only
// announcements channel is SetOverwrite(channel, guild, 0,
// PermSendMessages).
func (s *Server) SetOverwrite(channel, id string, allow, deny int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	if s.permOverwrites == nil {
		s.permOverwrites = map[string]map[string]overwrite{}
	}
	if s.permOverwrites[channel] == nil {
		s.permOverwrites[channel] = map[string]overwrite{}
	}
	s.permOverwrites[channel][id] = overwrite{allow: allow, deny: deny}
}

// AddThread registers a thread (type 10 announcement, 11 public or 12
// private) under the channel parent, in its guild, with the bot and
// members as its members.
func (s *Server) AddThread(id string, typ int, parent string, members ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	guild := ""
	if p, ok := s.channels[parent]; ok {
		guild = p.guildID
	}
	th := &channel{id: id, typ: typ, guildID: guild, parentID: parent, name: "thread " + id}
	s.channels[id] = th
	s.joinLocked(th, BotID)
	for _, m := range members {
		s.joinLocked(th, m)
	}
}

// Permissions returns user's permissions in channel, as an interaction
// there carries them.
func (s *Server) Permissions(channel, user string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	return s.permissionsLocked(channel, user)
}

// joinLocked makes user a member of the thread ch.
func (s *Server) joinLocked(ch *channel, user string) {
	if !isThread(ch.typ) {
		return
	}
	if ch.members == nil {
		ch.members = map[string]time.Time{}
	}
	if _, ok := ch.members[user]; !ok {
		ch.members[user] = time.Now()
	}
}

// permissionsLocked computes user's permissions in the channel id.
func (s *Server) permissionsLocked(id, user string) int64 {
	ch, ok := s.channels[id]
	if !ok {
		return 0
	}
	if ch.guildID == "" {
		return DefaultPermissions // a DM
	}
	base, ok := s.guildPerms[ch.guildID+"/"+user]
	if !ok {
		base = DefaultPermissions
		if user == BotID {
			base = DefaultBotPermissions
		}
	}
	if base&PermAdministrator != 0 {
		return permAll
	}
	target := id
	if isThread(ch.typ) && ch.parentID != "" {
		target = ch.parentID // a thread has its parent's overwrites
	}
	perms := base
	for _, who := range []string{ch.guildID, user} {
		if o, ok := s.permOverwrites[target][who]; ok {
			perms = perms&^o.deny | o.allow
		}
	}
	if perms&PermViewChannel == 0 {
		return 0
	}
	if ch.typ == 12 && perms&PermManageThreads == 0 {
		if _, member := ch.members[user]; !member {
			return 0
		}
	}
	return perms
}

// sendPermission is the permission a message in ch needs.
func sendPermission(ch *channel) int64 {
	if isThread(ch.typ) {
		return PermSendMessagesInThreads
	}
	return PermSendMessages
}

// botMayLocked checks the bot's permission need in the guild channel ch:
// 50001 when it cannot see the channel, 50013 without need.
func (s *Server) botMayLocked(ch *channel, need int64) *apiError {
	if ch.guildID == "" {
		return nil
	}
	perms := s.permissionsLocked(ch.id, BotID)
	switch {
	case perms&PermViewChannel == 0:
		return fail(403, codeMissingAccess, "Missing Access")
	case perms&need != need:
		return fail(403, codeMissingPerms, "Missing Permissions")
	}
	return nil
}

// threadMemberLocked answers GET /channels/{thread}/thread-members/{user}.
func (s *Server) threadMemberLocked(ch *channel, user string) (int, any, *apiError) {
	if !isThread(ch.typ) {
		return 0, nil, fail(400, codeWrongChannelType, "Cannot execute action on this channel type")
	}
	at, ok := ch.members[user]
	if !ok {
		return 0, nil, fail(404, codeUnknownMember, "Unknown Member")
	}
	return 200, map[string]any{"id": ch.id, "user_id": user, "join_timestamp": at.UTC().Format(time.RFC3339Nano), "flags": 0}, nil
}

// interactionPermissionsLocked sets an interaction's member.permissions
// and app_permissions, or refuses a user who cannot see the channel.
func (s *Server) interactionPermissionsLocked(ev map[string]any, channel, user string) error {
	if member, ok := ev["member"].(map[string]any); ok {
		perms := s.permissionsLocked(channel, user)
		if perms&PermViewChannel == 0 {
			return fmt.Errorf("%s in %s: %w", user, channel, ErrNoAccess)
		}
		member["permissions"] = strconv.FormatInt(perms, 10)
	}
	ev["app_permissions"] = strconv.FormatInt(s.permissionsLocked(channel, BotID), 10)
	return nil
}

// reLink is a link in a message's content, with the brackets that keep
// Discord from unfurling it.
var reLink = regexp.MustCompile(`<?https?://[^\s<>]+>?`)

// Unfurls returns the links in the message's content Discord would unfurl
// into embeds: every http(s) link not written as <link>, unless the
// message is flagged SUPPRESS_EMBEDS (1<<2).
func (m Message) Unfurls() []string {
	if m.Flags&flagSuppressEmbeds != 0 {
		return nil
	}
	var out []string
	for _, l := range reLink.FindAllString(m.Content, -1) {
		if strings.HasPrefix(l, "<") && strings.HasSuffix(l, ">") {
			continue
		}
		out = append(out, strings.Trim(l, "<>"))
	}
	return out
}
