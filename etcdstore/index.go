package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/boardrec"
)

// The indexes of the sessions with work left, a key each, written in the
// Txns that change what they say: a start lists them (keys only) instead
// of reading every session's record, so its cost grows with the sessions
// with work left, not the stored ones.
//
//	P idx/undelivered/K   the session's log goes past its cursor
//	P idx/running/K       the session is running or waiting for an approval
//	P idx/boards/K        its plan board was saved with work left
//
// A queued message is its own index already (P inbox/K/ID).
const (
	idxUndelivered = "idx/undelivered"
	idxRunning     = "idx/running"
	idxBoards      = "idx/boards"
)

// idx is session key's key in index name.
func (s *Store) idx(name, key string) string { return s.chatKey(name, key) }

// indexOp puts session key in index name, or with in false deletes it.
func (s *Store) indexOp(name, key string, in bool) clientv3.Op {
	if in {
		return clientv3.OpPut(s.idx(name, key), "")
	}
	return clientv3.OpDelete(s.idx(name, key))
}

// runningOp notes in the index whether a record in state runs.
func (s *Store) runningOp(key string, state agent.RunState) clientv3.Op {
	return s.indexOp(idxRunning, key, state.InTurn())
}

// undeliveredOp keeps session key in the index of undelivered logs unless
// its log has no entry past seq, the cursor being saved: the log is
// numbered without gaps, so entry seq+1 is there exactly when it does.
func (s *Store) undeliveredOp(key string, seq int64) clientv3.Op {
	next := s.logKey(key) + num(uint64(seq+1))
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(next), "=", 0)},
		[]clientv3.Op{clientv3.OpDelete(s.idx(idxUndelivered, key))},
		[]clientv3.Op{clientv3.OpPut(s.idx(idxUndelivered, key), "")},
	)
}

// indexed lists the sessions in index name, in key order.
func (s *Store) indexed(ctx context.Context, name string) ([]string, error) {
	var keys []string
	err := s.rangeAll(ctx, s.p+name+"/", func(kv *mvccpb.KeyValue) error {
		keys = append(keys, s.sessionOf(name, kv.Key))
		return nil
	}, clientv3.WithKeysOnly())
	return keys, err
}

// PendingBoards implements chat.BoardStore, from the index of boards
// saved with work left.
func (s *Store) PendingBoards(ctx context.Context) ([]string, error) {
	keys, err := s.indexed(ctx, idxBoards)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: list plan boards with work left: %w", err)
	}
	return keys, nil
}

// buildIndexes fills the indexes from the records, for a prefix written
// before they were kept (schema 1): the one time a start reads every
// session. A board counts as having work left unless its record shows
// what it wants, pinned, with nothing to unpin or restore.
func (s *Store) buildIndexes(ctx context.Context) error {
	cursors := map[string]int64{}
	err := s.rangeAll(ctx, s.p+"dlv/", func(kv *mvccpb.KeyValue) error {
		n, _ := strconv.ParseInt(string(kv.Value), 10, 64)
		cursors[s.sessionOf("dlv", kv.Key)] = n
		return nil
	})
	if err != nil {
		return err
	}
	var ops []clientv3.Op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		_, err := s.cli.Txn(ctx).Then(ops...).Commit()
		ops = ops[:0]
		return err
	}
	add := func(op clientv3.Op) error {
		ops = append(ops, op)
		if len(ops) == maxOps {
			return flush()
		}
		return nil
	}
	err = s.rangeAll(ctx, s.p+"rec/", func(kv *mvccpb.KeyValue) error {
		var cp struct {
			State  agent.RunState `json:"state"`
			LogSeq int64          `json:"log_seq"`
		}
		_ = json.Unmarshal(kv.Value, &cp) // unreadable: not running; said when it is loaded
		key := s.sessionOf("rec", kv.Key)
		if cp.State.InTurn() {
			if err := add(s.indexOp(idxRunning, key, true)); err != nil {
				return err
			}
		}
		if cp.LogSeq > cursors[key] {
			return add(s.indexOp(idxUndelivered, key, true))
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = s.rangeAll(ctx, s.p+"board/", func(kv *mvccpb.KeyValue) error {
		if boardrec.Pending(kv.Value) {
			return add(s.indexOp(idxBoards, s.sessionOf("board", kv.Key), true))
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}
