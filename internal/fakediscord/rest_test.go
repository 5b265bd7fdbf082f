package fakediscord

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func serve(t testing.TB, s *Server) string {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv.URL
}

type answer struct {
	status int
	header http.Header
	body   any
}

func (a answer) code() int {
	m, _ := a.body.(map[string]any)
	c, _ := m["code"].(float64)
	return int(c)
}

func (a answer) field(k string) any {
	m, _ := a.body.(map[string]any)
	return m[k]
}

// rest makes a REST call with the bot token as discordgo does.
func rest(t testing.TB, base, method, path string, body any) answer {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+"/api/v9/"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bot test-token")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, header: resp.Header}
	json.NewDecoder(resp.Body).Decode(&a.body)
	return a
}

func postMsg(t testing.TB, base, channel string, body map[string]any) string {
	t.Helper()
	a := rest(t, base, "POST", "channels/"+channel+"/messages", body)
	if a.status != 200 {
		t.Fatalf("post in %s: %d %v", channel, a.status, a.body)
	}
	return a.field("id").(string)
}

func TestRateLimitHeaders(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	s.AddChannel("C2", 0, "G1")
	base := serve(t, s)
	id := postMsg(t, base, "C1", map[string]any{"content": "x"})
	id2 := postMsg(t, base, "C2", map[string]any{"content": "x"})
	s.LimitEdits(2, time.Second)
	get := rest(t, base, "GET", "channels/C1", nil)
	for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-Reset-After", "X-RateLimit-Bucket"} {
		if get.header.Get(h) == "" {
			t.Errorf("GET channel: no %s header", h)
		}
	}
	edit := func(ch, id string) answer {
		return rest(t, base, "PATCH", "channels/"+ch+"/messages/"+id, map[string]any{"content": "y"})
	}
	a1, a2, a3 := edit("C1", id), edit("C1", id), edit("C1", id)
	other := edit("C2", id2)
	for i, tt := range []struct {
		a         answer
		status    int
		remaining string
	}{{a1, 200, "1"}, {a2, 200, "0"}, {a3, 429, "0"}, {other, 200, "1"}} {
		if tt.a.status != tt.status || tt.a.header.Get("X-RateLimit-Limit") != "2" || tt.a.header.Get("X-RateLimit-Remaining") != tt.remaining {
			t.Errorf("edit %d: %d limit %q remaining %q, want %d 2 %s", i+1, tt.a.status,
				tt.a.header.Get("X-RateLimit-Limit"), tt.a.header.Get("X-RateLimit-Remaining"), tt.status, tt.remaining)
		}
		after, err := strconv.ParseFloat(tt.a.header.Get("X-RateLimit-Reset-After"), 64)
		if err != nil || after <= 0 || after > 1 {
			t.Errorf("edit %d: Reset-After %q, want within the 1s window", i+1, tt.a.header.Get("X-RateLimit-Reset-After"))
		}
		reset, _ := strconv.ParseFloat(tt.a.header.Get("X-RateLimit-Reset"), 64)
		if d := reset - (float64(time.Now().UnixMilli())/1000 + after); d > 0.5 || d < -0.5 {
			t.Errorf("edit %d: Reset %v disagrees with Reset-After %v", i+1, reset, after)
		}
	}
	if a1.header.Get("X-RateLimit-Bucket") != other.header.Get("X-RateLimit-Bucket") || a1.header.Get("X-RateLimit-Bucket") == get.header.Get("X-RateLimit-Bucket") {
		t.Error("the bucket should name the route, shared across channels, not across routes")
	}
	if ra, _ := a3.field("retry_after").(float64); ra <= 0 || a3.header.Get("Retry-After") == "" {
		t.Errorf("429 without retry_after: %v %v", a3.body, a3.header)
	}
	edit("C1", id) // before retry_after: a violation
	if v := s.Violations(); len(v) != 1 || !strings.Contains(v[0], "before retry_after") {
		t.Errorf("violations %q, want the early retry", v)
	}
	if h := rest(t, base, "GET", "channels/nope", nil).header; h.Get("X-RateLimit-Bucket") == "" {
		t.Error("an error answer has no rate limit headers")
	}
}

func TestAuthAndFaults(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	base := serve(t, s)
	req, _ := http.NewRequest("GET", base+"/api/v9/channels/C1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("no token: %d, want 401", resp.StatusCode)
	}
	s.FailHTTP("POST messages", 500, 2)
	s.Fail("POST messages", 403, 50013)
	for i, want := range []struct{ status, code int }{{500, 0}, {500, 0}, {403, 50013}, {200, 0}} {
		a := rest(t, base, "POST", "channels/C1/messages", map[string]any{"content": "x"})
		if a.status != want.status || (a.status != 200 && a.code() != want.code) {
			t.Errorf("post %d: %d %v, want %d code %d", i+1, a.status, a.body, want.status, want.code)
		}
	}
	if n := len(s.Messages("C1")); n != 1 {
		t.Errorf("%d messages, want 1", n)
	}
	s.FailHTTP("", 502, 1)
	if a := rest(t, base, "GET", "users/@me", nil); a.status != 502 {
		t.Errorf("FailHTTP on any route: %d, want 502", a.status)
	}
	s.FailHTTP("GET channel", 429, 1)
	limited := rest(t, base, "GET", "channels/C1", nil)
	if ra, _ := limited.field("retry_after").(float64); limited.status != 429 || ra != 1 || limited.header.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("injected 429: %d %v %v", limited.status, limited.body, limited.header)
	}
	rest(t, base, "GET", "channels/C1", nil)
	if v := s.Violations(); len(v) != 1 {
		t.Errorf("violations %q, want the request made within retry_after", v)
	}
	s.Delay("GET channel", 200*time.Millisecond, 1)
	start := time.Now()
	rest(t, base, "GET", "channels/C1", nil)
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("delayed request answered in %s", d)
	}
	start = time.Now()
	rest(t, base, "GET", "channels/C1", nil)
	if d := time.Since(start); d > 150*time.Millisecond {
		t.Errorf("the delay outlived its count: %s", d)
	}
}

func TestMessageRules(t *testing.T) {
	long := func(n int) string { return strings.Repeat("é", n) }
	embed := func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	fields := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = map[string]any{"name": "n", "value": "v"}
		}
		return out
	}
	tests := []struct {
		name         string
		body         map[string]any
		status, code int
	}{
		{"content of 2000", map[string]any{"content": long(2000)}, 200, 0},
		{"content of 2001", map[string]any{"content": long(2001)}, 400, codeInvalidForm},
		{"empty", map[string]any{"content": ""}, 400, codeEmptyMessage},
		{"nothing but nulls, as discordgo sends", map[string]any{"embeds": nil, "components": nil, "sticker_ids": nil, "tts": false}, 400, codeEmptyMessage},
		{"embed only", map[string]any{"embeds": []any{embed("title", "t", "description", long(4096))}}, 200, 0},
		{"11 embeds", map[string]any{"embeds": []any{embed("title", "a"), embed("title", "a"), embed("title", "a"), embed("title", "a"), embed("title", "a"), embed("title", "a"), embed("title", "a"), embed("title", "a"), embed("title", "a"), embed("title", "a"), embed("title", "a")}}, 400, codeInvalidForm},
		{"description of 4097", map[string]any{"embeds": []any{embed("description", long(4097))}}, 400, codeInvalidForm},
		{"title of 257", map[string]any{"embeds": []any{embed("title", long(257))}}, 400, codeInvalidForm},
		{"footer of 2049", map[string]any{"embeds": []any{embed("title", "t", "footer", map[string]any{"text": long(2049)})}}, 400, codeInvalidForm},
		{"26 fields", map[string]any{"embeds": []any{embed("fields", fields(26))}}, 400, codeInvalidForm},
		{"field without a value", map[string]any{"embeds": []any{embed("fields", []any{map[string]any{"name": "n"}})}}, 400, codeInvalidForm},
		{"embeds over 6000 together", map[string]any{"embeds": []any{embed("description", long(4000)), embed("description", long(2001))}}, 400, codeInvalidForm},
		{"reply to an unknown message", map[string]any{"content": "x", "message_reference": map[string]any{"message_id": "42"}}, 400, codeInvalidForm},
		{"reply to an unknown message, allowed to fail", map[string]any{"content": "x", "message_reference": map[string]any{"message_id": "42", "fail_if_not_exists": false}}, 200, 0},
		{"bad allowed_mentions", map[string]any{"content": "x", "allowed_mentions": map[string]any{"parse": []any{"bots"}}}, 400, codeInvalidForm},
		{"no pings", map[string]any{"content": "x", "allowed_mentions": map[string]any{"parse": []any{}}}, 200, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{}
			s.AddChannel("C1", 0, "G1")
			base := serve(t, s)
			a := rest(t, base, "POST", "channels/C1/messages", tt.body)
			if a.status != tt.status || a.code() != tt.code {
				t.Fatalf("got %d code %d %v, want %d code %d", a.status, a.code(), a.body, tt.status, tt.code)
			}
			v := s.Violations()
			if tt.status == 200 {
				if len(v) > 0 {
					t.Errorf("violations %q for an accepted message", v)
				}
				if ref, ok := a.field("message_reference").(map[string]any); ok {
					t.Errorf("a reply to a missing message kept its reference %v", ref)
				}
				return
			}
			if len(v) != 1 || !strings.Contains(v[0], strconv.Itoa(tt.code)) {
				t.Errorf("violations %q, want one naming %d", v, tt.code)
			}
			if len(s.Messages("C1")) != 0 {
				t.Error("a refused message was kept")
			}
			// The same body refused as an edit, the message unchanged.
			id := postMsg(t, base, "C1", map[string]any{"content": "before"})
			if tt.code == codeInvalidForm && tt.body["message_reference"] == nil {
				e := rest(t, base, "PATCH", "channels/C1/messages/"+id, tt.body)
				if e.status != 400 {
					t.Errorf("edit: %d %v, want 400", e.status, e.body)
				}
				if m := s.Messages("C1")[0]; m.Content != "before" || m.Edits != 0 {
					t.Errorf("a refused edit changed the message: %+v", m)
				}
			}
		})
	}
}

func TestEditsRepliesPinsThreads(t *testing.T) {
	s := &Server{PinLimit: 2}
	s.AddChannel("C1", 0, "G1")
	s.AddChannel("D1", 1, "")
	base := serve(t, s)
	user := s.UserMessage("C1", "111", "hello", false)
	if a := rest(t, base, "PATCH", "channels/C1/messages/"+user, map[string]any{"content": "mine now"}); a.status != 403 || a.code() != codeOtherAuthor {
		t.Errorf("editing a user's message: %d %v, want 403 %d", a.status, a.body, codeOtherAuthor)
	}
	reply := rest(t, base, "POST", "channels/C1/messages", map[string]any{"content": "hi", "message_reference": map[string]any{"message_id": user}})
	if reply.status != 200 || reply.field("type") != 19.0 {
		t.Errorf("reply: %d type %v, want 200 type 19", reply.status, reply.field("type"))
	}
	if a := rest(t, base, "PATCH", "channels/C1/messages/"+reply.field("id").(string), map[string]any{"content": ""}); a.code() != codeEmptyMessage {
		t.Errorf("emptying a message: %v, want %d", a.body, codeEmptyMessage)
	}
	if a := rest(t, base, "POST", "channels/C9/messages", map[string]any{"content": "x"}); a.status != 404 || a.code() != codeUnknownChannel {
		t.Errorf("unknown channel: %d %v", a.status, a.body)
	}

	a, b, c := postMsg(t, base, "C1", map[string]any{"content": "a"}), postMsg(t, base, "C1", map[string]any{"content": "b"}), postMsg(t, base, "C1", map[string]any{"content": "c"})
	pin := func(method, id string) answer { return rest(t, base, method, "channels/C1/messages/pins/"+id, nil) }
	for _, st := range []struct {
		method, id   string
		status, code int
	}{
		{"PUT", a, 204, 0}, {"PUT", a, 204, 0}, {"PUT", b, 204, 0},
		{"PUT", c, 400, codeMaxPins}, {"DELETE", b, 204, 0}, {"PUT", c, 204, 0}, {"PUT", "42", 404, codeUnknownMessage},
	} {
		if got := pin(st.method, st.id); got.status != st.status || got.code() != st.code {
			t.Errorf("%s pin %s: %d %v, want %d code %d", st.method, st.id, got.status, got.body, st.status, st.code)
		}
	}
	notices := 0
	for _, m := range s.Messages("C1") {
		if m.Type == 6 {
			notices++
			if p := pin("PUT", m.ID); p.code() != codeSystemMessage {
				t.Errorf("pinning the pin notice: %v, want %d", p.body, codeSystemMessage)
			}
			break
		}
	}
	if notices == 0 {
		t.Error("no pin notice")
	}

	th := rest(t, base, "POST", "channels/C1/messages/"+user+"/threads", map[string]any{"name": "task", "auto_archive_duration": 1440})
	if th.status != 201 || th.field("id") != user || th.field("type") != 11.0 || th.field("parent_id") != "C1" {
		t.Fatalf("thread: %d %v, want 201 with the message's id", th.status, th.body)
	}
	if again := rest(t, base, "POST", "channels/C1/messages/"+user+"/threads", map[string]any{"name": "again"}); again.code() != codeThreadAlreadyExist {
		t.Errorf("second thread on a message: %v", again.body)
	}
	if bad := rest(t, base, "POST", "channels/C1/messages/"+a+"/threads", map[string]any{"name": "x", "auto_archive_duration": 5}); bad.code() != codeInvalidForm {
		t.Errorf("bad auto_archive_duration: %v", bad.body)
	}
	dm := postMsg(t, base, "D1", map[string]any{"content": "x"})
	if bad := rest(t, base, "POST", "channels/D1/messages/"+dm+"/threads", map[string]any{"name": "x"}); bad.code() != codeWrongChannelType {
		t.Errorf("thread in a DM: %v", bad.body)
	}
}

func TestArchivedThread(t *testing.T) {
	s := &Server{}
	s.AddChannel("T1", 11, "G1")
	base := serve(t, s)
	id := postMsg(t, base, "T1", map[string]any{"content": "plan"})
	s.ArchiveThread("T1")
	for _, r := range []struct{ method, path string }{
		{"PATCH", "channels/T1/messages/" + id},
		{"PUT", "channels/T1/messages/pins/" + id},
		{"DELETE", "channels/T1/messages/pins/" + id},
		{"DELETE", "channels/T1/messages/" + id},
	} {
		if a := rest(t, base, r.method, r.path, map[string]any{"content": "x"}); a.status != 400 || a.code() != codeThreadArchived {
			t.Errorf("%s %s in an archived thread: %d %v, want 400 %d", r.method, r.path, a.status, a.body, codeThreadArchived)
		}
	}
	// Sending a message unarchives it, as on Discord.
	postMsg(t, base, "T1", map[string]any{"content": "back"})
	if a := rest(t, base, "PATCH", "channels/T1/messages/"+id, map[string]any{"content": "edited"}); a.status != 200 {
		t.Errorf("edit after the thread was unarchived: %d %v", a.status, a.body)
	}
	if meta := rest(t, base, "GET", "channels/T1", nil).field("thread_metadata").(map[string]any); meta["archived"] != false {
		t.Errorf("thread_metadata %v", meta)
	}
	s.LockThread("T1")
	if a := rest(t, base, "POST", "channels/T1/messages", map[string]any{"content": "x"}); a.status != 400 || a.code() != codeThreadArchived {
		t.Errorf("posting in a locked thread: %d %v, want 400 %d", a.status, a.body, codeThreadArchived)
	}
}

func TestHistory(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	base := serve(t, s)
	var ids []string // oldest first
	for i := 0; i < 60; i++ {
		if i%2 == 0 {
			ids = append(ids, s.UserMessage("C1", "111", fmt.Sprint("u", i), false))
		} else {
			ids = append(ids, postMsg(t, base, "C1", map[string]any{"content": fmt.Sprint("b", i)}))
		}
	}
	s.UserMessage("C2", "111", "another channel", false)
	newestFirst := func(from, to int) []string { // ids[from:to], reversed
		var out []string
		for i := to - 1; i >= from; i-- {
			out = append(out, ids[i])
		}
		return out
	}
	page := func(query string) ([]string, answer) {
		a := rest(t, base, "GET", "channels/C1/messages"+query, nil)
		list, _ := a.body.([]any)
		var out []string
		for _, m := range list {
			out = append(out, m.(map[string]any)["id"].(string))
		}
		return out, a
	}
	tests := []struct {
		query string
		want  []string
	}{
		{"", newestFirst(10, 60)},
		{"?limit=3", newestFirst(57, 60)},
		{"?limit=100", newestFirst(0, 60)},
		{"?before=" + ids[20] + "&limit=5", newestFirst(15, 20)},
		{"?after=" + ids[20] + "&limit=5", newestFirst(21, 26)},
		{"?after=" + ids[58], newestFirst(59, 60)},
		{"?around=" + ids[30] + "&limit=4", newestFirst(28, 32)},
	}
	for _, tt := range tests {
		got, a := page(tt.query)
		if a.status != 200 || strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("GET messages%s: %d %v, want %v", tt.query, a.status, got, tt.want)
		}
	}
	for _, q := range []string{"?limit=0", "?limit=101", "?limit=x", "?before=" + ids[5] + "&after=" + ids[1]} {
		if _, a := page(q); a.status != 400 || a.code() != codeInvalidForm {
			t.Errorf("GET messages%s: %d %v, want 400 %d", q, a.status, a.body, codeInvalidForm)
		}
	}
	if a := rest(t, base, "GET", "channels/C404/messages", nil); a.status != 404 || a.code() != codeUnknownChannel {
		t.Errorf("unknown channel: %d %v", a.status, a.body)
	}
	one := rest(t, base, "GET", "channels/C1/messages/"+ids[0], nil)
	if one.field("content") != "u0" || one.field("author").(map[string]any)["id"] != "111" {
		t.Errorf("GET message: %v", one.body)
	}
}

func TestGuildMemberAndRoles(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	base := serve(t, s)
	m := rest(t, base, "GET", "guilds/G1/members/"+BotID, nil)
	if roles, _ := m.field("roles").([]any); m.status != 200 || len(roles) != 1 || roles[0] != ManagedRoleID {
		t.Errorf("the bot's member: %d %v", m.status, m.body)
	}
	r := rest(t, base, "GET", "guilds/G1/roles", nil)
	found := false
	for _, x := range r.body.([]any) {
		role := x.(map[string]any)
		if role["id"] == ManagedRoleID && role["managed"] == true && role["tags"].(map[string]any)["bot_id"] == BotID {
			found = true
		}
	}
	if !found {
		t.Errorf("no managed role for the bot in %v", r.body)
	}
	if a := rest(t, base, "GET", "guilds/G9/members/"+BotID, nil); a.code() != codeUnknownGuild {
		t.Errorf("unknown guild: %v", a.body)
	}
	if a := rest(t, base, "GET", "guilds/G1/members/5", nil); a.code() != codeUnknownMember {
		t.Errorf("unknown member: %v", a.body)
	}
}

// TestEnforceNonce: a create with a nonce and enforce_nonce returns the
// message the same author created with that nonce, and creates none;
// without enforce_nonce, or with another nonce, a message is created; a
// nonce over 25 characters is refused.
func TestEnforceNonce(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	base := serve(t, s)
	first := rest(t, base, "POST", "channels/C1/messages", map[string]any{"content": "x", "nonce": "n1", "enforce_nonce": true})
	again := rest(t, base, "POST", "channels/C1/messages", map[string]any{"content": "x", "nonce": "n1", "enforce_nonce": true})
	if first.status != 200 || again.status != 200 || first.field("id") != again.field("id") || again.field("nonce") != "n1" {
		t.Errorf("enforced nonce: %d %v then %d %v; want the same message", first.status, first.body, again.status, again.body)
	}
	rest(t, base, "POST", "channels/C1/messages", map[string]any{"content": "x", "nonce": "n1"}) // not enforced
	rest(t, base, "POST", "channels/C1/messages", map[string]any{"content": "x", "nonce": "n2", "enforce_nonce": true})
	if n := len(s.Messages("C1")); n != 3 {
		t.Errorf("%d messages, want 3", n)
	}
	if long := rest(t, base, "POST", "channels/C1/messages", map[string]any{"content": "x", "nonce": strings.Repeat("n", 26)}); long.status != 400 {
		t.Errorf("a 26-character nonce: %d, want 400", long.status)
	}
}

// TestAttachmentURLsAreSigned: an attachment is served at the URL its
// message carries, and an unsigned or tampered URL is 404, as on
// Discord's CDN.
func TestAttachmentURLsAreSigned(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	srv := httptest.NewServer(s)
	defer srv.Close()
	s.BaseURL = srv.URL
	id := s.UserMessageWithFiles("C1", "U1", "see file", true, Attachment{Filename: "a.txt", ContentType: "text/plain", Content: []byte("hello")})
	var u string
	s.mu.Lock()
	u = s.messages[id].attachments[0]["url"].(string)
	s.mu.Unlock()
	get := func(u string) (int, string) {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := get(u); status != 200 || body != "hello" {
		t.Errorf("signed URL: %d %q", status, body)
	}
	unsigned, _, _ := strings.Cut(u, "?")
	if status, _ := get(unsigned); status != 404 {
		t.Errorf("unsigned URL: %d, want 404", status)
	}
	if status, _ := get(strings.Replace(u, "hm=", "hm=0", 1)); status != 404 {
		t.Errorf("tampered URL: %d, want 404", status)
	}
}
