// Package inboxtest has in-memory stand-ins for what the adapters hand
// messages to and keep their state in (chat.Inbox, chat.Deduper,
// chat.MarkStore), for the adapters' tests.
package inboxtest

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pinplan/pinplan/chat"
)

var (
	_ chat.Inbox     = (*Inbox)(nil)
	_ chat.Deduper   = (*Dedupe)(nil)
	_ chat.MarkStore = (*Marks)(nil)
)

// Inbox is a chat.Inbox that records messages; a session is known once it
// was handed a message. A message whose Event it was handed before is
// dropped, as the router and the store drop it. A follow-up of a session
// not known is held, as the router holds it, and recorded after the
// message that makes the session if it was sent after it (by MessageID).
// Clicks are answered privately. The zero value is ready.
type Inbox struct {
	mu     sync.Mutex // guards got, known, held, events and told
	got    []chat.Incoming
	known  map[string]bool
	held   map[string][]chat.Incoming
	events map[string]bool
	told   []Told
	// Events, when set, is where the events are recorded instead, so
	// that two inboxes (two processes) share what one took in.
	Events *Dedupe
}

// Handle implements chat.Inbox.
func (r *Inbox) Handle(ctx context.Context, in chat.Incoming) error {
	if in.Event != "" && r.Events != nil {
		if first, _ := r.Events.FirstSeen(ctx, in.Event, 0); !first {
			return nil
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if in.Event != "" && r.Events == nil {
		if r.events[in.Event] {
			return nil
		}
		if r.events == nil {
			r.events = map[string]bool{}
		}
		r.events[in.Event] = true
	}
	key := in.Thread.Key
	if in.FollowUp && !r.known[key] {
		if r.held == nil {
			r.held = map[string][]chat.Incoming{}
		}
		r.held[key] = append(r.held[key], in)
		return nil
	}
	r.got = append(r.got, in)
	if r.known == nil {
		r.known = map[string]bool{}
	}
	if !r.known[key] {
		r.known[key] = true
		held := r.held[key]
		delete(r.held, key)
		slices.SortStableFunc(held, func(a, b chat.Incoming) int { return compareIDs(a.MessageID, b.MessageID) })
		for _, h := range held {
			if in.MessageID == "" || compareIDs(h.MessageID, in.MessageID) > 0 {
				r.got = append(r.got, h)
			}
		}
	}
	return nil
}

// compareIDs compares message ids as the numbers they are (Slack's ts,
// Discord's snowflakes).
func compareIDs(a, b string) int {
	return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b))
}

// Held returns the texts of the follow-ups waiting for their session.
func (r *Inbox) Held() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, hs := range r.held {
		for _, h := range hs {
			out = append(out, h.Text)
		}
	}
	return out
}

// Known implements chat.Inbox.
func (r *Inbox) Known(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.known[key]
}

// Click implements chat.Inbox.
func (r *Inbox) Click(context.Context, chat.Click) chat.ClickResult {
	return chat.ClickResult{Private: "no"}
}

// Told is a note the inbox was asked to say (Tell).
type Told struct {
	Thread     chat.Thread
	User, Text string
}

// Tell implements chat.Inbox: it records the note.
func (r *Inbox) Tell(_ context.Context, th chat.Thread, user, text string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.told = append(r.told, Told{Thread: th, User: user, Text: text})
	return nil
}

// Post implements chat.Inbox: it makes the post at once.
func (r *Inbox) Post(ctx context.Context, _ chat.Thread, send func(context.Context) error) error {
	return send(ctx)
}

// Notes returns the notes told so far, in order.
func (r *Inbox) Notes() []Told {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.told)
}

// StopSession answers a platform's own Stop as Click does.
func (r *Inbox) StopSession(context.Context, chat.Click) chat.ClickResult {
	return chat.ClickResult{Private: "no"}
}

// Rename renames nothing: the inbox knows no session's thread.
func (r *Inbox) Rename(string, string) (chat.Thread, bool) { return chat.Thread{}, false }

// Texts returns the texts handled so far, in order.
func (r *Inbox) Texts() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.got))
	for _, in := range r.got {
		out = append(out, in.Text)
	}
	return out
}

// Incoming returns the messages handled so far, in order.
func (r *Inbox) Incoming() []chat.Incoming {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]chat.Incoming(nil), r.got...)
}

// Dedupe is a chat.Deduper in memory that counts its writes. The zero
// value is ready.
type Dedupe struct {
	mu     sync.Mutex // guards seen and writes
	seen   map[string]bool
	writes int
}

// FirstSeen implements chat.Deduper.
func (d *Dedupe) FirstSeen(_ context.Context, key string, _ time.Duration) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writes++
	if d.seen == nil {
		d.seen = map[string]bool{}
	}
	if d.seen[key] {
		return false, nil
	}
	d.seen[key] = true
	return true, nil
}

// Writes counts FirstSeen calls: each is a write to the store.
func (d *Dedupe) Writes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.writes
}

// Marks is a chat.MarkStore in memory that counts its saves. The zero
// value is ready.
type Marks struct {
	mu    sync.Mutex // guards data and saves
	data  map[string][]byte
	saves int
}

// Marks implements chat.MarkStore.
func (m *Marks) Marks(_ context.Context, name string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.data[name], nil
}

// SaveMarks implements chat.MarkStore.
func (m *Marks) SaveMarks(_ context.Context, name string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.data == nil {
		m.data = map[string][]byte{}
	}
	m.data[name] = append([]byte(nil), data...)
	m.saves++
	return nil
}

// Saves counts SaveMarks calls.
func (m *Marks) Saves() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.saves
}
