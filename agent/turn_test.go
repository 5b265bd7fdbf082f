package agent_test

import (
	"context"
	"path/filepath"
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

// TestEndingReportsTheLastTurn: the end of a turn is kept with the commit
// that ends it, so a subscriber whose TurnEnded was cut off by a kill
// reads it back: the answer of a Done turn, the outcome and who stopped
// a stopped one; nothing while a turn waits.
func TestEndingReportsTheLastTurn(t *testing.T) {
	var runs atomic.Int32
	fake := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		if strings.Contains(req.Messages[len(req.Messages)-1].Content, "write") {
			return writeOnce(req)
		}
		return fakeopenai.Reply{Content: "the answer"}
	}}
	h := newHarness(t, fake, harnessOpts{tools: []agent.Tool{writeTool(&runs)}})
	ctx := context.Background()
	if _, ok, err := h.runner.Ending(ctx, "web/end"); ok || err != nil {
		t.Fatalf("Ending of a session never run = ok %v, %v; want nothing", ok, err)
	}

	h.send(t, "web/end", "question")
	events := h.waitEnd(t, "web/end")
	live := events[len(events)-1]
	got, ok, err := h.runner.Ending(ctx, "web/end")
	if err != nil || !ok {
		t.Fatalf("Ending after a finished turn = ok %v, %v", ok, err)
	}
	if got.Kind != agent.TurnEnded || got.Turn != 1 || got.Outcome != agent.Done || got.Text != "the answer" || got.Turn != live.Turn || got.Text != live.Text {
		t.Errorf("Ending = %+v, want turn 1 done with the answer, as published (%+v)", got, live)
	}

	if err := h.runner.Submit(ctx, "web/end", agent.Inbound{Text: "write the notes", Author: "ann", AuthorID: "U1"}); err != nil {
		t.Fatal(err)
	}
	h.waitKind(t, "web/end", agent.ApprovalNeeded)
	if e, ok, err := h.runner.Ending(ctx, "web/end"); ok || err != nil {
		t.Errorf("Ending while turn 2 waits = %+v, ok %v, %v; want nothing", e, ok, err)
	}
	if !h.runner.Stop("web/end", "bob") {
		t.Fatal("the waiting turn was not stopped")
	}
	live = h.waitKind(t, "web/end", agent.TurnEnded)
	got, ok, err = h.runner.Ending(ctx, "web/end")
	if err != nil || !ok || got.Turn != 2 || got.Outcome != agent.Stopped || got.StoppedBy != live.StoppedBy || got.StoppedBy == "" || got.Text != live.Text {
		t.Errorf("Ending after a stop = %+v, ok %v, %v; want turn 2 stopped as published (%+v)", got, ok, err, live)
	}
	if runs.Load() != 0 {
		t.Error("the stopped call ran")
	}
}
