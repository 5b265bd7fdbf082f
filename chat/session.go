package chat

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/pinplan/pinplan/agent"
)

// session is what the router keeps in memory of one thread's session: its
// plan board, its approval cards and how it is listed, each with its own
// record in its own store.
type session struct {
	board   *Board
	cards   *record[cardsRecord]
	listing *record[listingRecord]
	cursor  cursor // the deliverer's, on the delivery queue only
	// unsettled: the cursor has work left (noteCursor); read by
	// eviction, off the delivery queue.
	unsettled atomic.Bool
	live      live // the answer as the model writes it (live.go)
	// undelivered: the thread was told that an answer could not be
	// delivered (outbox), which it is only once.
	undelivered atomic.Bool
}

// record is a session's record of one kind (its cards, its listing), kept
// in memory and stored whole after each change.
type record[T any] struct {
	what string // for the log: "approval cards", "listing"
	log  *slog.Logger
	ctx  context.Context
	save func(ctx context.Context, data []byte) error

	// saveMu orders saves: held from taking the record's copy until it is
	// stored, so an older copy never overwrites a newer one. Taken before
	// mu.
	saveMu sync.Mutex

	mu sync.Mutex // guards v
	v  T

	fenced atomic.Bool // a fenced save was logged (update)
}

// read calls f with the record, mu held. f must not keep what it reads
// of the record's maps.
func (r *record[T]) read(f func(v *T)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.v)
}

// update changes the record with f and stores it. A failed save is
// logged; the change stays in memory and is stored with the next one.
//
// A save refused because another replica holds the session now
// (agent.ErrFenced) is a normal failover, not a failure: said once, at
// INFO.
func (r *record[T]) update(f func(v *T)) {
	err := r.put(f)
	switch {
	case err == nil:
	case errors.Is(err, agent.ErrFenced):
		if r.fenced.CompareAndSwap(false, true) {
			r.log.Info("session record not saved: another replica holds the session now", "record", r.what)
		}
	default:
		r.log.Error("save session record", "record", r.what, "err", err)
	}
}

// put is update returning the save's error.
func (r *record[T]) put(f func(v *T)) error {
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	r.mu.Lock()
	f(&r.v)
	raw, err := json.Marshal(r.v)
	r.mu.Unlock()
	if err != nil {
		return err
	}
	return r.save(context.WithoutCancel(r.ctx), raw)
}

// session returns the session's records, loading them; nil if the session
// has no board record and th is nil.
func (r *Router) session(key string, th *Thread) *session {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.sessions[key]; ok {
		return s
	}
	s := r.loadSession(key, th)
	if s != nil {
		r.sessions[key] = s
	}
	return s
}

// loadSession reads a session's board, cards and listing records. Called
// with r.mu held.
func (r *Router) loadSession(key string, th *Thread) *session {
	log := r.opts.Logger.With("session", key)
	var rec boardRecord
	raw, err := r.opts.Store.Board(r.ctx, key)
	if err != nil {
		log.Error("load plan board", "err", err)
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &rec); err != nil {
			log.Error("decode plan board", "err", err)
		}
	}
	if rec.Thread.Key == "" {
		if th == nil {
			return nil
		}
		rec.Thread = *th
	}
	rec.Thread.Title = "" // the listing's, not the board's
	b := r.newBoard(key, rec)
	s := &session{
		board: b,
		cards: &record[cardsRecord]{what: "approval cards", log: b.log, ctx: r.ctx,
			save: func(ctx context.Context, data []byte) error { return r.cards.SaveCards(ctx, key, data) }},
		listing: &record[listingRecord]{what: "listing", log: b.log, ctx: r.ctx,
			save: func(ctx context.Context, data []byte) error { return r.listings.SaveListing(ctx, key, data) }},
	}
	if raw, err := r.cards.Cards(r.ctx, key); err != nil {
		log.Error("load approval cards", "err", err)
	} else if len(raw) > 0 {
		if err := json.Unmarshal(raw, &s.cards.v); err != nil {
			log.Error("decode approval cards", "err", err)
		}
	}
	if raw, err := r.listings.Listing(r.ctx, key); err != nil {
		log.Error("load listing", "err", err)
	} else if len(raw) > 0 {
		if err := json.Unmarshal(raw, &s.listing.v); err != nil {
			log.Error("decode listing", "err", err)
		}
	}
	return s
}

// newBoard returns the board of session key with its record.
func (r *Router) newBoard(key string, rec boardRecord) *Board {
	b := &Board{key: key, platform: r.opts.Platforms[rec.Thread.Platform], store: r.opts.Store, hooks: r.opts.Hooks, owner: r,
		log: r.opts.Logger.With("session", key, "platform", rec.Thread.Platform), rec: rec, want: rec.Shown}
	if rec.Want != nil {
		b.want = *rec.Want
	}
	b.idle = sync.NewCond(&b.mu)
	b.ctx, b.stop = context.WithCancel(r.ctx)
	b.caps = r.caps[rec.Thread.Platform]
	b.pacer = b.caps.Paced
	return b
}

// memRecords keeps cards and listing records in memory, for a router
// whose store keeps none.
type memRecords struct {
	mu sync.Mutex // guards m
	m  map[string][]byte
}

func (m *memRecords) get(key string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.m[key]
}

func (m *memRecords) put(key string, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string][]byte{}
	}
	m.m[key] = append([]byte(nil), data...)
}

// Cards implements CardStore.
func (m *memRecords) Cards(_ context.Context, key string) ([]byte, error) { return m.get(key), nil }

// SaveCards implements CardStore.
func (m *memRecords) SaveCards(_ context.Context, key string, data []byte) error {
	m.put(key, data)
	return nil
}

// Listing implements ListingStore.
func (m *memRecords) Listing(_ context.Context, key string) ([]byte, error) { return m.get(key), nil }

// SaveListing implements ListingStore.
func (m *memRecords) SaveListing(_ context.Context, key string, data []byte) error {
	m.put(key, data)
	return nil
}
