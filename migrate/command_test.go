package migrate

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinplan/pinplan/config"
	"github.com/pinplan/pinplan/store"
)

// TestClearCommand: the etcdctl line a refusal suggests names the
// endpoints without their passwords, the TLS and user flags the cluster
// needs, and the prefix.
func TestClearCommand(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  config.Config
		want string
	}{
		{"plain", config.Config{EtcdEndpoints: []string{"http://10.0.0.1:2379", "http://10.0.0.2:2379"}, EtcdPrefix: "/pinplan/"},
			"etcdctl --endpoints=http://10.0.0.1:2379,http://10.0.0.2:2379 del --prefix /pinplan/"},
		{"tls and user", config.Config{EtcdEndpoints: []string{"https://etcd:2379"}, EtcdPrefix: "/p/", EtcdCA: "ca.pem", EtcdCert: "c.pem", EtcdKey: "k.pem", EtcdUsername: "bot"},
			"etcdctl --endpoints=https://etcd:2379 --cacert=ca.pem --cert=c.pem --key=k.pem --user=bot del --prefix /p/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := clearCommand(&tc.cfg); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	cfg := config.Config{EtcdEndpoints: []string{"http://root:hunter2@etcd:2379"}, EtcdPrefix: "/p/"}
	if got := clearCommand(&cfg); strings.Contains(got, "hunter2") {
		t.Errorf("got %q, which holds the endpoint's password", got)
	}
}

// TestRunRefusesBeforeDialling: a wrong target, no cluster, a missing
// file and a file a running bot holds are refused before etcd is
// dialled, and nothing is printed.
func TestRunRefusesBeforeDialling(t *testing.T) {
	dir := t.TempDir()
	held := filepath.Join(dir, "held.db")
	db, err := store.Open(held, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	eps := []string{"http://127.0.0.1:1"}
	dial := func(context.Context) (*clientv3.Client, error) {
		return nil, errors.New("dialled")
	}
	for _, tc := range []struct {
		name string
		to   string
		cfg  config.Config
		want string
	}{
		{"unknown target", "consul", config.Config{DB: held, EtcdEndpoints: eps}, `unknown target "consul"`},
		{"no cluster", "etcd", config.Config{DB: held}, "set PINPLAN_ETCD_ENDPOINTS"},
		{"no file", "etcd", config.Config{DB: filepath.Join(dir, "nope.db"), EtcdEndpoints: eps}, "does not exist"},
		{"bot running", "etcd", config.Config{DB: held, EtcdEndpoints: eps}, "stop pinplan first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Run(context.Background(), &tc.cfg, tc.to, dial, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "dialled") {
				t.Errorf("got %v, want an error saying %q before dialling", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("printed %q", out.String())
			}
		})
	}
}
