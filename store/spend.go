package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/pinplan/pinplan/agent"
)

// bSpend holds a bucket per UTC day, and in it each person's tokens
// (DESIGN §18). Created by the first commit that charges anyone.
var bSpend = []byte("spend")

// addSpend adds sp to its person's day, in the round's transaction. Batch
// may run a transaction function twice, but only after the first run was
// rolled back, so the sum counts each committed round once. Negative
// tokens give back a reservation; the count stops at 0.
func addSpend(tx *bolt.Tx, sp *agent.Spend) error {
	if sp == nil || sp.Tokens == 0 || sp.Person == "" {
		return nil
	}
	all, err := tx.CreateBucketIfNotExists(bSpend)
	if err != nil {
		return err
	}
	day, err := all.CreateBucketIfNotExists([]byte(sp.Day))
	if err != nil {
		return err
	}
	n := max(int64(tokensOf(day.Get([]byte(sp.Person))))+sp.Tokens, 0)
	return day.Put([]byte(sp.Person), u64(uint64(n)))
}

// Reserve implements agent.Store: the check and the charge are one bbolt
// write transaction.
func (db *DB) Reserve(_ context.Context, person, day string, need, want, budget int64) (charged, spent int64, err error) {
	err = db.update(func(tx *bolt.Tx) error {
		charged, spent = 0, 0
		if all := tx.Bucket(bSpend); all != nil {
			if b := all.Bucket([]byte(day)); b != nil {
				spent = int64(tokensOf(b.Get([]byte(person))))
			}
		}
		var err error
		if charged, err = agent.Reservation(need, want, budget, spent); err != nil {
			return err
		}
		return addSpend(tx, &agent.Spend{Person: person, Day: day, Tokens: charged})
	})
	if errors.Is(err, agent.ErrOverBudget) {
		return 0, spent, err
	}
	if err != nil {
		return 0, 0, fmt.Errorf("store: reserve tokens of %s on %s: %w", person, day, err)
	}
	return charged, spent, nil
}

func tokensOf(raw []byte) uint64 {
	if len(raw) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(raw)
}

// Spent implements agent.Store.
func (db *DB) Spent(_ context.Context, person, day string) (int64, error) {
	var n uint64
	err := db.view(func(tx *bolt.Tx) error {
		if all := tx.Bucket(bSpend); all != nil {
			if b := all.Bucket([]byte(day)); b != nil {
				n = tokensOf(b.Get([]byte(person)))
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: tokens of %s on %s: %w", person, day, err)
	}
	return int64(n), nil
}

// SpentOn returns what each person was charged on day, in person order.
func (db *DB) SpentOn(_ context.Context, day string) ([]agent.Spend, error) {
	var out []agent.Spend
	err := db.view(func(tx *bolt.Tx) error {
		all := tx.Bucket(bSpend)
		if all == nil {
			return nil
		}
		b := all.Bucket([]byte(day))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			out = append(out, agent.Spend{Person: string(k), Day: day, Tokens: int64(tokensOf(v))})
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: tokens spent on %s: %w", day, err)
	}
	return out, nil
}
