package config

import (
	"strings"
	"testing"
)

// TestTokenShapes (issue 40, item 15): a token of the wrong kind or
// with whitespace in it is refused at load, by the key that holds it,
// without the token in the message; tokens of the right shape load.
func TestTokenShapes(t *testing.T) {
	slack := func(bot, app string) map[string]string {
		return map[string]string{"SLACK_BOT_TOKEN": bot, "SLACK_APP_TOKEN": app}
	}
	tests := []struct {
		name  string
		env   map[string]string
		key   string // the key the error names; "" loads
		say   string // and what it says
		token string // never in the error
	}{
		{"bot token hello", slack("hello", "xapp-1-A1-2-abc"), "SLACK_BOT_TOKEN", "xoxb-", "hello"},
		{"user token", slack("xoxp-1-2-3-secretpart", "xapp-1-A1-2-abc"), "SLACK_BOT_TOKEN", "user token", "secretpart"},
		{"space inside", slack("xoxb-1-2 secretpart", "xapp-1-A1-2-abc"), "SLACK_BOT_TOKEN", "space", "secretpart"},
		{"zero-width space", slack("xoxb-1-2-secretpart\u200b", "xapp-1-A1-2-abc"), "SLACK_BOT_TOKEN", "invisible", "secretpart"},
		{"quoted", slack(`"xoxb-1-2-secretpart"`, "xapp-1-A1-2-abc"), "SLACK_BOT_TOKEN", "quote", "secretpart"},
		{"app token with a tab", slack("xoxb-1-2-abc", "xapp-1-A1\t2-secretpart"), "SLACK_APP_TOKEN", "space", "secretpart"},
		{"app token hello", slack("xoxb-1-2-abc", "hello"), "SLACK_APP_TOKEN", "xapp-", "hello"},
		{"signing secret with a space", map[string]string{"SLACK_BOT_TOKEN": "xoxb-1-2-abc", "SLACK_SIGNING_SECRET": "abc secretpart"}, "SLACK_SIGNING_SECRET", "space", "secretpart"},
		{"discord Bot prefix", map[string]string{"DISCORD_BOT_TOKEN": "Bot OTAw.secretpart.x"}, "DISCORD_BOT_TOKEN", `"Bot "`, "secretpart"},
		{"discord Bearer prefix", map[string]string{"DISCORD_BOT_TOKEN": "Bearer OTAw.secretpart.x"}, "DISCORD_BOT_TOKEN", `"Bearer "`, "secretpart"},
		{"discord newline", map[string]string{"DISCORD_BOT_TOKEN": "OTAw.secretpart\n.x"}, "DISCORD_BOT_TOKEN", "space", "secretpart"},
		{"trailing space is trimmed", slack("xoxb-1-2-abc ", "xapp-1-A1-2-abc\n"), "", "", ""},
		{"good slack", slack("xoxb-1-2-abc", "xapp-1-A1-2-abc"), "", "", ""},
		{"good discord", map[string]string{"DISCORD_BOT_TOKEN": "OTAwMDAwMDAwMDAwMDAwMDAx.fake.token"}, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(env(tt.env))
			switch {
			case tt.key == "" && err != nil:
				t.Fatalf("got %v, want it loaded", err)
			case tt.key == "":
				return
			case err == nil:
				t.Fatalf("loaded, want an error naming %s", tt.key)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.key) || !strings.Contains(msg, tt.say) {
				t.Errorf("got %q, want an error naming %s that says %s", msg, tt.key, tt.say)
			}
			if strings.Contains(msg, tt.token) {
				t.Errorf("the error %q prints the token", msg)
			}
		})
	}
}

// TestUnknownEnv (issue 40, item 15): a PINPLAN_ name in the environment
// that no setting has is reported with the nearest setting's name;
// settings, PINPLAN_CONFIG and other programs' names are not.
func TestUnknownEnv(t *testing.T) {
	environ := []string{"PINPLAN_MAX_ROUND=5", "PINPLAN_ETCD_ENDPOINT=http://e:2379", "PINPLAN_DB=/x.db", "PINPLAN_CONFIG=/p.toml",
		"HOME=/root", "SLACK_BOT_TOKN=x", "PINPLAN_FROBNICATE=1", "PINPLAN_HTTP_ADDR", "pinplan_db=x"}
	got := UnknownEnv(environ)
	want := []Unknown{{Name: "PINPLAN_MAX_ROUND", Suggest: "PINPLAN_MAX_ROUNDS"}, {Name: "PINPLAN_ETCD_ENDPOINT", Suggest: "PINPLAN_ETCD_ENDPOINTS"}, {Name: "PINPLAN_FROBNICATE"}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("got %+v, want %+v", got[i], want[i])
		}
	}
	if s := got[0].String(); !strings.Contains(s, "did you mean PINPLAN_MAX_ROUNDS?") {
		t.Errorf("got %q, want a did you mean", s)
	}
}
