package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat/chattest"
	"github.com/pinplan/pinplan/todo"
)

func items(texts ...string) todo.Snapshot {
	var out []todo.Item
	for _, t := range texts {
		out = append(out, todo.Item{Content: t, Status: todo.Pending})
	}
	return todo.NewSnapshot(out)
}

func TestNewTaskAfterEndedRunGetsNewMessage(t *testing.T) {
	tests := []struct {
		name    string
		outcome agent.Outcome
		next    todo.Snapshot
		posts   int
	}{
		{"after stopped", agent.Stopped, items("write the release notes"), 2},
		{"after failed", agent.Failed, items("write the release notes"), 2},
		{"after round limit", agent.Limited, items("write the release notes"), 2},
		{"after done with open items", agent.Done, items("write the release notes"), 2},
		{"continuing after stopped", agent.Stopped, items("step 0", "step 1"), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakePlatform{}
			r := newTestRouter(t, p, &chattest.Boards{})
			observe(r, agent.Event{Session: "test/1", Kind: agent.TurnStarted})
			observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.InProgress, todo.Pending)})
			observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: tt.outcome, Plan: plan(1, todo.InProgress, todo.Pending)})
			settle(t, r, "test/1")
			ended := p.plan("m1")
			observe(r, agent.Event{Session: "test/1", Kind: agent.TurnStarted})
			observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 2, Plan: tt.next})
			settle(t, r, "test/1")
			if got := p.count("post"); got != tt.posts {
				t.Fatalf("got %d plan posts, want %d (calls %+v)", got, tt.posts, p.calls)
			}
			if tt.posts == 2 {
				if got := p.plan("m1"); got.Revision != ended.Revision || got.State != ended.State {
					t.Errorf("old plan message changed to rev %d %s, want rev %d %s", got.Revision, got.State, ended.Revision, ended.State)
				}
				if p.count("unpin") != 1 {
					t.Errorf("old plan message not unpinned: %+v", p.calls)
				}
				if got := p.plan("m2"); got.Revision != 2 || got.State != StateWorking {
					t.Errorf("new message shows rev %d %s, want 2 working", got.Revision, got.State)
				}
				// Each message its own key; nothing was ever in doubt.
				if len(p.posts) != 2 || p.posts[0].key == p.posts[1].key || p.posts[0].unsure || p.posts[1].unsure ||
					!strings.HasPrefix(p.posts[0].key, "plan/test/1/") || !strings.HasPrefix(p.posts[1].key, "plan/test/1/") {
					t.Errorf("posts carried %+v, want two keys of their own, neither in doubt", p.posts)
				}
			} else if got := p.plan("m1"); got.Revision != 2 || got.State != StateWorking {
				t.Errorf("continued plan shows rev %d %s, want 2 working", got.Revision, got.State)
			}
		})
	}
}

func TestRepostsAreBounded(t *testing.T) {
	p := &fakePlatform{pinErr: fmt.Errorf("pin: unknown message: %w", ErrMessageGone)}
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond})
	t.Cleanup(r.Close)
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.Pending)})
	settle(t, r, "test/1")
	if got := p.count("post"); got != 1+maxReposts {
		t.Errorf("got %d posts for one revision whose message keeps vanishing, want %d (%+v)", got, 1+maxReposts, p.calls)
	}
	if got := p.count("reply"); got != 1 {
		t.Errorf("got %d notices, want 1", got)
	}
}

func TestEditLaterBacksOffBeforeReposting(t *testing.T) {
	tests := []struct {
		name    string
		refused int // edits answered ErrEditLater before one succeeds
		posts   int
	}{
		{"temporary", 2, 1},
		{"persistent", 100, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			p := &fakePlatform{}
			p.editErr = func(n int) error {
				mu.Lock()
				defer mu.Unlock()
				if n <= tt.refused {
					return fmt.Errorf("discord: 30046: %w", ErrEditLater)
				}
				return nil
			}
			r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, EditLaterDelay: time.Millisecond})
			t.Cleanup(r.Close)
			r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
			observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.Pending)})
			settle(t, r, "test/1")
			observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 2, Plan: plan(2, todo.Completed)})
			settle(t, r, "test/1")
			if got := p.count("post"); got != tt.posts {
				t.Errorf("got %d posts, want %d (calls %+v)", got, tt.posts, p.calls)
			}
			if tt.posts == 1 {
				if got := p.count("edit-error"); got != tt.refused {
					t.Errorf("got %d refused edits, want %d", got, tt.refused)
				}
				if got := p.plan("m1"); got.Revision != 2 {
					t.Errorf("message shows revision %d, want 2", got.Revision)
				}
			} else if got := p.count("edit-error"); got != 1+maxEditLater {
				t.Errorf("got %d refused edits before reposting, want %d", got, 1+maxEditLater)
			}
		})
	}
}

var errTransient = errors.New("slack: reply: HTTP 500 Internal Server Error")

func TestReplyDeliveredAfterTransientErrors(t *testing.T) {
	p := &fakePlatform{replyErr: func(n int) error {
		if n <= 2 {
			return errTransient
		}
		return nil
	}}
	ob := &chattest.Outbox{}
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: ob})
	t.Cleanup(r.Close)
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Text: "the answer"})
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Text: "a second answer"})
	settle(t, r, "test/1")
	var got []string
	for _, c := range p.calls {
		if c.Op == "reply" {
			got = append(got, c.Text)
		}
	}
	if len(got) != 2 || got[0] != "the answer" || got[1] != "a second answer" {
		t.Errorf("delivered %q, want both answers once, in order", got)
	}
	if ob.Len() != 0 {
		t.Errorf("%d items left in the outbox after delivery", ob.Len())
	}
}

// TestRetryAsksWhetherAnEarlierAttemptLanded: every attempt at a reply
// carries the same key; an attempt after a 429 is sure nothing landed,
// one after any other failure is not, and stays unsure.
func TestRetryAsksWhetherAnEarlierAttemptLanded(t *testing.T) {
	p := &fakePlatform{replyErr: func(n int) error {
		switch n {
		case 1:
			return &RateLimitError{RetryAfter: time.Millisecond, Err: errors.New("429")}
		case 2, 3:
			return errTransient
		}
		return nil
	}}
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: &chattest.Outbox{}})
	t.Cleanup(r.Close)
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Text: "the answer"})
	settle(t, r, "test/1")
	p.mu.Lock()
	defer p.mu.Unlock()
	var unsure []bool
	for _, s := range p.sends {
		unsure = append(unsure, s.unsure)
		if s.key == "" || s.key != p.sends[0].key || s.queued.IsZero() {
			t.Errorf("attempt carried key %q stored at %v, want the first attempt's key %q and a time", s.key, s.queued, p.sends[0].key)
		}
	}
	if want := []bool{false, false, true, true}; !slices.Equal(unsure, want) {
		t.Errorf("SentMaybe per attempt %v, want %v", unsure, want)
	}
}

func TestUndeliverableReplyIsReported(t *testing.T) {
	p := &fakePlatform{replyErr: func(int) error { return fmt.Errorf("discord: 10003 unknown channel: %w", ErrUndeliverable) }}
	var mu sync.Mutex
	var undelivered []string
	hooks := &Hooks{Undelivered: func(_ Thread, text string, _ error) {
		mu.Lock()
		undelivered = append(undelivered, text)
		mu.Unlock()
	}}
	ob := &chattest.Outbox{}
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond, Outbox: ob, Hooks: hooks})
	t.Cleanup(r.Close)
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Text: "lost answer"})
	settle(t, r, "test/1")
	mu.Lock()
	defer mu.Unlock()
	if len(undelivered) != 1 || undelivered[0] != "lost answer" {
		t.Errorf("undelivered hook saw %q, want the answer once", undelivered)
	}
	// The answer once, then the thread is told once (the note, refused
	// here too, is not tried again).
	p.mu.Lock()
	var texts []string
	for _, c := range p.calls {
		if c.Op == "reply-error" {
			texts = append(texts, c.Text)
		}
	}
	p.mu.Unlock()
	if len(texts) != 2 || texts[0] != "lost answer" || !strings.Contains(texts[1], "could not be delivered") {
		t.Errorf("replies tried: %q; want the answer once, then one note", texts)
	}
	if ob.Len() != 0 {
		t.Errorf("undeliverable reply left in the outbox")
	}
}

func TestOutboxSurvivesRestart(t *testing.T) {
	down := &fakePlatform{replyErr: func(int) error { return errTransient }}
	ob := &chattest.Outbox{}
	boards := &chattest.Boards{}
	r := NewRouter(Options{Store: boards, Platforms: map[string]Platform{"test": down}, RetryDelay: time.Hour, Outbox: ob})
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Text: "kept answer"})
	deadline := time.Now().Add(5 * time.Second)
	for down.count("reply-error") == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	r.Close()
	if ob.Len() != 1 {
		t.Fatalf("%d items stored after a failed delivery and shutdown, want 1", ob.Len())
	}
	up := &fakePlatform{}
	r2 := NewRouter(Options{Store: boards, Platforms: map[string]Platform{"test": up}, Outbox: ob})
	t.Cleanup(r2.Close)
	if n, err := r2.Resume(t.Context()); err != nil || n != 1 {
		t.Fatalf("Resume = %d, %v; want 1 reply", n, err)
	}
	settle(t, r2, "test/1")
	if up.count("reply") != 1 || ob.Len() != 0 {
		t.Errorf("after restart: %d replies, %d stored; want 1 and 0", up.count("reply"), ob.Len())
	}
	if len(up.sends) != 1 || !up.sends[0].unsure {
		t.Errorf("the reply stored before the restart was sent as %+v, want it marked as maybe sent", up.sends)
	}
}

func TestWorkingIndicatorClearedWhereItWasSet(t *testing.T) {
	p := &fakePlatform{}
	r := newTestRouter(t, p, &chattest.Boards{})
	r.out.board("test/1", nil)
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnStarted, Trigger: "msg-1"})
	settleStatuses(t, r, "test/1") // shown before the turn ends
	// A message that came during the turn (msg-2) is not the turn's:
	// its end carries the message it began on, as every entry of it.
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Trigger: "msg-1"})
	settleStatuses(t, r, "test/1")
	var on, off []string
	for _, c := range p.calls {
		switch c.Op {
		case "working-true":
			on = append(on, c.Ref)
		case "working-false":
			off = append(off, c.Ref)
		}
	}
	if len(on) != 1 || len(off) != 1 || on[0] != "msg-1" || off[0] != "msg-1" {
		t.Errorf("indicator set on %q and cleared on %q, want msg-1 both", on, off)
	}
}

// failingEdits refuses every edit, as a platform outage would.
type failingEdits struct{ fakePlatform }

func (p *failingEdits) Caps() Caps { return testCaps(p) }

func (f *failingEdits) EditPlan(context.Context, Thread, MessageRef, Plan) error {
	return errTransient
}

func TestUnfinishedPlanEditResumedAfterRestart(t *testing.T) {
	boards, logs := &chattest.Boards{}, &chattest.Log{}
	down := &failingEdits{}
	r := NewRouter(Options{Store: boards, Log: logs, Platforms: map[string]Platform{"test": down}, RetryDelay: time.Millisecond})
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, logs.Append("test/1", agent.Event{Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.InProgress)}))
	r.out.board("test/1", nil).Wait()
	observe(r, logs.Append("test/1", agent.Event{Kind: agent.TurnEnded, Outcome: agent.Done, Plan: plan(1, todo.InProgress)}))
	r.out.board("test/1", nil).Wait()
	r.Close()

	// The final state is not stored with the board: it is folded from
	// the log's entries again.
	up := &fakePlatform{}
	up.next, up.shown = 1, map[string]Plan{"m1": {}} // the message m1 exists
	r2 := NewRouter(Options{Store: boards, Log: logs, Platforms: map[string]Platform{"test": up}})
	t.Cleanup(r2.Close)
	if _, err := r2.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	settle(t, r2, "test/1")
	if up.count("edit") != 1 || up.count("post") != 0 {
		t.Fatalf("after restart: calls %+v, want one edit of the same message", up.calls)
	}
	if got := up.plan("m1"); got.State != StateDone {
		t.Errorf("m1 shows %q after the restart, want done", got.State)
	}
}

func TestEvictDropsOnlyIdleBoards(t *testing.T) {
	p := &fakePlatform{}
	other := &forgetful{}
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p, "other": other}})
	t.Cleanup(r.Close)
	for _, key := range []string{"test/idle", "test/busy"} {
		r.out.board(key, &Thread{Platform: "test", Key: key, Channel: "C1"})
		observe(r, agent.Event{Session: key, Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.Pending)})
		settle(t, r, key)
	}
	observe(r, agent.Event{Session: "test/idle", Kind: agent.TurnEnded, Outcome: agent.Done})
	settle(t, r, "test/idle")
	observe(r, agent.Event{Session: "test/busy", Kind: agent.TurnStarted})
	settle(t, r, "test/busy")
	if n := r.Evict(0); n != 1 {
		t.Fatalf("evicted %d boards, want the idle one", n)
	}
	r.out.mu.Lock()
	_, idle := r.out.sessions["test/idle"]
	_, busy := r.out.sessions["test/busy"]
	r.out.mu.Unlock()
	if idle || !busy {
		t.Errorf("after Evict: idle kept %t, busy kept %t", idle, busy)
	}
	// Every platform that keeps state per thread is told, not only the
	// session's own (the console mirrors the others').
	if !slices.Equal(other.forgot, []string{"test/idle"}) {
		t.Errorf("another platform was told to forget %q, want only the idle session", other.forgot)
	}
	// Listing its cards reads the store and leaves it evicted.
	if cards := r.Cards("test/idle"); len(cards) != 0 {
		t.Errorf("cards %+v, want none", cards)
	}
	r.out.mu.Lock()
	_, idle = r.out.sessions["test/idle"]
	r.out.mu.Unlock()
	if idle {
		t.Error("Cards brought the evicted session back into memory")
	}
	// An evicted board loads again from the store, with its message.
	if _, ref := r.out.board("test/idle", nil).Shown(); ref.IsZero() {
		t.Error("the evicted board lost its plan message")
	}
}

// TestDeletedTellsThePlatforms checks that a session deleted from the
// store (retention) while its board is still in memory is forgotten by
// every platform, as an eviction would: Evict never sees it again, so
// what the platforms keep of it (Slack's authors, Discord's channel
// pace, the console's view) would otherwise stay for good.
func TestDeletedTellsThePlatforms(t *testing.T) {
	p := &forgetful{}
	other := &forgetful{}
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p, "other": other}})
	t.Cleanup(r.Close)
	for _, key := range []string{"test/gone", "test/back"} {
		r.out.board(key, &Thread{Platform: "test", Key: key, Channel: "C1"})
		observe(r, agent.Event{Session: key, Kind: agent.TurnEnded, Outcome: agent.Done})
		settle(t, r, key)
	}
	since := time.Now()
	// A message came for test/back after its records went: its new turn
	// runs on the board in memory, which stays.
	observe(r, agent.Event{Session: "test/back", Kind: agent.TurnStarted})
	settle(t, r, "test/back")
	r.Deleted("test/gone", since)
	r.Deleted("test/back", since)
	r.Deleted("test/never-loaded", since) // not in memory: nothing to tell
	if !slices.Equal(p.forgot, []string{"test/gone"}) || !slices.Equal(other.forgot, []string{"test/gone"}) {
		t.Errorf("platforms told to forget %q and %q, want the deleted idle session on both", p.forgot, other.forgot)
	}
	r.out.mu.Lock()
	_, gone := r.out.sessions["test/gone"]
	_, back := r.out.sessions["test/back"]
	r.out.mu.Unlock()
	if gone || !back {
		t.Errorf("after Deleted: the idle one kept %t, the one in use again kept %t", gone, back)
	}
}

// TestDeletedSessionInUseStartsItsLogAfresh: retention deleted a
// session's records (its log and cursor with them) and a message came
// for its thread before the router heard of it, so the session stays in
// memory and its new turn's log is numbered from 1 again. The deliverer
// must not take those entries for ones it applied already: the new
// plan and the new answer reach the thread.
func TestDeletedSessionInUseStartsItsLogAfresh(t *testing.T) {
	logs, p := &chattest.Log{}, &fakePlatform{}
	r := NewRouter(Options{Runner: &chattest.Runner{}, Store: &chattest.Boards{}, Log: logs, Platforms: map[string]Platform{"test": p}})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	r.out.board(th.Key, &th)
	observe(r, logs.Append(th.Key, agent.Event{Kind: agent.TurnStarted, Turn: 1}))
	observe(r, logs.Append(th.Key, agent.Event{Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.Completed)}))
	observe(r, logs.Append(th.Key, agent.Event{Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done, Text: "the first answer"}))
	settle(t, r, th.Key)

	since := time.Now()
	logs.Delete(th.Key) // retention
	if err := r.Handle(t.Context(), Incoming{Thread: th, Text: "one more thing", Author: "Ann", AuthorID: "U1", MessageID: "2"}); err != nil {
		t.Fatal(err)
	}
	observe(r, logs.Append(th.Key, agent.Event{Kind: agent.TurnStarted, Turn: 1}))
	r.Deleted(th.Key, since) // in use again: kept
	observe(r, logs.Append(th.Key, agent.Event{Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done, Text: "the second answer"}))
	settle(t, r, th.Key)
	if n := p.count("reply"); n != 2 {
		t.Errorf("%d replies, want both answers", n)
	}
	if n, _ := logs.Delivered(t.Context(), th.Key); n != 2 {
		t.Errorf("cursor at %d, want 2 (the new log's end)", n)
	}
}

// TestEvictKeepsAnAnswerWaitingForItsCursor: an answer waiting for its
// cursor's save (which failed once) keeps its session in memory until it
// is sent: evicted, the retry would find the session gone and the answer
// would wait for the next start.
func TestEvictKeepsAnAnswerWaitingForItsCursor(t *testing.T) {
	logs, p := &flakyLog{l: &chattest.Log{}}, &fakePlatform{}
	r := NewRouter(Options{Store: &chattest.Boards{}, Outbox: &chattest.Outbox{}, Log: logs, Platforms: map[string]Platform{"test": p}, RetryDelay: 300 * time.Millisecond})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	r.out.board(th.Key, &th)
	observe(r, logs.l.Append(th.Key, agent.Event{Kind: agent.TurnStarted, Turn: 1}))
	logs.failSaves.Store(1)
	observe(r, logs.l.Append(th.Key, agent.Event{Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done, Text: "the answer"}))
	settle(t, r, th.Key)
	if n := r.Evict(0); n != 0 {
		t.Errorf("evicted %d sessions with an answer waiting for its cursor, want 0", n)
	}
	waitFor(t, "answer once the cursor was saved", func() bool { return p.count("reply") > 0 })
	settle(t, r, th.Key)
	if n := r.Evict(0); n != 1 {
		t.Errorf("evicted %d sessions once the answer was sent, want 1", n)
	}
}

// forgetful is a platform that records what it is told to forget.
type forgetful struct {
	fakePlatform
	forgot []string
}

func (p *forgetful) Caps() Caps { return testCaps(p) }

func (f *forgetful) Forget(th Thread) { f.forgot = append(f.forgot, th.Key) }

func TestConcurrentRepliesDeliveredOnce(t *testing.T) {
	p := &fakePlatform{}
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	r.out.board("test/1", &th)
	// A reply that arrives just as the queue empties must not start a
	// second delivery goroutine for the same session.
	var once sync.Once
	r.out.outbox.afterPop = func() { once.Do(func() { r.out.outbox.add(th, "", "just after") }) }
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.out.outbox.add(th, "", fmt.Sprintf("reply %d", i))
		}()
		if i%3 == 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	wg.Wait()
	settle(t, r, "test/1")
	seen := map[string]int{}
	for _, c := range p.calls {
		if c.Op == "reply" {
			seen[c.Text]++
		}
	}
	if len(seen) != 201 {
		t.Errorf("%d distinct replies delivered, want 201", len(seen))
	}
	for text, n := range seen {
		if n != 1 {
			t.Errorf("%q delivered %d times", text, n)
		}
	}
}

// savedBoard stores rec as the record a killed process left for its
// session, indexed as a board with work left, and when want is set the
// log entries its content is folded from (DESIGN §1): a turn started,
// its plan, and for a finished state the turn's end, the cursor stored
// past them.
func savedBoard(t *testing.T, boards *chattest.Boards, logs *chattest.Log, rec boardRecord, want *Plan) {
	t.Helper()
	raw, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	key := rec.Thread.Key
	if err := boards.SaveBoard(context.Background(), key, raw, true); err != nil {
		t.Fatal(err)
	}
	if want == nil {
		return
	}
	logs.Append(key, agent.Event{Kind: agent.TurnStarted, Turn: 1})
	last := logs.Append(key, agent.Event{Kind: agent.PlanChanged, Turn: 1, Revision: want.Revision, Plan: todo.NewSnapshot(want.Items)})
	for _, o := range []agent.Outcome{agent.Done, agent.Failed, agent.Stopped, agent.Limited, agent.TurnBudget, agent.DayBudget} {
		if StateOf(o) == want.State {
			last = logs.Append(key, agent.Event{Kind: agent.TurnEnded, Turn: 1, Outcome: o})
		}
	}
	if err := logs.SaveDelivered(context.Background(), key, last.Seq); err != nil {
		t.Fatal(err)
	}
}

// TestUnpostedPlanPostedAfterRestart: a plan whose first post was still
// waiting for the platform's pace when the process died (the record has a
// wanted plan and no message ref) is posted and pinned once after the
// restart, on its newest content.
func TestUnpostedPlanPostedAfterRestart(t *testing.T) {
	boards, logs := &chattest.Boards{}, &chattest.Log{}
	want := Plan{Items: plan(3, todo.Completed).Items(), Revision: 3, State: StateDone}
	savedBoard(t, boards, logs, boardRecord{Thread: Thread{Platform: "test", Key: "test/1", Channel: "C1"}}, &want)

	up := &fakePlatform{}
	r := NewRouter(Options{Store: boards, Log: logs, Platforms: map[string]Platform{"test": up}})
	t.Cleanup(r.Close)
	if _, err := r.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	settle(t, r, "test/1")
	if up.count("post") != 1 || up.count("pin") != 1 || up.count("edit") != 0 {
		t.Fatalf("after restart: calls %+v, want one post and one pin", up.calls)
	}
	if got := up.plan("m1"); got.Revision != 3 || got.State != StateDone {
		t.Errorf("m1 shows revision %d %q, want 3 done", got.Revision, got.State)
	}

	// A second restart finds the ref stored: nothing more is posted.
	r.Close()
	r2 := NewRouter(Options{Store: boards, Log: logs, Platforms: map[string]Platform{"test": up}})
	t.Cleanup(r2.Close)
	if _, err := r2.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	settle(t, r2, "test/1")
	if up.count("post") != 1 || up.count("pin") != 1 {
		t.Fatalf("after the second restart: calls %+v, still want one post and one pin", up.calls)
	}
}

// TestPostWithoutStoredRefIsRepeated: the platform accepted the post but
// the process died before the ref was stored. The record still has no
// ref, so the restart posts again, with the same key and marked as maybe
// posted, so that a platform that can find the first copy (Slack, by its
// metadata) returns it; one that cannot (this fake) posts a second
// message. The first copy stays in the thread unpinned (it was never
// pinned, since the pin follows the stored ref), and only the new one is
// pinned and edited from then on.
func TestPostWithoutStoredRefIsRepeated(t *testing.T) {
	boards, logs := &chattest.Boards{}, &chattest.Log{}
	want := Plan{Items: plan(1, todo.InProgress).Items(), Revision: 1, State: StateWorking}
	began := time.Date(2026, 12, 1, 9, 0, 0, 123, time.UTC) // the killed process's attempt
	savedBoard(t, boards, logs, boardRecord{Thread: Thread{Platform: "test", Key: "test/1", Channel: "C1"}, Posting: &began}, &want)
	up := &fakePlatform{}
	up.next, up.shown = 1, map[string]Plan{"m1": want} // posted, ref lost
	r := NewRouter(Options{Store: boards, Log: logs, Platforms: map[string]Platform{"test": up}})
	t.Cleanup(r.Close)
	if _, err := r.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	settle(t, r, "test/1")
	if up.count("post") != 1 || up.count("pin") != 1 {
		t.Fatalf("calls %+v, want one new post, pinned", up.calls)
	}
	if _, ref := r.out.board("test/1", nil).Shown(); ref.ID != "m2" {
		t.Errorf("the board works on %q, want the new message m2", ref.ID)
	}
	if up.count("edit") != 1 || up.plan("m2").Revision != 1 {
		t.Errorf("calls %+v: a message posted in doubt (perhaps an earlier one, showing what that attempt sent) is edited to the plan once", up.calls)
	}
	var ops []string
	for _, c := range up.calls {
		ops = append(ops, c.Op)
	}
	// The ref is stored before any edit; the edit goes before the pin, as
	// for any plan that moved on while it was posted, so that the pin
	// budget (the shortest) never holds a plan on an old revision.
	if got := strings.Join(ops, ","); got != "post,edit,pin" {
		t.Errorf("calls %s, want post,edit,pin", got)
	}
	if wantKey := fmt.Sprintf("plan/test/1/%d", began.UnixNano()); len(up.posts) != 1 || up.posts[0].key != wantKey || !up.posts[0].unsure {
		t.Errorf("the post carried %+v, want key %s marked as maybe posted", up.posts, wantKey)
	}
	if rec, _ := r.out.board("test/1", nil).state(); rec.Posting != nil {
		t.Errorf("the record still says a post is under way after its ref was stored")
	}
}

// TestPostedUnpinnedPlanPinnedAfterRestart: the process died after the
// plan was posted (its ref and content stored) but before the pin. The
// message shows what is wanted, and still the restart pins it; an
// earlier message left to unpin is unpinned too.
func TestPostedUnpinnedPlanPinnedAfterRestart(t *testing.T) {
	boards := &chattest.Boards{}
	want := Plan{Items: plan(3, todo.Completed).Items(), Revision: 3, State: StateDone}
	ref := MessageRef{Channel: "C1", ID: "m1"}
	savedBoard(t, boards, nil, boardRecord{Thread: Thread{Platform: "test", Key: "test/1", Channel: "C1"}, Ref: ref, Shown: want, Unpin: []MessageRef{{Channel: "C1", ID: "m0"}}}, nil)
	up := &fakePlatform{}
	up.next, up.shown = 1, map[string]Plan{"m1": want}
	r := NewRouter(Options{Store: boards, Platforms: map[string]Platform{"test": up}})
	t.Cleanup(r.Close)
	if _, err := r.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	settle(t, r, "test/1")
	if up.count("pin") != 1 || up.count("unpin") != 1 || up.count("post") != 0 || up.count("edit") != 0 {
		t.Fatalf("after restart: calls %+v, want the plan pinned and the old one unpinned, nothing posted or edited", up.calls)
	}
}

// fenceAfter is a Fence that lets n requests go, then answers fenced, as
// a replica's does once its lease is gone.
type fenceAfter struct {
	mu sync.Mutex
	n  int
}

func (f *fenceAfter) Held(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n <= 0 {
		return fmt.Errorf("%w: test", agent.ErrFenced)
	}
	f.n--
	return nil
}

// TestFencedBoardSendsNothingMore: a board with earlier messages to
// restore and unpin and a plan to post asks the fence before each
// request; once it answers fenced, nothing more goes to the platform, and
// the reply is left stored for the session's holder.
func TestFencedBoardSendsNothingMore(t *testing.T) {
	boards, logs := &chattest.Boards{}, &chattest.Log{}
	want := Plan{Items: plan(2, todo.InProgress).Items(), Revision: 2, State: StateWorking}
	old := Plan{Items: plan(1, todo.Completed).Items(), Revision: 1, State: StateDone}
	rec := boardRecord{Thread: Thread{Platform: "test", Key: "test/1", Channel: "C1"},
		Restore: []restoreEdit{{Ref: MessageRef{Channel: "C1", ID: "m0"}, Plan: old}}, Unpin: []MessageRef{{Channel: "C1", ID: "m0"}}}
	savedBoard(t, boards, logs, rec, &want)
	up := &fakePlatform{}
	up.next, up.shown = 1, map[string]Plan{"m0": old}
	fence := &fenceAfter{n: 1}
	out := &chattest.Outbox{}
	r := NewRouter(Options{Store: boards, Outbox: out, Log: logs, Platforms: map[string]Platform{"test": up}, Fence: fence})
	t.Cleanup(r.Close)
	if _, err := r.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	settle(t, r, "test/1")
	if n := len(up.calls); n != 1 {
		t.Fatalf("calls %+v: want only the one request made while the fence held", up.calls)
	}
	r.out.outbox.add(Thread{Platform: "test", Key: "test/1", Channel: "C1"}, "", "late reply")
	settle(t, r, "test/1")
	if n := len(up.calls); n != 1 {
		t.Errorf("a reply went out after the fence: calls %+v", up.calls)
	}
	left := 0
	out.Outbox(context.Background(), func(uint64, []byte) { left++ })
	if left != 1 {
		t.Errorf("%d replies stored, want the fenced one kept for the holder", left)
	}
}

// TestResetThenNewPlanPostsItsOwnMessage: a session read back from the
// store with a plan post in doubt (its first attempt noted, no ref) is
// reset, and the next task's plan gets a message of its own: posted under
// a key of its own, with no doubt that an earlier attempt posted it, so
// no platform looks for (and reuses) the message of the old session.
func TestResetThenNewPlanPostsItsOwnMessage(t *testing.T) {
	boards, logs := &chattest.Boards{}, &chattest.Log{}
	shown := Plan{Items: plan(1, todo.Completed).Items(), Revision: 1, State: StateDone}
	began := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	savedBoard(t, boards, logs, boardRecord{Thread: Thread{Platform: "test", Key: "test/1", Channel: "C1"}, Posting: &began}, &shown)
	p := &fakePlatform{next: 1, shown: map[string]Plan{"m1": shown}}
	r := NewRouter(Options{Store: boards, Log: logs, Platforms: map[string]Platform{"test": p}})
	t.Cleanup(r.Close)
	r.out.board("test/1", nil).reset(3)
	settle(t, r, "test/1")
	observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 1, Plan: items("a new task")})
	settle(t, r, "test/1")
	old := fmt.Sprintf("plan/test/1/%d", began.UnixNano())
	if len(p.posts) != 1 || p.posts[0].unsure || p.posts[0].key == "" || p.posts[0].key == old {
		t.Fatalf("posts carried %+v, want one post under a new key (not %s), in no doubt", p.posts, old)
	}
	if got := p.plan("m1"); got.Revision != 1 || got.State != StateDone {
		t.Errorf("the archived message now shows rev %d %s, want its own plan", got.Revision, got.State)
	}
	if _, ref := r.out.board("test/1", nil).Shown(); ref.ID != "m2" {
		t.Errorf("the board works on %q, want the new message m2", ref.ID)
	}
}

// TestPostingNotedBeforeThePost: the board stores when it began posting
// a plan message before the platform sees the post, and clears it with
// the ref. A failed attempt leaves the next one in doubt, under the same
// key: even a 429, which a client may have met on its own second try
// after a 5xx.
func TestPostingNotedBeforeThePost(t *testing.T) {
	for _, tt := range []struct {
		name   string
		first  error
		unsure bool
	}{
		{"after a 500", errTransient, true},
		{"after a 429", &RateLimitError{RetryAfter: time.Millisecond, Err: errors.New("429")}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			boards := &chattest.Boards{}
			var noted []bool
			p := &fakePlatform{postErr: func(n int) error {
				if n == 1 {
					return tt.first
				}
				return nil
			}}
			p.hold = func(op string) {
				if op != "post" {
					return
				}
				raw, _ := boards.Board(context.Background(), "test/1")
				var rec boardRecord
				json.Unmarshal(raw, &rec)
				noted = append(noted, rec.Posting != nil)
			}
			r := NewRouter(Options{Store: boards, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond})
			t.Cleanup(r.Close)
			r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
			observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.Pending)})
			settle(t, r, "test/1")
			if len(noted) != 2 || !noted[0] || !noted[1] {
				t.Errorf("the record noted the post before each attempt: %v, want [true true]", noted)
			}
			if len(p.posts) != 2 || p.posts[1].unsure != tt.unsure {
				t.Fatalf("posts %+v, want the second in doubt: %t", p.posts, tt.unsure)
			}
			if p.posts[0].key != p.posts[1].key {
				t.Errorf("keys %q then %q, want the same message's key", p.posts[0].key, p.posts[1].key)
			}
			if rec, _ := r.out.board("test/1", nil).state(); rec.Posting != nil || rec.Ref.IsZero() {
				t.Errorf("after the post: posting %v, ref %v; want cleared and stored", rec.Posting, rec.Ref)
			}
		})
	}
}

// TestDeliveryGoesOnFromTheCursor: the agent committed a turn's end (an
// entry of the session's log) and the process died before the deliverer
// applied it, so the plan message shows the turn working, with Stop. The
// next start goes on from the session's cursor: the message says done
// without Stop, and the answer is posted once, whether or not it was
// stored before the kill, and never before the cursor passed its entry.
// A later turn's start logged after that end leaves the message working.
func TestDeliveryGoesOnFromTheCursor(t *testing.T) {
	for _, tc := range []struct {
		name        string
		storedFirst bool // the kill came after the answer was stored
		unlisted    bool // the outbox cannot be read back: nothing is resumed
		takeover    bool // another replica takes the session (ResumeSession)
		laterTurn   bool // the log goes on with the next turn's start
		left        int  // replies still stored at the end
		want        PlanState
		replies     int
	}{
		{name: "answer not stored", want: StateDone, replies: 1},
		{name: "answer stored", storedFirst: true, want: StateDone, replies: 1},
		{name: "a later turn began", laterTurn: true, want: StateWorking, replies: 1},
		{name: "outbox unreadable", unlisted: true, want: StateWorking},
		{name: "outbox unreadable, answer stored", storedFirst: true, unlisted: true, want: StateWorking, left: 1},
		{name: "taken over by a replica", takeover: true, want: StateDone, replies: 1},
		{name: "taken over, answer stored", takeover: true, storedFirst: true, want: StateDone, replies: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			boards, ob, logs, p := &chattest.Boards{}, &chattest.Outbox{}, &chattest.Log{}, &fakePlatform{}
			th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
			r := NewRouter(Options{Store: boards, Outbox: ob, Log: logs, Platforms: map[string]Platform{"test": p}})
			r.out.board(th.Key, &th)
			observe(r, logs.Append(th.Key, agent.Event{Kind: agent.TurnStarted, Turn: 2}))
			observe(r, logs.Append(th.Key, agent.Event{Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.Completed)}))
			end := logs.Append(th.Key, agent.Event{Kind: agent.TurnEnded, Turn: 2, Outcome: agent.Done, Text: "the answer", Plan: plan(1, todo.Completed), Revision: 1})
			if tc.laterTurn {
				logs.Append(th.Key, agent.Event{Kind: agent.TurnStarted, Turn: 3})
			}
			settle(t, r, th.Key)
			if tc.storedFirst {
				r.out.outbox.hold(th, "", "the answer", 2, end.Seq)
			}
			r.Close() // the kill: the turn's end was committed, never delivered
			if got := p.plan("m1"); got.State != StateWorking || !got.Stoppable {
				t.Fatalf("before the restart m1 shows %q (stoppable %v), want working with Stop", got.State, got.Stoppable)
			}

			// A reply sent before the cursor passed its entry could be
			// stored and sent again after a second kill.
			var early atomic.Bool
			p.replyErr = func(int) error {
				if n, _ := logs.Delivered(t.Context(), th.Key); n < end.Seq {
					early.Store(true)
				}
				return nil
			}
			var store OutboxStore = ob
			if tc.unlisted {
				store = unlistable{ob}
			}
			for restart := range 2 { // the second finds nothing left to do
				r := NewRouter(Options{Runner: &chattest.Runner{}, Store: boards, Outbox: store, Log: logs, Platforms: map[string]Platform{"test": p}})
				if tc.takeover {
					r.ResumeSession(t.Context(), th.Key)
				} else if _, err := r.Resume(t.Context()); (err != nil) != tc.unlisted {
					t.Fatalf("Resume: %v", err)
				}
				settle(t, r, th.Key)
				r.Close()
				if got := p.plan("m1"); got.State != tc.want || got.Stoppable != (tc.want == StateWorking) {
					t.Errorf("restart %d: m1 shows %q (stoppable %v), want %q", restart+1, got.State, got.Stoppable, tc.want)
				}
				if n := p.count("reply"); n != tc.replies {
					t.Errorf("restart %d: %d replies, want %d", restart+1, n, tc.replies)
				}
			}
			if ob.Len() != tc.left {
				t.Errorf("%d replies left in the outbox, want %d", ob.Len(), tc.left)
			}
			if early.Load() {
				t.Error("a reply was sent before the delivery cursor passed its entry")
			}
		})
	}
}

// TestDeliveryReadsWhatItMissed: an event published with a number past
// the cursor's next (entries committed while another process held the
// session) makes the deliverer read the entries in between from the log
// first, in order, and none twice.
func TestDeliveryReadsWhatItMissed(t *testing.T) {
	logs, p := &chattest.Log{}, &fakePlatform{}
	r := NewRouter(Options{Store: &chattest.Boards{}, Log: logs, Platforms: map[string]Platform{"test": p}})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	r.out.board(th.Key, &th)
	observe(r, logs.Append(th.Key, agent.Event{Kind: agent.TurnStarted, Turn: 1}))
	logs.Append(th.Key, agent.Event{Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.InProgress)})
	logs.Append(th.Key, agent.Event{Kind: agent.PlanChanged, Revision: 2, Plan: plan(2, todo.Completed)})
	end := logs.Append(th.Key, agent.Event{Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done, Text: "the answer"})
	observe(r, end)
	observe(r, end) // published twice: applied once
	settle(t, r, th.Key)
	if got := p.plan("m1"); got.Revision != 2 || got.State != StateDone {
		t.Errorf("m1 shows revision %d %q, want revision 2 done", got.Revision, got.State)
	}
	if n := p.count("reply"); n != 1 {
		t.Errorf("%d replies, want 1", n)
	}
	if n, _ := logs.Delivered(t.Context(), th.Key); n != end.Seq {
		t.Errorf("cursor at %d, want %d", n, end.Seq)
	}
}

// unlistable is an outbox whose items cannot be read back.
type unlistable struct{ ob *chattest.Outbox }

func (u unlistable) AddOutbox(ctx context.Context, key string, items [][]byte) ([]uint64, error) {
	return u.ob.AddOutbox(ctx, key, items)
}

func (u unlistable) DeleteOutbox(ctx context.Context, key string, id uint64) error {
	return u.ob.DeleteOutbox(ctx, key, id)
}

// Outbox lists what it holds, then fails, as a read cut off after its
// first page would.
func (u unlistable) Outbox(ctx context.Context, f func(uint64, []byte)) error {
	if err := u.ob.Outbox(ctx, f); err != nil {
		return err
	}
	return errors.New("outbox read cut off")
}

// OutboxOf is Outbox, cut off alike.
func (u unlistable) OutboxOf(ctx context.Context, _ string, f func(uint64, []byte)) error {
	return u.Outbox(ctx, f)
}

// holdingBoards holds the first board save after hold is armed until
// release is closed.
type holdingBoards struct {
	chattest.Boards
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
}

func (h *holdingBoards) SaveBoard(ctx context.Context, key string, data []byte, pending bool) error {
	if h.armed.CompareAndSwap(true, false) {
		close(h.held)
		<-h.release
	}
	return h.Boards.SaveBoard(ctx, key, data, pending)
}

// TestReplyWaitsForTheTurnsEndToBeSaved: a turn's answer is stored before
// the board records the turn's end and sent only after that record is
// saved, so an answer in the thread means a restart finds the end
// recorded (TestDeliveryGoesOnFromTheCursor covers a kill before it).
// Sending it first left the plan on "working" with its Stop button for
// good when kill -9 came between the two (cmd/bot
// TestSlackQueuedPlansSurviveKill, under load).
func TestReplyWaitsForTheTurnsEndToBeSaved(t *testing.T) {
	boards := &holdingBoards{held: make(chan struct{}), release: make(chan struct{})}
	ob, p := &chattest.Outbox{}, &fakePlatform{}
	r := NewRouter(Options{Store: boards, Outbox: ob, Platforms: map[string]Platform{"test": p}})
	t.Cleanup(r.Close)
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnStarted, Turn: 1})
	settle(t, r, "test/1")

	boards.armed.Store(true)
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done, Text: "the answer"})
	}()
	<-boards.held // the turn's end is being saved
	if ob.Len() != 1 {
		t.Errorf("%d items stored while the turn's end is saved, want the answer", ob.Len())
	}
	// A reply sent at once reaches the platform within a millisecond or
	// two; give it far longer.
	time.Sleep(200 * time.Millisecond)
	if n := p.count("reply"); n != 0 {
		t.Errorf("%d replies sent before the turn's end was saved, want 0", n)
	}
	close(boards.release)
	<-observed
	settle(t, r, "test/1")
	if n := p.count("reply"); n != 1 {
		t.Errorf("%d replies once the end was saved, want 1", n)
	}
}

// flakyLog is a chattest.Log whose next failLogs reads of a log, next
// failSaves cursor saves and next failCursors cursor reads fail.
type flakyLog struct {
	l                                *chattest.Log
	failLogs, failSaves, failCursors atomic.Int32
}

func (f *flakyLog) Undelivered(ctx context.Context) ([]string, error) { return f.l.Undelivered(ctx) }

func (f *flakyLog) Log(ctx context.Context, key string, after int64) ([]agent.LogEntry, error) {
	if f.failLogs.Add(-1) >= 0 {
		return nil, errors.New("log read failed")
	}
	return f.l.Log(ctx, key, after)
}

func (f *flakyLog) Delivered(ctx context.Context, key string) (int64, error) {
	if f.failCursors.Add(-1) >= 0 {
		return 0, errors.New("cursor read failed")
	}
	return f.l.Delivered(ctx, key)
}

func (f *flakyLog) SaveDelivered(ctx context.Context, key string, seq int64) error {
	if f.failSaves.Add(-1) >= 0 {
		return errors.New("cursor save failed")
	}
	return f.l.SaveDelivered(ctx, key, seq)
}

// TestDeliveryAppliesNothingPastAGap: when the entries before a
// published one cannot be read, the deliverer applies none of it (it
// would skip them for good) and reads them all again from its cursor a
// moment later, in order, without waiting for another publication or a
// restart (a store that failed once, an etcd leader election, must not
// leave a thread without its answer); the answer is sent once.
func TestDeliveryAppliesNothingPastAGap(t *testing.T) {
	logs, p := &flakyLog{l: &chattest.Log{}}, &fakePlatform{}
	r := NewRouter(Options{Store: &chattest.Boards{}, Log: logs, Platforms: map[string]Platform{"test": p}, RetryDelay: 200 * time.Millisecond})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	r.out.board(th.Key, &th)
	observe(r, logs.l.Append(th.Key, agent.Event{Kind: agent.TurnStarted, Turn: 1}))
	logs.l.Append(th.Key, agent.Event{Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.Completed)})
	end := logs.l.Append(th.Key, agent.Event{Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done, Text: "the answer", Plan: plan(1, todo.Completed), Revision: 1})

	logs.failLogs.Store(2) // the read for the publication, and the first retry
	observe(r, end)
	settle(t, r, th.Key)
	if n := p.count("reply"); n != 0 {
		t.Errorf("%d replies sent past entries the deliverer could not read, want 0", n)
	}
	if n, _ := logs.Delivered(t.Context(), th.Key); n != 1 {
		t.Errorf("cursor at %d after the failed read, want 1 (the turn's start)", n)
	}

	waitFor(t, "the answer after the log could be read again", func() bool { return p.count("reply") > 0 })
	r.out.Flush(th.Key)
	settle(t, r, th.Key)
	if got := p.plan("m1"); got.Revision != 1 || got.State != StateDone {
		t.Errorf("m1 shows revision %d %q, want revision 1 done", got.Revision, got.State)
	}
	observe(r, end) // published again: applied once
	settle(t, r, th.Key)
	if n := p.count("reply"); n != 1 {
		t.Errorf("%d replies, want 1", n)
	}
	if n, _ := logs.Delivered(t.Context(), th.Key); n != end.Seq {
		t.Errorf("cursor at %d, want %d", n, end.Seq)
	}
}

// TestDeliveryRetriesAnUnreadCursor: a cursor that cannot be read drops
// the event that needed it, and the deliverer reads the cursor and the
// log again a moment later: the plan and the answer reach the thread
// without another publication.
func TestDeliveryRetriesAnUnreadCursor(t *testing.T) {
	logs, p := &flakyLog{l: &chattest.Log{}}, &fakePlatform{}
	r := NewRouter(Options{Store: &chattest.Boards{}, Log: logs, Platforms: map[string]Platform{"test": p}, RetryDelay: 50 * time.Millisecond})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	r.out.board(th.Key, &th)
	logs.l.Append(th.Key, agent.Event{Kind: agent.TurnStarted, Turn: 1})
	logs.l.Append(th.Key, agent.Event{Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.Completed)})
	end := logs.l.Append(th.Key, agent.Event{Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done, Text: "the answer", Plan: plan(1, todo.Completed), Revision: 1})
	logs.failCursors.Store(1)
	observe(r, end)
	waitFor(t, "the answer after the cursor could be read again", func() bool { return p.count("reply") > 0 })
	r.out.Flush(th.Key)
	settle(t, r, th.Key)
	if got := p.plan("m1"); got.Revision != 1 || got.State != StateDone {
		t.Errorf("m1 shows revision %d %q, want revision 1 done", got.Revision, got.State)
	}
	if n := p.count("reply"); n != 1 {
		t.Errorf("%d replies, want 1", n)
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAnswerWaitsForItsCursor: an answer whose entry's cursor could not
// be saved is not sent (a restart would apply the entry again, and an
// answer sent now could be sent twice); it stays stored, and is sent once
// the deliverer saved the cursor a moment later, without waiting for a
// restart. A restart after that sends nothing again.
func TestAnswerWaitsForItsCursor(t *testing.T) {
	logs, boards, ob, p := &flakyLog{l: &chattest.Log{}}, &chattest.Boards{}, &chattest.Outbox{}, &fakePlatform{}
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	r := NewRouter(Options{Store: boards, Outbox: ob, Log: logs, Platforms: map[string]Platform{"test": p}, RetryDelay: 200 * time.Millisecond})
	r.out.board(th.Key, &th)
	observe(r, logs.l.Append(th.Key, agent.Event{Kind: agent.TurnStarted, Turn: 1}))
	var early atomic.Bool
	p.replyErr = func(int) error {
		if n, _ := logs.l.Delivered(t.Context(), th.Key); n < 2 {
			early.Store(true)
		}
		return nil
	}
	logs.failSaves.Store(2) // the save for the answer, and the first retry
	observe(r, logs.l.Append(th.Key, agent.Event{Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done, Text: "the answer"}))
	settle(t, r, th.Key)
	if n := p.count("reply"); n != 0 {
		t.Errorf("%d replies sent before their cursor was saved, want 0", n)
	}
	if ob.Len() != 1 {
		t.Fatalf("%d replies stored, want the answer", ob.Len())
	}
	waitFor(t, "answer once the cursor was saved", func() bool { return p.count("reply") > 0 })
	settle(t, r, th.Key)
	r.Close()

	for restart := range 2 {
		r := NewRouter(Options{Runner: &chattest.Runner{}, Store: boards, Outbox: ob, Log: logs, Platforms: map[string]Platform{"test": p}})
		if _, err := r.Resume(t.Context()); err != nil {
			t.Fatalf("Resume: %v", err)
		}
		settle(t, r, th.Key)
		r.Close()
		if n := p.count("reply"); n != 1 {
			t.Errorf("restart %d: %d replies, want 1", restart+1, n)
		}
	}
	if ob.Len() != 0 {
		t.Errorf("%d replies left stored, want 0", ob.Len())
	}
	if early.Load() {
		t.Error("the answer was sent before the delivery cursor passed its entry")
	}
}

// TestResumedStartAfterItsEndIsIgnored: a replica that takes a session
// over resumes its turn (the runner publishes the resumed start, which
// is not logged) while its deliverer catches the log up; the turn ends
// quickly, and the catch-up reads its end from the log before the
// resumed start comes off the queue. The plan must end on "done", not
// on "resumed after restart" (the soak's plans stuck on "resumed").
func TestResumedStartAfterItsEndIsIgnored(t *testing.T) {
	logs, p := &chattest.Log{}, &fakePlatform{}
	r := NewRouter(Options{Runner: &chattest.Runner{}, Store: &chattest.Boards{}, Log: logs, Platforms: map[string]Platform{"test": p}})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	r.out.board(th.Key, &th)
	observe(r, logs.Append(th.Key, agent.Event{Kind: agent.TurnStarted, Turn: 3}))
	observe(r, logs.Append(th.Key, agent.Event{Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.InProgress)}))
	settle(t, r, th.Key)

	// The log goes on past what this process was told: the resumed turn
	// revised its plan and ended, and the catch-up reads that first.
	logs.Append(th.Key, agent.Event{Kind: agent.PlanChanged, Revision: 2, Plan: plan(1, todo.Completed)})
	end := logs.Append(th.Key, agent.Event{Kind: agent.TurnEnded, Turn: 3, Outcome: agent.Done, Text: "the answer"})
	r.ResumeSession(t.Context(), th.Key)
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnStarted, Resumed: true, Turn: 3, Revision: 1, Plan: plan(1, todo.InProgress)})
	observe(r, end)
	settle(t, r, th.Key)

	shown, _ := r.out.board(th.Key, nil).Shown()
	if shown.State != StateDone {
		t.Errorf("the plan shows %q, want %q", shown.State, StateDone)
	}
	if n := p.count("reply"); n != 1 {
		t.Errorf("%d replies, want the answer once", n)
	}
}

// TestReplayAfterAKillShowsNoOlderRevision: a kill before the delivery
// cursor was saved leaves entries the thread shows already behind it;
// the next start applies them again, and the plan message must not go
// back to an older revision on the way (DESIGN §6): what is shown is the
// fold of the entries, not each one in turn. (The fake panics on an
// older revision applied after a newer one.)
func TestReplayAfterAKillShowsNoOlderRevision(t *testing.T) {
	const n = 20
	boards, logs, p := &slowBoards{Boards: &chattest.Boards{}}, &chattest.Log{}, &fakePlatform{}
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	r := NewRouter(Options{Runner: &chattest.Runner{}, Store: boards, Log: logs, Platforms: map[string]Platform{"test": p}})
	r.out.board(th.Key, &th)
	observe(r, logs.Append(th.Key, agent.Event{Kind: agent.TurnStarted, Turn: 1}))
	for rev := int64(1); rev <= n; rev++ {
		logs.Append(th.Key, agent.Event{Kind: agent.PlanChanged, Revision: rev, Plan: plan(rev, todo.Pending)})
	}
	r.ResumeSession(t.Context(), th.Key) // catch up the lot
	settle(t, r, th.Key)
	r.Close()
	if err := logs.SaveDelivered(t.Context(), th.Key, 1); err != nil { // the kill: the cursor's save lagged
		t.Fatal(err)
	}
	r2 := NewRouter(Options{Runner: &chattest.Runner{}, Store: boards, Log: logs, Platforms: map[string]Platform{"test": p}})
	t.Cleanup(r2.Close)
	r2.ResumeSession(t.Context(), th.Key)
	settle(t, r2, th.Key)
	if got := p.onlyPlan(t).Revision; got != n {
		t.Errorf("the plan shows revision %d, want %d", got, n)
	}
}

// slowBoards saves board records as a disk does, a little slowly, so the
// plan's loop runs between the entries a catch-up applies.
type slowBoards struct{ *chattest.Boards }

func (s *slowBoards) SaveBoard(ctx context.Context, key string, data []byte, pending bool) error {
	time.Sleep(2 * time.Millisecond)
	return s.Boards.SaveBoard(ctx, key, data, pending)
}

// TestDeletedSessionInUseShowsItsNewPlan: retention deleted the
// session's records while a message came; the new session's plan
// revisions start at 1 again, below what the board in memory wanted,
// and its plan shows all the same (the board ignores only a revision
// older than its own session's).
func TestDeletedSessionInUseShowsItsNewPlan(t *testing.T) {
	logs, p := &chattest.Log{}, &fakePlatform{}
	r := NewRouter(Options{Runner: &chattest.Runner{}, Store: &chattest.Boards{}, Log: logs, Platforms: map[string]Platform{"test": p}})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	r.out.board(th.Key, &th)
	observe(r, logs.Append(th.Key, agent.Event{Kind: agent.TurnStarted, Turn: 1}))
	for rev := int64(1); rev <= 3; rev++ {
		observe(r, logs.Append(th.Key, agent.Event{Kind: agent.PlanChanged, Revision: rev, Plan: plan(rev, todo.Completed)}))
	}
	observe(r, logs.Append(th.Key, agent.Event{Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done, Text: "the first answer"}))
	settle(t, r, th.Key)

	since := time.Now()
	logs.Delete(th.Key) // retention
	if err := r.Handle(t.Context(), Incoming{Thread: th, Text: "one more thing", Author: "Ann", AuthorID: "U1", MessageID: "2"}); err != nil {
		t.Fatal(err)
	}
	observe(r, logs.Append(th.Key, agent.Event{Kind: agent.TurnStarted, Turn: 1}))
	r.Deleted(th.Key, since) // in use again: kept
	newPlan := todo.NewSnapshot([]todo.Item{{Content: "a new task", Status: todo.InProgress}})
	observe(r, logs.Append(th.Key, agent.Event{Kind: agent.PlanChanged, Revision: 1, Plan: newPlan}))
	settle(t, r, th.Key)
	_, want := r.out.board(th.Key, nil).state()
	if len(want.Items) != 1 || want.Items[0].Content != "a new task" {
		t.Errorf("the board wants revision %d %+v, want the new session's plan", want.Revision, want.Items)
	}
}

// TestFoldAfterResetLeavesTheOldPlan: the board's content is folded from
// the log after a restart, and a reset keeps the log (its numbering and
// cursor): what the old session logged is not folded into the new one,
// so its plan is not posted again in the thread.
func TestFoldAfterResetLeavesTheOldPlan(t *testing.T) {
	boards, logs := &chattest.Boards{}, &chattest.Log{}
	p := &fakePlatform{}
	r := NewRouter(Options{Store: boards, Log: logs, Platforms: map[string]Platform{"test": p}})
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, logs.Append("test/1", agent.Event{Kind: agent.TurnStarted, Turn: 1}))
	observe(r, logs.Append("test/1", agent.Event{Kind: agent.PlanChanged, Turn: 1, Revision: 1, Plan: plan(1, todo.Completed)}))
	observe(r, logs.Append("test/1", agent.Event{Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done}))
	settle(t, r, "test/1")
	r.out.archived(context.Background(), r.out.session("test/1", nil), "ann", false)
	settle(t, r, "test/1")
	r.Close()
	posts := p.count("post")

	r2 := NewRouter(Options{Store: boards, Log: logs, Platforms: map[string]Platform{"test": p}})
	t.Cleanup(r2.Close)
	if _, err := r2.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	settle(t, r2, "test/1")
	if n := p.count("post"); n != posts {
		t.Errorf("calls %+v: the old session's plan was posted again after the reset and a restart", p.calls)
	}
	if _, want := r2.out.board("test/1", nil).state(); len(want.Items) != 0 {
		t.Errorf("the board wants %d items after the reset, want none", len(want.Items))
	}
}

// TestRevisionAppliedAgainMovesNoMessage: a finished plan's next task
// moved on to a new message, and the process died before the cursor was
// stored past that revision. After the restart the board is folded from
// the entries before it and the revision is applied again: the record
// says the move is done (RefRev), so no third message is posted and the
// new one stays the board's.
func TestRevisionAppliedAgainMovesNoMessage(t *testing.T) {
	boards, logs := &chattest.Boards{}, &chattest.Log{}
	p := &fakePlatform{}
	r := NewRouter(Options{Store: boards, Log: logs, Platforms: map[string]Platform{"test": p}})
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, logs.Append("test/1", agent.Event{Kind: agent.TurnStarted, Turn: 1}))
	observe(r, logs.Append("test/1", agent.Event{Kind: agent.PlanChanged, Turn: 1, Revision: 1, Plan: items("task A")}))
	ended := logs.Append("test/1", agent.Event{Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done, Revision: 1, Plan: items("task A")})
	observe(r, ended)
	settle(t, r, "test/1") // task A's message shows it done
	observe(r, logs.Append("test/1", agent.Event{Kind: agent.TurnStarted, Turn: 2}))
	observe(r, logs.Append("test/1", agent.Event{Kind: agent.PlanChanged, Turn: 2, Revision: 2, Plan: items("task B")}))
	settle(t, r, "test/1")
	r.Close()
	if p.count("post") != 2 {
		t.Fatalf("calls %+v, want task B in a message of its own", p.calls)
	}
	// The kill came before the cursor was stored past task A's end.
	if err := logs.SaveDelivered(context.Background(), "test/1", ended.Seq); err != nil {
		t.Fatal(err)
	}

	r2 := NewRouter(Options{Store: boards, Log: logs, Platforms: map[string]Platform{"test": p}})
	t.Cleanup(r2.Close)
	if _, err := r2.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	settle(t, r2, "test/1")
	if n := p.count("post"); n != 2 {
		t.Errorf("calls %+v: task B moved to a message of its own again after the restart", p.calls)
	}
	if _, ref := r2.out.board("test/1", nil).Shown(); ref.ID != "m2" {
		t.Errorf("the board works on %q after the restart, want m2", ref.ID)
	}
}

// TestFoldAfterCompaction (review finding): the log behind the cursor is
// compacted, and the entries of a turn carry its plan, so the last one
// kept with a plan may be the turn's end, not the revision (all that the
// compaction before the fold kept). After a restart the board is folded to
// the same plan and state: a finished task's next task still gets a
// message of its own, and a turn that ends after the restart shows its
// end on the plan.
func TestFoldAfterCompaction(t *testing.T) {
	boards, logs := &chattest.Boards{}, &chattest.Log{}
	p := &fakePlatform{}
	start := func() *Router {
		r := NewRouter(Options{Store: boards, Log: logs, Platforms: map[string]Platform{"test": p}})
		if _, err := r.Resume(context.Background()); err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := start()
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	a := items("task A")
	observe(r, logs.Append("test/1", agent.Event{Kind: agent.TurnStarted, Turn: 1}))
	observe(r, logs.Append("test/1", agent.Event{Kind: agent.PlanChanged, Turn: 1, Revision: 1, Plan: a}))
	observe(r, logs.Append("test/1", agent.Event{Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done, Revision: 1, Plan: a}))
	settle(t, r, "test/1")
	r.Close()
	// As the compaction before the fold left a log: the last entry with a
	// plan behind the cursor, the turn's end, and nothing else.
	logs.Drop("test/1", 1, 2)

	r = start()
	observe(r, logs.Append("test/1", agent.Event{Kind: agent.TurnStarted, Turn: 2, Revision: 1, Plan: a}))
	b := items("task B")
	observe(r, logs.Append("test/1", agent.Event{Kind: agent.PlanChanged, Turn: 2, Revision: 2, Plan: b}))
	observe(r, logs.Append("test/1", agent.Event{Kind: agent.EvidenceChanged, Turn: 2, Revision: 2, Plan: b}))
	settle(t, r, "test/1")
	r.Close()
	if n := p.count("post"); n != 2 {
		t.Fatalf("calls %+v: task B after a restart, want it in a message of its own", p.calls)
	}
	if got := p.plan("m1"); got.Revision != 1 || got.State != StateDone {
		t.Errorf("task A's message shows rev %d %q, want 1 done", got.Revision, got.State)
	}

	r = start()
	t.Cleanup(r.Close)
	observe(r, logs.Append("test/1", agent.Event{Kind: agent.TurnEnded, Turn: 2, Outcome: agent.Done, Revision: 2, Plan: b}))
	settle(t, r, "test/1")
	if got := p.plan("m2"); got.Revision != 2 || got.State != StateDone || got.Stoppable {
		t.Errorf("task B's message shows rev %d %q (stoppable %v) after its turn ended, want 2 done", got.Revision, got.State, got.Stoppable)
	}
	if n := p.count("post"); n != 2 {
		t.Errorf("calls %+v: a third message", p.calls)
	}
}

// TestFoldKeepsDecisionsAndTheFinishedPlan (review findings): a decided
// plan approval folds to a working plan without its Start button, and
// the finished plan a later turn took over folds to what its message
// showed when its turn ended (its evidence's count), though the log
// behind the cursor is compacted.
func TestFoldKeepsDecisionsAndTheFinishedPlan(t *testing.T) {
	boards, logs := &chattest.Boards{}, &chattest.Log{}
	p := &fakePlatform{}
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	r := NewRouter(Options{Store: boards, Log: logs, Platforms: map[string]Platform{"test": p}})
	r.out.board(th.Key, &th)
	a := items("task A")
	start := &agent.Approval{CallID: "plan-1", Turn: 1, Plan: true}
	for _, e := range []agent.Event{
		{Kind: agent.TurnStarted, Turn: 1},
		{Kind: agent.PlanChanged, Turn: 1, Revision: 1, Plan: a, Calls: 1},
		{Kind: agent.ApprovalNeeded, Turn: 1, Revision: 1, Plan: a, Approval: start},
		{Kind: agent.ApprovalDecided, Turn: 1, Approval: start, Decision: &agent.Decision{Allow: true}},
	} {
		observe(r, logs.Append(th.Key, e))
	}
	settle(t, r, th.Key)
	r.Close()
	r = NewRouter(Options{Store: boards, Log: logs, Platforms: map[string]Platform{"test": p}})
	_, want := r.out.board(th.Key, nil).state()
	if want.State != StateWorking || want.Start != "" {
		t.Errorf("after the restart the plan folds to %q with Start %q; its approval was decided: want working, no Start", want.State, want.Start)
	}
	for _, e := range []agent.Event{
		{Kind: agent.EvidenceChanged, Turn: 1, Revision: 1, Plan: a, Calls: 3},
		{Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done, Revision: 1, Plan: a},
		{Kind: agent.TurnStarted, Turn: 2, Revision: 1, Plan: a, Calls: 0},
		{Kind: agent.EvidenceChanged, Turn: 2, Revision: 1, Plan: a, Calls: 1},
	} {
		observe(r, logs.Append(th.Key, e))
	}
	settle(t, r, th.Key)
	r.Close()
	r = NewRouter(Options{Store: boards, Log: logs, Platforms: map[string]Platform{"test": p}})
	t.Cleanup(r.Close)
	if final := r.out.board(th.Key, nil).finalPlan(); final == nil || final.State != StateDone || final.Calls != 3 {
		t.Errorf("the finished plan folds to %+v, want done with its 3 calls, as its message showed", final)
	}
}

// TestFoldNeverShowsAnOlderRevision (review finding): after a restart the
// board is folded at the stored cursor, which lags what the message
// shows; an event that starts the board's loop before the entries after
// the cursor are applied again does not edit the message back.
func TestFoldNeverShowsAnOlderRevision(t *testing.T) {
	boards, logs := &chattest.Boards{}, &chattest.Log{}
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	shown := Plan{Items: plan(3, todo.InProgress).Items(), Revision: 3, State: StateWorking, Stoppable: true}
	savedBoard(t, boards, logs, boardRecord{Thread: th, Ref: MessageRef{Channel: "C1", ID: "m1"}, Pinned: true, Shown: shown}, nil)
	logs.Append(th.Key, agent.Event{Kind: agent.TurnStarted, Turn: 1})
	first := logs.Append(th.Key, agent.Event{Kind: agent.PlanChanged, Turn: 1, Revision: 1, Plan: plan(1, todo.InProgress)})
	for rev := int64(2); rev <= 3; rev++ {
		logs.Append(th.Key, agent.Event{Kind: agent.PlanChanged, Turn: 1, Revision: rev, Plan: plan(rev, todo.InProgress)})
	}
	if err := logs.SaveDelivered(context.Background(), th.Key, first.Seq); err != nil {
		t.Fatal(err)
	}
	p := &fakePlatform{next: 1, shown: map[string]Plan{"m1": shown}}
	r := NewRouter(Options{Store: boards, Log: logs, Platforms: map[string]Platform{"test": p}})
	t.Cleanup(r.Close)
	e := agent.Event{Session: th.Key, Kind: agent.ToolStarted, Tool: "fs__read_text_file"}
	r.Observe(e) // the board is loaded, folded at revision 1, and runs
	settle(t, r, th.Key)
	for _, c := range p.calls {
		if c.Op == "edit" && c.Rev < 3 {
			t.Errorf("calls %+v: the message went back to revision %d", p.calls, c.Rev)
		}
	}
}

// TestFoldedWorkShownBeforeANotice (review finding): the fold left
// content the message does not show (its final edit was cut short by the
// kill), and the next entry is a notice, which changes nothing on the
// board: the plan is edited all the same, before the notice.
func TestFoldedWorkShownBeforeANotice(t *testing.T) {
	boards, logs := &chattest.Boards{}, &chattest.Log{}
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	working := Plan{Items: plan(1, todo.Completed).Items(), Revision: 1, State: StateWorking, Stoppable: true}
	savedBoard(t, boards, nil, boardRecord{Thread: th, Ref: MessageRef{Channel: "C1", ID: "m1"}, Pinned: true, Shown: working}, nil)
	logs.Append(th.Key, agent.Event{Kind: agent.TurnStarted, Turn: 1})
	logs.Append(th.Key, agent.Event{Kind: agent.PlanChanged, Turn: 1, Revision: 1, Plan: plan(1, todo.Completed)})
	ended := logs.Append(th.Key, agent.Event{Kind: agent.TurnEnded, Turn: 1, Outcome: agent.Done, Revision: 1, Plan: plan(1, todo.Completed)})
	if err := logs.SaveDelivered(context.Background(), th.Key, ended.Seq); err != nil {
		t.Fatal(err)
	}
	p := &fakePlatform{next: 1, shown: map[string]Plan{"m1": working}}
	r := NewRouter(Options{Store: boards, Log: logs, Outbox: &chattest.Outbox{}, Platforms: map[string]Platform{"test": p}})
	t.Cleanup(r.Close)
	observe(r, logs.Append(th.Key, agent.Event{Kind: agent.Notice, Text: "a word from the bot"}))
	settle(t, r, th.Key)
	var ops []string
	for _, c := range p.calls {
		ops = append(ops, c.Op)
	}
	if got := strings.Join(ops, ","); got != "edit,reply" || p.plan("m1").State != StateDone {
		t.Errorf("calls %s, m1 shows %q; want the plan edited to done, then the notice", got, p.plan("m1").State)
	}
}
