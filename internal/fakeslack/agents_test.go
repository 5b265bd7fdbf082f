package fakeslack

import (
	"slices"
	"strings"
	"testing"
)

// root stores a user's message in channel, as a thread's root.
func root(s *Server, channel, ts string) {
	s.CallbackBody("Ev"+ts, map[string]any{"type": "message", "user": "U1", "channel": channel, "ts": ts, "text": "task"})
}

func TestSessionStatusStrict(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	root(s, "C1", "1.1")
	ok := map[string]string{"status": "processing", "channel_id": "C1", "thread_ts": "1.1", "title": "plan it"}
	with := func(k, v string) map[string]string {
		p := map[string]string{}
		for key, val := range ok {
			p[key] = val
		}
		if v == "" {
			delete(p, k)
		} else {
			p[k] = v
		}
		return p
	}
	tests := []struct {
		name   string
		token  string
		params map[string]string
		want   string
	}{
		{"unknown status", "xoxb-1", with("status", "is thinking…"), "invalid_arguments"},
		{"empty status", "xoxb-1", with("status", ""), "invalid_arguments"},
		{"no channel_id", "xoxb-1", with("channel_id", ""), "invalid_arguments"},
		{"no thread_ts", "xoxb-1", with("thread_ts", ""), "invalid_arguments"},
		{"title over 200", "xoxb-1", with("title", strings.Repeat("t", 201)), "invalid_arguments"},
		{"unknown thread", "xoxb-1", with("thread_ts", "9.9"), "thread_not_found"},
		{"user token", "xoxp-1", ok, "not_allowed_token_type"},
		{"app token", "xapp-1", ok, "not_allowed_token_type"},
		{"no token", "", ok, "not_authed"},
		{"bot token", "xoxb-1", ok, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _ := call(t, base, tt.token, "agents.sessions.setStatus", tt.params)
			code, _ := out["error"].(string)
			if code != tt.want {
				t.Errorf("got %q, want %q (%v)", code, tt.want, out)
			}
		})
	}
	if got := s.SessionStatuses("C1", "1.1"); !slices.Equal(got, []string{"processing"}) {
		t.Errorf("statuses %q, want only the accepted move", got)
	}
	if v := s.Violations(); len(v) != 5 {
		t.Errorf("violations %q, want the five malformed calls", v)
	}
	// The title is the creating call's.
	bot(t, base, "agents.sessions.setStatus", with("title", "another"))
	if got := s.SessionTitle("C1", "1.1"); got != "plan it" {
		t.Errorf("title %q, want the first call's", got)
	}
	s.AgentSessionsError = "not_allowed_token_type"
	if _, code := bot(t, base, "agents.sessions.setStatus", ok); code != "not_allowed_token_type" {
		t.Errorf("with AgentSessionsError: %q", code)
	}
}

func TestStopAndRenameSession(t *testing.T) {
	s := &Server{}
	base := serve(t, s)
	root(s, "C1", "1.1")
	if ev := s.StopSession("U2", "C1", "1.1"); ev != nil {
		t.Errorf("a thread without a session has a Stop button: %v", ev)
	}
	bot(t, base, "agents.sessions.setStatus", map[string]string{"status": "processing", "channel_id": "C1", "thread_ts": "1.1", "title": "old"})
	out, _ := bot(t, base, "chat.startStream", map[string]string{"channel": "C1", "thread_ts": "1.1", "markdown_text": "half", "recipient_user_id": "U1", "recipient_team_id": "T1"})
	ts, _ := out["ts"].(string)
	ev := s.StopSession("U2", "C1", "1.1")
	if ev["type"] != "agent_session_stopped" || ev["user"] != "U2" || ev["thread_ts"] != "1.1" || !slices.Equal(ev["streaming_message_ts"].([]string), []string{ts}) {
		t.Errorf("event %v, want U2's stop listing the stream %s", ev, ts)
	}
	if _, code := bot(t, base, "chat.appendStream", map[string]string{"channel": "C1", "ts": ts, "markdown_text": "more"}); code != "message_not_in_streaming_state" {
		t.Errorf("append to a stream Slack stopped: %q", code)
	}
	if got := s.SessionStatuses("C1", "1.1"); !slices.Equal(got, []string{"processing"}) {
		t.Errorf("statuses %q: Slack does not move the status on Stop", got)
	}
	if _, code := bot(t, base, "chat.postEphemeral", map[string]string{"channel": "C1", "user": "U2", "text": "no"}); code != "" {
		t.Errorf("ephemeral to the presser: %q", code)
	}
	bot(t, base, "agents.sessions.setStatus", map[string]string{"status": "active", "channel_id": "C1", "thread_ts": "1.1"})
	if ev := s.StopSession("U2", "C1", "1.1"); ev != nil {
		t.Errorf("an active session has a Stop button: %v", ev)
	}
	ev = s.RenameSession("U1", "C1", "1.1", "new")
	if ev["type"] != "agent_session_title_changed" || ev["title"] != "new" || ev["previous_title"] != "old" || ev["team_id"] != "T1" {
		t.Errorf("event %v", ev)
	}
	if s.SessionTitle("C1", "1.1") != "new" {
		t.Error("title not kept")
	}
	if s.RenameSession("U1", "C1", "9.9", "x") != nil {
		t.Error("a thread without a session renamed")
	}
}

func TestStreamsStrict(t *testing.T) {
	s := &Server{}
	s.SetUserTeam("U5", "T2") // a Slack Connect user
	base := serve(t, s)
	to := map[string]string{"recipient_user_id": "U1", "recipient_team_id": "T1"}
	start := func(p map[string]string) (string, string) {
		t.Helper()
		out, code := bot(t, base, "chat.startStream", p)
		ts, _ := out["ts"].(string)
		return ts, code
	}
	params := func(kv ...string) map[string]string {
		p := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			p[kv[i]] = kv[i+1]
		}
		return p
	}
	tests := []struct {
		name   string
		params map[string]string
		want   string
	}{
		{"channel without recipient", params("channel", "C1", "markdown_text", "a"), "missing_recipient_user_id"},
		{"channel without team", params("channel", "C1", "markdown_text", "a", "recipient_user_id", "U1"), "missing_recipient_team_id"},
		{"no channel", params("markdown_text", "a"), "channel_not_found"},
		{"text and chunks", params("channel", "D1", "markdown_text", "a", "chunks", `[{"type":"markdown_text","text":"b"}]`), "invalid_arguments"},
		{"bad chunks", params("channel", "D1", "chunks", `[{"type":"sparkles"}]`), "invalid_chunks"},
		{"too long", params("channel", "D1", "markdown_text", strings.Repeat("a", 12001)), "msg_too_long"},
		{"DM without recipient", params("channel", "D1", "markdown_text", "a"), ""},
		{"chunks", params("channel", "D1", "chunks", `[{"type":"markdown_text","text":"b"}]`), ""},
		{"channel", params("channel", "C1", "markdown_text", "a", "recipient_user_id", "U1", "recipient_team_id", "T1"), ""},
		{"another workspace's user", params("channel", "C1", "markdown_text", "a", "recipient_user_id", "U5", "recipient_team_id", "T2"), ""},
		{"the workspace for another's user", params("channel", "C1", "markdown_text", "a", "recipient_user_id", "U5", "recipient_team_id", "T1"), "team_not_found"},
		{"another team for a local user", params("channel", "C1", "markdown_text", "a", "recipient_user_id", "U1", "recipient_team_id", "T2"), "team_not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, code := start(tt.params); code != tt.want {
				t.Errorf("got %q, want %q", code, tt.want)
			}
		})
	}

	p := params("channel", "C1", "thread_ts", "1.1", "markdown_text", "Hello")
	for k, v := range to {
		p[k] = v
	}
	ts, _ := start(p)
	if _, code := bot(t, base, "chat.appendStream", params("channel", "C1", "ts", ts)); code != "invalid_arguments" {
		t.Errorf("append without text: %q", code)
	}
	bot(t, base, "chat.appendStream", params("channel", "C1", "ts", ts, "markdown_text", "  world")) // leading whitespace dropped
	bot(t, base, "chat.stopStream", params("channel", "C1", "ts", ts, "markdown_text", "!"))
	for _, m := range []string{"chat.appendStream", "chat.stopStream"} {
		if _, code := bot(t, base, m, params("channel", "C1", "ts", ts, "markdown_text", "late")); code != "message_not_in_streaming_state" {
			t.Errorf("%s on a stopped stream: %q", m, code)
		}
		if _, code := bot(t, base, m, params("channel", "C1", "ts", "9.9", "markdown_text", "x")); code != "message_not_found" {
			t.Errorf("%s on no message: %q", m, code)
		}
	}
	plain := post(t, base, "C1", "not a stream")
	if _, code := bot(t, base, "chat.appendStream", params("channel", "C1", "ts", plain, "markdown_text", "x")); code != "message_not_in_streaming_state" {
		t.Errorf("append to a posted message: %q", code)
	}
	var got *Message
	for _, m := range s.Streams("C1") {
		if m.TS == ts {
			got = &m
		}
	}
	if got == nil || got.Text != "Helloworld!" || got.Streaming || got.ThreadTS != "1.1" || got.StreamUser != "U1" || got.StreamTeam != "T1" {
		t.Errorf("stream %+v, want its final text and recipient", got)
	}
	if v := s.Violations(); len(v) != 8 {
		t.Errorf("violations %q, want the eight malformed calls (a missing channel is not found, as for chat.postMessage)", v)
	}
}

func TestStreamExpiresOnNthAppend(t *testing.T) {
	s := &Server{ExpireStreamOnAppend: 2}
	base := serve(t, s)
	out, _ := bot(t, base, "chat.startStream", map[string]string{"channel": "D1", "markdown_text": "one "})
	ts := out["ts"].(string)
	if _, code := bot(t, base, "chat.appendStream", map[string]string{"channel": "D1", "ts": ts, "markdown_text": "two "}); code != "" {
		t.Fatalf("first append: %q", code)
	}
	if _, code := bot(t, base, "chat.appendStream", map[string]string{"channel": "D1", "ts": ts, "markdown_text": "three"}); code != "message_not_in_streaming_state" {
		t.Fatalf("second append: %q, want the stream expired", code)
	}
	if _, code := bot(t, base, "chat.stopStream", map[string]string{"channel": "D1", "ts": ts}); code != "message_not_in_streaming_state" {
		t.Errorf("stop after expiry: %q", code)
	}
	if m := s.Streams("D1"); len(m) != 1 || m[0].Text != "one two " || m[0].Appends != 2 {
		t.Errorf("streams %+v, want what landed before the expiry", m)
	}
	if v := s.Violations(); len(v) != 0 {
		t.Errorf("an expiry is no violation: %q", v)
	}
}
