package web

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"github.com/pinplan/pinplan/chat"
)

// Live replies (chat.LiveReplier, with Options.Stream): the answer grows
// in the open thread as the model writes it. Each AppendLive sends a
// "live" event with the reply's text so far, under an id of its own; the
// page shows it as one message whose text it replaces. The turn's answer
// then goes out as any answer, with its stored id, in a "message" event
// that names the live message it replaces (Replaces), so the page swaps
// one for the other. A reply that is not the answer (the turn stopped or
// failed, the request was retried) keeps its text with the note; an
// interim one (tool calls follow) keeps its text. Live messages are not
// stored: a reload shows the thread's history, where only answers are.

// liveReply is one live reply in the console.
type liveReply struct {
	key  string
	id   string // the page's message id
	text string
	at   time.Time
}

var _ chat.LiveReplier = (*Console)(nil)

// Live implements chat.LiveReplier.
func (c *Console) Live() bool { return c.opts.Stream }

// liveID is the page's id of the router's live reply id.
func liveID(key, id string) string {
	h := sha256.Sum256([]byte(key + "\x00" + id))
	return "live-" + hex.EncodeToString(h[:8])
}

// AppendLive implements chat.LiveReplier. The ref is the zero one: a
// live message lives only in the pages that show it, so there is nothing
// to close after a restart.
func (c *Console) AppendLive(_ context.Context, th chat.Thread, _, id, text string) (chat.MessageRef, error) {
	c.mu.Lock()
	l, ok := c.lives[id]
	if !ok {
		l = &liveReply{key: th.Key, id: liveID(th.Key, id), at: c.opts.Now()}
		c.lives[id] = l
	}
	l.text += text
	m := Message{ID: l.id, Role: "assistant", Text: l.text, At: l.at}
	c.touched[th.Key] = c.opts.Now()
	c.mu.Unlock()
	c.broadcast(event{Type: "live", Thread: th.Key, Message: &m})
	return chat.MessageRef{}, nil
}

// FinishLive implements chat.LiveReplier.
func (c *Console) FinishLive(ctx context.Context, th chat.Thread, replyTo, id, text, note string) (chat.MessageRef, error) {
	c.mu.Lock()
	l := c.lives[id]
	delete(c.lives, id)
	c.mu.Unlock()
	replaces := ""
	switch {
	case l != nil && text != "" && strings.HasPrefix(text, l.text):
		replaces = l.id
	case l != nil && note != "":
		m := Message{ID: l.id, Role: "assistant", Text: l.text + "\n\n*(" + note + ")*", At: l.at}
		c.broadcast(event{Type: "live", Thread: th.Key, Message: &m})
	}
	if text == "" {
		return chat.MessageRef{}, nil
	}
	m := Message{Role: "assistant", Text: text, At: c.opts.Now()}
	if s, ok := c.stored(ctx, th.Key, m); ok {
		c.broadcast(event{Type: "message", Thread: th.Key, Message: &s, Replaces: replaces})
		return chat.MessageRef{}, nil
	}
	if replaces != "" {
		// Not an answer in the history (an interim text): the live
		// message is it, whole.
		m.ID, m.At = replaces, l.at
		c.broadcast(event{Type: "live", Thread: th.Key, Message: &m})
		return chat.MessageRef{}, nil
	}
	c.notice(th, m)
	return chat.MessageRef{}, nil
}

// CloseLive implements chat.LiveReplier: there is nothing to close (see
// AppendLive).
func (c *Console) CloseLive(context.Context, chat.Thread, chat.MessageRef, string) error { return nil }
