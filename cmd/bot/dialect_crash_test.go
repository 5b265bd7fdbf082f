package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/store"
)

// TestDialectFieldsSurviveAKill: a turn on a server that needs its own
// fields back with a call (Gemini's thought signature, DeepSeek's
// reasoning_content) goes on after a kill -9 while its next request is
// in flight: the bot that resumes it sends those fields from the store,
// and the server, which refuses the turn's calls without them, answers.
func TestDialectFieldsSurviveAKill(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dialect fakeopenai.Dialect
		stream  bool
	}{
		{fakeopenai.Gemini, true},
		{fakeopenai.DeepSeek, false},
	} {
		t.Run(fmt.Sprintf("%s/stream=%v", tc.dialect, tc.stream), func(t *testing.T) {
			fake := &fakeopenai.Server{Dialect: tc.dialect, Respond: fakeopenai.Script(crashScript)}
			// The request after the first round's results hangs until the
			// bot is killed.
			fake.Fail(fakeopenai.Fault{}, fakeopenai.Fault{Delay: time.Minute})
			srv := httptest.NewServer(fake)
			defer srv.Close()
			dbPath := filepath.Join(t.TempDir(), "kill.db")
			env := map[string]string{"PINPLAN_DB": dbPath, "PINPLAN_HTTP_ADDR": "127.0.0.1:0", "OPENAI_BASE_URL": srv.URL + "/v1",
				"OPENAI_API_KEY": "sk-test", "PINPLAN_LOG_LEVEL": "warn", "PINPLAN_STREAM": fmt.Sprint(tc.stream)}

			p := startBot(t, env, botBinary)
			out, err := postJSON(context.Background(), p.URL+"/api/threads", map[string]string{"text": "the notes"})
			if err != nil {
				t.Fatal(err)
			}
			key, _ := out["key"].(string)
			waitFor(t, 30*time.Second, "the second model request", func() bool { return len(fake.Requests()) >= 2 })
			p.kill()

			p = startBot(t, env, botBinary)
			waitFor(t, 60*time.Second, "the resumed turn to end", func() bool {
				var list []map[string]any
				getJSON(t, p.URL+"/api/threads", &list)
				return len(list) == 1 && list[0]["state"] == "idle"
			})
			p.stop(t)
			if t.Failed() {
				t.Logf("stderr:\n%s", p.stderr)
			}

			db, err := store.Open(dbPath, store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			cp, hist, _, err := db.Load(context.Background(), key)
			if err != nil || cp == nil {
				t.Fatalf("load %s: %v", key, err)
			}
			last := hist[len(hist)-1].Message
			if last.Role != openai.ChatMessageRoleAssistant || last.Content != "finished the notes" {
				t.Errorf("the turn resumed after the kill ended with %s %q, want the script's answer; ended: %+v", last.Role, last.Content, cp.Ended)
			}
			if n := len(fake.Requests()); n < 4 {
				t.Errorf("the model answered %d requests, want the turn's rounds after the kill", n)
			}
		})
	}
}
