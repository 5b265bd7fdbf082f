package discord

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/bwmarrin/discordgo"
)

// Who may do what through a command is read from the interaction itself:
// in a guild Discord sends the invoking member's permissions in the
// channel, overwrites applied (member.permissions), and the bot's
// (app_permissions), as decimal strings discordgo reads into int64s. A
// thread has its parent's permissions, and sending in it takes Send
// Messages in Threads instead of Send Messages.

// codeUnknownMember answers a thread member lookup for someone who is
// not one (with a 404).
const codeUnknownMember = 10007

// has reports whether perms hold every bit of need; ADMINISTRATOR holds
// them all.
func has(perms, need int64) bool {
	return perms&discordgo.PermissionAdministrator != 0 || perms&need == need
}

// mayPostTask says why /pinplan task may not run here, "" when it may.
// The task is posted publicly as the person's and the plan and answer
// follow from the bot, so both must be able to send messages here: a
// person who may not (a read-only announcements channel) must not have
// the bot post for them. A DM has no member and no such limit.
func mayPostTask(i *discordgo.Interaction, thread bool) string {
	if i.Member == nil {
		return ""
	}
	need, name, where := int64(discordgo.PermissionSendMessages), "Send Messages", "channel"
	if thread {
		need, name, where = discordgo.PermissionSendMessagesInThreads, "Send Messages in Threads", "thread"
	}
	need |= discordgo.PermissionViewChannel
	switch {
	case !has(i.Member.Permissions, need):
		return fmt.Sprintf("You can't post in this %s (you don't have the %s permission here), so pinplan won't post a task here for you.", where, name)
	case !has(i.AppPermissions, need):
		return fmt.Sprintf("pinplan can't post in this %s: it needs the %s permission here. Ask a moderator to grant it, then try again.", where, name)
	}
	return ""
}

// mayView reports whether the person (user, with perms in the thread's
// parent channel) sees the thread: everyone there sees a public one; a
// private one only its members and those with Manage Threads. A lookup
// that fails leaves the thread out.
func (a *Adapter) mayView(ctx context.Context, thread, user string, perms int64) bool {
	if a.channelType(ctx, thread) != discordgo.ChannelTypeGuildPrivateThread || has(perms, discordgo.PermissionManageThreads) {
		return true
	}
	_, err := a.s.ThreadMember(thread, user, false, discordgo.WithContext(ctx))
	var re *discordgo.RESTError
	switch {
	case err == nil:
		return true
	case restCode(err) == codeUnknownMember, errors.As(err, &re) && re.Response != nil && re.Response.StatusCode == http.StatusNotFound:
		return false
	}
	a.log.Warn("discord: look up a thread member for /pinplan status; the thread is left out", "thread", thread, "err", err)
	return false
}
