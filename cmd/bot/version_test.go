package main

import (
	"bytes"
	"context"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/pinplan/pinplan/internal/etcdtest"
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

// TestWarnOldEtcdAsksTheCluster: the start reads the version of a real
// etcd (the embedded one of go.mod, 3.7) and does not warn of it.
func TestWarnOldEtcdAsksTheCluster(t *testing.T) {
	srv := etcdtest.Start(t)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	warnOldEtcd(context.Background(), srv.Client(t), log)
	if out := buf.String(); !strings.Contains(out, "etcd_version=3.") || strings.Contains(out, "older than 3.5") {
		t.Errorf("log %q: want the cluster's version read and no warning", out)
	}
}
