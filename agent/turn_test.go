package agent_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	bolt "go.etcd.io/bbolt"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/store"
)

// waitRequests polls until the fake has seen n requests.
func waitRequests(t *testing.T, fake *fakeopenai.Server, n int) []openai.ChatCompletionRequest {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		reqs := fake.Requests()
		if len(reqs) >= n {
			return reqs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the model saw %d requests, want %d", len(reqs), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestEmptyAnswerKeepsThreadUsable(t *testing.T) {
	fake := &fakeopenai.Server{}
	fake.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		if len(req.Messages) <= 2 {
			return fakeopenai.Reply{Reasoning: "let me think about it"}
		}
		return fakeopenai.Reply{Content: "second answer", Reasoning: "more thinking"}
	}
	h := newHarness(t, fake, harnessOpts{})
	h.send(t, "web/empty", "first")
	events := h.waitEnd(t, "web/empty")
	var replied string
	for _, e := range events {
		if e.Kind == agent.TurnEnded && e.Outcome == agent.Done {
			replied = e.Text
		}
	}
	if replied != agent.EmptyAnswer {
		t.Errorf("reply to an empty answer = %q, want %q", replied, agent.EmptyAnswer)
	}
	h.send(t, "web/empty", "second")
	events = h.waitEnd(t, "web/empty")
	if end := events[len(events)-1]; end.Outcome != agent.Done {
		t.Fatalf("turn after an empty answer: outcome %s (%v), want done", end.Outcome, end.Err)
	}
	reqs := fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("got %d accepted requests, want 2", len(reqs))
	}
	for _, m := range reqs[1].Messages {
		if m.ReasoningContent != "" {
			t.Errorf("reasoning sent back to the model: %q", m.ReasoningContent)
		}
		if m.Role == openai.ChatMessageRoleAssistant && m.Content != agent.EmptyAnswer {
			t.Errorf("stored empty answer sent as %q, want the placeholder", m.Content)
		}
	}
	_, hist, _, err := h.db.Load(context.Background(), "web/empty")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range hist {
		if e.Message.ReasoningContent != "" {
			t.Errorf("reasoning stored in history: %q", e.Message.ReasoningContent)
		}
	}
}

func TestStopKeepsMessagesQueuedBeforeIt(t *testing.T) {
	fake := &fakeopenai.Server{}
	release := make(chan struct{})
	fake.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		last := req.Messages[len(req.Messages)-1].Content
		if last == "long task" {
			<-release
		}
		return fakeopenai.Reply{Content: "answered: " + last}
	}
	h := newHarness(t, fake, harnessOpts{timeout: 10 * time.Second})
	defer close(release)
	h.send(t, "web/stopq", "long task")
	waitRequests(t, fake, 1)
	h.send(t, "web/stopq", "queued before stop")
	if !h.runner.Stop("web/stopq", "ann") {
		t.Fatal("Stop found no running session")
	}
	events := h.waitEnd(t, "web/stopq")
	if end := events[len(events)-1]; end.Outcome != agent.Stopped {
		t.Fatalf("first turn outcome %s, want stopped", end.Outcome)
	}
	events = h.waitEnd(t, "web/stopq")
	end := events[len(events)-1]
	if end.Outcome != agent.Done {
		t.Fatalf("queued message's turn: outcome %s (%q), want done", end.Outcome, end.Text)
	}
	reqs := fake.Requests()
	last := reqs[len(reqs)-1].Messages
	if got := last[len(last)-1].Content; got != "queued before stop" {
		t.Errorf("last request ends with %q, want the queued message", got)
	}
}

func TestUnreadableSessionIsReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pinplan.db")
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Enqueue(context.Background(), "web/bad", agent.Inbound{Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	raw, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = raw.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("sessions")).Bucket([]byte("web/bad")).Put([]byte("record"), []byte("{not json"))
	})
	raw.Close()
	if err != nil {
		t.Fatal(err)
	}
	db, err = store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	fake := &fakeopenai.Server{}
	h := newHarness(t, fake, harnessOpts{db: db})
	h.send(t, "web/bad", "are you there?")
	events := h.waitEnd(t, "web/bad")
	end := events[len(events)-1]
	if end.Outcome != agent.Failed || !strings.Contains(end.Text, "couldn't read this thread's saved session") || end.Err == nil {
		t.Errorf("got outcome %s text %q err %v, want failed with an explanation", end.Outcome, end.Text, end.Err)
	}
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("the model got %d requests for an unreadable session", n)
	}
	if _, err := db.Inbox(context.Background(), "web/bad"); err != nil {
		t.Fatal(err)
	}
}

// TestLogIsWrittenWithTheRounds: every event a turn publishes that a
// restart must not lose is an entry of the session's log, numbered 1, 2,
// ... without gaps, in the store before it is published (DESIGN §1): the
// stored entries are the published ones, in order. Turn reports what the
// store has: a waiting turn runs, with its requester; a stopped one no
// longer does. Events that mean nothing after a restart (a tool in
// progress) are published unnumbered and not stored.
func TestLogIsWrittenWithTheRounds(t *testing.T) {
	var runs atomic.Int32
	fake := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		if strings.Contains(req.Messages[len(req.Messages)-1].Content, "write") {
			return writeOnce(req)
		}
		return fakeopenai.Reply{Content: "the answer"}
	}}
	h := newHarness(t, fake, harnessOpts{tools: []agent.Tool{writeTool(&runs)}})
	ctx := context.Background()
	if tr, err := h.runner.Turn(ctx, "web/end"); err != nil || tr.Running {
		t.Fatalf("Turn of a session never run = %+v, %v; want none running", tr, err)
	}
	var published []agent.Event
	logged := func(events []agent.Event) {
		for _, e := range events {
			if e.Seq > 0 {
				published = append(published, e)
			}
		}
	}
	h.send(t, "web/end", "question")
	logged(h.waitEnd(t, "web/end"))

	if err := h.runner.Submit(ctx, "web/end", agent.Inbound{Text: "write the notes", Author: "ann", AuthorID: "U1"}); err != nil {
		t.Fatal(err)
	}
	var second []agent.Event
	for {
		e := <-h.ch("web/end")
		second = append(second, e)
		if e.Kind == agent.ApprovalNeeded {
			break
		}
	}
	if tr, err := h.runner.Turn(ctx, "web/end"); err != nil || !tr.Running || tr.Requester != "U1" || tr.Turn != 2 {
		t.Errorf("Turn while turn 2 waits = %+v, %v; want turn 2 running for U1", tr, err)
	}
	if !h.runner.Stop("web/end", "bob") {
		t.Fatal("the waiting turn was not stopped")
	}
	second = append(second, h.waitEnd(t, "web/end")...)
	logged(second)
	if tr, err := h.runner.Turn(ctx, "web/end"); err != nil || tr.Running {
		t.Errorf("Turn after the stop = %+v, %v; want none running", tr, err)
	}

	stored, err := h.db.Log(ctx, "web/end", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != len(published) {
		t.Fatalf("%d entries stored, %d published with a number", len(stored), len(published))
	}
	var kinds []agent.EventKind
	for i, l := range stored {
		e := published[i]
		if l.Seq != int64(i+1) || e.Seq != l.Seq || e.Kind != l.Kind || e.Turn != l.Turn || e.Text != l.Text || e.Outcome != l.Outcome {
			t.Errorf("entry %d: stored %+v, published %+v", i+1, l, e)
		}
		kinds = append(kinds, l.Kind)
	}
	// The stopped call is answered "stopped": its round's evidence, then the end.
	want := []agent.EventKind{agent.TurnStarted, agent.TurnEnded, agent.TurnStarted, agent.ApprovalNeeded, agent.ApprovalDecided, agent.EvidenceChanged, agent.TurnEnded}
	if !slices.Equal(kinds, want) {
		t.Errorf("logged kinds %v, want %v", kinds, want)
	}
	if last := stored[len(stored)-1]; last.Outcome != agent.Stopped || last.StoppedBy != "bob" || last.Turn != 2 {
		t.Errorf("last entry %+v, want turn 2 stopped by bob", last)
	}
	if after, err := h.db.Log(ctx, "web/end", 4); err != nil || len(after) != 3 || after[0].Seq != 5 {
		t.Errorf("Log after 4 = %d entries (%v), want 5 to 7", len(after), err)
	}
	if runs.Load() != 0 {
		t.Error("the stopped call ran")
	}
}

// TestTurnsCarryTheirMessage: every entry of a turn names the message it
// began on (Event.Trigger, stored in the log), and the session's starter
// is its first turn's requester until a reset begins a new session:
// what the thread's answer replies to, and who may stop and reset, are
// read from the agent's record, never kept beside it.
func TestTurnsCarryTheirMessage(t *testing.T) {
	fake := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		return fakeopenai.Reply{Content: "the answer"}
	}}
	h := newHarness(t, fake, harnessOpts{})
	ctx := context.Background()
	const key = "web/trig"
	turn := func(user, msg string) []agent.Event {
		t.Helper()
		if err := h.runner.Submit(ctx, key, agent.Inbound{Text: "question from " + user, AuthorID: user, MessageID: msg}); err != nil {
			t.Fatal(err)
		}
		return h.waitEnd(t, key)
	}
	check := func(events []agent.Event, msg, requester, starter string) {
		t.Helper()
		n := 0
		for _, e := range events {
			if e.Seq > 0 || e.Kind == agent.TextDelta {
				n++
				if e.Trigger != msg {
					t.Errorf("%v entry %d names message %q, want %q", e.Kind, e.Seq, e.Trigger, msg)
				}
			}
		}
		if n == 0 {
			t.Fatalf("no entries in %+v", events)
		}
		if tr, err := h.runner.Turn(ctx, key); err != nil || tr.Requester != requester || tr.Starter != starter {
			t.Errorf("Turn = %+v, %v; want requester %s, starter %s", tr, err, requester, starter)
		}
	}
	check(turn("U1", "m1"), "m1", "U1", "U1")
	check(turn("U2", "m2"), "m2", "U2", "U1")
	stored, err := h.db.Log(ctx, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) == 0 || stored[len(stored)-1].Trigger != "m2" {
		t.Errorf("stored entries %+v, want the last naming m2", stored)
	}
	if err := h.runner.Reset(ctx, key, "U2"); err != nil {
		t.Fatal(err)
	}
	check(turn("U3", "m3"), "m3", "U3", "U3")
}

// TestQueuedMessagesInTheirSentOrder: messages queued together reach the
// model in the order the platform numbered them (Slack's ts, Discord's
// snowflakes), whatever order they were queued in: with replicas a reply
// that waited for its thread's session can be queued after the next
// one (DESIGN §14). Messages without an id keep their places.
func TestQueuedMessagesInTheirSentOrder(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(filepath.Join(t.TempDir(), "pinplan.db"), store.Options{BatchDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	const key = "slack/T1/C1/1700000500.000100"
	for _, in := range []agent.Inbound{{Text: "task", MessageID: "1700000500.000100"}, {Text: "follow-up 2", MessageID: "1700000500.000202"},
		{Text: "no id"}, {Text: "follow-up 1", MessageID: "1700000500.000201"}, {Text: "follow-up 3", MessageID: "1700000500.000203"}} {
		if _, err := db.Enqueue(ctx, key, in); err != nil {
			t.Fatal(err)
		}
	}
	fake := &fakeopenai.Server{Respond: func(*openai.ChatCompletionRequest) fakeopenai.Reply { return fakeopenai.Reply{Content: "done"} }}
	h := newHarness(t, fake, harnessOpts{db: db})
	h.runner.Wake(key)
	h.waitEnd(t, key)
	reqs := fake.Requests()
	if len(reqs) == 0 {
		t.Fatal("no model request")
	}
	var got []string
	for _, m := range reqs[0].Messages {
		if m.Role == openai.ChatMessageRoleUser {
			got = append(got, m.Content)
		}
	}
	want := []string{"task", "follow-up 1", "no id", "follow-up 2", "follow-up 3"}
	if len(got) != len(want) {
		t.Fatalf("user messages %q, want %q", got, want)
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Fatalf("user messages %q, want %q", got, want)
		}
	}
}
