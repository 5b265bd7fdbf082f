package chat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat/chattest"
	"github.com/pinplan/pinplan/todo"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type call struct {
	Op   string
	Ref  string
	Rev  int64
	Text string
}

// fakePlatform records calls. editErr, when set, decides an edit's error.
// hold, when set, is called as each plan message request (post, edit, pin)
// starts, before it counts as in flight, and may block it.
type fakePlatform struct {
	hold func(op string)

	mu       sync.Mutex
	calls    []call
	next     int
	shown    map[string]Plan
	inFlight int // plan message requests (post, edit, pin) in progress
	maxIn    int
	editErr  func(n int) error
	pinErr   error
	edits    int
	replyErr func(n int) error
	replies  int
	sends    []sendInfo // what each Reply's context carried
	posts    []sendInfo // what each PostPlan's context carried
	postErr  func(n int) error
}

func (p *fakePlatform) Caps() Caps { return testCaps(p) }

func (f *fakePlatform) enter(op string) {
	if f.hold != nil {
		f.hold(op)
	}
	f.mu.Lock()
	f.inFlight++
	f.maxIn = max(f.maxIn, f.inFlight)
	f.mu.Unlock()
	time.Sleep(time.Millisecond)
}

func (f *fakePlatform) leave() { f.mu.Lock(); f.inFlight--; f.mu.Unlock() }

func (f *fakePlatform) PostPlan(ctx context.Context, th Thread, p Plan) (MessageRef, error) {
	f.enter("post")
	defer f.leave()
	f.mu.Lock()
	defer f.mu.Unlock()
	_, maybe := SentMaybe(ctx)
	f.posts = append(f.posts, sendInfo{key: SendKey(ctx), unsure: maybe})
	if f.postErr != nil {
		if err := f.postErr(len(f.posts)); err != nil {
			f.calls = append(f.calls, call{Op: "post-error"})
			return MessageRef{}, err
		}
	}
	f.next++
	id := fmt.Sprintf("m%d", f.next)
	if f.shown == nil {
		f.shown = map[string]Plan{}
	}
	f.shown[id] = p
	f.calls = append(f.calls, call{Op: "post", Ref: id, Rev: p.Revision, Text: string(p.State)})
	return MessageRef{Channel: th.Channel, ID: id}, nil
}

func (f *fakePlatform) EditPlan(_ context.Context, _ Thread, ref MessageRef, p Plan) error {
	f.enter("edit")
	defer f.leave()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.edits++
	if f.editErr != nil {
		if err := f.editErr(f.edits); err != nil {
			f.calls = append(f.calls, call{Op: "edit-error", Ref: ref.ID, Rev: p.Revision})
			return err
		}
	}
	if old, ok := f.shown[ref.ID]; ok && old.Revision > p.Revision {
		panic("older revision applied after a newer one")
	}
	f.shown[ref.ID] = p
	f.calls = append(f.calls, call{Op: "edit", Ref: ref.ID, Rev: p.Revision, Text: string(p.State)})
	return nil
}

func (f *fakePlatform) Pin(_ context.Context, _ Thread, ref MessageRef, pin bool) error {
	f.enter("pin")
	defer f.leave()
	f.mu.Lock()
	defer f.mu.Unlock()
	op := "pin"
	if !pin {
		op = "unpin"
	}
	if pin && f.pinErr != nil {
		f.calls = append(f.calls, call{Op: "pin-error", Ref: ref.ID})
		return f.pinErr
	}
	f.calls = append(f.calls, call{Op: op, Ref: ref.ID})
	return nil
}

func (f *fakePlatform) Reply(ctx context.Context, _ Thread, _, text string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replies++
	since, maybe := SentMaybe(ctx)
	f.sends = append(f.sends, sendInfo{key: SendKey(ctx), queued: since, unsure: maybe})
	if f.replyErr != nil {
		if err := f.replyErr(f.replies); err != nil {
			f.calls = append(f.calls, call{Op: "reply-error", Text: text})
			return err
		}
	}
	f.calls = append(f.calls, call{Op: "reply", Text: text})
	return nil
}

func (f *fakePlatform) Working(_ context.Context, _ Thread, trigger string, on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{Op: fmt.Sprintf("working-%t", on), Ref: trigger})
	return nil
}

func (f *fakePlatform) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c.Op == op {
			n++
		}
	}
	return n
}

func (f *fakePlatform) plan(id string) Plan {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.shown[id]
}

// settle waits until the session's board has applied everything and every
// reply was delivered.
func settle(t testing.TB, r *Router, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b := r.out.board(key, nil); b != nil {
			b.Wait()
		}
		if r.out.outbox.idle() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("replies still undelivered after 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// isClosed reports, with the board's lock, whether its plan is finished.
func (b *Board) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// finalPlan returns, with the board's lock, the finished plan a later
// turn took over.
func (b *Board) finalPlan() *Plan {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.final
}

func plan(rev int64, statuses ...todo.Status) todo.Snapshot {
	var items []todo.Item
	for i, s := range statuses {
		items = append(items, todo.Item{Content: fmt.Sprintf("step %d", i), Status: s})
	}
	return todo.NewSnapshot(items)
}

func newTestRouter(t *testing.T, p Platform, st *chattest.Boards) *Router {
	t.Helper()
	r := NewRouter(Options{Store: st, Platforms: map[string]Platform{"test": p}})
	t.Cleanup(r.Close)
	// Handle records the thread; the runner itself is not needed here.
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	return r
}

func TestBoardPostsPinsOnceAndEndsOnNewest(t *testing.T) {
	// The platform holds the first post until every revision has arrived:
	// revisions come faster than the platform takes them, which is when
	// DESIGN §6 says the board skips intermediate ones.
	posting, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	p := &fakePlatform{hold: func(op string) {
		if op == "post" {
			once.Do(func() { close(posting); <-release })
		}
	}}
	r := newTestRouter(t, p, &chattest.Boards{})
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnStarted})
	observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.InProgress, todo.Pending)})
	select {
	case <-posting:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("revision 1 was not posted within 10s")
	}
	for rev := int64(2); rev <= 100; rev++ {
		observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: rev, Plan: plan(rev, todo.InProgress, todo.Pending)})
	}
	observe(r, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Plan: plan(100, todo.InProgress, todo.Pending)})
	close(release)
	settle(t, r, "test/1")

	p.mu.Lock()
	calls, edits, maxIn := append([]call(nil), p.calls...), p.edits, p.maxIn
	p.mu.Unlock()
	if p.count("post") != 1 || p.count("pin") != 1 {
		t.Errorf("posts=%d pins=%d, want 1 and 1", p.count("post"), p.count("pin"))
	}
	// 101 contents were wanted (revisions 1..100, then revision 100 done).
	// The post showed the first; everything after it arrived while the
	// platform was busy, so one edit, to the newest, is all it takes.
	if edits != 1 {
		t.Errorf("%d edits after the held post, want 1 (to the newest): intermediate revisions not skipped; calls %+v", edits, calls)
	}
	// Shown in the order they were wanted: by revision, and revision 100
	// done after revision 100 working. Never an older after a newer.
	order := func(c call) int64 {
		o := 2 * c.Rev
		if c.Text == string(StateDone) {
			o++
		}
		return o
	}
	var shown []call
	for _, c := range calls {
		if c.Op == "post" || c.Op == "edit" {
			shown = append(shown, c)
		}
	}
	for i := 1; i < len(shown); i++ {
		if order(shown[i]) <= order(shown[i-1]) {
			t.Errorf("revision %d %s shown after revision %d %s: older after newer or shown twice", shown[i].Rev, shown[i].Text, shown[i-1].Rev, shown[i-1].Text)
		}
	}
	if len(shown) == 0 || shown[0].Op != "post" || shown[0].Rev != 1 {
		t.Errorf("shown %+v, want revision 1 posted first", shown)
	}
	got := p.plan("m1")
	if got.Revision != 100 || got.State != StateDone {
		t.Errorf("final shown revision %d state %s, want 100 done", got.Revision, got.State)
	}
	if maxIn != 1 {
		t.Errorf("at most %d plan message requests in flight at once, want 1", maxIn)
	}
	// The bot closes the run out and ticks nothing: the items stay open
	// and the footer says so.
	if got.Title() != "Plan · 0/2 done" {
		t.Errorf("title %q, want %q", got.Title(), "Plan · 0/2 done")
	}
	if want := " · revision 100 · done · 2 open items left"; !strings.HasSuffix(got.Footer(), want) {
		t.Errorf("footer %q, want it to end %q", got.Footer(), want)
	}
}

func TestBoardRepostsWhenMessageGone(t *testing.T) {
	p := &fakePlatform{editErr: func(n int) error {
		if n == 1 {
			return fmt.Errorf("slack: message_not_found: %w", ErrMessageGone)
		}
		return nil
	}}
	r := newTestRouter(t, p, &chattest.Boards{})
	observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.Pending)})
	settle(t, r, "test/1")
	observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 2, Plan: plan(2, todo.InProgress)})
	settle(t, r, "test/1")
	observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 3, Plan: plan(3, todo.Completed)})
	settle(t, r, "test/1")
	if p.count("post") != 2 || p.count("pin") != 2 || p.count("unpin") != 1 {
		t.Fatalf("calls %+v, want 2 posts, 2 pins, 1 unpin", p.calls)
	}
	if got := p.plan("m2"); got.Revision != 3 {
		t.Errorf("new message shows revision %d, want 3", got.Revision)
	}
	_, ref := r.out.board("test/1", nil).Shown()
	if ref.ID != "m2" {
		t.Errorf("board ref %s, want m2", ref.ID)
	}
}

func TestBoardHonoursRateLimit(t *testing.T) {
	p := &fakePlatform{editErr: func(n int) error {
		if n <= 2 {
			return &RateLimitError{RetryAfter: 100 * time.Millisecond}
		}
		return nil
	}}
	r := newTestRouter(t, p, &chattest.Boards{})
	observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.Pending)})
	settle(t, r, "test/1")
	start := time.Now()
	observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 2, Plan: plan(2, todo.Completed)})
	settle(t, r, "test/1")
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("two 429s of 100ms waited only %s", d)
	}
	if got := p.plan("m1"); got.Revision != 2 {
		t.Errorf("shown revision %d, want 2", got.Revision)
	}
}

func TestBoardPinUnavailableSaysOnce(t *testing.T) {
	p := &fakePlatform{pinErr: ErrPinUnavailable}
	r := newTestRouter(t, p, &chattest.Boards{})
	for rev := int64(1); rev <= 3; rev++ {
		observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: rev, Plan: plan(rev, todo.Pending)})
		settle(t, r, "test/1")
	}
	if p.count("reply") != 1 || p.count("pin-error") != 1 {
		t.Errorf("calls %+v, want one failed pin and one notice", p.calls)
	}
	if got := p.plan("m1"); got.Revision != 3 {
		t.Errorf("unpinned message not kept up to date: revision %d", got.Revision)
	}
}

func TestNewTaskGetsNewMessageAfterRestart(t *testing.T) {
	st := &chattest.Boards{}
	p := &fakePlatform{}
	r := NewRouter(Options{Store: st, Platforms: map[string]Platform{"test": p}})
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.InProgress)})
	settle(t, r, "test/1")
	// A restart: a new router on the same store reuses the message.
	r.Close()
	r2 := newTestRouter(t, p, st)
	observe(r2, agent.Event{Session: "test/1", Kind: agent.TurnStarted, Resumed: true})
	observe(r2, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 2, Plan: plan(2, todo.Completed)})
	observe(r2, agent.Event{Session: "test/1", Kind: agent.TurnEnded, Outcome: agent.Done, Plan: plan(2, todo.Completed)})
	settle(t, r2, "test/1")
	if p.count("post") != 1 || p.count("pin") != 1 {
		t.Fatalf("after restart: calls %+v, want the same message reused", p.calls)
	}
	if got := p.plan("m1"); got.State != StateDone || got.Revision != 2 {
		t.Errorf("m1 shows %s rev %d", got.State, got.Revision)
	}
	// The finished plan is closed: a new task gets a new, pinned message and
	// the old one is unpinned but left complete.
	observe(r2, agent.Event{Session: "test/1", Kind: agent.TurnStarted})
	observe(r2, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 3, Plan: todo.NewSnapshot([]todo.Item{{Content: "another task", Status: todo.Pending}})})
	settle(t, r2, "test/1")
	if p.count("post") != 2 || p.count("unpin") != 1 || p.count("pin") != 2 {
		t.Errorf("new task: calls %+v", p.calls)
	}
	if got := p.plan("m1"); got.State != StateDone {
		t.Errorf("old message changed to %s", got.State)
	}
}

func TestFooterSaysOpenItems(t *testing.T) {
	p := Plan{Items: plan(1, todo.Completed, todo.Pending, todo.InProgress).Items(), Revision: 4, State: StateFailed, Updated: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	want := "Updated 2026-01-02 03:04:05 UTC · revision 4 · failed · 2 open items left"
	if got := p.Footer(); got != want {
		t.Errorf("Footer = %q, want %q", got, want)
	}
	if got := Shorten("abcdef", 4); got != "abc…" {
		t.Errorf("Shorten = %q", got)
	}
}

func TestBoardFailureToldOnceAndRecovers(t *testing.T) {
	broken := true
	var mu sync.Mutex
	p := &fakePlatform{editErr: func(int) error {
		mu.Lock()
		defer mu.Unlock()
		if broken {
			return errors.New("slack: update plan: channel_not_found")
		}
		return nil
	}}
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond})
	t.Cleanup(r.Close)
	r.out.board("test/1", &Thread{Platform: "test", Key: "test/1", Channel: "C1"})
	observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.Pending)})
	settle(t, r, "test/1")
	for rev := int64(2); rev <= 3; rev++ { // two outages' worth of failed edits, one notice
		observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: rev, Plan: plan(rev, todo.InProgress)})
		settle(t, r, "test/1")
	}
	if n := p.count("reply"); n != 1 {
		t.Fatalf("%d notices for a lasting failure, want 1", n)
	}
	if n := p.count("edit-error"); n != 10 {
		t.Errorf("%d failed edits, want 5 tries per revision", n)
	}
	mu.Lock()
	broken = false
	mu.Unlock()
	observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 4, Plan: plan(4, todo.Completed)})
	settle(t, r, "test/1")
	if got := p.plan("m1"); got.Revision != 4 {
		t.Errorf("after recovery the message shows revision %d, want 4", got.Revision)
	}
	mu.Lock()
	broken = true
	mu.Unlock()
	observe(r, agent.Event{Session: "test/1", Kind: agent.PlanChanged, Revision: 5, Plan: plan(5, todo.Completed)})
	settle(t, r, "test/1")
	if n := p.count("reply"); n != 2 {
		t.Errorf("a new outage after recovery: %d notices, want 2", n)
	}
}

// TestBoardTurnMethods drives the board's own methods, one for each thing
// that happens to its session, with no router in between, and checks what
// each leaves in the record and the wanted content.
func TestBoardTurnMethods(t *testing.T) {
	p := &fakePlatform{}
	r := newTestRouter(t, p, &chattest.Boards{})
	b := r.out.board("test/1", nil)
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	ev := func(kind agent.EventKind) agent.Event { return agent.Event{Session: "test/1", Kind: kind, At: at} }
	task := func(rev int64, texts ...string) agent.Event {
		e := ev(agent.PlanChanged)
		e.Revision, e.Plan = rev, items(texts...)
		return e
	}
	var indicated string
	steps := []struct {
		name  string
		do    func()
		check func(rec boardRecord, want Plan) bool
	}{
		{name: "a message", do: func() {
			b.received(Thread{Platform: "test", Key: "test/1", Channel: "C2", ThreadID: "T9"})
		}, check: func(rec boardRecord, _ Plan) bool {
			return rec.Thread.Channel == "C2" && rec.Thread.ThreadID == "T9"
		}},
		{name: "turn resumed", do: func() {
			e := ev(agent.TurnStarted)
			e.Resumed, e.Requester, e.Trigger = true, "UBOB", "msg-1"
			indicated = b.turnStarted(e)
		}, check: func(rec boardRecord, want Plan) bool {
			return indicated == "msg-1" && want.State == StateResumed && want.Stoppable && want.Updated.Equal(at)
		}},
		{name: "a plan while resumed keeps the footer", do: func() { b.planChanged(task(1, "draft", "review")) }, check: func(_ boardRecord, want Plan) bool {
			return want.Revision == 1 && len(want.Items) == 2 && want.State == StateResumed && want.Stoppable
		}},
		{name: "a tool runs", do: func() {
			e := ev(agent.ToolStarted)
			e.Tool = "fs__read_text_file"
			b.toolActivity(e)
		}, check: func(_ boardRecord, want Plan) bool { return want.Activity == "running fs__read_text_file" }},
		{name: "a plan keeps the activity", do: func() { b.planChanged(task(2, "draft", "review")) }, check: func(_ boardRecord, want Plan) bool {
			return want.Revision == 2 && want.Activity == "running fs__read_text_file"
		}},
		{name: "the tool ends", do: func() { b.toolActivity(ev(agent.ToolEnded)) }, check: func(_ boardRecord, want Plan) bool { return want.Activity == "" }},
		{name: "waiting", do: func() { b.waiting(ev(agent.ApprovalNeeded)) }, check: func(_ boardRecord, want Plan) bool {
			return want.State == StateWaiting && want.Stoppable
		}},
		{name: "decided", do: func() { b.approvalDecided(ev(agent.ApprovalDecided)) }, check: func(_ boardRecord, want Plan) bool { return want.State == StateWorking }},
		{name: "decided again changes nothing", do: func() { b.approvalDecided(ev(agent.ApprovalDecided)) }, check: func(_ boardRecord, want Plan) bool { return want.State == StateWorking }},
		{name: "stopped", do: func() {
			e := ev(agent.TurnEnded)
			e.Outcome, e.StoppedBy = agent.Stopped, "ann"
			b.turnEnded(e)
			b.Wait()
		}, check: func(rec boardRecord, want Plan) bool {
			return b.isClosed() && rec.Ref.ID == "m1" && want.State == StateStopped && want.StoppedBy == "ann" && !want.Stoppable
		}},
		{name: "a later turn keeps the final content", do: func() { b.turnStarted(ev(agent.TurnStarted)) }, check: func(rec boardRecord, want Plan) bool {
			return b.finalPlan() != nil && b.finalPlan().State == StateStopped && want.State == StateWorking && want.Stoppable && want.StoppedBy == ""
		}},
		{name: "a new task gets a new message", do: func() { b.planChanged(task(3, "something else")); b.Wait() }, check: func(rec boardRecord, want Plan) bool {
			return rec.Ref.ID == "m2" && !b.isClosed() && b.finalPlan() == nil && want.Revision == 3 && want.State == StateWorking &&
				p.plan("m1").State == StateStopped && len(rec.Unpin) == 0 && len(rec.Restore) == 0
		}},
		{name: "reset", do: func() { b.reset(0); b.Wait() }, check: func(rec boardRecord, want Plan) bool {
			return rec.Ref.IsZero() && !b.isClosed() && rec.Thread.Channel == "C2" && len(want.Items) == 0
		}},
	}
	for _, st := range steps {
		st.do()
		if rec, want := b.state(); !st.check(rec, want) {
			t.Fatalf("%s: record %+v, want %+v", st.name, rec, want)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var unpinned []string
	for _, c := range p.calls {
		if c.Op == "unpin" {
			unpinned = append(unpinned, c.Ref)
		}
	}
	if strings.Join(unpinned, ",") != "m1,m2" {
		t.Errorf("unpinned %q, want m1 (the new task's) then m2 (the reset's)", unpinned)
	}
}

// observe hands r the event and waits until its session's deliverer has
// applied it, as the agent's Publish did when the router applied events
// on the agent's goroutine.
func observe(r *Router, e agent.Event) {
	if n, ok := r.runner.(interface{ Note(agent.Event) }); ok {
		n.Note(e) // the agent's record has it before it is published
	}
	r.Observe(e)
	r.out.Flush(e.Session)
}

// testCaps declares what a test's platform offers: the optional
// interfaces its type implements. Every test platform type declares its
// own Caps with it, so that a type embedding another declares what it
// adds (the router itself never looks for an interface).
func testCaps(p Platform) Caps {
	var c Caps
	c.Paced, _ = p.(Paced)
	c.Sessions, _ = p.(SessionStatus)
	c.Live, _ = p.(LiveReplier)
	c.Private, _ = p.(PrivateReplier)
	c.Split, _ = p.(Splitter)
	c.Cards, _ = p.(Interactive)
	c.History, _ = p.(History)
	c.Forget, _ = p.(Forgetter)
	c.Files, _ = p.(FileFetcher)
	return c
}
