package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/etcdtest"
	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// benchGet is httpGet for a benchmark: the status and body, or 0 when
// the process does not answer (it may be dying).
func benchGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// benchShardsHeld is shardHolders for a benchmark: the shards each live
// replica holds by its metrics, -1 for one that is down.
func benchShardsHeld(ps []*botProc) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		select {
		case <-p.done:
			out[i] = -1
			continue
		default:
		}
		_, body := benchGet(p.URL + "/metrics")
		if m := shardsHeld.FindStringSubmatch(body); m != nil {
			out[i], _ = strconv.Atoi(m[1])
		}
	}
	return out
}

// benchEnv is an int from the environment, or def.
func benchEnv(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// startShardReplica starts replica id on env and waits until it is ready
// and says where the gateway is (discordReplicaRig.start for a
// benchmark).
func startShardReplica(b *testing.B, env map[string]string, id int) *botProc {
	b.Helper()
	p := startBot(b, withEnv(env, map[string]string{
		"PINPLAN_REPLICA_ID": fmt.Sprint("r", id), "PINPLAN_DB": filepath.Join(b.TempDir(), "unused.db"),
	}), botBinary)
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := benchGet(p.URL + "/readyz")
		if code == 200 && strings.Contains(body, "discord gateway:") {
			return p
		}
		if time.Now().After(deadline) {
			b.Fatalf("replica %d not ready: %d %s\n%s", id, code, body, p.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// BenchmarkShardTakeover measures how long a Discord gateway shard is
// down after kill -9 of the replica holding it (issue 46), through the
// binary: three replicas on an embedded etcd (PINPLAN_LEASE_TTL 3 s, as
// the tests), a two-shard fake gateway with max_concurrency 2 and
// Discord's identify window enforced (one IDENTIFY a bucket every 5 s).
// Each of the kills (20; PINPLAN_BENCH_KILLS) picks a replica holding at
// least one shard by its metrics (pinplan_discord_shards_held), kills it
// with SIGKILL and times the kill to the moment the fake has both shards
// connected again (ShardsConnected [0 1], two gateway connections) and
// the live replicas' metrics hold both; a replica with the same id is
// then started again, so three stand each time, and the next kill waits
// until the identify window of the last takeover has passed (a kill
// sooner would time the bucket's wait, not the takeover).
//
//	go test ./cmd/bot -run XXX -bench BenchmarkShardTakeover -benchtime=1x -count=1
//
// One iteration is the whole set of kills; p50 and p99 (ms) are over
// the kills of all iterations.
func BenchmarkShardTakeover(b *testing.B) {
	kills := benchEnv("PINPLAN_BENCH_KILLS", 20)
	etcd := etcdtest.Start(b)
	dc := &fakediscord.Server{HeartbeatInterval: time.Second}
	dc.Shards, dc.MaxConcurrency, dc.IdentifyWindow = 2, 2, fakediscord.IdentifyWindowDiscord
	dc.AddChannel("CS1", 0, guildShard1)
	dc.AddChannel("CS0", 0, guildShard0)
	ds := httptest.NewServer(dc)
	b.Cleanup(ds.Close)
	b.Cleanup(dc.Close)
	ms := httptest.NewServer(&fakeopenai.Server{})
	b.Cleanup(ms.Close)
	env := map[string]string{
		"PINPLAN_HTTP_ADDR": "127.0.0.1:0", "PINPLAN_WEB_TOKEN": "replica-test-token-0123456789",
		"OPENAI_BASE_URL": ms.URL + "/v1", "OPENAI_API_KEY": "sk-test",
		"DISCORD_BOT_TOKEN": "OTAwMDAwMDAwMDAwMDAwMDAx.fake.token", "DISCORD_API_URL": ds.URL,
		"PINPLAN_ETCD_ENDPOINTS": etcd.Endpoint, "PINPLAN_ETCD_PREFIX": "/pinplan/", "PINPLAN_LEASE_TTL": replicaTTL.String(),
	}
	ps := []*botProc{startShardReplica(b, env, 0), startShardReplica(b, env, 1), startShardReplica(b, env, 2)}
	allBack := func() bool {
		if !slices.Equal(dc.ShardsConnected(), []int{0, 1}) || dc.Connected() != 2 {
			return false
		}
		total := 0
		for _, n := range benchShardsHeld(ps) {
			total += max(n, 0)
		}
		return total == 2
	}
	waitFor(b, 30*time.Second, "both shards held once", allBack)
	lastTakeover := time.Now()
	var took []time.Duration
	var order []string // the samples in kill order, with who held what
	b.ResetTimer()
	for range b.N {
		for k := range kills {
			// The bucket's window from the last identify: a kill before it
			// ends would time the wait for the bucket.
			time.Sleep(time.Until(lastTakeover.Add(fakediscord.IdentifyWindowDiscord)))
			held := benchShardsHeld(ps)
			victim := slices.IndexFunc(held, func(n int) bool { return n > 0 })
			if victim < 0 {
				b.Fatalf("kill %d: no replica holds a shard: %v\n%s", k, held, stderrs(ps...))
			}
			ps[victim].kill()
			killed := time.Now()
			deadline := killed.Add(replicaTTL + 30*time.Second)
			for !allBack() {
				if time.Now().After(deadline) {
					b.Fatalf("kill %d of r%d (held %d): shards %v connected (%d connections), held %v after %s\n%s",
						k, victim, held[victim], dc.ShardsConnected(), dc.Connected(), benchShardsHeld(ps), time.Since(killed), stderrs(ps...))
				}
				time.Sleep(10 * time.Millisecond)
			}
			lastTakeover = time.Now()
			d := lastTakeover.Sub(killed)
			took = append(took, d)
			order = append(order, fmt.Sprintf("%d (r%d, %d)", d.Milliseconds(), victim, held[victim]))
			ps[victim] = startShardReplica(b, env, victim)
		}
	}
	b.StopTimer()
	slices.Sort(took)
	pct := func(q float64) float64 {
		return float64(took[min(len(took)-1, int(q*float64(len(took))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(took[0].Microseconds())/1000, "min-ms")
	// One line each: go test keeps only a benchmark's first log lines
	// without -v.
	b.Logf("takeovers in kill order, ms (the replica killed, the shards it held): %s", strings.Join(order, ", "))
	b.Logf("takeovers sorted: %v", took)
	if n := dc.MaxConnected(); n != 2 {
		b.Errorf("%d gateway sessions at once, want 2 (one a shard)", n)
	}
	if v := dc.Violations(); len(v) > 0 {
		b.Errorf("Discord protocol violations: %v", v)
	}
}

// BenchmarkShardEventsThroughBinary measures Discord messages a second
// per shard that the binary takes in (issue 46): one process (bbolt, no
// etcd) holding both shards of a two-shard fake gateway, four channels
// in a guild on each shard. First one mention in each channel starts its
// session, whose turn is then held at the model (the fake model answers
// nothing until the end), so that what follows measures the way in, not
// the agent: N mentions (20,000; PINPLAN_BENCH_EVENTS) round-robin over
// the eight channels, each taken through the gateway's decoding, the
// adapter's per-channel queue, the mention check and read marks, the
// router, and queued durably in its session's inbox (one bbolt write,
// its dedupe key with it). After them each channel gets "stop", whose
// answer ("Stopping the current turn.") the fake sees posted once every
// message before it in the channel's queue was taken in (the adapter
// handles a channel's messages in order); the time runs from the first
// send to the last of the eight answers, which adds one REST post to
// the measure.
//
//	go test ./cmd/bot -run XXX -bench BenchmarkShardEventsThroughBinary -benchtime=1x -count=1
func BenchmarkShardEventsThroughBinary(b *testing.B) {
	n := benchEnv("PINPLAN_BENCH_EVENTS", 20_000)
	dc := &fakediscord.Server{HeartbeatInterval: time.Second}
	dc.Shards, dc.MaxConcurrency, dc.IdentifyWindow = 2, 2, fakediscord.IdentifyWindowDiscord
	var channels []string
	for i := range 4 {
		for shard, guild := range []string{guildShard0, guildShard1} {
			ch := fmt.Sprintf("E%d-%d", shard, i)
			dc.AddChannel(ch, 0, guild)
			channels = append(channels, ch)
		}
	}
	release := make(chan struct{})
	held := make(chan struct{}, 1024)
	model := &fakeopenai.Server{Respond: func(*openai.ChatCompletionRequest) fakeopenai.Reply {
		select {
		case held <- struct{}{}:
		default:
		}
		<-release
		return fakeopenai.Reply{Content: "All done."}
	}}
	ds := httptest.NewServer(dc)
	b.Cleanup(ds.Close)
	b.Cleanup(dc.Close)
	ms := httptest.NewServer(model)
	b.Cleanup(ms.Close)
	b.Cleanup(func() { close(release) }) // before ms.Close, which waits for the held requests
	p := startBot(b, map[string]string{
		"PINPLAN_DB": filepath.Join(b.TempDir(), "events.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"OPENAI_BASE_URL": ms.URL + "/v1", "OPENAI_API_KEY": "sk-test",
		"DISCORD_BOT_TOKEN": "OTAwMDAwMDAwMDAwMDAwMDAx.fake.token", "DISCORD_API_URL": ds.URL,
	}, botBinary)
	defer p.kill() // its turns are held; nothing to stop cleanly
	waitFor(b, 30*time.Second, "both shards connected", func() bool {
		return slices.Equal(dc.ShardsConnected(), []int{0, 1}) && dc.Connected() == 2
	})
	for _, ch := range channels {
		dc.UserMessage(ch, "111", "start "+ch, true)
	}
	for range channels {
		select {
		case <-held:
		case <-time.After(60 * time.Second):
			b.Fatalf("the channels' first turns did not reach the model\n%s", p.stderr)
		}
	}
	b.ResetTimer()
	var total time.Duration
	for it := range b.N {
		start := time.Now()
		for i := range n {
			dc.UserMessage(channels[i%len(channels)], "111", fmt.Sprint("event ", it, " ", i), true)
		}
		sent := time.Since(start)
		stops := map[string]string{}
		for _, ch := range channels {
			stops[ch] = dc.UserMessage(ch, "111", "stop", true)
		}
		answered := func(ch string) bool {
			for _, m := range dc.Messages(ch) {
				if m.AuthorID == fakediscord.BotID && m.Reference == stops[ch] {
					return true
				}
			}
			return false
		}
		for _, ch := range channels {
			for !answered(ch) {
				if time.Since(start) > 3*time.Minute {
					b.Fatalf("%s: no answer to stop after %s\n%s", ch, time.Since(start), p.stderr)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		took := time.Since(start)
		total += took
		b.Logf("%d mentions over %d channels on 2 shards: sent in %s (%.0f/s), all taken in after %s (%.0f events/s/shard)",
			n, len(channels), sent.Round(time.Millisecond), float64(n)/sent.Seconds(), took.Round(time.Millisecond), float64(n)/took.Seconds()/2)
	}
	b.StopTimer()
	b.ReportMetric(float64(n*b.N)/total.Seconds()/2, "events/s/shard")
	if v := dc.Violations(); len(v) > 0 {
		b.Errorf("Discord protocol violations: %v", v)
	}
}
