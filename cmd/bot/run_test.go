package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pinplan/pinplan/config"
	"github.com/pinplan/pinplan/mcp"
)

func runWith(env map[string]string, args ...string) (string, string, error) {
	var out, errb bytes.Buffer
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	err := run(context.Background(), args, environ, &out, &errb)
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

// TestMCPServersFromConfig: what the bot hands the MCP manager for the
// [mcp.*] tables of PINPLAN_CONFIG: ${VAR}s resolved, the values they
// resolved to kept for redaction, policies as written.
func TestMCPServersFromConfig(t *testing.T) {
	const token, key = "tok-4f9c2e7a1b3d5c6e", "fs-key-0123456789"
	path := filepath.Join(t.TempDir(), "pinplan.toml")
	toml := `
[mcp.remote]
url = "https://mcp.example/mcp"
headers = { Authorization = "Bearer ${REMOTE_TOKEN}", X-Team = "docs" }
policy = "ask"

[mcp.fs]
command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"]
env = { FS_KEY = "${FS_KEY}", MODE = "ro" }
tools = { read_text_file = "allow", write_file = "deny" }

[mcp.plain]
url = "http://127.0.0.1:9/mcp"
`
	if err := os.WriteFile(path, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"PINPLAN_CONFIG": path, "REMOTE_TOKEN": token, "FS_KEY": key}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	got := mcp.FromConfig(cfg.MCP)
	want := []mcp.Server{ // config sorts the servers by name
		{Name: "fs", Command: []string{"npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"},
			Env: map[string]string{"FS_KEY": key, "MODE": "ro"}, Tools: map[string]string{"read_text_file": "allow", "write_file": "deny"},
			Secrets: []string{key}},
		{Name: "plain", URL: "http://127.0.0.1:9/mcp"},
		{Name: "remote", URL: "https://mcp.example/mcp", Policy: "ask",
			Headers: map[string]string{"Authorization": "Bearer " + token, "X-Team": "docs"}, Secrets: []string{token}},
	}
	if !reflect.DeepEqual(got, want) {
		// %#v of an mcp.Server hides its values; print the fields.
		t.Errorf("mcp.FromConfig =\n%s\nwant\n%s", describeServers(got), describeServers(want))
	}
}

func describeServers(ss []mcp.Server) string {
	var b strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&b, "  {Name:%q Command:%q Env:%v URL:%q Headers:%v Policy:%q Tools:%v Secrets:%q}\n",
			s.Name, s.Command, s.Env, s.URL, s.Headers, s.Policy, s.Tools, s.Secrets)
	}
	return b.String()
}

// TestCLI: every command takes -h (exit 0, no side effect), refuses an
// unknown flag and an extra argument, and help and -version work. The
// cases are what a new user tripped over (issue 27): flags after a
// subcommand ignored, `serve -h` starting the server, `bot -h` failing,
// `backup -h` writing a file named -h.
func TestCLI(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	env := map[string]string{"PINPLAN_DB": filepath.Join(dir, "data", "pinplan.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:1"}
	for _, tc := range []struct {
		args    []string
		wantErr string // "" for success
		out     string // in stdout or stderr
	}{
		{args: []string{"-h"}, out: "bot migrate -to etcd"},
		{args: []string{"help"}, out: "bot backup FILE"},
		{args: []string{"help", "backup"}, out: "usage: bot backup FILE"},
		{args: []string{"help", "nope"}, wantErr: `unknown command "nope"`},
		{args: []string{"-version"}, out: "pinplan "},
		{args: []string{"version"}, out: "pinplan "},
		{args: []string{"serve", "-h"}, out: "-demo"},
		{args: []string{"backup", "-h"}, out: "usage: bot backup FILE"},
		{args: []string{"compact", "-h"}, out: "usage: bot compact OUT"},
		{args: []string{"migrate", "-h"}, out: "-to"},
		{args: []string{"invite", "-h"}, out: "usage: bot invite"},
		{args: []string{"serve", "-bogus"}, wantErr: "serve", out: "flag provided but not defined: -bogus"},
		{args: []string{"serve", "extra"}, wantErr: `unexpected argument "extra"`},
		{args: []string{"backup", "a", "b"}, wantErr: `unexpected argument "b"`},
		{args: []string{"backup"}, wantErr: "missing argument"},
		{args: []string{"compact", "a", "b"}, wantErr: `unexpected argument "b"`},
		{args: []string{"invite", "x"}, wantErr: `unexpected argument "x"`},
		{args: []string{"migrate"}, wantErr: "-to is required"},
		{args: []string{"migrate", "-to", "etcd", "x"}, wantErr: `unexpected argument "x"`},
		{args: []string{"-demo", "backup", "f"}, wantErr: "-demo is for serving"},
		{args: []string{"frobnicate"}, wantErr: `unknown command "frobnicate"`},
		{args: []string{"backup", filepath.Join(dir, "out.db")}, wantErr: "does not exist"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, err := runWith(env, tc.args...)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("err = %v (stderr %q)", err, errOut)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
			if !strings.Contains(out+errOut, tc.out) {
				t.Errorf("output %q lacks %q", out+errOut, tc.out)
			}
		})
	}
	// Nothing above created a file: no backup named -h, no empty DB.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("the commands left %s behind", e.Name())
	}
}

// TestInviteMalformedToken: a token whose first part is not a base64
// snowflake is refused as malformed instead of printing a URL with
// garbage for client_id; DISCORD_APPLICATION_ID wins and is checked.
func TestInviteMalformedToken(t *testing.T) {
	if out, _, err := runWith(map[string]string{"DISCORD_BOT_TOKEN": "garbage"}, "invite"); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("invite with a garbage token: out %q, err %v; want a malformed-token error", out, err)
	}
	out, _, err := runWith(map[string]string{"DISCORD_BOT_TOKEN": "garbage", "DISCORD_APPLICATION_ID": "123456789012345678"}, "invite")
	if err != nil || !strings.Contains(out, "client_id=123456789012345678") {
		t.Errorf("invite with DISCORD_APPLICATION_ID: out %q, err %v", out, err)
	}
	if _, _, err := runWith(map[string]string{"DISCORD_APPLICATION_ID": "my-app"}, "invite"); err == nil || !strings.Contains(err.Error(), "not a Discord id") {
		t.Errorf("invite with a bad DISCORD_APPLICATION_ID: %v", err)
	}
}
