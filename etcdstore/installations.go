package etcdstore

import (
	"context"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// installation is the key of installation id's record: the Slack
// installations (DESIGN §14), opaque here (their tokens encrypted by the
// adapter), shared by every replica.
func (s *Store) installation(id string) string { return s.p + "installations/" + esc(id) }

// Installation returns installation id's record, nil if there is none.
func (s *Store) Installation(ctx context.Context, id string) ([]byte, error) {
	resp, err := s.get(ctx, s.installation(id))
	if err != nil {
		return nil, fmt.Errorf("etcdstore: read installation %s: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return resp.Kvs[0].Value, nil
}

// UpdateInstallation changes installation id's record by compare-and-set:
// fn gets the record (nil when there is none) and returns the new one,
// nil to delete it; the write compares the record's ModRevision, and on
// a change made meanwhile (another replica's refresh) reads it and calls
// fn again. An error from fn writes nothing and is returned wrapped.
func (s *Store) UpdateInstallation(ctx context.Context, id string, fn func(cur []byte) ([]byte, error)) error {
	key := s.installation(id)
	for {
		resp, err := s.get(ctx, key)
		if err != nil {
			return fmt.Errorf("etcdstore: read installation %s: %w", id, err)
		}
		var cur []byte
		var mod int64
		if len(resp.Kvs) == 1 {
			cur, mod = resp.Kvs[0].Value, resp.Kvs[0].ModRevision
		}
		next, err := fn(cur)
		if err != nil {
			return fmt.Errorf("etcdstore: update installation %s: %w", id, err)
		}
		op := clientv3.OpDelete(key)
		if next != nil {
			op = clientv3.OpPut(key, string(next))
		}
		tr, err := s.txn(ctx, "", []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", mod)}, []clientv3.Op{op}, nil)
		if err != nil {
			return fmt.Errorf("etcdstore: update installation %s: %w", id, err)
		}
		if tr.Succeeded {
			return nil
		}
	}
}

// Installations lists the ids of the stored installations, in order.
func (s *Store) Installations(ctx context.Context) ([]string, error) {
	prefix := s.p + "installations/"
	var ids []string
	err := s.rangeAll(ctx, prefix, func(kv *mvccpb.KeyValue) error {
		ids = append(ids, unesc(strings.TrimPrefix(string(kv.Key), prefix)))
		return nil
	}, clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: list installations: %w", err)
	}
	return ids, nil
}
