package replica

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/pinplan/pinplan/adapters/slack"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/etcdtest"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/todo"
)

// TestRetryAfterHoldsEveryReplica: a Retry-After one replica's Slack
// adapter meets holds the other replica's calls of that method too
// (DESIGN §14: the budget is the workspace's), so the other's edit waits
// it out instead of meeting the limit again. Before, each replica held
// only its own calls: the soak on three replicas counted 215 calls inside
// a Retry-After.
func TestRetryAfterHoldsEveryReplica(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cli := etcdtest.Start(t).Client(t)
	fake := &fakeslack.Server{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	var adapters []*slack.Adapter
	for _, id := range []string{"r1", "r2"} {
		rep, _ := replicaOn(t, cli, id, "slack")
		a := slack.New(slack.Options{BotToken: "xoxb-t", APIURL: srv.URL + "/api/"})
		ShareHolds(ctx, rep, slog.New(slog.DiscardHandler), a)
		adapters = append(adapters, a)
	}
	p := chat.Plan{Revision: 1, Updated: time.Now(), Items: []todo.Item{{Content: "a", Status: todo.Pending}}}
	var threads []chat.Thread
	var refs []chat.MessageRef
	for i, ch := range []string{"C1", "C2"} {
		th := chat.Thread{Platform: "slack", Key: "slack/T1/" + ch + "/1.1", Channel: ch, ThreadID: "1.1"}
		ref, err := adapters[i].PostPlan(ctx, th, p)
		if err != nil {
			t.Fatal(err)
		}
		threads, refs = append(threads, th), append(refs, ref)
	}
	fake.Limit("chat.update", 1, 2*time.Second)
	if err := adapters[0].EditPlan(ctx, threads[0], refs[0], p); err != nil {
		t.Fatal(err)
	}
	var rl *chat.RateLimitError
	if err := adapters[0].EditPlan(ctx, threads[0], refs[0], p); !errors.As(err, &rl) {
		t.Fatalf("r1's second edit within the window: %v, want a rate limit", err)
	}
	time.Sleep(300 * time.Millisecond) // the hold reaches r2 through an etcd watch
	if err := adapters[1].EditPlan(context.Background(), threads[1], refs[1], p); err != nil {
		t.Fatalf("r2's edit after r1's 429: %v, want it to wait the Retry-After out and land", err)
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestRetryAfterHeldByALaterReplica: a replica that starts during a
// Retry-After another one met learns of it at its start, not only of
// those said after it began to watch.
func TestRetryAfterHeldByALaterReplica(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cli := etcdtest.Start(t).Client(t)
	r1, _ := replicaOn(t, cli, "r1", "slack")
	until := time.Now().Add(time.Hour).Round(0)
	if err := r1.Say(ctx, "hold", "chat.update", []byte(until.UTC().Format(time.RFC3339Nano))); err != nil {
		t.Fatal(err)
	}
	r2, _ := replicaOn(t, cli, "r2", "slack")
	h := &holds{}
	ShareHolds(ctx, r2, slog.New(slog.DiscardHandler), h)
	if got := h.get("chat.update"); !got.Equal(until) {
		t.Errorf("r2's hold of chat.update = %v, want %v", got, until)
	}
}

// holds records the holds a replica is told of.
type holds struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func (h *holds) HoldRetryAfter(key string, until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]time.Time{}
	}
	h.m[key] = until
}

func (h *holds) OnRetryAfter(func(string, time.Time)) {}

func (h *holds) get(key string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[key]
}
