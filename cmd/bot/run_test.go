package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func runWith(env map[string]string, args ...string) (string, string, error) {
	var out, errb bytes.Buffer
	err := run(context.Background(), args, func(k string) string { return env[k] }, &out, &errb)
	return out.String(), errb.String(), err
}

func TestRunInvite(t *testing.T) {
	out, _, err := runWith(map[string]string{"DISCORD_BOT_TOKEN": "OTAwMDAwMDAwMDAwMDAwMDAx.fake.token"}, "invite")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"client_id=900000000000000001", "scope=bot+applications.commands", "permissions="} {
		if !strings.Contains(out, want) {
			t.Errorf("invite output %q lacks %s", out, want)
		}
	}
	if _, _, err := runWith(nil, "invite"); err == nil || !strings.Contains(err.Error(), "DISCORD_BOT_TOKEN") {
		t.Errorf("invite without a token: %v", err)
	}
}

func TestRunErrors(t *testing.T) {
	if _, _, err := runWith(nil, "frobnicate"); err == nil || !strings.Contains(err.Error(), "frobnicate") {
		t.Errorf("unknown command: %v", err)
	}
	if _, _, err := runWith(map[string]string{"PINPLAN_MAX_ROUNDS": "lots"}); err == nil || !strings.Contains(err.Error(), "PINPLAN_MAX_ROUNDS") {
		t.Errorf("bad setting: %v", err)
	}
	if _, _, err := runWith(nil, "backup"); err == nil || !strings.Contains(err.Error(), "usage") {
		t.Errorf("backup without a file: %v", err)
	}
}
