package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/store"
	"github.com/pinplan/pinplan/todo"
)

// damagedStore is the bbolt store with one session's calls of one method
// failing as they do when that session's pages are damaged.
type damagedStore struct {
	*store.DB
	key    string // the damaged session
	method string // "Load", "Commit" or "Inbox"
	// skip is how many calls pass before the damage; failures is how
	// many fail then (0: all).
	skip, failures int
	mu             sync.Mutex // guards skip and failed
	failed         int
}

func (d *damagedStore) damage(method, key string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if method != d.method || key != d.key {
		return nil
	}
	if d.skip > 0 {
		d.skip--
		return nil
	}
	if d.failures > 0 && d.failed >= d.failures {
		return nil
	}
	d.failed++
	return fmt.Errorf("store: %s %s: /data/pinplan.db: %w (page 7: unexpected type); to restore it, stop pinplan, copy your latest backup over /data/pinplan.db", method, key, store.ErrCorrupt)
}

func (d *damagedStore) Load(ctx context.Context, key string) (*agent.Checkpoint, []agent.Entry, []agent.Inbound, error) {
	if err := d.damage("Load", key); err != nil {
		return nil, nil, nil, err
	}
	return d.DB.Load(ctx, key)
}

func (d *damagedStore) Commit(ctx context.Context, r *agent.Round) error {
	if err := d.damage("Commit", r.Checkpoint.Key); err != nil {
		return err
	}
	return d.DB.Commit(ctx, r)
}

func (d *damagedStore) Inbox(ctx context.Context, key string) ([]agent.Inbound, error) {
	if err := d.damage("Inbox", key); err != nil {
		return nil, err
	}
	return d.DB.Inbox(ctx, key)
}

// planThenAnswer writes a plan, then answers once the plan's result came.
func planThenAnswer(req *openai.ChatCompletionRequest) fakeopenai.Reply {
	if last := req.Messages[len(req.Messages)-1]; last.Role == openai.ChatMessageRoleTool {
		return fakeopenai.Reply{Content: "done"}
	}
	return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: todo.ToolName, Arguments: todo.Encode([]todo.Item{{Content: "answer", Status: todo.InProgress}})}}}
}

// damagedHarness runs a runner on st, with opts besides, against a fake
// model that plans, then answers (or answers with respond).
func damagedHarness(t *testing.T, st *damagedStore, opts agent.Options, respond ...func(*openai.ChatCompletionRequest) fakeopenai.Reply) *harness {
	t.Helper()
	fake := &fakeopenai.Server{Respond: planThenAnswer}
	if len(respond) > 0 {
		fake.Respond = respond[0]
	}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	model := agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: srv.URL + "/v1", APIKey: "sk-test", Timeout: 5 * time.Second, BaseBackoff: time.Millisecond})
	h := &harness{fake: fake, db: st.DB, events: map[string]chan agent.Event{}, model: model}
	opts.Model, opts.Store, opts.ModelName = model, st, "fake"
	opts.Events = publishTo(func(e agent.Event) { h.ch(e.Session) <- e })
	var err error
	if h.runner, err = agent.NewRunner(opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.runner.Close)
	return h
}

// TestDamagedSessionStopsAlone: a store error for one session (a damaged
// page in its part of the file) ends that session's turn with a message
// for its thread; the other sessions go on. (A Commit that fails for good
// is TestUnsavedSessionTriedAgain's.)
func TestDamagedSessionStopsAlone(t *testing.T) {
	for _, method := range []string{"Load", "Inbox"} {
		t.Run(method, func(t *testing.T) {
			db, _ := openDB(t)
			st := &damagedStore{DB: db, key: "web/bad", method: method}
			h := damagedHarness(t, st, agent.Options{})

			h.send(t, "web/bad", "hello")
			h.send(t, "web/good", "hello")
			events := h.waitEnd(t, "web/bad")
			end := events[len(events)-1]
			if end.Outcome != agent.Failed || end.Text == "" || !errors.Is(end.Err, store.ErrCorrupt) {
				t.Errorf("damaged session: got outcome %s, text %q, err %v; want failed, a message for the thread and the store's error", end.Outcome, end.Text, end.Err)
			}
			if method == "Inbox" && end.Seq == 0 {
				t.Errorf("the ending after an unreadable inbox was published with no log entry behind it")
			}
			for i, text := range []string{"first", "second"} {
				if i > 0 {
					h.send(t, "web/good", text)
				}
				events := h.waitEnd(t, "web/good")
				if end := events[len(events)-1]; end.Outcome != agent.Done {
					t.Errorf("healthy session, turn %d: got outcome %s (%v), want done", i+1, end.Outcome, end.Err)
				}
			}
		})
	}
}

// TestUnsavedRoundEndsInTheLog: a round the store refuses is not shown:
// the turn ends as failed on the last saved state, and that ending is in
// the session's log like every event people see (before, a TurnEnded was
// published that no log entry backed, while the stored turn still said
// running).
func TestUnsavedRoundEndsInTheLog(t *testing.T) {
	db, _ := openDB(t)
	// The turn's start is saved; its first round is refused.
	st := &damagedStore{DB: db, key: "web/bad", method: "Commit", skip: 1, failures: 1}
	h := damagedHarness(t, st, agent.Options{})
	h.send(t, "web/bad", "hello")
	events := h.waitEnd(t, "web/bad")
	end := events[len(events)-1]
	if end.Outcome != agent.Failed || !strings.Contains(end.Text, "could not save") || !errors.Is(end.Err, store.ErrCorrupt) {
		t.Errorf("the ending: outcome %s, text %q, err %v; want failed, said, with the store's error", end.Outcome, end.Text, end.Err)
	}
	if end.Seq == 0 {
		t.Fatalf("the ending was published with no log entry behind it")
	}
	logged, err := db.Log(context.Background(), "web/bad", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(logged) == 0 || logged[len(logged)-1].Seq != end.Seq {
		t.Errorf("the log ends at %+v, want the published ending %d", logged, end.Seq)
	}
	cp, _, _, err := db.Load(context.Background(), "web/bad")
	if err != nil || cp == nil || cp.State != agent.Idle {
		t.Errorf("the stored turn after the ending: %+v, %v; want idle", cp, err)
	}
}

// TestUnsavedSessionTriedAgain: when the store refuses the round and the
// ending after it, nothing is shown (nothing is in the log), the stored
// turn stays as last saved, and the session is tried again from there
// until the store takes it.
func TestUnsavedSessionTriedAgain(t *testing.T) {
	db, _ := openDB(t)
	// The start is saved; then the round and its ending are refused.
	st := &damagedStore{DB: db, key: "web/bad", method: "Commit", skip: 1, failures: 2}
	h := damagedHarness(t, st, agent.Options{UnsavedRetry: 50 * time.Millisecond})
	h.send(t, "web/bad", "hello")
	events := h.waitEnd(t, "web/bad")
	for _, e := range events {
		// (A resumed turn's start is said without one: it records
		// nothing new.)
		if e.Seq == 0 && !e.Resumed {
			t.Errorf("%v published with no log entry behind it: %+v", e.Kind, e)
		}
	}
	if end := events[len(events)-1]; end.Outcome != agent.Done {
		t.Errorf("the turn tried again ended %s (%q), want done", end.Outcome, end.Text)
	}
}

// TestUnsavedRoundStaysCharged: the tokens of a request whose round the
// store refused stay charged to the requester's day once the turn ends
// on its last saved state: the ending gives back only what was reserved
// and not used (DESIGN §18). Before, it gave back the whole reservation,
// so a flaky store let a person pass the budget.
func TestUnsavedRoundStaysCharged(t *testing.T) {
	db, _ := openDB(t)
	// The turn's start is saved; its first round is refused.
	st := &damagedStore{DB: db, key: "slack/T1/C1/1.1", method: "Commit", skip: 1, failures: 1}
	h := damagedHarness(t, st, agent.Options{UserTokens: 1_000_000}, func(*openai.ChatCompletionRequest) fakeopenai.Reply {
		return fakeopenai.Reply{Content: "done", Usage: &openai.Usage{PromptTokens: 600, CompletionTokens: 400, TotalTokens: 1000}}
	})
	if err := h.runner.Submit(context.Background(), "slack/T1/C1/1.1", agent.Inbound{Text: "hello", AuthorID: "U1"}); err != nil {
		t.Fatal(err)
	}
	events := h.waitEnd(t, "slack/T1/C1/1.1")
	if end := events[len(events)-1]; end.Outcome != agent.Failed {
		t.Fatalf("the turn ended %s (%q), want failed on the refused save", end.Outcome, end.Text)
	}
	if n, err := db.Spent(context.Background(), "slack/U1", agent.Day(time.Now())); err != nil || n != 1000 {
		t.Errorf("the day's count after the unsaved round = %d, %v; want the 1,000 tokens the request used", n, err)
	}
}
