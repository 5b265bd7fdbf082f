package chat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pinplan/pinplan/agent"
)

// message is the way in of one user message (Router.Handle): a command
// (stop, reset) or a refusal answered here, or the message queued for
// its session's agent.
type message struct {
	r    *Router
	in   Incoming
	text string // in.Text, trimmed
	log  *slog.Logger
}

func (m *message) handle(ctx context.Context) error {
	n := utf8.RuneCountInString(m.text)
	empty := invisible(m.text) && len(m.in.Files) == 0 // a file alone is a message
	stop, reset := strings.EqualFold(m.text, "stop"), strings.EqualFold(m.text, "reset")
	if (empty || n > MaxMessageRunes || stop || reset) && m.seenBefore(ctx) {
		m.log.Info("command seen before; ignored", "event", m.in.Event)
		return nil
	}
	switch {
	case empty:
		return m.answer("Your message was empty. Tell me the task, for example: `plan the release checklist for v2`.", true)
	case n > MaxMessageRunes:
		return m.answer(fmt.Sprintf("Your message is %d characters long; the limit is %d. Please shorten it or split it.", n, MaxMessageRunes), true)
	case stop:
		return m.stop(ctx)
	case reset:
		return m.reset(ctx)
	}
	return m.submit(ctx)
}

// answer says msg in the thread (unless the adapter answers the message
// itself: Incoming.Sync) and returns it as the message's Rejection;
// refused: the message was not accepted.
func (m *message) answer(msg string, refused bool) error {
	if !m.in.Sync {
		m.r.out.outbox.add(m.in.Thread, m.in.MessageID, msg)
	}
	return &Rejection{Reason: msg, Refused: refused}
}

// private refuses a command to its author alone (DESIGN §16).
func (m *message) private(msg string) error {
	if m.in.AuthorID == "" {
		return m.answer(msg, false)
	}
	if !m.in.Sync {
		m.r.out.outbox.addPrivate(m.in.Thread, m.in.AuthorID, msg)
	}
	return &Rejection{Reason: msg, Private: true}
}

// seenBefore reports whether a command's event was seen before. A
// command is not queued, so the store does not deduplicate it: this
// does, before it runs, so that a redelivered stop or reset runs once.
func (m *message) seenBefore(ctx context.Context) bool {
	dd := m.r.opts.Dedupe
	if m.in.Event == "" || dd == nil {
		return false
	}
	first, err := dd.FirstSeen(ctx, m.in.Event, agent.EventTTL)
	if err != nil {
		m.log.Warn("dedupe a command", "event", m.in.Event, "err", err)
		return false
	}
	return !first
}

// stop stops the session's running turn, if its author may (rules).
func (m *message) stop(ctx context.Context) error {
	r, th := m.r, m.in.Thread
	msg := "Nothing is running in this thread."
	if r.Known(th.Key) {
		// Checked whether or not the board has seen the turn start
		// yet: the runner can stop a turn a moment before its
		// TurnStarted reaches the board.
		t := r.rules.turn(ctx, th.Key)
		if !r.rules.mayStop(th.Platform, t, m.in.AuthorID) {
			if !t.Running {
				return m.answer(msg, false)
			}
			return m.private(stopRefusal(t))
		}
	}
	if r.runner.Stop(th.Key, m.in.Author) {
		msg = "Stopping the current turn."
	}
	return m.answer(msg, false)
}

// reset archives the session (stopping its turn first, with the same
// rules as stop) and takes the plan message down: unpinned, left in the
// thread. Someone who may not is told so privately.
func (m *message) reset(ctx context.Context) error {
	r, th := m.r, m.in.Thread
	s := r.out.session(th.Key, nil)
	if s == nil {
		return m.answer("There is nothing to reset in this thread yet.", false)
	}
	t := r.rules.turn(ctx, th.Key)
	if !r.rules.mayReset(th.Platform, t, m.in.AuthorID) {
		return m.private("Only " + mention(startedBy(t)) + ", who started this thread's session, or an approver can reset it.")
	}
	if err := r.runner.Reset(ctx, th.Key, m.in.Author); err != nil {
		m.log.Error("reset session", "err", err)
		return m.answer("I couldn't reset this thread (the bot's log has the details). Nothing was changed.", false)
	}
	r.out.archived(ctx, s, m.in.Author, false)
	m.log.Info("session reset", "by", m.in.Author)
	return m.answer("Started fresh: the earlier conversation and plan are archived (kept in the database), and the plan message is unpinned. Your next message begins a new session here.", false)
}

// submit queues the message for its session's agent; the first message
// of a session quotes the thread's earlier messages, and the follow-ups
// that waited for the session come after it.
func (m *message) submit(ctx context.Context) error {
	r, th, in := m.r, m.in.Thread, m.in
	isNew := !r.Known(th.Key)
	s := r.out.session(th.Key, &th)
	s.board.received(th)
	var relist bool // saved only when it changes: most messages leave it
	s.listing.read(func(l *listingRecord) { relist = l.Hidden || l.Title == "" })
	if relist {
		s.listing.update(func(l *listingRecord) {
			if l.Hidden {
				l.Hidden, l.Title = false, "" // a deleted thread written to again
			}
			if l.Title == "" {
				l.Title = Shorten(m.text, 80)
			}
		})
	}
	inb := agent.Inbound{Text: m.text, Author: in.Author, AuthorID: in.AuthorID, Event: in.Event, Files: in.Files, Handed: in.Handed, MessageID: in.MessageID}
	if isNew {
		inb.Context = m.threadContext(ctx)
	}
	err := r.runner.Submit(ctx, th.Key, inb)
	if errors.Is(err, agent.ErrDuplicate) {
		m.log.Info("message queued before; ignored", "event", in.Event)
		return nil
	}
	if err != nil {
		m.log.Error("queue message", "err", err)
		return m.answer("I couldn't accept your message right now (the bot is shutting down or its database is unavailable). Please send it again in a moment.", true)
	}
	if isNew {
		m.takeFollowUps(ctx)
	}
	return nil
}

// threadContext returns up to Options.ThreadContext messages of the
// thread before the one that starts its session, when the platform can
// list them.
func (m *message) threadContext(ctx context.Context) []agent.Quoted {
	th, n := m.in.Thread, m.r.opts.ThreadContext
	h := m.r.caps[th.Platform].History
	if h == nil || n <= 0 || m.in.MessageID == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msgs, err := h.History(ctx, th, m.in.MessageID, n)
	if err != nil {
		m.log.Warn("read the thread's earlier messages; starting without them", "err", err)
		return nil
	}
	return msgs
}
