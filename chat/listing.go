package chat

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/pinplan/pinplan/agent"
)

// ListingStore keeps each session's listing record (how the console lists
// it), apart from its plan board record. store.DB implements it.
type ListingStore interface {
	// Listing returns the session's listing record; nil if it has none.
	Listing(ctx context.Context, key string) ([]byte, error)
	// SaveListing stores the session's listing record whole.
	SaveListing(ctx context.Context, key string, data []byte) error
}

// listingRecord is how a session is listed: its title and whether it was
// deleted from the listing. Unlike the plan board and the cards it
// outlives a reset (the thread keeps its name).
type listingRecord struct {
	// Title is the first words of the session's first message, or what
	// it was renamed to.
	Title string `json:"title,omitempty"`
	// Hidden: deleted from the console's listing (the session archived).
	Hidden bool `json:"hidden,omitempty"`
}

// DecodeListing reads how a session is listed from its stored listing
// record, or, for a session no router has loaded since the listing left
// the plan board record, from the old fields of its board record.
func DecodeListing(listing, board []byte) (title string, hidden bool) {
	if len(listing) > 0 {
		var l listingRecord
		if json.Unmarshal(listing, &l) != nil {
			return "", false
		}
		return l.Title, l.Hidden
	}
	var old legacyBoard
	if len(board) == 0 || json.Unmarshal(board, &old) != nil {
		return "", false
	}
	return old.Thread.Title, old.Hidden
}

// Visible reports whether a session exists and was not deleted.
func (r *Router) Visible(key string) bool {
	s := r.session(key, nil)
	if s == nil {
		return false
	}
	var hidden bool
	s.listing.read(func(l *listingRecord) { hidden = l.Hidden })
	return !hidden
}

// Rename sets a session's title (shown in listings).
func (r *Router) Rename(key, title string) (Thread, bool) {
	s := r.session(key, nil)
	if s == nil {
		return Thread{}, false
	}
	title = Shorten(strings.Join(strings.Fields(title), " "), 80)
	rec, _ := s.board.state()
	th := rec.Thread
	s.listing.update(func(l *listingRecord) {
		if title != "" {
			l.Title = title
		}
		th.Title = l.Title
	})
	return th, true
}

// Listed is one session as a platform's status command lists it
// (Slack's and Discord's /pinplan status).
type Listed struct {
	Key     string
	Title   string
	State   agent.RunState // idle, running or waiting
	Updated time.Time
}
