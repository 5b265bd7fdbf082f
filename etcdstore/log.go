package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinplan/pinplan/agent"
)

// A session's log (agent.LogEntry) lives at <prefix>log/<key>/<seq, hex>,
// written in the round's Txn; its delivery cursor at <prefix>dlv/<key>.
func (s *Store) logKey(key string) string { return s.p + "log/" + esc(key) + "/" }
func (s *Store) dlv(key string) string    { return s.p + "dlv/" + esc(key) }

// logPuts returns the puts of a round's log entries.
func (s *Store) logPuts(key string, entries []agent.LogEntry) ([]clientv3.Op, error) {
	ops := make([]clientv3.Op, 0, len(entries))
	for _, e := range entries {
		raw, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("encode log: %w", err)
		}
		ops = append(ops, clientv3.OpPut(s.logKey(key)+num(uint64(e.Seq)), string(raw)))
	}
	return ops, nil
}

// Log returns the entries of session key's log numbered above after,
// oldest first, in pages from the first of them, up to the record's
// LogSeq, all read at the record's revision. Entries past it belong to a
// round whose prepare Txns ran and whose last Txn never moved the record
// (Commit): they were never committed, and the next round writes its own
// under the same numbers.
func (s *Store) Log(ctx context.Context, key string, after int64) ([]agent.LogEntry, error) {
	resp, err := s.get(ctx, s.rec(key))
	if err != nil {
		return nil, fmt.Errorf("etcdstore: log of %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	var cp struct {
		LogSeq int64 `json:"log_seq"`
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &cp); err != nil {
		return nil, fmt.Errorf("etcdstore: log of %s: record: %w", key, err)
	}
	if cp.LogSeq <= after {
		return nil, nil
	}
	rev := resp.Header.Revision
	var out []agent.LogEntry
	prefix := s.logKey(key)
	end := prefix + num(uint64(cp.LogSeq+1))
	from := prefix + num(uint64(after+1))
	for {
		resp, err := s.get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(500),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithRev(rev))
		if err != nil {
			return nil, fmt.Errorf("etcdstore: log of %s: %w", key, err)
		}
		for _, kv := range resp.Kvs {
			var e agent.LogEntry
			if err := json.Unmarshal(kv.Value, &e); err != nil {
				return nil, fmt.Errorf("etcdstore: log of %s: entry %s: %w", key, kv.Key, err)
			}
			out = append(out, e)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// Delivered returns the delivery cursor of session key's log, 0 for none.
func (s *Store) Delivered(ctx context.Context, key string) (int64, error) {
	resp, err := s.get(ctx, s.dlv(key))
	if err != nil {
		return 0, fmt.Errorf("etcdstore: delivered of %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
}

// SaveDelivered stores the delivery cursor of session key's log, under
// the session's fence: only its holder delivers.
//
// The entries the cursor has passed that nothing needs any more
// (agent.Compactable) are deleted with it: in its Txn, or, past what one
// Txn takes, in Txns of their own after it (a later save deletes what a
// failed one left).
func (s *Store) SaveDelivered(ctx context.Context, key string, seq int64) error {
	drop, err := s.compactable(ctx, key, seq)
	if err != nil {
		return fmt.Errorf("etcdstore: save delivered of %s: %w", key, err)
	}
	ops := []clientv3.Op{clientv3.OpPut(s.dlv(key), strconv.FormatInt(seq, 10)), s.undeliveredOp(key, seq)}
	for len(drop) > 0 {
		n := min(len(drop), maxOps-len(ops))
		for _, seq := range drop[:n] {
			ops = append(ops, clientv3.OpDelete(s.logKey(key)+num(uint64(seq))))
		}
		drop = drop[n:]
		if err := s.fencedTxn(ctx, key, ops...); err != nil {
			return fmt.Errorf("etcdstore: save delivered of %s: %w", key, err)
		}
		ops = ops[:0]
	}
	if len(ops) > 0 {
		if err := s.fencedTxn(ctx, key, ops...); err != nil {
			return fmt.Errorf("etcdstore: save delivered of %s: %w", key, err)
		}
	}
	return nil
}

// compactable reads the session's log up to seq and returns the numbers
// of its entries that nothing needs any more (agent.Compactable). An
// entry that cannot be read is left as it is.
func (s *Store) compactable(ctx context.Context, key string, seq int64) ([]int64, error) {
	prefix := s.logKey(key)
	var passed []agent.LogEntry
	from, end := prefix+num(1), prefix+num(uint64(seq+1))
	for {
		resp, err := s.get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(500),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		if err != nil {
			return nil, err
		}
		for _, kv := range resp.Kvs {
			var e agent.LogEntry
			n, err := strconv.ParseUint(string(kv.Key[len(prefix):]), 16, 64)
			if err != nil || json.Unmarshal(kv.Value, &e) != nil {
				continue
			}
			e.Seq = int64(n)
			passed = append(passed, e)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return agent.Compactable(passed), nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// Undelivered lists the sessions whose log goes past its delivery
// cursor: what a replica that died left to show.
func (s *Store) Undelivered(ctx context.Context) ([]string, error) {
	keys, err := s.indexed(ctx, idxUndelivered)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: list undelivered sessions: %w", err)
	}
	return keys, nil
}
