package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// TestFirstVisibleWord measures, per platform, how long after the model's
// first token of an answer its first word is visible: Slack (the
// chat.startStream or chat.postMessage that carries it), Discord (the
// message post) and the console (the SSE event). Each answer is 12 words
// written a word every 60 ms, in a thread of its own (Slack: in a channel
// of its own; Discord: one channel's turns), one at a time. It asserts that every answer's first
// word is visible before the model's last word, and logs p50 and p99.
//
// PINPLAN_FIRST_WORD_ANSWERS sets the answers per platform (5 by default;
// BENCHMARKS.md uses 50), and PINPLAN_FIRST_WORD_BOT measures another
// bot binary instead (a build of an earlier commit), without the
// assertion.
func TestFirstVisibleWord(t *testing.T) {
	t.Parallel()
	n := 5
	if v, err := strconv.Atoi(os.Getenv("PINPLAN_FIRST_WORD_ANSWERS")); err == nil && v > 0 {
		n = v
	}
	bin, other := botBinary, os.Getenv("PINPLAN_FIRST_WORD_BOT")
	if other != "" {
		bin = other
	}
	for _, platform := range []string{"slack", "discord", "console"} {
		t.Run(platform, func(t *testing.T) {
			t.Parallel()
			m := newWordModel(t)
			lags, ends := m.run(t, platform, bin, n)
			slices.Sort(lags)
			slices.Sort(ends)
			p := func(d []time.Duration, q float64) time.Duration {
				return d[min(int(q*float64(len(d))), len(d)-1)].Round(time.Millisecond)
			}
			t.Logf("%s over %d answers: first visible word after the model's first token p50 %s, p99 %s, max %s; last word after the model's last p50 %s, p99 %s",
				platform, len(lags), p(lags, 0.5), p(lags, 0.99), p(lags, 1), p(ends, 0.5), p(ends, 0.99))
			if other == "" && lags[len(lags)-1] >= 11*wordPace {
				t.Errorf("an answer's first word was visible %s after the model's first token, after the model's last word", lags[len(lags)-1])
			}
		})
	}
}

const wordPace = 60 * time.Millisecond

// wordModel answers "answer tagN" with "tagN w01 … w10 endN", a word
// every wordPace, and records when it wrote each answer's first word.
type wordModel struct {
	srv   *httptest.Server
	mu    sync.Mutex
	first map[string]time.Time // by tag
	last  map[string]time.Time // by end word
}

var (
	tagRE = regexp.MustCompile(`tag\d+`)
	endRE = regexp.MustCompile(`end\d+`)
)

func newWordModel(t *testing.T) *wordModel {
	m := &wordModel{first: map[string]time.Time{}, last: map[string]time.Time{}}
	fake := &fakeopenai.Server{}
	fake.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		tag := ""
		for _, msg := range req.Messages {
			if msg.Role == openai.ChatMessageRoleUser {
				tag = cmpOr(tagRE.FindString(msg.Content), tag)
			}
		}
		words := []string{tag}
		for i := 1; i <= 10; i++ {
			words = append(words, fmt.Sprintf("w%02d", i))
		}
		words = append(words, "end"+strings.TrimPrefix(tag, "tag"))
		return fakeopenai.Reply{Content: strings.Join(words, " "), Pace: wordPace}
	}
	fake.OnDelta = func(d string) {
		if end := endRE.FindString(d); end != "" {
			m.mu.Lock()
			m.last[end] = time.Now()
			m.mu.Unlock()
		}
		if tag := tagRE.FindString(d); tag != "" {
			m.mu.Lock()
			if _, ok := m.first[tag]; !ok {
				m.first[tag] = time.Now()
			}
			m.mu.Unlock()
		}
	}
	m.srv = httptest.NewServer(fake)
	t.Cleanup(m.srv.Close)
	return m
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// wrote is when the model wrote the answer's first and last words.
func (m *wordModel) wrote(tag string) (first, last time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.first[tag], m.last["end"+strings.TrimPrefix(tag, "tag")]
}

// run sends n tasks on platform and returns each answer's lag to its
// first word, and to its last word after the model wrote it.
func (m *wordModel) run(t *testing.T, platform, bin string, n int) (firsts, lasts []time.Duration) {
	env := map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"OPENAI_BASE_URL": m.srv.URL + "/v1", "OPENAI_API_KEY": "sk-test", "PINPLAN_STREAM": "true"}
	lag := func(tag string, seen, seenEnd time.Time) {
		wrote, end := m.wrote(tag)
		if wrote.IsZero() || seen.IsZero() || seenEnd.IsZero() {
			t.Fatalf("%s: model wrote at %v, seen at %v, its end at %v", tag, wrote, seen, seenEnd)
		}
		firsts = append(firsts, seen.Sub(wrote))
		lasts = append(lasts, seenEnd.Sub(end))
	}
	switch platform {
	case "slack":
		r := newSlackRig(t, 1, 0, true)
		for k, v := range env {
			r.env[k] = v
		}
		p := startBot(t, r.env, bin)
		defer p.stop(t)
		waitFor(t, 15*time.Second, "socket mode", func() bool { return r.slack.Connected() > 0 })
		for i := 1; i <= n; i++ {
			// A channel each: Slack takes about one post a second per
			// channel, and the answers come faster than that here.
			tag, thread, channel := fmt.Sprintf("tag%d", i), fmt.Sprintf("1700100%03d.000100", i), fmt.Sprintf("C%d", 100+i)
			if _, err := r.slack.Push(fmt.Sprintf("EvWord%d", i), mention(channel, thread, "answer "+tag)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 30*time.Second, "answer "+tag, func() bool {
				for _, msg := range r.slack.Messages(channel) {
					if msg.ThreadTS == thread && strings.Contains(msg.Text, fmt.Sprintf("end%d", i)) && !msg.Streaming {
						return true
					}
				}
				return false
			})
			var seen, seenEnd time.Time
			for _, c := range r.slack.Calls("") {
				text := c.Params["markdown_text"] + c.Params["text"]
				if c.Status != http.StatusOK || !strings.HasPrefix(c.Method, "chat.") {
					continue
				}
				if seen.IsZero() && strings.Contains(text, tag+" ") {
					seen = c.At
				}
				if seenEnd.IsZero() && strings.Contains(text, fmt.Sprintf("end%d", i)) {
					seenEnd = c.At
				}
			}
			lag(tag, seen, seenEnd)
		}
	case "discord":
		r := newDiscordRig(t, 1, 0)
		for k, v := range env {
			r.env[k] = v
		}
		p := startBot(t, r.env, bin)
		defer p.stop(t)
		waitFor(t, 15*time.Second, "the gateway", func() bool { return r.dc.Connected() > 0 })
		for i := 1; i <= n; i++ {
			tag := fmt.Sprintf("tag%d", i)
			r.dc.UserMessage("C1", "U1", "answer "+tag, true)
			waitFor(t, 30*time.Second, "answer "+tag, func() bool {
				for _, msg := range r.dc.Messages("C1") {
					if strings.Contains(msg.Content, fmt.Sprintf("end%d", i)) {
						return true
					}
				}
				return false
			})
			var seen, seenEnd time.Time
			for _, c := range r.dc.Calls("channels/C1/messages") {
				s, _ := c.Body["content"].(string)
				if c.Status >= 300 || (c.Method != http.MethodPost && c.Method != http.MethodPatch) {
					continue
				}
				if seen.IsZero() && strings.HasPrefix(s, tag) {
					seen = c.At
				}
				if seenEnd.IsZero() && strings.Contains(s, fmt.Sprintf("end%d", i)) {
					seenEnd = c.At
				}
			}
			lag(tag, seen, seenEnd)
		}
	case "console":
		p := startBot(t, env, bin)
		defer p.stop(t)
		events := sseTimes(t, p.URL)
		for i := 1; i <= n; i++ {
			tag := fmt.Sprintf("tag%d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, err := postJSON(ctx, p.URL+"/api/threads", map[string]string{"text": "answer " + tag}); err != nil {
				t.Fatal(err)
			}
			cancel()
			waitFor(t, 30*time.Second, "answer "+tag, func() bool { return !events.at(fmt.Sprintf("end%d", i)).IsZero() })
			lag(tag, events.at(tag+" "), events.at(fmt.Sprintf("end%d", i)))
		}
	}
	return firsts, lasts
}

// sseLog is when the console's event stream first carried each
// assistant text.
type sseLog struct {
	mu    sync.Mutex
	lines []struct {
		at   time.Time
		line string
	}
}

func (s *sseLog) at(sub string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lines {
		if strings.Contains(l.line, sub) {
			return l.at
		}
	}
	return time.Time{}
}

// sseTimes reads the console's event stream until the test ends, keeping
// the assistant messages' lines with the time each arrived.
func sseTimes(t *testing.T, base string) *sseLog {
	log := &sseLog{}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if line := sc.Text(); strings.Contains(line, `"role":"assistant"`) {
				log.mu.Lock()
				log.lines = append(log.lines, struct {
					at   time.Time
					line string
				}{time.Now(), line})
				log.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	return log
}
