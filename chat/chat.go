// Package chat is pinplan's platform-neutral core: thread identity, the
// Platform interface the adapters implement, and the Router, in two
// halves along the session's log. The way in (router.go): a message
// becomes a turn of the thread's one agent session, or a follow-up of
// the turn running. The way back (deliver.go, which walks one event from
// a mention to the plan edit): one deliverer per session applies the log
// from a stored cursor onto the platform, through the plan board that
// posts, pins and edits a thread's plan message (board.go), the approval
// cards (card.go), the statuses of the sessions and the working indicator
// (status.go), and the outbox that keeps replies until they are delivered
// (outbox.go). Every send goes through one delivery step (delivery.go),
// whose one policy retries it by its classified Outcome, and keeps to the
// platform's budgets by priority (pace.go).
//
// It imports agent and todo. Adapters import it; it imports no adapter and
// not store (the store implements BoardStore, CardStore, ListingStore and
// OutboxStore).
package chat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/todo"
)

// Thread is a conversation on a platform: one agent session.
type Thread struct {
	Platform string `json:"platform"` // "slack", "discord", "web"
	Key      string `json:"key"`      // session key, e.g. slack/T1/C1/1700000000.000100
	Channel  string `json:"channel"`  // the platform's channel id
	ThreadID string `json:"thread,omitempty"`
	// Title is the first words of the task, or what the session was
	// renamed to, for listings. The listing record keeps it, not the
	// board's (Router.Thread and Rename fill it in).
	Title string `json:"title,omitempty"`
}

// MessageRef names a posted message.
type MessageRef struct {
	Channel string `json:"channel"`
	ID      string `json:"id"`
	// Kind is the adapter's note on how the message was posted, kept with
	// the ref so that edits after a restart match it (Discord: a
	// Components V2 message must be edited as one). Empty in refs stored
	// before it existed; only the adapter that set it reads it.
	Kind string `json:"kind,omitempty"`
}

// IsZero reports whether no message is referenced.
func (r MessageRef) IsZero() bool { return r.ID == "" }

// Incoming is a user message an adapter decoded and deduplicated.
type Incoming struct {
	Thread    Thread
	Text      string
	Author    string // display name
	AuthorID  string // the platform's user id, for approvals and Stop
	MessageID string // the platform's id of the message, for replies and reactions
	// Event is the adapter's dedupe key of the message (for example
	// discord/msg/ID), or "" when the adapter deduplicated it itself. A
	// message to queue is taken in once by the store, in the write that
	// queues it (agent.Inbound.Event), so the adapter does not record it
	// first and a crash before the queue cannot lose it. A command (stop,
	// reset, a refusal) is recorded by the Router's Dedupe before it
	// runs: a crash between the two loses the command, never repeats it.
	Event string
	// Sync: the caller shows a refusal itself (the console answers the
	// request with it), so the router does not also reply in the thread.
	Sync bool
	// FollowUp: a message without a mention, for the thread's session
	// only. When the thread has no session yet it waits for one (Router.Hold,
	// DESIGN §14) instead of starting one.
	FollowUp bool `json:",omitempty"`
	// Files are the message's attached files, by reference: read when a
	// turn takes the message in (Files, DESIGN §12).
	Files []agent.File `json:",omitempty"`
	// Handed are messages handed over with this one as its task,
	// quoted as material (Slack's "Give to pinplan" shortcut).
	Handed []agent.Quoted `json:",omitempty"`
}

// Inbox is where adapters hand decoded, deduplicated messages: Router.
type Inbox interface {
	Handle(ctx context.Context, in Incoming) error
	// Known reports whether a session exists. A message without a
	// mention is handed on as a follow-up either way (Incoming.FollowUp):
	// its session may be on its way.
	Known(key string) bool
	// Click handles a button press on a card or a plan message.
	Click(ctx context.Context, c Click) ClickResult
	// Tell says the router's own words in a thread, to user alone when
	// set (a click's refusal, ClickResult.Private), through the one
	// delivery step (Router.Tell): adapters send nothing of their own.
	Tell(ctx context.Context, th Thread, user, text string) error
	// Post makes an adapter's post that starts a session's thread (a
	// command's task) through the same step (Router.Post).
	Post(ctx context.Context, th Thread, send func(ctx context.Context) error) error
}

// CardSource lists a session's approval cards from its records
// (Router.Cards): the console shows them for every platform's threads,
// held here or, with replicas, elsewhere.
type CardSource interface {
	Cards(key string) []CardInfo
}

var _ CardSource = (*Router)(nil)

// Deduper records event ids so redelivered events run once; store.DB
// implements it.
type Deduper interface {
	FirstSeen(ctx context.Context, key string, ttl time.Duration) (bool, error)
}

// MarkStore keeps an adapter's read marks (where it last read each
// channel) across restarts and replicas, so that it can fetch what
// arrived while nothing listened. The bytes are the adapter's; a name
// never saved reads as nil. store.DB and etcdstore.Store implement it.
type MarkStore interface {
	Marks(ctx context.Context, name string) ([]byte, error)
	SaveMarks(ctx context.Context, name string, data []byte) error
}

// Platform is what the router and plan board need of a chat platform.
// Errors may wrap ErrMessageGone, ErrPinUnavailable or a *RateLimitError.
type Platform interface {
	// PostPlan posts a new plan message in the thread.
	PostPlan(ctx context.Context, th Thread, p Plan) (MessageRef, error)
	// EditPlan replaces the content of a plan message.
	EditPlan(ctx context.Context, th Thread, ref MessageRef, p Plan) error
	// Pin pins or, with pin false, unpins a message.
	Pin(ctx context.Context, th Thread, ref MessageRef, pin bool) error
	// Reply posts text in the thread, answering the message replyTo if set.
	Reply(ctx context.Context, th Thread, replyTo, text string) error
	// Working shows or clears the working indicator for a turn that the
	// message trigger started. A platform that shows sessions
	// (SessionStatus) is asked only where it cannot show them.
	Working(ctx context.Context, th Thread, trigger string, on bool) error
	// Caps declares what the platform offers beyond these methods. The
	// router reads it once, when it is built.
	Caps() Caps
}

// Caps are the capabilities a platform declares (Platform.Caps): each
// is nil, or false, where the platform does not offer it. The router
// never looks for them any other way.
type Caps struct {
	Paced     Paced          // it paces its requests by its budgets
	Sessions  SessionStatus  // it shows each thread's session with a status
	Live      LiveReplier    // it can show answers as they are written
	Private   PrivateReplier // it can show a message to one person
	Split     Splitter       // it cuts long replies into parts
	Cards     Interactive    // it shows approval cards and buttons
	History   History        // it can read a thread's earlier messages
	Forget    Forgetter      // it keeps state per thread in memory
	Files     FileFetcher    // it serves the files people attach
	Anonymous bool           // it does not tell people apart (the console)
}

// PrivateReplier is implemented by platforms that can show a message in a
// thread to one person only (Slack's chat.postEphemeral). A refusal of a
// text command (someone else's stop or reset) goes that way, as a
// button's refusal does (ClickResult.Private): the thread hears nothing
// of it. text is the router's own words, not the model's: a mention in
// it (<@ID>) is meant as one, and it is short enough for one message. A
// platform without it answers such a refusal with Reply.
type PrivateReplier interface {
	ReplyPrivately(ctx context.Context, th Thread, user, text string) error
}

// Paced is implemented by platforms that pace their requests against the
// budgets the platform counts them in (DESIGN §6): Slack per method and
// workspace (a channel's posts on their own), Discord per route. Budget
// returns the budget req counts against, nil for a request the platform
// does not pace. Chat takes a slot before each post, edit and pin: it
// waits for one (Pace), or, for a send that can wait without holding a
// goroutine (a pin), is told when it has one (Budget.Notify).
type Paced interface {
	Budget(req Request) *Budget
}

// Pace waits until p's budget for req gives it a slot, or ctx ends; it
// returns nil at once when p paces nothing, or not req.
func Pace(ctx context.Context, p Paced, req Request) error {
	if p == nil {
		return nil
	}
	if b := p.Budget(req); b != nil {
		return b.Wait(ctx, req.Priority, req.Since)
	}
	return nil
}

var (
	// ErrMessageGone means the plan message was deleted or can no longer be
	// edited; the board posts a new one.
	ErrMessageGone = errors.New("plan message is gone or can no longer be edited")
	// ErrPinUnavailable means the bot may not pin here or the pin limit is
	// reached; the board keeps editing the unpinned message.
	ErrPinUnavailable = errors.New("pinning is not possible here")
	// ErrEditLater means the platform refuses edits of this message for
	// now (Discord 30046: too many edits of a message older than an
	// hour); the board backs off and edits again, and reposts only if it
	// persists.
	ErrEditLater = errors.New("the platform refuses edits of this message for now")
	// ErrUndeliverable means the platform will never accept this message
	// (the channel is gone, the bot was removed, the thread is archived):
	// retrying cannot help.
	ErrUndeliverable = errors.New("the platform will not accept this message")
)

// RateLimitError is a 429 with the wait the platform asked for.
type RateLimitError struct {
	RetryAfter time.Duration
	Err        error
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("rate limited, retry after %s: %v", e.RetryAfter, e.Err)
}

func (e *RateLimitError) Unwrap() error { return e.Err }

// PlanState is the run state a plan message's footer shows.
type PlanState string

// Plan states.
const (
	StateWorking PlanState = "working"
	StateResumed PlanState = "resumed after restart"
	StateDone    PlanState = "done"
	StateStopped PlanState = "stopped"
	StateFailed  PlanState = "failed"
	StateLimited PlanState = "stopped at the round limit"
	StateWaiting PlanState = "waiting for approval"
	// StateTurnBudget and StateDayBudget: the turn stopped before a
	// model request past PINPLAN_TURN_TOKENS, or past its requester's
	// PINPLAN_USER_TOKENS_PER_DAY (DESIGN §18).
	StateTurnBudget PlanState = "stopped at the token budget"
	StateDayBudget  PlanState = "stopped at the daily token budget"
)

// StateOf is the state a plan shows after its turn ended with o.
func StateOf(o agent.Outcome) PlanState {
	return map[agent.Outcome]PlanState{agent.Done: StateDone, agent.Failed: StateFailed, agent.Stopped: StateStopped, agent.Limited: StateLimited,
		agent.TurnBudget: StateTurnBudget, agent.DayBudget: StateDayBudget}[o]
}

// Plan is what a plan message shows.
type Plan struct {
	Items    []todo.Item `json:"items"`
	Revision int64       `json:"revision"`
	State    PlanState   `json:"state"`
	Updated  time.Time   `json:"updated"`
	// Stoppable: a turn runs, so the message carries a Stop button.
	Stoppable bool `json:"stoppable,omitempty"`
	// Activity is what the agent is doing right now, e.g.
	// "running fs__read_text_file"; empty between tool calls.
	Activity string `json:"activity,omitempty"`
	// StoppedBy names who stopped the turn.
	StoppedBy string `json:"stopped_by,omitempty"`
	// Evidence is the tool calls attributed to each item, by item text
	// (DESIGN §15); Calls and Approvals count the turn's tool calls and
	// decided approval cards, for the footer.
	Evidence  agent.Evidence `json:"evidence,omitempty"`
	Calls     int            `json:"calls,omitempty"`
	Approvals int            `json:"approvals,omitempty"`
	// Marks are the people's changes (DESIGN §19): Items shows the
	// items they skipped (status Skipped) where they were, and each
	// changed item's line says who changed it.
	Marks []agent.Mark `json:"marks,omitempty"`
	// Start is the id of the plan's Start button while the turn waits
	// for a person to start its first plan (PINPLAN_PLAN_APPROVAL=ask,
	// DESIGN §19); "" otherwise. The message then carries Start and
	// Change beside Stop.
	Start string `json:"start,omitempty"`
}

// EvidenceLine is the line shown under item: "↳ " and each tool in order
// of first use, with "×N" when used more than once and a failed outcome
// in parentheses; "↳ no tool activity" under a completed item without
// any; "" otherwise. An item a person changed says so first: "↳
// skipped by Ann", then its tools (DESIGN §19).
func (p Plan) EvidenceLine(item todo.Item) string {
	mark := p.markLine(item)
	ie := p.Evidence[item.Content]
	if ie.Count() == 0 {
		switch {
		case mark != "":
			return "↳ " + mark
		case item.Status == todo.Completed:
			return "↳ no tool activity"
		}
		return ""
	}
	if mark != "" {
		mark += " · "
	}
	type use struct {
		n      int
		failed []string
	}
	var order []string
	uses := map[string]*use{}
	for _, c := range ie.Calls {
		u, ok := uses[c.Tool]
		if !ok {
			u = &use{}
			uses[c.Tool] = u
			order = append(order, c.Tool)
		}
		u.n++
		if c.Outcome != agent.OutcomeOK && !slices.Contains(u.failed, c.Outcome) {
			u.failed = append(u.failed, c.Outcome)
		}
	}
	parts := make([]string, 0, len(order)+1)
	for _, tool := range order {
		u := uses[tool]
		s := tool
		if u.n > 1 {
			s += fmt.Sprintf(" ×%d", u.n)
		}
		if len(u.failed) > 0 {
			s += " (" + strings.Join(u.failed, ", ") + ")"
		}
		parts = append(parts, s)
	}
	if ie.More > 0 {
		parts = append(parts, fmt.Sprintf("+%d more", ie.More))
	}
	return "↳ " + mark + strings.Join(parts, ", ")
}

// Progress returns completed and total item counts.
func (p Plan) Progress() (done, total int) {
	for _, it := range p.Items {
		switch it.Status {
		case todo.Completed:
			done++
		case Skipped:
			continue // not the agent's to do
		}
		total++
	}
	return done, total
}

// Title is "Plan · 2/5 done".
func (p Plan) Title() string {
	done, total := p.Progress()
	return fmt.Sprintf("Plan · %d/%d done", done, total)
}

// Footer is the update time, revision and run state. When the run is over
// with items still open it says how many; the bot never ticks them.
func (p Plan) Footer() string {
	state := string(p.State)
	if state == "" {
		state = string(StateWorking)
	}
	if p.State == StateStopped && p.StoppedBy != "" {
		state += " by " + p.StoppedBy
	}
	if p.Start != "" {
		state = "waiting for Start"
	}
	done, total := p.Progress()
	if open := total - done; open > 0 && p.State != StateWorking && p.State != StateResumed && p.State != StateWaiting {
		state += fmt.Sprintf(" · %d open item%s left", open, plural(open))
	}
	if p.Activity != "" {
		state += " · " + p.Activity
	}
	if p.Calls > 0 {
		state += fmt.Sprintf(" · %d tool call%s", p.Calls, plural(p.Calls))
	}
	if p.Approvals > 0 {
		// Decided, not approved: a Deny counts too.
		state += fmt.Sprintf(" · %d approval%s decided", p.Approvals, plural(p.Approvals))
	}
	return fmt.Sprintf("Updated %s · revision %d · %s", p.Updated.UTC().Format("2006-01-02 15:04:05 UTC"), p.Revision, state)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// Mark is the checklist mark of a status.
func Mark(s todo.Status) string {
	switch s {
	case todo.Completed:
		return "✅"
	case todo.InProgress:
		return "🔄"
	case Skipped:
		return MarkSkipped
	}
	return "⬜"
}

// MarkHalted is the mark of an item left in progress when its run ended
// (Plan.ItemMark): nothing works on it any more.
const MarkHalted = "⏸️"

// ItemMark is the mark of p's item it: its status's (Mark), except that
// an item in progress shows MarkHalted once the run has ended (done,
// stopped, failed, the round limit), so an ended plan shows nothing as
// working. The item is not ticked: its status stays the model's.
func (p Plan) ItemMark(it todo.Item) string {
	if p.Halted(it) {
		return MarkHalted
	}
	return Mark(it.Status)
}

// Halted reports whether it was left in progress by a run that ended
// (done, stopped, failed, a limit or a budget): nothing works on it now,
// and no renderer may show it as working.
func (p Plan) Halted(it todo.Item) bool {
	if it.Status != todo.InProgress {
		return false
	}
	switch p.State {
	case StateDone, StateStopped, StateFailed, StateLimited, StateTurnBudget, StateDayBudget:
		return true
	}
	return false
}

// Shorten cuts s to at most max runes, ending with "…" when cut.
func Shorten(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	if max <= 0 {
		return ""
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}
