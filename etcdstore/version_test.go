package etcdstore_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/pinplan/pinplan/etcdstore"
	"github.com/pinplan/pinplan/internal/etcdtest"
)

// TestWarnOldEtcdAsksTheCluster: WarnOld reads the version of a real
// etcd (the embedded one of go.mod, 3.7) and does not warn of it.
func TestWarnOldEtcdAsksTheCluster(t *testing.T) {
	srv := etcdtest.Start(t)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	etcdstore.WarnOld(context.Background(), srv.Client(t), log)
	if out := buf.String(); !strings.Contains(out, "etcd_version=3.") || strings.Contains(out, "older than 3.5") {
		t.Errorf("log %q: want the cluster's version read and no warning", out)
	}
}
