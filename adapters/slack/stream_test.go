package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/internal/golden"
	"github.com/pinplan/pinplan/internal/inboxtest"
)

func streamAdapter(t *testing.T, fake *fakeslack.Server) (*Adapter, *logBuffer) {
	t.Helper()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	log := &logBuffer{}
	a := New(Options{BotToken: "xoxb-t", APIURL: srv.URL + "/api/", Stream: true, AppendsPerMinute: 60000,
		Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err := a.Start(t.Context(), nopHandler{}); err != nil {
		t.Fatal(err)
	}
	return a, log
}

// words is an answer of n numbered words, a line break every 12.
func words(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "word%04d", i)
		if i%12 == 0 {
			b.WriteString("\n")
		} else if i < n {
			b.WriteString(" ")
		}
	}
	return b.String()
}

// streamedText is what the streamed messages in the thread add up to, and
// the messages.
func streamedText(fake *fakeslack.Server, channel, thread string) (string, []fakeslack.Message) {
	var b strings.Builder
	var msgs []fakeslack.Message
	for _, m := range fake.Streams(channel) {
		if m.ThreadTS == thread {
			b.WriteString(m.Text)
			msgs = append(msgs, m)
		}
	}
	return b.String(), msgs
}

var channelThread = chat.Thread{Platform: "slack", Key: Key("T1", "C1", "1.1"), Channel: "C1", ThreadID: "1.1"}

func TestStreamedReply(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	text := "**Done.** The plan is <@U9> & " + words(200)
	if err := a.Reply(context.Background(), th, "1.1", text); err != nil {
		t.Fatal(err)
	}
	got, msgs := streamedText(fake, "C1", "1.1")
	if len(msgs) != 1 || msgs[0].Streaming {
		t.Fatalf("streamed messages %+v, want one, stopped", msgs)
	}
	if want := markdownText(text); got != want {
		t.Errorf("streamed text\n%q\nwant\n%q", got, want)
	}
	if m := msgs[0]; m.StreamUser != "U1" || m.StreamTeam != "T1" {
		t.Errorf("recipient %q/%q, want U1/T1", m.StreamUser, m.StreamTeam)
	}
	chunks, _ := streamChunks(markdownText(text))
	if len(chunks) < 3 {
		t.Fatalf("%d chunks: the answer is too short to test appends", len(chunks))
	}
	if s, ap, st := len(fake.Calls("chat.startStream")), len(fake.Calls("chat.appendStream")), len(fake.Calls("chat.stopStream")); s != 1 || ap != len(chunks)-1 || st != 1 {
		t.Errorf("start %d, append %d, stop %d; want 1, %d, 1", s, ap, st, len(chunks)-1)
	}
	for _, c := range fake.Calls("chat.appendStream") {
		if c.Params["markdown_text"] == "" || c.Params["ts"] != msgs[0].TS {
			t.Errorf("append %v, want markdown_text into %s", c.Params, msgs[0].TS)
		}
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
	if len(fake.Calls("chat.postMessage")) != 0 {
		t.Error("a streamed reply was also posted")
	}
}

// TestStreamExpiryRollsOver: Slack ends a stream (here on every stream's
// second append): the rest goes on in a new streamed message, every word
// once and in order, and a code block cut there is opened again with its
// own fence and language.
func TestStreamExpiryRollsOver(t *testing.T) {
	for _, open := range []string{"```go", "~~~~ go", "````"} {
		t.Run(open, func(t *testing.T) {
			fake := &fakeslack.Server{ExpireStreamOnAppend: 2}
			a, _ := streamAdapter(t, fake)
			th := channelThread
			a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
			closing := strings.TrimRight(strings.Fields(open)[0], "go")
			code := open + "\n" + strings.Repeat("if a < b { fmt.Println(\"<@U1>\") }\n", 60) + closing + "\n"
			text := words(150) + "\n" + code + words(100)
			if err := a.Reply(context.Background(), th, "1.1", text); err != nil {
				t.Fatal(err)
			}
			got, msgs := streamedText(fake, "C1", "1.1")
			if len(msgs) < 3 {
				t.Fatalf("%d streamed messages, want the reply rolled over several", len(msgs))
			}
			reopened := 0
			for i, m := range msgs {
				if m.Streaming {
					t.Errorf("message %s still streaming", m.TS)
				}
				if strings.HasPrefix(m.Text, open+"\n") {
					reopened++
				}
				safeOutsideCode(t, fmt.Sprintf("message %d", i), "", m.Text) // each stands alone
			}
			if reopened == 0 {
				t.Errorf("no message went on inside the cut code block with %q", open)
			}
			// Without the reopened fences, the messages add up to the reply.
			var joined strings.Builder
			for i, m := range msgs {
				s := m.Text
				if i > 0 {
					s = strings.TrimPrefix(s, open+"\n")
				}
				joined.WriteString(s)
			}
			if want := markdownText(text); joined.String() != want {
				t.Errorf("streamed messages add up to\n%q\nwant\n%q", joined.String(), want)
			}
			isFence := func(s string) bool { return strings.HasPrefix(s, "```") || strings.HasPrefix(s, "~~~") || s == "go" }
			if w, want := strings.Fields(got), strings.Fields(markdownText(text)); !slices.Equal(slices.DeleteFunc(w, isFence), slices.DeleteFunc(want, isFence)) {
				t.Error("words lost, repeated or out of order")
			}
			if v := fake.Violations(); len(v) > 0 {
				t.Errorf("Slack would have refused: %v", v)
			}
		})
	}
}

// TestStreamRetryGoesOn: the outbox's retry of a part that failed
// halfway goes on after what landed, in the same message; a stop that
// was refused is all a retry sends.
func TestStreamRetryGoesOn(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	text := words(200)
	ctx := context.Background()
	fake.Fail("chat.appendStream", "internal_error") // the first append fails
	err := a.Reply(ctx, th, "1.1", text)
	if o, _ := chat.Classify(err); err == nil || o != chat.Retry {
		t.Fatalf("first attempt: %v, want a failure worth a retry", err)
	}
	fake.FailHTTP("chat.stopStream", http.StatusTooManyRequests, 1)
	err = a.Reply(ctx, th, "1.1", text)
	var rl *chat.RateLimitError
	if !errors.As(err, &rl) {
		t.Fatalf("second attempt: %v, want the stop's 429", err)
	}
	appends := len(fake.Calls("chat.appendStream"))
	if err := a.Reply(ctx, th, "1.1", text); err != nil {
		t.Fatalf("third attempt: %v", err)
	}
	if n := len(fake.Calls("chat.appendStream")); n != appends {
		t.Errorf("the last retry appended %d more, want only the stop", n-appends)
	}
	got, msgs := streamedText(fake, "C1", "1.1")
	if len(msgs) != 1 || got != markdownText(text) {
		t.Errorf("%d messages with %q, want the reply once in one message", len(msgs), got)
	}
	if len(fake.Calls("chat.startStream")) != 1 {
		t.Error("a retry started another stream")
	}
	// The same text again is a new reply, not a retry.
	if err := a.Reply(ctx, th, "1.1", text); err != nil {
		t.Fatal(err)
	}
	if _, msgs := streamedText(fake, "C1", "1.1"); len(msgs) != 2 {
		t.Errorf("%d streamed messages after the same reply twice, want 2", len(msgs))
	}
}

// TestStreamRecipient: in a channel a stream needs its recipient: the
// author of the message answered, else (after a restart) the thread's
// first message's, read from Slack; with none the reply is posted whole.
// A DM needs none.
func TestStreamRecipient(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	ctx := context.Background()
	// Nothing known, the thread's root not in Slack: posted whole.
	lost := chat.Thread{Platform: "slack", Key: Key("T1", "C1", "5.1"), Channel: "C1", ThreadID: "5.1"}
	if err := a.Reply(ctx, lost, "", "an answer with <!channel>"); err != nil {
		t.Fatal(err)
	}
	var whole []fakeslack.Message
	for _, m := range fake.Messages("C1") {
		if m.ThreadTS == "5.1" {
			whole = append(whole, m)
		}
	}
	if len(whole) != 1 || whole[0].Streamed || !strings.Contains(whole[0].Blocks, `"type":"markdown"`) || !strings.Contains(whole[0].Blocks, `\\u003c!channel`) {
		t.Errorf("messages %+v, want the reply whole in a markdown block, < escaped", whole)
	}
	// The root is in Slack: its author is the recipient.
	fake.CallbackBody("EvRoot", map[string]any{"type": "message", "user": "U7", "channel": "C1", "ts": "6.1", "text": "task"})
	th := chat.Thread{Platform: "slack", Key: Key("T1", "C1", "6.1"), Channel: "C1", ThreadID: "6.1"}
	if err := a.Reply(ctx, th, "", "hello"); err != nil {
		t.Fatal(err)
	}
	if _, msgs := streamedText(fake, "C1", "6.1"); len(msgs) != 1 || msgs[0].StreamUser != "U7" || msgs[0].StreamTeam != "T1" {
		t.Errorf("streams %+v, want one to U7 in T1", msgs)
	}
	dm := chat.Thread{Platform: "slack", Key: Key("T1", "D1", "7.1"), Channel: "D1", ThreadID: "7.1"}
	if err := a.Reply(ctx, dm, "", "hello"); err != nil {
		t.Fatal(err)
	}
	if _, msgs := streamedText(fake, "D1", "7.1"); len(msgs) != 1 {
		t.Errorf("DM streams %+v, want one without a recipient", msgs)
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestStreamsDeniedPostWhole: a token or app that may not stream has its
// replies posted whole, from the first refusal on, said once.
func TestStreamsDeniedPostWhole(t *testing.T) {
	fake := &fakeslack.Server{}
	a, log := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	fake.Fail("chat.startStream", "not_allowed_token_type")
	for _, text := range []string{"first", "second"} {
		if err := a.Reply(context.Background(), th, "1.1", text); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(fake.Calls("chat.startStream")); n != 1 {
		t.Errorf("%d stream starts, want 1", n)
	}
	if n := len(fake.Calls("chat.postMessage")); n != 2 {
		t.Errorf("%d replies posted whole, want 2", n)
	}
	if n := log.count("streaming is not available"); n != 1 {
		t.Errorf("logged %d times, want once", n)
	}
}

func TestMarkdownText(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"mentions", "hi <@U123> and <!channel>, see <https://x.example|this>", `hi \<@U123> and \<!channel>, see \<https://x.example|this>`},
		{"comparison", "a < b > c", `a \< b > c`},
		{"inline code", "run `a <b>` then <@U1>", "run `a <b>` then \\<@U1>"},
		{"fence", "```html\n<b>@channel</b>\n```\nafter <@U1>", "```html\n<b>@channel</b>\n```\nafter \\<@U1>"},
		{"tilde fence", "~~~\n<x>\n```\n<y>\n~~~\n<z>", "~~~\n<x>\n```\n<y>\n~~~\n\\<z>"},
		{"indented four is no fence", "    ```\n<x>", "    ```\n\\<x>"},
		{"no markup", "plain words", "plain words"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := markdownText(tt.in); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// worstAnswer is a long answer of hostile Markdown: mentions and links
// in Slack's syntax, HTML, code blocks and spans holding them, a code
// block longer than a part, a word longer than a chunk, indented code,
// wide characters and runs of whitespace.
func worstAnswer() string {
	var b strings.Builder
	for i := 0; b.Len() < 9000; i++ {
		fmt.Fprintf(&b, "## Step %d <!here>\n\n**Bold** _it_ ~~gone~~ <@U0%d> <!channel> <!subteam^S1> <https://evil.example|click> &amp; <script>x</script>\n", i, i)
		b.WriteString("- item with `inline <@U1> code` and a < b\n- second\n\n")
		b.WriteString("```go\nif a < b && c > d {\n\tfmt.Println(\"<!everyone>\")\n}\n```\n")
		b.WriteString("    indented <@U2> code\n    more\n\n")
		b.WriteString("雪だるま ☃ 💥 naïve café " + strings.Repeat("spaces   ", 3) + "\n")
		if i == 1 {
			b.WriteString("https://example.com/" + strings.Repeat("x", 1200) + "\n")
		}
		if i == 3 {
			// A code block longer than a part, with an info string.
			b.WriteString("~~~~ js title=\"x.js\"\n" + strings.Repeat("if (a < b) { notify(\"<!channel>\") }\n", 120) + "~~~~\n")
		}
	}
	return b.String()
}

// TestStreamChunksGolden: the chunks a worst-case answer streams as, per
// part, within Slack's limits: no chunk over markdown_text's 12,000
// characters, none but a part's first starting with whitespace, together
// exactly the part, and no Slack mention syntax outside code nor an
// escape inside it, read with the code fences of the whole answer (a
// part is read from the fence the parts before it left open).
func TestStreamChunksGolden(t *testing.T) {
	a := New(Options{BotToken: "xoxb-t", Stream: true})
	type part struct {
		Chunks []string `json:"chunks"`
		Reopen []string `json:"reopen"`
	}
	var out []part
	fence := ""
	for i, p := range a.SplitReply(worstAnswer()) {
		if n := utf8.RuneCountInString(p); n > maxReplyRunes {
			t.Errorf("part of %d characters, limit %d", n, maxReplyRunes)
		}
		md := markdownText(p)
		chunks, reopen := streamChunks(md)
		if strings.Join(chunks, "") != md {
			t.Error("the chunks do not add up to the part")
		}
		for i, c := range chunks {
			if n := utf8.RuneCountInString(c); n > maxChunkRunes || !utf8.ValidString(c) {
				t.Errorf("chunk %d: %d characters or invalid UTF-8", i, n)
			}
			if r, _ := utf8.DecodeRuneInString(c); i > 0 && unicode.IsSpace(r) {
				t.Errorf("chunk %d starts with whitespace: %q", i, c[:min(len(c), 20)])
			}
		}
		fence = safeOutsideCode(t, fmt.Sprintf("part %d", i), fence, md+"\n")
		for _, m := range []string{"<@", "<!"} {
			outside := strings.Count(md, m) - strings.Count(md, `\`+m)
			inside := strings.Count(codeOnly(md), m)
			if outside != inside {
				t.Errorf("%d unescaped %s outside code", outside-inside, m)
			}
		}
		out = append(out, part{Chunks: chunks, Reopen: reopen})
	}
	if len(out) < 3 {
		t.Fatalf("%d parts: the worst case should take several", len(out))
	}
	var got bytes.Buffer
	enc := json.NewEncoder(&got)
	enc.SetEscapeHTML(false) // readable: the < and \< are the point
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "stream_worst_case.json"), got.Bytes())
}

// codeOnly is the text of md's code blocks and spans.
func codeOnly(md string) string {
	var b strings.Builder
	fence := ""
	for _, line := range strings.SplitAfter(md, "\n") {
		var marker bool
		if fence, marker = fenceLine(fence, line); marker {
			continue
		}
		if fence != "" {
			b.WriteString(line)
			continue
		}
		for _, s := range reCode.FindAllString(line, -1) {
			b.WriteString(s)
		}
	}
	return b.String()
}

// safeOutsideCode checks md as Slack reads it from the code fence open
// before it ("" for none): outside code no < is left unescaped (code
// spans aside), inside code none is escaped. It returns the fence open
// after md.
func safeOutsideCode(t *testing.T, name, fence, md string) string {
	t.Helper()
	var bad []string // the lines at fault, the first few
	for i, line := range strings.SplitAfter(md, "\n") {
		var marker bool
		if fence, marker = fenceLine(fence, line); marker {
			continue
		}
		prose := reCode.ReplaceAllString(line, "")
		switch {
		case fence != "" && strings.Contains(line, `\<`):
			bad = append(bad, fmt.Sprintf("line %d, code escaped: %q", i, line))
		case fence == "" && strings.Count(prose, "<") != strings.Count(prose, `\<`):
			bad = append(bad, fmt.Sprintf("line %d, < unescaped outside code: %q", i, line))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s: %d lines at fault, first %s", name, len(bad), strings.Join(bad[:min(len(bad), 2)], "; "))
	}
	return fence
}

// TestStreamPartsKeepCodeFences: an answer whose code block is longer
// than a part is split with the block closed at the end of one part and
// opened again, with its own fence and language, at the start of the
// next; every message reads as the answer does, alone and in sequence:
// the mentions after the block stay escaped, the code stays as it is.
func TestStreamPartsKeepCodeFences(t *testing.T) {
	for _, fence := range []string{"```", "~~~~"} {
		t.Run(fence, func(t *testing.T) {
			fake := &fakeslack.Server{}
			a, _ := streamAdapter(t, fake)
			th := channelThread
			a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
			text := "Here is the fix for <@U2>:\n\n" + fence + "go\n" + strings.Repeat("if a < b { a = b }\n", 250) + fence + "\n\n<!channel> <@U1> please review.\n"
			parts := a.SplitReply(text)
			if len(parts) < 2 {
				t.Fatalf("%d parts: the code block should not fit in one", len(parts))
			}
			for _, p := range parts {
				if n := utf8.RuneCountInString(p); n > maxReplyRunes {
					t.Errorf("part of %d characters, limit %d", n, maxReplyRunes)
				}
				if err := a.Reply(context.Background(), th, "1.1", p); err != nil {
					t.Fatal(err)
				}
			}
			_, msgs := streamedText(fake, "C1", "1.1")
			if len(msgs) != len(parts) {
				t.Fatalf("%d streamed messages, want one per part (%d)", len(msgs), len(parts))
			}
			open := ""
			var all strings.Builder
			for i, m := range msgs {
				safeOutsideCode(t, fmt.Sprintf("message %d alone", i), "", m.Text)
				open = safeOutsideCode(t, fmt.Sprintf("message %d in the answer", i), open, m.Text+"\n")
				if i > 0 && !strings.HasPrefix(m.Text, fence+"go\n") {
					t.Errorf("message %d starts %q, want the code block opened again with %sgo", i, m.Text[:min(len(m.Text), 12)], fence)
				}
				all.WriteString(m.Text)
			}
			for _, want := range []string{`\<!channel>`, `\<@U1>`, `\<@U2>`} {
				if !strings.Contains(all.String(), want) {
					t.Errorf("the messages lack %s", want)
				}
			}
			if n := strings.Count(all.String(), "if a < b { a = b }\n"); n != 250 {
				t.Errorf("%d code lines as they were, want 250", n)
			}
		})
	}
}

// TestStreamCutBeforeLineEnd: a chunk without a space whose end falls
// just before a line end keeps the line end: the next chunk does not
// start with whitespace Slack would drop.
func TestStreamCutBeforeLineEnd(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	text := strings.Repeat("x", streamChunkRunes) + "\nsecond line"
	if err := a.Reply(context.Background(), th, "1.1", text); err != nil {
		t.Fatal(err)
	}
	if got, _ := streamedText(fake, "C1", "1.1"); got != markdownText(text) {
		t.Errorf("streamed %q, want %q", got, markdownText(text))
	}
}

// TestStreamSlackConnectRecipient: in a channel shared with another
// workspace the recipient's team is the user's own (user_team), not the
// workspace's, whether the author is known from the event or read from
// Slack after a restart.
func TestStreamSlackConnectRecipient(t *testing.T) {
	fake := &fakeslack.Server{}
	fake.SetUserTeam("U5", "T2")
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	a := New(Options{BotToken: "xoxb-t", APIURL: srv.URL + "/api/", Stream: true, AppendsPerMinute: 60000,
		Dedupe: &inboxtest.Dedupe{}})
	if err := a.Start(t.Context(), &inboxtest.Inbox{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	push(t, a, fake, "EvShared", map[string]any{"type": "app_mention", "user": "U5", "user_team": "T2", "source_team": "T2",
		"channel": "C1", "ts": "8.1", "text": "<@" + a.one.bot() + "> plan it"})
	a.queue.Wait(ctx)
	th := chat.Thread{Platform: "slack", Key: Key("T1", "C1", "8.1"), Channel: "C1", ThreadID: "8.1"}
	if err := a.Reply(ctx, th, "8.1", "hello"); err != nil {
		t.Fatalf("reply to a user of another workspace: %v", err)
	}
	if _, msgs := streamedText(fake, "C1", "8.1"); len(msgs) != 1 || msgs[0].StreamUser != "U5" || msgs[0].StreamTeam != "T2" {
		t.Errorf("streams %+v, want one to U5 in T2", msgs)
	}
	// After a restart: the recipient is read from the thread's root.
	b := New(Options{BotToken: "xoxb-t", APIURL: srv.URL + "/api/", Stream: true, AppendsPerMinute: 60000})
	if err := b.Start(t.Context(), nopHandler{}); err != nil {
		t.Fatal(err)
	}
	if err := b.Reply(ctx, th, "", "hello again"); err != nil {
		t.Fatalf("reply after a restart: %v", err)
	}
	if _, msgs := streamedText(fake, "C1", "8.1"); len(msgs) != 2 || msgs[1].StreamTeam != "T2" {
		t.Errorf("streams %+v, want the second to T2 too", msgs)
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestStreamRecipientNotFound: team_not_found or user_not_found from
// chat.startStream posts the part whole; from chat.stopStream, once every
// chunk landed, the part is delivered.
func TestStreamRecipientNotFound(t *testing.T) {
	for _, code := range []string{"team_not_found", "user_not_found"} {
		t.Run(code, func(t *testing.T) {
			fake := &fakeslack.Server{}
			a, _ := streamAdapter(t, fake)
			th := channelThread
			a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
			ctx := context.Background()
			fake.Fail("chat.startStream", code)
			if err := a.Reply(ctx, th, "1.1", "first <@U2>"); err != nil {
				t.Fatalf("start refused: %v, want the part posted whole", err)
			}
			if msgs := fake.Messages("C1"); len(msgs) != 1 || msgs[0].Streamed || !strings.Contains(msgs[0].Text, `\<@U2>`) {
				t.Errorf("messages %+v, want the part posted whole, escaped", msgs)
			}
			fake.Fail("chat.stopStream", code)
			text := words(100)
			if err := a.Reply(ctx, th, "1.1", text); err != nil {
				t.Fatalf("stop refused: %v, want the streamed part delivered", err)
			}
			if got, _ := streamedText(fake, "C1", "1.1"); got != markdownText(text) {
				t.Errorf("streamed %q, want the part", got)
			}
		})
	}
}

// TestStreamPermanentFailureForgetsProgress: a part Slack refused for
// good is forgotten, so the same text later is a reply of its own, whole.
func TestStreamPermanentFailureForgetsProgress(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	ctx := context.Background()
	text := words(200)
	fake.Fail("chat.appendStream", "is_archived")
	err := a.Reply(ctx, th, "1.1", text)
	if o, _ := chat.Classify(err); err == nil || o != chat.Permanent {
		t.Fatalf("got %v, want a permanent failure", err)
	}
	if err := a.Reply(ctx, th, "1.1", text); err != nil {
		t.Fatal(err)
	}
	_, msgs := streamedText(fake, "C1", "1.1")
	if len(msgs) != 2 || msgs[1].Text != markdownText(text) {
		t.Errorf("%d streamed messages, the last %q; want a second message with the whole text", len(msgs), msgs[len(msgs)-1].Text)
	}
}

// TestStreamStopRefusedAfterEveryChunk: once every chunk landed, a stop
// Slack refuses for good does not make the part undeliverable.
func TestStreamStopRefusedAfterEveryChunk(t *testing.T) {
	fake := &fakeslack.Server{}
	a, log := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	ctx := context.Background()
	text := words(200)
	fake.Fail("chat.stopStream", "is_archived")
	if err := a.Reply(ctx, th, "1.1", text); err != nil {
		t.Fatalf("got %v, want the part delivered: every chunk landed", err)
	}
	if log.count("stream stop refused") == 0 {
		t.Error("the refused stop was not logged")
	}
	// The part is done: the same text again is a new reply.
	if err := a.Reply(ctx, th, "1.1", text); err != nil {
		t.Fatal(err)
	}
	if _, msgs := streamedText(fake, "C1", "1.1"); len(msgs) != 2 || msgs[1].Text != markdownText(text) {
		t.Errorf("%d streamed messages, want the same text streamed again whole", len(msgs))
	}
}

// TestStreamOffMidPartPostsTheRest: when streaming turns off for the
// workspace while a part is half streamed, its retry posts only what did
// not land, the code block it was cut in opened again.
func TestStreamOffMidPartPostsTheRest(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	ctx := context.Background()
	text := "```python\n" + strings.Repeat("print(a < b)\n", 100) + "```\nafter <@U2>"
	fake.Fail("chat.appendStream", "internal_error")
	if err := a.Reply(ctx, th, "1.1", text); err == nil {
		t.Fatal("the first attempt succeeded; want its append to fail")
	}
	other := chat.Thread{Platform: "slack", Key: Key("T1", "C1", "2.1"), Channel: "C1", ThreadID: "2.1"}
	a.noteAuthor(other.Key, "2.1", person{user: "U1", team: "T1"})
	fake.Fail("chat.startStream", "not_allowed_token_type")
	if err := a.Reply(ctx, other, "2.1", "another reply"); err != nil {
		t.Fatal(err)
	}
	if err := a.Reply(ctx, th, "1.1", text); err != nil {
		t.Fatalf("retry: %v", err)
	}
	streamed, msgs := streamedText(fake, "C1", "1.1")
	if len(msgs) != 1 {
		t.Fatalf("%d streamed messages, want the one started", len(msgs))
	}
	var posted []fakeslack.Message
	for _, m := range fake.Messages("C1") {
		if m.ThreadTS == "1.1" && !m.Streamed {
			posted = append(posted, m)
		}
	}
	if len(posted) != 1 {
		t.Fatalf("%d messages posted, want the rest in one", len(posted))
	}
	md := markdownText(text)
	rest, ok := strings.CutPrefix(md, streamed)
	if !ok || posted[0].Text != "```python\n"+rest {
		t.Errorf("posted %q, want what did not land (%d of %d characters), the code block opened again", posted[0].Text[:min(len(posted[0].Text), 40)], len(rest), len(md))
	}
}

// TestSplitMarkdown: parts within the limit, each closing the code blocks
// it opens or was opened with, together the text again.
func TestSplitMarkdown(t *testing.T) {
	tests := []struct {
		name, text string
		parts      int
	}{
		{"prose", strings.Repeat("some words here\n", 10), 5},
		{"block across parts", "intro\n```go\n" + strings.Repeat("x := a < b\n", 10) + "```\nafter <@U1>", 6},
		{"tilde block with info", "~~~~ sh title=\"a b\"\n" + strings.Repeat("echo <x>\n", 10) + "~~~~\n", 10},
		{"long line in a block", "```\n" + strings.Repeat("y", 100) + "\n```", 4},
		{"unclosed block", "```\n" + strings.Repeat("z\n", 30), 2},
	}
	const limit = 40
	isFence := func(s string) bool { return strings.HasPrefix(s, "```") || strings.HasPrefix(s, "~~~") }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parts := splitMarkdown(tt.text, limit)
			if len(parts) != tt.parts {
				t.Errorf("got %d parts, want %d: %q", len(parts), tt.parts, parts)
			}
			var joined strings.Builder
			for i, p := range parts {
				if n := utf8.RuneCountInString(p); n > limit {
					t.Errorf("part %d: %d characters, limit %d", i, n, limit)
				}
				fence := ""
				for _, line := range strings.SplitAfter(p, "\n") {
					fence, _ = fenceLine(fence, line)
				}
				if fence != "" {
					t.Errorf("part %d leaves a code block open: %q", i, p)
				}
				for _, line := range strings.Split(p, "\n") {
					if !isFence(line) {
						joined.WriteString(line)
					}
				}
			}
			var want strings.Builder
			for _, line := range strings.Split(tt.text, "\n") {
				if !isFence(line) {
					want.WriteString(line)
				}
			}
			if joined.String() != want.String() {
				t.Errorf("the parts hold %q, want %q", joined.String(), want.String())
			}
		})
	}
}

// TestForgetDropsTheSessionsPeople: who wrote a session's messages leaves
// memory with the session (chat.Forgetter), and is read from the thread
// again when a streamed reply needs its recipient. Another platform's
// thread of the same key is ignored.
func TestForgetDropsTheSessionsPeople(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	ctx := context.Background()
	a.noteAuthor(th.Key, "1.2", person{user: "U2", team: "T1"})
	if p, ok := a.recipient(ctx, th, "1.2"); !ok || p.user != "U2" {
		t.Fatalf("recipient %+v %t, want U2", p, ok)
	}
	a.Forget(chat.Thread{Platform: "discord", Key: th.Key})
	if p, ok := a.recipient(ctx, th, "1.2"); !ok || p.user != "U2" {
		t.Fatalf("after another platform's Forget: recipient %+v %t, want U2 still", p, ok)
	}
	a.Forget(th)
	a.mu.Lock()
	left := len(a.authors) + len(a.askers)
	a.mu.Unlock()
	if left != 0 {
		t.Errorf("%d entries left after Forget", left)
	}
	before := len(fake.Calls("conversations.replies"))
	a.recipient(ctx, th, "1.2")
	if n := len(fake.Calls("conversations.replies")); n != before+1 {
		t.Errorf("conversations.replies called %d times after Forget, want once: the recipient is read again", n-before)
	}
}
