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
)

func streamAdapter(t *testing.T, fake *fakeslack.Server) (*Adapter, *logBuffer) {
	t.Helper()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	log := &logBuffer{}
	a := New(Options{BotToken: "xoxb-t", APIURL: srv.URL + "/api/", Stream: true, AppendsPerMinute: 60000, Handler: nopHandler{},
		Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err := a.Start(t.Context()); err != nil {
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
	a.noteAuthor(th.Key, "C1", "1.1", person{user: "U1", team: "T1"})
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
// once and in order, and a code block cut there is opened again.
func TestStreamExpiryRollsOver(t *testing.T) {
	fake := &fakeslack.Server{ExpireStreamOnAppend: 2}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "C1", "1.1", person{user: "U1", team: "T1"})
	code := "```go\n" + strings.Repeat("if a < b { fmt.Println(\"<@U1>\") }\n", 60) + "```\n"
	text := words(150) + "\n" + code + words(100)
	if err := a.Reply(context.Background(), th, "1.1", text); err != nil {
		t.Fatal(err)
	}
	got, msgs := streamedText(fake, "C1", "1.1")
	if len(msgs) < 3 {
		t.Fatalf("%d streamed messages, want the reply rolled over several", len(msgs))
	}
	reopened := 0
	for _, m := range msgs {
		if m.Streaming {
			t.Errorf("message %s still streaming", m.TS)
		}
		if strings.HasPrefix(m.Text, "```\n") {
			reopened++
		}
	}
	if reopened == 0 {
		t.Error("no message went on inside the cut code block")
	}
	// Without the reopened fences, the messages add up to the reply.
	var joined strings.Builder
	for i, m := range msgs {
		s := m.Text
		if i > 0 {
			s = strings.TrimPrefix(s, "```\n")
		}
		joined.WriteString(s)
	}
	if want := markdownText(text); joined.String() != want {
		t.Errorf("streamed messages add up to\n%q\nwant\n%q", joined.String(), want)
	}
	if w, want := strings.Fields(got), strings.Fields(markdownText(text)); !slices.Equal(slices.DeleteFunc(w, func(s string) bool { return s == "```" }), slices.DeleteFunc(want, func(s string) bool { return s == "```" })) {
		t.Error("words lost, repeated or out of order")
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestStreamRetryGoesOn: the outbox's retry of a part that failed
// halfway goes on after what landed, in the same message; a stop that
// was refused is all a retry sends.
func TestStreamRetryGoesOn(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "C1", "1.1", person{user: "U1", team: "T1"})
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
	a.noteAuthor(th.Key, "C1", "1.1", person{user: "U1", team: "T1"})
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
// in Slack's syntax, HTML, code blocks and spans holding them, a word
// longer than a chunk, indented code, wide characters and runs of
// whitespace.
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
	}
	return b.String()
}

// TestStreamChunksGolden: the chunks a worst-case answer streams as, per
// part, within Slack's limits: no chunk over markdown_text's 12,000
// characters, none but a part's first starting with whitespace, together
// exactly the part, and no Slack mention syntax outside code.
func TestStreamChunksGolden(t *testing.T) {
	a := New(Options{BotToken: "xoxb-t", Stream: true, Handler: nopHandler{}})
	type part struct {
		Chunks []string `json:"chunks"`
		Fenced []bool   `json:"fenced"`
	}
	var out []part
	for _, p := range a.SplitReply(worstAnswer()) {
		if n := utf8.RuneCountInString(p); n > maxReplyRunes {
			t.Errorf("part of %d characters, limit %d", n, maxReplyRunes)
		}
		md := markdownText(p)
		chunks, fenced := streamChunks(md)
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
		for _, m := range []string{"<@", "<!"} {
			outside := strings.Count(md, m) - strings.Count(md, `\`+m)
			inside := strings.Count(codeOnly(md), m)
			if outside != inside {
				t.Errorf("%d unescaped %s outside code", outside-inside, m)
			}
		}
		out = append(out, part{Chunks: chunks, Fenced: fenced})
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
