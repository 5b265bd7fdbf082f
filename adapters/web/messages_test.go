package web

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
)

// eventStream is an open GET /api/events.
type eventStream struct {
	t    testing.TB
	body io.ReadCloser
	sc   *bufio.Scanner
}

// openEvents subscribes to the console's events; it returns once the
// console has the subscriber, and closes it at cleanup.
func openEvents(t testing.TB, url string) *eventStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/api/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &eventStream{t: t, body: resp.Body, sc: bufio.NewScanner(resp.Body)}
	s.sc.Buffer(make([]byte, 64<<10), 1<<20)
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	for s.sc.Scan() {
		if strings.HasPrefix(s.sc.Text(), ": connected") {
			return s
		}
	}
	t.Fatalf("the event stream ended before it connected: %v", s.sc.Err())
	return nil
}

// next returns the next event of type typ, failing after 5 s with the
// events seen.
func (s *eventStream) next(typ string) map[string]any {
	s.t.Helper()
	timer := time.AfterFunc(5*time.Second, func() { s.body.Close() })
	defer timer.Stop()
	var seen []string
	for s.sc.Scan() {
		data, ok := strings.CutPrefix(s.sc.Text(), "data: ")
		if !ok {
			continue
		}
		seen = append(seen, data)
		var e map[string]any
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			s.t.Fatalf("event %s: %v", data, err)
		}
		if e["type"] == typ {
			return e
		}
	}
	s.t.Fatalf("no %s event within 5 s; saw %q", typ, seen)
	return nil
}

func getJSON(t testing.TB, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

func postJSON(t testing.TB, url, body string, v any) int {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return resp.StatusCode
}

type threadAnswer struct {
	Messages []Message `json:"messages"`
}

// TestMessageIDs: a message has one id wherever the page gets it: the
// answer to its POST, its live event and every fetch of the thread (which
// reads the store, where the message has the runner's time, not the
// console's). The page de-duplicates by that id alone.
func TestMessageIDs(t *testing.T) {
	c, srv, h, st := newConsole(t, "")
	h.queue = st
	events := openEvents(t, srv.URL)

	// Twice the same text: two messages, two ids.
	var posted []Message
	for range 2 {
		var res struct {
			Message Message `json:"message"`
		}
		if code := postJSON(t, srv.URL+"/api/threads/abc/messages", `{"text":"  yes please "}`, &res); code != http.StatusAccepted {
			t.Fatalf("POST: %d", code)
		}
		ev := events.next("message")
		live, _ := ev["message"].(map[string]any)
		if live["id"] != res.Message.ID || res.Message.ID == "" {
			t.Errorf("the live event's id is %v, the POST's %q; want one id", live["id"], res.Message.ID)
		}
		posted = append(posted, res.Message)
	}
	if posted[0].ID == posted[1].ID {
		t.Errorf("two messages with the same text share id %s", posted[0].ID)
	}

	// The model answers; its reply carries the stored answer's id.
	st.add(agent.Entry{Message: openai.ChatCompletionMessage{Role: "assistant", Content: "Done."}, At: time.Now()})
	th := chat.Thread{Platform: "web", Key: "web/abc", Channel: "web/abc", ThreadID: "abc"}
	if err := c.Reply(context.Background(), th, "", "Done."); err != nil {
		t.Fatal(err)
	}
	answer, _ := events.next("message")["message"].(map[string]any)
	// A notice is in no history: it keeps the id it was shown with.
	c.Undelivered(th, "hello", io.ErrUnexpectedEOF)
	notice, _ := events.next("message")["message"].(map[string]any)

	want := []string{"user " + posted[0].ID, "user " + posted[1].ID, "assistant " + answer["id"].(string), "notice " + notice["id"].(string)}
	slices.Sort(want)
	for i := range 2 { // the same ids on every fetch
		var got threadAnswer
		getJSON(t, srv.URL+"/api/threads/abc", &got)
		var ids []string
		for _, m := range got.Messages {
			ids = append(ids, m.Role+" "+m.ID)
			if m.ID == posted[0].ID && (!m.At.Equal(posted[0].At) || m.Text != "yes please") {
				t.Errorf("fetch %d: stored message %+v, the POST answered %+v; want the same time and text", i+1, m, posted[0])
			}
		}
		slices.Sort(ids)
		if !slices.Equal(ids, want) {
			t.Errorf("fetch %d: messages %q, want %q", i+1, ids, want)
		}
	}
}

func TestStoredIDs(t *testing.T) {
	t0 := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	hist := []agent.Entry{
		{Message: openai.ChatCompletionMessage{Role: "user", Content: "a"}, At: t0},
		{Message: openai.ChatCompletionMessage{Role: "user", Content: "b"}, At: t0}, // the same time: still its own id
		{Message: openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: "c"}}}, At: t0},
		{Message: openai.ChatCompletionMessage{Role: "tool", Content: "{}", ToolCallID: "c"}, At: t0},
		{Message: openai.ChatCompletionMessage{Role: "assistant", Content: "done"}, At: t0},
	}
	first := historyMessages("web/abc", hist)
	if len(first) != 3 {
		t.Fatalf("got %d messages, want the two user messages and the answer", len(first))
	}
	ids := map[string]bool{}
	for _, m := range first {
		ids[m.ID] = true
	}
	if len(ids) != 3 {
		t.Errorf("ids %v, want three different ones", ids)
	}
	// Deterministic, and an entry appended later changes no earlier id.
	again := historyMessages("web/abc", append(hist, agent.Entry{Message: openai.ChatCompletionMessage{Role: "user", Content: "c"}, At: t0}))
	for i, m := range first {
		if again[i].ID != m.ID {
			t.Errorf("message %d: id %s, then %s", i, m.ID, again[i].ID)
		}
	}
	if other := historyMessages("web/xyz", hist); other[0].ID == first[0].ID {
		t.Error("two threads' first messages share an id")
	}
}
