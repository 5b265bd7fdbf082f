package discord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/inboxtest"
)

// Guild ids on shard 0 and 1 of 2: (id >> 22) % 2.
var (
	guildShard0 = strconv.FormatUint(2<<22, 10)
	guildShard1 = strconv.FormatUint(3<<22, 10)
)

// shardFake is a fake Discord with a text channel on each of two shards'
// guilds (C0, C1) and a DM (D1), one guild a shard at most, identify
// buckets enforced.
func shardFake() *fakediscord.Server {
	fake := &fakediscord.Server{HeartbeatInterval: time.Second, Shards: 2, ShardGuildLimit: 1, IdentifyWindow: 200 * time.Millisecond}
	fake.AddChannel("C0", 0, guildShard0)
	fake.AddChannel("C1", 0, guildShard1)
	fake.AddChannel("D1", 1, "")
	return fake
}

// shardRig starts an adapter's REST side against fake with opts.
func shardRig(t testing.TB, fake *fakediscord.Server, opts Options) (*Adapter, *inboxtest.Inbox) {
	t.Helper()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	opts.Token, opts.APIURL = "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", srv.URL
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	a.idWindow = 250 * time.Millisecond // the fake's 200 ms, with room
	rec := &inboxtest.Inbox{}
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.StartREST(ctx, rec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); a.Close() })
	return a, rec
}

func waitShards(t testing.TB, fake *fakediscord.Server, want ...int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for got := fake.ShardsConnected(); !slices.Equal(got, want); got = fake.ShardsConnected() {
		if time.Now().After(deadline) {
			t.Fatalf("shards connected %v, want %v", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestShardsServeEveryGuild: with GET /gateway/bot's two shards and one
// identify bucket, the adapter opens two sessions identified as [0, 2]
// and [1, 2], a bucket's window apart, and hears the guilds of both
// shards and the DMs (shard 0's) in one inbox.
func TestShardsServeEveryGuild(t *testing.T) {
	fake := shardFake()
	a, rec := shardRig(t, fake, Options{})
	if n := a.ShardCount(); n != 2 {
		t.Fatalf("ShardCount() = %d, want GET /gateway/bot's 2", n)
	}
	if err := a.OpenGateway(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitShards(t, fake, 0, 1)
	if err := a.Ready(); err != nil {
		t.Errorf("Ready() = %v with both shards connected", err)
	}
	fake.UserMessage("C0", "111", "on shard 0", true)
	fake.UserMessage("C1", "111", "on shard 1", true)
	fake.UserMessage("D1", "111", "a DM", false)
	got := waitTexts(t, rec, 3)
	slices.Sort(got)
	if want := []string{"a DM", "on shard 0", "on shard 1"}; !slices.Equal(got, want) {
		t.Errorf("handled %q, want %q", got, want)
	}
	if ids, _ := fake.Sessions(); ids != 2 {
		t.Errorf("%d IDENTIFYs, want one a shard", ids)
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Discord would refuse %d times, first: %s", len(v), v[0])
	}
}

// TestShardsOption: Options.Shards overrides GET /gateway/bot's count.
func TestShardsOption(t *testing.T) {
	fake := shardFake()
	fake.Shards, fake.ShardGuildLimit = 1, 0
	a, _ := shardRig(t, fake, Options{Shards: 2})
	if n := a.ShardCount(); n != 2 {
		t.Fatalf("ShardCount() = %d, want Options.Shards' 2", n)
	}
	if err := a.OpenGateway(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitShards(t, fake, 0, 1)
}

// TestShardingRequired: a shard count too small for the bot's guilds is
// refused with 4011, which OpenGateway says plainly.
func TestShardingRequired(t *testing.T) {
	fake := shardFake()
	a, _ := shardRig(t, fake, Options{Shards: 1})
	err := a.OpenGateway(t.Context())
	if !errors.Is(err, ErrShardingRequired) || !strings.Contains(err.Error(), "PINPLAN_DISCORD_SHARDS") {
		t.Fatalf("OpenGateway with one shard for two guilds: %v, want %v", err, ErrShardingRequired)
	}
	if err := a.Ready(); err == nil {
		t.Error("Ready() = nil with the shard refused")
	}
	if _, err := a.shard(1); err == nil {
		t.Error("shard 1 of 1 exists")
	}
	if err := a.OpenShard(t.Context(), 1); err == nil {
		t.Error("OpenShard(1) of 1 shard succeeded")
	}
}

// TestShardDropResumes: a dropped shard resumes on its own and gets
// what it missed; the other shard keeps its connection and its events
// meanwhile, and nobody identifies again.
func TestShardDropResumes(t *testing.T) {
	fake := shardFake()
	a, rec := shardRig(t, fake, Options{})
	if err := a.OpenGateway(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitShards(t, fake, 0, 1)
	fake.UserMessage("C0", "111", "task 0", true)
	fake.UserMessage("C1", "111", "task 1", true)
	waitTexts(t, rec, 2)
	fake.DropShard(0)
	fake.UserMessage("C1", "111", "shard 1 while 0 is down", true)
	fake.UserMessage("C0", "111", "shard 0 missed this", true)
	waitTexts(t, rec, 4)
	waitShards(t, fake, 0, 1)
	fake.UserMessage("C0", "111", "shard 0 back", true)
	got := waitTexts(t, rec, 5)
	var on0 []string
	for _, s := range got {
		if strings.HasPrefix(s, "task 0") || strings.HasPrefix(s, "shard 0") {
			on0 = append(on0, s)
		}
	}
	if want := []string{"task 0", "shard 0 missed this", "shard 0 back"}; !slices.Equal(on0, want) {
		t.Errorf("shard 0's messages %q, want %q", on0, want)
	}
	if ids, res := fake.Sessions(); ids != 2 || res != 1 {
		t.Errorf("%d IDENTIFYs and %d RESUMEs, want 2 and shard 0's one", ids, res)
	}
}

// TestCloseShardLeavesTheOthers: CloseShard ends one shard's session and
// leaves the other serving; reopened, the shard identifies a new session
// and catches up what its channels received meanwhile, once.
func TestCloseShardLeavesTheOthers(t *testing.T) {
	fake := shardFake()
	a, rec := shardRig(t, fake, Options{})
	if err := a.OpenGateway(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitShards(t, fake, 0, 1)
	fake.UserMessage("C1", "111", "task 1", true)
	waitTexts(t, rec, 1)
	a.CloseShard(1)
	waitShards(t, fake, 0)
	if err := a.Ready(); err != nil {
		t.Errorf("Ready() = %v holding shard 0 only, connected", err)
	}
	fake.UserMessage("C1", "111", "while shard 1 is closed", true)
	fake.UserMessage("C0", "111", "shard 0 serves on", true)
	waitTexts(t, rec, 2)
	if err := a.OpenShard(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	waitShards(t, fake, 0, 1)
	got := waitTexts(t, rec, 3)
	if want := []string{"task 1", "shard 0 serves on", "while shard 1 is closed"}; !slices.Equal(got, want) {
		t.Errorf("handled %q, want %q (shard 1's gap caught up once)", got, want)
	}
	if ids, _ := fake.Sessions(); ids != 3 {
		t.Errorf("%d IDENTIFYs, want 3: two, and shard 1's new session", ids)
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Discord would refuse %d times, first: %s", len(v), v[0])
	}
}

// TestOpenShardAbandoned: a shard waiting for its identify bucket when
// OpenShard's ctx ends is closed again and never dials.
func TestOpenShardAbandoned(t *testing.T) {
	fake := shardFake()
	a, _ := shardRig(t, fake, Options{})
	a.buckets.window = time.Hour
	if err := a.OpenShard(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	waitShards(t, fake, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	// Shard 1 shares shard 0's bucket (max_concurrency 1).
	if err := a.OpenShard(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("OpenShard waiting past its ctx: %v, want %v", err, context.DeadlineExceeded)
	}
	if err := a.Ready(); err != nil {
		t.Errorf("Ready() = %v: the abandoned shard is not held", err)
	}
	if ids, _ := fake.Sessions(); ids != 1 {
		t.Errorf("%d IDENTIFYs, want shard 0's only", ids)
	}
}

// countInbox counts the messages handed to it and says when it has want.
type countInbox struct {
	*inboxtest.Inbox
	n    atomic.Int64
	want int64
	done chan struct{}
}

func (c *countInbox) Handle(ctx context.Context, in chat.Incoming) error {
	if c.n.Add(1) == c.want {
		close(c.done)
	}
	return nil
}

// BenchmarkShardEvents measures messages a second per shard from the
// fake Discord's gateway through the adapter (decoding, filtering, the
// per-channel queue, the mention check, the read marks) to its inbox:
// two shards in one process, four channels on each shard's guild, b.N
// mentions sent round-robin over the eight channels, timed from the
// first send to the last message handed on. The fake's own encoding and
// loopback websocket are in the measure.
func BenchmarkShardEvents(b *testing.B) {
	fake := &fakediscord.Server{HeartbeatInterval: time.Minute, Shards: 2}
	var channels []string
	for i := range 4 {
		for shard, guild := range []string{guildShard0, guildShard1} {
			ch := fmt.Sprintf("C%d-%d", shard, i)
			fake.AddChannel(ch, 0, guild)
			channels = append(channels, ch)
		}
	}
	in := &countInbox{Inbox: &inboxtest.Inbox{}, want: int64(b.N), done: make(chan struct{})}
	srv := httptest.NewServer(fake)
	b.Cleanup(srv.Close)
	b.Cleanup(fake.Close)
	a, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", APIURL: srv.URL})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(func() { cancel(); a.Close() })
	if err := a.Start(ctx, in); err != nil {
		b.Fatal(err)
	}
	waitShards(b, fake, 0, 1)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		fake.UserMessage(channels[i%len(channels)], "111", "event", true)
	}
	sent := time.Since(start)
	select {
	case <-in.done:
	case <-time.After(time.Minute):
		b.Fatalf("%d of %d messages handed on after a minute", in.n.Load(), b.N)
	}
	took := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/took.Seconds()/2, "events/s/shard")
	b.ReportMetric(float64(b.N)/sent.Seconds(), "sent/s") // the fake's pace: well above 2 × events/s/shard, the adapter's side bounds the measure
}

// TestShardMarksMoveWithTheShard: two processes share the marks store,
// each holding one shard; each keeps its shard's marks in a record of
// its own, so neither writes back the other's. Shard 1 moved from the
// second to the first, the first catches up what shard 1's channel got
// meanwhile, once, and the records still hold both channels.
func TestShardMarksMoveWithTheShard(t *testing.T) {
	fake := shardFake()
	fake.IdentifyWindow = 0
	marks := &inboxtest.Marks{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	events := &inboxtest.Dedupe{}
	start := func(shard int) (*Adapter, *inboxtest.Inbox) {
		a, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", APIURL: srv.URL, Marks: marks})
		if err != nil {
			t.Fatal(err)
		}
		a.idWindow = 250 * time.Millisecond
		in := &inboxtest.Inbox{Events: events}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(func() { cancel(); a.Close() })
		if err := a.StartREST(ctx, in); err != nil {
			t.Fatal(err)
		}
		if err := a.OpenShard(ctx, shard); err != nil {
			t.Fatal(err)
		}
		return a, in
	}
	first, in0 := start(0)
	second, in1 := start(1)
	waitShards(t, fake, 0, 1)
	fake.UserMessage("C0", "111", "task 0", true)
	fake.UserMessage("C1", "111", "task 1", true)
	waitTexts(t, in0, 1)
	waitTexts(t, in1, 1)
	for name, ch := range map[string]string{"discord/0-of-2": "C0", "discord/1-of-2": "C1"} {
		data, _ := marks.Marks(t.Context(), name)
		var rec savedMarks
		if err := json.Unmarshal(data, &rec); err != nil || len(rec.Channels) != 1 || rec.Channels[ch].Last == "" {
			t.Errorf("record %s: %s (%v), want %s's mark alone", name, data, err, ch)
		}
	}
	second.CloseShard(1)
	waitShards(t, fake, 0)
	fake.UserMessage("C1", "111", "while shard 1 moves", true)
	if err := first.OpenShard(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	waitShards(t, fake, 0, 1)
	got := waitTexts(t, in0, 2)
	if want := []string{"task 0", "while shard 1 moves"}; !slices.Equal(got, want) {
		t.Errorf("the first handled %q, want %q", got, want)
	}
	fake.UserMessage("C1", "111", "after the move", true)
	waitTexts(t, in0, 3)
	if got := in1.Texts(); !slices.Equal(got, []string{"task 1"}) {
		t.Errorf("the second handled %q, want its task alone", got)
	}
}

// gatedLimiter is an IdentifyLimiter that holds every IDENTIFY while
// hold is set, until it is cleared.
type gatedLimiter struct {
	mu   sync.Mutex
	hold chan struct{} // closed to let the held through; nil: none held
}

// WaitIdentify implements IdentifyLimiter.
func (g *gatedLimiter) WaitIdentify(ctx context.Context, _, _ int) (func(), error) {
	g.mu.Lock()
	hold := g.hold
	g.mu.Unlock()
	if hold == nil {
		return func() {}, nil
	}
	select {
	case <-hold:
		return func() {}, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// TestShardMarksKeptWhileTheShardWaits: a shard moved to a process
// that waits for its identify bucket; meanwhile another shard's message
// has that process save its marks. It must not write the waiting
// shard's record before it read it (at READY): the message sent in the
// moving shard's channel while it moved is caught up.
func TestShardMarksKeptWhileTheShardWaits(t *testing.T) {
	fake := shardFake()
	fake.IdentifyWindow = 0
	marks := &inboxtest.Marks{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	events := &inboxtest.Dedupe{}
	gate := &gatedLimiter{}
	start := func(shard int) (*Adapter, *inboxtest.Inbox) {
		a, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", APIURL: srv.URL, Marks: marks, Identify: gate})
		if err != nil {
			t.Fatal(err)
		}
		a.idWindow = 250 * time.Millisecond
		in := &inboxtest.Inbox{Events: events}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(func() { cancel(); a.Close() })
		if err := a.StartREST(ctx, in); err != nil {
			t.Fatal(err)
		}
		if err := a.OpenShard(ctx, shard); err != nil {
			t.Fatal(err)
		}
		return a, in
	}
	first, in0 := start(0)
	second, in1 := start(1)
	waitShards(t, fake, 0, 1)
	fake.UserMessage("C0", "111", "task 0", true)
	fake.UserMessage("C1", "111", "task 1", true)
	waitTexts(t, in0, 1)
	waitTexts(t, in1, 1)
	second.CloseShard(1)
	waitShards(t, fake, 0)
	fake.UserMessage("C1", "111", "while shard 1 moves", true)

	release := make(chan struct{})
	gate.mu.Lock()
	gate.hold = release
	gate.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- first.OpenShard(t.Context(), 1) }()
	later := fake.UserMessage("C0", "111", "shard 0 goes on", true)
	waitFor(t, "the first to save shard 0's marks while shard 1 waits", func() bool {
		data, _ := marks.Marks(t.Context(), "discord/0-of-2")
		var rec savedMarks
		return json.Unmarshal(data, &rec) == nil && rec.Channels["C0"].Last == later
	}, func() any { data, _ := marks.Marks(t.Context(), "discord/0-of-2"); return string(data) })
	gate.mu.Lock()
	gate.hold = nil
	gate.mu.Unlock()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitShards(t, fake, 0, 1)
	got := waitTexts(t, in0, 3)
	if !slices.Contains(got, "while shard 1 moves") {
		t.Errorf("the first handled %q: the message sent while shard 1 moved was lost", got)
	}
}

// TestForumTagsFromTheOwnerReplica: with replicas, a session's plan is
// rendered by its owner, which need not hold the shard of the post's
// guild and so hears no THREAD_CREATE or THREAD_UPDATE of it. Its plan
// edits move the post's run tag all the same, and a tag a person added
// since its last change is kept.
func TestForumTagsFromTheOwnerReplica(t *testing.T) {
	fake := shardFake()
	if err := fake.AddForum("F1", guildShard1, fakediscord.Tag{Name: "bug"}, fakediscord.Tag{Name: "urgent"}); err != nil {
		t.Fatal(err)
	}
	fake.SetPermissions(guildShard1, fakediscord.BotID, fakediscord.DefaultBotPermissions|fakediscord.PermManageChannels|fakediscord.PermManageThreads)
	holder, hin := shardRig(t, fake, Options{})
	if err := holder.OpenShard(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	waitShards(t, fake, 1)
	owner, _ := shardRig(t, fake, Options{}) // REST alone: no shard
	r := &forumRig{fake: fake}
	bug, urgent := fake.TagID("F1", "bug"), fake.TagID("F1", "urgent")
	post, err := fake.Post("F1", "111", "Release", "plan the release", true, bug)
	if err != nil {
		t.Fatal(err)
	}
	waitTexts(t, hin, 1)
	r.waitTags(t, post, "bug", "planning")

	ctx := context.Background()
	th := chat.Thread{Platform: "discord", Key: Key(post), Channel: post}
	ref, err := owner.PostPlan(ctx, th, forumPlan(chat.StateWorking))
	if err != nil {
		t.Fatal(err)
	}
	r.waitTags(t, post, "bug", "working")
	if err := fake.SetPostTags(post, "111", bug, fake.TagID("F1", "working"), urgent); err != nil {
		t.Fatal(err)
	}
	if err := owner.EditPlan(ctx, th, ref, forumPlan(chat.StateDone)); err != nil {
		t.Fatal(err)
	}
	r.waitTags(t, post, "bug", "urgent", "done")

	// The holder heard the post's mention (planning) and none of the
	// owner's plans: a person closing and reopening the post does not
	// have it put its planning back.
	if err := fake.ClosePost(post, "111"); err != nil {
		t.Fatal(err)
	}
	if err := fake.ReopenPost(post, "111"); err != nil {
		t.Fatal(err)
	}
	fake.UserMessage(post, "111", "after reopening", false)
	waitTexts(t, hin, 2) // the holder had the reopening before it
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	holder.queue.Wait(ctx)
	if got := r.tagNames(post); !slices.Equal(got, []string{"bug", "urgent", "done"}) {
		t.Errorf("tags after reopening %v, want the owner's done kept", got)
	}
}
