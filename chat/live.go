package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
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
// job at a time on the session's lane hands the buffered text to a
// LiveReplier, whole words only (the rest waits for the next delta).
//
// The pace is chat's, as every other send's: the first words start the
// message as a post, and each later append takes a slot of the
// platform's MethodAppend budget (Slack's chat.appendStream for the
// workspace, a Discord channel's edits). The slot is asked for without
// waiting (Budget.Notify), and the flush is queued when it comes; the
// deltas that come meanwhile are gathered, so the next append carries
// them all: nothing is lost or repeated, and no goroutine, timer or
// lane waits on the pace.
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
// The router calls it for one session at a time, in order, and paces
// it: an adapter renders and sends, and returns the refs of the
// messages it starts.
type LiveReplier interface {
	// Live reports whether answers are shown as written (the platform's
	// streaming is on); if not, the router sends answers with Reply.
	Live() bool
	// AppendLive adds text to live reply id in the thread. It makes one
	// request: it starts the reply's message, as a reply to replyTo, with
	// its first text (the router paced it as a post), or it adds to the
	// message being written (the router took a slot of the MethodAppend
	// budget for it). The platform keeps the text once called: what it
	// did not show yet it keeps for the next call for id, and says so
	// with ErrLiveMore. It returns the message being written now (a new
	// one when it started one), the zero ref when nothing is in the
	// thread yet.
	AppendLive(ctx context.Context, th Thread, replyTo, id, text string) (MessageRef, error)
	// FinishLive ends live reply id on text, the reply whole, pacing its
	// own requests as a final state's. When what id shows is the start
	// of text, the rest follows and the message ends; otherwise (a reply
	// that is not the answer, or an id the platform does not know, such
	// as "" after a restart) what id shows ends with note, and text
	// follows below it, split as the platform needs. Text "" only ends
	// what id shows, with note. When it starts a message, it returns
	// right after, with the message's ref and ErrLiveMore: the router
	// stores the message's close item and calls again with the same
	// arguments. A failed call is made again with the same arguments.
	FinishLive(ctx context.Context, th Thread, replyTo, id, text, note string) (MessageRef, error)
	// CloseLive ends message ref, a live reply a stopped process left
	// open, with note.
	CloseLive(ctx context.Context, th Thread, ref MessageRef, note string) error
}

// ErrLiveMore is what AppendLive and FinishLive return when they
// stopped with text of the reply kept to show: after starting a message
// (its close item is stored before the text goes on in it), or with an
// append's worth shown of more. The router calls again: FinishLive at
// once, AppendLive with its next slot of the append budget.
var ErrLiveMore = errors.New("chat: live reply goes on in the next call")

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
// it, and what the lane has shown.
type live struct {
	mu     sync.Mutex // guards the fields up to the lane's own
	segs   []liveSeg  // buffered, oldest first
	queued bool       // a flush is queued on the lane
	// asking: a slot of the append budget is asked for (appendSlot),
	// in epoch askEpoch, withdrawn with withdraw; granted: when one was
	// given that no append used yet.
	asking   bool
	askEpoch int
	withdraw context.CancelFunc
	granted  time.Time
	epoch    int    // sealLive's count: a flush queued before the last one finds nothing
	showing  string // open, for liveText and eviction

	// On the session's lane only:
	open   string     // the reply being shown, not yet finished ("" for none)
	kept   bool       // the platform keeps text of open it has not shown (ErrLiveMore)
	ref    MessageRef // the message it is being written in
	closer uint64     // the outbox id of ref's close item, 0 for none
}

// setOpen records the reply being shown, on the lane. A reply finished
// needs no slot any more: one asked for is withdrawn.
func (l *live) setOpen(id string) {
	l.open = id
	if id == "" {
		l.kept = false
	}
	l.mu.Lock()
	l.showing = id
	if id == "" {
		l.withdrawLocked()
	}
	l.mu.Unlock()
}

// withdrawLocked withdraws the slot asked for, if one is: its reply was
// finished, or its turn sealed. l.mu is held.
func (l *live) withdrawLocked() {
	if l.asking {
		l.withdraw()
		l.asking = false
	}
}

// busy reports whether the live reply has text waiting or a message open
// in the thread: the session is not evicted then, or the next one would
// post its answer anew and leave the open message to its close item.
func (l *live) busy() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.segs) > 0 || l.queued || l.asking || l.showing != ""
}

// liveSeg is buffered text of one reply, or its end (done).
type liveSeg struct {
	id   string
	turn int64 // the turn the reply is written in
	text string
	done bool // TextDone: text is the reply whole
}

// liveReplier returns the session's platform as a LiveReplier, if it
// shows answers as written.
func liveReplier(c Caps) (LiveReplier, bool) {
	return c.Live, c.Live != nil && c.Live.Live()
}

// liveText buffers a TextDelta or TextDone on the session's deliverer,
// and queues a flush if none is queued. Words for the message being
// written while its next append slot is asked for only wait with the
// rest: the slot's coming queues the flush.
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
	paced := l.asking && l.askEpoch == l.epoch && e.Kind == agent.TextDelta && e.Reply == l.showing
	queue := !l.queued && !paced
	l.queued = l.queued || queue
	epoch := l.epoch
	l.mu.Unlock()
	if queue {
		d.queueFlush(s, th, replyTo, epoch)
	}
}

// queueFlush queues a flush of the live buffer on the session's lane
// (l.queued is set). The answer's words wait there behind the plan's
// edit in flight: that edit goes first in its budget meanwhile.
func (d *deliverer) queueFlush(s *session, th Thread, replyTo string, epoch int) {
	s.board.awaitedBy(1)
	d.lane.Add(th.Key, func() {
		s.board.awaitedBy(-1)
		d.flushLive(s, th, replyTo, epoch)
	})
}

// flushLive shows what is buffered, on the session's lane: a reply
// superseded by a later one is ended with a note, a finished one ends on
// its whole text, and the current one gets its whole words, in the
// append slot it has (or they wait for the slot, asked for).
func (d *deliverer) flushLive(s *session, th Thread, replyTo string, epoch int) {
	l := &s.live
	l.mu.Lock()
	if l.epoch != epoch {
		l.mu.Unlock()
		return // sealed: the turn's answer finishes it
	}
	segs := l.segs
	l.segs, l.queued = nil, false
	var turn int64
	for i, seg := range segs {
		if turn == 0 {
			turn = seg.turn
		}
		if seg.turn != turn {
			// A later turn's words (its earlier turn's end is read late
			// from the log) wait for that end's seal: they are shown
			// behind the earlier answer.
			segs, l.segs = segs[:i], segs[i:]
			break
		}
	}
	l.mu.Unlock()
	if len(segs) == 0 && l.kept {
		segs = []liveSeg{{id: l.open}} // what the platform kept, with no new words
	}
	for i, seg := range segs {
		switch {
		case seg.done:
			d.finishLive(s, th, replyTo, seg.id, seg.text, "")
		case i < len(segs)-1 && segs[i+1].id != seg.id:
			// A retried request's reply: what it showed ends, with a note.
			if l.open == seg.id {
				d.finishLive(s, th, replyTo, seg.id, "", noteInterrupted)
			}
		case i < len(segs)-1:
			// Its end follows in this batch: the whole text shows it.
		default:
			words, rest := wholeWords(seg.text)
			if words == "" && !(l.kept && l.open == seg.id) {
				d.keepLive(s, seg, rest, epoch)
				continue
			}
			if l.open == seg.id && !d.appendSlot(s, th, replyTo, true) {
				d.keepLive(s, seg, seg.text, epoch) // for the slot asked for
				continue
			}
			d.keepLive(s, seg, rest, epoch)
			d.appendLive(s, th, replyTo, seg.id, words, epoch)
		}
	}
}

// keepLive puts text of seg's reply back at the head of the buffer, for
// the next flush: the rest of a word, or words waiting for their slot.
func (d *deliverer) keepLive(s *session, seg liveSeg, text string, epoch int) {
	if text == "" {
		return
	}
	l := &s.live
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.epoch != epoch:
		// Sealed meanwhile: the answer's whole text covers it.
	case len(l.segs) > 0 && l.segs[0].id == seg.id && !l.segs[0].done:
		l.segs[0].text = text + l.segs[0].text
	default:
		l.segs = append([]liveSeg{{id: seg.id, turn: seg.turn, text: text}}, l.segs...)
	}
}

// liveSpare is the slots of the append budget a live append leaves to
// the requests that come after it (Budget.NotifySpare): on Discord the
// channel's edits are the plan's too, and its final state goes first.
const liveSpare = 1

// appendSlot reports whether the session's live reply has a slot of the
// platform's append budget for its next append, taking it when take is
// set. When it has none, it asks for one without waiting
// (Budget.NotifySpare), and a flush is queued when the slot comes, in
// the same epoch: a slot that comes after its turn was sealed, or after
// the reply was finished (withdrawn), queues nothing. A slot left unused
// past slotFresh, or across a 429's hold, is asked for again: used late,
// it would land beside later ones in the platform's count.
func (d *deliverer) appendSlot(s *session, th Thread, replyTo string, take bool) bool {
	l := &s.live
	var bud *Budget
	if p := s.board.pacer; p != nil {
		bud = p.Budget(Request{Thread: th, Method: MethodAppend})
	}
	if bud == nil {
		return true // the platform paces no appends
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.granted.IsZero() && !bud.Held() && time.Since(l.granted) < slotFresh {
		if take {
			l.granted = time.Time{}
		}
		return true
	}
	l.granted = time.Time{}
	if l.asking && l.askEpoch != l.epoch {
		l.withdrawLocked() // asked for a sealed turn's words
	}
	if !l.asking {
		ctx, cancel := context.WithCancel(d.ctx)
		l.asking, l.askEpoch, l.withdraw = true, l.epoch, cancel
		intermediate := func() Priority { return PriorityIntermediate }
		bud.NotifySpare(ctx, liveSpare, intermediate, time.Now(), func() {
			l.mu.Lock()
			if !l.asking || l.askEpoch != l.epoch || ctx.Err() != nil {
				l.mu.Unlock()
				return // withdrawn as it came: the slot is spent
			}
			cancel()
			l.asking, l.granted = false, time.Now()
			queue := !l.queued
			l.queued = true
			epoch := l.epoch
			l.mu.Unlock()
			if queue {
				d.queueFlush(s, th, replyTo, epoch)
			}
		})
	}
	return false
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
// starts the reply's message, and tried again as one; in the append slot
// flushLive took otherwise, once. What the platform keeps (ErrLiveMore,
// or an append that failed for now) goes out with the next slot, asked
// for now, unless the turn was sealed meanwhile (epoch).
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
	op := "append_live"
	if first {
		op = "reply_live"
	}
	text := words
	var ref MessageRef
	more := false
	_, err := d.deliver(ctx, op, th, since, func(ctx context.Context) error {
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
		ref, err = lr.AppendLive(actx, th, replyTo, id, t)
		if more = errors.Is(err, ErrLiveMore); more {
			err = nil
		}
		return err
	})
	l.setOpen(id)
	if o, _ := Classify(err); !first && err != nil && (o == Retry || o == RetryAfter) && ctx.Err() == nil && !errors.Is(err, agent.ErrFenced) {
		// The platform kept the text: the next slot tries again.
		s.board.log.Info("live append not shown yet; tried again in the next slot", "reply", id, "err", err)
		more, err = true, nil
	}
	l.kept = more
	if err != nil && ctx.Err() == nil && !errors.Is(err, agent.ErrFenced) {
		s.board.log.Warn("live reply not shown yet; the answer is finished whole", "reply", id, "err", err)
	}
	if ref.ID != "" && ref != l.ref {
		d.keepCloser(s, th, ref)
	}
	if more && d.appendSlot(s, th, replyTo, false) {
		// A slot is there already (or the platform paces no appends):
		// the kept text goes on in the next flush.
		l.mu.Lock()
		queue := !l.queued && l.epoch == epoch
		l.queued = l.queued || queue
		l.mu.Unlock()
		if queue {
			d.queueFlush(s, th, replyTo, epoch)
		}
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
		return d.finishSteps(actx, s, th, lr, replyTo, id, text, note)
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
	l.withdrawLocked() // the answer's whole text covers the words that waited for it
	return id, interim
}

// finishInterim finishes replies a sealed turn ended before its answer,
// each on its whole text, on the session's lane.
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
// item marked live), on the session's lane; id is the reply the
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
	if err := d.finishSteps(ctx, s, th, lr, replyTo, id, text, note); err != nil {
		return err
	}
	l.setOpen("")
	d.dropCloser(s)
	return nil
}

// finishSteps calls FinishLive until the reply is finished, storing the
// close item of each message it starts before the text goes on in it
// (ErrLiveMore): a kill between two calls leaves that message to be
// ended with a note by the next start, not open.
func (d *deliverer) finishSteps(ctx context.Context, s *session, th Thread, lr LiveReplier, replyTo, id, text, note string) error {
	var last MessageRef
	for {
		ref, err := lr.FinishLive(ctx, th, replyTo, id, text, note)
		if !errors.Is(err, ErrLiveMore) {
			return err
		}
		if ref.IsZero() || ref == last {
			return fmt.Errorf("chat: finish live reply %q: the platform went on without starting a message", id)
		}
		last = ref
		if ref != s.live.ref {
			d.keepCloser(s, th, ref)
		}
	}
}

// noteFor is the note that ends a live reply that is not the turn's
// answer.
func noteFor(o agent.Outcome) string {
	if o == agent.Stopped {
		return noteStopped
	}
	return noteInterrupted
}
