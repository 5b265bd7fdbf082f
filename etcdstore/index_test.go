package etcdstore

import (
	"context"
	"slices"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinplan/pinplan/agent"
)

// TestIndexesBuiltForAnOlderPrefix: a prefix written before the indexes
// of sessions with work left were kept (schema 1) gets them when a store
// opens it: a session running, one with its log past its cursor and one
// whose board was not pinned are listed; a finished one is not; and the
// schema moves on.
func TestIndexesBuiltForAnOlderPrefix(t *testing.T) {
	ctx := context.Background()
	cli := shared(t)
	p := prefix(t)
	s, err := New(ctx, cli, Options{Prefix: p})
	if err != nil {
		t.Fatal(err)
	}
	commit := func(key string, state agent.RunState, log ...agent.LogEntry) {
		t.Helper()
		r := &agent.Round{Log: log, Checkpoint: agent.Checkpoint{Key: key, State: state, LogSeq: int64(len(log))}}
		if err := s.Commit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	commit("web/running", agent.Running)
	commit("web/logged", agent.Idle, agent.LogEntry{Seq: 1, Kind: agent.TurnEnded, Turn: 1})
	commit("web/done", agent.Idle)
	for key, board := range map[string]string{
		"web/unpinned": `{"ref":{"id":"m1"},"pinned":false,"shown":{"revision":1},"want":{"revision":1}}`,
		"web/done":     `{"ref":{"id":"m2"},"pinned":true,"shown":{"revision":1},"want":{"revision":1}}`,
	} {
		if err := s.SaveBoard(ctx, key, []byte(board), false); err != nil {
			t.Fatal(err)
		}
	}
	// Back to schema 1: no indexes.
	if _, err := cli.Delete(ctx, p+"idx/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, schemaKey(p), "1"); err != nil {
		t.Fatal(err)
	}

	s, err = New(ctx, cli, Options{Prefix: p})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		list func(context.Context) ([]string, error)
		want []string
	}{
		{"Resumable", s.Resumable, []string{"web/running"}},
		{"Undelivered", s.Undelivered, []string{"web/logged"}},
		{"PendingBoards", s.PendingBoards, []string{"web/unpinned"}},
	} {
		if got, err := c.list(ctx); err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s = %q, %v; want %q", c.name, got, err, c.want)
		}
	}
	if resp, err := cli.Get(ctx, schemaKey(p)); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "2" {
		t.Errorf("schema after the upgrade = %v, %v; want 2", resp, err)
	}
}

// TestUpgradeWaitsForOlderReplicas: a prefix of schema 1 that a replica
// of an older pinplan still serves is not upgraded (that replica would
// not keep the indexes): the store says so and which replica; once it is
// gone, the upgrade goes through.
func TestUpgradeWaitsForOlderReplicas(t *testing.T) {
	ctx := context.Background()
	cli := shared(t)
	p := prefix(t)
	if _, err := New(ctx, cli, Options{Prefix: p}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, schemaKey(p), "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, p+"replicas/old-one", "2026-12-01T00:00:00Z"); err != nil {
		t.Fatal(err)
	}
	_, err := New(ctx, cli, Options{Prefix: p})
	if err == nil || !strings.Contains(err.Error(), "old-one") || !strings.Contains(err.Error(), "rolling deploy") {
		t.Fatalf("New with an older replica serving = %v; want an error naming it", err)
	}
	if _, err := cli.Delete(ctx, p+"replicas/old-one"); err != nil {
		t.Fatal(err)
	}
	if _, err := New(ctx, cli, Options{Prefix: p}); err != nil {
		t.Fatalf("New once it stopped: %v", err)
	}
	if resp, err := cli.Get(ctx, schemaKey(p)); err != nil || string(resp.Kvs[0].Value) != "2" {
		t.Errorf("schema after the upgrade = %v, %v; want 2", resp, err)
	}
}
