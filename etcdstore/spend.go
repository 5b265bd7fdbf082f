package etcdstore

import (
	"context"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinplan/pinplan/agent"
)

// spendKey is where a person's tokens on a UTC day are counted.
func (s *Store) spendKey(day, person string) string {
	return s.p + "spend/" + esc(day) + "/" + esc(person)
}

// spendCounter returns the counter of sp's day as last read or written
// here, or reads it when fresh (or nothing is known). Commit compares it
// in the round's Txn, so a stale one only costs a retry.
func (s *Store) spendCounter(ctx context.Context, sp *agent.Spend, fresh bool) (counter, error) {
	key := s.spendKey(sp.Day, sp.Person)
	if !fresh {
		s.spendMu.Lock()
		c, ok := s.spends[key]
		s.spendMu.Unlock()
		if ok {
			return c, nil
		}
	}
	resp, err := s.get(ctx, key)
	if err != nil {
		return counter{}, err
	}
	c := counterOf(key, resp)
	s.keepSpend(c)
	return c, nil
}

// keepSpend remembers c as the counter's current value.
func (s *Store) keepSpend(c counter) {
	s.spendMu.Lock()
	defer s.spendMu.Unlock()
	if s.spends == nil || len(s.spends) > 10000 {
		s.spends = map[string]counter{} // a cache: forgetting costs one read
	}
	s.spends[c.key] = c
}

// Spent implements agent.Store.
func (s *Store) Spent(ctx context.Context, person, day string) (int64, error) {
	c, err := s.spendCounter(ctx, &agent.Spend{Person: person, Day: day}, true)
	if err != nil {
		return 0, fmt.Errorf("etcdstore: tokens of %s on %s: %w", person, day, err)
	}
	return int64(c.last), nil
}

// SpentOn returns what each person was charged on day, in person order.
func (s *Store) SpentOn(ctx context.Context, day string) ([]agent.Spend, error) {
	var out []agent.Spend
	prefix := s.p + "spend/" + esc(day) + "/"
	err := s.rangeAll(ctx, prefix, func(kv *mvccpb.KeyValue) error {
		n, err := strconv.ParseUint(string(kv.Value), 10, 64)
		if err != nil {
			return fmt.Errorf("tokens at %s: %w", kv.Key, err)
		}
		out = append(out, agent.Spend{Person: unesc(string(kv.Key[len(prefix):])), Day: day, Tokens: int64(n)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("etcdstore: tokens spent on %s: %w", day, err)
	}
	return out, nil
}

// spendOps are the compare and the put that add sp in a round's Txn.
func spendOps(c counter, sp *agent.Spend) (clientv3.Cmp, clientv3.Op) {
	return c.unchanged(), clientv3.OpPut(c.key, strconv.FormatUint(c.plus(sp.Tokens), 10))
}

// plus is the counter's value after adding n tokens (negative gives a
// reservation back), never below 0.
func (c counter) plus(n int64) uint64 {
	return uint64(max(int64(c.last)+n, 0))
}

// Reserve implements agent.Store: it reads the person's day and writes
// the charge in a Txn that compares what it read, reading again when
// another reservation or round (here or on another replica) counted
// first.
func (s *Store) Reserve(ctx context.Context, person, day string, need, want, budget int64) (charged, spent int64, err error) {
	sp := &agent.Spend{Person: person, Day: day}
	for attempt := 0; ; attempt++ {
		c, err := s.spendCounter(ctx, sp, attempt > 0)
		if err != nil {
			return 0, 0, fmt.Errorf("etcdstore: reserve tokens of %s on %s: %w", person, day, err)
		}
		spent = int64(c.last)
		charged, err := agent.Reservation(need, want, budget, spent)
		if err != nil {
			if attempt == 0 {
				continue // the cached count may be old: refuse on a fresh read only
			}
			return 0, spent, err
		}
		if charged == 0 {
			return 0, spent, nil
		}
		sp.Tokens = charged
		cmp, put := spendOps(c, sp)
		tr, err := s.txn(ctx, "", []clientv3.Cmp{cmp}, []clientv3.Op{put}, nil)
		if err != nil {
			return 0, 0, fmt.Errorf("etcdstore: reserve tokens of %s on %s: %w", person, day, err)
		}
		if tr.Succeeded {
			s.keepSpend(counter{key: c.key, last: c.plus(charged), mod: tr.Header.Revision})
			return charged, spent, nil
		}
	}
}
