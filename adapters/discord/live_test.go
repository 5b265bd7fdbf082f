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

// appendAll hands text to live reply id as the router does: AppendLive,
// then again with no new text while the adapter keeps some
// (chat.ErrLiveMore). It returns the messages it started.
func appendAll(ctx context.Context, t *testing.T, a *Adapter, id, text string) []chat.MessageRef {
	t.Helper()
	var refs []chat.MessageRef
	var last chat.MessageRef
	for i := 0; ; i++ {
		ref, err := a.AppendLive(ctx, liveThread, "", id, text)
		if ref != last && !ref.IsZero() {
			refs, last = append(refs, ref), ref
		}
		if !errors.Is(err, chat.ErrLiveMore) {
			if err != nil {
				t.Fatal(err)
			}
			return refs
		}
		if i > 100 {
			t.Fatalf("AppendLive %q: ErrLiveMore for ever", id)
		}
		text = ""
	}
}

// finishAll ends live reply id as the router does: FinishLive with the
// same arguments while it starts messages (chat.ErrLiveMore). It returns
// the messages it started.
func finishAll(ctx context.Context, t *testing.T, a *Adapter, id, text, note string) []chat.MessageRef {
	t.Helper()
	var refs []chat.MessageRef
	for i := 0; ; i++ {
		ref, err := a.FinishLive(ctx, liveThread, "", id, text, note)
		if !errors.Is(err, chat.ErrLiveMore) {
			if err != nil {
				t.Fatal(err)
			}
			return refs
		}
		if ref.IsZero() || len(refs) > 0 && refs[len(refs)-1] == ref || i > 100 {
			t.Fatalf("FinishLive %q: ErrLiveMore without a new message (%+v after %+v)", id, ref, refs)
		}
		refs = append(refs, ref)
	}
}

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
	appendAll(ctx, t, a, "r1", pieces[0])
	if got := botTexts(fake); len(got) != 1 || got[0] != "word001" {
		t.Fatalf("after the first word: %q", got)
	}
	for _, p := range pieces[1:] {
		time.Sleep(time.Millisecond) // as a model writes: the edit budget (1 ms here) has room again
		before := len(fake.Calls("PATCH"))
		appendAll(ctx, t, a, "r1", p)
		if n := len(fake.Calls("PATCH")) - before; n > 2 {
			t.Fatalf("%d edits for one word: an append is one edit a call (one more freezes a full message)", n)
		}
	}
	finishAll(ctx, t, a, "r1", text, "interrupted")
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
		appendAll(ctx, t, a, "r2", p)
	}
	if refs := finishAll(ctx, t, a, "r2", "Stopped.", "stopped"); len(refs) != 1 {
		t.Fatalf("the text that follows the note started %d messages, want 1 noted", len(refs))
	}
	if got := botTexts(fake); len(got) != 2 || got[0] != "The answer begins\n*(stopped)*" || got[1] != "Stopped." {
		t.Fatalf("messages %q", got)
	}
	appendAll(ctx, t, a, "r3", "Half ")
	ref, _ := a.AppendLive(ctx, liveThread, "", "r3", "of it ")
	shown := botTexts(fake)[2]
	b := liveAdapter(t, fake) // the next process
	if err := b.CloseLive(ctx, liveThread, ref, "interrupted; answered again below"); err != nil {
		t.Fatal(err)
	}
	if err := b.CloseLive(ctx, liveThread, ref, "interrupted; answered again below"); err != nil {
		t.Fatal(err)
	}
	if got := botTexts(fake); len(got) != 3 || got[2] != shown+"\n*(interrupted; answered again below)*" || shown != "Half of it" {
		t.Errorf("closed reply: %q", got)
	}
}

// TestLiveFinishNotesEachMessage: an answer no words were shown for is
// posted by FinishLive, over 2,000 characters in two messages: each call
// that posts a message returns at once with its id (chat.ErrLiveMore),
// before any text goes on in it, so the router notes every message the
// reply is written in, in order.
func TestLiveFinishNotesEachMessage(t *testing.T) {
	fake := &fakediscord.Server{}
	a := liveAdapter(t, fake)
	ctx := context.Background()
	text := strings.TrimSpace(strings.Repeat("lorem ipsum dolor ", 150)) // 2,699 characters
	var refs []chat.MessageRef
	for i := 0; ; i++ {
		posts, edits := len(fake.Calls("POST")), len(fake.Calls("PATCH"))
		ref, err := a.FinishLive(ctx, liveThread, "", "", text, "interrupted")
		if !errors.Is(err, chat.ErrLiveMore) {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
		if n := len(fake.Calls("POST")) - posts; n != 1 || len(fake.Calls("PATCH")) != edits {
			t.Fatalf("call %d returned ErrLiveMore after %d posts and %d edits, want right after one post", i, n, len(fake.Calls("PATCH"))-edits)
		}
		refs = append(refs, ref)
	}
	var ids []string
	for _, m := range fake.Messages("C1") {
		if m.AuthorID == fakediscord.BotID {
			ids = append(ids, m.ID)
		}
	}
	if len(ids) != 2 || len(refs) != 2 || refs[0].ID != ids[0] || refs[1].ID != ids[1] {
		t.Errorf("noted %+v, messages %q: want each message noted as it was posted", refs, ids)
	}
	if got := botTexts(fake); strings.Join(strings.Fields(strings.Join(got, " ")), " ") != text {
		t.Errorf("messages %q do not add up to the answer", got)
	}
}
