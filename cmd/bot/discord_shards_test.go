package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/internal/fakediscord"
)

// Two guilds on the two shards of a two-shard gateway: (id >> 22) % 2 is
// 1 for the first and 0 for the second (DESIGN §20).
const (
	guildShard1 = "4194304" // 1 << 22
	guildShard0 = "8388608" // 2 << 22
)

// shardChannels adds channel CS1 in the guild on shard 1 and CS0 in the
// one on shard 0, and makes the fake a two-shard gateway, strict about
// identify buckets.
func shardChannels(t *testing.T, dc *fakediscord.Server, maxConcurrency int) {
	t.Helper()
	dc.Shards, dc.MaxConcurrency, dc.IdentifyWindow = 2, maxConcurrency, fakediscord.IdentifyWindowDiscord
	dc.AddChannel("CS1", 0, guildShard1)
	dc.AddChannel("CS0", 0, guildShard0)
	if fakediscord.ShardOf(guildShard1, 2) != 1 || fakediscord.ShardOf(guildShard0, 2) != 0 {
		t.Fatal("the guilds are not on the shards they are meant for")
	}
}

// TestDiscordShardsOnOneProcess: through the binary without etcd, the
// process runs both shards Discord asks for, identified one bucket
// window apart, and answers in guilds on each.
func TestDiscordShardsOnOneProcess(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 2, 0)
	shardChannels(t, r.dc, 1)
	p := r.start(t)
	defer p.stop(t)
	waitFor(t, 20*time.Second, "both shards connected", func() bool { return slices.Equal(r.dc.ShardsConnected(), []int{0, 1}) })
	for _, ch := range []string{"CS1", "CS0"} {
		r.dc.UserMessage(ch, "111", "plan the release", true)
	}
	for _, ch := range []string{"CS1", "CS0"} {
		waitDiscordReply(t, r.dc, ch, "All done.")
	}
	if v := r.dc.Violations(); len(v) > 0 {
		t.Errorf("Discord protocol violations: %v", v)
	}
}

var shardsHeld = regexp.MustCompile(`\npinplan_discord_shards_held (\d+)\n`)

// shardHolders is how many shards each live replica holds, by its
// metrics (-1 for one that is down).
func shardHolders(t *testing.T, ps []*botProc) []int {
	t.Helper()
	out := make([]int, len(ps))
	for i, p := range ps {
		select {
		case <-p.done:
			out[i] = -1
			continue
		default:
		}
		_, body := httpGet(t, p.URL+"/metrics")
		if m := shardsHeld.FindStringSubmatch(body); m != nil {
			out[i], _ = strconv.Atoi(m[1])
		}
	}
	return out
}

// TestDiscordShardsAcrossReplicas: three replicas on etcd share a
// two-shard gateway, each shard held by exactly one of them; guilds on
// both shards are answered; kill -9 of the holder moves its shards to
// another replica within the TTL plus 2 s; mentions made while nobody
// held them, and after, are answered once each.
func TestDiscordShardsAcrossReplicas(t *testing.T) {
	t.Parallel()
	r := newDiscordReplicaRig(t, replicaTTL)
	shardChannels(t, r.dc, 2)
	ps := []*botProc{r.start(t, 0), r.start(t, 1), r.start(t, 2)}
	var held []int
	waitFor(t, 20*time.Second, "both shards held once", func() bool {
		held = shardHolders(t, ps)
		total := 0
		for _, n := range held {
			total += max(n, 0)
		}
		return total == 2 && slices.Equal(r.dc.ShardsConnected(), []int{0, 1}) && r.dc.Connected() == 2
	})
	for i, ch := range []string{"CS1", "CS0"} {
		r.dc.UserMessage(ch, "111", fmt.Sprint("task ", i), true)
	}
	for _, ch := range []string{"CS1", "CS0"} {
		waitDiscordReply(t, r.dc, ch, "All done.")
	}

	victim := slices.IndexFunc(held, func(n int) bool { return n > 0 })
	ps[victim].kill()
	killed := time.Now()
	// Mentions in the gap, while no process holds the killed one's
	// shards: the gateway gives them to nobody, and the new holder's
	// catch-up (the read marks of its shard) finds them.
	asked := map[string]string{}
	for i, ch := range []string{"CS1", "CS0"} {
		asked[ch] = r.dc.UserMessage(ch, "111", fmt.Sprint("in the gap ", i), true)
	}
	waitFor(t, replicaTTL+2*time.Second, "the killed replica's shards held elsewhere", func() bool {
		total := 0
		for _, n := range shardHolders(t, ps) {
			total += max(n, 0)
		}
		return total == 2 && slices.Equal(r.dc.ShardsConnected(), []int{0, 1}) && r.dc.Connected() == 2
	})
	t.Logf("the shards moved %s after the kill (TTL %s)", time.Since(killed).Round(100*time.Millisecond), replicaTTL)

	// Mentions after the takeover, in new channels on both shards.
	r.dc.AddChannel("CT1", 0, guildShard1)
	r.dc.AddChannel("CT0", 0, guildShard0)
	for i, ch := range []string{"CT1", "CT0"} {
		asked[ch] = r.dc.UserMessage(ch, "111", fmt.Sprint("after the takeover ", i), true)
	}
	replies := func(ch string) int {
		n := 0
		for _, m := range r.dc.Messages(ch) {
			if m.AuthorID == fakediscord.BotID && m.Reference == asked[ch] {
				n++
			}
		}
		return n
	}
	chans := []string{"CS1", "CS0", "CT1", "CT0"}
	waitFor(t, 30*time.Second, "every mention answered after the kill", func() bool {
		return !slices.ContainsFunc(chans, func(ch string) bool { return replies(ch) == 0 })
	})
	time.Sleep(time.Second) // a doubled answer would show by now
	for _, ch := range chans {
		if n := replies(ch); n != 1 {
			t.Errorf("%d answers to the mention in %s after the kill, want 1\n%s", n, ch, stderrs(ps...))
		}
	}
	if n := r.dc.MaxConnected(); n != 2 {
		t.Errorf("%d gateway sessions at once, want 2 (one a shard)", n)
	}
	if v := r.dc.Violations(); len(v) > 0 {
		t.Errorf("Discord protocol violations: %v", v)
	}
}

// TestStopWhileTheGatewayOpens: a SIGINT while Discord's gateway is still
// being opened at the start (here /gateway/bot answers slowly) is a
// clean stop, as one after the start is.
func TestStopWhileTheGatewayOpens(t *testing.T) {
	t.Parallel()
	r := newDiscordRig(t, 1, 0)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasSuffix(req.URL.Path, "/gateway/bot") {
			select {
			case <-time.After(10 * time.Second):
			case <-req.Context().Done():
				return
			}
		}
		r.dc.ServeHTTP(w, req)
	}))
	t.Cleanup(slow.Close)
	r.env["DISCORD_API_URL"] = slow.URL
	p := startBot(t, r.env, botBinary) // returns once the console is served, before the gateway
	p.stop(t)
	if !strings.Contains(p.stderr.String(), "msg=stopped") {
		t.Errorf("no clean stop in the log:\n%s", p.stderr)
	}
}
