package replica

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/etcdstore"
	"github.com/pinplan/pinplan/internal/etcdtest"
)

const prefix = "/pinplan/"

// fakeRouter records the events a Handler gives its replica's router.
type fakeRouter struct {
	mu      sync.Mutex
	handled []chat.Incoming
	resumed []string
	slow    time.Duration // how long Handle takes
}

func (r *fakeRouter) Handle(_ context.Context, in chat.Incoming) error {
	time.Sleep(r.slow)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handled = append(r.handled, in)
	return nil
}

func (r *fakeRouter) texts() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, in := range r.handled {
		out = append(out, in.Text)
	}
	return out
}

func (r *fakeRouter) ResumeSession(_ context.Context, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resumed = append(r.resumed, key)
}

func (*fakeRouter) Known(string) bool                                  { return false }
func (*fakeRouter) Click(context.Context, chat.Click) chat.ClickResult { return chat.ClickResult{} }
func (*fakeRouter) Cards(string) []chat.CardInfo                       { return nil }
func (*fakeRouter) Hold(context.Context, chat.Incoming) (bool, error)  { return false, nil }
func (*fakeRouter) Rename(string, string) (chat.Thread, bool)          { return chat.Thread{}, false }
func (*fakeRouter) Delete(context.Context, string, string) error       { return nil }
func (*fakeRouter) Visible(string) bool                                { return false }
func (*fakeRouter) Thread(string) (chat.Thread, bool)                  { return chat.Thread{}, false }
func (*fakeRouter) StopSession(context.Context, chat.Click) chat.ClickResult {
	return chat.ClickResult{}
}
func (*fakeRouter) Forget(string) {}
func (*fakeRouter) Post(ctx context.Context, _ chat.Thread, send func(context.Context) error) error {
	return send(ctx)
}

func (*fakeRouter) Tell(context.Context, chat.Thread, string, string) error {
	return nil
}

// fakeTurns is a runner that runs nothing.
type fakeTurns struct{}

func (fakeTurns) Wake(string)              {}
func (fakeTurns) Stop(string, string) bool { return true }

// replicaOn starts a replica on cli that runs platforms (nil: every one),
// with its store.
func replicaOn(t *testing.T, cli *clientv3.Client, id string, platforms ...string) (*etcdstore.Replica, *etcdstore.Store) {
	t.Helper()
	return replicaTaking(t, cli, id, nil, platforms...)
}

// replicaTaking is replicaOn with onTake called for each session taken.
func replicaTaking(t *testing.T, cli *clientv3.Client, id string, onTake func(string), platforms ...string) (*etcdstore.Replica, *etcdstore.Store) {
	t.Helper()
	ctx := context.Background()
	rep, err := etcdstore.NewReplica(ctx, cli, etcdstore.ReplicaOptions{Prefix: prefix, ID: id, TTL: 2 * time.Second, Platforms: platforms, OnTake: onTake})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rep.Close() })
	st, err := etcdstore.New(ctx, cli, etcdstore.Options{Prefix: prefix, Replica: rep})
	if err != nil {
		t.Fatal(err)
	}
	return rep, st
}

// handler starts a replica that runs platforms and its Handler with a
// fake router, until the test ends. The replica's takes go to the
// Handler (Taken), which is made after it, through Takes, as serve wires
// them.
func handler(t *testing.T, cli *clientv3.Client, id string, platforms ...string) (*etcdstore.Replica, *Handler, *fakeRouter) {
	t.Helper()
	takes := &Takes{}
	rep, st := replicaTaking(t, cli, id, takes.Taken, platforms...)
	ctx, cancel := context.WithCancel(context.Background())
	router := &fakeRouter{}
	h := New(ctx, Options{Replica: rep, Store: st, Router: router, Runner: fakeTurns{}, Takes: takes})
	t.Cleanup(func() {
		cancel()
		h.Wait()
	})
	return rep, h, router
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func message(key, text string) chat.Incoming {
	return chat.Incoming{Thread: chat.Thread{Platform: "web", Key: key}, Text: text}
}

// TestHandOverToOwner: a message that arrives at a replica that does not
// hold its session goes, through etcd, to the router of the one that
// does, after the one that replica took the session with.
func TestHandOverToOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cli := etcdtest.Start(t).Client(t)
	repA, a, routerA := handler(t, cli, "a")
	repB, b, routerB := handler(t, cli, "b")
	for _, h := range []*Handler{a, b} {
		if _, err := h.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	const key = "web/t1"
	if err := a.Handle(ctx, message(key, "first")); err != nil {
		t.Fatal(err)
	}
	if !repA.Holds(key) {
		t.Fatal("the replica a first message reached did not take its session")
	}
	if err := b.Handle(ctx, message(key, "second")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both messages at the owner's router", func() bool { return len(routerA.texts()) == 2 })
	if got := routerA.texts(); got[0] != "first" || got[1] != "second" {
		t.Errorf("the owner's router handled %q, want first, second", got)
	}
	if got := routerB.texts(); len(got) != 0 {
		t.Errorf("the other replica's router handled %q, want nothing", got)
	}
	if repB.Holds(key) {
		t.Error("the other replica holds the session too")
	}
	waitFor(t, "the queue drained", func() bool {
		q, err := repA.Queued(ctx, key)
		return err == nil && len(q) == 0
	})
}

// TestHandleReturnsAfterTheHolderHandled: a message that makes this
// replica take its session has been handled by the router when Handle
// returns, as without replicas; so the console's fetch right after its
// POST finds the thread it made (CI saw a 404 there).
func TestHandleReturnsAfterTheHolderHandled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cli := etcdtest.Start(t).Client(t)
	rep, h, router := handler(t, cli, "a")
	if _, err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	router.mu.Lock()
	router.slow = 300 * time.Millisecond
	router.mu.Unlock()
	const key = "web/t1"
	if err := h.Handle(ctx, message(key, "first")); err != nil {
		t.Fatal(err)
	}
	if !rep.Holds(key) {
		t.Fatal("the replica did not take the session")
	}
	if got := router.texts(); len(got) != 1 || got[0] != "first" {
		t.Errorf("when Handle returned, the router had handled %q, want first", got)
	}
}

// TestScanTakesOrphanedSessions: a replica's scan at start takes a
// session with queued work that no live replica holds, of a platform it
// runs, and leaves one of a platform it does not run for a replica that
// does; so does its watch when a holder's lease ends.
func TestScanTakesOrphanedSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cli := etcdtest.Start(t).Client(t)
	const web, slack = "web/t1", "slack/T1/C1/1700000000.000100"
	queue := func(rep *etcdstore.Replica, key, text string) {
		t.Helper()
		data, err := json.Marshal(handed{Message: &chat.Incoming{Thread: chat.Thread{Platform: "web", Key: key}, Text: text}})
		if err != nil {
			t.Fatal(err)
		}
		if err := rep.Forward(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	gone, _ := replicaOn(t, cli, "gone")
	queue(gone, web, "left")
	queue(gone, slack, "left")

	rep, h, router := handler(t, cli, "web-only", "web")
	n, err := h.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || !rep.Holds(web) || rep.Holds(slack) {
		t.Errorf("scan took %d sessions (web: %v, slack: %v), want the web one alone", n, rep.Holds(web), rep.Holds(slack))
	}
	waitFor(t, "the web session's queued message handled", func() bool { return len(router.texts()) == 1 })

	// A holder's lease ends with work queued: the watch takes what this
	// replica runs.
	const web2, slack2 = "web/t2", "slack/T1/C1/1700000000.000200"
	holder, _ := replicaOn(t, cli, "holder")
	for _, key := range []string{web2, slack2} {
		if ok, err := holder.TryTake(ctx, key); err != nil || !ok {
			t.Fatalf("take %s: %v, %v", key, ok, err)
		}
		queue(holder, key, "orphaned")
	}
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the orphaned web session taken", func() bool { return rep.Holds(web2) })
	waitFor(t, "its queued message handled", func() bool { return len(router.texts()) == 2 })
	time.Sleep(200 * time.Millisecond)
	if rep.Holds(slack2) {
		t.Error("the web-only replica took an orphaned Slack session")
	}
}

// TestUnhandledEventStaysQueued: a handed-over message the router could
// not handle (no such platform on this replica) is not marked done: it
// stays first in the session's queue for a holder that can handle it.
func TestUnhandledEventStaysQueued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cli := etcdtest.Start(t).Client(t)
	rep, es := replicaOn(t, cli, "r0")
	router := chat.NewRouter(chat.Options{Store: es, Log: es, Cards: es, Listings: es, FollowUps: es, Platforms: map[string]chat.Platform{}})
	t.Cleanup(router.Close)
	x := New(ctx, Options{Replica: rep, Store: es, Router: router, Runner: fakeTurns{}, Takers: 1})
	const key = "slack/T1/C1/1700000000.000100"
	if ok, err := rep.TryTake(ctx, key); err != nil || !ok {
		t.Fatalf("take: %v, %v", ok, err)
	}
	data, err := json.Marshal(handed{Message: &chat.Incoming{Thread: chat.Thread{Platform: "slack", Key: key}, Text: "hello", Event: "Ev1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Forward(ctx, key, data); err != nil {
		t.Fatal(err)
	}
	x.drain(key)
	if q, err := rep.Queued(ctx, key); err != nil || len(q) != 1 {
		t.Errorf("queued after a message the router could not handle: %d, %v; want it kept", len(q), err)
	}
}

// fakeGateway counts how many gateways are open across the replicas.
type fakeGateway struct {
	open   *atomic.Int32 // shared by every replica's fake
	max    *atomic.Int32 // the most open at once
	isOpen atomic.Bool
	opens  atomic.Int32
}

func (g *fakeGateway) OpenGateway(context.Context) error {
	if g.isOpen.Swap(true) {
		return errors.New("opened twice")
	}
	g.opens.Add(1)
	n := g.open.Add(1)
	for m := g.max.Load(); n > m && !g.max.CompareAndSwap(m, n); m = g.max.Load() {
	}
	return nil
}

func (g *fakeGateway) CloseGateway() {
	if g.isOpen.Swap(false) {
		g.open.Add(-1)
	}
}

// The fake has one shard, the whole gateway.
func (*fakeGateway) ShardCount() int                                 { return 1 }
func (g *fakeGateway) OpenShard(ctx context.Context, _ int) error    { return g.OpenGateway(ctx) }
func (g *fakeGateway) CloseShard(int)                                { g.CloseGateway() }
func (g *fakeGateway) Start(ctx context.Context, _ chat.Inbox) error { return g.OpenGateway(ctx) }
func (*fakeGateway) StartREST(context.Context, chat.Inbox) error     { return nil }
func (g *fakeGateway) Close()                                        { g.CloseGateway() }
func (*fakeGateway) Ready() error                                    { return nil }

// TestElectionHandsOverTheGateway: of two replicas, one holds the
// gateway; when it stops, it closes the gateway and the other opens it,
// and the two never hold it at once.
func TestElectionHandsOverTheGateway(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client(t)
	var open, most atomic.Int32
	gws := []*fakeGateway{{open: &open, max: &most}, {open: &open, max: &most}}
	var elections []*Election
	var cancels []context.CancelFunc
	for i, id := range []string{"a", "b"} {
		rep, _ := replicaOn(t, cli, id)
		e := NewElection(gws[i], cli, rep, prefix, nil)
		ctx, cancel := context.WithCancel(context.Background())
		if err := e.Start(ctx, nil); err != nil {
			t.Fatal(err)
		}
		elections, cancels = append(elections, e), append(cancels, cancel)
		t.Cleanup(func() {
			cancel()
			e.Stop()
		})
		if i == 0 {
			waitFor(t, "the first replica to open the gateway", func() bool { return gws[0].isOpen.Load() })
		}
	}
	waitFor(t, "the second replica to see the first hold it", func() bool { return elections[1].Status() != "" && elections[0].Held() })
	time.Sleep(300 * time.Millisecond)
	if elections[1].Held() || gws[1].isOpen.Load() {
		t.Fatal("the second replica holds the gateway too")
	}
	cancels[0]()
	elections[0].Stop()
	if gws[0].isOpen.Load() || elections[0].Held() {
		t.Error("the stopped replica still holds the gateway")
	}
	waitFor(t, "the second replica to open the gateway", func() bool { return gws[1].isOpen.Load() && elections[1].Held() })
	if got := most.Load(); got != 1 {
		t.Errorf("%d gateways open at once, want 1", got)
	}
}

// TestHandedMessagesInTheirOrder: messages of one thread handed over by
// several replicas reach the holder's queue in the order the replicas
// forwarded them, which need not be the order they were sent (a reply
// that reached a slower replica is forwarded after the next one); the
// holder handles the messages queued together in the order the platform
// gave them (their message ids), other events in their place.
func TestHandedMessagesInTheirOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cli := etcdtest.Start(t).Client(t)
	rep, x, router := handler(t, cli, "r0")
	const key = "slack/T1/C1/1700000000.000100"
	if ok, err := rep.TryTake(ctx, key); err != nil || !ok {
		t.Fatalf("take: %v, %v", ok, err)
	}
	title := "renamed"
	for _, ev := range []handed{
		{Message: &chat.Incoming{Thread: chat.Thread{Platform: "slack", Key: key}, Text: "task", MessageID: "1700000000.000100"}},
		{Message: &chat.Incoming{Thread: chat.Thread{Platform: "slack", Key: key}, Text: "follow-up 1", MessageID: "1700000000.000201"}},
		{Rename: &title},
		{Message: &chat.Incoming{Thread: chat.Thread{Platform: "slack", Key: key}, Text: "follow-up 3", MessageID: "1700000000.000203"}},
		{Message: &chat.Incoming{Thread: chat.Thread{Platform: "slack", Key: key}, Text: "follow-up 2", MessageID: "1700000000.000202"}},
		// The console's ids are random: its messages keep their places.
		{Message: &chat.Incoming{Thread: chat.Thread{Platform: "web", Key: key}, Text: "console b", MessageID: "ffff"}},
		{Message: &chat.Incoming{Thread: chat.Thread{Platform: "web", Key: key}, Text: "console a", MessageID: "0000"}},
	} {
		data, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := rep.Forward(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	x.drain(key)
	if got, want := router.texts(), []string{"task", "follow-up 1", "follow-up 2", "follow-up 3", "console b", "console a"}; !slices.Equal(got, want) {
		t.Errorf("handled %q, want %q", got, want)
	}
}
