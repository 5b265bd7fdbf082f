package discord

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"github.com/pinplan/pinplan/chat"
)

// Live replies (chat.LiveReplier, with Options.Stream): Discord has no
// streamed message, so an answer is posted at its first words and edited
// as it grows. The edits share the channel's budget with the plan's
// (budget, from Options.EditEvery: within Discord's 5 edits per 5 s per
// channel): the router takes a slot of it (chat.MethodAppend) for each
// intermediate edit, as one of the plan's, and gathers the words that
// come while it waits, so the next edit shows them all; the reply's
// last edits wait for theirs here, as a final state's. A message is
// written up to 2,000 characters (at a word where it can, so what it
// shows stays the start of what it will show), and the reply goes on in
// the next one. A call that posts a message returns its id at once, so
// that the router notes the message before text goes on in it. The last
// edit shows the whole text.

// liveReply is one live reply's progress. Only its session's deliveries
// touch it, one at a time.
type liveReply struct {
	raw    string // the model's text given so far
	frozen int    // bytes of raw in finished messages
	cur    string // the message being written; "" for none now
	shown  string // what it shows
	gen    int    // replies begun again under the same id (after a note): in the nonces
	used   time.Time
}

var _ chat.LiveReplier = (*Adapter)(nil)

// maxLiveAge drops the progress of a reply the router gave up on.
const maxLiveAge = 25 * time.Hour

// Live implements chat.LiveReplier: answers are shown as written when
// Options.Stream is set.
func (a *Adapter) Live() bool { return a.opts.Stream }

func (a *Adapter) liveOf(id string) *liveReply {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if l, ok := a.lives[id]; ok {
		l.used = now
		return l
	}
	for k, l := range a.lives {
		if now.Sub(l.used) > maxLiveAge {
			delete(a.lives, k)
		}
	}
	l := &liveReply{used: now}
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
	l := a.liveOf(id)
	l.raw += text
	err := a.pushLive(ctx, th, replyTo, id, l, false)
	return chat.MessageRef{Channel: th.Channel, ID: l.cur}, err
}

// liveMore is the ref and chat.ErrLiveMore a call returns when it
// stopped after posting message l.cur.
func liveMore(th chat.Thread, l *liveReply) (chat.MessageRef, error) {
	return chat.MessageRef{Channel: th.Channel, ID: l.cur}, chat.ErrLiveMore
}

// FinishLive implements chat.LiveReplier.
func (a *Adapter) FinishLive(ctx context.Context, th chat.Thread, replyTo, id, text, note string) (chat.MessageRef, error) {
	if id == "" {
		h := sha256.Sum256([]byte(text))
		id = "\x00" + th.Key + "\x00" + hex.EncodeToString(h[:16])
	}
	a.mu.Lock()
	l := a.lives[id]
	a.mu.Unlock()
	if l != nil && (text == "" || !strings.HasPrefix(text, l.raw)) {
		if l.cur != "" && note != "" {
			if err := a.editLive(ctx, th, l.cur, withNote(l.shown, note), false); err != nil && restCode(err) != codeUnknownMessage {
				return chat.MessageRef{}, err
			}
		}
		if text == "" {
			a.liveDone(id)
			return chat.MessageRef{}, nil
		}
		// The text follows in a message of its own; a retry of this call
		// goes on with it.
		l = &liveReply{gen: l.gen + 1, used: time.Now()}
		a.mu.Lock()
		a.lives[id] = l
		a.mu.Unlock()
	}
	if text == "" {
		return chat.MessageRef{}, nil
	}
	if l == nil {
		l = a.liveOf(id)
	}
	l.raw = text
	if err := a.pushLive(ctx, th, replyTo, id, l, true); err != nil {
		if errors.Is(err, chat.ErrLiveMore) {
			return liveMore(th, l)
		}
		return chat.MessageRef{}, err
	}
	a.liveDone(id)
	return chat.MessageRef{}, nil
}

// CloseLive implements chat.LiveReplier: the message a stopped process
// was writing gets the note. One that is gone needs nothing.
func (a *Adapter) CloseLive(ctx context.Context, th chat.Thread, ref chat.MessageRef, note string) error {
	if ref.ID == "" {
		return nil
	}
	channel := ref.Channel
	if channel == "" {
		channel = th.Channel
	}
	m, err := a.s.ChannelMessage(channel, ref.ID, discordgo.WithContext(ctx))
	if err != nil {
		if restCode(err) == codeUnknownMessage {
			return nil
		}
		return classify("read live reply "+ref.ID, err, false)
	}
	if strings.HasSuffix(m.Content, withNote("", note)) {
		return nil // closed already
	}
	err = a.editLive(ctx, chat.Thread{Platform: th.Platform, Key: th.Key, Channel: channel}, ref.ID, withNote(m.Content, note), false)
	if restCode(err) == codeUnknownMessage {
		return nil
	}
	return err
}

// withNote is shown with the note that ends it, within a message's
// 2,000 characters.
func withNote(shown, note string) string {
	tail := "\n*(" + note + ")*"
	if shown == "" {
		return tail
	}
	if r := []rune(shown); len(r)+utf8.RuneCountInString(tail) > maxContent {
		shown = string(r[:max(maxContent-utf8.RuneCountInString(tail)-1, 0)]) + "…"
	}
	return shown + tail
}

// pushLive shows what the reply's messages do not yet: the message being
// written is edited (posted, if there is none), and text past 2,000
// characters goes on in the next. It stops right after posting a
// message, with chat.ErrLiveMore when the router is to call again (the
// reply is being finished, or text is left). Before the reply is whole
// (final false) it makes one edit, in the slot the router took for it,
// and says so with chat.ErrLiveMore when text is left; final: the
// reply's last edits wait for their slots here, as a final state's.
func (a *Adapter) pushLive(ctx context.Context, th chat.Thread, replyTo, id string, l *liveReply, final bool) error {
	edited := false
	for {
		part, used, more := livePart(l.raw[l.frozen:], l.shown)
		if l.cur == "" && strings.TrimSpace(part) == "" {
			return nil
		}
		switch {
		case l.cur == "":
			ref := ""
			if l.frozen == 0 {
				ref = replyTo
			}
			msgID, err := a.postLive(ctx, th, ref, nonce(fmt.Sprintf("live/%s/%s/%d/%d", th.Key, id, l.gen, l.frozen)), part)
			if err != nil {
				return err
			}
			l.cur, l.shown = msgID, part
			if final || more {
				return chat.ErrLiveMore // a message posted: noted before it goes on
			}
			return nil
		case part != l.shown:
			if edited && !final {
				return chat.ErrLiveMore
			}
			// A call before the reply is whole has the router's slot
			// for its one edit.
			if err := a.editLive(ctx, th, l.cur, part, !final); err != nil {
				if restCode(err) == codeUnknownMessage {
					l.cur, l.shown = "", "" // deleted: the part is posted again
					continue
				}
				return err
			}
			l.shown, edited = part, true
		}
		if !more {
			return nil
		}
		l.frozen += used
		l.cur, l.shown = "", ""
	}
}

// postLive posts a live reply's first words (or its next message's).
func (a *Adapter) postLive(ctx context.Context, th chat.Thread, replyTo, n, content string) (string, error) {
	msg := nonceSend{MessageSend: &discordgo.MessageSend{Content: content, AllowedMentions: noMentions()}, Nonce: n, EnforceNonce: true}
	if replyTo != "" {
		msg.Reference = &discordgo.MessageReference{MessageID: replyTo, ChannelID: th.Channel, FailIfNotExists: new(bool)}
	}
	endpoint := discordgo.EndpointChannelMessages(th.Channel)
	body, err := a.s.RequestWithBucketID(http.MethodPost, endpoint, msg, endpoint, discordgo.WithContext(ctx))
	if err != nil {
		return "", classify("reply", err, false)
	}
	ref, err := created(th, body)
	return ref.ID, classify("reply", err, false)
}

// editLive edits a live reply's message to content: in the slot the
// router took for it (slot: chat.MethodAppend, the channel's budget), or
// in one it waits for here, as a final state's.
func (a *Adapter) editLive(ctx context.Context, th chat.Thread, msgID, content string, slot bool) error {
	if !slot {
		final := func() chat.Priority { return chat.PriorityFinal }
		if err := a.budget(th.Channel).Wait(ctx, final, time.Now()); err != nil {
			return fmt.Errorf("discord: edit live reply: %w", err)
		}
	}
	endpoint := discordgo.EndpointChannelMessage(th.Channel, msgID)
	body := map[string]any{"content": content, "allowed_mentions": noMentions()}
	_, err := a.s.RequestWithBucketID(http.MethodPatch, endpoint, body, discordgo.EndpointChannelMessage(th.Channel, ""), discordgo.WithContext(ctx))
	return classify("edit live reply "+msgID, err, false)
}

// livePart is what the message being written shows of text (the reply
// past its finished messages), given that it shows shown now: all of it
// when it fits, else the first 2,000 characters or less, cut at a line
// end or a space at or past what is shown where it can (so the message
// only grows), trailing whitespace left out. used is the bytes of text
// it takes, the whitespace after the cut included; more says text goes
// on past it.
func livePart(text, shown string) (part string, used int, more bool) {
	r := []rune(text)
	if len(r) <= maxContent {
		return strings.TrimRightFunc(text, unicode.IsSpace), len(text), false
	}
	floor := utf8.RuneCountInString(shown)
	cut := 0
	for _, want := range []func(rune) bool{func(c rune) bool { return c == '\n' }, unicode.IsSpace} {
		for b := maxContent; b > 0 && b >= floor; b-- {
			if want(r[b-1]) && !unicode.IsSpace(r[b]) {
				cut = b
				break
			}
		}
		if cut > 0 {
			break
		}
	}
	if cut == 0 {
		cut = maxContent
	}
	end := cut
	for end < len(r) && unicode.IsSpace(r[end]) {
		end++
	}
	return strings.TrimRightFunc(string(r[:cut]), unicode.IsSpace), len(string(r[:end])), true
}
