package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
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
}

func (d *damagedStore) damage(method, key string) error {
	if method != d.method || key != d.key {
		return nil
	}
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

// TestDamagedSessionStopsAlone: a store error for one session (a damaged
// page in its part of the file) ends that session's turn with a message
// for its thread; the other sessions go on.
func TestDamagedSessionStopsAlone(t *testing.T) {
	for _, method := range []string{"Load", "Commit", "Inbox"} {
		t.Run(method, func(t *testing.T) {
			db, _ := openDB(t)
			st := &damagedStore{DB: db, key: "web/bad", method: method}
			fake := &fakeopenai.Server{Respond: planThenAnswer}
			srv := httptest.NewServer(fake)
			t.Cleanup(srv.Close)
			model := agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: srv.URL + "/v1", APIKey: "sk-test", Timeout: 5 * time.Second, BaseBackoff: time.Millisecond})
			h := &harness{fake: fake, db: db, events: map[string]chan agent.Event{}, model: model}
			var err error
			h.runner, err = agent.NewRunner(agent.Options{Model: model, Store: st, ModelName: "fake",
				Events: publishTo(func(e agent.Event) { h.ch(e.Session) <- e })})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(h.runner.Close)

			h.send(t, "web/bad", "hello")
			h.send(t, "web/good", "hello")
			events := h.waitEnd(t, "web/bad")
			end := events[len(events)-1]
			if end.Outcome != agent.Failed || end.Text == "" || !errors.Is(end.Err, store.ErrCorrupt) {
				t.Errorf("damaged session: got outcome %s, text %q, err %v; want failed, a message for the thread and the store's error", end.Outcome, end.Text, end.Err)
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
