package slack

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/pinplan/pinplan/chat"
)

// Streamed replies (Options.Stream, PINPLAN_STREAM). The outbox stores a
// reply's parts and calls Reply once per part until it succeeds; Reply
// streams the part into the thread as one message: chat.startStream with
// the first chunk of Markdown, chat.appendStream with the next ones
// (paced for the workspace within Tier 4), chat.stopStream.
//
// A retry never repeats what landed. The adapter keeps each part's
// progress (the message being streamed, how many chunks Slack has
// acknowledged) from one call of Reply to the next, so the outbox's retry
// of a part that failed halfway goes on after the last chunk Slack took,
// in the same message if it still streams. A chunk counts as landed when
// Slack answers ok to the call that carried it; one whose call got no
// answer (a timeout, a dropped connection) is sent again, so that one
// chunk is the only text a retry can show twice. The progress lives in
// memory: after a restart the outbox sends the part whole again, below
// the message the killed process left cut off. A part posted instead of
// streamed (streaming turned off for the workspace, or refused in the
// thread, halfway through) is posted from where the stream stopped. A
// part Slack refuses for good is forgotten, so the same text later is a
// reply of its own; one whose every chunk landed is delivered even if
// Slack refuses to stop its stream.
//
// SplitReply cuts the answer where a code block may be open: the part
// closes it and the next opens it again (splitMarkdown), so markdownText,
// which escapes a part alone, reads each part as the whole answer reads.
//
// Slack ends a stream after a few minutes, answering
// message_not_in_streaming_state: that chunk did not land, and it and the
// rest go on in a new streamed message (a code block cut there is opened
// again with its own opening line), so nothing is lost and nothing repeated. A Stop pressed while an
// answer streams ends that message the same way; the answer of a turn is
// still delivered whole (Stop stops turns, not their answers).
//
// Plan messages and approval cards are never streamed.

// person is a Slack user and the team they belong to (for a Slack
// Connect user in a shared channel, their own workspace's, not this
// one's): a streamed reply's recipient_user_id and recipient_team_id.
type person struct{ user, team string }

// Streaming bounds.
const (
	// streamChunkRunes is the size a chunk is cut at (at a line end or a
	// space where it can): small enough that the answer visibly streams,
	// large enough that a 3,500-character part takes a handful of calls.
	streamChunkRunes = 400
	// maxChunkRunes is markdown_text's limit for one call.
	maxChunkRunes = 12000
	// maxPeople bounds the authors (messages, all sessions) and the
	// askers (sessions) remembered, maxAuthorsPerSession the messages of
	// one session.
	maxPeople            = 10000
	maxAuthorsPerSession = 200
	// maxPartAge drops the progress of a part the outbox gave up on (it
	// keeps a reply for 24 hours).
	maxPartAge = 25 * time.Hour
)

// partStream is a part's progress. Only the part's delivery touches it,
// and the outbox delivers a session's parts one at a time.
type partStream struct {
	ts      string // the message streaming now; "" before the first start and after Slack ended it
	sent    int    // chunks Slack acknowledged
	started time.Time
}

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

// partKey names a part of a reply in its session.
func partKey(th chat.Thread, replyTo, text string) string {
	h := sha256.Sum256([]byte(text))
	return th.Key + "\x00" + replyTo + "\x00" + hex.EncodeToString(h[:16])
}

// part returns the progress of the part key, starting it if it has none.
func (a *Adapter) part(key string) *partStream {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ps, ok := a.parts[key]; ok {
		return ps
	}
	now := time.Now()
	for k, ps := range a.parts {
		if now.Sub(ps.started) > maxPartAge {
			delete(a.parts, k)
		}
	}
	ps := &partStream{started: now}
	a.parts[key] = ps
	return ps
}

func (a *Adapter) partDone(key string) {
	a.mu.Lock()
	delete(a.parts, key)
	a.mu.Unlock()
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

// streamReply streams one part (Markdown) into the thread, going on from
// where an earlier call for the same part stopped. A part Slack refuses
// for good is forgotten, so the same text later is a reply of its own.
func (a *Adapter) streamReply(ctx context.Context, th chat.Thread, replyTo, text string) error {
	md := markdownText(text)
	chunks, reopen := streamChunks(md)
	if len(chunks) == 0 {
		return nil
	}
	key := partKey(th, replyTo, text)
	if w := a.on(th); w.flag(&w.noStreams) {
		return a.postRest(ctx, th, key, chunks, reopen)
	}
	to, known := a.recipient(ctx, th, replyTo)
	if !known && !isDM(th.Channel) {
		// Slack streams to a channel only for a named recipient.
		return a.postRest(ctx, th, key, chunks, reopen)
	}
	ps := a.part(key)
	fail := func(err error) error {
		if permanent(err) {
			a.partDone(key)
		}
		return err
	}
	for ps.sent < len(chunks) {
		if ps.ts == "" {
			chunk := chunks[ps.sent]
			if ps.sent > 0 {
				chunk = reopen[ps.sent] + chunk // the new message goes on inside the code block, if one is open
			}
			ts, whole, err := a.startStream(ctx, th, chunk, to, known)
			switch {
			case whole:
				return a.postRest(ctx, th, key, chunks, reopen)
			case err != nil:
				return fail(err)
			}
			ps.ts = ts
			ps.sent++
			continue
		}
		if err := a.on(th).appends.Wait(ctx); err != nil {
			return fmt.Errorf("slack: stream reply: %w", err)
		}
		_, _, err := a.on(th).api.AppendStreamContext(ctx, th.Channel, ps.ts, slack.MsgOptionMarkdownText(chunks[ps.sent]))
		switch code := slackCode(err); {
		case err == nil:
			ps.sent++
		case streamEnded(code):
			a.log.Info("slack ended the stream; the reply goes on in a new message", "session", th.Key, "ts", ps.ts, "err", err)
			ps.ts = ""
		case streamRefused(code):
			a.log.Warn("slack refused the rest of a stream; posting it whole", "session", th.Key, "ts", ps.ts, "err", err)
			return a.postRest(ctx, th, key, chunks, reopen)
		default:
			return fail(classify("append to stream "+ps.ts, err))
		}
	}
	if ps.ts != "" {
		_, _, err := a.on(th).api.StopStreamContext(ctx, th.Channel, ps.ts)
		if err != nil && !streamEnded(slackCode(err)) {
			if err := classify("stop stream "+ps.ts, err); !permanent(err) {
				return err
			}
			// Every chunk landed: the reply is there to read, whatever
			// Slack says of the stop (user_not_found, team_not_found for
			// a recipient in another workspace, and the like).
			a.log.Warn("slack stream stop refused; every chunk had landed, so the reply is delivered", "session", th.Key, "ts", ps.ts, "err", err)
		}
	}
	a.partDone(key)
	return nil
}

// postRest posts what did not land of a part whole (all of it when
// nothing did; a code block it was cut in opened again), ends the stream
// it was going into, and forgets its progress.
func (a *Adapter) postRest(ctx context.Context, th chat.Thread, key string, chunks, reopen []string) error {
	a.mu.Lock()
	ps := a.parts[key]
	a.mu.Unlock()
	sent := 0
	if ps != nil {
		sent = ps.sent
		if ps.ts != "" {
			// So that the message stops showing as streaming; the rest
			// is posted below it either way.
			if _, _, err := a.on(th).api.StopStreamContext(ctx, th.Channel, ps.ts); err != nil {
				a.log.Debug("slack stop of a stream left for a post", "session", th.Key, "ts", ps.ts, "err", err)
			}
			ps.ts = ""
		}
	}
	md := strings.Join(chunks[sent:], "")
	if sent > 0 && md != "" {
		md = reopen[sent] + md
	}
	if err := a.postMarkdown(ctx, th, md); err != nil {
		if permanent(err) {
			a.partDone(key)
		}
		return err
	}
	a.partDone(key)
	return nil
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

// maxMarkdownRunes is the most text the markdown blocks of one message
// hold.
const maxMarkdownRunes = 12000

// markdownText makes the model's Markdown safe for markdown_text: outside
// code, every < is escaped (\<), so no <@U…>, <!channel> or <url|text>
// can mention anyone or hide a link. Code spans and fenced blocks are
// literal in Markdown and stay as they are.
func markdownText(md string) string {
	lines := strings.SplitAfter(md, "\n")
	fence := ""
	for i, line := range lines {
		var marker bool
		if fence, marker = fenceLine(fence, line); marker || fence != "" {
			continue
		}
		var spans []string
		line = reCode.ReplaceAllStringFunc(line, func(s string) string {
			spans = append(spans, s)
			return fmt.Sprintf("\x00%d\x00", len(spans)-1)
		})
		line = strings.ReplaceAll(line, "<", `\<`)
		for j, s := range spans {
			line = strings.Replace(line, fmt.Sprintf("\x00%d\x00", j), s, 1)
		}
		lines[i] = line
	}
	return strings.Join(lines, "")
}

// fenceLine reads one line against the code fence open before it ("" for
// none): it returns the fence open after it and whether the line is a
// fence (an opening ``` or ~~~ run, after at most three spaces, or the
// closing run, at least as long, of the same character and nothing else).
func fenceLine(fence, line string) (string, bool) {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 || t == "" || (t[0] != '`' && t[0] != '~') {
		return fence, false
	}
	run := t[:len(t)-len(strings.TrimLeft(t, t[:1]))]
	switch {
	case len(run) < 3:
		return fence, false
	case fence == "":
		return run, true
	case run[0] == fence[0] && len(run) >= len(fence) && strings.TrimSpace(t[len(run):]) == "":
		return "", true
	}
	return fence, false
}

// streamChunks cuts Markdown into the chunks of a stream, each about
// streamChunkRunes long, and returns for each the line that opens again
// the code block it starts inside ("" outside code): a chunk that starts
// a new message (a stream Slack ended) is sent after it. Every cut falls
// after whitespace and before the next non-space character (after a line
// end where it can), so no chunk starts with whitespace: Slack has been
// seen to drop a chunk's leading whitespace where chunks join. Only a
// word longer than a chunk is cut inside.
func streamChunks(md string) (chunks, reopen []string) {
	r := []rune(md)
	open := fenceOpen(r)
	for start := 0; start < len(r); {
		end := cutAt(r, start)
		chunks = append(chunks, string(r[start:end]))
		reopen = append(reopen, open[start])
		start = end
	}
	return chunks, reopen
}

// cutAt returns where the chunk that starts at start ends.
func cutAt(r []rune, start int) int {
	limit := start + streamChunkRunes
	if limit >= len(r) {
		return len(r)
	}
	// b is a boundary when r[b-1] is whitespace and r[b] is not.
	boundary := func(b int) bool { return unicode.IsSpace(r[b-1]) && !unicode.IsSpace(r[b]) }
	afterLine := func(b int) bool {
		for i := b - 1; i > start && unicode.IsSpace(r[i]); i-- {
			if r[i] == '\n' {
				return true
			}
		}
		return false
	}
	floor := start + streamChunkRunes/2
	for _, want := range []func(int) bool{afterLine, func(int) bool { return true }} {
		for b := limit; b > floor; b-- {
			if boundary(b) && want(b) {
				return b
			}
		}
	}
	for b := limit; b > start; b-- {
		if boundary(b) {
			return b
		}
	}
	// No space in the chunk: cut the word, and keep a run of whitespace
	// that starts at the cut with this chunk, so that the next one does
	// not start with it.
	b := limit
	for b < len(r) && b < start+maxChunkRunes && unicode.IsSpace(r[b]) {
		b++
	}
	return b
}

// fenceOpen returns for each rune the line that opens the code block
// open there ("" for none): from the line after an opening fence to the
// end of the closing one.
func fenceOpen(r []rune) []string {
	open := make([]string, len(r)+1)
	fence, opening := "", ""
	for i := 0; i < len(r); {
		j := i
		for j < len(r) && r[j] != '\n' {
			j++
		}
		if j < len(r) {
			j++ // the line end
		}
		inside := ""
		if fence != "" {
			inside = opening
		}
		line := string(r[i:j])
		next, _ := fenceLine(fence, line)
		if fence == "" && next != "" {
			opening = reopenLine(line, next)
		}
		fence = next
		for k := i; k < j; k++ {
			open[k] = inside
		}
		i = j
	}
	return open
}

// maxReopenRunes bounds the opening line repeated to open a code block
// again; a longer one (a very long info string) is repeated as its fence
// alone.
const maxReopenRunes = 200

// reopenLine is the line that opens again the code block that line (an
// opening fence of run) opened: the same line, its info string (the
// language) included.
func reopenLine(line, run string) string {
	line = strings.TrimRight(line, "\r\n") + "\n"
	if utf8.RuneCountInString(line) > maxReopenRunes {
		return run + "\n"
	}
	return line
}

// splitMarkdown cuts Markdown into parts of at most limit characters at
// line ends, as Split does, but keeps every part's code blocks whole: a
// part that ends inside a block closes it, and the next opens it again
// with the same opening line (fence and info string), so that each part
// reads alone (and is escaped by markdownText) as the whole answer reads
// there. A line longer than a part is cut, inside a block too.
func splitMarkdown(text string, limit int) []string {
	var parts []string
	var cur strings.Builder
	n := 0                   // characters in cur
	prefix := ""             // what cur started with: the line opening again the block the part starts in
	fence, opening := "", "" // the code block open at the end of cur: its fence and the line that opens it again
	// openAt is where in cur the line that opened that block starts,
	// when this part opened it (-1 when not), and openLen its length: a
	// part that would end right after it leaves the block to the next.
	openAt, openLen := -1, 0
	closing := func(fence string) int { // what closing fence takes at the end of a part
		if fence == "" {
			return 0
		}
		return utf8.RuneCountInString(fence) + 1
	}
	push := func() {
		part, close := cur.String(), fence
		if close != "" && openAt >= 0 && strings.TrimSpace(part[openAt+openLen:]) == "" {
			part, close = part[:openAt], "" // an empty block: it opens in the next part
		}
		if strings.TrimSpace(part[len(prefix):]) != "" {
			part = strings.TrimRight(part, "\n")
			if close != "" {
				part += "\n" + close
			}
			parts = append(parts, part)
		}
		cur.Reset()
		prefix = ""
		if fence != "" {
			prefix = opening
		}
		cur.WriteString(prefix)
		n, openAt = utf8.RuneCountInString(prefix), -1
	}
	for _, line := range strings.SplitAfter(text, "\n") {
		next, _ := fenceLine(fence, line)
		r := []rune(line)
		for len(r) > 0 {
			switch {
			case n+len(r)+closing(next) <= limit:
				if fence == "" && next != "" {
					openAt, openLen = cur.Len(), len(line)
				}
				cur.WriteString(string(r))
				n += len(r)
				r = nil
			case cur.Len() > len(prefix):
				push()
			default: // the line alone is longer than a part
				take := min(len(r), max(limit-n-closing(fence), 1))
				cur.WriteString(string(r[:take]))
				n += take
				if r = r[take:]; len(r) > 0 {
					push()
				}
			}
		}
		if fence == "" && next != "" {
			opening = reopenLine(line, next)
		}
		fence = next
	}
	push()
	return parts
}
