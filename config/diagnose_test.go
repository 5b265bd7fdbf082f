package config

import (
	"strings"
	"testing"
)

// TestDiagnose: Diagnose goes on past an invalid setting and returns
// every problem, each by its key and none with a token in it; Load fails
// with the first of them.
func TestDiagnose(t *testing.T) {
	env := map[string]string{
		"SLACK_BOT_TOKEN":       "xapp-1-A1-2-secretapp",
		"SLACK_APP_TOKEN":       "xoxb-1-2-secretbot",
		"DISCORD_BOT_TOKEN":     "Bot OTAw.secretdiscord.x",
		"PINPLAN_ETCD_PASSWORD": "secretetcd",
		"PINPLAN_STALE_ROUNDS":  "zero",
	}
	getenv := func(k string) string { return env[k] }
	c, problems, err := Diagnose(getenv)
	if err != nil || c == nil {
		t.Fatalf("Diagnose: %v, %v", c, err)
	}
	var keys []string
	for _, p := range problems {
		keys = append(keys, p.Key)
		for _, secret := range []string{"secretapp", "secretbot", "secretdiscord"} {
			if strings.Contains(p.Error(), secret) {
				t.Errorf("problem %q shows a token", p)
			}
		}
	}
	for _, want := range []string{"PINPLAN_STALE_ROUNDS", "DISCORD_BOT_TOKEN", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN"} {
		if !strings.Contains(strings.Join(keys, " "), want) {
			t.Errorf("got problems with %v, want one with %s", keys, want)
		}
	}
	if _, lerr := Load(getenv); lerr == nil || lerr.Error() != problems[0].Error() {
		t.Errorf("Load: got %v, want the first problem %v", lerr, problems[0])
	}
	if got := c.Redact("password secretetcd"); strings.Contains(got, "secretetcd") {
		t.Errorf("Redact left the etcd password: %q", got)
	}
}
