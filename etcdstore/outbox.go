package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// AddOutbox implements chat.OutboxStore: the items go under the session,
// in one Txn under its fence, with ids from the session's counter.
func (s *Store) AddOutbox(ctx context.Context, key string, items [][]byte) ([]uint64, error) {
	for {
		resp, err := s.get(ctx, s.oseq(key))
		if err != nil {
			return nil, fmt.Errorf("etcdstore: add to outbox of %s: %w", key, err)
		}
		seq := counterOf(s.oseq(key), resp)
		ids := make([]uint64, len(items))
		ops := make([]clientv3.Op, 0, len(items)+1)
		for i, it := range items {
			ids[i] = seq.last + uint64(i) + 1
			ops = append(ops, clientv3.OpPut(s.outbox(key)+num(ids[i]), string(it)))
		}
		ops = append(ops, seq.take(len(items)))
		if len(ops) > maxOps || opSize(ops) > maxBytes {
			return nil, fmt.Errorf("etcdstore: add to outbox of %s: %d parts do not fit one etcd transaction", key, len(items))
		}
		cmps, err := s.fence(key)
		if err != nil {
			return nil, fmt.Errorf("etcdstore: add to outbox of %s: %w", key, err)
		}
		cmps = append(cmps, seq.unchanged())
		tr, err := s.txn(ctx, key, cmps, ops, nil)
		if err != nil {
			return nil, fmt.Errorf("etcdstore: add to outbox of %s: %w", key, err)
		}
		if tr.Succeeded {
			return ids, nil
		}
	}
}

// DeleteOutbox implements chat.OutboxStore, under the session's fence.
func (s *Store) DeleteOutbox(ctx context.Context, key string, id uint64) error {
	if err := s.fencedTxn(ctx, key, clientv3.OpDelete(s.outbox(key)+num(id))); err != nil {
		return fmt.Errorf("etcdstore: delete outbox item %d of %s: %w", id, key, err)
	}
	return nil
}

// Outbox implements chat.OutboxStore: every stored item, by session and
// then oldest first.
func (s *Store) Outbox(ctx context.Context, f func(id uint64, data []byte)) error {
	err := s.rangeAll(ctx, s.p+"outbox/", func(kv *mvccpb.KeyValue) error {
		f(seqOf(kv.Key), kv.Value)
		return nil
	})
	if err != nil {
		return fmt.Errorf("etcdstore: read outbox: %w", err)
	}
	return nil
}

// OutboxOf calls f with the session's stored items, oldest first (a
// replica that takes the session over reads only its own).
func (s *Store) OutboxOf(ctx context.Context, key string, f func(id uint64, data []byte)) error {
	err := s.rangeAll(ctx, s.outbox(key), func(kv *mvccpb.KeyValue) error {
		f(seqOf(kv.Key), kv.Value)
		return nil
	})
	if err != nil {
		return fmt.Errorf("etcdstore: read outbox of %s: %w", key, err)
	}
	return nil
}

// OutboxKeys lists the sessions with replies not delivered yet.
func (s *Store) OutboxKeys(ctx context.Context) ([]string, error) {
	var keys []string
	err := s.rangeAll(ctx, s.p+"outbox/", func(kv *mvccpb.KeyValue) error {
		if k := s.sessionOf("outbox", kv.Key); len(keys) == 0 || keys[len(keys)-1] != k {
			keys = append(keys, k)
		}
		return nil
	}, clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: list outbox: %w", err)
	}
	return keys, nil
}

// dedupeLease is a lease shared by the dedupe keys of one ttl for about
// a minute: granting one per event would cost a request each.
type dedupeLease struct {
	id      clientv3.LeaseID
	granted time.Time
}

// dedupeSlack is how long after their ttl dedupe keys may live: the keys
// of one minute share a lease of ttl plus this.
const dedupeSlack = time.Minute

// FirstSeen implements chat.Deduper on every replica at once: the key is
// created if absent, on a lease that ends it between ttl and ttl plus a
// minute later, so an event redelivered to any replica runs once.
func (s *Store) FirstSeen(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	k := s.p + "dedupe/" + esc(key)
	for attempt := 0; ; attempt++ {
		lease, err := s.leaseFor(ctx, ttl)
		if err != nil {
			return false, fmt.Errorf("etcdstore: dedupe %s: %w", key, err)
		}
		tr, err := s.txn(ctx, "", []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(k, "", clientv3.WithLease(lease))}, nil)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
			s.forgetDedupeLease(ttl) // revoked or expired under us: grant another
			continue
		}
		if err != nil {
			return false, fmt.Errorf("etcdstore: dedupe %s: %w", key, err)
		}
		return tr.Succeeded, nil
	}
}

func (s *Store) forgetDedupeLease(ttl time.Duration) {
	s.leaseMu.Lock()
	delete(s.dedupe, ttl)
	s.leaseMu.Unlock()
}

func (s *Store) leaseFor(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	now := s.now()
	if l, ok := s.dedupe[ttl]; ok && now.Sub(l.granted) < dedupeSlack {
		return l.id, nil
	}
	s.count(8)
	resp, err := s.cli.Grant(ctx, int64((ttl+dedupeSlack)/time.Second)+1)
	if err != nil {
		return 0, err
	}
	if s.dedupe == nil {
		s.dedupe = map[time.Duration]dedupeLease{}
	}
	s.dedupe[ttl] = dedupeLease{id: resp.ID, granted: now}
	return resp.ID, nil
}

// PruneDedupe does nothing: dedupe keys end with their leases.
func (s *Store) PruneDedupe(context.Context) (int, error) { return 0, nil }

// Marks implements chat.MarkStore: the read marks saved under name, or
// nil. They are shared by the replicas: the next one to hold the
// Discord gateway starts from the marks the last one saved.
func (s *Store) Marks(ctx context.Context, name string) ([]byte, error) {
	resp, err := s.get(ctx, s.p+"marks/"+esc(name))
	if err != nil {
		return nil, fmt.Errorf("etcdstore: read marks %s: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return resp.Kvs[0].Value, nil
}

// SaveMarks implements chat.MarkStore. It is not fenced: marks are a
// hint (a mark behind the truth only refetches what the dedupe knows).
func (s *Store) SaveMarks(ctx context.Context, name string, data []byte) error {
	if _, err := s.txn(ctx, "", nil, []clientv3.Op{clientv3.OpPut(s.p+"marks/"+esc(name), string(data))}, nil); err != nil {
		return fmt.Errorf("etcdstore: save marks %s: %w", name, err)
	}
	return nil
}
