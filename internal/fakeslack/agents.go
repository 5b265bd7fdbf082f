package fakeslack

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Agent sessions and streamed messages, as docs.slack.dev describes
// agents.sessions.setStatus, agent_session_stopped,
// agent_session_title_changed and chat.startStream, chat.appendStream and
// chat.stopStream.

// agentSession is a thread's agent session.
type agentSession struct {
	title, initiator string
	statuses         []string // every status set, oldest first; the last is the session's
}

// sessionStatuses are the statuses agents.sessions.setStatus takes.
var sessionStatuses = map[string]bool{"active": true, "processing": true, "suspended": true, "closed": true}

const (
	maxSessionTitle = 200   // agents.sessions.setStatus and rename
	maxMarkdownText = 12000 // markdown_text of one stream call
)

// setSessionStatusLocked answers agents.sessions.setStatus: a bot token
// (authCode), one of the four statuses, the session's channel_id and
// thread_ts (the thread's root message, which must exist), a title of at
// most 200 characters (kept only when the call creates the session).
// The fake asks for channel_id everywhere, where Slack asks for it in
// public channels: pinplan always knows it. Any status may follow any
// other, closed back to processing included: Slack's docs (the method's
// reference and the agent sessions guide) name the four statuses and
// what each shows, but no order between them.
func (s *Server) setSessionStatusLocked(method string, p map[string]string) (map[string]any, string) {
	if s.AgentSessionsError != "" {
		return nil, s.AgentSessionsError
	}
	status := p["status"]
	switch {
	case !sessionStatuses[status]:
		return s.violationLocked(method, "invalid_arguments", fmt.Sprintf("status %q must be a valid enum value [json-pointer:/status]", status))
	case p["channel_id"] == "":
		return s.violationLocked(method, "invalid_arguments", "channel_id is required")
	case p["thread_ts"] == "":
		return s.violationLocked(method, "invalid_arguments", "thread_ts is required for a session in a thread")
	case utf8.RuneCountInString(p["title"]) > maxSessionTitle:
		return s.violationLocked(method, "invalid_arguments", fmt.Sprintf("title of %d characters, limit %d", utf8.RuneCountInString(p["title"]), maxSessionTitle))
	}
	key := p["channel_id"] + "/" + p["thread_ts"]
	if _, ok := s.messages[key]; !ok {
		return nil, "thread_not_found"
	}
	sess := s.sessions[key]
	if sess == nil {
		sess = &agentSession{title: p["title"], initiator: p["initiator_user_id"]}
		s.sessions[key] = sess
	}
	sess.statuses = append(sess.statuses, status)
	return map[string]any{"status": status, "agent_status": status, "title": sess.title}, ""
}

// SessionStatuses returns every status agents.sessions.setStatus set for
// the session of the thread, oldest first; nil when it has none.
func (s *Server) SessionStatuses(channel, threadTS string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	if sess := s.sessions[channel+"/"+threadTS]; sess != nil {
		return append([]string(nil), sess.statuses...)
	}
	return nil
}

// SessionTitle returns the title of the thread's session; "" with none.
func (s *Server) SessionTitle(channel, threadTS string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	if sess := s.sessions[channel+"/"+threadTS]; sess != nil {
		return sess.title
	}
	return ""
}

// StopSession returns the agent_session_stopped event Slack sends when
// user presses the Stop button of the thread's session, and stops the
// bot's messages still streaming in the thread, as Slack does (they are
// listed in streaming_message_ts). Slack leaves the session's status as
// it was. It returns nil when the session is not processing: Slack shows
// no Stop button then. The user counts as a member of channel from then
// on.
func (s *Server) StopSession(user, channel, threadTS string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	sess := s.sessions[channel+"/"+threadTS]
	if sess == nil || sess.statuses[len(sess.statuses)-1] != "processing" {
		return nil
	}
	s.memberLocked(channel, user)
	stopped := []string{}
	for _, k := range s.order {
		if m, ok := s.messages[k]; ok && m.Channel == channel && m.Streaming && (m.ThreadTS == threadTS || m.TS == threadTS) {
			m.Streaming = false
			stopped = append(stopped, m.TS)
		}
	}
	return map[string]any{"type": "agent_session_stopped", "channel": channel, "thread_ts": threadTS, "user": user,
		"streaming_message_ts": stopped, "event_ts": s.tsLocked()}
}

// RenameSession returns the agent_session_title_changed event Slack sends
// when user gives the thread's session a new title, and keeps the title;
// nil when the thread has no session.
func (s *Server) RenameSession(user, channel, threadTS, title string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	sess := s.sessions[channel+"/"+threadTS]
	if sess == nil {
		return nil
	}
	ev := map[string]any{"type": "agent_session_title_changed", "channel": channel, "thread_ts": threadTS, "user": user,
		"team_id": s.channelTeamLocked(channel), "title": title, "event_ts": s.tsLocked()}
	if sess.title != "" {
		ev["previous_title"] = sess.title
	}
	sess.title = title
	return ev
}

// Streams returns the messages in channel posted with chat.startStream,
// oldest first, each with the text its chunks added up to.
func (s *Server) Streams(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, k := range s.order {
		if m, ok := s.messages[k]; ok && m.Channel == channel && m.Streamed {
			out = append(out, *m)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return tsMicros(out[i].TS) < tsMicros(out[j].TS) })
	return out
}

// streamText reads the text a stream call adds: markdown_text, or the
// markdown_text chunks of chunks, not both; at most 12,000 characters.
// required: the call must add some (chat.appendStream).
func streamText(p map[string]string, required bool) (text, code, detail string) {
	md, hasText := p["markdown_text"]
	raw, hasChunks := p["chunks"]
	switch {
	case hasText && hasChunks:
		return "", "invalid_arguments", "markdown_text and chunks together"
	case hasChunks:
		var chunks []map[string]any
		if err := json.Unmarshal([]byte(raw), &chunks); err != nil {
			return "", "invalid_chunks", "chunks is not a JSON array of objects: " + err.Error()
		}
		var b strings.Builder
		for i, c := range chunks {
			switch c["type"] {
			case "markdown_text":
				t, ok := c["text"].(string)
				if !ok {
					return "", "invalid_chunks", fmt.Sprintf("chunk %d: markdown_text without text", i)
				}
				b.WriteString(t)
			case "task_update", "plan_update", "blocks":
			default:
				return "", "invalid_chunks", fmt.Sprintf("chunk %d: unknown chunk type %v", i, c["type"])
			}
		}
		md = b.String()
	case required && md == "":
		return "", "invalid_arguments", "markdown_text is required"
	}
	if n := utf8.RuneCountInString(md); n > maxMarkdownText {
		return "", "msg_too_long", fmt.Sprintf("markdown_text is %d characters, limit %d", n, maxMarkdownText)
	}
	return md, "", ""
}

// startStreamLocked answers chat.startStream: a new message of the bot's
// that takes appends. Outside a DM it needs its recipient, both
// recipient_user_id and recipient_team_id, the team the user belongs to
// (Slack's docs: "the team the user receiving the streaming text belongs
// to"; for a Slack Connect user, not the workspace's): team_not_found
// otherwise.
func (s *Server) startStreamLocked(method string, p map[string]string) (map[string]any, string) {
	channel := p["channel"]
	if channel == "" {
		return nil, "channel_not_found"
	}
	text, code, detail := streamText(p, false)
	if code != "" {
		return s.violationLocked(method, code, detail)
	}
	if !strings.HasPrefix(channel, "D") {
		if p["recipient_user_id"] == "" {
			return s.violationLocked(method, "missing_recipient_user_id", "a stream outside a DM needs recipient_user_id")
		}
		if p["recipient_team_id"] == "" {
			return s.violationLocked(method, "missing_recipient_team_id", "a stream outside a DM needs recipient_team_id")
		}
		if want := s.teamOfLocked(p["recipient_user_id"]); p["recipient_team_id"] != want {
			return s.violationLocked(method, "team_not_found", fmt.Sprintf("recipient_team_id %s is not the team of %s (%s)", p["recipient_team_id"], p["recipient_user_id"], want))
		}
	}
	m := &Message{Channel: channel, TS: s.tsLocked(), ThreadTS: p["thread_ts"], Text: text, User: s.caller, BotID: "B1",
		Streamed: true, Streaming: true, StreamUser: p["recipient_user_id"], StreamTeam: p["recipient_team_id"]}
	s.messages[m.Channel+"/"+m.TS] = m
	s.order = append(s.order, m.Channel+"/"+m.TS)
	return map[string]any{"channel": m.Channel, "ts": m.TS}, ""
}

// streamingLocked returns the streaming message a chat.appendStream or
// chat.stopStream call names.
func (s *Server) streamingLocked(p map[string]string) (*Message, string) {
	if p["channel"] == "" {
		return nil, "channel_not_found"
	}
	m, ok := s.messages[p["channel"]+"/"+p["ts"]]
	switch {
	case !ok:
		return nil, "message_not_found"
	case !m.Streamed || !m.Streaming || m.User != s.caller:
		return nil, "message_not_in_streaming_state"
	}
	return m, ""
}

// appendStreamLocked answers chat.appendStream: the text is added to the
// message, without its leading whitespace (Slack has been seen to drop it
// where chunks join). With ExpireStreamOnAppend the Nth call ends the
// stream instead.
func (s *Server) appendStreamLocked(method string, p map[string]string) (map[string]any, string) {
	m, code := s.streamingLocked(p)
	if code != "" {
		return nil, code
	}
	text, code, detail := streamText(p, true)
	if code != "" {
		return s.violationLocked(method, code, detail)
	}
	m.Appends++
	if n := s.ExpireStreamOnAppend; n > 0 && m.Appends >= n {
		m.Streaming = false
		return nil, "message_not_in_streaming_state"
	}
	m.Text += strings.TrimLeftFunc(text, unicode.IsSpace)
	return map[string]any{"channel": m.Channel, "ts": m.TS}, ""
}

// stopStreamLocked answers chat.stopStream: the message takes no more;
// markdown_text, if any, is added first.
func (s *Server) stopStreamLocked(method string, p map[string]string) (map[string]any, string) {
	m, code := s.streamingLocked(p)
	if code != "" {
		return nil, code
	}
	text, code, detail := streamText(p, false)
	if code != "" {
		return s.violationLocked(method, code, detail)
	}
	m.Text += strings.TrimLeftFunc(text, unicode.IsSpace)
	m.Streaming = false
	return map[string]any{"channel": m.Channel, "ts": m.TS, "message": s.messageJSONLocked(m)}, ""
}
