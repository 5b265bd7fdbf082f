package chat

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat/chattest"
	"github.com/pinplan/pinplan/todo"
)

// privatePlatform can tell one person something privately (as Slack's
// chat.postEphemeral does), and escapes replies as Slack's SplitReply
// does, so a reply that goes the public way loses its mentions.
type privatePlatform struct {
	cardPlatform
	pmu      sync.Mutex
	privates []privateReply
}

func (p *privatePlatform) Caps() Caps { return testCaps(p) }

type privateReply struct{ user, text string }

func (p *privatePlatform) ReplyPrivately(_ context.Context, _ Thread, user, text string) error {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	p.privates = append(p.privates, privateReply{user, text})
	return nil
}

func (p *privatePlatform) SplitReply(text string) []string {
	return []string{strings.NewReplacer("<", "&lt;", ">", "&gt;").Replace(text)}
}

func (p *privatePlatform) told() []privateReply {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	return append([]privateReply(nil), p.privates...)
}

func (p *privatePlatform) replyTexts() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, c := range p.calls {
		if c.Op == "reply" {
			out = append(out, c.Text)
		}
	}
	return out
}

// TestTextRefusalsArePrivate: someone else's text stop or reset is
// refused to that person alone, with the mention as a mention; the
// thread hears nothing of it. The people who may act are still answered
// in the thread.
func TestTextRefusalsArePrivate(t *testing.T) {
	p := &privatePlatform{}
	run := &actRunner{}
	r := NewRouter(Options{Runner: run, Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1", ThreadID: "1.1"}
	say := func(user, text string) string {
		t.Helper()
		err := r.Handle(context.Background(), Incoming{Thread: th, Text: text, Author: strings.ToLower(user), AuthorID: user, MessageID: "m-" + user + text})
		var rej *Rejection
		if errors.As(err, &rej) {
			return rej.Reason
		}
		if err != nil {
			t.Fatal(err)
		}
		return ""
	}
	say("U1", "plan the release")
	observe(r, agent.Event{Session: th.Key, Kind: agent.TurnStarted, Requester: "U1"})
	observe(r, agent.Event{Session: th.Key, Kind: agent.PlanChanged, Revision: 1, Plan: plan(1, todo.InProgress, todo.Pending)})
	settle(t, r, th.Key)

	for _, cmd := range []string{"stop", "reset"} {
		if reply := say("U2", cmd); !strings.Contains(reply, "Only") {
			t.Errorf("U2's %s answered %q, want a refusal", cmd, reply)
		}
	}
	settle(t, r, th.Key)
	told := p.told()
	if len(told) != 2 {
		t.Fatalf("told privately: %+v, want the two refusals to U2", told)
	}
	for _, pr := range told {
		if pr.user != "U2" || !strings.Contains(pr.text, "Only <@U1>") || strings.Contains(pr.text, "&lt;") {
			t.Errorf("private refusal %+v, want one to U2 naming <@U1> as a mention", pr)
		}
	}
	// U1's own stop is answered in the thread, behind the refusals.
	if reply := say("U1", "stop"); !strings.Contains(reply, "Stopping") {
		t.Errorf("U1's stop answered %q", reply)
	}
	settle(t, r, th.Key)
	replies := p.replyTexts()
	if len(replies) != 1 || !strings.Contains(replies[0], "Stopping") {
		t.Errorf("replies in the thread: %q, want only U1's stop answered", replies)
	}
	if stops, resets := run.counts(); stops != 1 || resets != 0 {
		t.Errorf("%d stops, %d resets; want U1's stop alone", stops, resets)
	}
}

// TestTellGoesThroughTheDeliveryStep: the router's own notes (a click's
// refusal, Discord's missed messages) go through the one delivery step:
// private ones with ReplyPrivately, public ones in the channel; a
// transient failure is retried with the same idempotency key and marked
// as maybe sent; a send never asks the fence (any replica may say a
// note), and the attempts are bounded.
func TestTellGoesThroughTheDeliveryStep(t *testing.T) {
	p := &privatePlatform{}
	r := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": p}, RetryDelay: time.Millisecond,
		Fence: &fenceAfter{}})
	t.Cleanup(r.Close)
	th := Thread{Platform: "test", Key: "test/1", Channel: "C1", ThreadID: "1.1"}

	if err := r.Tell(t.Context(), th, "U2", "only you"); err != nil {
		t.Fatal(err)
	}
	if got := p.told(); len(got) != 1 || got[0] != (privateReply{"U2", "only you"}) {
		t.Errorf("told privately %+v, want U2 once", got)
	}

	p.replyErr = func(n int) error {
		if n == 1 {
			return errors.New("503 from the platform")
		}
		return nil
	}
	if err := r.Tell(t.Context(), th, "", "a note for everyone"); err != nil {
		t.Fatal(err)
	}
	if got := p.replyTexts(); len(got) != 1 || got[0] != "a note for everyone" {
		t.Errorf("replies %q, want the note once", got)
	}
	p.mu.Lock()
	sends := slices.Clone(p.sends)
	p.mu.Unlock()
	if len(sends) != 2 || sends[0].key == "" || sends[1].key != sends[0].key || sends[0].unsure || !sends[1].unsure {
		t.Errorf("attempts carried %+v, want one key twice, the second maybe sent", sends)
	}

	p.replyErr = func(int) error { return errors.New("503 from the platform") }
	if err := r.Tell(t.Context(), th, "", "never lands"); err == nil {
		t.Error("a note the platform never took reported delivered")
	}
	p.mu.Lock()
	attempts := len(p.sends) - len(sends)
	p.mu.Unlock()
	if attempts != tellAttempts {
		t.Errorf("%d attempts at a failing note, want %d", attempts, tellAttempts)
	}

	none := Thread{Platform: "gone", Key: "gone/1"}
	if err := r.Tell(t.Context(), none, "", "x"); !errors.Is(err, ErrUndeliverable) {
		t.Errorf("a note for an unknown platform: %v, want ErrUndeliverable", err)
	}
	public := NewRouter(Options{Store: &chattest.Boards{}, Platforms: map[string]Platform{"test": &fakePlatform{}}})
	t.Cleanup(public.Close)
	if err := public.Tell(t.Context(), th, "U2", "x"); !errors.Is(err, ErrUndeliverable) {
		t.Errorf("a private note where none can be shown: %v, want ErrUndeliverable", err)
	}
}
