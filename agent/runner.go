package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/todo"
)

// Options configures a Runner.
type Options struct {
	Model        Model
	Store        Store
	Tools        *Registry // nil: todo_write only
	ModelName    string
	SystemPrompt string // todo.PromptAddendum is appended to it
	StaleRounds  int    // reminder threshold; 0 means 3
	ReminderRole string // "system" (default) or "user"
	MaxRounds    int    // model rounds per turn; 0 means 25
	Observer     Observer
	Logger       *slog.Logger
	Now          func() time.Time
}

// EmptyAnswer stands in for a final answer the model left empty, in the
// stored history and in the thread.
const EmptyAnswer = "(The model finished without an answer.)"

// ErrStopped is the cause of a turn stopped by Stop.
var ErrStopped = errors.New("stopped on request")

var errShutdown = errors.New("agent: shutting down")

// Runner runs sessions: at most one goroutine and one turn per session key,
// different sessions in parallel.
type Runner struct {
	opts   Options
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup

	mu     sync.Mutex // guards active and closed
	active map[string]*worker
	closed bool
}

type worker struct {
	again bool                    // more work arrived while it ran
	stop  context.CancelCauseFunc // cancels the running turn; nil between turns
}

// NewRunner returns a runner. Call Resume to pick up sessions a previous
// process left running, and Close to stop.
func NewRunner(opts Options) (*Runner, error) {
	if opts.Model == nil || opts.Store == nil {
		return nil, errors.New("agent: Options.Model and Options.Store are required")
	}
	if opts.Tools == nil {
		opts.Tools, _ = NewRegistry()
	}
	if opts.StaleRounds <= 0 {
		opts.StaleRounds = 3
	}
	if opts.ReminderRole == "" {
		opts.ReminderRole = openai.ChatMessageRoleSystem
	}
	if opts.MaxRounds <= 0 {
		opts.MaxRounds = 25
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Observer == nil {
		opts.Observer = func(Event) {}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Runner{opts: opts, ctx: ctx, cancel: cancel, active: map[string]*worker{}}, nil
}

// Submit persists a user message for the session and makes sure the
// session runs. A message that arrives during a turn joins that turn before
// its next model request.
//
// After Close the message is still persisted, and the next process runs
// it (Resume picks up non-empty inboxes), so a message that arrives during
// shutdown is not lost.
func (r *Runner) Submit(ctx context.Context, key string, in Inbound) error {
	if in.At.IsZero() {
		in.At = r.opts.Now()
	}
	if _, err := r.opts.Store.Enqueue(ctx, key, in); err != nil {
		return fmt.Errorf("agent: queue message for %s: %w", key, err)
	}
	r.kick(key)
	return nil
}

// Resume starts every session a previous process left running or with
// queued messages.
func (r *Runner) Resume(ctx context.Context) (int, error) {
	keys, err := r.opts.Store.Resumable(ctx)
	if err != nil {
		return 0, fmt.Errorf("agent: list resumable sessions: %w", err)
	}
	for _, k := range keys {
		r.kick(k)
	}
	return len(keys), nil
}

// Stop ends the session's running turn, if any, with outcome Stopped.
func (r *Runner) Stop(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.active[key]
	if ok && w.stop != nil {
		w.stop(ErrStopped)
	}
	return ok
}

// Close stops every session at its next safe point and waits. A turn in a
// model request is abandoned and stays "running" in the store, so the next
// process resumes it; a round whose tools ran is committed first.
func (r *Runner) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel(errShutdown)
	r.wg.Wait()
}

func (r *Runner) kick(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if w, ok := r.active[key]; ok {
		w.again = true
		return
	}
	w := &worker{}
	r.active[key] = w
	r.wg.Add(1)
	go r.work(key, w)
}

func (r *Runner) work(key string, w *worker) {
	defer r.wg.Done()
	log := r.opts.Logger.With("session", key)
	for {
		r.mu.Lock()
		w.again = false
		r.mu.Unlock()
		err := r.run(key, w, log)
		if err != nil && r.ctx.Err() == nil {
			log.Error("session failed", "err", err)
		}
		r.mu.Lock()
		if !w.again || r.closed {
			delete(r.active, key)
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
	}
}

// session is a run's working state; it only changes after a commit.
type session struct {
	key     string
	cp      Checkpoint
	hist    []Entry
	tracker *todo.Tracker
}

// turnContext returns a fresh context for one turn, which Stop cancels.
// Each turn gets its own, so a stop ends only the turn it was meant for
// and messages queued before it start the next turn normally.
func (r *Runner) turnContext(w *worker) (context.Context, func()) {
	ctx, stop := context.WithCancelCause(r.ctx)
	r.mu.Lock()
	w.stop = stop
	r.mu.Unlock()
	return ctx, func() {
		r.mu.Lock()
		w.stop = nil
		r.mu.Unlock()
		stop(nil)
	}
}

func (r *Runner) run(key string, w *worker, log *slog.Logger) error {
	store := r.opts.Store
	cp, hist, inbox, err := store.Load(r.ctx, key)
	if err != nil {
		if r.ctx.Err() == nil {
			// The record cannot be read: say so in the thread (the
			// message stays queued, nothing is overwritten) and leave the
			// stored state for an operator to restore.
			r.publish(Event{Session: key, Kind: TurnEnded, Outcome: Failed, Err: err,
				Text: "I couldn't read this thread's saved session, so I can't continue it. Nothing was changed or deleted; an operator can restore it from a backup (the bot's log has the details)."})
		}
		return fmt.Errorf("load: %w", err)
	}
	now := r.opts.Now()
	if cp == nil {
		cp = &Checkpoint{Key: key, State: Idle, Created: now}
	}
	s := &session{key: key, cp: *cp, hist: hist, tracker: todo.Restore(cp.Plan, cp.Revision, cp.Stale)}
	var ctx context.Context
	endTurn := func() {}
	defer func() { endTurn() }()
	if s.cp.State == Running {
		log.Info("resuming turn", "history", len(hist), "revision", s.cp.Revision)
		ctx, endTurn = r.turnContext(w)
		r.publish(Event{Session: key, Kind: TurnStarted, Resumed: true, Plan: s.tracker.Snapshot(), Revision: s.tracker.Revision()})
	}
	for {
		if s.cp.State == Idle {
			endTurn()
			if len(inbox) == 0 {
				return nil
			}
			ctx, endTurn = r.turnContext(w)
			s.cp.State, s.cp.TurnRounds = Running, 0
			s.cp.Turns++
			r.publish(Event{Session: key, Kind: TurnStarted, Plan: s.tracker.Snapshot(), Revision: s.tracker.Revision()})
		}
		var err error
		switch {
		case s.cp.Pending != nil:
			err = r.recoverPending(ctx, s)
		case s.cp.TurnRounds >= r.opts.MaxRounds:
			err = r.endTurn(ctx, s, nil, Limited, fmt.Sprintf("I stopped after %d model rounds without a final answer (PINPLAN_MAX_ROUNDS). Send a message to continue.", r.opts.MaxRounds), nil)
		default:
			err = r.round(ctx, s, inbox)
		}
		if err != nil {
			return err
		}
		if inbox, err = store.Inbox(r.ctx, key); err != nil {
			return fmt.Errorf("read inbox: %w", err)
		}
	}
}

// round runs one model request and commits its result.
func (r *Runner) round(ctx context.Context, s *session, inbox []Inbound) error {
	drained, ids := r.userEntries(inbox)
	work := s.tracker.Clone()
	remind := work.TakeReminder(r.opts.StaleRounds)
	req := r.request(s.hist, drained, remind)
	reply, err := r.opts.Model.Complete(ctx, req)
	if err != nil {
		if r.ctx.Err() != nil {
			return context.Cause(r.ctx) // shutdown: stay running, resume later
		}
		if errors.Is(context.Cause(ctx), ErrStopped) {
			return r.endTurn(context.WithoutCancel(ctx), s, &Round{Append: drained, Drained: ids}, Stopped, "Stopped. The plan is kept as it was.", nil)
		}
		text := "The model did not answer, so this turn ended. Send a message to try again."
		var um interface{ UserMessage() string }
		if errors.As(err, &um) {
			text = um.UserMessage()
		}
		return r.endTurn(ctx, s, &Round{Append: drained, Drained: ids}, Failed, text, err)
	}
	msg := reply.Message
	msg.Role = openai.ChatMessageRoleAssistant
	// Reasoning is the model's own scratch text: it is neither stored nor
	// sent back (servers reject or mis-handle it in a request).
	msg.ReasoningContent = ""
	next := s.cp
	next.Usage.add(reply.Usage)
	next.TurnRounds++
	now := r.opts.Now()
	asst := Entry{Message: msg, At: now}
	if len(msg.ToolCalls) == 0 {
		if strings.TrimSpace(msg.Content) == "" {
			// An assistant message with neither content nor tool calls is
			// rejected by OpenAI when sent back, so the history keeps a
			// placeholder and the thread is told plainly.
			msg.Content = EmptyAnswer
			asst.Message = msg
		}
		rd := &Round{Append: append(drained, asst), Drained: ids}
		next.Stale = work.Stale()
		next.State = Idle
		if err := r.commit(ctx, s, rd, next, work); err != nil {
			return err
		}
		r.publish(Event{Session: s.key, Kind: Replied, Text: msg.Content})
		r.publish(Event{Session: s.key, Kind: TurnEnded, Outcome: Done, Plan: s.tracker.Snapshot(), Revision: s.tracker.Revision()})
		return nil
	}
	for i := range msg.ToolCalls {
		if msg.ToolCalls[i].ID == "" {
			msg.ToolCalls[i].ID = "call_" + strconv.FormatInt(next.Turns, 10) + "_" + strconv.Itoa(next.TurnRounds) + "_" + strconv.Itoa(i)
		}
		msg.ToolCalls[i].Type = openai.ToolTypeFunction
	}
	asst.Message = msg
	if !r.allIdempotent(msg) {
		// Record the intent first, so a crash while a non-idempotent tool
		// runs is answered with "interrupted" instead of running it again.
		// The record keeps the plan as it was and the counter as this
		// request left it (the reminder, if any, was taken).
		pend := s.cp
		pend.Pending = &msg
		pend.Usage = next.Usage
		if err := r.commit(ctx, s, &Round{Append: drained, Drained: ids}, pend, work.Clone()); err != nil {
			return err
		}
		drained, ids = nil, nil
	}
	return r.runTools(ctx, s, drained, ids, msg, work, next, nil)
}

// runTools executes msg's tool calls in order and commits the round.
// interrupted names calls that must not run again.
func (r *Runner) runTools(ctx context.Context, s *session, drained []Entry, ids []uint64, msg openai.ChatCompletionMessage, work *todo.Tracker, next Checkpoint, interrupted map[string]bool) error {
	env := &ToolEnv{Session: s.key, Plan: work}
	rd := &Round{Append: append(drained, Entry{Message: msg, At: r.opts.Now()}), Drained: ids}
	names := make([]string, 0, len(msg.ToolCalls))
	for _, tc := range msg.ToolCalls {
		names = append(names, tc.Function.Name)
		before := work.Revision()
		var out string
		if interrupted[tc.ID] {
			out = errorResult(&ToolError{Code: "interrupted", Message: "pinplan restarted while this tool was running; it may or may not have taken effect. Check before calling it again."})
		} else {
			out = r.opts.Tools.call(context.WithoutCancel(ctx), env, tc)
		}
		if work.Revision() != before {
			rd.Plans = append(rd.Plans, PlanRevision{Revision: work.Revision(), Items: work.Snapshot().Items(), At: r.opts.Now(), ToolCallID: tc.ID})
		}
		rd.Append = append(rd.Append, Entry{Message: openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, Content: out, ToolCallID: tc.ID}, At: r.opts.Now()})
	}
	work.EndRound(names)
	next.Pending = nil
	if err := r.commit(ctx, s, rd, next, work); err != nil {
		return err
	}
	for _, p := range rd.Plans {
		r.publish(Event{Session: s.key, Kind: PlanChanged, Plan: todo.NewSnapshot(p.Items), Revision: p.Revision, At: p.At})
	}
	return nil
}

// recoverPending finishes a round whose assistant message was committed as
// pending before a restart: idempotent tools run, the others are answered
// "interrupted".
func (r *Runner) recoverPending(ctx context.Context, s *session) error {
	msg := *s.cp.Pending
	interrupted := map[string]bool{}
	for _, tc := range msg.ToolCalls {
		if !r.opts.Tools.idempotent(tc.Function.Name) {
			interrupted[tc.ID] = true
		}
	}
	next := s.cp
	next.TurnRounds++
	return r.runTools(ctx, s, nil, nil, msg, s.tracker.Clone(), next, interrupted)
}

// endTurn commits the turn's end (with rd's messages, if any) and reports
// the outcome. The plan is left exactly as the model last wrote it.
func (r *Runner) endTurn(ctx context.Context, s *session, rd *Round, outcome Outcome, text string, cause error) error {
	if rd == nil {
		rd = &Round{}
	}
	next := s.cp
	next.State = Idle
	next.Pending = nil
	if err := r.commit(ctx, s, rd, next, s.tracker.Clone()); err != nil {
		return err
	}
	r.publish(Event{Session: s.key, Kind: TurnEnded, Outcome: outcome, Text: text, Err: cause, Plan: s.tracker.Snapshot(), Revision: s.tracker.Revision()})
	return nil
}

// commit writes rd with the checkpoint next and, only once it is durable,
// makes it the session's state.
func (r *Runner) commit(ctx context.Context, s *session, rd *Round, next Checkpoint, work *todo.Tracker) error {
	rd.Base = len(s.hist)
	next.Key = s.key
	next.Plan = work.Snapshot().Items()
	next.Revision = work.Revision()
	next.Stale = work.Stale()
	next.HistoryLen = len(s.hist) + len(rd.Append)
	next.Updated = r.opts.Now()
	rd.Checkpoint = next
	if err := r.opts.Store.Commit(context.WithoutCancel(ctx), rd); err != nil {
		r.publish(Event{Session: s.key, Kind: TurnEnded, Outcome: Failed, Text: "I could not save this session's progress, so I stopped. The last saved state is kept.", Err: err, Plan: s.tracker.Snapshot(), Revision: s.tracker.Revision()})
		return fmt.Errorf("commit round: %w", err)
	}
	s.hist = append(s.hist, rd.Append...)
	s.cp = next
	s.tracker = work
	return nil
}

func (r *Runner) allIdempotent(msg openai.ChatCompletionMessage) bool {
	for _, tc := range msg.ToolCalls {
		if !r.opts.Tools.idempotent(tc.Function.Name) {
			return false
		}
	}
	return true
}

func (r *Runner) userEntries(inbox []Inbound) ([]Entry, []uint64) {
	var entries []Entry
	var ids []uint64
	for _, in := range inbox {
		text := in.Text
		if in.Author != "" {
			text = in.Author + ": " + text
		}
		entries = append(entries, Entry{Message: openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: text}, At: in.At, Author: in.Author})
		ids = append(ids, in.ID)
	}
	return entries, ids
}

// request builds the model request: the system prompt, the stored history,
// the drained user messages and, when due, the transient reminder, which is
// never stored.
func (r *Runner) request(hist, drained []Entry, remind bool) openai.ChatCompletionRequest {
	system := todo.PromptAddendum
	if r.opts.SystemPrompt != "" {
		system = r.opts.SystemPrompt + "\n\n" + todo.PromptAddendum
	}
	msgs := make([]openai.ChatCompletionMessage, 0, len(hist)+len(drained)+2)
	msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: system})
	for _, e := range hist {
		msgs = append(msgs, e.Message)
	}
	for _, e := range drained {
		msgs = append(msgs, e.Message)
	}
	if remind {
		msgs = append(msgs, openai.ChatCompletionMessage{Role: r.opts.ReminderRole, Content: todo.ReminderText})
	}
	return openai.ChatCompletionRequest{Model: r.opts.ModelName, Messages: msgs, Tools: r.opts.Tools.Definitions()}
}

func (r *Runner) publish(e Event) {
	if e.At.IsZero() {
		e.At = r.opts.Now()
	}
	r.opts.Observer(e)
}
