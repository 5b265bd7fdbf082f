package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/pinplan/pinplan/agent"
)

// Answers as the model writes them (DESIGN.md §7, PINPLAN_STREAM). The
// agent publishes what a streaming model writes as TextDelta events of
// one reply per model request (a retried request is a new reply), and a
// round that goes on to call tools ends its reply with TextDone. None of
// it is logged: the text is in the store only once its round commits.
//
// The deliverer applies those events in their place among the session's
// other events, so a later turn's words never come before an earlier
// turn's answer: each adds to the session's live buffer, and one flush
// job at a time on the session's outbox queue hands the buffered text to
// a LiveReplier, whole words only (the rest waits for the next delta).
// While a flush waits (the platform's pace, a slow call), the deltas that
// come meanwhile are gathered, so the next append carries them all:
// nothing is lost or repeated, and the appends keep to the pace.
//
// The answer itself is still the TurnEnded entry's, stored in the outbox
// as one item marked live: sending it finishes the live reply on the
// answer's whole text (FinishLive), so what the thread shows in the end
// is exactly the answer, whatever was shown before. A reply superseded
// (the request was retried) or not the answer (the turn failed or was
// stopped after some words) is ended with a note, and the answer follows
// below it.
//
// A live message open in the thread has a close item in the outbox,
// stored when the message is started and deleted when it is finished:
// after a kill -9 it is what the next start finds, and it ends the cut-off
// message with "interrupted; answered again below" (CloseLive) before the
// resumed turn answers again.

// LiveReplier is a platform that shows an answer as the model writes it.
// The router calls it for one session at a time, in order.
type LiveReplier interface {
	// Live reports whether answers are shown as written (the platform's
	// streaming is on); if not, the router sends answers with Reply.
	Live() bool
	// AppendLive adds text to live reply id in the thread, starting it,
	// as a reply to replyTo, with its first text. The platform keeps the
	// text once called: what a failed call did not show, the next call
	// for id shows. It returns the message being written now (a new one
	// when the platform went on in another), the zero ref when nothing
	// is in the thread yet.
	AppendLive(ctx context.Context, th Thread, replyTo, id, text string) (MessageRef, error)
	// FinishLive ends live reply id on text, the reply whole. When what
	// id shows is the start of text, the rest follows and the message
	// ends; otherwise (a reply that is not the answer, or an id the
	// platform does not know, such as "" after a restart) what id shows
	// ends with note, and text follows below it, split as the platform
	// needs. Text "" only ends what id shows, with note. A failed call
	// is made again with the same arguments.
	FinishLive(ctx context.Context, th Thread, replyTo, id, text, note string) error
	// CloseLive ends message ref, a live reply a stopped process left
	// open, with note.
	CloseLive(ctx context.Context, th Thread, ref MessageRef, note string) error
}

// liveStartedKey carries the router's note of a live message a platform
// starts in the middle of a call (LiveStarted).
type liveStartedKey struct{}

// LiveStarted tells the router, from inside AppendLive or FinishLive,
// that the call has just started message ref of a live reply (its first
// words, or the next message after a roll-over) and goes on: the router
// stores the message's close item now, so that a kill before the call
// returns leaves the message to be ended with a note by the next start
// instead of open. A call the router did not make is not noted.
func LiveStarted(ctx context.Context, ref MessageRef) {
	if f, ok := ctx.Value(liveStartedKey{}).(func(MessageRef)); ok && !ref.IsZero() {
		f(ref)
	}
}

// WithLiveStarted is the context the router gives a live call, for a
// platform's tests: f is called with each message LiveStarted reports.
func WithLiveStarted(ctx context.Context, f func(MessageRef)) context.Context {
	return context.WithValue(ctx, liveStartedKey{}, f)
}

// noteStarted returns ctx noting the live messages a call starts for s.
func (d *deliverer) noteStarted(ctx context.Context, s *session, th Thread) context.Context {
	return WithLiveStarted(ctx, func(ref MessageRef) {
		if ref != s.live.ref {
			d.keepCloser(s, th, ref)
		}
	})
}

// ErrPaceLater is what AppendLive returns when the platform's pace has
// no room for the text now and it kept the text for later: the router
// calls again shortly (livePaceRetry), with the words that came
// meanwhile, rather than hold the session's deliveries on the pace.
var ErrPaceLater = errors.New("chat: live text kept for later: no room in the platform's pace now")

// livePaceRetry is how soon a live reply whose text was kept for later
// (ErrPaceLater) is given another try when no new words come first.
const livePaceRetry = 250 * time.Millisecond

// Notes that end a live reply that is not the answer.
const (
	noteInterrupted = "interrupted; answered again below"
	noteStopped     = "stopped"
)

// liveAppendAttempts bounds the tries of one append: a failed one loses
// nothing (the platform keeps the text for the next call), and the
// answer is finished whole at the end of the turn.
const liveAppendAttempts = 3

// live is a session's live reply: the text the deliverer buffered for
// it, and what the outbox queue has shown.
type live struct {
	mu      sync.Mutex // guards segs, queued, nudging and epoch
	segs    []liveSeg  // buffered, oldest first
	queued  bool       // a flush is queued on the outbox queue
	nudging bool       // a retry of text kept for later is scheduled
	epoch   int        // sealLive's count: a flush queued before the last one finds nothing

	showing atomic.Bool // open is not "": read by eviction

	// On the session's outbox queue only:
	open   string     // the reply being shown, not yet finished ("" for none)
	ref    MessageRef // the message it is being written in
	closer uint64     // the outbox id of ref's close item, 0 for none
}

// setOpen records the reply being shown, on the outbox queue.
func (l *live) setOpen(id string) {
	l.open = id
	l.showing.Store(id != "")
}

// busy reports whether the live reply has text waiting or a message open
// in the thread: the session is not evicted then, or the next one would
// post its answer anew and leave the open message to its close item.
func (l *live) busy() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.segs) > 0 || l.queued || l.nudging || l.showing.Load()
}

// liveSeg is buffered text of one reply, or its end (done).
type liveSeg struct {
	id   string
	turn int64 // the turn the reply is written in
	text string
	done bool // TextDone: text is the reply whole
	// nudge: show what the platform kept for later (ErrPaceLater), even
	// with no new words.
	nudge bool
}

// liveReplier returns the session's platform as a LiveReplier, if it
// shows answers as written.
func liveReplier(c Caps) (LiveReplier, bool) {
	return c.Live, c.Live != nil && c.Live.Live()
}

// liveText buffers a TextDelta or TextDone on the session's deliverer,
// and queues a flush if none is queued.
func (d *deliverer) liveText(s *session, th Thread, replyTo string, e agent.Event) {
	if _, ok := liveReplier(s.board.caps); !ok || d.ctx.Err() != nil {
		return
	}
	l := &s.live
	l.mu.Lock()
	if n := len(l.segs); e.Kind == agent.TextDelta && n > 0 && l.segs[n-1].id == e.Reply && !l.segs[n-1].done {
		l.segs[n-1].text += e.Text
	} else {
		l.segs = append(l.segs, liveSeg{id: e.Reply, turn: e.Turn, text: e.Text, done: e.Kind == agent.TextDone})
	}
	queue, epoch := !l.queued, l.epoch
	l.queued = true
	l.mu.Unlock()
	if queue {
		// The answer's words wait on the lane behind the plan's edit in
		// flight: that edit goes first in its budget meanwhile.
		s.board.awaitedBy(1)
		d.lane.Add(th.Key, func() {
			s.board.awaitedBy(-1)
			d.flushLive(s, th, replyTo, epoch)
		})
	}
}

// flushLive shows what is buffered, on the session's outbox queue: a
// reply superseded by a later one is ended with a note, a finished one
// ends on its whole text, and the current one gets its whole words.
func (d *deliverer) flushLive(s *session, th Thread, replyTo string, epoch int) {
	l := &s.live
	l.mu.Lock()
	if l.epoch != epoch {
		l.mu.Unlock()
		return // sealed: the turn's answer finishes it
	}
	segs := l.segs
	l.segs, l.queued = nil, false
	var turn int64 // the batch's; a nudge has none
	for i, seg := range segs {
		if turn == 0 {
			turn = seg.turn
		}
		if seg.turn != 0 && seg.turn != turn {
			// A later turn's words (its earlier turn's end is read late
			// from the log) wait for that end's seal: they are shown
			// behind the earlier answer.
			segs, l.segs = segs[:i], segs[i:]
			break
		}
	}
	l.mu.Unlock()
	for i, seg := range segs {
		switch {
		case seg.done:
			d.finishLive(s, th, replyTo, seg.id, seg.text, "")
		case i < len(segs)-1 && segs[i+1].id != seg.id:
			// A retried request's reply: what it showed ends, with a note.
			if l.open == seg.id {
				d.finishLive(s, th, replyTo, seg.id, "", noteInterrupted)
			}
		default:
			if seg.nudge && seg.text == "" && l.open != seg.id {
				continue // finished meanwhile: nothing kept to show
			}
			words, rest := wholeWords(seg.text)
			if rest != "" && i == len(segs)-1 { // an earlier one's rest is covered by its end in this batch
				l.mu.Lock()
				if l.epoch != epoch {
					// Sealed meanwhile: the answer's whole text covers it.
				} else if n := len(l.segs); n > 0 && l.segs[0].id == seg.id && !l.segs[0].done {
					l.segs[0].text = rest + l.segs[0].text
				} else {
					l.segs = append([]liveSeg{{id: seg.id, turn: seg.turn, text: rest}}, l.segs...)
				}
				l.mu.Unlock()
			}
			if words != "" || seg.nudge {
				d.appendLive(s, th, replyTo, seg.id, words, epoch)
			}
		}
	}
}

// nudgeLive has reply id's kept text tried again in a moment, unless new
// words or the turn's end come first.
func (d *deliverer) nudgeLive(s *session, th Thread, replyTo, id string, epoch int) {
	l := &s.live
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.nudging {
		return
	}
	l.nudging = true
	d.lane.Later(d.ctx, th.Key, livePaceRetry, func() {
		l.mu.Lock()
		l.nudging = false
		if l.epoch != epoch || d.ctx.Err() != nil {
			l.mu.Unlock()
			return
		}
		if n := len(l.segs); n == 0 || l.segs[n-1].id != id || l.segs[n-1].done {
			if n > 0 {
				l.mu.Unlock()
				return // another reply, or its end, came: that flush shows it
			}
			l.segs = append(l.segs, liveSeg{id: id})
		}
		l.segs[len(l.segs)-1].nudge = true
		queue := !l.queued
		l.queued = true
		l.mu.Unlock()
		if queue {
			d.lane.Add(th.Key, func() { d.flushLive(s, th, replyTo, epoch) })
		}
	})
}

// wholeWords cuts text after its last run of whitespace that a word
// follows: the first part can be shown now, the second waits (a word may
// go on in the next delta, and a chunk never starts with whitespace).
func wholeWords(text string) (words, rest string) {
	for i := len(text); i > 0; {
		c, size := utf8.DecodeLastRuneInString(text[:i])
		if i < len(text) && unicode.IsSpace(c) {
			next, _ := utf8.DecodeRuneInString(text[i:])
			if !unicode.IsSpace(next) {
				return text[:i], text[i:]
			}
		}
		i -= size
	}
	return "", text
}

// appendLive hands words of reply id to the platform, through the
// delivery step: paced as a post, after the plan's first post, when it
// starts the reply's message.
func (d *deliverer) appendLive(s *session, th Thread, replyTo, id, words string, epoch int) {
	lr, _ := liveReplier(s.board.caps)
	l := &s.live
	ctx := d.ctx
	if l.open != id {
		if l.open != "" {
			d.finishLive(s, th, replyTo, l.open, "", noteInterrupted)
		}
		d.planShown(th.Key, 0)
	}
	first, since := l.open != id, d.opts.Now()
	text := words
	var ref MessageRef
	later := false
	_, err := d.deliver(ctx, "reply_live", th, since, func(ctx context.Context) error {
		if first {
			if err := Pace(ctx, s.board.caps.Paced, Request{Thread: th, Method: MethodPost, Priority: func() Priority { return PriorityFinal }, Since: since}); err != nil {
				return err
			}
		}
		if err := d.held(ctx, th.Key); err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, replyTimeout)
		defer cancel()
		t := text
		text = "" // the platform keeps it from now on
		var err error
		ref, err = lr.AppendLive(d.noteStarted(actx, s, th), th, replyTo, id, t)
		if errors.Is(err, ErrPaceLater) {
			later, err = true, nil
		}
		return err
	})
	if later {
		d.nudgeLive(s, th, replyTo, id, epoch)
	}
	l.setOpen(id)
	if err != nil && ctx.Err() == nil && !errors.Is(err, agent.ErrFenced) {
		s.board.log.Warn("live reply not shown yet; the answer is finished whole", "reply", id, "err", err)
	}
	if ref.ID != "" && ref != l.ref {
		d.keepCloser(s, th, ref)
	}
}

// keepCloser stores the close item of live message ref, in place of the
// previous message's. It is given the session that shows the reply: one
// looked up again could be another (evicted or forgotten meanwhile), and
// the close item would be left behind.
func (d *deliverer) keepCloser(s *session, th Thread, ref MessageRef) {
	l := &s.live
	o := d.outbox
	now := d.opts.Now()
	it := outboxItem{Key: fmt.Sprintf("live/%s/%s", th.Key, ref.ID), Thread: th, Text: noteInterrupted, Created: now, LiveRef: &ref}
	raw, _ := json.Marshal(it)
	ids, err := o.store.AddOutbox(context.WithoutCancel(d.ctx), th.Key, [][]byte{raw})
	if err != nil {
		s.board.log.Warn("store the live reply's close item; a kill now would leave it open", "err", err)
		ids = []uint64{0}
	}
	d.dropCloser(s)
	l.ref, l.closer = ref, ids[0]
}

// dropCloser deletes the open live message's close item: it is finished.
func (d *deliverer) dropCloser(s *session) {
	l := &s.live
	if l.closer != 0 {
		if err := d.outbox.store.DeleteOutbox(context.WithoutCancel(d.ctx), s.board.key, l.closer); err != nil {
			s.board.log.Warn("remove a finished live reply's close item", "err", err)
		}
	}
	l.ref, l.closer = MessageRef{}, 0
}

// finishLive ends the open live reply (or shows text whole when id is not
// open), in one step with retries; the answer of a turn goes through the
// outbox's send instead, which retries it as any answer.
func (d *deliverer) finishLive(s *session, th Thread, replyTo, id, text, note string) {
	lr, _ := liveReplier(s.board.caps)
	l := &s.live
	if text == "" && (id == "" || l.open != id) {
		return // nothing shown, nothing to end
	}
	fresh := l.open != id // text goes into a message of its own
	if fresh && l.open != "" {
		d.finishLive(s, th, replyTo, l.open, "", noteInterrupted)
	}
	if fresh {
		d.planShown(th.Key, 0)
	}
	since := d.opts.Now()
	_, err := d.deliver(d.ctx, "finish_live", th, since, func(ctx context.Context) error {
		if fresh {
			if err := Pace(ctx, s.board.caps.Paced, Request{Thread: th, Method: MethodPost, Priority: func() Priority { return PriorityFinal }, Since: since}); err != nil {
				return err
			}
		}
		if err := d.held(ctx, th.Key); err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, replyTimeout)
		defer cancel()
		return lr.FinishLive(d.noteStarted(actx, s, th), th, replyTo, id, text, note)
	})
	if err != nil && d.ctx.Err() == nil && !errors.Is(err, agent.ErrFenced) {
		s.board.log.Warn("live reply not finished", "reply", id, "err", err)
	}
	if o, _ := Classify(err); d.ctx.Err() != nil || errors.Is(err, agent.ErrFenced) || (err != nil && (o == Retry || o == RetryAfter)) {
		// The close item stays for the answer's finish, the next start
		// or the replica that holds the session: the message may still
		// be open.
		return
	}
	l.setOpen("")
	d.dropCloser(s)
}

// sealLive ends the buffer's part in turn, on the session's deliverer,
// when the turn's end is applied. It returns the reply the answer
// finishes ("" for the one shown, if any) and the interim replies of the
// turn that ended (TextDone) but are not shown whole yet, oldest first:
// they are finished on their text before the answer. The rest of the
// turn's buffered text is dropped: the answer's whole text covers it. A
// flush queued before finds nothing, and the words of a later turn (an
// end read late from the log) stay buffered for a flush of their own,
// queued behind the answer by that turn's next words or its end.
func (s *session) sealLive(turn int64) (id string, interim []liveSeg) {
	l := &s.live
	l.mu.Lock()
	defer l.mu.Unlock()
	var later []liveSeg
	for _, seg := range l.segs {
		switch {
		case seg.turn > turn:
			later = append(later, seg)
		case seg.done:
			interim = append(interim, seg)
			if seg.id == id {
				id = ""
			}
		default:
			id = seg.id
		}
	}
	l.segs, l.queued = later, false
	l.epoch++
	return id, interim
}

// finishInterim finishes replies a sealed turn ended before its answer,
// each on its whole text, on the session's outbox queue.
func (d *deliverer) finishInterim(s *session, th Thread, replyTo string, interim []liveSeg) {
	if len(interim) == 0 {
		return
	}
	d.lane.Add(th.Key, func() {
		for _, seg := range interim {
			d.finishLive(s, th, replyTo, seg.id, seg.text, "")
		}
	})
}

// finishAnswer finishes the live reply on the turn's answer (an outbox
// item marked live), on the session's outbox queue; id is the reply the
// answer was streamed as ("" for the one shown). A reply still open that
// is not id is ended first, with a note.
func (d *deliverer) finishAnswer(ctx context.Context, s *session, th Thread, replyTo, id, text, note string) error {
	lr, _ := liveReplier(s.board.caps)
	l := &s.live
	if id == "" {
		id = l.open
	}
	if l.open != "" && l.open != id {
		d.finishLive(s, th, replyTo, l.open, "", note)
	}
	if err := lr.FinishLive(d.noteStarted(ctx, s, th), th, replyTo, id, text, note); err != nil {
		return err
	}
	l.setOpen("")
	d.dropCloser(s)
	return nil
}

// noteFor is the note that ends a live reply that is not the turn's
// answer.
func noteFor(o agent.Outcome) string {
	if o == agent.Stopped {
		return noteStopped
	}
	return noteInterrupted
}
