package slack

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakeslack"
)

// wordsOf cuts text as the router hands a live reply over: whole words,
// each with the whitespace after it.
func wordsOf(text string) []string { return regexp.MustCompile(`\S+\s*`).FindAllString(text, -1) }

// joinedStreams is what the thread's streamed messages add up to, the
// line that opens a cut code block again at the start of a later one
// left out.
func joinedStreams(fake *fakeslack.Server, reopen string) (string, []fakeslack.Message) {
	_, msgs := streamedText(fake, "C1", "1.1")
	var b strings.Builder
	for i, m := range msgs {
		s := m.Text
		if i > 0 && reopen != "" {
			s = strings.TrimPrefix(s, reopen)
		}
		b.WriteString(s)
	}
	return b.String(), msgs
}

// TestLiveReplyGrows: a live reply starts with its first words, grows by
// appends as the words come, and ends, stopped, as the Markdown of the
// whole text; an inline code span cut between two deltas is escaped as
// the whole line is, and a long answer goes on in a second message with
// its open code block opened again.
func TestLiveReplyGrows(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	ctx := context.Background()
	text := "Look at `a < b` and <@U9> first. " + words(400) + "\n```go\n" + strings.Repeat("if a < b { return }\n", 60) + "```\nThat is all."
	pieces := wordsOf(text)
	if _, err := a.AppendLive(ctx, th, "1.1", "7.0", pieces[0]); err != nil && !errors.Is(err, chat.ErrPaceLater) {
		t.Fatal(err)
	}
	if n := len(fake.Calls("chat.startStream")); n != 1 {
		t.Fatalf("%d streams started after the first word, want 1", n)
	}
	for _, p := range pieces[1 : len(pieces)-1] {
		if _, err := a.AppendLive(ctx, th, "1.1", "7.0", p); err != nil && !errors.Is(err, chat.ErrPaceLater) {
			t.Fatal(err)
		}
	}
	if err := a.FinishLive(ctx, th, "1.1", "7.0", text, "interrupted"); err != nil {
		t.Fatal(err)
	}
	got, msgs := joinedStreams(fake, "```go\n")
	if want := markdownText(text); got != want {
		t.Errorf("streamed\n%q\nwant\n%q", got, want)
	}
	if len(msgs) < 2 {
		t.Errorf("%d messages, want the long answer in more than one", len(msgs))
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
		if _, err := a.AppendLive(ctx, th, "1.1", "8.0", p); err != nil && !errors.Is(err, chat.ErrPaceLater) {
			t.Fatal(err)
		}
	}
	if err := a.FinishLive(ctx, th, "1.1", "8.0", text, "interrupted"); err != nil {
		t.Fatal(err)
	}
	got, msgs := joinedStreams(fake, "")
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
// a message of its own.
func TestLiveReplyNotTheAnswer(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	ctx := context.Background()
	for _, p := range wordsOf("The answer begins here ") {
		if _, err := a.AppendLive(ctx, th, "1.1", "9.0", p); err != nil && !errors.Is(err, chat.ErrPaceLater) {
			t.Fatal(err)
		}
	}
	if err := a.FinishLive(ctx, th, "1.1", "9.0", "Stopped. The plan is kept as it was.", "stopped"); err != nil {
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
	_ = chat.MessageRef{}
}

// TestLiveStartedIsNoted: each streamed message a live call starts, a
// fresh answer's in FinishLive and the next one after a roll-over
// included, is reported to the router (chat.LiveStarted) as it starts,
// before the call returns.
func TestLiveStartedIsNoted(t *testing.T) {
	fake := &fakeslack.Server{}
	a, _ := streamAdapter(t, fake)
	th := channelThread
	a.noteAuthor(th.Key, "1.1", person{user: "U1", team: "T1"})
	var started []chat.MessageRef
	ctx := chat.WithLiveStarted(context.Background(), func(ref chat.MessageRef) { started = append(started, ref) })
	text := words(1200) // over one message: it rolls over
	if err := a.FinishLive(ctx, th, "1.1", "", text, "interrupted"); err != nil {
		t.Fatal(err)
	}
	_, msgs := streamedText(fake, "C1", "1.1")
	if len(msgs) < 2 || len(started) != len(msgs) {
		t.Fatalf("%d streamed messages, %d noted: %+v", len(msgs), len(started), started)
	}
	for i, m := range msgs {
		if started[i].ID != m.TS || started[i].Channel != "C1" {
			t.Errorf("message %d %s noted as %+v", i, m.TS, started[i])
		}
	}
}
