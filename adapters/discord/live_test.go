package discord

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakediscord"
)

func liveAdapter(t *testing.T, fake *fakediscord.Server) *Adapter {
	t.Helper()
	fake.AddChannel("C1", 0, "G1")
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	a, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", APIURL: srv.URL, Stream: true, EditEvery: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var liveThread = chat.Thread{Platform: "discord", Key: Key("C1"), Channel: "C1"}

func wordsOf(text string) []string { return regexp.MustCompile(`\S+\s*`).FindAllString(text, -1) }

func botTexts(fake *fakediscord.Server) []string {
	var out []string
	for _, m := range fake.Messages("C1") {
		if m.AuthorID == fakediscord.BotID {
			out = append(out, m.Content)
		}
	}
	return out
}

// TestLiveReplyPostedAndEdited: a live reply is posted at its first
// words, edited as they come, and ends on the whole text; past 2,000
// characters it goes on in the next message, each message only growing
// and none over the limit.
func TestLiveReplyPostedAndEdited(t *testing.T) {
	fake := &fakediscord.Server{}
	a := liveAdapter(t, fake)
	ctx := context.Background()
	var b strings.Builder
	for i := 1; i <= 500; i++ {
		fmt.Fprintf(&b, "word%03d ", i)
		if i%10 == 0 {
			b.WriteString("\n")
		}
	}
	text := strings.TrimSpace(b.String())
	pieces := wordsOf(text)
	if _, err := a.AppendLive(ctx, liveThread, "", "r1", pieces[0]); err != nil && !errors.Is(err, chat.ErrPaceLater) {
		t.Fatal(err)
	}
	if got := botTexts(fake); len(got) != 1 || got[0] != "word001" {
		t.Fatalf("after the first word: %q", got)
	}
	for _, p := range pieces[1:] {
		time.Sleep(time.Millisecond) // as a model writes: the edit budget (1 ms here) has room again
		if _, err := a.AppendLive(ctx, liveThread, "", "r1", p); err != nil && !errors.Is(err, chat.ErrPaceLater) {
			t.Fatal(err)
		}
	}
	if err := a.FinishLive(ctx, liveThread, "", "r1", text, "interrupted"); err != nil {
		t.Fatal(err)
	}
	got := botTexts(fake)
	if len(got) < 2 {
		t.Fatalf("%d messages, want the 4,000-character answer in more than one", len(got))
	}
	if strings.Join(strings.Fields(strings.Join(got, " ")), " ") != strings.Join(strings.Fields(text), " ") {
		t.Errorf("messages add up to something else than the answer:\n%q", got)
	}
	for _, m := range got {
		if n := len([]rune(m)); n > maxContent {
			t.Errorf("a message of %d characters", n)
		}
	}
	if n := len(fake.Calls("PATCH")); n < 10 {
		t.Errorf("%d edits: the reply did not grow as written", n)
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Discord would have refused: %v", v)
	}
}

// TestLiveReplyNotTheAnswer: a reply cut off (the turn stopped) ends
// with the note, and the turn's text is a message of its own; after a
// restart, CloseLive adds the note to a message it did not write.
func TestLiveReplyNotTheAnswer(t *testing.T) {
	fake := &fakediscord.Server{}
	a := liveAdapter(t, fake)
	ctx := context.Background()
	for _, p := range wordsOf("The answer begins ") {
		if _, err := a.AppendLive(ctx, liveThread, "", "r2", p); err != nil && !errors.Is(err, chat.ErrPaceLater) {
			t.Fatal(err)
		}
	}
	if err := a.FinishLive(ctx, liveThread, "", "r2", "Stopped.", "stopped"); err != nil {
		t.Fatal(err)
	}
	if got := botTexts(fake); len(got) != 2 || got[0] != "The answer begins\n*(stopped)*" || got[1] != "Stopped." {
		t.Fatalf("messages %q", got)
	}
	if _, err := a.AppendLive(ctx, liveThread, "", "r3", "Half "); err != nil && !errors.Is(err, chat.ErrPaceLater) {
		t.Fatal(err)
	}
	ref, _ := a.AppendLive(ctx, liveThread, "", "r3", "of it ")
	shown := botTexts(fake)[2] // "Half", or "Half of it" if the edit had room in the budget
	b := liveAdapter(t, fake)  // the next process
	if err := b.CloseLive(ctx, liveThread, ref, "interrupted; answered again below"); err != nil {
		t.Fatal(err)
	}
	if err := b.CloseLive(ctx, liveThread, ref, "interrupted; answered again below"); err != nil {
		t.Fatal(err)
	}
	if got := botTexts(fake); len(got) != 3 || got[2] != shown+"\n*(interrupted; answered again below)*" || !strings.HasPrefix(shown, "Half") {
		t.Errorf("closed reply: %q", got)
	}
}
