package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/store"
)

// damagedSeed writes a database with two finished sessions and three left
// running (the next start resumes them), compacted so that its pages are
// packed from the start of the file, and returns its path.
func damagedSeed(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "seed.db")
	db, err := store.Open(src, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	long := strings.Repeat("a longer message in a long thread ", 40)
	for i := range 5 {
		key := fmt.Sprintf("web/%d", i+1)
		state := agent.Idle
		if i < 3 {
			state = agent.Running
		}
		msgs := []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: fmt.Sprintf("task %d: %s", i+1, long)}}
		if state == agent.Idle {
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: "done: " + long})
		}
		r := &agent.Round{Checkpoint: agent.Checkpoint{Key: key, State: state, HistoryLen: len(msgs), Turns: 1}}
		for _, m := range msgs {
			r.Append = append(r.Append, agent.Entry{Message: m, At: time.Now()})
		}
		if err := db.Commit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "pinplan.db")
	if _, _, err := store.CompactFile(src, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// bootBot starts the bot on env and waits until it serves (true) or
// exits (false).
func bootBot(t *testing.T, env map[string]string) (*botProc, bool) {
	t.Helper()
	p := &botProc{stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(botBinary)
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Stderr = p.stderr
	pipe, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			p.stdout.Write([]byte(sc.Text() + "\n"))
			if consoleLine.MatchString(sc.Text()) {
				select {
				case served <- struct{}{}:
				default:
				}
			}
		}
		io.Copy(io.Discard, pipe)
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	select {
	case <-served:
		return p, true
	case <-p.done:
		return p, false
	case <-time.After(60 * time.Second):
		t.Fatalf("the bot neither served nor exited within 60 s\nstderr:\n%s", p.stderr)
	}
	return p, false
}

// noPanic fails the test if the bot's stderr holds a Go panic or fault.
func noPanic(t *testing.T, stderr string) {
	t.Helper()
	for _, trace := range []string{"panic:", "goroutine ", "fatal error:"} {
		if strings.Contains(stderr, trace) {
			t.Errorf("the bot's stderr holds %q:\n%s", trace, stderr)
			return
		}
	}
}

// wantRefusal checks the bot exited non-zero, saying the file is damaged
// and how to restore a backup.
func wantRefusal(t *testing.T, err error, stderr, path string) {
	t.Helper()
	if err == nil {
		t.Errorf("the bot exited 0 on a damaged database\nstderr:\n%s", stderr)
	}
	if !strings.Contains(stderr, path) || !strings.Contains(stderr, "damaged") || !strings.Contains(stderr, "backup") {
		t.Errorf("stderr does not say that %s is damaged and how to restore a backup:\n%s", path, stderr)
	}
}

func TestDamagedDatabase(t *testing.T) {
	t.Parallel()
	fake := &fakeopenai.Server{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
		// mayServe: the damage may be in pages nothing reads at start.
		mayServe bool
	}{
		{name: "cut in half", damage: func(t *testing.T, path string) {
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, st.Size()/2); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "random bytes over pages 2 to 4", mayServe: true, damage: func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			page := os.Getpagesize() // bbolt's page size is the OS's
			junk := make([]byte, 3*page)
			rng := rand.New(rand.NewPCG(14, 4))
			for i := range junk {
				junk[i] = byte(rng.Uint32())
			}
			if _, err := f.WriteAt(junk, int64(2*page)); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := damagedSeed(t)
			tc.damage(t, path)
			before := len(fake.Requests())
			env := map[string]string{"PINPLAN_DB": path, "PINPLAN_HTTP_ADDR": "127.0.0.1:0", "OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": "sk-test", "PINPLAN_LOG_LEVEL": "warn"}
			p, serving := bootBot(t, env)
			if !serving {
				t.Logf("refused: %v\n%s", p.err, p.stderr)
				wantRefusal(t, p.err, p.stderr.String(), path)
				noPanic(t, p.stderr.String())
				return
			}
			if !tc.mayServe {
				t.Fatalf("the bot started on a damaged database\nstderr:\n%s", p.stderr)
			}
			// It started: the damage is where nothing reads. The resumed
			// sessions run, and the bot stops cleanly.
			for deadline := time.Now().Add(30 * time.Second); len(fake.Requests())-before < 3; time.Sleep(20 * time.Millisecond) {
				select {
				case <-p.done:
					t.Fatalf("the bot exited (%v) before it resumed its three sessions\nstderr:\n%s", p.err, p.stderr)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("the model got %d requests, want the three resumed sessions'\nstderr:\n%s", len(fake.Requests())-before, p.stderr)
				}
			}
			p.stop(t)
			noPanic(t, p.stderr.String())
		})
	}
}
