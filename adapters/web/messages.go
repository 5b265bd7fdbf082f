package web

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/pinplan/pinplan/agent"
)

// Message is one message of a thread as the page shows it. Its ID is
// stable: the page shows each ID once, however often the message reaches
// it (the answer to a POST, the live event, a fetch of the thread).
type Message struct {
	ID     string    `json:"id"`
	Role   string    `json:"role"` // user, assistant, notice
	Author string    `json:"author,omitempty"`
	Text   string    `json:"text"`
	At     time.Time `json:"at"`
	// Files are the files sent with a user message (files.go).
	Files []FileInfo `json:"files,omitempty"`
}

// storedID names a message of the session's stored history by what the
// store keeps of it: its session, role and time, and n, how many earlier
// messages of the history have the same role and time (almost always 0).
// A message keeps its time when it moves from the inbox to the history,
// so its ID is the same before and after its turn.
func storedID(key, role string, at time.Time, n int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%d\x00%d", key, role, at.UnixNano(), n))
	return "m-" + hex.EncodeToString(h[:8])
}

// historyMessages is what the page shows of a stored conversation: what
// people wrote and the model's answers, each with its storedID; tool calls
// and results are left out.
func historyMessages(key string, hist []agent.Entry) []Message {
	type slot struct {
		role string
		at   int64
	}
	seen := map[slot]int{}
	var msgs []Message
	for _, e := range hist {
		var m Message
		switch {
		case e.Quote:
			continue // quoted material (a thread's earlier messages), not a message here
		case e.Steer:
			continue // a person's change of the plan, told to the model: the plan shows it
		case e.Material:
			// The files given to the model with the message before it:
			// shown under that message, by name.
			if n := len(msgs); n > 0 && msgs[n-1].Role == "user" {
				msgs[n-1].Files = append(msgs[n-1].Files, filesOf(e.Message.Content)...)
			}
			continue
		case e.Message.Role == "user":
			m = Message{Role: "user", Author: e.Author, Text: e.Text(), At: e.At}
		case e.Message.Role == "assistant" && len(e.Message.ToolCalls) == 0 && e.Message.Content != "":
			m = Message{Role: "assistant", Text: e.Message.Content, At: e.At}
		default:
			continue
		}
		s := slot{m.Role, m.At.UnixNano()}
		m.ID = storedID(key, m.Role, m.At, seen[s])
		seen[s]++
		msgs = append(msgs, m)
	}
	return msgs
}

// maxIssued is how many stored IDs the console remembers handing out per
// thread, so two identical messages sent at once get one each.
const maxIssued = 50

// stored finds m in the session's stored history, newest first, so the
// live copy the page gets now carries the ID (and time) the stored copy
// has when the page fetches the thread later. ok is false when m is not
// stored (a command's echo, a notice) or the store could not be read.
func (c *Console) stored(ctx context.Context, key string, m Message) (Message, bool) {
	if c.opts.Store == nil {
		return m, false
	}
	hist, err := c.opts.Store.History(ctx, key)
	if err != nil {
		c.opts.Logger.Warn("read history for a message id", "session", key, "err", err)
		return m, false
	}
	msgs := historyMessages(key, hist)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(msgs) - 1; i >= 0; i-- {
		s := msgs[i]
		if s.Role != m.Role || s.Author != m.Author || (s.Text != strings.TrimSpace(m.Text) && s.Text != m.Text) || c.issuedLocked(key, s.ID) {
			continue
		}
		issued := append(c.issued[key], s.ID)
		if len(issued) > maxIssued {
			issued = issued[len(issued)-maxIssued:]
		}
		c.issued[key] = issued
		c.touched[key] = c.opts.Now()
		return s, true
	}
	return m, false
}

func (c *Console) issuedLocked(key, id string) bool {
	for _, x := range c.issued[key] {
		if x == id {
			return true
		}
	}
	return false
}
