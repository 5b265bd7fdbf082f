package discord

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/inboxtest"
)

// sharedStore is one fake Discord and the store two processes share: a
// process is an adapter started with start, its gateway open.
type sharedStore struct {
	fake   *fakediscord.Server
	url    string
	dedupe *inboxtest.Dedupe
	marks  *inboxtest.Marks
}

func newSharedStore(t *testing.T, channels ...string) *sharedStore {
	t.Helper()
	fake := &fakediscord.Server{HeartbeatInterval: time.Second}
	for _, ch := range channels {
		typ := 0
		if strings.HasPrefix(ch, "T") {
			typ = 11
		}
		fake.AddChannel(ch, typ, "G1")
	}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	return &sharedStore{fake: fake, url: srv.URL, dedupe: &inboxtest.Dedupe{}, marks: &inboxtest.Marks{}}
}

func (s *sharedStore) start(t *testing.T, opts Options, in chat.Inbox) *Adapter {
	t.Helper()
	opts.Token, opts.APIURL = "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", s.url
	if opts.Marks == nil {
		opts.Marks = s.marks
	}
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); a.Close() })
	if err := a.Start(ctx, in); err != nil {
		t.Fatal(err)
	}
	waitGateway(t, s.fake, 1)
	return a
}

// TestGatewayMovesWithTheMarks: the gateway moves from one adapter to
// another (a replica hand-over, or a restart) that shares only the store.
// What was sent while neither listened, in the thread a task started and
// in its channel, is fetched by the second from the first's saved marks,
// once and in order, and nothing handled before runs again.
func TestGatewayMovesWithTheMarks(t *testing.T) {
	st := newSharedStore(t, "C1")
	fake, marks := st.fake, st.marks
	rec := &inboxtest.Inbox{}
	start := func() *Adapter { return st.start(t, Options{ThreadPerTask: true}, rec) }
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
	a, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", APIURL: srv.URL, Marks: marks})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.Start(ctx, rec); err != nil {
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

// stuckInbox never returns from its first Handle until released, as a
// process killed between taking a message in and queueing it; stuck is
// closed when it is there.
type stuckInbox struct {
	*inboxtest.Inbox
	once    sync.Once
	stuck   chan struct{}
	release chan struct{}
}

func (s *stuckInbox) Handle(ctx context.Context, in chat.Incoming) error {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.stuck)
		<-s.release
		return errors.New("killed")
	}
	return s.Inbox.Handle(ctx, in)
}

// TestDiedBeforeQueueingLosesNothing: the process that received a
// message dies after the adapter took it and before it was queued; the
// next one to hold the gateway, sharing the store, fetches it and hands
// it on: in a thread, and as a mention that starts a thread of its own
// (the next one finds the thread the first started, Discord's 160004).
// When the adapter recorded the message first, the next one took it for
// a repeat and dropped it.
func TestDiedBeforeQueueingLosesNothing(t *testing.T) {
	for _, tt := range []struct {
		name          string
		channel       string
		threadPerTask bool
	}{
		{"in a thread", "T1", false},
		{"a mention that starts a thread", "C1", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := newSharedStore(t, tt.channel)
			start := func(h chat.Inbox) *Adapter { return st.start(t, Options{ThreadPerTask: tt.threadPerTask}, h) }
			dying := &stuckInbox{Inbox: &inboxtest.Inbox{Events: st.dedupe}, stuck: make(chan struct{}), release: make(chan struct{})}
			first := start(dying)
			t.Cleanup(func() { close(dying.release) }) // before first's Close, which waits for it
			id := st.fake.UserMessage(tt.channel, "111", "the task", true)
			select {
			case <-dying.stuck:
			case <-time.After(10 * time.Second):
				t.Fatal("the message never reached the inbox")
			}
			first.CloseGateway()
			waitGateway(t, st.fake, 0)

			next := &inboxtest.Inbox{Events: st.dedupe}
			start(next)
			if got := waitTexts(t, next, 1); got[0] != "the task" {
				t.Errorf("handled %q, want the task", got)
			}
			want := tt.channel
			if tt.threadPerTask {
				want = id // the thread started from the message
			}
			if got := next.Incoming()[0].Thread.Channel; got != want {
				t.Errorf("handled in %s, want %s", got, want)
			}
		})
	}
}

// heardThenDown starts an adapter that hears "one" in channel T1 and then
// loses its gateway: what is sent next is missed until the next start.
func heardThenDown(t *testing.T) (*sharedStore, *inboxtest.Inbox) {
	t.Helper()
	st := newSharedStore(t, "T1")
	rec := &inboxtest.Inbox{}
	first := st.start(t, Options{}, rec)
	st.fake.UserMessage("T1", "111", "one", true)
	waitTexts(t, rec, 1)
	first.CloseGateway()
	waitGateway(t, st.fake, 0)
	return st, rec
}

// TestCatchUpRetriesAFailedFetch: the fetch of a channel's missed
// messages that Discord answers 500 is tried again, ahead of the
// channel's new messages, so none is skipped.
func TestCatchUpRetriesAFailedFetch(t *testing.T) {
	st, rec := heardThenDown(t)
	st.fake.UserMessage("T1", "111", "two", false)
	st.fake.FailHTTP("GET messages", 500, 2)
	st.start(t, Options{}, rec)
	st.fake.UserMessage("T1", "111", "three", false)
	got := waitTexts(t, rec, 3)
	if strings.Join(got, "|") != "one|two|three" {
		t.Errorf("handled %q, want one, two, three", got)
	}
}

// TestCatchUpThatFailsTellsTheChannel: when every try at fetching a
// channel's missed messages fails, the channel is told to ask again
// (through the router's Tell, which sends it), and its new messages are
// handled after that.
func TestCatchUpThatFailsTellsTheChannel(t *testing.T) {
	defer func(d time.Duration) { catchUpBackoff = d }(catchUpBackoff)
	catchUpBackoff = 10 * time.Millisecond
	st, rec := heardThenDown(t)
	st.fake.UserMessage("T1", "111", "lost in the gap", false)
	st.fake.FailHTTP("GET messages", 500, 2*catchUpTries) // discordgo may try each once more itself
	st.start(t, Options{}, rec)
	st.fake.UserMessage("T1", "111", "after", false)
	got := waitTexts(t, rec, 2)
	if strings.Join(got, "|") != "one|after" {
		t.Errorf("handled %q, want one and after", got)
	}
	told := 0
	for _, n := range rec.Notes() {
		if n.Thread.Channel == "T1" && n.Thread.Platform == "discord" && n.User == "" && n.Text == missedNotice {
			told++
		}
	}
	if told != 1 {
		t.Errorf("the channel was told %d times that messages were missed (%+v), want once", told, rec.Notes())
	}
}

// TestMarksToSave: which shards' records a save writes, and from when
// each says its shard's gap began. A shard held but not read yet (before
// its READY) is not written; a closed shard's record and a down shard's
// say the gap began when it went down, not at the save.
func TestMarksToSave(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	down := now.Add(-30 * time.Second)
	tests := []struct {
		name      string
		sh        shard
		written   bool
		wantSaved time.Time
	}{
		{"held and read", shard{on: true, loaded: true}, true, now},
		{"held, not read yet", shard{on: true}, false, time.Time{}},
		{"held, read, reconnecting", shard{on: true, loaded: true, downSince: down}, true, down},
		{"closed since the last save", shard{flush: true, downSince: down}, true, down},
		{"held elsewhere", shard{}, false, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sh := tt.sh
			a := &Adapter{shards: []*shard{&sh}, seen: map[string]seenChannel{"C1": {Last: "5", At: now}}}
			recs, _ := a.marksToSaveLocked(now)
			rec, ok := recs[marksName]
			if ok != tt.written {
				t.Fatalf("written %v, want %v", ok, tt.written)
			}
			if ok && (!rec.Saved.Equal(tt.wantSaved) || rec.Channels["C1"].Last != "5") {
				t.Errorf("record saved %s with %v, want saved %s with C1's mark", rec.Saved, rec.Channels, tt.wantSaved)
			}
		})
	}
}
