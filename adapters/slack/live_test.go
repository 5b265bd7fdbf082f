package slack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/internal/inboxtest"
)

// wordsOf cuts text as the router hands a live reply over: whole words,
// each with the whitespace after it.
func wordsOf(text string) []string { return regexp.MustCompile(`\S+\s*`).FindAllString(text, -1) }

// openFence is the code fence open at the end of md ("" for none).
func openFence(md string) string {
	fence := ""
	for _, line := range strings.SplitAfter(md, "\n") {
		fence, _ = fenceLine(fence, line)
	}
	return fence
}

// joinMessages is what messages add up to, the line that opens a cut code
// block again (reopen) left out at the start of each one that goes on
// inside a block; ok is false when such a message does not start with
// it.
func joinMessages(msgs []fakeslack.Message, reopen string) (joined string, ok bool) {
	var b strings.Builder
	ok = true
	for i, m := range msgs {
		s := m.Text
		if i > 0 && openFence(b.String()) != "" {
			var cut bool
			if s, cut = strings.CutPrefix(s, reopen); !cut {
				ok = false
			}
		}
		b.WriteString(s)
	}
	return b.String(), ok
}

// joinedStreams is what the thread's streamed messages add up to, the
// line that opens a cut code block again at the start of a later one
// left out.
func joinedStreams(t *testing.T, fake *fakeslack.Server, reopen string) (string, []fakeslack.Message) {
	t.Helper()
	_, msgs := streamedText(fake, "C1", "1.1")
	joined, ok := joinMessages(msgs, reopen)
	if !ok {
		t.Errorf("a message that goes on inside a code block does not open it again with %q", reopen)
	}
	return joined, msgs
}

// maxLiveCalls bounds the calls the helpers make for one reply: one that
// asks for more is taken to loop.
const maxLiveCalls = 500

// showCalls counts the requests that show a reply's text.
func showCalls(fake *fakeslack.Server) int {
	n := 0
	for _, m := range []string{"chat.startStream", "chat.appendStream", "chat.stopStream", "chat.postMessage"} {
		n += len(fake.Calls(m))
	}
	return n
}

// callsOn counts the calls of method on message ts.
func callsOn(fake *fakeslack.Server, method, ts string) int {
	n := 0
	for _, c := range fake.Calls(method) {
		if c.Params["ts"] == ts {
			n++
		}
	}
	return n
}

// goneOnIn reports what went on in message ts after its start: its
// appends and stops.
func goneOnIn(fake *fakeslack.Server, ts string) int {
	return callsOn(fake, "chat.appendStream", ts) + callsOn(fake, "chat.stopStream", ts)
}

// appendAll hands text of live reply id over as the router does when it
// has a slot each time: AppendLive with the text, then with "" while it
// returns chat.ErrLiveMore. It returns the messages the calls wrote in,
// in order, and fails when a call that asks for more made no request, or
// when a call that started a message and asks for more went on in it.
func appendAll(ctx context.Context, fake *fakeslack.Server, a *Adapter, th chat.Thread, replyTo, id, text string) ([]chat.MessageRef, error) {
	var refs []chat.MessageRef
	for i := 0; ; i++ {
		if i == maxLiveCalls {
			return refs, fmt.Errorf("AppendLive still had more after %d calls", i)
		}
		before, starts := showCalls(fake), len(fake.Calls("chat.startStream"))
		ref, err := a.AppendLive(ctx, th, replyTo, id, text)
		text = ""
		started := len(fake.Calls("chat.startStream")) > starts
		if started && errors.Is(err, chat.ErrLiveMore) && goneOnIn(fake, ref.ID) != 0 {
			return refs, fmt.Errorf("AppendLive call %d started %s and went on in it before returning it", i+1, ref.ID)
		}
		if ref.ID != "" && (len(refs) == 0 || refs[len(refs)-1] != ref) {
			refs = append(refs, ref)
		}
		if !errors.Is(err, chat.ErrLiveMore) {
			return refs, err
		}
		if showCalls(fake) == before {
			return refs, fmt.Errorf("AppendLive call %d asked for more without a request", i+1)
		}
	}
}

// finishAll finishes live reply id as the router does (finishSteps):
// FinishLive with the same arguments while it returns chat.ErrLiveMore,
// each time with the message it started. It returns those messages, in
// order, and fails when a call asks for more without a new message, or
// when text went on in that message within the call that started it.
func finishAll(ctx context.Context, fake *fakeslack.Server, a *Adapter, th chat.Thread, replyTo, id, text, note string) ([]chat.MessageRef, error) {
	var refs []chat.MessageRef
	for i := 0; ; i++ {
		if i == maxLiveCalls {
			return refs, fmt.Errorf("FinishLive still had more after %d calls", i)
		}
		ref, err := a.FinishLive(ctx, th, replyTo, id, text, note)
		if !errors.Is(err, chat.ErrLiveMore) {
			return refs, err
		}
		if ref.IsZero() || (len(refs) > 0 && refs[len(refs)-1] == ref) {
			return refs, fmt.Errorf("FinishLive call %d went on without starting a message (ref %+v)", i+1, ref)
		}
		if n := goneOnIn(fake, ref.ID); n != 0 {
			return refs, fmt.Errorf("FinishLive call %d started %s and went on in it (%d calls) before returning it", i+1, ref.ID, n)
		}
		refs = append(refs, ref)
	}
}

// tsOf is the timestamps of refs or messages.
func tsOf[T chat.MessageRef | fakeslack.Message](items []T) []string {
	var out []string
	for _, it := range items {
		switch v := any(it).(type) {
		case chat.MessageRef:
			out = append(out, v.ID)
		case fakeslack.Message:
			out = append(out, v.TS)
		}
	}
	return out
}

// noLeadingSpace checks that no append starts with whitespace, which
// Slack drops where chunks join.
func noLeadingSpace(t *testing.T, fake *fakeslack.Server) {
	t.Helper()
	for _, c := range fake.Calls("chat.appendStream") {
		if r, _ := utf8.DecodeRuneInString(c.Params["markdown_text"]); unicode.IsSpace(r) {
			t.Errorf("append into %s starts with whitespace: %q", c.Params["ts"], c.Params["markdown_text"][:min(len(c.Params["markdown_text"]), 20)])
		}
	}
}

// postedIn is the messages of a thread posted whole, not streamed.
func postedIn(fake *fakeslack.Server, channel, thread string) []fakeslack.Message {
	var out []fakeslack.Message
	for _, m := range fake.Messages(channel) {
		if m.ThreadTS == thread && !m.Streamed {
			out = append(out, m)
		}
	}
	return out
}

// TestLiveReplyGrows: a live reply starts with its first words, grows by
// appends as the words come, and ends, stopped, as the Markdown of the
// whole text; an inline code span cut between two deltas is escaped as
// the whole line is, and a long answer goes on in a second message with
// its open code block opened again. Each message the finish starts is
// returned to the router before text goes on in it.
func TestLiveReplyGrows(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	ctx := context.Background()
	text := "Look at `a < b` and <@U9> first. " + words(400) + "\n```go\n" + strings.Repeat("if a < b { return }\n", 60) + "```\nThat is all."
	pieces := wordsOf(text)
	ref, err := a.AppendLive(ctx, th, "1.1", "7.0", pieces[0])
	if err != nil {
		t.Fatalf("first word: %v, want it shown whole in the start", err)
	}
	if n := len(fake.Calls("chat.startStream")); n != 1 {
		t.Fatalf("%d streams started after the first word, want 1", n)
	}
	if starts := fake.Calls("chat.startStream"); ref.ID == "" || ref.Channel != "C1" || len(fake.Streams("C1")) != 1 || fake.Streams("C1")[0].TS != ref.ID {
		t.Fatalf("first word returned %+v, want the message started (%v)", ref, starts)
	}
	// Each later call carries the words that came, and what the platform
	// kept (chat.ErrLiveMore), as the router's next slot does.
	for _, p := range pieces[1 : len(pieces)-1] {
		if _, err := a.AppendLive(ctx, th, "1.1", "7.0", p); err != nil && !errors.Is(err, chat.ErrLiveMore) {
			t.Fatal(err)
		}
	}
	before := len(fake.Streams("C1"))
	refs, err := finishAll(ctx, fake, a, th, "1.1", "7.0", text, "interrupted")
	if err != nil {
		t.Fatal(err)
	}
	got, msgs := joinedStreams(t, fake, "```go\n")
	if want := markdownText(text); got != want {
		t.Errorf("streamed\n%q\nwant\n%q", got, want)
	}
	if len(msgs) < 2 {
		t.Errorf("%d messages, want the long answer in more than one", len(msgs))
	}
	if want := tsOf(msgs[before:]); !slices.Equal(tsOf(refs), want) {
		t.Errorf("the finish returned %v, want the messages it started %v", tsOf(refs), want)
	}
	for _, m := range msgs {
		if m.Streaming {
			t.Errorf("message %s left streaming", m.TS)
		}
		if n := len([]rune(m.Text)); n > maxReplyRunes+len("```go\n") {
			t.Errorf("message %s has %d characters", m.TS, n)
		}
	}
	if !strings.HasPrefix(msgs[0].Text, "Look at `a < b` and \\<@U9> first.") {
		t.Errorf("inline code escaped as text: %q", msgs[0].Text[:40])
	}
	noLeadingSpace(t, fake)
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
	if len(fake.Calls("chat.postMessage")) != 0 {
		t.Error("a live reply was also posted")
	}
	if len(a.lives) != 0 {
		t.Errorf("%d live replies kept after the finish", len(a.lives))
	}
}

// TestLiveReplyExpiry: Slack ends the stream on its second append (the
// held-back native check): the reply goes on in new messages, every word
// once and in order.
func TestLiveReplyExpiry(t *testing.T) {
	fake := &fakeslack.Server{ExpireStreamOnAppend: 2}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	ctx := context.Background()
	text := words(120)
	for _, p := range wordsOf(text) {
		if _, err := a.AppendLive(ctx, th, "1.1", "8.0", p); err != nil && !errors.Is(err, chat.ErrLiveMore) {
			t.Fatal(err)
		}
	}
	if _, err := finishAll(ctx, fake, a, th, "1.1", "8.0", text, "interrupted"); err != nil {
		t.Fatal(err)
	}
	got, msgs := joinedStreams(t, fake, "")
	if got != text {
		t.Errorf("streamed\n%q\nwant\n%q", got, text)
	}
	if len(msgs) < 3 {
		t.Errorf("%d messages; the stream was to roll over several times", len(msgs))
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestLiveReplyNotTheAnswer: the turn was stopped after some words: what
// was shown ends with the note and stops, and the turn's text follows in
// a message of its own, returned to the router as it starts.
func TestLiveReplyNotTheAnswer(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	ctx := context.Background()
	for _, p := range wordsOf("The answer begins here ") {
		if _, err := a.AppendLive(ctx, th, "1.1", "9.0", p); err != nil && !errors.Is(err, chat.ErrLiveMore) {
			t.Fatal(err)
		}
	}
	refs, err := finishAll(ctx, fake, a, th, "1.1", "9.0", "Stopped. The plan is kept as it was.", "stopped")
	if err != nil {
		t.Fatal(err)
	}
	_, msgs := streamedText(fake, "C1", "1.1")
	if len(msgs) != 2 {
		t.Fatalf("messages %+v, want the cut reply and the turn's text", msgs)
	}
	if msgs[0].Text != "The answer begins here _(stopped)_" || msgs[0].Streaming {
		t.Errorf("cut reply %q (streaming %v)", msgs[0].Text, msgs[0].Streaming)
	}
	if msgs[1].Text != "Stopped. The plan is kept as it was." || msgs[1].Streaming {
		t.Errorf("turn's text %q (streaming %v)", msgs[1].Text, msgs[1].Streaming)
	}
	if want := []string{msgs[1].TS}; !slices.Equal(tsOf(refs), want) {
		t.Errorf("the finish returned %v, want the message it started %v", tsOf(refs), want)
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestCloseLiveAfterRestart: a process that did not write a live reply
// (the one after a kill) ends it with the note; one Slack ended already
// needs nothing.
func TestCloseLiveAfterRestart(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	ctx := context.Background()
	ref, err := a.AppendLive(ctx, th, "1.1", "1.0", "Half an ")
	if err != nil || ref.ID == "" {
		t.Fatalf("append: ref %+v, %v", ref, err)
	}
	b, _ := streamAdapter(t, fake) // the next process
	if err := b.CloseLive(ctx, th, ref, "interrupted; answered again below"); err != nil {
		t.Fatal(err)
	}
	_, msgs := streamedText(fake, "C1", "1.1")
	if len(msgs) != 1 || msgs[0].Streaming || msgs[0].Text != "Half an _(interrupted; answered again below)_" {
		t.Fatalf("closed reply %+v", msgs)
	}
	if err := b.CloseLive(ctx, th, ref, "again"); err != nil {
		t.Errorf("closing a stopped stream again: %v", err)
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestFinishLiveReturnsEachStart: each streamed message FinishLive starts
// for a fresh answer (id "", as after a restart), the next ones after a
// roll-over included, is returned with chat.ErrLiveMore as it starts,
// before any text goes on in it, so that the router stores its close
// item first; called again with the same arguments, it goes on where it
// stopped, and the messages add up to the answer.
func TestFinishLiveReturnsEachStart(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	ctx := context.Background()
	text := words(1200) // over one message: it rolls over
	var refs []chat.MessageRef
	for i := 0; ; i++ {
		if i == maxLiveCalls {
			t.Fatalf("FinishLive still had more after %d calls", i)
		}
		ref, err := a.FinishLive(ctx, th, "1.1", "", text, "interrupted")
		if err == nil {
			break
		}
		if !errors.Is(err, chat.ErrLiveMore) {
			t.Fatalf("call %d: %v", i+1, err)
		}
		_, msgs := streamedText(fake, "C1", "1.1")
		if len(msgs) != i+1 {
			t.Fatalf("call %d returned with %d messages, want one started a call", i+1, len(msgs))
		}
		last := msgs[len(msgs)-1]
		if ref.ID != last.TS || ref.Channel != "C1" {
			t.Errorf("call %d returned %+v, want the message it started, %s", i+1, ref, last.TS)
		}
		if !last.Streaming || last.Appends != 0 || goneOnIn(fake, last.TS) != 0 {
			t.Errorf("call %d went on in the message it started (streaming %v, %d appends, %d calls)", i+1, last.Streaming, last.Appends, goneOnIn(fake, last.TS))
		}
		refs = append(refs, ref)
	}
	got, msgs := joinedStreams(t, fake, "")
	if len(msgs) < 2 {
		t.Fatalf("%d streamed messages, want the answer rolled over", len(msgs))
	}
	if !slices.Equal(tsOf(refs), tsOf(msgs)) {
		t.Errorf("returned %v, want every message started, in order: %v", tsOf(refs), tsOf(msgs))
	}
	if got != markdownText(text) {
		t.Errorf("the messages add up to\n%q\nwant\n%q", got, markdownText(text))
	}
	for _, m := range msgs {
		if m.Streaming {
			t.Errorf("message %s left streaming", m.TS)
		}
	}
	noLeadingSpace(t, fake)
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
	if len(a.lives) != 0 {
		t.Errorf("%d live replies kept after the finish", len(a.lives))
	}
}

// TestAppendLiveStartWithTextLeft: words over a message's worth start the
// message and return at once with it and chat.ErrLiveMore; each call on
// (the router's next slots, text "") makes at most one chat.appendStream,
// the router's slot, and nothing is lost or repeated.
func TestAppendLiveStartWithTextLeft(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	ctx := context.Background()
	text := words(600) // over one message
	ref, err := a.AppendLive(ctx, th, "1.1", "3.0", text)
	if !errors.Is(err, chat.ErrLiveMore) {
		t.Fatalf("a start with text left: %v, want chat.ErrLiveMore", err)
	}
	_, msgs := streamedText(fake, "C1", "1.1")
	if len(msgs) != 1 || ref.ID != msgs[0].TS || ref.Channel != "C1" {
		t.Fatalf("returned %+v with messages %+v, want the one started", ref, msgs)
	}
	if n := len(fake.Calls("chat.appendStream")); n != 0 || msgs[0].Appends != 0 {
		t.Errorf("%d appends in the call that started the message, want none", n)
	}
	for i := 0; errors.Is(err, chat.ErrLiveMore); i++ {
		if i == maxLiveCalls {
			t.Fatalf("AppendLive still had more after %d calls", i)
		}
		before, shown := len(fake.Calls("chat.appendStream")), showCalls(fake)
		_, err = a.AppendLive(ctx, th, "1.1", "3.0", "")
		if n := len(fake.Calls("chat.appendStream")) - before; n > 1 {
			t.Errorf("call %d made %d chat.appendStream calls, want at most one", i+2, n)
		}
		if errors.Is(err, chat.ErrLiveMore) && showCalls(fake) == shown {
			t.Fatalf("call %d asked for more without a request", i+2)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := joinedStreams(t, fake, ""); got != markdownText(text) {
		t.Errorf("appended\n%q\nwant\n%q", got, markdownText(text))
	}
	if _, err := finishAll(ctx, fake, a, th, "1.1", "3.0", text, "interrupted"); err != nil {
		t.Fatal(err)
	}
	got, msgs := joinedStreams(t, fake, "")
	if got != markdownText(text) || len(msgs) < 2 {
		t.Errorf("%d messages adding up to\n%q\nwant the text in more than one", len(msgs), got)
	}
	noLeadingSpace(t, fake)
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestAppendLiveOneRequestPerCall: before the reply is whole, each
// AppendLive call shows its text with one request (chat.LiveReplier):
// it starts the reply's message, paced by the router as a post, or
// appends in the slot of the append budget the router took, never both
// and never two of either, also where a message fills up and the reply
// goes on in the next.
func TestAppendLiveOneRequestPerCall(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	ctx := context.Background()
	text := words(900) // over two messages
	count := func() (starts, appends int) {
		return len(fake.Calls("chat.startStream")), len(fake.Calls("chat.appendStream"))
	}
	call := 0
	check := func(words string) error {
		call++
		s0, a0 := count()
		_, err := a.AppendLive(ctx, th, "1.1", "4.0", words)
		s1, a1 := count()
		if s, ap := s1-s0, a1-a0; s+ap > 1 {
			t.Errorf("call %d made %d chat.startStream and %d chat.appendStream calls, want one request", call, s, ap)
		}
		if err != nil && !errors.Is(err, chat.ErrLiveMore) {
			t.Fatalf("call %d: %v", call, err)
		}
		return err
	}
	for _, p := range wordsOf(text) {
		check(p)
	}
	for i := 0; errors.Is(check(""), chat.ErrLiveMore); i++ {
		if i == maxLiveCalls {
			t.Fatalf("AppendLive still had more after %d calls", i)
		}
	}
	if _, msgs := streamedText(fake, "C1", "1.1"); len(msgs) < 2 {
		t.Fatalf("%d messages: the reply was to go on in another", len(msgs))
	}
	if _, err := finishAll(ctx, fake, a, th, "1.1", "4.0", text, "interrupted"); err != nil {
		t.Fatal(err)
	}
	if got, _ := joinedStreams(t, fake, ""); got != markdownText(text) {
		t.Errorf("streamed\n%q\nwant\n%q", got, markdownText(text))
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestLiveStreamedToTheRecipient: a live reply in a channel streams to
// the author of the message answered (recipient_user_id and
// recipient_team_id), its later words appended as markdown_text into the
// message, and its last ones sent with the stop.
func TestLiveStreamedToTheRecipient(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	ctx := context.Background()
	text := "**Done.** The plan is <@U9> & " + words(200)
	pieces := wordsOf(text)
	for _, p := range pieces[:len(pieces)-5] {
		if _, err := appendAll(ctx, fake, a, th, "1.1", "2.0", p); err != nil {
			t.Fatal(err)
		}
	}
	refs, err := finishAll(ctx, fake, a, th, "1.1", "2.0", text, "interrupted")
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 0 {
		t.Errorf("the finish returned %v; the message was started already", refs)
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
	s, ap, st := len(fake.Calls("chat.startStream")), len(fake.Calls("chat.appendStream")), len(fake.Calls("chat.stopStream"))
	if s != 1 || ap < 1 || ap > len(pieces)-6 || st != 1 {
		t.Errorf("start %d, append %d, stop %d; want 1, 1 to %d (one a call at most), 1", s, ap, st, len(pieces)-6)
	}
	for _, c := range fake.Calls("chat.appendStream") {
		if c.Params["markdown_text"] == "" || c.Params["ts"] != msgs[0].TS {
			t.Errorf("append %v, want markdown_text into %s", c.Params, msgs[0].TS)
		}
	}
	if stop := fake.Calls("chat.stopStream")[0]; stop.Params["markdown_text"] != strings.Join(pieces[len(pieces)-5:], "") {
		t.Errorf("the stop carried %q, want the last words", stop.Params["markdown_text"])
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
	if len(fake.Calls("chat.postMessage")) != 0 {
		t.Error("a streamed reply was also posted")
	}
}

// TestLiveExpiryRollsOver: Slack ends a stream (here on every stream's
// second append): the rest goes on in a new streamed message, every word
// once and in order, and a code block cut there is opened again with its
// own fence and language.
func TestLiveExpiryRollsOver(t *testing.T) {
	for _, open := range []string{"```go", "~~~~ go", "````"} {
		t.Run(open, func(t *testing.T) {
			fake := &fakeslack.Server{ExpireStreamOnAppend: 2}
			a, _ := streamAdapter(t, fake)
			th := channelThread
			a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
			ctx := context.Background()
			closing := strings.TrimRight(strings.Fields(open)[0], "go")
			code := open + "\n" + strings.Repeat("if a < b { fmt.Println(\"<@U1>\") }\n", 60) + closing + "\n"
			text := words(150) + "\n" + code + words(100)
			for _, p := range wordsOf(text) {
				if _, err := a.AppendLive(ctx, th, "1.1", "5.0", p); err != nil && !errors.Is(err, chat.ErrLiveMore) {
					t.Fatal(err)
				}
			}
			if _, err := finishAll(ctx, fake, a, th, "1.1", "5.0", text, "interrupted"); err != nil {
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
				if i > 0 && strings.HasPrefix(m.Text, open+"\n") {
					reopened++
				}
				safeOutsideCode(t, fmt.Sprintf("message %d", i), "", m.Text) // each stands alone
			}
			if reopened == 0 {
				t.Errorf("no message went on inside the cut code block with %q", open)
			}
			// Without the reopened fences, the messages add up to the reply.
			joined, ok := joinMessages(msgs, open+"\n")
			if !ok {
				t.Errorf("a message that goes on inside the code block does not open it again with %q", open)
			}
			if want := markdownText(text); joined != want {
				t.Errorf("streamed messages add up to\n%q\nwant\n%q", joined, want)
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

// TestLiveRetryGoesOn: the outbox's retry of a finish that failed halfway
// (same arguments) goes on after what landed, in the same message; after
// a stop that was refused, the retry appends nothing again. The same
// text once finished is a new reply.
func TestLiveRetryGoesOn(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	text := words(600) // over one message: the finish appends
	ctx := context.Background()
	fake.Fail("chat.appendStream", "internal_error") // the first append fails
	refs, err := finishAll(ctx, fake, a, th, "1.1", "", text, "interrupted")
	if o, _ := chat.Classify(err); err == nil || o != chat.Retry {
		t.Fatalf("first attempt: %v, want a failure worth a retry", err)
	}
	fake.FailHTTP("chat.stopStream", http.StatusTooManyRequests, 1)
	more, err := finishAll(ctx, fake, a, th, "1.1", "", text, "interrupted")
	refs = append(refs, more...)
	var rl *chat.RateLimitError
	if !errors.As(err, &rl) {
		t.Fatalf("second attempt: %v, want the stop's 429", err)
	}
	appends := len(fake.Calls("chat.appendStream"))
	more, err = finishAll(ctx, fake, a, th, "1.1", "", text, "interrupted")
	refs = append(refs, more...)
	if err != nil {
		t.Fatalf("third attempt: %v", err)
	}
	if n := len(fake.Calls("chat.appendStream")); n != appends {
		t.Errorf("the last retry appended %d more, want none", n-appends)
	}
	got, msgs := joinedStreams(t, fake, "")
	if len(msgs) != 2 || got != markdownText(text) {
		t.Errorf("%d messages with %q, want the reply once in two", len(msgs), got)
	}
	if !slices.Equal(tsOf(refs), tsOf(msgs)) {
		t.Errorf("the attempts returned %v, want each message started once, in order: %v", tsOf(refs), tsOf(msgs))
	}
	if n := len(fake.Calls("chat.startStream")); n != 2 {
		t.Errorf("%d streams started, want 2: a retry started another", n)
	}
	// The same text again is a new reply, not a retry.
	if _, err := finishAll(ctx, fake, a, th, "1.1", "", text, "interrupted"); err != nil {
		t.Fatal(err)
	}
	if _, msgs := streamedText(fake, "C1", "1.1"); len(msgs) != 4 {
		t.Errorf("%d streamed messages after the same reply twice, want 4", len(msgs))
	}
	noLeadingSpace(t, fake)
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestLiveRecipient: in a channel a stream needs its recipient: the
// author of the message answered, else (after a restart) the thread's
// first message's, read from Slack; with none the answer is posted
// whole. A DM needs none.
func TestLiveRecipient(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	ctx := context.Background()
	// Nothing known, the thread's root not in Slack: posted whole.
	lost := chat.Thread{Platform: "slack", Key: Key("T1", "C1", "5.1"), Channel: "C1", ThreadID: "5.1"}
	refs, err := finishAll(ctx, fake, a, lost, "", "", "an answer with <!channel>", "interrupted")
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 0 {
		t.Errorf("returned %v, want no stream started", refs)
	}
	var whole []fakeslack.Message
	for _, m := range fake.Messages("C1") {
		if m.ThreadTS == "5.1" {
			whole = append(whole, m)
		}
	}
	if len(whole) != 1 || whole[0].Streamed || !strings.Contains(whole[0].Blocks, `"type":"markdown"`) || !strings.Contains(whole[0].Blocks, `\\u003c!channel`) {
		t.Errorf("messages %+v, want the answer whole in a markdown block, < escaped", whole)
	}
	// The root is in Slack: its author is the recipient.
	fake.CallbackBody("EvRoot", map[string]any{"type": "message", "user": "U7", "channel": "C1", "ts": "6.1", "text": "task"})
	th := chat.Thread{Platform: "slack", Key: Key("T1", "C1", "6.1"), Channel: "C1", ThreadID: "6.1"}
	if _, err := finishAll(ctx, fake, a, th, "", "", "hello", "interrupted"); err != nil {
		t.Fatal(err)
	}
	if _, msgs := streamedText(fake, "C1", "6.1"); len(msgs) != 1 || msgs[0].StreamUser != "U7" || msgs[0].StreamTeam != "T1" || msgs[0].Text != "hello" {
		t.Errorf("streams %+v, want one to U7 in T1", msgs)
	}
	dm := chat.Thread{Platform: "slack", Key: Key("T1", "D1", "7.1"), Channel: "D1", ThreadID: "7.1"}
	if _, err := finishAll(ctx, fake, a, dm, "", "", "hello", "interrupted"); err != nil {
		t.Fatal(err)
	}
	if _, msgs := streamedText(fake, "D1", "7.1"); len(msgs) != 1 || msgs[0].Text != "hello" {
		t.Errorf("DM streams %+v, want one without a recipient", msgs)
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestLiveStreamsDeniedPostWhole: a token or app that may not stream has
// its answers posted whole, from the first refusal on, said once.
func TestLiveStreamsDeniedPostWhole(t *testing.T) {
	fake := &fakeslack.Server{}
	a, log := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	fake.Fail("chat.startStream", "not_allowed_token_type")
	for _, text := range []string{"first", "second"} {
		refs, err := finishAll(context.Background(), fake, a, th, "1.1", "", text, "interrupted")
		if err != nil {
			t.Fatal(err)
		}
		if len(refs) != 0 {
			t.Errorf("%q: returned %v, want no stream started", text, refs)
		}
	}
	if n := len(fake.Calls("chat.startStream")); n != 1 {
		t.Errorf("%d stream starts, want 1", n)
	}
	if posted := postedIn(fake, "C1", "1.1"); len(posted) != 2 || posted[0].Text != "first" || posted[1].Text != "second" {
		t.Errorf("posted %+v, want both answers posted whole", posted)
	}
	if n := log.count("streaming is not available"); n != 1 {
		t.Errorf("logged %d times, want once", n)
	}
}

// TestLiveSlackConnectRecipient: in a channel shared with another
// workspace the recipient's team is the user's own (user_team), not the
// workspace's, whether the author is known from the event or read from
// Slack after a restart.
func TestLiveSlackConnectRecipient(t *testing.T) {
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
	if _, err := finishAll(ctx, fake, a, th, "8.1", "", "hello", "interrupted"); err != nil {
		t.Fatalf("answer to a user of another workspace: %v", err)
	}
	if _, msgs := streamedText(fake, "C1", "8.1"); len(msgs) != 1 || msgs[0].StreamUser != "U5" || msgs[0].StreamTeam != "T2" {
		t.Errorf("streams %+v, want one to U5 in T2", msgs)
	}
	// After a restart: the recipient is read from the thread's root.
	b := New(Options{BotToken: "xoxb-t", APIURL: srv.URL + "/api/", Stream: true, AppendsPerMinute: 60000})
	if err := b.Start(t.Context(), nopHandler{}); err != nil {
		t.Fatal(err)
	}
	if _, err := finishAll(ctx, fake, b, th, "", "", "hello again", "interrupted"); err != nil {
		t.Fatalf("answer after a restart: %v", err)
	}
	if _, msgs := streamedText(fake, "C1", "8.1"); len(msgs) != 2 || msgs[1].StreamTeam != "T2" {
		t.Errorf("streams %+v, want the second to T2 too", msgs)
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestLiveRecipientNotFound: team_not_found or user_not_found from
// chat.startStream posts the answer whole; from the chat.stopStream that
// ends a message all of whose text landed, the answer is delivered; from
// the stop that was to carry the answer's last words, they are posted
// whole.
func TestLiveRecipientNotFound(t *testing.T) {
	for _, code := range []string{"team_not_found", "user_not_found"} {
		t.Run(code, func(t *testing.T) {
			fake := &fakeslack.Server{}
			a, _ := streamAdapter(t, fake)
			th := channelThread
			a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
			ctx := context.Background()
			fake.Fail("chat.startStream", code)
			if _, err := finishAll(ctx, fake, a, th, "1.1", "", "first <@U2>", "interrupted"); err != nil {
				t.Fatalf("start refused: %v, want the answer posted whole", err)
			}
			if msgs := fake.Messages("C1"); len(msgs) != 1 || msgs[0].Streamed || !strings.Contains(msgs[0].Text, `\<@U2>`) {
				t.Errorf("messages %+v, want the answer posted whole, escaped", msgs)
			}
			fake.Fail("chat.stopStream", code)
			text := words(100)
			if _, err := finishAll(ctx, fake, a, th, "1.1", "", text, "interrupted"); err != nil {
				t.Fatalf("stop refused: %v, want the streamed answer delivered", err)
			}
			if got, _ := streamedText(fake, "C1", "1.1"); got != markdownText(text) {
				t.Errorf("streamed %q, want the answer", got)
			}
			// The stop that carries the last words is refused: they are
			// posted whole, after what the stream showed.
			other := chat.Thread{Platform: "slack", Key: Key("T1", "C1", "2.1"), Channel: "C1", ThreadID: "2.1"}
			a.noteAuthor(other.Key, "2.1", person{user: "U1", team: "T1"})
			if _, err := appendAll(ctx, fake, a, other, "2.1", "6.0", "Some words "); err != nil {
				t.Fatal(err)
			}
			fake.Fail("chat.stopStream", code)
			last := "Some words and the rest for <@U3>"
			if _, err := finishAll(ctx, fake, a, other, "2.1", "6.0", last, "interrupted"); err != nil {
				t.Fatalf("the last stop refused: %v, want the rest posted whole", err)
			}
			streamed, msgs := streamedText(fake, "C1", "2.1")
			posted := postedIn(fake, "C1", "2.1")
			if len(msgs) != 1 || msgs[0].Streaming || len(posted) != 1 {
				t.Fatalf("streams %+v and posts %+v, want the stream stopped and the rest posted", msgs, posted)
			}
			if got := streamed + posted[0].Text; got != markdownText(last) {
				t.Errorf("streamed %q and posted %q, want together %q", streamed, posted[0].Text, markdownText(last))
			}
			if v := fake.Violations(); len(v) > 0 {
				t.Errorf("Slack would have refused: %v", v)
			}
		})
	}
}

// TestLivePermanentFailureForgetsProgress: an answer Slack refused for
// good is forgotten, so the same text later is an answer of its own,
// whole.
func TestLivePermanentFailureForgetsProgress(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	ctx := context.Background()
	text := words(600) // over one message: the finish appends
	fake.Fail("chat.appendStream", "is_archived")
	_, err := finishAll(ctx, fake, a, th, "1.1", "", text, "interrupted")
	if o, _ := chat.Classify(err); err == nil || o != chat.Permanent {
		t.Fatalf("got %v, want a permanent failure", err)
	}
	if len(a.lives) != 0 {
		t.Errorf("%d live replies kept after a permanent failure", len(a.lives))
	}
	refs, err := finishAll(ctx, fake, a, th, "1.1", "", text, "interrupted")
	if err != nil {
		t.Fatal(err)
	}
	_, msgs := streamedText(fake, "C1", "1.1")
	if len(msgs) < 2 {
		t.Fatalf("%d streamed messages, want the failed one and the answer again", len(msgs))
	}
	again := msgs[1:]
	if !slices.Equal(tsOf(refs), tsOf(again)) {
		t.Errorf("returned %v, want the messages started again %v", tsOf(refs), tsOf(again))
	}
	if got, _ := joinMessages(again, ""); got != markdownText(text) {
		t.Errorf("the answer again adds up to\n%q\nwant the whole text", got)
	}
}

// TestLiveStopRefusedAfterEverything: once all of the answer landed, a
// stop Slack refuses for good does not make it undeliverable.
func TestLiveStopRefusedAfterEverything(t *testing.T) {
	fake := &fakeslack.Server{}
	a, log := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	ctx := context.Background()
	text := words(200)
	fake.Fail("chat.stopStream", "is_archived")
	if _, err := finishAll(ctx, fake, a, th, "1.1", "", text, "interrupted"); err != nil {
		t.Fatalf("got %v, want the answer delivered: all of it landed", err)
	}
	if log.count("stream stop refused") == 0 {
		t.Error("the refused stop was not logged")
	}
	// The answer is done: the same text again is a new one.
	if _, err := finishAll(ctx, fake, a, th, "1.1", "", text, "interrupted"); err != nil {
		t.Fatal(err)
	}
	if _, msgs := streamedText(fake, "C1", "1.1"); len(msgs) != 2 || msgs[1].Text != markdownText(text) {
		t.Errorf("%d streamed messages, want the same text streamed again whole", len(msgs))
	}
}

// TestLiveStreamOffMidAnswerPostsTheRest: when streaming turns off for
// the workspace while an answer is half streamed, its retry posts only
// what did not land, the code block it was cut in opened again.
func TestLiveStreamOffMidAnswerPostsTheRest(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	ctx := context.Background()
	text := "```python\n" + strings.Repeat("print(a < b)\n", 400) + "```\nafter <@U2>" // over one message
	fake.Fail("chat.appendStream", "internal_error")
	if _, err := finishAll(ctx, fake, a, th, "1.1", "", text, "interrupted"); err == nil {
		t.Fatal("the first attempt succeeded; want its append to fail")
	}
	other := chat.Thread{Platform: "slack", Key: Key("T1", "C1", "2.1"), Channel: "C1", ThreadID: "2.1"}
	a.noteAuthor(other.Key, "2.1", person{user: "U1", team: "T1"})
	fake.Fail("chat.startStream", "not_allowed_token_type")
	if _, err := finishAll(ctx, fake, a, other, "2.1", "", "another answer", "interrupted"); err != nil {
		t.Fatal(err)
	}
	if _, err := finishAll(ctx, fake, a, th, "1.1", "", text, "interrupted"); err != nil {
		t.Fatalf("retry: %v", err)
	}
	streamed, msgs := streamedText(fake, "C1", "1.1")
	if len(msgs) != 1 || msgs[0].Streaming {
		t.Fatalf("streamed messages %+v, want the one started, stopped", msgs)
	}
	posted := postedIn(fake, "C1", "1.1")
	if len(posted) != 1 {
		t.Fatalf("%d messages posted, want the rest in one", len(posted))
	}
	md := markdownText(text)
	rest, ok := strings.CutPrefix(md, streamed)
	if !ok || posted[0].Text != "```python\n"+rest {
		t.Errorf("posted %q, want what did not land (%d of %d characters), the code block opened again", posted[0].Text[:min(len(posted[0].Text), 40)], len(rest), len(md))
	}
	if !strings.Contains(posted[0].Blocks, `"type":"markdown"`) {
		t.Errorf("the rest posted as %s, want a markdown block", posted[0].Blocks)
	}
}

// TestLiveCutBeforeLineEnd: a message filled by a run without a space
// that ends just before a line end keeps the line end: the next message
// has it, and no append starts with whitespace Slack would drop.
func TestLiveCutBeforeLineEnd(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	ctx := context.Background()
	intro := "intro "
	run := strings.Repeat("x", maxReplyRunes-len(intro)) + "\nsecond line"
	if _, err := appendAll(ctx, fake, a, th, "1.1", "6.0", intro); err != nil {
		t.Fatal(err)
	}
	if _, err := appendAll(ctx, fake, a, th, "1.1", "6.0", run); err != nil {
		t.Fatal(err)
	}
	if _, err := finishAll(ctx, fake, a, th, "1.1", "6.0", intro+run, "interrupted"); err != nil {
		t.Fatal(err)
	}
	got, msgs := joinedStreams(t, fake, "")
	if got != markdownText(intro+run) {
		t.Errorf("streamed %q, want %q", got, markdownText(intro+run))
	}
	if len(msgs) != 2 {
		t.Errorf("%d messages, want the run to fill the first", len(msgs))
	}
	noLeadingSpace(t, fake)
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestLivePartsKeepCodeFences: an answer whose code block is longer than
// a message goes on in the next with the block opened again, with its
// own fence and language; every message reads as the answer does, alone
// and in sequence: the mentions after the block stay escaped, the code
// stays as it is (a message is filled to its limit, so a code line may
// go on in the next one, inside the reopened block).
func TestLivePartsKeepCodeFences(t *testing.T) {
	for _, fence := range []string{"```", "~~~~"} {
		t.Run(fence, func(t *testing.T) {
			fake := &fakeslack.Server{}
			a, _ := streamAdapter(t, fake)
			th := channelThread
			a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
			text := "Here is the fix for <@U2>:\n\n" + fence + "go\n" + strings.Repeat("if a < b { a = b }\n", 250) + fence + "\n\n<!channel> <@U1> please review.\n"
			refs, err := finishAll(context.Background(), fake, a, th, "1.1", "", text, "interrupted")
			if err != nil {
				t.Fatal(err)
			}
			_, msgs := streamedText(fake, "C1", "1.1")
			if len(msgs) < 2 {
				t.Fatalf("%d streamed messages: the code block should not fit in one", len(msgs))
			}
			if !slices.Equal(tsOf(refs), tsOf(msgs)) {
				t.Errorf("returned %v, want every message started %v", tsOf(refs), tsOf(msgs))
			}
			open := ""
			var all strings.Builder
			for i, m := range msgs {
				if n := utf8.RuneCountInString(m.Text); n > maxReplyRunes+len(fence+"go\n") {
					t.Errorf("message %d of %d characters, limit %d", i, n, maxReplyRunes)
				}
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
			// Without the reopened fences, the messages add up to the
			// answer: the code as it is.
			if joined, ok := joinMessages(msgs, fence+"go\n"); !ok || joined != markdownText(text) {
				t.Errorf("the messages add up to\n%q\nwant\n%q", joined, markdownText(text))
			}
			if v := fake.Violations(); len(v) > 0 {
				t.Errorf("Slack would have refused: %v", v)
			}
		})
	}
}

// TestDropSendsDropsTheTeamsLiveReplies: an uninstall drops the progress
// of the live replies in the teams' threads, and only theirs.
func TestDropSendsDropsTheTeamsLiveReplies(t *testing.T) {
	a := New(Options{BotToken: "xoxb-t", Stream: true})
	one := chat.Thread{Platform: "slack", Key: Key("T1", "C1", "1.1"), Channel: "C1", ThreadID: "1.1"}
	other := chat.Thread{Platform: "slack", Key: Key("T2", "C2", "2.1"), Channel: "C2", ThreadID: "2.1"}
	a.liveOf(one, "a").raw = "half an "
	a.liveOf(one, "b").raw = "another "
	a.liveOf(other, "c").raw = "kept "
	if n := a.dropSends([]string{"T1"}); n != 2 {
		t.Errorf("dropped %d, want T1's 2", n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.lives["c"]; len(a.lives) != 1 || !ok {
		t.Errorf("left %d live replies, want T2's only", len(a.lives))
	}
}
