package chat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/pinplan/pinplan/agent"
)

func TestDecodeListing(t *testing.T) {
	tests := []struct {
		name    string
		listing string
		title   string
		hidden  bool
	}{
		{name: "listed", listing: `{"title":"new"}`, title: "new"},
		{name: "deleted", listing: `{"title":"new","hidden":true}`, title: "new", hidden: true},
		{name: "nothing"},
		{name: "unreadable", listing: `{not json`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var listing []byte
			if tt.listing != "" {
				listing = []byte(tt.listing)
			}
			title, hidden := DecodeListing(listing)
			if title != tt.title || hidden != tt.hidden {
				t.Errorf("got %q, hidden %t; want %q, %t", title, hidden, tt.title, tt.hidden)
			}
		})
	}
}

// TestFencedRecordSaveSaidOnce: a record save refused because another
// replica holds the session now is a normal failover: said once at INFO,
// never as an error; any other failed save is an error each time.
func TestFencedRecordSaveSaidOnce(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	fenced := fmt.Errorf("etcdstore: save cards: %w", agent.ErrFenced)
	fail := fenced
	rec := &record[cardsRecord]{what: "approval cards", log: log, ctx: context.Background(), save: func(context.Context, []byte) error { return fail }}
	for range 3 {
		rec.update(func(*cardsRecord) {})
	}
	out := buf.String()
	if n := strings.Count(out, "level=INFO"); n != 1 || strings.Contains(out, "level=ERROR") {
		t.Errorf("three fenced saves logged:\n%s\nwant one INFO line and no error", out)
	}
	buf.Reset()
	fail = errors.New("etcdserver: request timed out")
	rec.update(func(*cardsRecord) {})
	if !strings.Contains(buf.String(), "level=ERROR") {
		t.Errorf("a failed save logged %q, want an error", buf.String())
	}
}
