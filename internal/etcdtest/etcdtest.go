// Package etcdtest starts an embedded etcd server (go.etcd.io/etcd/server/v3/embed)
// for tests: a real single-member cluster on loopback ports in a temporary
// folder, stopped when the test ends. Nothing outside the test process is
// needed.
package etcdtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is a running embedded etcd.
type Server struct {
	Endpoint string // http://127.0.0.1:PORT, for PINPLAN_ETCD_ENDPOINTS
	etcd     *embed.Etcd
}

// Start starts a one-member etcd in t's temporary folder and stops it
// when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.Name = "test"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.LogLevel = "error"
	client, peer := freeURL(t), freeURL(t)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		t.Fatal("embedded etcd did not become ready in 30 s")
	}
	t.Cleanup(e.Close)
	return &Server{Endpoint: client.String(), etcd: e}
}

// Client returns a client of the server, closed when t ends.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Dump writes every key under prefix with its value's length, for a
// failing test's log.
func (s *Server) Dump(t testing.TB, w io.Writer, prefix string) {
	cli := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		fmt.Fprintf(w, "dump: %v\n", err)
		return
	}
	for _, kv := range resp.Kvs {
		fmt.Fprintf(w, "%s (%d bytes)\n", kv.Key, len(kv.Value))
	}
}

func freeURL(t testing.TB) url.URL {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}
}
