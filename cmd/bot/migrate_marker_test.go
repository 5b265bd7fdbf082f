package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/store"
)

// runFor runs the bot binary with args and env for at most d: it reports
// its output, and whether it exited by itself (a refusal) rather than
// being killed at the deadline (it went on serving).
func runFor(t *testing.T, d time.Duration, env map[string]string, args ...string) (out string, exited bool, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, botBinary, args...)
	cmd.Env = []string{"PATH=" + goEnv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	b, err := cmd.CombinedOutput()
	return string(b), ctx.Err() == nil, err
}

// etcdKeys returns every key under prefix.
func etcdKeys(t *testing.T, cli *clientv3.Client, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

// bigDB writes a bbolt file of n idle console sessions, one message each.
func bigDB(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pinplan.db")
	db, err := store.Open(path, store.Options{BatchDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 32)
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < n; i += 32 {
				key := fmt.Sprintf("web/s%05d", i)
				errs[w] = errors.Join(errs[w], db.Commit(context.Background(), &agent.Round{
					Append:     []agent.Entry{{Message: openai.ChatCompletionMessage{Role: "user", Content: "task " + key}}},
					Checkpoint: agent.Checkpoint{Key: key, State: agent.Idle, HistoryLen: 1},
				}))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errors.Join(errs...), db.Close()); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMigrateKilledMidCopy: kill -9 of `bot migrate` part way
// through a copy leaves the prefix marked: a replica refuses to start on
// it (saying what to do), and migrate run again starts over and copies
// everything, after which a replica serves the prefix.
func TestMigrateKilledMidCopy(t *testing.T) {
	t.Parallel()
	r := newReplicaRig(t, 2)
	const sessions = 1500
	env := map[string]string{"PINPLAN_DB": bigDB(t, sessions)}
	for k, v := range r.env {
		env[k] = v
	}
	cli := r.etcd.Client(t)
	count := func() int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, "/pinplan/rec/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return -1
		}
		return resp.Count
	}

	cmd := exec.Command(botBinary, "migrate", "-to", "etcd")
	cmd.Env = []string{"PATH=" + goEnv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "migrate to copy some sessions", func() bool { return count() >= 20 })
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
	copied := count()
	if copied >= sessions {
		t.Fatalf("migrate copied all %d sessions before the kill; make the file bigger\n%s", copied, &out)
	}
	t.Logf("killed migrate after %d of %d sessions", copied, sessions)

	replica := map[string]string{"PINPLAN_REPLICA_ID": "r0", "PINPLAN_DB": filepath.Join(t.TempDir(), "unused.db")}
	for k, v := range r.env {
		replica[k] = v
	}
	got, exited, err := runFor(t, 30*time.Second, replica)
	if !exited || err == nil || !strings.Contains(got, "/pinplan/") || !strings.Contains(got, "migrate") {
		t.Errorf("a replica on the partial copy: exited by itself %v, %v:\n%s\nwant it to refuse, naming the prefix and migrate", exited, err, got)
	}
	if keys := etcdKeys(t, cli, "/pinplan/replicas/"); len(keys) != 0 {
		t.Errorf("the refused replica registered: %v", keys)
	}

	got, exited, err = runFor(t, 120*time.Second, env, "migrate", "-to", "etcd")
	if !exited || err != nil || !strings.Contains(got, fmt.Sprint(sessions, " sessions")) {
		t.Fatalf("migrate again: %v\n%s\nwant it to start over and copy all %d sessions", err, got, sessions)
	}
	if n := count(); n != sessions {
		t.Errorf("%d sessions in etcd after the second migrate, want %d", n, sessions)
	}
	if keys := etcdKeys(t, cli, "/pinplan/meta/"); strings.Join(keys, " ") != "/pinplan/meta/schema" {
		t.Errorf("meta keys after migrate: %v, want only the schema", keys)
	}
	p := r.start(t, 0)
	if _, body := httpGet(t, p.URL+"/readyz"); !strings.Contains(body, "replica r0: lease") {
		t.Errorf("the replica after migrate: %s", body)
	}
}

// TestForeignPrefixRefusedByBinary: a prefix holding another
// application's keys (Kubernetes' /registry/) is refused by a replica and
// by migrate, with an error naming it, and nothing is written into it.
func TestForeignPrefixRefusedByBinary(t *testing.T) {
	t.Parallel()
	r := newReplicaRig(t, 2)
	cli := r.etcd.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/registry/pods/default/web-1", `{"kind":"Pod"}`); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"PINPLAN_REPLICA_ID": "r0", "PINPLAN_DB": bigDB(t, 1)}
	for k, v := range r.env {
		env[k] = v
	}
	env["PINPLAN_ETCD_PREFIX"] = "/registry/"
	got, exited, err := runFor(t, 30*time.Second, env)
	if !exited || err == nil || !strings.Contains(got, "/registry/") || !strings.Contains(got, "not pinplan's") {
		t.Errorf("a replica on /registry/: exited by itself %v, %v:\n%s\nwant it refused, naming the prefix", exited, err, got)
	}
	got, exited, err = runFor(t, 30*time.Second, env, "migrate", "-to", "etcd")
	if !exited || err == nil || !strings.Contains(got, "/registry/") || !strings.Contains(got, "not pinplan's") {
		t.Errorf("migrate into /registry/: exited by itself %v, %v:\n%s\nwant it refused, naming the prefix", exited, err, got)
	}
	if keys := etcdKeys(t, cli, "/registry/"); strings.Join(keys, " ") != "/registry/pods/default/web-1" {
		t.Errorf("keys under /registry/: %v; want only the application's own", keys)
	}
}
