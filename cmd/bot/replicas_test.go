package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/etcdstore"
	"github.com/pinplan/pinplan/internal/etcdtest"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/store"
)

// replicaRig is three (or more) bot processes sharing one embedded etcd,
// one Slack fake (Socket Mode: it spreads envelopes round-robin over the
// replicas' connections, as Slack does) and one model fake.
type replicaRig struct {
	etcd  *etcdtest.Server
	slack *fakeslack.Server
	model *fakeopenai.Server
	env   map[string]string
	mu    sync.Mutex
	gate  chan struct{} // when set, model requests wait on it
	// arrivals are the model requests' arrival times.
	arrivals []time.Time
	delay    time.Duration // each model answer's (0: 150 ms); set before the replicas start
}

const replicaTTL = 3 * time.Second

func newReplicaRig(t *testing.T, revisions int) *replicaRig {
	return newReplicaRigTTL(t, revisions, replicaTTL)
}

func newReplicaRigTTL(t testing.TB, revisions int, ttl time.Duration) *replicaRig {
	t.Helper()
	r := &replicaRig{etcd: etcdtest.Start(t), slack: &fakeslack.Server{}}
	script := fakeopenai.Script(planScript(revisions, "**All done.** See the plan above."))
	r.model = &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		r.mu.Lock()
		gate, delay := r.gate, r.delay
		r.arrivals = append(r.arrivals, time.Now())
		r.mu.Unlock()
		if gate != nil {
			<-gate
		}
		time.Sleep(cmp.Or(delay, 150*time.Millisecond))
		return script(req)
	}}
	ss := httptest.NewServer(r.slack)
	t.Cleanup(ss.Close)
	ms := httptest.NewServer(r.model)
	t.Cleanup(ms.Close)
	r.env = map[string]string{
		"PINPLAN_HTTP_ADDR": "127.0.0.1:0", "PINPLAN_WEB_TOKEN": "replica-test-token-0123456789",
		"OPENAI_BASE_URL": ms.URL + "/v1", "OPENAI_API_KEY": "sk-test",
		"SLACK_BOT_TOKEN": "xoxb-test-token", "SLACK_API_URL": ss.URL + "/api/", "SLACK_APP_TOKEN": "xapp-test-token",
		"PINPLAN_ETCD_ENDPOINTS": r.etcd.Endpoint, "PINPLAN_ETCD_PREFIX": "/pinplan/", "PINPLAN_LEASE_TTL": ttl.String(),
		"PINPLAN_LOG_LEVEL": "debug",
	}
	return r
}

// start starts replica i.
func (r *replicaRig) start(t testing.TB, i int) *botProc {
	t.Helper()
	env := map[string]string{"PINPLAN_REPLICA_ID": fmt.Sprint("r", i), "PINPLAN_DB": filepath.Join(t.TempDir(), "unused.db")}
	for k, v := range r.env {
		env[k] = v
	}
	before := r.slack.Connected()
	p := startBot(t, env, botBinary)
	waitFor(t, 15*time.Second, "the replica's Socket Mode connection", func() bool { return r.slack.Connected() > before })
	return p
}

// stderrs joins the replicas' logs, for a failure message.
func stderrs(ps ...*botProc) string {
	var b strings.Builder
	for i, p := range ps {
		fmt.Fprintf(&b, "--- replica %d ---\n%s\n", i, p.stderr)
	}
	return b.String()
}

// answers returns the bot's final answers in channel.
func answers(s *fakeslack.Server, channel string) []fakeslack.Message {
	var out []fakeslack.Message
	for _, m := range s.Messages(channel) {
		if strings.Contains(m.Text, "All done.") && m.Blocks == "" {
			out = append(out, m)
		}
	}
	return out
}

// TestReplicasShareThreads: three replicas, three threads whose messages
// arrive spread over every replica's connection. Each thread is run by
// one replica: one plan post, one pin, one answer, and the follow-up
// reaches the model after the first message, in order.
func TestReplicasShareThreads(t *testing.T) {
	t.Parallel()
	r := newReplicaRig(t, 3)
	ps := []*botProc{r.start(t, 0), r.start(t, 1), r.start(t, 2)}
	channels := []string{"C1", "C2", "C3"}
	for i, ch := range channels {
		ts := fmt.Sprintf("17000000%02d.000100", i)
		if _, err := r.slack.Push(fmt.Sprint("Ev", i), mention(ch, ts, "task "+ch)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	for i, ch := range channels {
		ts := fmt.Sprintf("17000000%02d.000100", i)
		follow := map[string]any{"type": "message", "user": "U1", "text": "and also " + ch, "ts": fmt.Sprintf("17000001%02d.000100", i), "thread_ts": ts, "channel": ch, "event_ts": ts}
		if _, err := r.slack.Push(fmt.Sprint("EvF", i), follow); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range channels {
		waitFor(t, 60*time.Second, "an answer in "+ch, func() bool { return len(answers(r.slack, ch)) >= 1 })
	}
	time.Sleep(2 * time.Second) // anything doubled would show by now
	for _, ch := range channels {
		if n := len(planMessages(r.slack, ch)); n != 1 {
			t.Errorf("%s: %d plan messages, want 1\n%s", ch, n, stderrs(ps...))
		}
		if n := len(r.slack.Pinned(ch)); n != 1 {
			t.Errorf("%s: %d pins, want 1", ch, n)
		}
		// One answer per turn: the follow-up either joined the first turn
		// or started a second one; never one answer twice.
		got := answers(r.slack, ch)
		if len(got) > 2 {
			t.Errorf("%s: %d answers, want at most one per turn", ch, len(got))
		}
	}
	// Order: in every request that carries both, the task comes first.
	for _, req := range r.model.Requests() {
		var order []string
		for _, m := range req.Messages {
			if m.Role == openai.ChatMessageRoleUser {
				order = append(order, m.Content)
			}
		}
		joined := strings.Join(order, "\n")
		for _, ch := range channels {
			a, b := strings.Index(joined, "task "+ch), strings.Index(joined, "and also "+ch)
			if a >= 0 && b >= 0 && b < a {
				t.Errorf("the follow-up of %s reached the model before its task:\n%s", ch, joined)
			}
		}
	}
	if v := r.slack.Violations(); len(v) > 0 {
		t.Errorf("Slack protocol violations: %v", v)
	}
	if code, body := httpGet(t, ps[0].URL+"/readyz"); code != 200 || !strings.Contains(body, "replica r0: lease") || !strings.Contains(body, "held") || !strings.Contains(body, "3 replicas live") {
		t.Errorf("/readyz: %d %s; want the replica's lease and 3 replicas", code, body)
	}
	code, metrics := httpGet(t, ps[0].URL+"/metrics")
	if code != 200 || !strings.Contains(metrics, "pinplan_replica_takeovers_total") || !strings.Contains(metrics, "pinplan_replicas 3") {
		t.Errorf("/metrics lacks the replica's counters")
	}
}

// ownerOf returns the index of the replica whose log says it took key.
func ownerOf(ps []*botProc, key string) int {
	for i, p := range ps {
		for _, line := range strings.Split(p.stderr.String(), "\n") {
			if strings.Contains(line, `msg="took the session"`) && strings.Contains(line, " session="+key) {
				return i
			}
		}
	}
	return -1
}

// TestReplicaKilledMidTurn: kill -9 of the replica running a turn;
// another one takes the thread within the TTL plus 2 s and finishes it on
// the same plan message: one post, one pin, one answer.
func TestReplicaKilledMidTurn(t *testing.T) {
	r := newReplicaRig(t, 4)
	ps := []*botProc{r.start(t, 0), r.start(t, 1), r.start(t, 2)}
	if _, err := r.slack.Push("Ev1", mention("C1", "1700000000.000100", "task C1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the plan message", func() bool { return len(planMessages(r.slack, "C1")) == 1 })
	key := "slack/T1/C1/1700000000.000100"
	owner := -1
	waitFor(t, 10*time.Second, "an owner", func() bool { owner = ownerOf(ps, key); return owner >= 0 })
	// Hold the model so the turn is mid-way at the kill.
	gate := make(chan struct{})
	r.mu.Lock()
	r.gate = gate
	r.mu.Unlock()
	time.Sleep(400 * time.Millisecond)
	before := len(r.model.Requests())
	ps[owner].kill()
	killed := time.Now()
	r.mu.Lock()
	r.gate = nil
	r.mu.Unlock()
	close(gate)
	waitFor(t, replicaTTL+10*time.Second, "another replica's model request", func() bool { return len(r.model.Requests()) > before })
	if took := time.Since(killed); took > replicaTTL+2*time.Second {
		t.Errorf("the next model request came %s after the kill, want within TTL (%s) + 2 s", took, replicaTTL)
	}
	waitFor(t, 60*time.Second, "the answer", func() bool { return len(answers(r.slack, "C1")) >= 1 })
	answered := time.Now()
	waitFor(t, 60*time.Second, "the plan done", func() bool { m := planMessages(r.slack, "C1"); return len(m) > 0 && planDone(m[len(m)-1].Blocks) })
	t.Logf("plan done %s after the answer", time.Since(answered))
	time.Sleep(time.Second)
	if n := len(planMessages(r.slack, "C1")); n != 1 {
		t.Errorf("%d plan messages, want the same one\n%s", n, stderrs(ps...))
	}
	if n := len(r.slack.Pinned("C1")); n != 1 {
		t.Errorf("%d pins, want 1", n)
	}
	if n := len(answers(r.slack, "C1")); n != 1 {
		t.Errorf("%d answers, want 1", n)
	}
	if !planDone(planMessages(r.slack, "C1")[0].Blocks) {
		t.Errorf("the plan message does not end done: %s\n%s", planMessages(r.slack, "C1")[0].Blocks, stderrs(ps...))
	}
}

// TestPausedReplicaChangesNothing: SIGSTOP the replica running a turn past
// its TTL; another one finishes the turn; SIGCONT: the paused one commits
// nothing and sends nothing (its late model answer is dropped), and exits.
func TestPausedReplicaChangesNothing(t *testing.T) {
	r := newReplicaRig(t, 4)
	ps := []*botProc{r.start(t, 0), r.start(t, 1)}
	if _, err := r.slack.Push("Ev1", mention("C1", "1700000000.000100", "task C1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the plan message", func() bool { return len(planMessages(r.slack, "C1")) == 1 })
	key := "slack/T1/C1/1700000000.000100"
	owner := -1
	waitFor(t, 10*time.Second, "an owner", func() bool { owner = ownerOf(ps, key); return owner >= 0 })
	paused := ps[owner]
	// Pause it while it waits for the model, with nothing on its way to
	// Slack: a request in flight at the pause may land once (DESIGN §14).
	gate := make(chan struct{})
	r.mu.Lock()
	r.gate = gate
	r.mu.Unlock()
	n := len(r.model.Requests())
	waitFor(t, 30*time.Second, "a model request held at the gate", func() bool { return len(r.model.Requests()) > n })
	time.Sleep(500 * time.Millisecond)
	if err := syscall.Kill(-paused.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(replicaTTL + time.Second)
	r.mu.Lock()
	r.gate = nil
	r.mu.Unlock()
	close(gate) // the paused replica's answer is on its way, unread
	waitFor(t, 60*time.Second, "the answer from the other replica", func() bool { return len(answers(r.slack, "C1")) >= 1 })
	waitFor(t, 30*time.Second, "the plan to show done", func() bool {
		plans := planMessages(r.slack, "C1")
		return len(plans) == 1 && planDone(plans[0].Blocks)
	})
	// The new holder's last sends land first (its pace is a share of the
	// workspace's): nothing reaches Slack for 3 s.
	waitFor(t, 30*time.Second, "Slack to fall quiet", func() bool {
		calls := r.slack.Calls("")
		return len(calls) > 0 && time.Since(calls[len(calls)-1].At) > 3*time.Second
	})
	callsBefore := len(r.slack.Calls(""))
	if err := syscall.Kill(-paused.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-paused.done:
	case <-time.After(15 * time.Second):
		t.Errorf("the paused replica did not stop after it found its lease gone")
	}
	time.Sleep(time.Second)
	if !strings.Contains(paused.stderr.String(), "lease lost") {
		t.Errorf("the paused replica did not say it lost its lease:\n%s", paused.stderr)
	}
	for _, c := range r.slack.Calls("")[callsBefore:] {
		if c.Method == "chat.postMessage" || c.Method == "chat.update" || c.Method == "pins.add" {
			t.Errorf("after SIGCONT: %s %v reached Slack (the paused replica must send nothing)\n%s", c.Method, c.Params, stderrs(ps...))
		}
	}
	if n := len(answers(r.slack, "C1")); n != 1 {
		t.Errorf("%d answers, want 1", n)
	}
	if n := len(planMessages(r.slack, "C1")); n != 1 {
		t.Errorf("%d plan messages, want 1", n)
	}
}

// TestGracefulStopHandsOver: SIGTERM of the replica holding a thread
// revokes its lease; another one takes the thread at once, not after the
// TTL.
func TestGracefulStopHandsOver(t *testing.T) {
	const ttl = 30 * time.Second // a takeover well before it can only come from the revoked lease
	r := newReplicaRigTTL(t, 6, ttl)
	ps := []*botProc{r.start(t, 0), r.start(t, 1)}
	if _, err := r.slack.Push("Ev1", mention("C1", "1700000000.000100", "task C1")); err != nil {
		t.Fatal(err)
	}
	key := "slack/T1/C1/1700000000.000100"
	owner := -1
	waitFor(t, 30*time.Second, "an owner", func() bool { owner = ownerOf(ps, key); return owner >= 0 })
	waitFor(t, 30*time.Second, "the plan message", func() bool { return len(planMessages(r.slack, "C1")) == 1 })
	other := ps[1-owner]
	stopped := time.Now()
	if err := syscall.Kill(-ps[owner].cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ps[owner].done:
		if !strings.Contains(ps[owner].stderr.String(), "msg=stopped") {
			t.Errorf("the replica did not stop cleanly on SIGTERM:\n%s", ps[owner].stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the replica did not stop on SIGTERM")
	}
	waitFor(t, 30*time.Second, "the other replica to take the thread", func() bool { return ownerOf([]*botProc{other}, key) == 0 })
	if took := time.Since(stopped); took >= ttl/2 {
		t.Errorf("taken %s after SIGTERM; the revoked lease should hand it over well before the TTL (%s) would", took, ttl)
	}
	waitFor(t, 60*time.Second, "the answer", func() bool { return len(answers(r.slack, "C1")) >= 1 })
	if n := len(planMessages(r.slack, "C1")); n != 1 {
		t.Errorf("%d plan messages, want 1", n)
	}
}

// TestGracefulStopHandsOverBeforeToolsClose: a replica stopping on
// SIGTERM releases its lease as soon as its sessions are at rest, before
// it closes its MCP servers, so a tool server slow to exit (here one that
// lingers after its stdin closes and ignores SIGTERM: about 4 s until
// pinplan kills it) does not hold its threads back. Before, the lease was
// revoked last, and the threads waited for the tool servers; on a loaded
// machine, for as long as the lease's TTL.
func TestGracefulStopHandsOverBeforeToolsClose(t *testing.T) {
	t.Parallel()
	const ttl = 30 * time.Second
	r := newReplicaRigTTL(t, 2, ttl)
	cfg := fmt.Sprintf("[mcp.ev]\ncommand = [\"sh\", \"-c\", \"trap '' TERM; %s; sleep 20\"]\n", mcpServerPath(t, "everything"))
	path := filepath.Join(t.TempDir(), "pinplan.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r.env["PINPLAN_CONFIG"] = path
	ps := []*botProc{r.start(t, 0), r.start(t, 1)}
	for _, p := range ps {
		waitMCPReady(t, p, "ev")
	}
	key := "slack/T1/C1/1700000000.000100"
	if _, err := r.slack.Push("Ev1", mention("C1", "1700000000.000100", "task C1")); err != nil {
		t.Fatal(err)
	}
	owner := -1
	waitFor(t, 30*time.Second, "an owner", func() bool { owner = ownerOf(ps, key); return owner >= 0 })
	waitFor(t, 30*time.Second, "the plan message", func() bool { return len(planMessages(r.slack, "C1")) == 1 })
	other := ps[1-owner]
	if err := syscall.Kill(-ps[owner].cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var takenFirst bool
	select {
	case <-ps[owner].done:
		// Taken before the stopping replica was done closing its tools?
		takenFirst = ownerOf([]*botProc{other}, key) == 0
	case <-time.After(30 * time.Second):
		t.Fatal("the replica did not stop on SIGTERM")
	}
	if !takenFirst {
		t.Errorf("the thread was not taken over while the stopping replica closed its tool servers: its lease was released after them\n%s", ps[owner].stderr)
	}
	waitFor(t, 60*time.Second, "the answer", func() bool { return len(answers(r.slack, "C1")) >= 1 })
}

// TestMigrateToEtcd: a thread answered on the bbolt file, then `bot
// migrate --to etcd`, then a follow-up in that thread answered by a
// replica on etcd with the thread's history; the file is unchanged, and a
// second migrate into the same prefix is refused.
func TestMigrateToEtcd(t *testing.T) {
	t.Parallel()
	r := newReplicaRig(t, 2)
	dbPath := filepath.Join(t.TempDir(), "pinplan.db")
	boltEnv := map[string]string{"PINPLAN_DB": dbPath}
	for k, v := range r.env {
		if !strings.HasPrefix(k, "PINPLAN_ETCD") && k != "PINPLAN_LEASE_TTL" {
			boltEnv[k] = v
		}
	}
	p := startBot(t, boltEnv, botBinary)
	waitFor(t, 15*time.Second, "the Socket Mode connection", func() bool { return r.slack.Connected() == 1 })
	if _, err := r.slack.Push("Ev1", mention("C1", "1700000000.000100", "task C1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the answer on bbolt", func() bool { return len(answers(r.slack, "C1")) == 1 })
	// A second thread is reset, so the file holds an archive too.
	if _, err := r.slack.Push("EvR1", mention("C2", "1700000000.000200", "task C2")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the answer in C2", func() bool { return len(answers(r.slack, "C2")) == 1 })
	reset := map[string]any{"type": "message", "user": "U1", "text": "reset", "ts": "1700000001.000200", "thread_ts": "1700000000.000200", "channel": "C2", "event_ts": "1700000001.000200"}
	if _, err := r.slack.Push("EvR2", reset); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the reset", func() bool {
		for _, m := range r.slack.Messages("C2") {
			if m.BotID != "" && strings.Contains(m.Text, "Started fresh") {
				return true
			}
		}
		return false
	})
	time.Sleep(500 * time.Millisecond)
	p.stop(t)
	waitFor(t, 10*time.Second, "the connection to close", func() bool { return r.slack.Connected() == 0 })
	// Read marks as a Discord adapter leaves them: copied as they are.
	db, err := store.Open(dbPath, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	marks := `{"saved":"2026-12-01T00:00:00Z","channels":{"T7":{"last":"17","at":"2026-12-01T00:00:00Z"}}}`
	if err := errors.Join(db.SaveMarks(context.Background(), "discord", []byte(marks)), db.Close()); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, dbPath)

	migrateEnv := map[string]string{}
	for k, v := range r.env {
		migrateEnv[k] = v
	}
	migrateEnv["PINPLAN_DB"] = dbPath
	out, err := runCommand(t, migrateEnv, "migrate", "--to", "etcd")
	if err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	if !strings.Contains(out, "copied") || !strings.Contains(out, "2 sessions") || !strings.Contains(out, "1 archives") || !strings.Contains(out, "checked") {
		t.Errorf("migrate said: %s", out)
	}
	es, err := etcdstore.New(context.Background(), r.etcd.Client(t), etcdstore.Options{Prefix: "/pinplan/"})
	if err != nil {
		t.Fatal(err)
	}
	c2 := "slack/T1/C2/1700000000.000200"
	if n, hist, err := es.Archived(context.Background(), c2, 1); err != nil || n != 1 || len(hist) == 0 {
		t.Errorf("C2's archive in etcd: %d archives, %d entries, %v", n, len(hist), err)
	}
	if rec, plans, err := es.ArchivedState(context.Background(), c2, 1); err != nil || rec == nil || len(plans) == 0 {
		t.Errorf("C2's archived record and plans in etcd: %d bytes, %d plans, %v", len(rec), len(plans), err)
	}
	if got, err := es.Marks(context.Background(), "discord"); err != nil || string(got) != marks {
		t.Errorf("read marks in etcd: %q, %v; want them copied", got, err)
	}
	if readFile(t, dbPath) != before {
		t.Error("migrate changed the bbolt file")
	}
	if out, err := runCommand(t, migrateEnv, "migrate", "--to", "etcd"); err == nil || !strings.Contains(out, "already holds") {
		t.Errorf("a second migrate into the same prefix: %v\n%s; want it refused", err, out)
	}

	q := r.start(t, 0)
	follow := map[string]any{"type": "message", "user": "U1", "text": "and one more thing", "ts": "1700000100.000100", "thread_ts": "1700000000.000100", "channel": "C1", "event_ts": "1700000100.000100"}
	n := len(r.model.Requests())
	if _, err := r.slack.Push("Ev2", follow); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the follow-up's answer", func() bool {
		for _, m := range r.slack.Messages("C1") {
			if m.Text == "done" {
				return true
			}
		}
		return false
	})
	reqs := r.model.Requests()[n:]
	if len(reqs) == 0 {
		t.Fatalf("no model request for the follow-up\n%s", q.stderr)
	}
	var users []string
	for _, m := range reqs[0].Messages {
		if m.Role == openai.ChatMessageRoleUser {
			users = append(users, m.Content)
		}
	}
	if joined := strings.Join(users, "\n"); !strings.Contains(joined, "task C1") || !strings.Contains(joined, "and one more thing") {
		t.Errorf("the follow-up's request lacks the migrated history: %q", users)
	}
}

// runCommand runs the bot binary with args and env and returns its output.
func runCommand(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(botBinary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestReplicaKilledWithCardOpen: kill -9 of the replica whose turn waits
// on an approval card; the click arrives at another replica (the dead
// one's connection is gone), is decided there, and the replica that takes
// the thread over runs the call exactly once, on the same card.
func TestReplicaKilledWithCardOpen(t *testing.T) {
	t.Parallel()
	r := newReplicaRig(t, 1)
	dir := t.TempDir()
	r.model.Respond = toolScript(dir)
	cfg := fmt.Sprintf("[mcp.fs]\ncommand = [%q, %q]\n", mcpServerPath(t, "filesystem"), dir)
	path := filepath.Join(t.TempDir(), "pinplan.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r.env["PINPLAN_CONFIG"] = path
	r.slack.AddUser("U1", "ann")
	var ps []*botProc
	for i := range 3 {
		ps = append(ps, r.start(t, i))
		waitMCPReady(t, ps[i], "fs")
	}
	thread := "1700030000.000100"
	// The card is posted, but its owner never learns so: Slack's answer
	// is held until after the kill, so the card's ref is never recorded.
	// The next owner finds the card in the thread instead of posting it
	// again.
	r.slack.DelayAnswer("chat.postMessage", 20*time.Second, 1)
	if _, err := r.slack.Push("EvC", mention("C1", thread, "write once")); err != nil {
		t.Fatal(err)
	}
	card, allow := waitCard(t, r.slack, thread, "fs__write_file", "allow")
	key := "slack/T1/C1/" + thread
	owner := ownerOf(ps, key)
	if owner < 0 {
		t.Fatalf("no replica took %s\n%s", key, stderrs(ps...))
	}
	ps[owner].kill()
	waitFor(t, 10*time.Second, "the dead replica's connection to close", func() bool { return r.slack.Connected() == 2 })
	payload := r.slack.BlockActions("U1", "C1", card.TS, allow)
	if payload == nil {
		t.Fatalf("no allow button on %s", card.TS)
	}
	if _, err := r.slack.PushInteraction(payload); err != nil {
		t.Fatal(err)
	}
	waitReply(t, r.slack, "C1", thread, "tool said:")
	time.Sleep(time.Second)
	if got := readOut(dir); got != "once" {
		t.Errorf("out.txt = %q, want the approved write", got)
	}
	if n := len(botMessages(r.slack, "C1", thread, "Approval needed")); n != 1 {
		t.Errorf("%d cards, want the same one", n)
	}
	if n := len(botMessages(r.slack, "C1", thread, "tool said:")); n != 1 {
		t.Errorf("%d answers, want 1", n)
	}
	// The call ran once: one write among the live replicas' MCP calls, and
	// one write result in what the model was sent.
	calls := 0
	for i, p := range ps {
		if i == owner {
			continue
		}
		_, metrics := httpGet(t, p.URL+"/metrics")
		for _, line := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(line, "pinplan_mcp_calls_total{") && strings.Contains(line, `tool="write_file"`) {
				var n int
				fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &n)
				calls += n
			}
		}
	}
	if calls != 1 {
		t.Errorf("write_file ran %d times on the live replicas, want 1\n%s", calls, stderrs(ps...))
	}
	reqs := r.model.Requests()
	results := 0
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role == openai.ChatMessageRoleTool && strings.Contains(m.Content, "Successfully wrote") {
			results++
		}
	}
	if results != 1 {
		t.Errorf("the last request carries %d write results, want 1", results)
	}
}

// TestReplicasShareTheSlackPace: three busy threads on three replicas,
// against a Slack fake that enforces the workspace's limit on chat.update
// (15 per 5 s, a scaled-down Tier 3) with pinplan's pace set to the
// same budget (120 a minute). Each replica takes a third, so together
// they meet no 429, and every plan ends on its last revision.
func TestReplicasShareTheSlackPace(t *testing.T) {
	r := newReplicaRig(t, 8)
	r.env["PINPLAN_SLACK_EDITS_PER_MINUTE"] = "120"
	r.slack.Limit("chat.update", 15, 5*time.Second)
	ps := []*botProc{r.start(t, 0), r.start(t, 1), r.start(t, 2)}
	for _, p := range ps {
		waitFor(t, 10*time.Second, "the pace shared by three", func() bool { return strings.Contains(p.stderr.String(), "replicas=3") })
	}
	channels := []string{"C1", "C2", "C3"}
	for i, ch := range channels {
		if _, err := r.slack.Push(fmt.Sprint("EvT", i), mention(ch, fmt.Sprintf("17000000%02d.000100", i), "task "+ch)); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range channels {
		waitFor(t, 90*time.Second, "the plan of "+ch+" on its last revision", func() bool {
			plans := planMessages(r.slack, ch)
			return len(plans) == 1 && strings.Contains(plans[0].Blocks, "revision 8 ") && planDone(plans[0].Blocks)
		})
	}
	for _, c := range r.slack.Calls("") {
		if c.Status == 429 {
			t.Errorf("%s at %s was rate limited: the replicas together went over the workspace's pace\n%s", c.Method, c.At.Format(time.StampMilli), stderrs(ps...))
			break
		}
	}
	// Each thread was run by one replica; together they spread the work.
	owners := map[int]bool{}
	for i := range channels {
		owners[ownerOf(ps, fmt.Sprintf("slack/T1/C%d/17000000%02d.000100", i+1, i))] = true
	}
	if v := r.slack.Violations(); len(v) > 0 {
		t.Errorf("Slack protocol violations: %v", v)
	}
	t.Logf("threads held by %d replicas", len(owners))
}

// TestConsoleFollowsThreadsHeldElsewhere: the console of a replica that
// does not run a thread shows its plan and run state live, from etcd.
func TestConsoleFollowsThreadsHeldElsewhere(t *testing.T) {
	t.Parallel()
	r := newReplicaRig(t, 3)
	ps := []*botProc{r.start(t, 0), r.start(t, 1)}
	streams := []*syncBuffer{watchEvents(t, ps[0].URL), watchEvents(t, ps[1].URL)}
	if _, err := r.slack.Push("Ev1", mention("C1", "1700000000.000100", "task C1")); err != nil {
		t.Fatal(err)
	}
	key := "slack/T1/C1/1700000000.000100"
	owner := -1
	waitFor(t, 30*time.Second, "an owner", func() bool { owner = ownerOf(ps, key); return owner >= 0 })
	other := streams[1-owner]
	waitFor(t, 60*time.Second, "the other console to show the plan done", func() bool {
		s := other.String()
		return strings.Contains(s, `"thread":"`+key+`"`) && strings.Contains(s, `"type":"plan"`) && strings.Contains(s, `"status":"done"`)
	})
}

// BenchmarkFailover measures failover as DESIGN §14 and BENCHMARKS.md
// define it: from kill -9 of the replica running a turn to the next model
// request, from another replica, over b.N kills at the default TTL
// (10 s), with two replicas (the killed one is started again each time).
// It reports p50 and p99 in seconds. Run it with
//
//	go test -run XXX -bench Failover -benchtime 20x ./cmd/bot/
func BenchmarkFailover(b *testing.B) {
	r := newReplicaRigTTL(b, 10, 10*time.Second)
	r.delay = 700 * time.Millisecond // a turn outlasts the setup of each kill
	ps := []*botProc{r.start(b, 0), r.start(b, 1)}
	var took []time.Duration
	b.ResetTimer()
	for i := range b.N {
		ch := fmt.Sprintf("F%03d", i)
		ts := "1700000000.000100"
		if _, err := r.slack.Push("EvF"+ch, mention(ch, ts, "task "+ch)); err != nil {
			b.Fatal(err)
		}
		waitFor(b, 60*time.Second, "the plan message", func() bool { return len(planMessages(r.slack, ch)) == 1 })
		owner := -1
		waitFor(b, 10*time.Second, "an owner", func() bool { owner = ownerOf(ps, "slack/T1/"+ch+"/"+ts); return owner >= 0 })
		gate := make(chan struct{})
		r.mu.Lock()
		r.gate = gate
		n := len(r.arrivals)
		r.mu.Unlock()
		waitFor(b, 30*time.Second, "a model request held", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.arrivals) > n })
		ps[owner].kill()
		killed := time.Now()
		r.mu.Lock()
		r.gate, n = nil, len(r.arrivals)
		r.mu.Unlock()
		close(gate)
		waitFor(b, 60*time.Second, "the next model request", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.arrivals) > n })
		r.mu.Lock()
		took = append(took, r.arrivals[n].Sub(killed))
		r.mu.Unlock()
		waitFor(b, 120*time.Second, "the answer", func() bool { return len(answers(r.slack, ch)) >= 1 })
		if n := len(answers(r.slack, ch)); n != 1 {
			b.Errorf("%s: %d answers, want 1", ch, n)
		}
		ps[owner] = r.start(b, owner)
	}
	b.StopTimer()
	slices.Sort(took)
	pct := func(q float64) float64 { return took[min(len(took)-1, int(q*float64(len(took))))].Seconds() }
	b.ReportMetric(pct(0.5), "p50-s")
	b.ReportMetric(pct(0.99), "p99-s")
	b.ReportMetric(took[len(took)-1].Seconds(), "max-s")
}

// TestConsoleShowsCardsHeldElsewhere: the console of a replica that does
// not run a thread shows the thread's open approval card, from the
// session's records in etcd (the router's Cards, through the replicas'
// handler), as the console of a single process does for a session it
// evicted.
func TestConsoleShowsCardsHeldElsewhere(t *testing.T) {
	t.Parallel()
	r := newReplicaRig(t, 1)
	dir := t.TempDir()
	r.model.Respond = toolScript(dir)
	cfg := fmt.Sprintf("[mcp.fs]\ncommand = [%q, %q]\n", mcpServerPath(t, "filesystem"), dir)
	path := filepath.Join(t.TempDir(), "pinplan.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r.env["PINPLAN_CONFIG"] = path
	var ps []*botProc
	for i := range 2 {
		ps = append(ps, r.start(t, i))
		waitMCPReady(t, ps[i], "fs")
	}
	thread := "1700040000.000100"
	if _, err := r.slack.Push("EvK", mention("C1", thread, "write once")); err != nil {
		t.Fatal(err)
	}
	waitCard(t, r.slack, thread, "fs__write_file", "allow")
	key := "slack/T1/C1/" + thread
	owner := ownerOf(ps, key)
	if owner < 0 {
		t.Fatalf("no replica took %s\n%s", key, stderrs(ps...))
	}
	for i, p := range ps {
		var view struct {
			Cards []struct {
				Tool string `json:"tool"`
			} `json:"cards"`
		}
		getJSON(t, p.URL+"/api/threads/"+strings.ReplaceAll(key, "/", "~"), &view)
		if len(view.Cards) != 1 {
			t.Errorf("replica %d (owner: %v) shows %d approval cards, want the open one: %+v", i, i == owner, len(view.Cards), view.Cards)
		}
	}
}

// TestTakeoverFirstRenderIsTheRightState: the replica running a thread
// finished its turn, but Slack failed every plan edit it tried (5xx), so
// the plan message still shows the first revision, working, with Stop.
// kill -9 of that replica: another one takes the session, and its first
// plan edit is the state the session's log reached (done, without Stop),
// within the TTL + 2 s (DESIGN §14), with nothing in between and no
// second answer.
func TestTakeoverFirstRenderIsTheRightState(t *testing.T) {
	r := newReplicaRig(t, 3)
	ps := []*botProc{r.start(t, 0), r.start(t, 1)}
	r.slack.FailHTTP("chat.update", 500, 1000)
	thread := "1700040000.000100"
	if _, err := r.slack.Push("EvT", mention("C1", thread, "task C1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the answer", func() bool { return len(answers(r.slack, "C1")) == 1 })
	key := "slack/T1/C1/" + thread
	owner := ownerOf(ps, key)
	if owner < 0 {
		t.Fatalf("no replica holds %s\n%s", key, stderrs(ps...))
	}
	plans := planMessages(r.slack, "C1")
	if len(plans) != 1 || planDone(plans[0].Blocks) {
		t.Fatalf("before the kill: %d plan messages, want one not done yet: %+v", len(plans), plans)
	}
	ps[owner].kill()
	killed := time.Now()
	r.slack.Heal("chat.update")
	var first fakeslack.Call
	waitFor(t, replicaTTL+20*time.Second, "a plan edit after the kill", func() bool {
		for _, c := range r.slack.Calls("chat.update") {
			if c.Error == "" && c.At.After(killed) {
				first = c
				return true
			}
		}
		return false
	})
	took := first.At.Sub(killed)
	t.Logf("first render %s after the kill (TTL %s)", took, replicaTTL)
	if took > replicaTTL+2*time.Second {
		t.Errorf("the first plan edit came %s after the kill, want within TTL (%s) + 2 s", took, replicaTTL)
	}
	if !planDone(first.Params["blocks"]) || strings.Contains(first.Params["blocks"], "pinplan:stop") {
		t.Errorf("the first plan edit after the takeover is not the final state:\n%s", first.Params["blocks"])
	}
	time.Sleep(time.Second)
	if got := planMessages(r.slack, "C1"); len(got) != 1 || !planDone(got[0].Blocks) {
		t.Errorf("after the takeover: %d plan messages, want the one, done: %+v", len(got), got)
	}
	if n := len(answers(r.slack, "C1")); n != 1 {
		t.Errorf("%d answers, want 1\n%s", n, stderrs(ps...))
	}
}

// planDone reports whether a Slack plan message's blocks show the plan
// done (its footer's state, not the header's count of done items).
func planDone(blocks string) bool { return strings.Contains(blocks, " · done") }
