package slack

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/todo"
)

func testAdapter(t *testing.T, native bool) (*Adapter, *fakeslack.Server) {
	t.Helper()
	fake := &fakeslack.Server{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return New(Options{BotToken: "xoxb-t", APIURL: srv.URL + "/api/", NativePlan: native, Handler: nopHandler{}}), fake
}

func TestNativeBlocksFallBack(t *testing.T) {
	a, fake := testAdapter(t, true)
	fake.Fail("chat.postMessage", "invalid_blocks")
	th := chat.Thread{Platform: "slack", Key: "slack/T1/C1/1.1", Channel: "C1", ThreadID: "1.1"}
	p := chat.Plan{Revision: 1, Updated: time.Now(), Items: []todo.Item{{Content: "a", Status: todo.Pending}}}
	ref, err := a.PostPlan(context.Background(), th, p)
	if err != nil {
		t.Fatal(err)
	}
	calls := fake.Calls("chat.postMessage")
	if len(calls) != 2 || !strings.Contains(calls[0].Params["blocks"], `"type":"plan"`) || strings.Contains(calls[1].Params["blocks"], `"type":"plan"`) {
		t.Fatalf("calls: %+v", calls)
	}
	// Later edits go straight to standard blocks.
	if err := a.EditPlan(context.Background(), th, ref, p); err != nil {
		t.Fatal(err)
	}
	if up := fake.Calls("chat.update"); len(up) != 1 || strings.Contains(up[0].Params["blocks"], `"type":"plan"`) {
		t.Errorf("edit after fallback: %+v", up)
	}
}

func TestErrorClassification(t *testing.T) {
	a, fake := testAdapter(t, false)
	th := chat.Thread{Platform: "slack", Channel: "C1", ThreadID: "1.1"}
	ctx := context.Background()
	p := chat.Plan{Revision: 1, Items: []todo.Item{{Content: "a", Status: todo.Pending}}}
	if err := a.EditPlan(ctx, th, chat.MessageRef{Channel: "C1", ID: "9.9"}, p); !errors.Is(err, chat.ErrMessageGone) {
		t.Errorf("edit of a missing message: %v", err)
	}
	ref, _ := a.PostPlan(ctx, th, p)
	fake.Fail("pins.add", "too_many_pins")
	if err := a.Pin(ctx, th, ref, true); !errors.Is(err, chat.ErrPinUnavailable) {
		t.Errorf("pin limit: %v", err)
	}
	if err := a.Pin(ctx, th, ref, true); err != nil {
		t.Fatal(err)
	}
	if err := a.Pin(ctx, th, ref, true); err != nil {
		t.Errorf("already pinned is fine: %v", err)
	}
	fake.Limit("chat.update", 1, time.Minute)
	if err := a.EditPlan(ctx, th, ref, p); err != nil {
		t.Fatal(err)
	}
	var rl *chat.RateLimitError
	if err := a.EditPlan(ctx, th, ref, p); !errors.As(err, &rl) || rl.RetryAfter <= 0 {
		t.Errorf("429: %v", err)
	}
}

// TestErrorsClassifiedPerOperation: codes that mean "no pinning here" for
// pins.add mean "this reply can never be delivered" for chat.postMessage:
// a reply must not be retried as if a pin had failed.
func TestErrorsClassifiedPerOperation(t *testing.T) {
	ctx := context.Background()
	th := chat.Thread{Platform: "slack", Channel: "C1", ThreadID: "1.1"}
	p := chat.Plan{Revision: 1, Items: []todo.Item{{Content: "a", Status: todo.Pending}}}
	for _, code := range []string{"not_in_channel", "missing_scope", "access_denied"} {
		a, fake := testAdapter(t, false)
		fake.Fail("chat.postMessage", code)
		if err := a.Reply(ctx, th, "", "the answer"); !errors.Is(err, chat.ErrUndeliverable) || errors.Is(err, chat.ErrPinUnavailable) {
			t.Errorf("reply met with %s: %v, want undeliverable (not a pin problem)", code, err)
		}
		fake.Fail("chat.postMessage", code)
		if _, err := a.PostPlan(ctx, th, p); !errors.Is(err, chat.ErrUndeliverable) || errors.Is(err, chat.ErrPinUnavailable) {
			t.Errorf("plan post met with %s: %v, want undeliverable", code, err)
		}
		ref, err := a.PostPlan(ctx, th, p)
		if err != nil {
			t.Fatal(err)
		}
		fake.Fail("pins.add", code)
		if err := a.Pin(ctx, th, ref, true); !errors.Is(err, chat.ErrPinUnavailable) {
			t.Errorf("pin met with %s: %v, want pin unavailable", code, err)
		}
	}
}
