package slack

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/pinplan/pinplan/chat"
)

// Live replies (chat.LiveReplier, with Options.Stream): the answer is
// streamed into the thread as the model writes it. The router hands the
// model's text over in whole words (AppendLive), one request a call in
// the pace it keeps (a slot of the workspace's chat.appendStream budget,
// pace.go), and ends the reply on its whole text (FinishLive); the
// adapter keeps, per reply, the text it was given, the Markdown that
// makes it safe (markdownText), how much of that Slack took, and the
// message being written. A call that starts a message returns its ts at
// once, so that the router notes the message before text goes on in it.
//
// The Markdown of a growing text is the Markdown of its start plus what
// follows, except at the end of an unfinished line: a code span whose
// closing backtick has not come yet would change how a "<" after its
// opening one is escaped. So the text from the line's last unmatched
// backtick on waits for the rest of the line (or the end of the reply).
//
// A message is written up to maxReplyRunes of Markdown, then stopped,
// and the reply goes on in a new streamed message, as it does when Slack
// ends a stream (message_not_in_streaming_state); a code block cut there
// is opened again. Where Slack will not stream (the token or app may not,
// the thread refuses it, no recipient is known in a channel) nothing more
// is streamed, and the rest of the reply is posted whole when it ends.

// person is a Slack user and the team they belong to (for a Slack
// Connect user in a shared channel, their own workspace's, not this
// one's): a streamed reply's recipient_user_id and recipient_team_id.
type person struct{ user, team string }

// Bounds of what the adapter remembers for live replies.
const (
	// maxPeople bounds the authors (messages, all sessions) and the
	// askers (sessions) remembered, maxAuthorsPerSession the messages of
	// one session.
	maxPeople            = 10000
	maxAuthorsPerSession = 200
	// maxPartAge drops the progress of a live reply the router gave up
	// on (it keeps an answer for 24 hours).
	maxPartAge = 25 * time.Hour
)

// noteAuthor remembers who wrote a message handed to the router: the
// recipient of the replies to it and of the session's later replies.
func (a *Adapter) noteAuthor(key, ts string, p person) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.nAuthors >= maxPeople {
		clear(a.authors)
		a.nAuthors = 0
	}
	if len(a.askers) >= maxPeople {
		clear(a.askers)
	}
	byTS := a.authors[key]
	if byTS == nil || len(byTS) >= maxAuthorsPerSession {
		a.nAuthors -= len(byTS)
		byTS = map[string]person{}
		a.authors[key] = byTS
	}
	if _, ok := byTS[ts]; !ok {
		a.nAuthors++
	}
	byTS[ts] = p
	a.askers[key] = p
}

// Forget implements chat.Forgetter: who wrote a session's messages goes
// with the session. A streamed reply after that is for the author of the
// thread's first message, read again (recipient).
func (a *Adapter) Forget(th chat.Thread) {
	if th.Platform != "slack" {
		return
	}
	a.on(th).budgets.forget(th.Channel)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nAuthors -= len(a.authors[th.Key])
	delete(a.authors, th.Key)
	delete(a.askers, th.Key)
}

func isDM(channel string) bool { return strings.HasPrefix(channel, "D") }

// recipient is the person a streamed reply is for: the author of the
// message it answers, else of the session's newest message, else (after a
// restart, in a channel) of the thread's first message, read once with
// conversations.replies.
func (a *Adapter) recipient(ctx context.Context, th chat.Thread, replyTo string) (person, bool) {
	a.mu.Lock()
	p, ok := a.authors[th.Key][replyTo]
	if !ok {
		p, ok = a.askers[th.Key]
	}
	a.mu.Unlock()
	if ok || isDM(th.Channel) || th.ThreadID == "" {
		return p, ok
	}
	w, team := a.on(th), teamOf(th.Key)
	bot := w.bot()
	msgs, _, _, err := w.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: th.Channel, Timestamp: th.ThreadID, Limit: 1})
	if err != nil || len(msgs) == 0 || msgs[0].User == "" || msgs[0].User == bot || msgs[0].BotID != "" {
		a.log.Info("slack: no recipient for a streamed reply", "session", th.Key, "err", err)
		return person{}, false
	}
	p = person{user: msgs[0].User, team: cmp.Or(msgs[0].Team, team)} // a Slack Connect user's own team
	a.mu.Lock()
	if _, ok := a.askers[th.Key]; !ok {
		a.askers[th.Key] = p
	}
	a.mu.Unlock()
	return p, true
}

// streamEnded reports whether an append or a stop met a message that
// takes no more: Slack ended the stream (its few minutes were up, or
// someone pressed Stop), or the message was deleted.
func streamEnded(code string) bool {
	switch code {
	case "message_not_in_streaming_state", "stopped_by_user", "message_not_found":
		return true
	}
	return false
}

// streamRefused reports whether a chat.startStream or chat.appendStream
// error means this thread cannot take a stream (the part is posted whole
// instead): among them a recipient Slack cannot stream to, such as a
// Slack Connect user named with the wrong team (team_not_found) or one
// it cannot find (user_not_found).
func streamRefused(code string) bool {
	switch code {
	case "channel_type_not_supported", "missing_recipient_user_id", "missing_recipient_team_id", "team_not_found", "user_not_found",
		"invalid_arguments", "invalid_chunks":
		return true
	}
	return false
}

// permanent reports whether err, as classify made it, is one no retry
// can help.
func permanent(err error) bool {
	o, _ := chat.Classify(err)
	return err != nil && o != chat.Retry && o != chat.RetryAfter
}

// turnOff turns off a feature Slack refused to this token or app (*off,
// guarded by a.mu) and says so in the log the first time, with err.
func (a *Adapter) turnOff(w *workspace, off *bool, msg string, err error) {
	if w.turnOff(off) {
		a.log.Warn(msg, "team", w.team, "err", err)
	}
}

// startStream opens a message of th as a stream that starts with text,
// for recipient to if known, and returns its ts. whole: Slack streams
// nothing here (not for this app, or not in this place), and the rest
// is posted whole. A reply's part (streamReply) and a live reply
// (startLive) start their messages here.
func (a *Adapter) startStream(ctx context.Context, th chat.Thread, text string, to person, known bool) (ts string, whole bool, err error) {
	opts := []slack.MsgOption{slack.MsgOptionTS(th.ThreadID), slack.MsgOptionMarkdownText(text)}
	if known {
		opts = append(opts, slack.MsgOptionRecipientUserID(to.user), slack.MsgOptionRecipientTeamID(to.team))
	}
	_, ts, err = a.on(th).api.StartStreamContext(ctx, th.Channel, opts...)
	if err != nil {
		switch code := slackCode(err); {
		case appDenied(code):
			w := a.on(th)
			a.turnOff(w, &w.noStreams, "slack streaming is not available to this token or app; replies are posted whole", err)
			return "", true, nil
		case streamRefused(code):
			a.log.Warn("slack refused a stream here; posting the reply whole", "session", th.Key, "err", err)
			return "", true, nil
		}
		return "", false, classify("start stream", err)
	}
	return ts, false, nil
}

// postMarkdown posts Markdown (made safe by markdownText) whole, in a
// markdown block, where it cannot be streamed.
func (a *Adapter) postMarkdown(ctx context.Context, th chat.Thread, md string) error {
	for _, part := range splitMarkdown(md, maxMarkdownRunes) {
		block := slack.NewMarkdownBlock("", part)
		if _, _, err := a.on(th).api.PostMessageContext(ctx, th.Channel, slack.MsgOptionTS(th.ThreadID),
			slack.MsgOptionText(part, false), slack.MsgOptionBlocks(block)); err != nil {
			return classify("reply", err)
		}
	}
	return nil
}

var _ chat.LiveReplier = (*Adapter)(nil)

// liveReply is one live reply's progress. Only its session's deliveries
// touch it, one at a time.
type liveReply struct {
	key     string // the session's
	raw     string // the model's text given so far
	shown   int    // bytes of raw that md is made of
	md      string // markdownText(raw[:shown]): what the thread is to show
	sent    int    // bytes of md Slack took
	msgFrom int    // where in md the message being written starts
	ts      string // the message being written; "" for none now
	whole   bool   // Slack will not stream it: the rest is posted at the end
	used    time.Time
}

// Live implements chat.LiveReplier: answers stream when Options.Stream
// is set.
func (a *Adapter) Live() bool { return a.opts.Stream }

// liveOf returns reply id of th's progress, new if it has none.
func (a *Adapter) liveOf(th chat.Thread, id string) *liveReply {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if l, ok := a.lives[id]; ok {
		l.used = now
		return l
	}
	for k, l := range a.lives {
		if now.Sub(l.used) > maxPartAge {
			delete(a.lives, k)
		}
	}
	l := &liveReply{key: th.Key, used: now}
	a.lives[id] = l
	return l
}

func (a *Adapter) liveDone(id string) {
	a.mu.Lock()
	delete(a.lives, id)
	a.mu.Unlock()
}

// AppendLive implements chat.LiveReplier.
func (a *Adapter) AppendLive(ctx context.Context, th chat.Thread, replyTo, id, text string) (chat.MessageRef, error) {
	l := a.liveOf(th, id)
	l.raw += text
	l.grow(stableEnd(l.raw))
	err := a.pushLive(ctx, th, replyTo, l, false)
	return chat.MessageRef{Channel: th.Channel, ID: l.ts}, err
}

// FinishLive implements chat.LiveReplier.
func (a *Adapter) FinishLive(ctx context.Context, th chat.Thread, replyTo, id, text, note string) (chat.MessageRef, error) {
	if id == "" {
		// A reply not streamed in this process: its progress is named by
		// its text, so that a retry goes on where the last call stopped.
		h := sha256.Sum256([]byte(text))
		id = "\x00" + th.Key + "\x00" + hex.EncodeToString(h[:16])
	}
	a.mu.Lock()
	l := a.lives[id]
	a.mu.Unlock()
	if l != nil && (text == "" || !strings.HasPrefix(text, l.raw)) {
		// Not the answer: what it shows ends with the note.
		if err := a.endLive(ctx, th, l, note); err != nil {
			return chat.MessageRef{}, err
		}
		if text == "" {
			a.liveDone(id)
			return chat.MessageRef{}, nil
		}
		// The text follows in a message of its own; a retry of this call
		// goes on with it.
		l = &liveReply{key: th.Key, used: time.Now()}
		a.mu.Lock()
		a.lives[id] = l
		a.mu.Unlock()
	}
	if text == "" {
		return chat.MessageRef{}, nil
	}
	if l == nil {
		l = a.liveOf(th, id)
	}
	l.raw = text
	l.grow(len(text))
	if err := a.stopWithRest(ctx, th, l); err != nil {
		return chat.MessageRef{}, err
	}
	if err := a.pushLive(ctx, th, replyTo, l, true); err != nil {
		if errors.Is(err, chat.ErrLiveMore) {
			return chat.MessageRef{Channel: th.Channel, ID: l.ts}, err // a message started: noted before it goes on
		}
		if permanent(err) {
			a.liveDone(id)
		}
		return chat.MessageRef{}, err
	}
	if l.whole {
		if err := a.postLiveRest(ctx, th, l); err != nil {
			if permanent(err) {
				a.liveDone(id)
			}
			return chat.MessageRef{}, err
		}
	} else if err := a.stopLive(ctx, th, l); err != nil {
		return chat.MessageRef{}, err
	}
	a.liveDone(id)
	return chat.MessageRef{}, nil
}

// CloseLive implements chat.LiveReplier: the message a stopped process
// was streaming ends with the note. A message Slack ended already (its
// few minutes were up) or that is gone needs nothing more.
func (a *Adapter) CloseLive(ctx context.Context, th chat.Thread, ref chat.MessageRef, note string) error {
	if ref.ID == "" {
		return nil
	}
	channel := ref.Channel
	if channel == "" {
		channel = th.Channel
	}
	if err := a.waitAppend(ctx, th); err != nil {
		return fmt.Errorf("slack: close stream: %w", err)
	}
	_, _, err := a.on(th).api.AppendStreamContext(ctx, channel, ref.ID, slack.MsgOptionMarkdownText(noteText(note, false)))
	if code := slackCode(err); err != nil {
		if streamEnded(code) {
			return nil
		}
		return classify("close stream "+ref.ID, err)
	}
	if _, _, err := a.on(th).api.StopStreamContext(ctx, channel, ref.ID); err != nil && !streamEnded(slackCode(err)) {
		return classify("stop stream "+ref.ID, err)
	}
	return nil
}

// stopWithRest ends the message being written with the rest of the
// reply, in the chat.stopStream call, when the rest fits in it: the
// reply's last words do not wait for the workspace's append pace. Where
// it does not fit, or Slack ended the stream, pushLive goes on.
func (a *Adapter) stopWithRest(ctx context.Context, th chat.Thread, l *liveReply) error {
	if l.ts == "" || l.whole || l.sent >= len(l.md) || utf8.RuneCountInString(l.md[l.msgFrom:]) > maxReplyRunes {
		return nil
	}
	rest := l.md[l.sent:]
	_, _, err := a.on(th).api.StopStreamContext(ctx, th.Channel, l.ts, slack.MsgOptionMarkdownText(rest))
	switch code := slackCode(err); {
	case err == nil:
		l.sent = len(l.md)
		l.ts, l.msgFrom = "", l.sent
	case streamEnded(code):
		a.log.Info("slack ended the stream; the reply goes on in a new message", "session", th.Key, "ts", l.ts, "err", err)
		l.ts = ""
	case streamRefused(code):
		a.log.Warn("slack refused the end of a stream; posting it whole", "session", th.Key, "ts", l.ts, "err", err)
		a.stopQuietly(ctx, th, l)
		l.whole = true
	default:
		return classify("stop stream "+l.ts, err)
	}
	return nil
}

// noteText is how a note that ends a live reply reads, inside a code
// block or not.
func noteText(note string, inCode bool) string {
	if inCode {
		return "(" + note + ")"
	}
	return "_(" + note + ")_"
}

// grow makes md the Markdown of raw[:end], if end is past what it is of.
func (l *liveReply) grow(end int) {
	if end <= l.shown {
		return
	}
	before, md := markdownText(l.raw[:l.shown]), markdownText(l.raw[:end])
	if strings.HasPrefix(md, before) {
		l.md += md[len(before):]
	} else {
		// What was shown stays as it was shown; the new text is made
		// safe on its own (stableEnd keeps this from happening).
		l.md += markdownText(l.raw[l.shown:end])
	}
	l.shown = end
}

// stableEnd is how much of text markdownText escapes as it will once
// text goes on: all of it but, outside a code block, the end of its last
// line from an unmatched backtick on.
func stableEnd(text string) int {
	start := strings.LastIndexByte(text, '\n') + 1
	fence := ""
	for _, line := range strings.SplitAfter(text[:start], "\n") {
		fence, _ = fenceLine(fence, line)
	}
	if fence != "" {
		return len(text)
	}
	last := text[start:]
	if strings.Count(last, "`")%2 == 1 {
		return start + strings.LastIndexByte(last, '`')
	}
	return len(text)
}

// pushLive sends what Slack has not taken of the reply's Markdown: into
// the message being written, a new one when there is none or it is full.
// It stops right after starting a message, with chat.ErrLiveMore when
// the router is to call again (the reply is being finished, or text is
// left). Before the reply is whole (final
// false) it makes one append, in the slot the router took for it, and
// says so with chat.ErrLiveMore when text is left; the reply's last
// appends wait for their slots here, as a final state's.
func (a *Adapter) pushLive(ctx context.Context, th chat.Thread, replyTo string, l *liveReply, final bool) error {
	appended := false
	for l.sent < len(l.md) && !l.whole {
		if !final && appended {
			return chat.ErrLiveMore // the next call goes on, in its own slot
		}
		used := utf8.RuneCountInString(l.md[l.msgFrom:l.sent])
		if l.ts != "" && used >= maxReplyRunes {
			if err := a.stopLive(ctx, th, l); err != nil {
				return err
			}
			continue
		}
		room := maxReplyRunes - used
		if l.ts == "" {
			room = maxReplyRunes
		}
		piece := l.md[l.sent:]
		if r := []rune(piece); len(r) > room {
			piece = string(r[:cutWithin(r, room)])
		}
		if l.ts == "" {
			if err := a.startLive(ctx, th, replyTo, l, piece); err != nil {
				return err
			}
			if l.ts != "" && (final || l.sent < len(l.md)) {
				return chat.ErrLiveMore // a message started: noted before it goes on
			}
			if l.ts != "" {
				return nil
			}
			continue
		}
		if final {
			if err := a.waitAppend(ctx, th); err != nil {
				return fmt.Errorf("slack: stream reply: %w", err)
			}
		}
		_, _, err := a.on(th).api.AppendStreamContext(ctx, th.Channel, l.ts, slack.MsgOptionMarkdownText(piece))
		switch code := slackCode(err); {
		case err == nil:
			l.sent += len(piece)
			appended = true
		case streamEnded(code):
			a.log.Info("slack ended the stream; the reply goes on in a new message", "session", th.Key, "ts", l.ts, "err", err)
			l.ts = ""
		case streamRefused(code):
			a.log.Warn("slack refused the rest of a stream; posting it whole at the end", "session", th.Key, "ts", l.ts, "err", err)
			a.stopQuietly(ctx, th, l)
			l.whole = true
		default:
			return classify("append to stream "+l.ts, err)
		}
	}
	return nil
}

// waitAppend waits for a slot of the workspace's append budget, as a
// final state's: the reply's last words, a note that ends one.
func (a *Adapter) waitAppend(ctx context.Context, th chat.Thread) error {
	final := func() chat.Priority { return chat.PriorityFinal }
	return a.on(th).budgets.appends.Wait(ctx, final, time.Now())
}

// startLive starts a streamed message with piece, the code block open
// there opened again first.
func (a *Adapter) startLive(ctx context.Context, th chat.Thread, replyTo string, l *liveReply, piece string) error {
	w := a.on(th)
	off := w.flag(&w.noStreams)
	to, known := a.recipient(ctx, th, replyTo)
	if off || (!known && !isDM(th.Channel)) {
		l.whole = true // Slack streams to a channel only for a named recipient
		return nil
	}
	ts, whole, err := a.startStream(ctx, th, l.reopen()+piece, to, known)
	switch {
	case whole:
		l.whole = true
		return nil
	case err != nil:
		return err
	}
	l.ts, l.msgFrom = ts, l.sent
	l.sent += len(piece)
	return nil
}

// reopen is the line that opens again the code block open where the
// reply's next message starts ("" outside code).
func (l *liveReply) reopen() string {
	if l.sent == 0 {
		return ""
	}
	r := []rune(l.md[:l.sent])
	return fenceOpen(r)[len(r)]
}

// stopLive stops the message being written; the reply's next text goes
// into a new one.
func (a *Adapter) stopLive(ctx context.Context, th chat.Thread, l *liveReply) error {
	if l.ts == "" {
		return nil
	}
	if _, _, err := a.on(th).api.StopStreamContext(ctx, th.Channel, l.ts); err != nil && !streamEnded(slackCode(err)) {
		if err := classify("stop stream "+l.ts, err); !permanent(err) {
			return err
		}
		a.log.Warn("slack stream stop refused; what it took is there to read", "session", th.Key, "ts", l.ts, "err", err)
	}
	l.ts, l.msgFrom = "", l.sent
	return nil
}

// stopQuietly stops the message being written, whatever Slack says.
func (a *Adapter) stopQuietly(ctx context.Context, th chat.Thread, l *liveReply) {
	if l.ts == "" {
		return
	}
	if _, _, err := a.on(th).api.StopStreamContext(ctx, th.Channel, l.ts); err != nil {
		a.log.Debug("slack stop of a stream left for a post", "session", th.Key, "ts", l.ts, "err", err)
	}
	l.ts, l.msgFrom = "", l.sent
}

// postLiveRest posts whole what Slack did not take of a reply it would
// not stream.
func (a *Adapter) postLiveRest(ctx context.Context, th chat.Thread, l *liveReply) error {
	if l.sent >= len(l.md) {
		return nil
	}
	if err := a.postMarkdown(ctx, th, l.reopen()+l.md[l.sent:]); err != nil {
		return err
	}
	l.sent = len(l.md)
	return nil
}

// endLive ends a reply that is not the answer: the message being written
// gets the note and stops; what Slack did not take of it is dropped.
func (a *Adapter) endLive(ctx context.Context, th chat.Thread, l *liveReply, note string) error {
	if l.ts == "" || l.whole {
		return nil
	}
	if note != "" {
		if err := a.waitAppend(ctx, th); err != nil {
			return fmt.Errorf("slack: end stream: %w", err)
		}
		_, _, err := a.on(th).api.AppendStreamContext(ctx, th.Channel, l.ts, slack.MsgOptionMarkdownText(noteText(note, l.reopen() != "")))
		if err != nil {
			if streamEnded(slackCode(err)) {
				l.ts = ""
				return nil
			}
			if err := classify("end stream "+l.ts, err); !permanent(err) {
				return err
			}
			a.log.Warn("slack refused a live reply's note", "session", th.Key, "ts", l.ts, "err", err)
		}
	}
	return a.stopLive(ctx, th, l)
}

// cutWithin returns where to cut r to at most limit runes: after
// whitespace and before the next non-space character where it can (so
// the next piece does not start with whitespace, which Slack drops),
// after a line end in preference.
func cutWithin(r []rune, limit int) int {
	if limit >= len(r) {
		return len(r)
	}
	if limit < 1 {
		limit = 1
	}
	isSpace := func(c rune) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	best := 0
	for b := limit; b > limit/2 && b > 0; b-- {
		if isSpace(r[b-1]) && !isSpace(r[b]) {
			if r[b-1] == '\n' {
				return b
			}
			if best == 0 {
				best = b
			}
		}
	}
	if best > 0 {
		return best
	}
	return limit
}
