package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinplan/pinplan/internal/etcdtest"
	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// discordReplicaRig is bot processes with Discord sharing one embedded
// etcd, one Discord fake and one model fake.
type discordReplicaRig struct {
	etcd  *etcdtest.Server
	dc    *fakediscord.Server
	model *fakeopenai.Server
	env   map[string]string
}

func newDiscordReplicaRig(t *testing.T, ttl time.Duration) *discordReplicaRig {
	t.Helper()
	etcd := etcdtest.Start(t)
	r := &discordReplicaRig{etcd: etcd, dc: &fakediscord.Server{HeartbeatInterval: time.Second},
		model: &fakeopenai.Server{Respond: fakeopenai.Script(planScript(2, "All done. See the plan above."))}}
	for _, ch := range []string{"C1", "C2", "C3", "C4"} {
		r.dc.AddChannel(ch, 0, "G1")
	}
	ds := httptest.NewServer(r.dc)
	t.Cleanup(ds.Close)
	t.Cleanup(r.dc.Close)
	ms := httptest.NewServer(r.model)
	t.Cleanup(ms.Close)
	r.env = map[string]string{
		"PINPLAN_HTTP_ADDR": "127.0.0.1:0", "PINPLAN_WEB_TOKEN": "replica-test-token-0123456789",
		"OPENAI_BASE_URL": ms.URL + "/v1", "OPENAI_API_KEY": "sk-test",
		"DISCORD_BOT_TOKEN": "OTAwMDAwMDAwMDAwMDAwMDAx.fake.token", "DISCORD_API_URL": ds.URL,
		"PINPLAN_ETCD_ENDPOINTS": etcd.Endpoint, "PINPLAN_ETCD_PREFIX": "/pinplan/", "PINPLAN_LEASE_TTL": ttl.String(),
		"PINPLAN_LOG_LEVEL": "debug",
	}
	return r
}

// start starts replica i and waits until it is ready and says where the
// gateway is.
func (r *discordReplicaRig) start(t *testing.T, i int) *botProc {
	t.Helper()
	env := map[string]string{"PINPLAN_REPLICA_ID": fmt.Sprint("r", i), "PINPLAN_DB": filepath.Join(t.TempDir(), "unused.db")}
	for k, v := range r.env {
		env[k] = v
	}
	p := startBot(t, env, botBinary)
	var body string
	deadline := time.Now().Add(30 * time.Second)
	for {
		var code int
		code, body = httpGet(t, p.URL+"/readyz")
		if code == 200 && strings.Contains(body, "discord gateway:") {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d not ready: %d %s\n%s", i, code, body, p.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gatewayHolders lists the live replicas whose metrics say they hold the
// gateway.
func gatewayHolders(t *testing.T, ps []*botProc) []int {
	t.Helper()
	var out []int
	for i, p := range ps {
		select {
		case <-p.done:
			continue
		default:
		}
		if _, body := httpGet(t, p.URL+"/metrics"); strings.Contains(body, "\npinplan_discord_gateway_leader 1\n") {
			out = append(out, i)
		}
	}
	return out
}

// waitHolder waits until exactly one replica holds the gateway, with one
// gateway connection, and returns it.
func waitHolder(t *testing.T, r *discordReplicaRig, ps []*botProc, within time.Duration) int {
	t.Helper()
	var holders []int
	deadline := time.Now().Add(within)
	for {
		holders = gatewayHolders(t, ps)
		if len(holders) == 1 && r.dc.Connected() == 1 {
			return holders[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway holders %v with %d gateway connections after %s, want one\n%s", holders, r.dc.Connected(), within, stderrs(ps...))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// discordAnswers returns the bot's final answers in channel.
func discordAnswers(s *fakediscord.Server, channel string) []fakediscord.Message {
	var out []fakediscord.Message
	for _, m := range s.Messages(channel) {
		if m.AuthorID == fakediscord.BotID && len(m.Embeds) == 0 && strings.Contains(m.Content, "All done.") {
			out = append(out, m)
		}
	}
	return out
}

// checkReadyz: every live replica is ready; the holder says it holds the
// gateway, the others that they do not and who does.
func checkReadyz(t *testing.T, ps []*botProc, holder int) {
	t.Helper()
	for i, p := range ps {
		select {
		case <-p.done:
			continue
		default:
		}
		code, body := httpGet(t, p.URL+"/readyz")
		want := "discord gateway: held by this replica"
		if i != holder {
			want = fmt.Sprintf("discord gateway: not held by this replica (REST only here); held by replica r%d", holder)
		}
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("replica %d /readyz: %d %s; want 200 and %q", i, code, body, want)
		}
	}
}

// TestDiscordGatewayOnOneReplica: two replicas with Discord; one holds the
// gateway, the other is ready with REST only; a mention is answered once;
// kill -9 of the holder: the other opens the gateway within the TTL plus
// 5 s and answers a new mention. Never two gateway sessions at once.
func TestDiscordGatewayOnOneReplica(t *testing.T) {
	t.Parallel()
	r := newDiscordReplicaRig(t, replicaTTL)
	ps := []*botProc{r.start(t, 0), r.start(t, 1)}
	holder := waitHolder(t, r, ps, 15*time.Second)
	waitFor(t, 10*time.Second, "the other replica to see the holder", func() bool {
		_, body := httpGet(t, ps[1-holder].URL+"/readyz")
		return strings.Contains(body, fmt.Sprint("held by replica r", holder))
	})
	checkReadyz(t, ps, holder)

	trigger := r.dc.UserMessage("C1", "111", "plan the release", true)
	reply := waitDiscordReply(t, r.dc, "C1", "All done.")
	if reply.Reference != trigger {
		t.Errorf("reply references %q, want the mention %s", reply.Reference, trigger)
	}
	// A second mention answered: a doubled first answer would show by now.
	r.dc.UserMessage("C2", "111", "write the notes", true)
	waitDiscordReply(t, r.dc, "C2", "All done.")
	if n := len(discordAnswers(r.dc, "C1")); n != 1 {
		t.Errorf("%d answers in C1, want 1\n%s", n, stderrs(ps...))
	}
	if n := len(discordPlans(r.dc, "C1")); n != 1 {
		t.Errorf("%d plan messages in C1, want 1", n)
	}

	identifies, _ := r.dc.Sessions()
	ps[holder].kill()
	killed := time.Now()
	other := 1 - holder
	waitFor(t, replicaTTL+5*time.Second, "the other replica's gateway session", func() bool {
		n, _ := r.dc.Sessions()
		return n > identifies && r.dc.Connected() == 1
	})
	t.Logf("the gateway moved %s after the kill (TTL %s)", time.Since(killed).Round(100*time.Millisecond), replicaTTL)
	if got := waitHolder(t, r, ps, 5*time.Second); got != other {
		t.Fatalf("replica %d holds the gateway, want %d", got, other)
	}
	checkReadyz(t, ps, other)

	r.dc.UserMessage("C3", "111", "after the failover", true)
	waitDiscordReply(t, r.dc, "C3", "All done.")
	if n := r.dc.MaxConnected(); n != 1 {
		t.Errorf("%d gateway sessions at once, want 1", n)
	}
	if v := r.dc.Violations(); len(v) > 0 {
		t.Errorf("Discord protocol violations: %v", v)
	}
}

// TestDiscordGatewayHandedOverOnStop: SIGINT of the holder closes its
// gateway and resigns; the other opens the gateway well before the TTL
// would have let it, and a mention after the hand-over is answered.
func TestDiscordGatewayHandedOverOnStop(t *testing.T) {
	const ttl = 30 * time.Second // a hand-over well before it can only come from the resignation
	r := newDiscordReplicaRig(t, ttl)
	ps := []*botProc{r.start(t, 0), r.start(t, 1)}
	holder := waitHolder(t, r, ps, 15*time.Second)
	identifies, _ := r.dc.Sessions()
	stopped := time.Now()
	ps[holder].stop(t)
	waitFor(t, ttl, "the other replica's gateway session", func() bool {
		n, _ := r.dc.Sessions()
		return n > identifies && r.dc.Connected() == 1
	})
	if took := time.Since(stopped); took >= ttl/2 {
		t.Errorf("the gateway moved %s after SIGINT; the resignation should hand it over well before the TTL (%s)", took, ttl)
	}
	if !strings.Contains(ps[holder].stderr.String(), "resigned the discord gateway") {
		t.Errorf("the stopped holder did not resign:\n%s", ps[holder].stderr)
	}
	if got := waitHolder(t, r, ps, 5*time.Second); got != 1-holder {
		t.Fatalf("replica %d holds the gateway, want %d", got, 1-holder)
	}
	r.dc.UserMessage("C4", "111", "after the hand-over", true)
	waitDiscordReply(t, r.dc, "C4", "All done.")
	if n := r.dc.MaxConnected(); n != 1 {
		t.Errorf("%d gateway sessions at once, want 1 (the holder closes before it resigns)", n)
	}
}

// TestDiscordRESTFromNonHolder: the thread's holder answers through REST
// while another replica holds the gateway. The gateway's leader key is
// deleted under the first replica (as an operator might): it closes the
// gateway, stands again behind the other, which opens it; a mention in
// the first replica's thread reaches it through etcd and it answers.
func TestDiscordRESTFromNonHolder(t *testing.T) {
	t.Parallel()
	r := newDiscordReplicaRig(t, replicaTTL)
	ps := []*botProc{r.start(t, 0)}
	if got := waitHolder(t, r, ps, 15*time.Second); got != 0 {
		t.Fatalf("replica %d holds the gateway, want 0", got)
	}
	ps = append(ps, r.start(t, 1))
	r.dc.UserMessage("C1", "111", "plan the release", true)
	waitDiscordReply(t, r.dc, "C1", "All done.")
	if got := ownerOf(ps, "discord/C1"); got != 0 {
		t.Fatalf("replica %d holds discord/C1, want 0", got)
	}

	cli := r.etcd.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/pinplan/election/discord/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 2 {
		t.Fatalf("election keys: %v %v, want the two replicas'", resp, err)
	}
	var key string
	for _, kv := range resp.Kvs {
		if string(kv.Value) == "r0" {
			key = string(kv.Key)
		}
	}
	if _, err := cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if got := waitHolder(t, r, ps, 10*time.Second); got != 1 {
		t.Fatalf("replica %d holds the gateway after its key went, want 1", got)
	}
	if !strings.Contains(ps[0].stderr.String(), "the leader key is gone") {
		t.Errorf("replica 0 did not say why it gave the gateway up:\n%s", ps[0].stderr)
	}
	waitFor(t, 10*time.Second, "replica 0 to see the new holder", func() bool {
		_, body := httpGet(t, ps[0].URL+"/readyz")
		return strings.Contains(body, "held by replica r1")
	})
	checkReadyz(t, ps, 1)

	second := r.dc.UserMessage("C1", "111", "and the notes", true)
	answersTo := func(trigger string) int {
		n := 0
		for _, m := range r.dc.Messages("C1") {
			if m.AuthorID == fakediscord.BotID && len(m.Embeds) == 0 && m.Reference == trigger {
				n++
			}
		}
		return n
	}
	waitFor(t, 60*time.Second, "the answer to the second mention", func() bool { return answersTo(second) >= 1 })
	if got := ownerOf(ps[1:], "discord/C1"); got != -1 {
		t.Errorf("replica 1 took discord/C1; replica 0 holds it and should answer\n%s", stderrs(ps...))
	}
	// A third mention answered: a doubled second answer would show by now.
	r.dc.UserMessage("C2", "111", "write the notes", true)
	waitDiscordReply(t, r.dc, "C2", "All done.")
	if n := answersTo(second); n != 1 {
		t.Errorf("%d answers to the second mention, want 1", n)
	}
	// No check of MaxConnected: a deleted key elects the next replica
	// while the first is still hearing of it, with no order between
	// them (the graceful stop has one: close, then resign).
}
