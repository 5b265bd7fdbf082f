package slack

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakeslack"
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

// markdownBlock is the text of blocks when they are one markdown block.
func markdownBlock(blocks string) (string, bool) {
	var bs []map[string]any
	if err := json.Unmarshal([]byte(blocks), &bs); err != nil || len(bs) != 1 || bs[0]["type"] != "markdown" {
		return "", false
	}
	text, ok := bs[0]["text"].(string)
	return text, ok
}

// TestStreamReplyPostsMarkdown: with Options.Stream a reply (not an
// answer shown as written) is posted whole, one chat.postMessage per
// part, each in a markdown block of the part made safe (markdownText:
// every < outside code escaped, the code as it is), tagged with its send
// key; nothing is streamed.
func TestStreamReplyPostsMarkdown(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"}) // a stream could go to U1
	if err := a.Reply(t.Context(), th, "1.1", "**Done.** The plan is <@U9> & `a <b>` <!channel>"); err != nil {
		t.Fatal(err)
	}
	calls := fake.Calls("chat.postMessage")
	if len(calls) != 1 {
		t.Fatalf("%d posts, want 1", len(calls))
	}
	want := "**Done.** The plan is \\<@U9> & `a <b>` \\<!channel>"
	if got, ok := markdownBlock(calls[0].Params["blocks"]); !ok || got != want || calls[0].Params["text"] != want {
		t.Errorf("posted text %q, blocks %s; want a markdown block of %q", calls[0].Params["text"], calls[0].Params["blocks"], want)
	}

	// A worst-case answer, in parts, tagged.
	text := worstAnswer()
	parts := a.SplitReply(text)
	if len(parts) < 3 {
		t.Fatalf("%d parts: the worst case should take several", len(parts))
	}
	ctx := chat.WithSend(t.Context(), "outbox/k/1", time.Now(), false)
	if err := a.Reply(ctx, th, "1.1", text); err != nil {
		t.Fatal(err)
	}
	calls = fake.Calls("chat.postMessage")[1:]
	if len(calls) != len(parts) {
		t.Fatalf("%d posts, want one per part (%d)", len(calls), len(parts))
	}
	posted := fake.Messages("C1")[1:]
	for i, c := range calls {
		md := markdownText(parts[i])
		got, ok := markdownBlock(c.Params["blocks"])
		if !ok || got != md {
			t.Errorf("part %d: blocks %.80s…, want one markdown block of the part made safe", i, c.Params["blocks"])
			continue
		}
		if c.Params["text"] != md {
			t.Errorf("part %d: text %.40q…, want the block's", i, c.Params["text"])
		}
		if n := utf8.RuneCountInString(got); n > maxMarkdownRunes {
			t.Errorf("part %d: %d characters, over a markdown block's %d", i, n, maxMarkdownRunes)
		}
		safeOutsideCode(t, fmt.Sprintf("part %d", i), "", got) // each reads alone
		for _, m := range []string{"<@", "<!"} {
			outside := strings.Count(got, m) - strings.Count(got, `\`+m)
			inside := strings.Count(codeOnly(got), m)
			if outside != inside {
				t.Errorf("part %d: %d unescaped %s outside code", i, outside-inside, m)
			}
		}
		if key := fmt.Sprintf(`"send_key":"outbox/k/1/%d"`, i); i < len(posted) && !strings.Contains(posted[i].Metadata, key) {
			t.Errorf("part %d: metadata %s, want %s", i, posted[i].Metadata, key)
		}
	}
	for _, m := range []string{"chat.startStream", "chat.appendStream", "chat.stopStream"} {
		if n := len(fake.Calls(m)); n != 0 {
			t.Errorf("%d %s calls; a reply is not streamed", n, m)
		}
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestStreamReplyPartsKeepCodeFences: a reply whose code block is longer
// than a part is split with the block closed at the end of one part and
// opened again, with its own fence and language, at the start of the
// next; every message reads as the reply does, alone and in sequence:
// the mentions after the block stay escaped, the code stays as it is.
func TestStreamReplyPartsKeepCodeFences(t *testing.T) {
	for _, fence := range []string{"```", "~~~~"} {
		t.Run(fence, func(t *testing.T) {
			fake := &fakeslack.Server{}
			a, _ := streamAdapter(t, fake)
			th := channelThread
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
			msgs := fake.Messages("C1")
			if len(msgs) != len(parts) {
				t.Fatalf("%d messages, want one per part (%d)", len(msgs), len(parts))
			}
			open := ""
			var all strings.Builder
			for i, m := range msgs {
				md, ok := markdownBlock(m.Blocks)
				if !ok || m.Streamed {
					t.Fatalf("message %d: blocks %.80s (streamed %v), want a markdown block posted", i, m.Blocks, m.Streamed)
				}
				safeOutsideCode(t, fmt.Sprintf("message %d alone", i), "", md)
				open = safeOutsideCode(t, fmt.Sprintf("message %d in the reply", i), open, md+"\n")
				if i > 0 && !strings.HasPrefix(md, fence+"go\n") {
					t.Errorf("message %d starts %q, want the code block opened again with %sgo", i, md[:min(len(md), 12)], fence)
				}
				all.WriteString(md)
			}
			for _, want := range []string{`\<!channel>`, `\<@U1>`, `\<@U2>`} {
				if !strings.Contains(all.String(), want) {
					t.Errorf("the messages lack %s", want)
				}
			}
			if n := strings.Count(all.String(), "if a < b { a = b }\n"); n != 250 {
				t.Errorf("%d code lines as they were, want 250", n)
			}
			if len(fake.Calls("chat.startStream")) != 0 {
				t.Error("a reply was streamed")
			}
			if v := fake.Violations(); len(v) > 0 {
				t.Errorf("Slack would have refused: %v", v)
			}
		})
	}
}
