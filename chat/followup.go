package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pinplan/pinplan/agent"
)

// FollowUpWait is how long a follow-up waits for its thread's session
// (DESIGN §14): Slack spreads one thread's events over every connection,
// and a reply sent right behind its mention can reach a replica, or be
// handled, before the mention has made the session.
const FollowUpWait = time.Minute

// FollowUpStore keeps the follow-ups that wait for their thread's session.
// store.DB and etcdstore.Store implement it.
type FollowUpStore interface {
	// HoldFollowUp keeps data for session key under order (the store's
	// order among the session's follow-ups; one order is kept once)
	// until ttl has passed, unless the session exists (it has a record
	// or a plan board): then it keeps nothing and reports false. The
	// look and the write are one transaction, so a follow-up is either
	// held before the session's board is first saved, and taken by
	// TakeFollowUps after that, or handed to the session.
	HoldFollowUp(ctx context.Context, key, order string, data []byte, ttl time.Duration) (bool, error)
	// TakeFollowUps removes the session's follow-ups and returns those
	// that have not expired, by order.
	TakeFollowUps(ctx context.Context, key string) ([][]byte, error)
}

// followUpOrder is a follow-up's order among its thread's: its message
// id (Slack's ts, a Discord snowflake) padded so that ids sort as numbers,
// then its event key to keep apart messages without an id.
func followUpOrder(in Incoming) string {
	return padID(in.MessageID) + " " + in.Event
}

// MessageOrder is a message's place among its thread's messages as the
// platform numbers them (Slack's ts, a Discord snowflake): strings of it
// compare as the ids do.
func MessageOrder(in Incoming) string { return padID(in.MessageID) }

// padID pads a message id so that ids of the same platform compare as
// their numbers do (agent.SentOrder).
func padID(id string) string { return agent.SentOrder(id) }

// Hold keeps a follow-up (Incoming.FollowUp) of a thread whose session
// does not exist yet, for Options.FollowUpWait: the session created for
// the thread takes it (Handle, after its first message), else it expires
// unseen, and nothing is said in the thread. It reports false, holding
// nothing, when the session exists by now: hand the message on.
func (r *Router) Hold(ctx context.Context, in Incoming) (bool, error) {
	in.Sync = false
	data, err := json.Marshal(in)
	if err != nil {
		return false, err
	}
	held, err := r.followUps.HoldFollowUp(ctx, in.Thread.Key, followUpOrder(in), data, r.opts.FollowUpWait)
	if err != nil {
		return false, fmt.Errorf("chat: hold a follow-up of %s: %w", in.Thread.Key, err)
	}
	if held {
		r.opts.Logger.Debug("follow-up waits for its thread's session", "session", in.Thread.Key, "event", in.Event)
	}
	return held, nil
}

// takeFollowUps hands on the follow-ups held for the session that first
// has just started, in the order they were sent. Those sent before first
// were not for pinplan (its thread had no session then) and are dropped.
//
// They are handled under the router's context, not the caller's: what
// the caller's carries belongs to its own message (a replica's handed-over
// event, consumed as that message is queued).
func (m *message) takeFollowUps(ctx context.Context) {
	r, first := m.r, m.in
	raws, err := r.followUps.TakeFollowUps(ctx, first.Thread.Key)
	if err != nil {
		r.opts.Logger.Error("take the follow-ups that waited for the session", "session", first.Thread.Key, "err", err)
		return
	}
	if len(raws) == 0 {
		return
	}
	hctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	for _, raw := range raws {
		var in Incoming
		if err := json.Unmarshal(raw, &in); err != nil {
			r.opts.Logger.Error("unreadable follow-up; dropped", "session", first.Thread.Key, "err", err)
			continue
		}
		if first.MessageID != "" && padID(in.MessageID) <= padID(first.MessageID) {
			continue
		}
		in.FollowUp = false
		r.opts.Logger.Info("follow-up taken by the session it waited for", "session", first.Thread.Key, "event", in.Event)
		if err := r.Handle(hctx, in); err != nil && !errors.Is(err, ErrRejected) {
			r.opts.Logger.Error("hand on a follow-up that waited for the session", "session", first.Thread.Key, "err", err)
		}
	}
}

// memFollowUps holds follow-ups in memory, for a router whose store
// keeps none; a session exists when its board does.
type memFollowUps struct {
	boards BoardStore
	now    func() time.Time

	mu   sync.Mutex // guards held
	held map[string][]heldFollowUp
}

type heldFollowUp struct {
	order   string
	data    []byte
	expires time.Time
}

// HoldFollowUp implements FollowUpStore.
func (m *memFollowUps) HoldFollowUp(ctx context.Context, key, order string, data []byte, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	board, err := m.boards.Board(ctx, key)
	if err != nil || len(board) > 0 {
		return false, err
	}
	if m.held == nil {
		m.held = map[string][]heldFollowUp{}
	}
	now := m.now()
	for k, hs := range m.held { // the expired go, so that nothing stays for good
		if hs = slices.DeleteFunc(hs, func(h heldFollowUp) bool { return !now.Before(h.expires) }); len(hs) == 0 {
			delete(m.held, k)
		} else {
			m.held[k] = hs
		}
	}
	hs := slices.DeleteFunc(m.held[key], func(h heldFollowUp) bool { return h.order == order })
	m.held[key] = append(hs, heldFollowUp{order: order, data: data, expires: now.Add(ttl)})
	return true, nil
}

// TakeFollowUps implements FollowUpStore.
func (m *memFollowUps) TakeFollowUps(_ context.Context, key string) ([][]byte, error) {
	m.mu.Lock()
	hs := m.held[key]
	delete(m.held, key)
	m.mu.Unlock()
	slices.SortFunc(hs, func(a, b heldFollowUp) int { return strings.Compare(a.order, b.order) })
	var out [][]byte
	now := m.now()
	for _, h := range hs {
		if now.Before(h.expires) {
			out = append(out, h.data)
		}
	}
	return out, nil
}
