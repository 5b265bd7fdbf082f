package slack

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/internal/inboxtest"
)

// sessionInbox stops and renames sessions as the router would: only U1
// may stop.
type sessionInbox struct {
	inboxtest.Inbox
	mu      sync.Mutex // guards stops and renames
	stops   []chat.Click
	renames []string // key=title
}

func (s *sessionInbox) StopSession(_ context.Context, c chat.Click) chat.ClickResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stops = append(s.stops, c)
	if c.UserID != "U1" {
		return chat.ClickResult{Private: "Only <@U1> or an approver can stop this turn."}
	}
	return chat.ClickResult{Plan: &chat.Plan{StoppedBy: c.UserName}}
}

func (s *sessionInbox) Rename(key, title string) (chat.Thread, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.renames = append(s.renames, key+"="+title)
	return chat.Thread{Key: key, Title: title}, true
}

func (s *sessionInbox) clicks() []chat.Click {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.stops)
}

// logBuffer is a slog handler's output, safe for the adapter's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

type sessionRig struct {
	a     *Adapter
	fake  *fakeslack.Server
	inbox *sessionInbox
	log   *logBuffer
	url   string
}

func newSessionRig(t *testing.T, token string, fake *fakeslack.Server) *sessionRig {
	t.Helper()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	r := &sessionRig{fake: fake, inbox: &sessionInbox{}, log: &logBuffer{}, url: srv.URL}
	r.a = New(Options{BotToken: token, APIURL: srv.URL + "/api/", SigningSecret: "secret", Dedupe: &inboxtest.Dedupe{},
		Logger: slog.New(slog.NewTextHandler(r.log, nil))})
	if err := r.a.Start(t.Context(), r.inbox); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.a.Wait)
	return r
}

// thread stores a user's message in channel as a thread's root and returns
// the thread.
func (r *sessionRig) thread(channel, ts string) chat.Thread {
	r.fake.CallbackBody("Ev"+ts, map[string]any{"type": "message", "user": "U1", "channel": channel, "ts": ts, "text": "plan the release"})
	return chat.Thread{Platform: "slack", Key: Key("T1", channel, ts), Channel: channel, ThreadID: ts}
}

func TestSessionStatusMoves(t *testing.T) {
	r := newSessionRig(t, "xoxb-t", &fakeslack.Server{})
	ctx := context.Background()
	th := r.thread("C1", "1.1")
	long := strings.Repeat("a long title ", 15) + "title" // 200 characters, Slack's most (the router cuts longer ones)
	for _, m := range []struct {
		state chat.SessionState
		title string
	}{{chat.SessionProcessing, long}, {chat.SessionSuspended, ""}, {chat.SessionProcessing, ""}, {chat.SessionActive, ""}, {chat.SessionClosed, ""}} {
		if err := r.a.SetSessionStatus(ctx, th, m.state, m.title); err != nil {
			t.Fatalf("move to %s: %v", m.state, err)
		}
	}
	want := []string{"processing", "suspended", "processing", "active", "closed"}
	if got := r.fake.SessionStatuses("C1", "1.1"); !slices.Equal(got, want) {
		t.Errorf("statuses %q, want %q", got, want)
	}
	if got := r.fake.SessionTitle("C1", "1.1"); got != long {
		t.Errorf("title %q, want %q", got, long)
	}
	calls := r.fake.Calls("agents.sessions.setStatus")
	if c := calls[0].Params; c["channel_id"] != "C1" || c["thread_ts"] != "1.1" {
		t.Errorf("setStatus params %v, want channel_id C1 and thread_ts 1.1", c)
	}
	if _, ok := calls[1].Params["title"]; ok {
		t.Errorf("a move without a title sent one: %v", calls[1].Params)
	}
	if v := r.fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestSessionsDeniedFallBackOnce: a token or app that cannot use agent
// sessions turns them off for the workspace at the first answer, logged
// once; the working indicator is the reaction from then on.
func TestSessionsDeniedFallBackOnce(t *testing.T) {
	tests := []struct {
		name  string
		token string
		setup func(*fakeslack.Server)
	}{
		{"not_allowed_token_type", "xoxb-t", func(f *fakeslack.Server) { f.AgentSessionsError = "not_allowed_token_type" }},
		{"user token", "xoxp-user", func(*fakeslack.Server) {}},
		{"missing_scope", "xoxb-t", func(f *fakeslack.Server) { f.Fail("agents.sessions.setStatus", "missing_scope") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeslack.Server{}
			tt.setup(fake)
			r := newSessionRig(t, tt.token, fake)
			ctx := context.Background()
			th, th2 := r.thread("C1", "1.1"), r.thread("C1", "2.1")
			for _, th := range []chat.Thread{th, th2, th} {
				err := r.a.SetSessionStatus(ctx, th, chat.SessionProcessing, "plan the release")
				if !errors.Is(err, chat.ErrNoSessions) {
					t.Fatalf("got %v, want ErrNoSessions", err)
				}
				if o, _ := chat.Classify(err); o != chat.Permanent {
					t.Errorf("classified %s, want permanent: no retry can help", o)
				}
			}
			if n := len(fake.Calls("agents.sessions.setStatus")); n != 1 {
				t.Errorf("%d setStatus calls, want 1: the workspace falls back after the first answer", n)
			}
			if n := r.log.count("agent sessions are not available"); n != 1 {
				t.Errorf("the fallback was logged %d times, want once", n)
			}
			if err := r.a.Working(ctx, th, "1.1", true); err != nil {
				t.Fatal(err)
			}
			if got := fake.Reactions("C1", "1.1"); !slices.Equal(got, []string{workingReaction}) {
				t.Errorf("reactions %q, want the hourglass", got)
			}
			if err := r.a.Working(ctx, th, "1.1", false); err != nil {
				t.Fatal(err)
			}
			if got := fake.Reactions("C1", "1.1"); len(got) != 0 {
				t.Errorf("reactions %q left after the turn", got)
			}
		})
	}
}

// TestSessionErrorInOneThread: an error about one thread is that call's,
// not the workspace's.
func TestSessionErrorInOneThread(t *testing.T) {
	r := newSessionRig(t, "xoxb-t", &fakeslack.Server{})
	ctx := context.Background()
	unknown := chat.Thread{Platform: "slack", Key: Key("T1", "C1", "9.9"), Channel: "C1", ThreadID: "9.9"}
	err := r.a.SetSessionStatus(ctx, unknown, chat.SessionProcessing, "")
	if err == nil || errors.Is(err, chat.ErrNoSessions) {
		t.Fatalf("a thread Slack does not know: %v, want an error of its own", err)
	}
	if err := r.a.SetSessionStatus(ctx, r.thread("C1", "1.1"), chat.SessionProcessing, ""); err != nil {
		t.Errorf("the next thread: %v, want sessions still on", err)
	}
}

// signed is an Events API request signed with secret, as Slack sends it.
func signed(t *testing.T, url, secret string, body []byte) *http.Request {
	t.Helper()
	stamp := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%s:%s", stamp, body)
	req := httptest.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Slack-Request-Timestamp", stamp)
	req.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	return req
}

// TestSessionStopped: Slack's Stop reaches the router's Stop rule, over
// Socket Mode and the Events API; a refusal is handed back to the router
// to tell the presser privately, in the thread; a redelivered event is
// handled once.
func TestSessionStopped(t *testing.T) {
	r := newSessionRig(t, "xoxb-t", &fakeslack.Server{})
	r.fake.AddUser("U2", "bob")
	ctx := context.Background()
	th := r.thread("C1", "1.1")
	if err := r.a.SetSessionStatus(ctx, th, chat.SessionProcessing, "plan the release"); err != nil {
		t.Fatal(err)
	}
	ev := r.fake.StopSession("U2", "C1", "1.1")
	if ev == nil {
		t.Fatal("no Stop button on a processing session")
	}
	push(t, r.a, r.fake, "EvStop1", ev)
	push(t, r.a, r.fake, "EvStop1", ev) // redelivered
	// Over HTTP, from the requester.
	body := r.fake.CallbackBody("EvStop2", r.fake.StopSession("U1", "C1", "1.1"))
	w := httptest.NewRecorder()
	r.a.HTTPHandler(ctx).ServeHTTP(w, signed(t, "/slack/events", "secret", body))
	if w.Code != http.StatusOK {
		t.Fatalf("events API: %d", w.Code)
	}
	r.a.queue.Wait(ctx)

	clicks := r.inbox.clicks()
	if len(clicks) != 2 {
		t.Fatalf("router saw %d stops, want 2 (the redelivery is not one): %+v", len(clicks), clicks)
	}
	if c := clicks[0]; c.Thread.Key != th.Key || c.Thread.ThreadID != "1.1" || c.UserID != "U2" || c.UserName != "bob" {
		t.Errorf("stop %+v, want bob's in %s", c, th.Key)
	}
	// The router tells the refusal (Router.Tell, through its one
	// delivery step, with ReplyPrivately): the adapter sends nothing.
	notes := r.inbox.Notes()
	if len(notes) != 1 || notes[0].User != "U2" || notes[0].Thread.Key != th.Key || notes[0].Thread.ThreadID != "1.1" || !strings.Contains(notes[0].Text, "Only <@U1>") {
		t.Errorf("notes %+v, want bob told privately in the thread, once", notes)
	}
	if eph := r.fake.Ephemerals("C1"); len(eph) != 0 {
		t.Errorf("the adapter posted ephemerals %+v itself", eph)
	}
	if got := r.fake.StopSession("U1", "C1", "9.9"); got != nil {
		t.Errorf("a thread without a session has a Stop button: %v", got)
	}
}

// TestSessionTitleChanged: a title the user gives the session in Slack
// renames it for the console.
func TestSessionTitleChanged(t *testing.T) {
	r := newSessionRig(t, "xoxb-t", &fakeslack.Server{})
	ctx := context.Background()
	th := r.thread("C1", "1.1")
	if err := r.a.SetSessionStatus(ctx, th, chat.SessionProcessing, "plan the release"); err != nil {
		t.Fatal(err)
	}
	ev := r.fake.RenameSession("U1", "C1", "1.1", "Release v2 checklist")
	if ev["previous_title"] != "plan the release" {
		t.Errorf("event %v, want the previous title", ev)
	}
	push(t, r.a, r.fake, "EvTitle", ev)
	r.a.queue.Wait(ctx)
	r.inbox.mu.Lock()
	defer r.inbox.mu.Unlock()
	if want := th.Key + "=Release v2 checklist"; !slices.Equal(r.inbox.renames, []string{want}) {
		t.Errorf("renames %q, want %q", r.inbox.renames, want)
	}
}
