package discord

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/todo"
)

func TestErrorClassification(t *testing.T) {
	fake := &fakediscord.Server{}
	fake.AddChannel("C1", 0, "G1")
	srv := httptest.NewServer(fake)
	defer srv.Close()
	a, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", APIURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	th := chat.Thread{Platform: "discord", Key: Key("C1"), Channel: "C1"}
	p := chat.Plan{Revision: 1, Items: []todo.Item{{Content: "a", Status: todo.Pending}}}
	ref, err := a.PostPlan(ctx, th, p)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		route        string
		status, code int
		pin          bool
		want         error
	}{
		{"unknown message", "PATCH message", 404, 10008, false, chat.ErrMessageGone},
		{"edit limit is temporary", "PATCH message", 400, 30046, false, chat.ErrEditLater},
		{"archived thread", "PATCH message", 400, 50083, false, chat.ErrUndeliverable},
		{"unknown channel", "PATCH message", 404, 10003, false, chat.ErrUndeliverable},
		{"max pins", "PUT pins", 400, 30003, true, chat.ErrPinUnavailable},
		{"missing permissions", "PUT pins", 403, 50013, true, chat.ErrPinUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake.Fail(tt.route, tt.status, tt.code)
			var err error
			if tt.pin {
				err = a.Pin(ctx, th, ref, true)
			} else {
				err = a.EditPlan(ctx, th, ref, p)
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
	fake.FailHTTP("PATCH message", 429, 1)
	var rl *chat.RateLimitError
	if err := a.EditPlan(ctx, th, ref, p); !errors.As(err, &rl) || rl.RetryAfter <= 0 {
		t.Errorf("429: %v, want a RateLimitError with retry_after", err)
	}
}
