package config

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDefaults(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.DB != "./data/pinplan.db" || c.HTTPAddr != "127.0.0.1:8080" || c.StaleRounds != 3 ||
		c.ReminderRole != "system" || c.MaxRounds != 25 || c.SlackAPIURL != "https://slack.com/api/" ||
		c.DiscordAPIURL != "https://discord.com" || c.OpenAIBaseURL != "https://api.openai.com/v1" || c.ModelConfigured {
		t.Errorf("defaults: %+v", c)
	}
	if c.SlackBotToken != "" || c.DiscordBotToken != "" {
		t.Errorf("chat tokens set by default: slack %q, discord %q", c.SlackBotToken, c.DiscordBotToken)
	}
}

func TestErrorsNameTheKey(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		key  string
	}{
		{"stale", map[string]string{"PINPLAN_STALE_ROUNDS": "zero"}, "PINPLAN_STALE_ROUNDS"},
		{"role", map[string]string{"PINPLAN_REMINDER_ROLE": "assistant"}, "PINPLAN_REMINDER_ROLE"},
		{"rounds", map[string]string{"PINPLAN_MAX_ROUNDS": "0"}, "PINPLAN_MAX_ROUNDS"},
		{"url", map[string]string{"OPENAI_BASE_URL": "localhost:11434"}, "OPENAI_BASE_URL"},
		{"bool", map[string]string{"PINPLAN_DISCORD_THREAD_PER_TASK": "yes please"}, "PINPLAN_DISCORD_THREAD_PER_TASK"},
		{"addr", map[string]string{"PINPLAN_HTTP_ADDR": "0.0.0.0:8080"}, "PINPLAN_WEB_TOKEN"},
		{"slack half", map[string]string{"SLACK_BOT_TOKEN": "xoxb-1"}, "SLACK_APP_TOKEN"},
		{"timeout", map[string]string{"PINPLAN_MODEL_TIMEOUT": "-1s"}, "PINPLAN_MODEL_TIMEOUT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(env(tt.env))
			if err == nil || !strings.Contains(err.Error(), tt.key) {
				t.Errorf("got %v, want an error naming %s", err, tt.key)
			}
		})
	}
}

func TestNonLoopbackWithToken(t *testing.T) {
	c, err := Load(env(map[string]string{"PINPLAN_HTTP_ADDR": "0.0.0.0:8080", "PINPLAN_WEB_TOKEN": "s3cret-token"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != "0.0.0.0:8080" {
		t.Errorf("addr = %s", c.HTTPAddr)
	}
}

func TestFileAndEnvPrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pinplan.toml")
	os.WriteFile(path, []byte("pinplan_db = \"/tmp/from-file.db\"\npinplan_stale_rounds = 5\nopenai_model = \"file-model\"\n"), 0o600)
	c, err := Load(env(map[string]string{"PINPLAN_CONFIG": path, "OPENAI_MODEL": "env-model"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.DB != "/tmp/from-file.db" || c.StaleRounds != 5 || c.OpenAIModel != "env-model" {
		t.Errorf("got db=%s stale=%d model=%s", c.DB, c.StaleRounds, c.OpenAIModel)
	}
	os.WriteFile(path, []byte("pinplan_bogus = 1\n"), 0o600)
	if _, err := Load(env(map[string]string{"PINPLAN_CONFIG": path})); err == nil || !strings.Contains(err.Error(), "pinplan_bogus") {
		t.Errorf("unknown key: got %v", err)
	}
}

func TestSecretsNeverPrinted(t *testing.T) {
	const tok = "xoxb-very-secret-value"
	c, err := Load(env(map[string]string{"SLACK_BOT_TOKEN": tok, "SLACK_APP_TOKEN": "xapp-another-secret", "OPENAI_API_KEY": "sk-abcdef123456"}))
	if err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(c)
	for _, out := range []string{c.String(), fmt.Sprintf("%v", c), fmt.Sprintf("%+v", *c), fmt.Sprintf("%#v", *c), string(j)} {
		for _, s := range c.Secrets() {
			if strings.Contains(out, s) {
				t.Errorf("secret printed in %q", out)
			}
		}
	}
	if got := c.Redact("auth failed for " + tok); strings.Contains(got, tok) {
		t.Errorf("Redact left the token: %s", got)
	}
	if c.SlackBotToken.Reveal() != tok {
		t.Error("Reveal lost the value")
	}
}
