package fakeslack

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// serve starts s on a loopback listener and returns its base URL.
func serve(t testing.TB, s *Server) string {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv.URL
}

// call makes a form-encoded Web API call as slack-go does and returns the
// decoded answer (nil for a non-JSON one) and the HTTP status.
func call(t testing.TB, base, token, method string, params map[string]string) (map[string]any, int) {
	t.Helper()
	form := url.Values{}
	for k, v := range params {
		form.Set(k, v)
	}
	req, err := http.NewRequest(http.MethodPost, base+"/api/"+method, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if json.NewDecoder(resp.Body).Decode(&out) != nil {
		return nil, resp.StatusCode
	}
	return out, resp.StatusCode
}

// bot calls method with a bot token and returns the error code, "" if ok.
func bot(t testing.TB, base, method string, params map[string]string) (map[string]any, string) {
	t.Helper()
	out, status := call(t, base, "xoxb-test", method, params)
	if out == nil {
		t.Fatalf("%s: HTTP %d with no JSON", method, status)
	}
	if ok, _ := out["ok"].(bool); ok {
		return out, ""
	}
	code, _ := out["error"].(string)
	return out, code
}

func post(t testing.TB, base, channel, text string) string {
	t.Helper()
	out, code := bot(t, base, "chat.postMessage", map[string]string{"channel": channel, "text": text})
	if code != "" {
		t.Fatalf("chat.postMessage: %s", code)
	}
	return out["ts"].(string)
}

func TestTokens(t *testing.T) {
	base := serve(t, &Server{})
	tests := []struct {
		name, token, method, want string
	}{
		{"bot token", "xoxb-1", "auth.test", ""},
		{"no token", "", "auth.test", "not_authed"},
		{"garbage token", "hunter2", "auth.test", "invalid_auth"},
		{"app token on a bot method", "xapp-1", "chat.postMessage", "not_allowed_token_type"},
		{"bot token opening socket mode", "xoxb-1", "apps.connections.open", "not_allowed_token_type"},
		{"app token opening socket mode", "xapp-1", "apps.connections.open", ""},
		{"unknown method", "xoxb-1", "chat.bogus", "unknown_method"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _ := call(t, base, tt.token, tt.method, map[string]string{"channel": "C1", "text": "hi"})
			got, _ := out["error"].(string)
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPins(t *testing.T) {
	s := &Server{PinLimit: 2}
	base := serve(t, s)
	a, b, c := post(t, base, "C1", "a"), post(t, base, "C1", "b"), post(t, base, "C1", "c")
	other := post(t, base, "C2", "elsewhere")
	s.NotPinnable("C1", c)
	pin := func(method, ts string) string {
		_, code := bot(t, base, method, map[string]string{"channel": "C1", "timestamp": ts})
		return code
	}
	steps := []struct {
		name, method, ts, want string
	}{
		{"pin a", "pins.add", a, ""},
		{"pin a again", "pins.add", a, "already_pinned"},
		{"not pinnable", "pins.add", c, "not_pinnable"},
		{"unknown message", "pins.add", "1.000001", "message_not_found"},
		{"pin b", "pins.add", b, ""},
		{"unpin a message never pinned", "pins.remove", c, "no_pin"},
		{"unpin b", "pins.remove", b, ""},
		{"unpin b again", "pins.remove", b, "no_pin"},
		{"pin b back", "pins.add", b, ""},
	}
	for _, st := range steps {
		if got := pin(st.method, st.ts); got != st.want {
			t.Fatalf("%s: got %q, want %q", st.name, got, st.want)
		}
	}
	// The limit counts per channel: C1 is full, C2 is not.
	s.mu.Lock()
	s.unpinnable = map[string]bool{}
	s.mu.Unlock()
	if got := pin("pins.add", c); got != "too_many_pins" {
		t.Errorf("third pin in C1 with PinLimit 2: got %q, want too_many_pins", got)
	}
	if _, code := bot(t, base, "pins.add", map[string]string{"channel": "C2", "timestamp": other}); code != "" {
		t.Errorf("pin in C2: got %q, want ok", code)
	}
	if got := s.Pinned("C1"); len(got) != 2 || got[0] != a || got[1] != b {
		t.Errorf("pinned %v, want [%s %s]", got, a, b)
	}
}

func TestDefaultPinLimit(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	for i := 0; i < 101; i++ {
		ts := post(t, base, "C1", "m")
		_, code := bot(t, base, "pins.add", map[string]string{"channel": "C1", "timestamp": ts})
		want := ""
		if i == 100 {
			want = "too_many_pins"
		}
		if code != want {
			t.Fatalf("pin %d: got %q, want %q", i+1, code, want)
		}
	}
}

func TestUpdateOnlyOwnMessages(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	s.Push("Ev1", map[string]any{"type": "message", "user": "U1", "text": "mine", "ts": "1700000000.000100", "channel": "C1"})
	if _, code := bot(t, base, "chat.update", map[string]string{"channel": "C1", "ts": "1700000000.000100", "text": "edited"}); code != "cant_update_message" {
		t.Errorf("editing a user's message: got %q, want cant_update_message", code)
	}
	if _, code := bot(t, base, "chat.update", map[string]string{"channel": "C1", "ts": "1.000002", "text": "x"}); code != "message_not_found" {
		t.Errorf("editing a missing message: got %q, want message_not_found", code)
	}
	blocks := `[{"type":"divider"}]`
	out, code := bot(t, base, "chat.postMessage", map[string]string{"channel": "C1", "text": "t", "blocks": blocks})
	if code != "" {
		t.Fatal(code)
	}
	ts := out["ts"].(string)
	if _, code := bot(t, base, "chat.update", map[string]string{"channel": "C1", "ts": ts, "text": "t2"}); code != "" {
		t.Fatal(code)
	}
	m := s.Messages("C1")[1]
	if m.Text != "t2" || m.Blocks != blocks || m.Edits != 1 {
		t.Errorf("after an update without blocks: %+v, want the blocks kept", m)
	}
	if _, code := bot(t, base, "chat.update", map[string]string{"channel": "C1", "ts": ts, "text": "t3", "blocks": "[]"}); code != "" {
		t.Fatal(code)
	}
	if m := s.Messages("C1")[1]; m.Blocks != "" {
		t.Errorf("an empty blocks array should remove the blocks, got %q", m.Blocks)
	}
}

func TestReactionsNeedTheMessage(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	if _, code := bot(t, base, "reactions.add", map[string]string{"channel": "C1", "timestamp": "1700000000.000100", "name": "eyes"}); code != "message_not_found" {
		t.Errorf("reaction on a missing message: got %q, want message_not_found", code)
	}
	s.Push("Ev1", map[string]any{"type": "app_mention", "user": "U1", "text": "<@UBOT> hi", "ts": "1700000000.000100", "channel": "C1"})
	for _, st := range []struct{ method, want string }{
		{"reactions.add", ""}, {"reactions.add", "already_reacted"}, {"reactions.remove", ""}, {"reactions.remove", "no_reaction"},
	} {
		if _, code := bot(t, base, st.method, map[string]string{"channel": "C1", "timestamp": "1700000000.000100", "name": "eyes"}); code != st.want {
			t.Errorf("%s: got %q, want %q", st.method, code, st.want)
		}
	}
}

func TestFaults(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	s.FailHTTP("chat.postMessage", http.StatusInternalServerError, 2)
	s.Fail("chat.postMessage", "fatal_error")
	for i, want := range []int{500, 500, 200, 200} {
		out, status := call(t, base, "xoxb-1", "chat.postMessage", map[string]string{"channel": "C1", "text": "x"})
		if status != want {
			t.Errorf("call %d: HTTP %d, want %d", i+1, status, want)
		}
		if i == 2 && out["error"] != "fatal_error" {
			t.Errorf("call 3: %v, want the queued fatal_error", out)
		}
		if i == 3 && out["ok"] != true {
			t.Errorf("call 4: %v, want ok", out)
		}
	}
	calls := s.Calls("chat.postMessage")
	if calls[0].Error != "http 500" || calls[0].Status != 500 || calls[3].Error != "" {
		t.Errorf("recorded calls %+v", calls)
	}
	if n := len(s.Messages("C1")); n != 1 {
		t.Errorf("%d messages, want 1: failed calls must not post", n)
	}

	s.FailHTTP("", http.StatusTooManyRequests, 1)
	req, _ := http.NewRequest(http.MethodPost, base+"/api/auth.test", strings.NewReader("token=xoxb-1"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("FailHTTP any 429: HTTP %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	call(t, base, "xoxb-1", "auth.test", nil)
	if v := s.Violations(); len(v) != 1 || !strings.Contains(v[0], "auth.test") {
		t.Errorf("violations %q, want the call made within Retry-After", v)
	}
}

// postStatus posts to channel with a bot token and returns the HTTP
// status and the Retry-After header.
func postStatus(t testing.TB, base, channel string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/api/chat.postMessage", strings.NewReader("token=xoxb-1&text=x&channel="+channel))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

func TestLimitPerChannel(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	s.LimitPerChannel("chat.postMessage", 3, time.Second)
	for i := range 3 {
		if status, _ := postStatus(t, base, "C1"); status != http.StatusOK {
			t.Fatalf("post %d to C1: HTTP %d, want 200 within the burst", i+1, status)
		}
	}
	if status, after := postStatus(t, base, "C1"); status != http.StatusTooManyRequests || after != "1" {
		t.Errorf("fourth post to C1 in a second: HTTP %d Retry-After %q, want 429 and 1", status, after)
	}
	// Another channel has a window of its own, and C1's Retry-After does
	// not hold it.
	for i := range 3 {
		if status, _ := postStatus(t, base, "C2"); status != http.StatusOK {
			t.Errorf("post %d to C2: HTTP %d, want 200: C1's posts count only in C1", i+1, status)
		}
	}
	if v := s.Violations(); len(v) != 0 {
		t.Errorf("violations %q after posts to another channel, want none", v)
	}
	// Within C1's Retry-After: refused again, and held against the client.
	if status, _ := postStatus(t, base, "C1"); status != http.StatusTooManyRequests {
		t.Errorf("post to C1 within Retry-After: HTTP %d, want 429", status)
	}
	if v := s.Violations(); len(v) != 1 || !strings.Contains(v[0], "chat.postMessage in C1") {
		t.Errorf("violations %q, want the one post to C1 within Retry-After", v)
	}
	time.Sleep(1100 * time.Millisecond)
	// The 429s were not counted: the window holds nothing but what was
	// posted, and that has left it.
	for i := range 3 {
		if status, _ := postStatus(t, base, "C1"); status != http.StatusOK {
			t.Errorf("post %d to C1 after Retry-After: HTTP %d, want 200", i+1, status)
		}
	}
	if n, want := len(s.Messages("C1")), 6; n != want {
		t.Errorf("%d messages in C1, want %d: refused posts must not post", n, want)
	}
	if v := s.Violations(); len(v) != 1 {
		t.Errorf("violations %q, want still the one", v)
	}
}

func TestLimitPerChannelWithWorkspaceCap(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	s.LimitPerChannel("chat.postMessage", 2, time.Minute)
	s.Limit("chat.postMessage", 3, time.Minute)
	for _, tt := range []struct {
		channel string
		want    int
	}{
		{"C1", 200}, {"C1", 200},
		{"C1", 429}, // C1's window is full; the workspace's has room
		{"C2", 200}, // the 429 above counted in neither window: room for one more
		{"C3", 429}, // the workspace cap
	} {
		if status, _ := postStatus(t, base, tt.channel); status != tt.want {
			t.Errorf("post to %s: HTTP %d, want %d", tt.channel, status, tt.want)
		}
	}
	calls := s.Calls("chat.postMessage")
	if got := calls[4].Error; got != "ratelimited" {
		t.Errorf("the capped call recorded %q, want ratelimited", got)
	}
}

func TestDelay(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	s.Delay("auth.test", 300*time.Millisecond, 1)
	start := time.Now()
	call(t, base, "xoxb-1", "auth.test", nil)
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("delayed call answered after %s, want at least 300ms", d)
	}
	// A client that gives up early: the call still takes effect.
	s.Delay("chat.postMessage", time.Minute, 1)
	client := &http.Client{Timeout: 100 * time.Millisecond}
	req, _ := http.NewRequest(http.MethodPost, base+"/api/chat.postMessage", strings.NewReader("token=xoxb-1&channel=C1&text=late"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if _, err := client.Do(req); err == nil {
		t.Fatal("the client did not time out")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(s.Messages("C1")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the timed-out post never landed; calls %+v", s.Calls(""))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRepliesAndUsers(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	s.AddUser("U1", "Ada")
	parent := "1700000000.000100"
	s.Push("Ev1", map[string]any{"type": "app_mention", "user": "U1", "text": "<@UBOT> plan", "ts": parent, "channel": "C1"})
	s.Push("Ev1b", map[string]any{"type": "message", "user": "U1", "text": "<@UBOT> plan", "ts": parent, "channel": "C1"}) // the same message, twice delivered
	var want []string
	want = append(want, parent)
	for i := 0; i < 4; i++ {
		out, code := bot(t, base, "chat.postMessage", map[string]string{"channel": "C1", "thread_ts": parent, "text": "reply"})
		if code != "" {
			t.Fatal(code)
		}
		want = append(want, out["ts"].(string))
		if i == 1 {
			ts := "1700000000.000200"
			// An older user reply pushed late sorts by its ts.
			s.Push("Ev2", map[string]any{"type": "message", "user": "U1", "text": "me too", "ts": ts, "thread_ts": parent, "channel": "C1"})
			want = append([]string{want[0], ts}, want[1:]...)
		}
	}
	post(t, base, "C1", "not in the thread")
	var got []string
	cursor := ""
	for page := 0; page < 10; page++ {
		out, code := bot(t, base, "conversations.replies", map[string]string{"channel": "C1", "ts": parent, "limit": "2", "cursor": cursor})
		if code != "" {
			t.Fatal(code)
		}
		for _, m := range out["messages"].([]any) {
			got = append(got, m.(map[string]any)["ts"].(string))
		}
		cursor = out["response_metadata"].(map[string]any)["next_cursor"].(string)
		if more := out["has_more"].(bool); more != (cursor != "") {
			t.Errorf("has_more %v with cursor %q", more, cursor)
		}
		if cursor == "" {
			break
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("thread got %v, want %v", got, want)
	}
	for _, tt := range []struct{ name, ts, cursor, want string }{
		{"unknown thread", "1.000009", "", "thread_not_found"},
		{"bad cursor", parent, "zzz", "invalid_cursor"},
	} {
		if _, code := bot(t, base, "conversations.replies", map[string]string{"channel": "C1", "ts": tt.ts, "cursor": tt.cursor}); code != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, code, tt.want)
		}
	}
	out, code := bot(t, base, "users.info", map[string]string{"user": "U1"})
	if code != "" || out["user"].(map[string]any)["profile"].(map[string]any)["display_name"] != "Ada" {
		t.Errorf("users.info U1: %v %v", code, out)
	}
	if _, code := bot(t, base, "users.info", map[string]string{"user": "U404"}); code != "user_not_found" {
		t.Errorf("unknown user: got %q, want user_not_found", code)
	}
}

// TestMetadata: chat.postMessage keeps a message's metadata as Slack's
// schema allows it, refuses what the schema does not, and
// conversations.replies returns it only with include_all_metadata.
func TestMetadata(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	parent := post(t, base, "C1", "task")
	for _, tt := range []struct{ meta, want string }{
		{`{"event_type":"pinplan_reply","event_payload":{"send_key":"k/0"}}`, ""},
		{`not json`, "invalid_metadata_format"},
		{`{"event_payload":{"a":"b"}}`, "invalid_metadata_schema"},
		{`{"event_type":"has space","event_payload":{"a":"b"}}`, "invalid_metadata_schema"},
		{`{"event_type":"ok","event_payload":"text"}`, "invalid_metadata_schema"},
		{`{"event_type":"ok","event_payload":{"a":null}}`, "invalid_metadata_schema"},
	} {
		_, code := bot(t, base, "chat.postMessage", map[string]string{"channel": "C1", "thread_ts": parent, "text": "reply", "metadata": tt.meta})
		if code != tt.want {
			t.Errorf("metadata %s: %q, want %q", tt.meta, code, tt.want)
		}
	}
	find := func(include string) (found bool) {
		out, code := bot(t, base, "conversations.replies", map[string]string{"channel": "C1", "ts": parent, "include_all_metadata": include})
		if code != "" {
			t.Fatal(code)
		}
		for _, m := range out["messages"].([]any) {
			md, ok := m.(map[string]any)["metadata"].(map[string]any)
			if ok && md["event_type"] == "pinplan_reply" && md["event_payload"].(map[string]any)["send_key"] == "k/0" {
				found = true
			}
		}
		return found
	}
	if !find("1") {
		t.Error("include_all_metadata=1: the metadata is not returned")
	}
	if find("0") {
		t.Error("include_all_metadata=0: metadata returned")
	}
}

// TestDelayAnswer: the call takes effect at once; its answer comes after
// the delay, and a client that gives up never sees it.
func TestDelayAnswer(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	s.DelayAnswer("chat.postMessage", time.Minute, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/chat.postMessage", strings.NewReader("channel=C1&text=lost"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer xoxb-test")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s.HeldAnswers() != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(s.Messages("C1")); n != 1 || s.HeldAnswers() != 1 {
		t.Fatalf("%d messages, %d answers held; want the message posted and its answer held", n, s.HeldAnswers())
	}
	cancel()
	if err := <-done; err == nil {
		t.Error("the client that gave up got an answer")
	}
	post(t, base, "C1", "next") // the fault is spent
	if n := len(s.Messages("C1")); n != 2 {
		t.Errorf("%d messages, want 2", n)
	}
}

// TestRetryAfterInFlight: a call that reached the fake before a 429 was
// answered (held by a Delay while the 429 went out) was on its way, not
// sent against the Retry-After: it is recorded as in flight, not as a
// violation. A call that reached it after the 429 was answered, inside
// the Retry-After, is a violation.
func TestRetryAfterInFlight(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	s.Limit("auth.test", 1, time.Minute)
	if _, status := call(t, base, "xoxb-1", "auth.test", nil); status != http.StatusOK {
		t.Fatalf("first call: HTTP %d, want 200", status)
	}
	// Call 2 reaches the fake and is held there while call 3 is answered 429.
	s.Delay("auth.test", 500*time.Millisecond, 1)
	held := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, base+"/api/auth.test", strings.NewReader("token=xoxb-1"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			held <- 0
			return
		}
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	deadline := time.Now().Add(5 * time.Second)
	for s.Held("auth.test") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the second call was never held")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, status := call(t, base, "xoxb-1", "auth.test", nil); status != http.StatusTooManyRequests {
		t.Fatalf("third call: HTTP %d, want 429", status)
	}
	if status := <-held; status != http.StatusTooManyRequests {
		t.Errorf("the held call: HTTP %d, want 429 (the window is still full)", status)
	}
	if v := s.Violations(); len(v) != 0 {
		t.Errorf("violations %q, want none: the held call began before the 429 was answered", v)
	}
	if f := s.InFlightAtRetryAfter(); len(f) != 1 || !strings.Contains(f[0], "auth.test") {
		t.Errorf("in flight at a 429: %q, want the held call", f)
	}

	// Call 4 is made after call 3's 429 came back: sent against it.
	call(t, base, "xoxb-1", "auth.test", nil)
	if v := s.Violations(); len(v) != 1 || !strings.Contains(v[0], "auth.test") || !strings.Contains(v[0], "before Retry-After ended") {
		t.Errorf("violations %q, want the one call made after the 429 was answered", v)
	}
	if f := s.InFlightAtRetryAfter(); len(f) != 1 {
		t.Errorf("in flight at a 429: %q, want still the one", f)
	}
}

// TestRetryAfterGrace: with InFlightGrace, a call on another connection
// just after a 429 was answered is counted in flight (the client may not
// have read the 429 yet), while a call on the connection that carried
// the 429 came after the client read it: a violation.
func TestRetryAfterGrace(t *testing.T) {
	s := &Server{InFlightGrace: time.Minute}
	base := serve(t, s)
	s.Limit("auth.test", 1, time.Minute)
	// Two clients, each with a connection of its own (kept alive).
	a := &http.Client{Transport: &http.Transport{}}
	b := &http.Client{Transport: &http.Transport{}}
	defer a.CloseIdleConnections()
	defer b.CloseIdleConnections()
	do := func(c *http.Client) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/api/auth.test", strings.NewReader("token=xoxb-1"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	do(b) // b's connection is open before the 429
	if status := do(a); status != http.StatusTooManyRequests {
		t.Fatalf("a: HTTP %d, want 429", status)
	}
	do(b)
	if v := s.Violations(); len(v) != 0 {
		t.Errorf("violations %q after a call on another connection within the grace, want none", v)
	}
	if f := s.InFlightAtRetryAfter(); len(f) != 1 || !strings.Contains(f[0], "another connection") {
		t.Errorf("in flight at a 429: %q, want b's call", f)
	}
	do(a)
	if v := s.Violations(); len(v) != 1 || !strings.Contains(v[0], "before Retry-After ended") {
		t.Errorf("violations %q, want a's call on the connection that carried the 429", v)
	}
}
