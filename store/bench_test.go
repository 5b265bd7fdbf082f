package store

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	bolt "go.etcd.io/bbolt"

	"github.com/pinplan/pinplan/agent"
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

// BenchmarkCheckpoint compares one checkpointed round (Commit: db.Batch,
// the consistency check, nested buckets) with a raw bbolt Update that puts
// the same bytes, on the same disk in the same run. Compare the ns/op of
// the sub-benchmarks as a ratio.
func BenchmarkCheckpoint(b *testing.B) {
	for _, delay := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 10 * time.Millisecond} {
		b.Run(fmt.Sprintf("commit/batchdelay=%s", delay), func(b *testing.B) {
			db, err := Open(filepath.Join(b.TempDir(), "bench.db"), Options{BatchDelay: delay})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := db.Commit(ctx, benchRound("web/bench", 2*i, int64(i+1))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("raw-update", func(b *testing.B) {
		bdb, err := bolt.Open(filepath.Join(b.TempDir(), "raw.db"), 0o600, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer bdb.Close()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			r := benchRound("web/bench", 2*i, int64(i+1))
			rec, _ := json.Marshal(r.Checkpoint)
			e0, _ := json.Marshal(r.Append[0])
			e1, _ := json.Marshal(r.Append[1])
			p, _ := json.Marshal(r.Plans[0])
			err := bdb.Update(func(tx *bolt.Tx) error {
				bk, err := tx.CreateBucketIfNotExists([]byte("raw"))
				if err != nil {
					return err
				}
				for j, v := range [][]byte{rec, e0, e1, p} {
					if err := bk.Put(u64(uint64(4*i+j)), v); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	// Many sessions committing at once share fsyncs through db.Batch.
	b.Run("commit-parallel-64-sessions", func(b *testing.B) {
		db, err := Open(filepath.Join(b.TempDir(), "par.db"), Options{BatchDelay: 2 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		ctx := context.Background()
		b.SetParallelism(32) // 64 goroutines on 2 cores
		var next int64
		var mu = make(chan struct{}, 1)
		mu <- struct{}{}
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			<-mu
			next++
			key := fmt.Sprintf("web/p%d", next)
			mu <- struct{}{}
			for i := 0; pb.Next(); i++ {
				if err := db.Commit(ctx, benchRound(key, 2*i, int64(i+1))); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
