package replica

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pinplan/pinplan/adapters/slack"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/etcdtest"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/internal/inboxtest"
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
		a := slack.New(slack.Options{BotToken: "xoxb-t", APIURL: srv.URL + "/api/", Handler: &inboxtest.Inbox{}})
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
