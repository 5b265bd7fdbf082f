package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/todo"
)

// BenchmarkDialects measures what each server dialect of the model fake
// costs the agent against OpenAI's own shape, in one run (BENCHMARKS.md,
// "Dialects"):
//
//   - first_word: a turn whose one round streams an answer; besides the
//     turn's ns/op, ns/first-word is the time from the round's model
//     request to the first answer text the runner publishes (TextDelta).
//   - round_stream and round_plain: a turn of one todo_write round and
//     the answer, streamed and not.
//
// Every reply carries a sentence of reasoning, which each dialect sends
// its own way (OpenAI's shape drops it from a stream). The store is in
// memory, so that no fsync hides the difference. The model server
// replays, byte for byte, what the dialect's fake answered the same round
// of a warm-up turn, so that the fake's own encoding is not measured
// either: ns/op and allocs/op are the agent's side (go-openai, the wire,
// the runner, the store's JSON) plus a loopback HTTP exchange, the same
// for every dialect. The warm-up turn also teaches the wire what the
// dialect refuses (Azure's stream_options, Mistral's ids and order), as
// the first turn of a process does.
func BenchmarkDialects(b *testing.B) {
	dialects := append([]fakeopenai.Dialect{fakeopenai.OpenAI}, fakeopenai.Dialects...)
	name := func(d fakeopenai.Dialect) string {
		if d == fakeopenai.OpenAI {
			return "openai"
		}
		return string(d)
	}
	for _, d := range dialects {
		b.Run("first_word/"+name(d), func(b *testing.B) { benchDialect(b, d, true, answerScript, true) })
	}
	for _, d := range dialects {
		b.Run("round_stream/"+name(d), func(b *testing.B) { benchDialect(b, d, true, todoRoundScript, false) })
	}
	for _, d := range dialects {
		b.Run("round_plain/"+name(d), func(b *testing.B) { benchDialect(b, d, false, todoRoundScript, false) })
	}
}

const benchReasoning = "The person wants the notes read; a plan first."

// answerScript answers at once.
func answerScript(string) []fakeopenai.Reply {
	return []fakeopenai.Reply{{Content: "The notes say to release on friday, after the freeze.", Reasoning: benchReasoning}}
}

// todoRoundScript writes a plan, then answers.
func todoRoundScript(string) []fakeopenai.Reply {
	plan := todo.Encode([]todo.Item{{Content: "read the notes", Status: todo.Completed}, {Content: "answer", Status: todo.InProgress}})
	return []fakeopenai.Reply{
		{ToolCalls: []fakeopenai.Call{{Name: todo.ToolName, Arguments: plan}}, Reasoning: benchReasoning},
		{Content: "Done: release on friday.", Reasoning: benchReasoning},
	}
}

// benchDialect runs turns of script against dialect d; firstWord reports
// ns/first-word.
func benchDialect(b *testing.B, d fakeopenai.Dialect, stream bool, script func(string) []fakeopenai.Reply, firstWord bool) {
	srv := &replayServer{fake: &fakeopenai.Server{Dialect: d, Respond: fakeopenai.Script(script), NoRecord: true}}
	hs := httptest.NewServer(srv)
	b.Cleanup(hs.Close)
	var requested, first atomic.Int64 // unix ns of the round's request; ns from it to the turn's first text
	ended := make(chan agent.Event, 1)
	model := requestClock{Model: agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: hs.URL + "/v1", Stream: stream, BaseBackoff: time.Millisecond}), at: &requested}
	r, err := agent.NewRunner(agent.Options{Model: model, Store: &memStore{}, ModelName: "fake", Events: publishTo(func(e agent.Event) {
		switch e.Kind {
		case agent.TextDelta:
			first.CompareAndSwap(0, time.Now().UnixNano()-requested.Load())
		case agent.TurnEnded:
			ended <- e
		}
	})})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.Close)
	ctx := context.Background()
	turn := func(key string) {
		if err := r.Submit(ctx, key, agent.Inbound{Text: "read the notes"}); err != nil {
			b.Fatal(err)
		}
		if e := <-ended; e.Outcome != agent.Done {
			b.Fatalf("%s ended %s: %q (%v)", key, e.Outcome, e.Text, e.Err)
		}
	}
	turn("web/warm-up")
	srv.replay()
	turn("web/replayed")
	b.ReportAllocs()
	b.ResetTimer()
	var sum int64
	for i := 0; i < b.N; i++ {
		first.Store(0)
		turn("web/b" + strconv.Itoa(i))
		sum += first.Load()
	}
	b.StopTimer()
	if firstWord {
		b.ReportMetric(float64(sum)/float64(b.N), "ns/first-word")
	}
}

// requestClock notes when each model request starts.
type requestClock struct {
	agent.Model
	at *atomic.Int64
}

func (m requestClock) Complete(ctx context.Context, req openai.ChatCompletionRequest) (agent.Reply, error) {
	m.at.Store(time.Now().UnixNano())
	return m.Model.Complete(ctx, req)
}

// replayServer answers through its fake while it records, keeping each
// successful answer by the number of assistant messages in the request
// (the round of the turn); once replaying, it answers each request with
// the recorded bytes, reading no more of the request than that count.
type replayServer struct {
	fake *fakeopenai.Server

	mu        sync.Mutex // guards answers and replaying
	answers   map[int]recorded
	replaying bool
}

type recorded struct {
	contentType string
	body        []byte
}

var requestBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (s *replayServer) replay() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replaying = true
}

func (s *replayServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	buf := requestBuffers.Get().(*bytes.Buffer)
	defer requestBuffers.Put(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(r.Body); err != nil {
		return
	}
	round := bytes.Count(buf.Bytes(), []byte(`"role":"assistant"`))
	s.mu.Lock()
	a, ok := s.answers[round]
	replaying := s.replaying
	s.mu.Unlock()
	if replaying {
		if !ok {
			http.Error(w, fmt.Sprintf("no answer recorded for round %d", round), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", a.contentType)
		w.Write(a.body)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
	rec := httptest.NewRecorder()
	s.fake.ServeHTTP(rec, r)
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
	if rec.Code == http.StatusOK {
		s.mu.Lock()
		if s.answers == nil {
			s.answers = map[int]recorded{}
		}
		s.answers[round] = recorded{contentType: rec.Header().Get("Content-Type"), body: bytes.Clone(rec.Body.Bytes())}
		s.mu.Unlock()
	}
}
