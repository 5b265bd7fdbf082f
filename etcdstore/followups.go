package etcdstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The follow-ups that wait for their thread's session (chat.FollowUpStore)
// live at P held/K/ORDER: the expiry, unix nanoseconds as 8 bytes, then
// the follow-up's bytes (chat's). They are on a lease like the dedupe
// keys', which removes those no session took a minute or so after they
// expired; the expiry in the value is the one that counts.
func (s *Store) held(key string) string { return s.p + "held/" + esc(key) + "/" }

// HoldFollowUp implements chat.FollowUpStore on every replica: in one Txn,
// a session with a record or a plan board holds nothing (false), else
// the follow-up is kept until ttl has passed. It is not fenced: any
// replica holds a follow-up it receives, as any replica queues a message.
func (s *Store) HoldFollowUp(ctx context.Context, key, order string, data []byte, ttl time.Duration) (bool, error) {
	v := binary.BigEndian.AppendUint64(nil, uint64(s.now().Add(ttl).UnixNano()))
	v = append(v, data...)
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(s.rec(key)), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(s.chatKey("board", key)), "=", 0),
	}
	for attempt := 0; ; attempt++ {
		lease, err := s.leaseFor(ctx, ttl)
		if err != nil {
			return false, fmt.Errorf("etcdstore: hold a follow-up of %s: %w", key, err)
		}
		tr, err := s.txn(ctx, "", cmps, []clientv3.Op{clientv3.OpPut(s.held(key)+esc(order), string(v), clientv3.WithLease(lease))}, nil)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
			s.forgetDedupeLease(ttl) // revoked or expired under us: grant another
			continue
		}
		if err != nil {
			return false, fmt.Errorf("etcdstore: hold a follow-up of %s: %w", key, err)
		}
		return tr.Succeeded, nil
	}
}

// TakeFollowUps implements chat.FollowUpStore: the session's follow-ups
// are read and deleted in one Txn, so that each is taken once.
func (s *Store) TakeFollowUps(ctx context.Context, key string) ([][]byte, error) {
	prefix := s.held(key)
	s.count(len(prefix))
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)),
		clientv3.OpDelete(prefix, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("etcdstore: take the follow-ups of %s: %w", key, err)
	}
	now := uint64(s.now().UnixNano())
	var out [][]byte
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		if len(kv.Value) >= 8 && binary.BigEndian.Uint64(kv.Value) > now {
			out = append(out, kv.Value[8:])
		}
	}
	return out, nil
}
