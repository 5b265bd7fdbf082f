package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
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

// crashScript is each conversation's model script: plan revisions between
// rounds of another tool, then an answer.
func crashScript(first string) []fakeopenai.Reply {
	plan := func(a, b, c todo.Status) fakeopenai.Reply {
		return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: todo.ToolName, Arguments: todo.Encode([]todo.Item{
			{Content: "read " + first, Status: a}, {Content: "change it", Status: b}, {Content: "verify", Status: c}})}}}
	}
	clock := fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: "current_time", Arguments: "{}"}}}
	return []fakeopenai.Reply{
		plan(todo.InProgress, todo.Pending, todo.Pending),
		clock,
		{ToolCalls: []fakeopenai.Call{{Name: "current_time", Arguments: "{}"}, {Name: "current_time", Arguments: "{}"}}},
		plan(todo.Completed, todo.InProgress, todo.Pending),
		clock,
		plan(todo.Completed, todo.Completed, todo.InProgress),
		plan(todo.Completed, todo.Completed, todo.Completed),
		{Content: "finished " + first},
	}
}

func firstUser(req openai.ChatCompletionRequest) string {
	for _, m := range req.Messages {
		if m.Role == openai.ChatMessageRoleUser {
			return m.Content
		}
	}
	return ""
}

type crashState struct {
	keys    map[string]string // first user text -> session key
	running map[string][]openai.ChatCompletionMessage
}

// TestCrashSafety kills the bot with SIGKILL at random moments while
// sessions run, and checks the database after every kill: it passes
// bbolt's check, holds no half-written round, holds every snapshot the
// model was sent, and every session left running resumes with its full
// history in its next model request.
func TestCrashSafety(t *testing.T) {
	t.Parallel()
	iterations := 50
	if v, err := strconv.Atoi(os.Getenv("PINPLAN_CRASH_ITERATIONS")); err == nil {
		iterations = v
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	var rngMu sync.Mutex
	script := fakeopenai.Script(crashScript)
	fake := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		rngMu.Lock()
		d := time.Duration(rng.IntN(15)) * time.Millisecond
		rngMu.Unlock()
		time.Sleep(d)
		return script(req)
	}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	dbPath := filepath.Join(t.TempDir(), "crash.db")
	env := map[string]string{"PINPLAN_DB": dbPath, "PINPLAN_HTTP_ADDR": "127.0.0.1:0", "OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": "sk-test", "PINPLAN_LOG_LEVEL": "warn"}
	st := &crashState{keys: map[string]string{}, running: map[string][]openai.ChatCompletionMessage{}}
	ctx := context.Background()
	kills, resumedChecked := 0, 0
	for i := 0; i < iterations; i++ {
		before := len(fake.Requests())
		p := startBot(t, env, botBinary)
		resumedChecked += checkResumed(t, fake, before, st)
		// New work: two new threads and one message to an old one.
		for j := 0; j < 2; j++ {
			text := fmt.Sprintf("task %d-%d", i, j)
			out, err := postJSON(ctx, p.URL+"/api/threads", map[string]string{"text": text})
			if err != nil {
				t.Fatalf("iteration %d: %v", i, err)
			}
			st.keys[text] = out["key"].(string)
		}
		if i > 0 {
			id := strings.TrimPrefix(st.keys[fmt.Sprintf("task %d-0", i-1)], "web/")
			postJSON(ctx, p.URL+"/api/threads/"+id+"/messages", map[string]string{"text": "and one more thing"})
		}
		rngMu.Lock()
		wait := time.Duration(rng.IntN(250)) * time.Millisecond
		rngMu.Unlock()
		time.Sleep(wait)
		p.kill()
		kills++
		verifyAfterCrash(t, dbPath, fake, st)
		if t.Failed() {
			t.Fatalf("iteration %d (seed %d) failed; stderr:\n%s", i, seed, p.stderr)
		}
	}
	// A last run lets every session finish.
	before := len(fake.Requests())
	p := startBot(t, env, botBinary)
	resumedChecked += checkResumed(t, fake, before, st)
	waitFor(t, 60*time.Second, "every session to finish", func() bool {
		var list []map[string]any
		getJSON(t, p.URL+"/api/threads", &list)
		for _, th := range list {
			if th["state"] != "idle" {
				return false
			}
		}
		return len(list) == len(st.keys)
	})
	p.stop(t)
	db, err := store.Open(dbPath, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for text, key := range st.keys {
		cp, hist, inbox, err := db.Load(ctx, key)
		if err != nil || cp == nil {
			t.Fatalf("%s: %v", key, err)
		}
		last := hist[len(hist)-1].Message
		if len(inbox) != 0 || last.Role != "assistant" || !strings.HasPrefix(last.Content, "finished "+text) && last.Content != "done" {
			t.Errorf("%s did not finish: inbox %d, last %s %q", key, len(inbox), last.Role, last.Content)
		}
		if cp.Revision != 4 {
			t.Errorf("%s: revision %d, want 4", key, cp.Revision)
		}
	}
	t.Logf("%d kills, %d resumed sessions checked, %d model requests", kills, resumedChecked, len(fake.Requests()))
	if resumedChecked == 0 {
		t.Error("no kill left a session running: the test did not exercise resume")
	}
}

// checkResumed waits for the first request of every session the last kill
// left running and checks it carries the stored history in full.
func checkResumed(t *testing.T, fake *fakeopenai.Server, before int, st *crashState) int {
	t.Helper()
	n := 0
	for key, hist := range st.running {
		var first *openai.ChatCompletionRequest
		waitFor(t, 30*time.Second, "resumed request of "+key, func() bool {
			for _, req := range fake.Requests()[before:] {
				if st.keys[firstUser(req)] == key {
					first = &req
					return true
				}
			}
			return false
		})
		got := first.Messages[1:] // after the system prompt
		if len(got) < len(hist) {
			t.Errorf("%s resumed with %d messages, stored history has %d", key, len(got), len(hist))
			continue
		}
		for i := range hist {
			if got[i].Role != hist[i].Role || got[i].Content != hist[i].Content || got[i].ToolCallID != hist[i].ToolCallID || len(got[i].ToolCalls) != len(hist[i].ToolCalls) {
				t.Errorf("%s resumed request message %d = %s %q, stored %s %q", key, i, got[i].Role, got[i].Content, hist[i].Role, hist[i].Content)
				break
			}
		}
		n++
	}
	return n
}

func verifyAfterCrash(t *testing.T, dbPath string, fake *fakeopenai.Server, st *crashState) {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(dbPath, store.Options{LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("reopen after kill: %v", err)
	}
	defer db.Close()
	if err := db.Check(); err != nil {
		t.Fatalf("bbolt check: %v", err)
	}
	plans := map[string]map[string]bool{}
	st.running = map[string][]openai.ChatCompletionMessage{}
	infos, err := db.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		key := info.Checkpoint.Key
		cp, hist, _, err := db.Load(ctx, key)
		if err != nil {
			t.Fatalf("load %s: %v", key, err)
		}
		if cp == nil {
			continue // only queued messages so far
		}
		for i := 0; i < len(hist); i++ {
			m := hist[i].Message
			if m.Role != "assistant" || len(m.ToolCalls) == 0 {
				continue
			}
			for j, tc := range m.ToolCalls {
				k := i + 1 + j
				if k >= len(hist) || hist[k].Message.Role != "tool" || hist[k].Message.ToolCallID != tc.ID {
					t.Fatalf("%s: half-written round at history %d: call %s has no result", key, i, tc.ID)
				}
			}
		}
		revs, err := db.Plans(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		plans[key] = map[string]bool{}
		for _, r := range revs {
			plans[key][todo.Encode(r.Items)] = true
		}
		if int64(len(revs)) != cp.Revision {
			t.Errorf("%s: %d plan revisions stored, checkpoint says %d", key, len(revs), cp.Revision)
		}
		if cp.State == agent.Running {
			var msgs []openai.ChatCompletionMessage
			for _, e := range hist {
				msgs = append(msgs, e.Message)
			}
			st.running[key] = msgs
		}
	}
	for _, req := range fake.Requests() {
		key := st.keys[firstUser(req)]
		for _, m := range req.Messages {
			if m.Role == "tool" && strings.HasPrefix(m.Content, `{"todos":`) && !plans[key][m.Content] {
				t.Fatalf("%s: the model received snapshot %s, which is not in the store", key, m.Content)
			}
		}
	}
}
