package main

import (
	"bufio"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/internal/fakeslack"
)

// postSigned sends body, signed at stamp, to the bot's path as Slack
// does, and wants an empty 200.
func postSigned(t *testing.T, p *botProc, path string, body []byte, stamp time.Time) {
	t.Helper()
	req := signedRequest(t, p.URL+path, "signing-secret", body, stamp)
	if strings.HasSuffix(path, "/commands") {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if status, resp := do(t, req); status != http.StatusOK {
		t.Fatalf("POST %s answered %d %q, want 200", path, status, resp)
	}
}

// TestSlackCommandReplayStartsOneTask (issue 40, item 5): the same signed
// /pinplan body, with the same trigger_id, sent three times within the
// signature's 5-minute window starts one task: one message in the
// channel, one model run. The replays are logged.
func TestSlackCommandReplayStartsOneTask(t *testing.T) {
	t.Parallel()
	r := newSlackRig(t, 1, 0, false)
	p := r.start(t)
	defer p.stop(t)
	body := r.slack.CommandBody(map[string]any{"text": "rotate the keys", "user_id": "U1", "channel_id": "C1", "trigger_id": "13345224609.738474920.8088930838d88f008e0"})
	stamp := time.Now()
	for range 3 {
		postSigned(t, p, "/slack/commands", body, stamp)
	}
	task := taskMessage(t, r.slack, "C1", "rotate the keys")
	waitReply(t, r.slack, "C1", task.TS, "All done.")
	tasks := func() int {
		n := 0
		for _, m := range r.slack.Messages("C1") {
			if m.BotID != "" && strings.Contains(m.Text, "asked pinplan") && strings.Contains(m.Text, "rotate the keys") {
				n++
			}
		}
		return n
	}
	// The replays had their chance once they are posted (the bug) or
	// logged as replays (the fix).
	waitFor(t, 30*time.Second, "the two replays handled", func() bool {
		return tasks() >= 3 || strings.Count(p.stderr.String(), "slash command replayed") >= 2
	})
	if n := tasks(); n != 1 {
		t.Errorf("%d tasks posted for one command sent three times, want 1", n)
	}
	runs := 0
	for _, req := range r.model.Requests() {
		assistant := false
		for _, m := range req.Messages {
			assistant = assistant || m.Role == openai.ChatMessageRoleAssistant
		}
		if !assistant && strings.Contains(req.Messages[len(req.Messages)-1].Content, "rotate the keys") {
			runs++
		}
	}
	if runs != 1 {
		t.Errorf("%d model runs for one command sent three times, want 1", runs)
	}
}

// hookCatcher is a server that records what is posted to it.
type hookCatcher struct {
	mu    sync.Mutex
	posts []string // path and body of each request
}

func (h *hookCatcher) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	h.posts = append(h.posts, r.URL.Path+" "+string(body)+" auth="+r.Header.Get("Authorization"))
	h.mu.Unlock()
	w.Write([]byte("ok"))
}

func (h *hookCatcher) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.posts...)
}

// TestSlackResponseURLOnlyToSlack (issue 40, item 6): a signed command
// whose response_url is not Slack's (here another local server) gets no
// answer posted there, only a log line; a command with Slack's own
// response_url (the fake's, on the configured API host) is answered.
func TestSlackResponseURLOnlyToSlack(t *testing.T) {
	t.Parallel()
	r := newSlackRig(t, 1, 0, false)
	catcher := &hookCatcher{}
	cs := httptest.NewServer(catcher)
	t.Cleanup(cs.Close)
	p := r.start(t)
	defer p.stop(t)
	for _, text := range []string{"help", "status", "stop"} {
		body := r.slack.CommandBody(map[string]any{"text": text, "user_id": "U1", "channel_id": "C1", "response_url": cs.URL + "/commands/T1/1/secret-" + text})
		postSigned(t, p, "/slack/commands", body, time.Now())
	}
	waitFor(t, 15*time.Second, "the three commands handled", func() bool {
		return len(catcher.got()) >= 3 || strings.Count(p.stderr.String(), "response_url is not Slack's") >= 3
	})
	if got := catcher.got(); len(got) > 0 {
		t.Errorf("answers posted to a response_url that is not Slack's: %q", got)
	}
	postSigned(t, p, "/slack/commands", r.slack.CommandBody(map[string]any{"text": "help", "user_id": "U2", "channel_id": "C1"}), time.Now())
	ephemeralTo(t, r.slack, "C1", "U2", "/pinplan <task>")
}

// sniffListener serves TLS on a port and answers a plain HTTP request
// to the same port itself, recording it: what a client sent in clear
// text, as anyone on the way could read it.
type sniffListener struct {
	net.Listener
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once

	mu    sync.Mutex
	plain []string // the path and Authorization of each plain HTTP request
}

func newSniffListener(l net.Listener) *sniffListener {
	s := &sniffListener{Listener: l, conns: make(chan net.Conn), done: make(chan struct{})}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go s.sort(c)
		}
	}()
	return s
}

// peeked is a connection whose first bytes were read ahead.
type peeked struct {
	net.Conn
	r *bufio.Reader
}

func (p *peeked) Read(b []byte) (int, error) { return p.r.Read(b) }

func (s *sniffListener) sort(c net.Conn) {
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	first, err := br.Peek(1)
	c.SetReadDeadline(time.Time{})
	if err != nil {
		c.Close()
		return
	}
	if first[0] == 0x16 { // a TLS handshake record
		select {
		case s.conns <- &peeked{Conn: c, r: br}:
		case <-s.done:
			c.Close()
		}
		return
	}
	if req, err := http.ReadRequest(br); err == nil {
		s.mu.Lock()
		s.plain = append(s.plain, req.URL.Path+" auth="+req.Header.Get("Authorization"))
		s.mu.Unlock()
	}
	io.WriteString(c, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
	c.Close()
}

func (s *sniffListener) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

func (s *sniffListener) Close() error {
	s.once.Do(func() { close(s.done) })
	return s.Listener.Close()
}

func (s *sniffListener) cleartext() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.plain...)
}

// TestSlackFileTokenOnlyOverHTTPS (issue 40, item 6): with Slack's API
// on https, a message's file whose url_private_download names the API's
// host over plain http is not fetched: the bot token never goes out in
// clear text; the thread is told the file was not read, and a file on
// the API's own https address is read as before.
func TestSlackFileTokenOnlyOverHTTPS(t *testing.T) {
	t.Parallel()
	r := newSlackRig(t, 1, 0, false)
	ts := httptest.NewUnstartedServer(r.slack)
	sniff := newSniffListener(ts.Listener)
	ts.Listener = sniff
	ts.StartTLS()
	t.Cleanup(ts.Close)
	r.slack.Set(func(s *fakeslack.Server) { s.BaseURL = ts.URL })
	certs := filepath.Join(t.TempDir(), "fake-slack.pem")
	if err := os.WriteFile(certs, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	r.env["SLACK_API_URL"] = ts.URL + "/api/"
	r.env["SSL_CERT_FILE"] = certs // the bot trusts the fake's certificate, and only it
	p := r.start(t)
	defer p.stop(t)

	good := r.slack.AddFile("notes.txt", "text/plain", []byte("release on Friday"))
	bad := r.slack.AddFile("plan.txt", "text/plain", []byte("the secret plan"))
	for _, k := range []string{"url_private", "url_private_download"} {
		bad[k] = "http://" + strings.TrimPrefix(bad[k].(string), "https://")
	}
	ev := mention("C1", "1700095000.000100", "summarise the attached notes")
	ev["files"] = []any{good, bad}
	postSigned(t, p, "/slack/events", r.slack.CallbackBody("EvTLS1", ev), time.Now())
	waitReply(t, r.slack, "C1", "1700095000.000100", "All done.")
	defer func() {
		if t.Failed() {
			t.Logf("stderr:\n%s", p.stderr)
		}
	}()
	if got := sniff.cleartext(); len(got) > 0 {
		t.Errorf("requests sent in clear text to the API's host: %q", got)
	}
	fetches := r.slack.FileFetches()
	if len(fetches) != 1 || !fetches[0].OK || !strings.Contains(fetches[0].Path, "notes.txt") {
		t.Errorf("file fetches %+v, want notes.txt alone, over https", fetches)
	}
	if q := fileRequestContent(r); !strings.Contains(q, "release on Friday") || strings.Contains(q, "the secret plan") {
		t.Errorf("the model was given %q: want notes.txt read and plan.txt not", q)
	}
	if !strings.Contains(p.stderr.String(), "plan.txt") {
		t.Errorf("the refused file is not in the log")
	}
}

// TestSlackProxyRefusalIsNotRetried (issue 40, item 7): an egress proxy
// answers one reply's chat.postMessage with a 403 and its own HTML page
// (no Slack error body). That reply is undeliverable: tried once, logged,
// and the thread's next answer is not held behind it.
func TestSlackProxyRefusalIsNotRetried(t *testing.T) {
	t.Parallel()
	r := newSlackRig(t, 1, 0, true)
	r.model.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		last := req.Messages[len(req.Messages)-1].Content
		switch {
		case strings.Contains(last, "second"):
			return fakeopenai.Reply{Content: "Here is the PROXY-BLOCKED answer."}
		case strings.Contains(last, "third"):
			return fakeopenai.Reply{Content: "The third answer."}
		}
		return fakeopenai.Reply{Content: "The first answer."}
	}
	p := r.start(t)
	defer p.stop(t)
	defer func() {
		if t.Failed() {
			t.Logf("stderr:\n%s", p.stderr)
		}
	}()
	thread := "1700096000.000100"
	if _, err := r.slack.Push("EvP1", mention("C1", thread, "the first question")); err != nil {
		t.Fatal(err)
	}
	waitReply(t, r.slack, "C1", thread, "The first answer.")
	r.slack.RefuseAtProxy("chat.postMessage", "PROXY-BLOCKED", http.StatusForbidden, -1)
	in := func(ts, text string) map[string]any {
		ev := mention("C1", ts, text)
		ev["thread_ts"] = thread
		return ev
	}
	if _, err := r.slack.Push("EvP2", in("1700096000.000200", "the second question")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the blocked answer tried", func() bool { return blocked(r.slack) > 0 })
	if _, err := r.slack.Push("EvP3", in("1700096000.000300", "the third question")); err != nil {
		t.Fatal(err)
	}
	waitReply(t, r.slack, "C1", thread, "The third answer.")
	if n := blocked(r.slack); n != 1 {
		t.Errorf("the refused answer was sent %d times, want once", n)
	}
	if log := p.stderr.String(); !strings.Contains(log, "reply undeliverable") || !strings.Contains(log, "403") {
		t.Errorf("the refused reply is not logged as undeliverable, with its 403")
	}
	// The thread is told, once, that an answer did not reach it.
	note := waitReply(t, r.slack, "C1", thread, "could not be delivered")
	if strings.Contains(note.Text, "PROXY-BLOCKED") {
		t.Errorf("the note %q repeats the refused answer", note.Text)
	}
	if n := len(botMessages(r.slack, "C1", thread, "could not be delivered")); n != 1 {
		t.Errorf("%d notes of an undelivered answer, want 1", n)
	}
}

// blocked counts the chat.postMessage calls the proxy refused.
func blocked(s *fakeslack.Server) int {
	n := 0
	for _, c := range s.Calls("chat.postMessage") {
		if c.Error == "proxy 403" {
			n++
		}
	}
	return n
}
