// Package boardrec reads the one thing the stores need of chat's plan
// board records, which are otherwise opaque to them: whether a record
// written before the stores kept an index of boards with work left has
// work left, for the one-time build of that index. It imports nothing of
// pinplan's.
package boardrec

import (
	"bytes"
	"encoding/json"
)

// Pending is chat.BoardPending as far as a store can tell without chat:
// content wanted that differs from what is shown (as stored), a message
// not pinned, or earlier messages to restore or unpin. An unreadable
// record has work left: a start visits it once, and its next save says.
func Pending(raw []byte) bool {
	var rec struct {
		Ref struct {
			ID string `json:"id"`
		} `json:"ref"`
		Pinned         bool              `json:"pinned"`
		PinUnavailable bool              `json:"pin_unavailable"`
		Shown          json.RawMessage   `json:"shown"`
		Want           json.RawMessage   `json:"want"`
		Unpin          []json.RawMessage `json:"unpin"`
		Restore        []json.RawMessage `json:"restore"`
	}
	if json.Unmarshal(raw, &rec) != nil {
		return true
	}
	return len(rec.Unpin) > 0 || len(rec.Restore) > 0 || (rec.Ref.ID != "" && !rec.Pinned && !rec.PinUnavailable) ||
		(len(rec.Want) > 0 && !bytes.Equal(rec.Want, []byte("null")) && !bytes.Equal(rec.Want, rec.Shown))
}
