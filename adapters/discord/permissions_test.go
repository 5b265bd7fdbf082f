package discord

import (
	"strings"
	"testing"

	"github.com/bwmarrin/discordgo"
)

// TestMayPostTask: /pinplan task needs the person and the bot to be able
// to send here: Send Messages in a channel, Send Messages in Threads in a
// thread; ADMINISTRATOR holds every permission; a DM has no member.
func TestMayPostTask(t *testing.T) {
	const (
		view   = discordgo.PermissionViewChannel
		send   = discordgo.PermissionSendMessages
		thread = discordgo.PermissionSendMessagesInThreads
	)
	tests := []struct {
		name          string
		member, app   int64
		dm, inThread  bool
		refused, says string
	}{
		{name: "both may send", member: view | send, app: view | send},
		{name: "a read-only channel", member: view | thread, app: view | send, refused: "You", says: "Send Messages"},
		{name: "the bot may not send", member: view | send, app: view | thread, refused: "pinplan can't", says: "Send Messages"},
		{name: "a thread needs Send Messages in Threads", member: view | send, app: view | send | thread, inThread: true, refused: "You", says: "Send Messages in Threads"},
		{name: "in a thread with it", member: view | thread, app: view | thread, inThread: true},
		{name: "an administrator", member: discordgo.PermissionAdministrator, app: view | send},
		{name: "a DM", dm: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := &discordgo.Interaction{AppPermissions: tt.app}
			if !tt.dm {
				i.GuildID, i.Member = "G1", &discordgo.Member{Permissions: tt.member}
			}
			got := mayPostTask(i, tt.inThread)
			if tt.refused == "" && got != "" || tt.refused != "" && (!strings.HasPrefix(got, tt.refused) || !strings.Contains(got, tt.says)) {
				t.Errorf("got %q, want %q naming %q", got, tt.refused, tt.says)
			}
		})
	}
}
