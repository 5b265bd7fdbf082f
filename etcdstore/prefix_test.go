package etcdstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinplan/pinplan/internal/storetest"
)

// TestReplicaTakesOnlyItsPlatforms: a replica that runs only the console
// never takes a Slack session, by TryTake (a scan, a takeover) or Take
// (the runner), and leaves it for a replica that runs Slack (DESIGN §14).
func TestReplicaTakesOnlyItsPlatforms(t *testing.T) {
	ctx := context.Background()
	cli := shared(t)
	web, err := NewReplica(ctx, cli, ReplicaOptions{Prefix: prefix(t), ID: "web-only", TTL: 10 * time.Second, Platforms: []string{"web"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { web.Close() })
	if _, err := New(ctx, cli, Options{Prefix: prefix(t), Replica: web}); err != nil {
		t.Fatal(err)
	}
	const key = "slack/T1/C1/1700000000.000100"
	if ok, err := web.TryTake(ctx, key); err != nil || ok {
		t.Errorf("TryTake of a Slack session by a web-only replica: %v, %v; want false", ok, err)
	}
	if ok, err := web.Take(ctx, key); err != nil || ok {
		t.Errorf("Take of a Slack session by a web-only replica: %v, %v; want false", ok, err)
	}
	if owner, err := web.Owner(ctx, key); err != nil || owner != "" {
		t.Errorf("owner of %s = %q, %v; want none", key, owner, err)
	}
	if web.Holds(key) || web.Takeovers.Load() != 0 {
		t.Errorf("the web-only replica holds %s (takeovers %d)", key, web.Takeovers.Load())
	}
	if ok, err := web.TryTake(ctx, "web/abc"); err != nil || !ok {
		t.Errorf("TryTake of a console session: %v, %v; want true", ok, err)
	}
	if got := strings.Join(web.Platforms(), ","); got != "web" {
		t.Errorf("Platforms() = %q, want web", got)
	}

	_, slack := openReplicaOn(t, cli, ReplicaOptions{Prefix: prefix(t), ID: "slack", TTL: 10 * time.Second, Platforms: []string{"slack", "web"}})
	if ok, err := slack.TryTake(ctx, key); err != nil || !ok {
		t.Errorf("TryTake of a Slack session by a Slack replica: %v, %v; want true", ok, err)
	}
}

func openReplicaOn(t *testing.T, cli *clientv3.Client, opts ReplicaOptions) (*Store, *Replica) {
	t.Helper()
	ctx := context.Background()
	rep, err := NewReplica(ctx, cli, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rep.Close() })
	s, err := New(ctx, cli, Options{Prefix: opts.Prefix, Replica: rep})
	if err != nil {
		t.Fatal(err)
	}
	return s, rep
}

// keys returns every key under p.
func keys(t *testing.T, cli *clientv3.Client, p string) []string {
	t.Helper()
	resp, err := cli.Get(context.Background(), p, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

// TestForeignPrefixRefused: a prefix holding another application's keys
// (and no pinplan schema key, or one that is not pinplan's) is refused
// by the store and by a replica, with an error naming the prefix, and
// nothing is written into it.
func TestForeignPrefixRefused(t *testing.T) {
	ctx := context.Background()
	cli := shared(t)
	for _, tc := range []struct {
		name string
		kvs  map[string]string
	}{
		{"another application", map[string]string{"pods/default/web-1": `{"kind":"Pod"}`}},
		{"a schema that is not pinplan's", map[string]string{"meta/schema": "v2beta1", "things/1": "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := prefix(t)
			for k, v := range tc.kvs {
				if _, err := cli.Put(ctx, p+k, v); err != nil {
					t.Fatal(err)
				}
			}
			before := keys(t, cli, p)
			_, err := New(ctx, cli, Options{Prefix: p})
			if !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), p) {
				t.Errorf("New: %v; want ErrForeign naming %s", err, p)
			}
			_, err = New(ctx, cli, Options{Prefix: p, Migrate: true})
			if !errors.Is(err, ErrForeign) {
				t.Errorf("New for migrate: %v; want ErrForeign", err)
			}
			rep, err := NewReplica(ctx, cli, ReplicaOptions{Prefix: p, ID: "r1", TTL: 2 * time.Second})
			if err == nil {
				rep.Close()
			}
			if !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), p) {
				t.Errorf("NewReplica: %v; want ErrForeign naming %s", err, p)
			}
			if after := keys(t, cli, p); strings.Join(after, " ") != strings.Join(before, " ") {
				t.Errorf("keys under %s: %v, want them as they were: %v", p, after, before)
			}
		})
	}
	t.Run("empty", func(t *testing.T) {
		p := prefix(t)
		if _, err := New(ctx, cli, Options{Prefix: p}); err != nil {
			t.Fatalf("an empty prefix: %v", err)
		}
		if got := keys(t, cli, p); len(got) != 1 || got[0] != p+"meta/schema" {
			t.Errorf("keys under %s: %v, want the schema key", p, got)
		}
	})
}

// TestInterruptedMigrateRefused: migrate marks the prefix first; while
// the mark is there (the copy was interrupted) a replica refuses the
// prefix, and the next migrate starts over on it: the partial copy goes,
// and once the mark is removed replicas serve it.
func TestInterruptedMigrateRefused(t *testing.T) {
	ctx := context.Background()
	cli := shared(t)
	p := prefix(t)
	s, err := New(ctx, cli, Options{Prefix: p, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	if restarted, err := s.BeginMigrate(ctx); err != nil || restarted {
		t.Fatalf("BeginMigrate on an empty prefix: %v, %v", restarted, err)
	}
	// Part of a copy, then the migrate dies.
	if err := s.Commit(ctx, storetest.Round("slack/T1/C1/1.0", 0, "copied")); err != nil {
		t.Fatal(err)
	}
	rep, err := NewReplica(ctx, cli, ReplicaOptions{Prefix: p, ID: "r1", TTL: 2 * time.Second})
	if err == nil {
		rep.Close()
	}
	if !errors.Is(err, ErrMigrating) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "migrate") {
		t.Errorf("NewReplica on a marked prefix: %v; want ErrMigrating naming %s and what to do", err, p)
	}
	if _, err := New(ctx, cli, Options{Prefix: p}); !errors.Is(err, ErrMigrating) {
		t.Errorf("New on a marked prefix: %v; want ErrMigrating", err)
	}
	if got := keys(t, cli, p+"replicas/"); len(got) != 0 {
		t.Errorf("a refused replica registered: %v", got)
	}

	again, err := New(ctx, cli, Options{Prefix: p, Migrate: true})
	if err != nil {
		t.Fatalf("New for a second migrate: %v", err)
	}
	if restarted, err := again.BeginMigrate(ctx); err != nil || !restarted {
		t.Fatalf("BeginMigrate on a marked prefix: %v, %v; want it to start over", restarted, err)
	}
	if n, err := again.SessionCount(); err != nil || n != 0 {
		t.Errorf("sessions after starting over: %d, %v; want the partial copy gone", n, err)
	}
	if err := again.EndMigrate(ctx); err != nil {
		t.Fatal(err)
	}
	_, r := openReplicaOn(t, cli, ReplicaOptions{Prefix: p, ID: "r1", TTL: 2 * time.Second})
	// A prefix a replica uses is not migrated into.
	if _, err := again.BeginMigrate(ctx); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("BeginMigrate on a prefix a replica uses: %v; want ErrNotEmpty", err)
	}
	if got := keys(t, cli, p+"meta/migrating"); len(got) != 0 {
		t.Errorf("a refused migrate marked the prefix")
	}
	if ok, err := r.TryTake(ctx, "slack/T1/C1/1.0"); err != nil || !ok {
		t.Errorf("the replica after migrate: %v, %v", ok, err)
	}
}
