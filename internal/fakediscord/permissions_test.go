package fakediscord

import (
	"errors"
	"strconv"
	"testing"
)

// TestPermissionsPerChannel: a member's permissions are computed per
// channel as Discord computes them (guild permissions, ADMINISTRATOR,
// the @everyone overwrite then the member's, a thread taking its
// parent's, nothing without VIEW_CHANNEL, a private thread seen by its
// members and by MANAGE_THREADS only).
func TestPermissionsPerChannel(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	s.AddChannel("ANN", 0, "G1")
	s.AddChannel("HIDDEN", 0, "G1")
	s.AddChannel("D1", 1, "")
	s.AddThread("T1", 11, "ANN")
	s.AddThread("P1", 12, "C1", "U1")
	s.SetOverwrite("ANN", "G1", 0, PermSendMessages)   // read-only for @everyone
	s.SetOverwrite("ANN", "MOD", PermSendMessages, 0)  // but a moderator may post
	s.SetOverwrite("HIDDEN", "G1", 0, PermViewChannel) // nobody sees it
	s.SetPermissions("G1", "ADMIN", PermAdministrator) // an administrator
	s.SetPermissions("G1", "LEAD", DefaultPermissions|PermManageThreads)
	tests := []struct {
		name, channel, user string
		has, lacks          int64
	}{
		{"a member in a plain channel", "C1", "U2", PermViewChannel | PermSendMessages | PermSendMessagesInThreads, PermManageThreads},
		{"read-only for @everyone", "ANN", "U2", PermViewChannel | PermSendMessagesInThreads, PermSendMessages},
		{"the member's overwrite after @everyone's", "ANN", "MOD", PermSendMessages, 0},
		{"a thread has its parent's", "T1", "U2", PermSendMessagesInThreads, PermSendMessages},
		{"nothing without view", "HIDDEN", "U2", 0, PermViewChannel | PermSendMessages},
		{"an administrator has everything", "HIDDEN", "ADMIN", PermViewChannel | PermSendMessages | PermManageThreads, 0},
		{"a private thread's member", "P1", "U1", PermViewChannel | PermSendMessagesInThreads, 0},
		{"not a private thread's member", "P1", "U2", 0, PermViewChannel},
		{"manage threads sees a private thread", "P1", "LEAD", PermViewChannel | PermManageThreads, 0},
		{"the bot is a member of its threads", "P1", BotID, PermViewChannel | PermSendMessagesInThreads, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := s.Permissions(tt.channel, tt.user)
			if got&tt.has != tt.has || got&tt.lacks != 0 {
				t.Errorf("got %b, want %b set and %b clear", got, tt.has, tt.lacks)
			}
		})
	}
}

// TestInteractionPermissions: a command or click carries the member's
// and the bot's permissions in the channel as decimal strings, and a
// member cannot run a command where they cannot see.
func TestInteractionPermissions(t *testing.T) {
	s := &Server{}
	base, g, card := cardSetup(t, s)
	s.AddChannel("ANN", 0, "G1")
	s.AddThread("P1", 12, "C1", "U1")
	s.SetOverwrite("ANN", "G1", 0, PermSendMessages)
	s.SetOverwrite("ANN", BotID, PermSendMessages, 0)
	registerPinplan(t, base)

	if _, err := s.Command("ANN", "U2", "pinplan", "status", nil); err != nil {
		t.Fatal(err)
	}
	ev := g.dispatch("INTERACTION_CREATE")["d"].(map[string]any)
	member, _ := ev["member"].(map[string]any)
	perms, err := strconv.ParseInt(member["permissions"].(string), 10, 64)
	if err != nil || perms&PermSendMessages != 0 || perms&PermViewChannel == 0 {
		t.Errorf("member.permissions %v: want view and no send (%v)", member["permissions"], err)
	}
	app, err := strconv.ParseInt(ev["app_permissions"].(string), 10, 64)
	if err != nil || app&PermSendMessages == 0 {
		t.Errorf("app_permissions %v: want send (%v)", ev["app_permissions"], err)
	}

	if _, err := s.Command("P1", "U2", "pinplan", "status", nil); !errors.Is(err, ErrNoAccess) {
		t.Errorf("a command in a private thread by a non-member: %v, want ErrNoAccess", err)
	}
	if _, err := s.Command("P1", "U1", "pinplan", "status", nil); err != nil {
		t.Errorf("a command in a private thread by its member: %v", err)
	}
	s.SetOverwrite("C1", "U3", 0, PermViewChannel)
	if _, err := s.Click("C1", card, "U3", "deny:1"); !errors.Is(err, ErrNoAccess) {
		t.Errorf("a click by someone who cannot see the channel: %v, want ErrNoAccess", err)
	}
}

// registerPinplan registers /pinplan with its status subcommand.
func registerPinplan(t *testing.T, base string) {
	t.Helper()
	cmd := map[string]any{"name": "pinplan", "description": "d", "options": []any{
		map[string]any{"type": 1, "name": "status", "description": "d"},
	}}
	if a := rest(t, base, "PUT", "applications/"+BotID+"/commands", []any{cmd}); a.status != 200 {
		t.Fatalf("register: %d %v", a.status, a.body)
	}
}

// TestBotPermissionsAndThreadMembers: the bot's posts need Send Messages
// (Send Messages in Threads in a thread), a private thread it is not in
// is Missing Access, and the thread member route answers members and
// 404 Unknown Member for anyone else.
func TestBotPermissionsAndThreadMembers(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	s.AddChannel("ANN", 0, "G1")
	s.AddThread("T1", 11, "C1")
	s.AddThread("P1", 12, "C1", "U1")
	s.AddThread("P2", 12, "C1", "U1")
	base := serve(t, s)
	s.SetOverwrite("ANN", "G1", 0, PermSendMessages)
	hello := map[string]any{"content": "hello"}
	if a := rest(t, base, "POST", "channels/ANN/messages", hello); a.status != 403 || a.code() != codeMissingPerms {
		t.Errorf("a post without Send Messages: %d %v, want 403 50013", a.status, a.body)
	}
	s.SetOverwrite("C1", BotID, 0, PermSendMessagesInThreads)
	if a := rest(t, base, "POST", "channels/T1/messages", hello); a.status != 403 || a.code() != codeMissingPerms {
		t.Errorf("a thread post without Send Messages in Threads: %d %v, want 403 50013", a.status, a.body)
	}
	if a := rest(t, base, "POST", "channels/C1/messages", hello); a.status != 200 {
		t.Errorf("a channel post with Send Messages: %d %v", a.status, a.body)
	}
	s.SetOverwrite("C1", BotID, 0, 0)

	if a := rest(t, base, "GET", "channels/P1/thread-members/U1", nil); a.status != 200 || a.field("user_id") != "U1" || a.field("id") != "P1" {
		t.Errorf("a member: %d %v", a.status, a.body)
	}
	if a := rest(t, base, "GET", "channels/P1/thread-members/U2", nil); a.status != 404 || a.code() != codeUnknownMember {
		t.Errorf("not a member: %d %v, want 404 10007", a.status, a.body)
	}
	if a := rest(t, base, "GET", "channels/C1/thread-members/U1", nil); a.status != 400 || a.code() != codeWrongChannelType {
		t.Errorf("a channel that is no thread: %d %v, want 400 50024", a.status, a.body)
	}
	s.mu.Lock()
	delete(s.channels["P2"].members, BotID) // the bot left P2
	s.mu.Unlock()
	if a := rest(t, base, "GET", "channels/P2", nil); a.status != 403 || a.code() != codeMissingAccess {
		t.Errorf("a private thread the bot is not in: %d %v, want 403 50001", a.status, a.body)
	}
	s.SetPermissions("G1", BotID, DefaultBotPermissions|PermManageThreads)
	if a := rest(t, base, "GET", "channels/P2/thread-members/U1", nil); a.status != 200 {
		t.Errorf("with Manage Threads: %d %v", a.status, a.body)
	}
}

// TestUnfurls: a link in content unfurls unless it is written <link> or
// the message is flagged SUPPRESS_EMBEDS.
func TestUnfurls(t *testing.T) {
	for _, tt := range []struct {
		name  string
		m     Message
		links int
	}{
		{"a bare link", Message{Content: "free nitro: https://phish.example/claim"}, 1},
		{"a bracketed link", Message{Content: "see <https://example.com/a>"}, 0},
		{"suppressed", Message{Content: "https://phish.example/claim", Flags: flagSuppressEmbeds}, 0},
		{"two, one bracketed", Message{Content: "http://a.example <http://b.example>"}, 1},
	} {
		if got := tt.m.Unfurls(); len(got) != tt.links {
			t.Errorf("%s: unfurls %v, want %d", tt.name, got, tt.links)
		}
	}
}
