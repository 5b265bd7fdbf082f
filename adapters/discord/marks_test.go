package discord

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/inboxtest"
)

// TestGatewayMovesWithTheMarks: the gateway moves from one adapter to
// another (a replica hand-over, or a restart) that shares only the store.
// What was sent while neither listened, in the thread a task started and
// in its channel, is fetched by the second from the first's saved marks,
// once and in order, and nothing handled before runs again.
func TestGatewayMovesWithTheMarks(t *testing.T) {
	fake := &fakediscord.Server{HeartbeatInterval: time.Second}
	fake.AddChannel("C1", 0, "G1")
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	rec, dedupe, marks := &inboxtest.Inbox{}, &inboxtest.Dedupe{}, &inboxtest.Marks{}
	start := func() *Adapter {
		a, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", APIURL: srv.URL, ThreadPerTask: true, Handler: rec, Dedupe: dedupe, Marks: marks})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(func() { cancel(); a.Close() })
		if err := a.StartREST(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.OpenGateway(ctx); err != nil {
			t.Fatal(err)
		}
		waitGateway(t, fake, 1)
		return a
	}

	first := start()
	fake.UserMessage("C1", "111", "the task", true)
	waitTexts(t, rec, 1)
	thread := rec.Incoming()[0].Thread.Channel
	if thread == "C1" || thread == "" {
		t.Fatalf("the task went to %q, want a thread of its own", thread)
	}
	if marks.Saves() == 0 {
		t.Fatal("no marks saved before the task was handed on")
	}
	first.CloseGateway()
	waitGateway(t, fake, 0)
	fake.UserMessage(thread, "111", "in the thread meanwhile", false)
	fake.UserMessage("C1", "111", "another task meanwhile", true)

	start()
	fake.UserMessage(thread, "111", "after the move", false)
	waitTexts(t, rec, 4)
	time.Sleep(200 * time.Millisecond) // room for a repeat to show
	got := rec.Texts()
	want := []string{"the task", "in the thread meanwhile", "another task meanwhile", "after the move"}
	for _, w := range want {
		if n := count(got, w); n != 1 {
			t.Errorf("%q handled %d times, want once (%q)", w, n, got)
		}
	}
	// The thread's messages in order; the channel's are another queue.
	if i, j := slices.Index(got, "in the thread meanwhile"), slices.Index(got, "after the move"); i > j {
		t.Errorf("handled %q: the thread's messages out of order", got)
	}
	if fake.Missed() < 2 {
		t.Errorf("the fake delivered the messages sent meanwhile (missed %d): this test proves nothing", fake.Missed())
	}
}

func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// failingMarks refuses every save, as a store that is gone would.
type failingMarks struct{ saves atomic.Int32 }

func (*failingMarks) Marks(context.Context, string) ([]byte, error) { return nil, nil }
func (m *failingMarks) SaveMarks(context.Context, string, []byte) error {
	m.saves.Add(1)
	return errors.New("store closed")
}

// TestMarksSaveFailingDoesNotHoldClose: marks that cannot be saved are
// retried while the adapter runs and given up on shutdown: Close returns,
// and the handling of messages never waited on them.
func TestMarksSaveFailingDoesNotHoldClose(t *testing.T) {
	fake := &fakediscord.Server{HeartbeatInterval: time.Second}
	fake.AddChannel("T1", 11, "G1")
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	rec, marks := &inboxtest.Inbox{}, &failingMarks{}
	a, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", APIURL: srv.URL, Handler: rec, Dedupe: &inboxtest.Dedupe{}, Marks: marks})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	fake.UserMessage("T1", "111", "one", true)
	fake.UserMessage("T1", "111", "two", false)
	waitTexts(t, rec, 2)
	cancel()
	closed := make(chan struct{})
	go func() { a.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatalf("Close still waiting after 10 s, %d saves tried", marks.saves.Load())
	}
	if n := marks.saves.Load(); n < 2 || n > 10 {
		t.Errorf("%d saves tried, want the first mark's, a retry and the last on shutdown", n)
	}
}
