package web

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/httphost"
	"github.com/pinplan/pinplan/todo"
)

// fakeStore holds one session's history and plan revisions, for every
// key the handler knows.
type fakeStore struct {
	mu    sync.Mutex // guards hist, plans and shown
	hist  []agent.Entry
	plans []agent.PlanRevision
	shown *chat.Plan // the plan the board record shows
}

func (f *fakeStore) Threads(context.Context) ([]Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return []Summary{{Key: "web/abc", Platform: "web", Title: "t", State: "idle", Plan: f.shown}}, nil
}

func (f *fakeStore) History(context.Context, string) ([]agent.Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.hist), nil
}

func (f *fakeStore) Plans(context.Context, string) ([]agent.PlanRevision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.plans), nil
}

func (f *fakeStore) add(e ...agent.Entry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hist = append(f.hist, e...)
}

type recHandler struct {
	got     []chat.Incoming
	clicks  []chat.Click
	known   map[string]bool
	deleted []string
	// queue, if set, stores each accepted message as the runner would:
	// in its inbox, stamped by its own clock.
	queue *fakeStore
	cards []chat.CardInfo // what the router's card records hold
	// answer, if set, answers a click; else every click decides card c1.
	answer func(chat.Click) chat.ClickResult
}

func (h *recHandler) Cards(string) []chat.CardInfo { return h.cards }

func (h *recHandler) Visible(key string) bool { return key == "web/abc" || h.known[key] }

func (h *recHandler) Rename(key, title string) (chat.Thread, bool) {
	return chat.Thread{Platform: "web", Key: key, Title: title}, true
}

func (h *recHandler) Delete(_ context.Context, key, _ string) error {
	h.deleted = append(h.deleted, key)
	return nil
}

func (h *recHandler) Click(_ context.Context, c chat.Click) chat.ClickResult {
	h.clicks = append(h.clicks, c)
	if h.answer != nil {
		return h.answer(c)
	}
	card := chat.Card{ID: "c1", Tool: "demo__write_note", Outcome: "Allowed once", By: c.UserName}
	return chat.ClickResult{Card: &card}
}

func (h *recHandler) Handle(_ context.Context, in chat.Incoming) error {
	if len(in.Text) > 100 {
		return &chat.Rejection{Reason: "too long", Refused: true}
	}
	h.got = append(h.got, in)
	if h.known == nil {
		h.known = map[string]bool{}
	}
	h.known[in.Thread.Key] = true
	if h.queue != nil {
		h.queue.add(agent.Inbound{Text: strings.TrimSpace(in.Text), Author: in.Author, At: time.Now().Add(time.Millisecond)}.Entry())
	}
	return nil
}

// testToken is the console token of tests that are not about the token:
// their requests carry it as a bearer header unless they set their own.
const testToken = "test-console-token"

// newConsole serves a console. With token "" the console still has one
// (testToken) and every request without an Authorization header gets it,
// so tests of other things need not sign in; a test of the token itself
// passes its own and gets no help.
func newConsole(t *testing.T, token string) (*Console, *httptest.Server, *recHandler, *fakeStore) {
	t.Helper()
	st := &fakeStore{}
	signIn := token == ""
	if signIn {
		token = testToken
	}
	h := &recHandler{}
	c := New(Options{Store: st})
	host := httphost.New(httphost.Options{Token: token})
	c.Register(host, h)
	var handler http.Handler = host.Handler()
	if signIn {
		inner := handler
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") == "" {
				r.Header.Set("Authorization", "Bearer "+testToken)
			}
			inner.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(handler)
	host.SetAddr(srv.Listener.Addr().String())
	t.Cleanup(func() { c.Close(); srv.Close() })
	return c, srv, h, st
}

func TestThreadViewMergesNotices(t *testing.T) {
	c, srv, _, st := newConsole(t, "")
	t0 := time.Now().Add(-time.Minute) // the turn happened before the notices
	st.add([]agent.Entry{
		{Message: openai.ChatCompletionMessage{Role: "user", Content: "plan it"}, At: t0},
		{Message: openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: "c"}}}, At: t0.Add(time.Second)},
		{Message: openai.ChatCompletionMessage{Role: "tool", Content: `{"todos":[]}`, ToolCallID: "c"}, At: t0.Add(time.Second)},
		{Message: openai.ChatCompletionMessage{Role: "assistant", Content: "the answer"}, At: t0.Add(2 * time.Second)},
	}...)
	th := chat.Thread{Platform: "web", Key: "web/abc", Channel: "web/abc"}
	c.Reply(context.Background(), th, "", "the answer")                   // also in history: shown once
	c.Reply(context.Background(), th, "", "The model did not answer ...") // a notice: kept
	resp, err := http.Get(srv.URL + "/api/threads/abc")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var view struct {
		Messages []Message `json:"messages"`
	}
	json.NewDecoder(resp.Body).Decode(&view)
	var texts []string
	for _, m := range view.Messages {
		texts = append(texts, m.Role+":"+m.Text)
	}
	want := "user:plan it|assistant:the answer|assistant:The model did not answer ..."
	if got := strings.Join(texts, "|"); got != want {
		t.Errorf("messages = %s\nwant       %s", got, want)
	}
}

func TestTokenAndInput(t *testing.T) {
	_, srv, h, _ := newConsole(t, "s3cret")
	// The handler knows a Slack thread: the console may show it, but
	// answering it is Slack's business.
	h.known = map[string]bool{"slack/T1/C1/1.1": true}
	do := func(method, path, body, auth string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		name, method, path, body, auth string
		want                           int
		answer                         string // in the answer's body, if set
	}{
		{"no token", "GET", "/api/threads", "", "", 401, ""},
		{"events need it too", "GET", "/api/events", "", "", 401, ""},
		{"good token", "GET", "/api/threads", "", "s3cret", 200, ""},
		{"health is open", "GET", "/healthz", "", "", 200, ""},
		{"bad json", "POST", "/api/threads", "{", "s3cret", 400, ""},
		{"trailing data", "POST", "/api/threads", `{"text":"x"} {"text":"y"}`, "s3cret", 400, ""},
		{"too big", "POST", "/api/threads", `{"text":"` + strings.Repeat("a", maxBody) + `"}`, "s3cret", 413, ""},
		{"refused", "POST", "/api/threads", `{"text":"` + strings.Repeat("a", 200) + `"}`, "s3cret", 422, ""},
		{"bad id", "POST", "/api/threads/..%2fx/messages", `{"text":"x"}`, "s3cret", 404, ""},
		{"unknown thread", "POST", "/api/threads/nosuch/messages", `{"text":"x"}`, "s3cret", 404, ""},
		{"plans of an unknown thread", "GET", "/api/threads/nosuch/plans", "", "s3cret", 404, ""},
		{"author too long", "POST", "/api/threads", `{"text":"hello","author":"` + strings.Repeat("n", 50000) + `"}`, "s3cret", 422, ""},
		{"new thread", "POST", "/api/threads", `{"text":"hello"}`, "s3cret", 201, ""},
		{"unknown slack thread", "POST", "/api/threads/slack~T1~C9~1.1/messages", `{"text":"x"}`, "s3cret", 404, "no such thread"},
		{"slack thread is read-only", "POST", "/api/threads/slack~T1~C1~1.1/messages", `{"text":"x"}`, "s3cret", 403, "this thread lives on another platform"},
	}
	for _, tt := range tests {
		got, body := do(tt.method, tt.path, tt.body, tt.auth)
		if got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
		if !strings.Contains(body, tt.answer) {
			t.Errorf("%s: answer %q, want it to say %q", tt.name, body, tt.answer)
		}
	}
	if len(h.got) != 1 || h.got[0].Text != "hello" || !strings.HasPrefix(h.got[0].Thread.Key, "web/") {
		t.Errorf("handled %+v", h.got)
	}
}

func TestIDsRoundTrip(t *testing.T) {
	for _, key := range []string{"web/0a1b2c", "slack/T1/C1/1700000000.000100", "discord/900000000000000001"} {
		got, ok := keyOf(idOf(key))
		if !ok || got != key {
			t.Errorf("keyOf(idOf(%q)) = %q, %t", key, got, ok)
		}
	}
	for _, bad := range []string{"", "../etc", "a/b", "x~<script>"} {
		if _, ok := keyOf(bad); ok {
			t.Errorf("keyOf(%q) accepted", bad)
		}
	}
}

// TestForgottenThreadReadsBack: once the router evicts an idle session,
// the console drops its live view of it, and the thread still shows its
// plan (from the store), its status pill (from the plan) and its cards
// (from the router); sequence numbers keep growing.
func TestForgottenThreadReadsBack(t *testing.T) {
	c, srv, h, st := newConsole(t, "")
	th := chat.Thread{Platform: "web", Key: "web/abc", Channel: "web/abc", ThreadID: "abc"}
	p := chat.Plan{Items: []todo.Item{{Content: "ship it", Status: todo.Completed}}, Revision: 4, State: chat.StateDone}
	card := chat.Card{ID: "c1", Tool: "demo__write_note", Outcome: "Allowed once", By: "Ada"}
	c.PostPlan(context.Background(), th, p)
	c.PostCard(context.Background(), th, card)
	c.SetState(th, "idle", string(chat.StateDone))
	get := func() (view struct {
		Thread struct {
			Status string    `json:"status"`
			Seq    int64     `json:"seq"`
			Plan   *planJSON `json:"plan"`
		} `json:"thread"`
		Cards []chat.Card `json:"cards"`
	}) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/api/threads/abc")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&view); err != nil {
			t.Fatal(err)
		}
		return view
	}
	live := get()
	if live.Thread.Plan == nil || live.Thread.Plan.Revision != 4 || len(live.Cards) != 1 || live.Thread.Status != "done" {
		t.Fatalf("live view: %+v", live)
	}

	c.Forget(th)
	c.mu.Lock()
	left := len(c.plans) + len(c.cards) + len(c.status) + len(c.issued)
	c.mu.Unlock()
	if left != 0 {
		t.Errorf("%d entries of the forgotten thread left in memory", left)
	}
	st.mu.Lock()
	st.shown = &p
	st.mu.Unlock()
	h.cards = []chat.CardInfo{{Card: card}}
	back := get()
	if back.Thread.Plan == nil || back.Thread.Plan.Revision != 4 {
		t.Errorf("forgotten thread shows plan %+v, want revision 4 from the store", back.Thread.Plan)
	}
	if back.Thread.Status != "done" {
		t.Errorf("forgotten thread's pill %q, want done", back.Thread.Status)
	}
	if len(back.Cards) != 1 || back.Cards[0].Outcome != "Allowed once" {
		t.Errorf("forgotten thread's cards %+v, want the decided card", back.Cards)
	}
	// A card that comes after the forgetting joins the earlier ones.
	c.PostCard(context.Background(), th, chat.Card{ID: "c2", Tool: "demo__write_note"})
	if both := get(); len(both.Cards) != 2 {
		t.Errorf("cards after a new one %+v, want the decided card and the new one", both.Cards)
	}
	c.SetState(th, "running", string(chat.StateWorking))
	if again := get(); again.Thread.Seq <= live.Thread.Seq {
		t.Errorf("seq %d after a new event, want more than %d", again.Thread.Seq, live.Thread.Seq)
	}
}

func TestCardsAndClicks(t *testing.T) {
	c, srv, h, _ := newConsole(t, "")
	th := chat.Thread{Platform: "web", Key: "web/abc", Channel: "web/abc", ThreadID: "abc"}
	if _, err := c.PostCard(context.Background(), th, chat.Card{ID: "c1", Tool: "demo__write_note"}); err != nil {
		t.Fatal(err)
	}
	var thread struct {
		Cards []chat.Card `json:"cards"`
	}
	resp, err := http.Get(srv.URL + "/api/threads/abc")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&thread)
	resp.Body.Close()
	if len(thread.Cards) != 1 || !thread.Cards[0].Open() {
		t.Fatalf("cards = %+v, want the open card", thread.Cards)
	}
	resp, err = http.Post(srv.URL+"/api/threads/abc/click", "application/json", strings.NewReader(`{"button":"pinplan:allow:c1"}`))
	if err != nil {
		t.Fatal(err)
	}
	var res chat.ClickResult
	json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if resp.StatusCode != 200 || res.Card == nil || res.Card.Outcome != "Allowed once" {
		t.Errorf("click answered %d %+v", resp.StatusCode, res)
	}
	if len(h.clicks) != 1 || h.clicks[0].Button != "pinplan:allow:c1" || h.clicks[0].Thread.Key != "web/abc" {
		t.Errorf("clicks %+v", h.clicks)
	}
	resp, err = http.Post(srv.URL+"/api/threads/slack~T1~C1~1.1/click", "application/json", strings.NewReader(`{"button":"pinplan:allow:c1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a click for a Slack thread from the console: %d, want 403", resp.StatusCode)
	}
}

func TestConsoleRefusesOtherSites(t *testing.T) {
	_, srv, h, _ := newConsole(t, "")
	send := func(mod func(*http.Request)) (*http.Response, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/api/threads", strings.NewReader(`{"text":"hi"}`))
		req.Header.Set("Content-Type", "application/json")
		mod(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		io.Copy(&b, resp.Body)
		return resp, b.String()
	}
	tests := []struct {
		name string
		mod  func(*http.Request)
		want int
	}{
		{"text/plain from another site", func(r *http.Request) {
			r.Header.Set("Content-Type", "text/plain")
			r.Header.Set("Origin", "https://evil.example")
		}, 403},
		{"json from another origin", func(r *http.Request) { r.Header.Set("Origin", "https://evil.example") }, 403},
		{"cross-site fetch metadata", func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") }, 403},
		{"same origin but a form", func(r *http.Request) {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.Header.Set("Origin", srv.URL)
		}, 415},
		{"DNS rebinding", func(r *http.Request) { r.Host = "evil.example:" + srv.URL[strings.LastIndex(srv.URL, ":")+1:] }, 421},
		{"the console itself", func(r *http.Request) { r.Header.Set("Origin", srv.URL) }, 201},
		{"opaque origin alone", func(r *http.Request) { r.Header.Set("Origin", "null") }, 403},
		{"opaque origin from the console's page", func(r *http.Request) {
			r.Header.Set("Origin", "null")
			r.Header.Set("Sec-Fetch-Site", "same-origin")
		}, 201},
		{"localhost name", func(r *http.Request) {
			r.Host = "localhost:" + srv.URL[strings.LastIndex(srv.URL, ":")+1:]
			r.Header.Set("Sec-Fetch-Site", "same-origin")
		}, 201},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(h.got)
			resp, body := send(tt.mod)
			if resp.StatusCode != tt.want {
				t.Errorf("got %d %s, want %d", resp.StatusCode, body, tt.want)
			}
			if tt.want >= 400 && len(h.got) != before {
				t.Error("a refused request reached the router")
			}
			if resp.Header.Get("X-Frame-Options") != "DENY" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
				resp.Header.Get("Referrer-Policy") != "no-referrer" {
				t.Errorf("security headers missing: %v", resp.Header)
			}
		})
	}
	// A health check with any Host is answered (supervisors probe it so).
	req, _ := http.NewRequest("GET", srv.URL+"/healthz", nil)
	req.Host = "pinplan.internal"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/healthz with another Host: %d", resp.StatusCode)
	}
}

func TestTokenExchangedForCookie(t *testing.T) {
	_, srv, _, _ := newConsole(t, "s3cret")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(srv.URL + "/?token=s3cret")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || strings.Contains(resp.Header.Get("Location"), "token") {
		t.Errorf("?token= answered %d to %q, want a redirect without the token", resp.StatusCode, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "pinplan_token" {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookie %+v, want HttpOnly SameSite=Strict", cookie)
	}
	// Without a token, the page is the sign-in form; the API says 401 in JSON.
	resp, err = client.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	var page strings.Builder
	io.Copy(&page, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(page.String(), `<form method="post" action="/login">`) {
		t.Errorf("page without a token: %d %.200s", resp.StatusCode, page.String())
	}
	resp, err = client.Get(srv.URL + "/api/threads")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Errorf("API without a token: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	// The form signs in.
	req, _ := http.NewRequest("POST", srv.URL+"/login", strings.NewReader("token=s3cret"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", srv.URL)
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) == 0 {
		t.Errorf("login: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
}

// TestExpireForgetsQuietThreads: the live view of a thread that has not
// changed for the idle time goes (the threads other replicas run, which
// this router never evicts); a thread that changed since stays.
func TestExpireForgetsQuietThreads(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	c := New(Options{Now: func() time.Time { return now }})
	quiet := chat.Thread{Platform: "slack", Key: "slack/T1/C1/1.1", Channel: "C1"}
	busy := chat.Thread{Platform: "slack", Key: "slack/T1/C1/2.1", Channel: "C1"}
	p := chat.Plan{Items: []todo.Item{{Content: "a", Status: todo.Completed}}, Revision: 1, State: chat.StateDone}
	c.Mirror(quiet, p)
	c.SetState(quiet, "idle", "done")
	c.Mirror(busy, p)
	waiting := chat.Thread{Platform: "web", Key: "web/w", Channel: "web/w"}
	c.PostCard(context.Background(), waiting, chat.Card{ID: "c1", Tool: "demo__write_note"})
	now = now.Add(11 * time.Minute)
	c.SetState(busy, "running", "working")
	if n := c.Expire(10 * time.Minute); n != 1 {
		t.Errorf("Expire dropped %d threads, want the quiet one", n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.plans[quiet.Key]; ok {
		t.Error("the quiet thread's plan is still kept")
	}
	if _, ok := c.status[quiet.Key]; ok {
		t.Error("the quiet thread's status is still kept")
	}
	if _, ok := c.plans[busy.Key]; !ok {
		t.Error("the thread that changed lost its plan")
	}
	if _, ok := c.cards[waiting.Key]["c1"]; !ok {
		t.Error("a quiet thread's open approval card was forgotten")
	}
}
