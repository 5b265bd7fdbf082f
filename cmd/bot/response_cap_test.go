package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// peakRSS reads a process's peak resident set size (VmHWM) in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// TestHugeModelAnswer: a model that answers 100 MB of content, plain or
// streamed, ends the turn with a plain message in the thread, the thread
// holds none of it, and the bot's peak RSS stays under 200 MB
// (DESIGN §16).
func TestHugeModelAnswer(t *testing.T) {
	t.Parallel()
	const huge = 100 << 20
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			fake := &fakeopenai.Server{}
			fake.Fail(fakeopenai.Fault{HugeContent: huge})
			srv := httptest.NewServer(fake)
			defer srv.Close()
			p := startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
				"OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": "sk-test", "PINPLAN_STREAM": strconv.FormatBool(stream)}, botBinary)
			defer p.stop(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := postJSON(ctx, p.URL+"/api/threads", map[string]string{"text": "write me a novel"})
			if err != nil {
				t.Fatal(err)
			}
			id := strings.TrimPrefix(out["key"].(string), "web/")
			var th apiThread
			waitFor(t, 120*time.Second, "the turn to end", func() bool {
				getJSON(t, p.URL+"/api/threads/"+id, &th)
				return th.Thread.State == "idle" && len(th.Messages) >= 2
			})
			last := th.Messages[len(th.Messages)-1]
			if !strings.Contains(last.Text, "PINPLAN_MODEL_RESPONSE_BYTES") || len(last.Text) > 1000 {
				t.Errorf("the thread's last message is %d bytes: %.200q; want the plain message about PINPLAN_MODEL_RESPONSE_BYTES", len(last.Text), last.Text)
			}
			if th.Thread.Status != "failed" {
				t.Errorf("status %q, want failed", th.Thread.Status)
			}
			for _, m := range th.Messages {
				if len(m.Text) > 1<<20 {
					t.Errorf("the thread holds a %d-byte %s message", len(m.Text), m.Role)
				}
			}
			rss := peakRSS(t, p.cmd.Process.Pid)
			t.Logf("peak RSS %d MB (race detector: %v)", rss>>20, raceEnabled)
			if rss > 200<<20 {
				t.Errorf("peak RSS %d MB, want under 200 MB", rss>>20)
			}
		})
	}
}
