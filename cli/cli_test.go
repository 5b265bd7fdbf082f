package cli

import (
	"bytes"
	"errors"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionOf: -version names the version and the commit the toolchain
// stamped, says when the tree had local changes, and says "unknown" when
// nothing was stamped (go run) instead of leaving the commit out.
func TestVersionOf(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "352e1c3e57f825206c7e0103fc87415065a1fb28"}}
	for _, tc := range []struct {
		name     string
		version  string
		settings []debug.BuildSetting
		want     string
	}{
		{"go run", "(devel)", nil, "pinplan devel (commit unknown, go1.26.8)"},
		{"tagged release", "v1.2.0", append(rev, debug.BuildSetting{Key: "vcs.modified", Value: "false"}), "pinplan v1.2.0 (commit 352e1c3e57f8, go1.26.8)"},
		{"build of a changed checkout", "v0.0.0-20261204211620-352e1c3e57f8+dirty", append(rev, debug.BuildSetting{Key: "vcs.modified", Value: "true"}),
			"pinplan v0.0.0-20261204211620-352e1c3e57f8+dirty (commit 352e1c3e57f8 with local changes, go1.26.8)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/pinplan/pinplan", Version: tc.version}, Settings: tc.settings}
			if got := versionOf(bi); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestParse: every command takes -h (ErrHelp, nothing to run), refuses
// an unknown flag and an extra argument, and help and -version work.
// The cases are what a new user tripped over (issue 27): flags after a
// subcommand ignored, `serve -h` starting the server, `bot -h` failing,
// `backup -h` writing a file named -h.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    Command // when no error
		wantErr string  // "" for success; "help" for ErrHelp
		out     string  // in stdout or stderr
	}{
		{args: nil, want: Command{Name: "serve"}},
		{args: []string{"-demo"}, want: Command{Name: "serve", Demo: true}},
		{args: []string{"serve", "-demo"}, want: Command{Name: "serve", Demo: true}},
		{args: []string{"backup", "out.db"}, want: Command{Name: "backup", Args: []string{"out.db"}}},
		{args: []string{"migrate", "-to", "etcd"}, want: Command{Name: "migrate", Args: []string{"etcd"}}},
		{args: []string{"-version"}, want: Command{Name: "version"}},
		{args: []string{"version"}, want: Command{Name: "version"}},
		{args: []string{"doctor"}, want: Command{Name: "doctor"}},
		{args: []string{"-h"}, wantErr: "help", out: "bot migrate -to etcd"},
		{args: []string{"help"}, wantErr: "help", out: "bot backup FILE"},
		{args: []string{"help", "backup"}, wantErr: "help", out: "usage: bot backup FILE"},
		{args: []string{"help", "nope"}, wantErr: `unknown command "nope"`},
		{args: []string{"serve", "-h"}, wantErr: "help", out: "-demo"},
		{args: []string{"backup", "-h"}, wantErr: "help", out: "usage: bot backup FILE"},
		{args: []string{"compact", "-h"}, wantErr: "help", out: "usage: bot compact OUT"},
		{args: []string{"migrate", "-h"}, wantErr: "help", out: "-to"},
		{args: []string{"invite", "-h"}, wantErr: "help", out: "usage: bot invite"},
		{args: []string{"-version", "serve"}, wantErr: "-version takes no command"},
		{args: []string{"serve", "-bogus"}, wantErr: "serve", out: "flag provided but not defined: -bogus"},
		{args: []string{"serve", "extra"}, wantErr: `unexpected argument "extra"`},
		{args: []string{"backup", "a", "b"}, wantErr: `unexpected argument "b"`},
		{args: []string{"backup"}, wantErr: "missing argument; usage: bot backup FILE"},
		{args: []string{"compact", "a", "b"}, wantErr: `unexpected argument "b"`},
		{args: []string{"invite", "x"}, wantErr: `unexpected argument "x"`},
		{args: []string{"version", "x"}, wantErr: `unexpected argument "x"`},
		{args: []string{"migrate"}, wantErr: "-to is required"},
		{args: []string{"migrate", "-to", "etcd", "x"}, wantErr: `unexpected argument "x"`},
		{args: []string{"-demo", "backup", "f"}, wantErr: "-demo is for serving"},
		{args: []string{"frobnicate"}, wantErr: `unknown command "frobnicate"`, out: "usage:"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			got, err := Parse(tc.args, &stdout, &stderr)
			switch {
			case tc.wantErr == "help":
				if !errors.Is(err, ErrHelp) {
					t.Fatalf("err = %v, want ErrHelp", err)
				}
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("err = %v (stderr %q)", err, stderr.String())
			case !reflect.DeepEqual(got, tc.want):
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if all := stdout.String() + stderr.String(); !strings.Contains(all, tc.out) {
				t.Errorf("output %q lacks %q", all, tc.out)
			}
		})
	}
}
