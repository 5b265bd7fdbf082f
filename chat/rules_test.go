package chat

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat/chattest"
	"github.com/pinplan/pinplan/todo"
)

// actRunner records stops and resets.
type actRunner struct {
	decider
	rmu    sync.Mutex
	resets []string
}

func (a *actRunner) Reset(_ context.Context, _, by string) error {
	a.rmu.Lock()
	defer a.rmu.Unlock()
	a.resets = append(a.resets, by)
	return nil
}

func (a *actRunner) counts() (stops, resets int) {
	a.mu.Lock()
	stops = len(a.stops)
	a.mu.Unlock()
	a.rmu.Lock()
	defer a.rmu.Unlock()
	return stops, len(a.resets)
}

// TestWhoMayActOnLaterTurns: DESIGN §12 "Who may act", from the second
// turn of a session on. The second turn works without a new todo_write,
// so the board still holds the first turn's finished plan.
func TestWhoMayActOnLaterTurns(t *testing.T) {
	p := &cardPlatform{}
	run := &actRunner{}
	r := NewRouter(Options{Runner: run, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, Approvers: []string{"UADMIN"}, RetryDelay: time.Millisecond})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	say := func(user, text string) string {
		t.Helper()
		err := r.Handle(context.Background(), Incoming{Thread: th, Text: text, Author: strings.ToLower(user), AuthorID: user, MessageID: "m-" + user + text})
		var rej *Rejection
		if errors.As(err, &rej) {
			return rej.Reason
		}
		if err != nil {
			t.Fatal(err)
		}
		return ""
	}
	click := func(user string) ClickResult {
		return r.Click(context.Background(), Click{Thread: th, Button: ButtonID(ActionStop, th.Key), UserID: user, UserName: strings.ToLower(user)})
	}

	say("U1", "plan the release") // U1 starts the session
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnStarted, Requester: "U1"})
	observe(r, agent.Event{Session: th.Key, Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.Completed, todo.Pending, todo.Pending)})
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnEnded, Outcome: agent.Done})
	settle(t, r, th.Key)

	// The second turn, U1's again, runs without a todo_write.
	say("U1", "now check the changelog")
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnStarted, Requester: "U1"})
	settle(t, r, th.Key)
	if shown := p.plan("m1"); !shown.Stoppable || shown.State != StateWorking {
		t.Errorf("the plan during the second turn: stoppable %t, footer %q; want the Stop button and working", shown.Stoppable, shown.Footer())
	}
	if reply := say("U2", "stop"); !strings.Contains(reply, "Only") {
		t.Errorf("U2's stop in the second turn answered %q, want a refusal", reply)
	}
	if res := click("U2"); res.Private == "" {
		t.Errorf("U2's Stop click in the second turn: %+v, want a private refusal", res)
	}
	if reply := say("U2", "reset"); !strings.Contains(reply, "only") && !strings.Contains(reply, "Only") {
		t.Errorf("U2's reset in the second turn answered %q, want a refusal", reply)
	}
	if stops, resets := run.counts(); stops != 0 || resets != 0 {
		t.Fatalf("U2 changed U1's turn: %d stops, %d resets", stops, resets)
	}

	// A third turn requested by U3: U3, the starter U1 and an approver
	// may stop it; U2 may not.
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnEnded, Outcome: agent.Done})
	say("U3", "and the docs")
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnStarted, Requester: "U3"})
	settle(t, r, th.Key)
	if res := click("U2"); res.Private == "" {
		t.Errorf("U2's Stop of U3's turn: %+v, want a refusal", res)
	}
	for _, u := range []string{"U3", "U1", "UADMIN"} {
		if res := click(u); res.Plan == nil {
			t.Errorf("%s's Stop of U3's turn refused: %+v", u, res)
		}
	}
	if stops, _ := run.counts(); stops != 3 {
		t.Errorf("%d stops, want 3 (requester, starter, approver)", stops)
	}
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnEnded, Outcome: agent.Stopped, StoppedBy: "admin"})
	settle(t, r, th.Key)

	// Idle: reset is the starter's or an approver's, not the last
	// requester's nor anyone else's.
	for _, u := range []string{"U2", "U3"} {
		if reply := say(u, "reset"); !strings.Contains(strings.ToLower(reply), "only") {
			t.Errorf("%s's reset of an idle thread answered %q, want a refusal", u, reply)
		}
	}
	if _, resets := run.counts(); resets != 0 {
		t.Fatalf("%d resets by people who may not", resets)
	}
	if reply := say("U1", "reset"); !strings.Contains(reply, "Started fresh") {
		t.Errorf("the starter's reset answered %q", reply)
	}
	if _, resets := run.counts(); resets != 1 {
		t.Errorf("%d resets, want the starter's", resets)
	}
}

// TestNewTaskLeavesTheOldPlanFinal: a later turn puts the Stop button on
// the finished plan while it works; when it moves on to a new task, the
// old message gets its final content back before it is unpinned, so it
// does not stay in the thread reading "working" with a Stop button.
func TestNewTaskLeavesTheOldPlanFinal(t *testing.T) {
	p := &cardPlatform{}
	r := NewRouter(Options{Runner: &actRunner{}, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond})
	t.Cleanup(r.Close)
	key := "test/1"
	r.out.board(key, &Thread{Platform: "test", Key: key, Channel: "C1"})
	observe(r, agent.Event{Session: key, Kind: agent.TurnStarted, Requester: "U1"})
	observe(r, agent.Event{Session: key, Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.Completed)})
	observe(r, agent.Event{Session: key, Kind: agent.TurnEnded, Outcome: agent.Done})
	settle(t, r, key)
	final := p.plan("m1")
	observe(r, agent.Event{Session: key, Kind: agent.TurnStarted, Requester: "U1"})
	settle(t, r, key)
	if !p.plan("m1").Stoppable {
		t.Fatal("the second turn shows no Stop button")
	}
	other := todo.NewSnapshot([]todo.Item{{Content: "another task", Status: todo.InProgress}})
	observe(r, agent.Event{Session: key, Kind: agent.PlanChanged, Revision: 2, Plan: other})
	settle(t, r, key)
	if got := p.plan("m1"); got.Stoppable || got.State != final.State {
		t.Errorf("the old plan message ends as %q (stoppable %t), want its final %q", got.Footer(), got.Stoppable, final.Footer())
	}
	if p.count("post") != 2 || !p.plan("m2").Stoppable {
		t.Errorf("calls %+v: want the new task on a new message with the Stop button", p.calls)
	}
}

// subRunner records what reaches the agent.
type subRunner struct {
	chattest.Runner
	mu  sync.Mutex
	got []agent.Inbound
}

func (s *subRunner) Submit(_ context.Context, _ string, in agent.Inbound) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, in)
	return nil
}

// TestInvisibleMessagesAndLongNames: a message of only zero-width or
// format characters is refused as empty (DESIGN §16), and an author name
// is capped before it reaches the model.
func TestInvisibleMessagesAndLongNames(t *testing.T) {
	p := &cardPlatform{}
	run := &subRunner{}
	r := NewRouter(Options{Runner: run, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	for _, text := range []string{"\u200b\u200b\ufeff", " \u200d\u2060 \u00ad ", "\u3164\u2800", "\ufe0f"} {
		err := r.Handle(context.Background(), Incoming{Thread: th, Text: text, Sync: true})
		var rej *Rejection
		if !errors.As(err, &rej) || !rej.Refused || !strings.Contains(rej.Reason, "empty") {
			t.Errorf("Handle(%q) = %v, want it refused as empty", text, err)
		}
	}
	if err := r.Handle(context.Background(), Incoming{Thread: th, Text: "real \u200b task", Author: strings.Repeat("n", 50000), Sync: true}); err != nil {
		t.Fatal(err)
	}
	run.mu.Lock()
	defer run.mu.Unlock()
	if len(run.got) != 1 {
		t.Fatalf("%d messages reached the agent, want the one with text", len(run.got))
	}
	if n := len([]rune(run.got[0].Author)); n > MaxAuthorRunes {
		t.Errorf("an author of %d characters reached the agent, the cap is %d", n, MaxAuthorRunes)
	}
}

// TestResetAndDeleteStartOverAlike: reset and the console's delete share
// one path, so both forget what the record knew of the old session (they
// once drifted: only reset cleared PinUnavailable and FailureSaid).
func TestResetAndDeleteStartOverAlike(t *testing.T) {
	for _, del := range []bool{false, true} {
		p := &cardPlatform{}
		r := NewRouter(Options{Runner: &actRunner{}, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond})
		th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
		if err := r.Handle(context.Background(), Incoming{Thread: th, Text: "go", AuthorID: "U1"}); err != nil {
			t.Fatal(err)
		}
		observe(r, agent.Event{Session: th.Key, Kind: agent.TurnStarted, Requester: "U1"})
		observe(r, agent.Event{Session: th.Key, Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.Pending)})
		observe(r, agent.Event{Session: th.Key, Kind: agent.ApprovalNeeded, Approval: &agent.Approval{CallID: "c1", Tool: "fs__write_file", Deadline: time.Now().Add(time.Hour)}})
		settle(t, r, th.Key)
		b := r.out.board(th.Key, nil)
		b.update(func(rec *boardRecord) { rec.PinUnavailable, rec.FailureSaid = true, true })
		if del {
			if err := r.Delete(context.Background(), th.Key, "op"); err != nil {
				t.Fatal(err)
			}
		} else if err := r.Handle(context.Background(), Incoming{Thread: th, Text: "reset", AuthorID: "U1"}); !errors.Is(err, ErrRejected) {
			t.Fatal(err)
		}
		settle(t, r, th.Key)
		rec, _ := b.state()
		if rec.PinUnavailable || rec.FailureSaid || !rec.Ref.IsZero() {
			t.Errorf("delete=%t: record after: %+v", del, rec)
		}
		// The cards and the listing have records of their own now.
		if cards := r.Cards(th.Key); len(cards) != 0 {
			t.Errorf("delete=%t: cards after: %+v, want none", del, cards)
		}
		if r.Visible(th.Key) == del {
			t.Errorf("delete=%t: visible after: %t", del, !del)
		}
		if p.count("unpin") != 1 {
			t.Errorf("delete=%t: calls %+v, want the plan message unpinned", del, p.calls)
		}
		if c := p.card("card1"); c.Open() {
			t.Errorf("delete=%t: the open card shows %+v, want it closed as not run", del, c)
		}
		r.Close()
	}
}

// TestStopBeforeTheBoardSeesTheTurn: the runner can stop a turn a moment
// before its TurnStarted reaches the board; someone who may not stop it
// is refused in that moment too.
func TestStopBeforeTheBoardSeesTheTurn(t *testing.T) {
	p := &cardPlatform{}
	run := &actRunner{}
	r := NewRouter(Options{Runner: run, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	if err := r.Handle(context.Background(), Incoming{Thread: th, Text: "plan it", AuthorID: "U1"}); err != nil {
		t.Fatal(err)
	}
	// The agent started the turn (its checkpoint has it, with U1 as
	// the session's starter), but no TurnStarted reached the board yet.
	run.Note(agent.Event{Session: th.Key, Kind: agent.TurnStarted, Requester: "U1"})
	err := r.Handle(context.Background(), Incoming{Thread: th, Text: "stop", AuthorID: "U2"})
	var rej *Rejection
	if !errors.As(err, &rej) || strings.Contains(rej.Reason, "Stopping") {
		t.Errorf("U2's stop answered %v", err)
	}
	if stops, _ := run.counts(); stops != 0 {
		t.Errorf("U2 stopped U1's starting turn (%d stops)", stops)
	}
	if err := r.Handle(context.Background(), Incoming{Thread: th, Text: "stop", AuthorID: "U1"}); !errors.As(err, &rej) || !strings.Contains(rej.Reason, "Stopping") {
		t.Errorf("U1's own stop answered %v", err)
	}
}

// TestEditInFlightWhileANewTaskStarts: a later turn's edit of the finished
// plan to "working" is still in flight when that turn starts a new task.
// The old message must end on its final content and the new one must be
// posted, pinned and shown as itself (the in-flight edit once marked the
// new record as showing the old content, and pinned the wrong message).
func TestEditInFlightWhileANewTaskStarts(t *testing.T) {
	editing, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hold := false
	var mu sync.Mutex
	p := &cardPlatform{}
	p.hold = func(op string) {
		mu.Lock()
		h := hold
		mu.Unlock()
		if op == "edit" && h {
			once.Do(func() { close(editing); <-release })
		}
	}
	r := NewRouter(Options{Runner: &actRunner{}, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond})
	t.Cleanup(r.Close)
	key := "test/1"
	r.out.board(key, &Thread{Platform: "test", Key: key, Channel: "C1"})
	observe(r, agent.Event{Session: key, Kind: agent.TurnStarted, Requester: "U1"})
	observe(r, agent.Event{Session: key, Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.Completed)})
	observe(r, agent.Event{Session: key, Kind: agent.TurnEnded, Outcome: agent.Done})
	settle(t, r, key)
	final := p.plan("m1")
	mu.Lock()
	hold = true
	mu.Unlock()
	observe(r, agent.Event{Session: key, Kind: agent.TurnStarted, Requester: "U1"}) // edits m1 to working
	select {
	case <-editing:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the edit to working never started")
	}
	other := todo.NewSnapshot([]todo.Item{{Content: "another task", Status: todo.InProgress}})
	observe(r, agent.Event{Session: key, Kind: agent.PlanChanged, Revision: 2, Plan: other})
	close(release)
	settle(t, r, key)
	if got := p.plan("m1"); got.Stoppable || got.State != final.State {
		t.Errorf("the old message ends as %q (stoppable %t), want its final %q", got.Footer(), got.Stoppable, final.Footer())
	}
	shown, ref := r.out.board(key, nil).Shown()
	if ref.ID != "m2" || shown.Revision != 2 || len(shown.Items) != 1 || shown.Items[0].Content != "another task" {
		t.Errorf("the board shows %+v on %s, want revision 2 of the new task on m2", shown, ref.ID)
	}
	pinned := 0
	for _, c := range p.calls {
		if c.Op == "pin" && c.Ref == "m2" {
			pinned++
		}
	}
	if pinned != 1 {
		t.Errorf("calls %+v: want m2 pinned once", p.calls)
	}
}

// inboxRunner keeps what it is given, as the agent's store queues it.
type inboxRunner struct {
	chattest.Runner
	mu  sync.Mutex
	got []agent.Inbound
}

func (o *inboxRunner) Submit(_ context.Context, _ string, in agent.Inbound) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, in)
	return nil
}

// TestMessageCarriesItsID: the message the agent queues names the
// platform's message, which its turn's entries carry (Event.Trigger):
// the answer replies to it, from the log, and a late redelivery the
// store refuses changes nothing the thread sees.
func TestMessageCarriesItsID(t *testing.T) {
	run := &inboxRunner{}
	r := NewRouter(Options{Runner: run, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": &cardPlatform{}}})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	if err := r.Handle(context.Background(), Incoming{Thread: th, Text: "first", MessageID: "m1", Event: "e1", AuthorID: "U1", Sync: true}); err != nil {
		t.Fatal(err)
	}
	run.mu.Lock()
	defer run.mu.Unlock()
	if len(run.got) != 1 || run.got[0].MessageID != "m1" || run.got[0].AuthorID != "U1" {
		t.Errorf("queued %+v, want message m1 of U1", run.got)
	}
}

// TestFirstMessageStoresTheSession: a new session's board record is
// stored before its first message is queued, so that the process (or
// replica) that runs the turn after a kill finds the session, and a
// follow-up held on another replica is taken by it.
func TestFirstMessageStoresTheSession(t *testing.T) {
	boards := &chattest.Boards{}
	r := NewRouter(Options{Runner: &inboxRunner{}, Store: boards, Platforms: map[string]Platform{"test": &cardPlatform{}}})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1"}
	if err := r.Handle(context.Background(), Incoming{Thread: th, Text: "plan it", MessageID: "m1", AuthorID: "U1", Sync: true}); err != nil {
		t.Fatal(err)
	}
	if raw, err := boards.Board(context.Background(), th.Key); err != nil || len(raw) == 0 {
		t.Errorf("board record after the first message: %q, %v; want it stored", raw, err)
	}
}
