// Package todo is pinplan's plan domain: todo items and their statuses, the
// strict validation of todo_write arguments, the canonical snapshot text and
// the per-session tracker with its stale-round counter.
//
// It imports only the standard library and holds no package-level state, so
// every session owns its own Tracker. Any package of pinplan may import it.
package todo

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Status is the state of one plan item.
type Status string

// The three statuses an item can have.
const (
	Pending    Status = "pending"
	InProgress Status = "in_progress"
	Completed  Status = "completed"
)

// Statuses lists every valid status in the order the schema offers them.
func Statuses() []Status { return []Status{Pending, InProgress, Completed} }

// Item is one entry of a plan.
type Item struct {
	Content string `json:"content"`
	Status  Status `json:"status"`
}

// Snapshot is an immutable plan: the complete list of items as one
// todo_write call submitted it. The zero value is the empty plan.
type Snapshot struct {
	items []Item
	text  string
}

// NewSnapshot copies items into a snapshot. The caller keeps ownership of
// items; changing it later does not change the snapshot.
func NewSnapshot(items []Item) Snapshot {
	own := make([]Item, len(items))
	copy(own, items)
	return Snapshot{items: own, text: Encode(own)}
}

// Items returns a copy of the snapshot's items.
func (s Snapshot) Items() []Item {
	out := make([]Item, len(s.items))
	copy(out, s.items)
	return out
}

// Len is the number of items.
func (s Snapshot) Len() int { return len(s.items) }

// String returns the canonical snapshot text (see Encode).
func (s Snapshot) String() string {
	if s.text == "" {
		return Encode(s.items)
	}
	return s.text
}

// Count returns how many items have status st.
func (s Snapshot) Count(st Status) int {
	n := 0
	for _, it := range s.items {
		if it.Status == st {
			n++
		}
	}
	return n
}

// Encode returns the canonical snapshot text of items:
// {"todos":[{"content":"...","status":"..."}]} with no whitespace, equal byte
// for byte to ECMAScript JSON.stringify of that object after every code point
// above U+007F is replaced by a lowercase \uXXXX escape (a surrogate pair
// outside the BMP). encoding/json is not used: it escapes <, > and & and
// writes \u0008 for \b.
func Encode(items []Item) string {
	var b strings.Builder
	b.Grow(16 + 48*len(items))
	b.WriteString(`{"todos":[`)
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"content":`)
		quote(&b, it.Content)
		b.WriteString(`,"status":`)
		quote(&b, string(it.Status))
		b.WriteByte('}')
	}
	b.WriteString(`]}`)
	return b.String()
}

const hexDigits = "0123456789abcdef"

func writeU(b *strings.Builder, r rune) {
	b.WriteString(`\u`)
	b.WriteByte(hexDigits[r>>12&0xf])
	b.WriteByte(hexDigits[r>>8&0xf])
	b.WriteByte(hexDigits[r>>4&0xf])
	b.WriteByte(hexDigits[r&0xf])
}

// quote writes s as JSON.stringify would, then ASCII-escaped. Invalid UTF-8
// bytes are written as \ufffd, the replacement character a decoder yields.
func quote(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			switch c {
			case '"':
				b.WriteString(`\"`)
			case '\\':
				b.WriteString(`\\`)
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			default:
				if c < 0x20 {
					writeU(b, rune(c))
				} else {
					b.WriteByte(c)
				}
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r > 0xffff {
			r -= 0x10000
			writeU(b, 0xd800+(r>>10))
			writeU(b, 0xdc00+(r&0x3ff))
			continue
		}
		writeU(b, r)
	}
	b.WriteByte('"')
}

// TrimSpace trims s as ECMAScript String.prototype.trim does: WhiteSpace
// (tab, VT, FF, space, NBSP, U+FEFF and every Unicode Zs) and LineTerminator
// (LF, CR, U+2028, U+2029). Unlike strings.TrimSpace it keeps U+0085.
func TrimSpace(s string) string { return strings.TrimFunc(s, isECMASpace) }

func isECMASpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0x00a0, 0x1680, 0x2028, 0x2029,
		0x202f, 0x205f, 0x3000, 0xfeff:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// itoa is strconv.Itoa, named for the validation paths.
func itoa(i int) string { return strconv.Itoa(i) }
