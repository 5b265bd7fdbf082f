package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
// record.
func DecodeListing(listing []byte) (title string, hidden bool) {
	var l listingRecord
	if len(listing) == 0 || json.Unmarshal(listing, &l) != nil {
		return "", false
	}
	return l.Title, l.Hidden
}

// Visible reports whether a session exists and was not deleted.
func (r *Router) Visible(key string) bool {
	s := r.out.session(key, nil)
	if s == nil {
		return false
	}
	var hidden bool
	s.listing.read(func(l *listingRecord) { hidden = l.Hidden })
	return !hidden
}

// Rename sets a session's title (shown in listings).
func (r *Router) Rename(key, title string) (Thread, bool) {
	s := r.out.session(key, nil)
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

// maxStatusLines bounds the sessions a status command lists.
const maxStatusLines = 20

// StatusList is a status command's answer: the sessions of all that keep
// says are here and that are working or waiting for approval, newest
// first, each on a line from line (given the session and "working" or
// "waiting for approval"), at most 20 and a count of the rest; none
// says so, in where ("in this channel").
func StatusList(all []Listed, keep func(Listed) bool, where string, line func(s Listed, state string) string) string {
	var busy []Listed
	for _, s := range all {
		if s.State.InTurn() && keep(s) {
			busy = append(busy, s)
		}
	}
	if len(busy) == 0 {
		return "Nothing is working or waiting " + where + "."
	}
	slices.SortFunc(busy, func(x, y Listed) int { return y.Updated.Compare(x.Updated) })
	var b strings.Builder
	fmt.Fprintf(&b, "%d working or waiting %s:\n", len(busy), where)
	for i, s := range busy {
		if i == maxStatusLines {
			fmt.Fprintf(&b, "… and %d more.", len(busy)-i)
			break
		}
		state := "working"
		if s.State == agent.Waiting {
			state = "waiting for approval"
		}
		b.WriteString("• " + line(s, state) + "\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}
