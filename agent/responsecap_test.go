package agent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// hugeBytes is far more than the default cap of 4 MiB.
const hugeBytes = 64 << 20

// allocatedDuring reports how many bytes the process allocated while f ran.
func allocatedDuring(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestHugeModelResponseEndsTurn: an answer larger than the cap, plain or
// streamed, ends the turn with a plain message and keeps the last good
// state; the client stops reading at the cap, so what it allocates stays
// far below what the server sends; the session works afterwards.
func TestHugeModelResponseEndsTurn(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			fake := &fakeopenai.Server{Respond: fakeopenai.Script(func(string) []fakeopenai.Reply {
				return []fakeopenai.Reply{{ToolCalls: []fakeopenai.Call{call("todo_write", `{"todos":[{"content":"a","status":"in_progress"}]}`)}}, {Content: "fine"}}
			})}
			h := newHarness(t, fake, harnessOpts{stream: stream, retries: 2, timeout: time.Minute})
			// The plan is written, then the answer is huge.
			fake.Fail(fakeopenai.Fault{}, fakeopenai.Fault{HugeContent: hugeBytes})
			var events []agent.Event
			alloc := allocatedDuring(func() {
				h.send(t, "web/huge", "go")
				events = h.waitEnd(t, "web/huge")
			})
			end := events[len(events)-1]
			if end.Outcome != agent.Failed || !strings.Contains(end.Text, "PINPLAN_MODEL_RESPONSE_BYTES") {
				t.Fatalf("outcome %s, text %q (%d bytes), err %v; want failed with a message naming PINPLAN_MODEL_RESPONSE_BYTES", end.Outcome, end.Text[:min(len(end.Text), 200)], len(end.Text), end.Err)
			}
			// Reading to the 4 MiB cap allocates some ten times that in
			// garbage (a builder grows by a quarter at a time); reading
			// the whole answer allocates several times what was sent.
			if alloc > hugeBytes {
				t.Errorf("allocated %d MiB while the server sent up to %d MiB: the response was read past the cap", alloc>>20, hugeBytes>>20)
			}
			if n := len(fake.Requests()); n != 2 {
				t.Errorf("%d requests, want 2: a response over the cap is not retried", n)
			}
			cp, hist, inbox, err := h.db.Load(context.Background(), "web/huge")
			if err != nil {
				t.Fatal(err)
			}
			if cp.State != agent.Idle || len(inbox) != 0 || cp.Revision != 1 {
				t.Errorf("after the cap: state %s, inbox %d, revision %d; want idle with the plan kept", cp.State, len(inbox), cp.Revision)
			}
			for _, e := range hist {
				if len(e.Message.Content) > 1<<20 {
					t.Errorf("history holds a %d-byte message", len(e.Message.Content))
				}
			}
			h.send(t, "web/huge", "again")
			if events := h.waitEnd(t, "web/huge"); events[len(events)-1].Outcome != agent.Done {
				t.Errorf("session unusable after the cap: %+v", events[len(events)-1])
			}
		})
	}
}

// TestHugeModelBodiesAreCut: bodies that are not content but are as large
// (one SSE line with no end, an error page) are cut at the cap too.
func TestHugeModelBodiesAreCut(t *testing.T) {
	tests := []struct {
		name   string
		stream bool
		serve  func(w http.ResponseWriter)
	}{
		{"one endless SSE line", true, func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, `data: {"id":"x","choices":[{"index":0,"delta":{"content":"`)
			writeX(w, hugeBytes)
		}},
		{"endless SSE comments", true, func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			line := ": " + strings.Repeat("x", 1<<20) + "\n"
			for i := 0; i < hugeBytes>>20; i++ {
				if _, err := io.WriteString(w, line); err != nil {
					return
				}
			}
		}},
		{"huge error page", false, func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusBadRequest)
			writeX(w, hugeBytes)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				tt.serve(w)
			}))
			defer srv.Close()
			model := agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: srv.URL + "/v1", APIKey: "sk-test", Stream: tt.stream, Timeout: time.Minute})
			var err error
			alloc := allocatedDuring(func() {
				_, err = model.Complete(context.Background(), openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}}})
			})
			if err == nil {
				t.Fatal("no error for a body over the cap")
			}
			if alloc > hugeBytes/2 {
				t.Errorf("allocated %d MiB for a %d MiB body: it was read past the cap", alloc>>20, hugeBytes>>20)
			}
		})
	}
}

// writeX writes n bytes of "x" until a write fails.
func writeX(w io.Writer, n int) {
	chunk := []byte(strings.Repeat("x", 32<<10))
	for ; n > 0; n -= len(chunk) {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// TestLongStreamWithinCap: a stream whose framing is many times the cap
// but whose content is within it is read whole; content one chunk over
// the cap is not.
func TestLongStreamWithinCap(t *testing.T) {
	const limit = 64 << 10
	for _, tt := range []struct {
		name    string
		content int
		ok      bool
	}{
		{"within", limit - 16, true},
		{"over", limit + 16, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				for sent := 0; sent < tt.content; sent += 16 {
					fmt.Fprintf(w, ": keep-alive\n\ndata: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", strings.Repeat("y", 16))
				}
				io.WriteString(w, "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
			}))
			defer srv.Close()
			model := agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: srv.URL + "/v1", APIKey: "sk-test", Stream: true, Timeout: time.Minute, ResponseBytes: limit})
			reply, err := model.Complete(context.Background(), openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}}})
			switch {
			case tt.ok && (err != nil || len(reply.Message.Content) != tt.content):
				t.Errorf("got %d bytes, error %v; want all %d", len(reply.Message.Content), err, tt.content)
			case !tt.ok && !errors.Is(err, agent.ErrResponseTooLarge):
				t.Errorf("got %d bytes, error %v; want ErrResponseTooLarge", len(reply.Message.Content), err)
			}
		})
	}
}
