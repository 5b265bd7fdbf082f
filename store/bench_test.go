package store

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	bolt "go.etcd.io/bbolt"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/storetest"
	"github.com/pinplan/pinplan/todo"
)

// benchRound is a typical round: an assistant message with one todo_write
// call, its result and the new plan revision.
func benchRound(key string, base int, rev int64) *agent.Round {
	items := []todo.Item{{Content: "read the code", Status: todo.Completed}, {Content: "write the fix", Status: todo.InProgress}, {Content: "run the tests", Status: todo.Pending}}
	snap := todo.Encode(items)
	return &agent.Round{
		Base: base,
		Append: []agent.Entry{
			{Message: openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: "c1", Type: "function", Function: openai.FunctionCall{Name: "todo_write", Arguments: snap}}}}, At: time.Unix(0, 0)},
			{Message: openai.ChatCompletionMessage{Role: "tool", ToolCallID: "c1", Content: snap}, At: time.Unix(0, 0)},
		},
		Plans:      []agent.PlanRevision{{Revision: rev, Items: items, ToolCallID: "c1"}},
		Checkpoint: agent.Checkpoint{Key: key, State: agent.Running, Revision: rev, HistoryLen: base + 2, Plan: items},
	}
}

// rawRound writes the bytes of benchRound(key, 2*i, i+1) as four puts in
// a flat bucket: what a round costs bbolt without the store's layout and
// consistency check. Marshalling is included, as Commit includes it.
func rawRound(key string, i int) func(*bolt.Tx) error {
	r := benchRound(key, 2*i, int64(i+1))
	rec, _ := json.Marshal(r.Checkpoint)
	e0, _ := json.Marshal(r.Append[0])
	e1, _ := json.Marshal(r.Append[1])
	p, _ := json.Marshal(r.Plans[0])
	return func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists([]byte(key))
		if err != nil {
			return err
		}
		for j, v := range [][]byte{rec, e0, e1, p} {
			if err := bk.Put(u64(uint64(4*i+j)), v); err != nil {
				return err
			}
		}
		return nil
	}
}

// batchedCommit is Commit as it was before lone commits skipped the batch:
// the same transaction, always through db.Batch. The benchmarks keep it to
// show both in one run.
func batchedCommit(db *DB, r *agent.Round) error {
	fn, err := commitTx(r)
	if err != nil {
		return err
	}
	return db.bolt.Batch(fn)
}

// writers runs b.N commits from n goroutines, each with its own session
// (commit(key, i) for its i-th round), and reports commits per second.
func writers(b *testing.B, n int, commit func(key string, i int) error) {
	var ops atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range n {
		key := fmt.Sprintf("web/w%d", w)
		wg.Go(func() {
			for i := 0; ops.Add(1) <= int64(b.N); i++ {
				if err := commit(key, i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "commits/s")
}

// interleaved runs commit(i) and a raw Update of the same bytes in turn
// b.N times and reports the time of each and their ratio.
func interleaved(b *testing.B, commit func(i int) error) {
	bdb := openRawBench(b, 0)
	var tCommit, tRaw time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := commit(i); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := bdb.Update(rawRound("raw", i)); err != nil {
			b.Fatal(err)
		}
		tCommit, tRaw = tCommit+t1.Sub(t0), tRaw+time.Since(t1)
	}
	b.ReportMetric(float64(tCommit.Nanoseconds())/float64(b.N), "commit-ns/op")
	b.ReportMetric(float64(tRaw.Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(tCommit)/float64(tRaw), "commit/raw")
}

func openBench(b *testing.B, delay time.Duration) *DB {
	b.Helper()
	db, err := Open(filepath.Join(b.TempDir(), "bench.db"), Options{BatchDelay: delay})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

func openRawBench(b *testing.B, delay time.Duration) *bolt.DB {
	b.Helper()
	bdb, err := bolt.Open(filepath.Join(b.TempDir(), "raw.db"), 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	if delay > 0 {
		bdb.MaxBatchDelay = delay
	}
	b.Cleanup(func() { bdb.Close() })
	return bdb
}

// BenchmarkCheckpoint compares one checkpointed round (Commit: the
// consistency check, nested buckets, at once when alone and through
// db.Batch under concurrency) with the old always-batched commit and with
// raw bbolt transactions putting the same bytes, on the same disk in the
// same run. Compare the ns/op of the sub-benchmarks as ratios.
func BenchmarkCheckpoint(b *testing.B) {
	ctx := context.Background()
	for _, delay := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 10 * time.Millisecond} {
		b.Run(fmt.Sprintf("lone/batched/batchdelay=%s", delay), func(b *testing.B) {
			db := openBench(b, delay)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := batchedCommit(db, benchRound("web/bench", 2*i, int64(i+1))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("lone/commit/batchdelay=2ms", func(b *testing.B) {
		db := openBench(b, 2*time.Millisecond)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := db.Commit(ctx, benchRound("web/bench", 2*i, int64(i+1))); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("lone/raw-update", func(b *testing.B) {
		bdb := openRawBench(b, 0)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := bdb.Update(rawRound("raw", i)); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The disk's fsync time drifts on shared machines: alternate each
	// commit with a raw Update of the same bytes, so both see the same disk.
	b.Run("lone-vs-raw-interleaved/batched/batchdelay=2ms", func(b *testing.B) {
		db := openBench(b, 2*time.Millisecond)
		interleaved(b, func(i int) error { return batchedCommit(db, benchRound("web/bench", 2*i, int64(i+1))) })
	})
	b.Run("lone-vs-raw-interleaved/commit/batchdelay=2ms", func(b *testing.B) {
		db := openBench(b, 2*time.Millisecond)
		interleaved(b, func(i int) error { return db.Commit(ctx, benchRound("web/bench", 2*i, int64(i+1))) })
	})
	// Many sessions committing at once share fsyncs through db.Batch.
	for _, n := range []int{64, 100} {
		b.Run(fmt.Sprintf("writers=%d/batched/batchdelay=2ms", n), func(b *testing.B) {
			db := openBench(b, 2*time.Millisecond)
			writers(b, n, func(key string, i int) error { return batchedCommit(db, benchRound(key, 2*i, int64(i+1))) })
		})
		b.Run(fmt.Sprintf("writers=%d/commit/batchdelay=2ms", n), func(b *testing.B) {
			db := openBench(b, 2*time.Millisecond)
			writers(b, n, func(key string, i int) error { return db.Commit(ctx, benchRound(key, 2*i, int64(i+1))) })
		})
		b.Run(fmt.Sprintf("writers=%d/raw-batch/batchdelay=2ms", n), func(b *testing.B) {
			bdb := openRawBench(b, 2*time.Millisecond)
			writers(b, n, func(key string, i int) error { return bdb.Batch(rawRound(key, i)) })
		})
	}
}

// BenchmarkSessionCount reads the number of sessions among 10,000 idle ones
// (what the pinplan_sessions gauge does on every scrape): counting keys
// against listing every record. It also reports the file bytes per idle
// session; the store holds no memory per session (bbolt maps the file).
func BenchmarkSessionCount(b *testing.B) {
	const sessions = 10000
	db := openBench(b, 0)
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		for s := range sessions {
			r := benchRound(fmt.Sprintf("web/idle%05d", s), 0, 1)
			r.Checkpoint.State = agent.Idle
			fn, err := commitTx(r)
			if err == nil {
				err = fn(tx)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	var size int64
	if err := db.bolt.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil }); err != nil {
		b.Fatal(err)
	}
	b.Run("count", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if n, err := db.SessionCount(); err != nil || n != sessions {
				b.Fatalf("SessionCount = %d, %v", n, err)
			}
		}
		b.ReportMetric(float64(size)/sessions, "file-bytes/session")
	})
	b.Run("list", func(b *testing.B) {
		ctx := context.Background()
		for i := 0; i < b.N; i++ {
			if list, err := db.Sessions(ctx); err != nil || len(list) != sessions {
				b.Fatalf("Sessions = %d, %v", len(list), err)
			}
		}
	})
}

// BenchmarkBudget: a request's budget check before reservations (a read
// of the person's day) against the reservation now, on the bbolt file
// (storetest.BenchBudget).
func BenchmarkBudget(b *testing.B) {
	storetest.BenchBudget(b, openBench(b, 0))
}
