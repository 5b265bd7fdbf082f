package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/etcdstore"
	"github.com/pinplan/pinplan/internal/etcdtest"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/store"
	"github.com/pinplan/pinplan/todo"
)

// BenchmarkStartup measures start-up with many stored sessions (issue
// 41): how long the bot takes from its start to a ready /readyz, and its
// RSS then, with startupSessions finished sessions in the store (each a
// turn with a plan of five items, its answer, its board, listing and
// delivered log), on bbolt and on etcd. Start-up must visit only the
// sessions with work left, so neither grows with the stored ones.
//
//	go test ./cmd/bot -run '^$' -bench BenchmarkStartup -benchtime 1x
//
// Filling the stores takes a while (about a minute for etcd); the fill
// is not measured.
func BenchmarkStartup(b *testing.B) {
	n := startupSessions
	if s := os.Getenv("PINPLAN_BENCH_SESSIONS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	ms := httptest.NewServer(&fakeopenai.Server{})
	b.Cleanup(ms.Close)
	env := map[string]string{
		"PINPLAN_HTTP_ADDR": "127.0.0.1:0", "PINPLAN_WEB_TOKEN": "startup-bench-token-0123456789",
		"OPENAI_BASE_URL": ms.URL + "/v1", "OPENAI_API_KEY": "sk-test",
	}
	b.Run("bbolt", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "pinplan.db")
		if keep := os.Getenv("PINPLAN_BENCH_KEEP"); keep != "" {
			path = keep // the filled file stays, for a look at it
		}
		fillBolt(b, path, n)
		if st, err := os.Stat(path); err == nil {
			b.ReportMetric(float64(st.Size())/(1<<20), "MiB-file")
		}
		env := withEnv(env, map[string]string{"PINPLAN_DB": path})
		measureStartup(b, env)
	})
	b.Run("etcd", func(b *testing.B) {
		e := etcdtest.Start(b)
		fillEtcd(b, e.Endpoint, n)
		env := withEnv(env, map[string]string{
			"PINPLAN_DB": filepath.Join(b.TempDir(), "unused.db"), "PINPLAN_REPLICA_ID": "r0",
			"PINPLAN_ETCD_ENDPOINTS": e.Endpoint, "PINPLAN_ETCD_PREFIX": "/pinplan/",
		})
		measureStartup(b, env)
	})
}

const startupSessions = 100_000

func withEnv(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// measureStartup starts the bot b.N times on env's store and reports the
// time to a ready /readyz and the RSS then.
func measureStartup(b *testing.B, env map[string]string) {
	var ready time.Duration
	var rss float64
	for range b.N {
		start := time.Now()
		p := startBot(b, env, botBinary)
		// Ready: /readyz answers 200 and the start is over (the log's
		// "pinplan started" comes once every session with work left was
		// resumed, which /readyz does not wait for).
		for !strings.Contains(p.stderr.String(), "pinplan started") || !readyz(p.URL) {
			if time.Since(start) > 5*time.Minute {
				b.Fatalf("not ready after %s\n%s", time.Since(start), p.stderr)
			}
			time.Sleep(5 * time.Millisecond)
		}
		ready += time.Since(start)
		rss += float64(vmRSS(b, p.cmd.Process.Pid)) / (1 << 20)
		p.stop(b)
	}
	b.ReportMetric(ready.Seconds()/float64(b.N), "s-to-ready")
	b.ReportMetric(rss/float64(b.N), "MiB-RSS")
}

func readyz(url string) bool {
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// vmRSS reads a process's resident set, in bytes.
func vmRSS(b *testing.B, pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// startupStore is what the fill writes through: store.DB and
// etcdstore.Store.
type startupStore interface {
	Commit(ctx context.Context, r *agent.Round) error
	SaveBoard(ctx context.Context, key string, data []byte, pending bool) error
	SaveListing(ctx context.Context, key string, data []byte) error
	SaveDelivered(ctx context.Context, key string, seq int64) error
}

// storeFinished writes one finished session as the bot leaves it: a turn
// whose plan of five items is done, its answer, the board showing it,
// its listing and the log delivered.
func storeFinished(ctx context.Context, st startupStore, i int) error {
	key := sessionKey(i)
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var items []todo.Item
	for j := range 5 {
		items = append(items, todo.Item{Content: fmt.Sprintf("step %d of task %d", j, i), Status: todo.Completed})
	}
	snap := todo.NewSnapshot(items)
	r := &agent.Round{
		Append: []agent.Entry{
			{Message: openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: fmt.Sprintf("task %d: do five things", i)}},
			{Message: openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: "All done."}},
		},
		Plans: []agent.PlanRevision{{Revision: 1, Items: items, At: at}},
		Log: []agent.LogEntry{
			{Seq: 1, Kind: agent.TurnStarted, Turn: 1, At: at},
			{Seq: 2, Kind: agent.PlanChanged, Turn: 1, Plan: items, Revision: 1, At: at},
			{Seq: 3, Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done, Text: "All done.", At: at},
		},
		Checkpoint: agent.Checkpoint{Key: key, State: agent.Idle, HistoryLen: 2, Turns: 1, LogSeq: 3, Plan: snap.Items(), Revision: 1, Created: at},
	}
	if err := st.Commit(ctx, r); err != nil {
		return err
	}
	channel, ts, _ := strings.Cut(strings.TrimPrefix(key, "slack/T1/"), "/")
	board, _ := json.Marshal(map[string]any{
		"thread": map[string]string{"platform": "slack", "key": key, "channel": channel, "thread": ts},
		"ref":    map[string]string{"channel": channel, "id": ts + "1"}, "pinned": true, "closed": true,
		"shown": map[string]any{"items": items, "revision": 1, "state": "done", "updated": at},
		"want":  map[string]any{"items": items, "revision": 1, "state": "done", "updated": at},
	})
	if err := st.SaveBoard(ctx, key, board, false); err != nil {
		return err
	}
	listing, _ := json.Marshal(map[string]string{"title": fmt.Sprintf("task %d: do five things", i)})
	if err := st.SaveListing(ctx, key, listing); err != nil {
		return err
	}
	return st.SaveDelivered(ctx, key, 3)
}

func sessionKey(i int) string {
	return fmt.Sprintf("slack/T1/C%05d/1700000000.%06d", i%1000, i)
}

// fillBolt stores n finished sessions in a new bbolt file at path: one
// through the store, the rest copies of its records (bbolt writes one
// file at a time; a commit each would take the fsyncs of an hour).
func fillBolt(b *testing.B, path string, n int) {
	ctx := context.Background()
	db, err := store.Open(path, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := storeFinished(ctx, db, 0); err != nil {
		b.Fatal(err)
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer bdb.Close()
	template := []byte(sessionKey(0))
	for first := 1; first < n; first += 5000 {
		err := bdb.Update(func(tx *bolt.Tx) error {
			return tx.ForEach(func(name []byte, top *bolt.Bucket) error {
				src := top.Bucket(template)
				raw := top.Get(template)
				if src == nil && raw == nil {
					return nil
				}
				for i := first; i < min(first+5000, n); i++ {
					key := []byte(sessionKey(i))
					if raw != nil {
						if err := top.Put(key, bytes.ReplaceAll(raw, template, key)); err != nil {
							return err
						}
						continue
					}
					dst, err := top.CreateBucketIfNotExists(key)
					if err != nil {
						return err
					}
					if err := copyBucket(dst, src, template, key); err != nil {
						return err
					}
				}
				return nil
			})
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := bdb.Sync(); err != nil {
		b.Fatal(err)
	}
}

// copyBucket copies src into dst, naming key where src names template.
func copyBucket(dst, src *bolt.Bucket, template, key []byte) error {
	return src.ForEach(func(k, v []byte) error {
		if v == nil {
			sub, err := dst.CreateBucketIfNotExists(k)
			if err != nil {
				return err
			}
			return copyBucket(sub, src.Bucket(k), template, key)
		}
		return dst.Put(k, bytes.ReplaceAll(v, template, key))
	})
}

// fillEtcd stores n finished sessions under /pinplan/ through the store,
// many at a time.
func fillEtcd(b *testing.B, endpoint string, n int) {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	es, err := etcdstore.New(ctx, cli, etcdstore.Options{Prefix: "/pinplan/"})
	if err != nil {
		b.Fatal(err)
	}
	next := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var ferr error
	for range 32 {
		wg.Go(func() {
			for i := range next {
				if err := storeFinished(ctx, es, i); err != nil {
					once.Do(func() { ferr = err })
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if ferr != nil {
		b.Fatal(ferr)
	}
}
