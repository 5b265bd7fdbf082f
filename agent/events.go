package agent

import (
	"sync"
	"time"

	"github.com/pinplan/pinplan/todo"
)

// EventKind says what an Event reports.
type EventKind int

// Event kinds, in the order a turn produces them.
const (
	TurnStarted EventKind = iota + 1
	PlanChanged
	TurnEnded
	// ApprovalNeeded: the turn waits for Event.Approval to be decided. It
	// is published again after a restart; the card is posted once.
	ApprovalNeeded
	// ApprovalDecided: Event.Approval was decided (Event.Decision).
	ApprovalDecided
	// ToolStarted and ToolEnded bracket a tool call (Event.Tool).
	ToolStarted
	ToolEnded
	// SessionReset: the session's history and plan were archived.
	SessionReset
	// EvidenceChanged: a round's tool calls were committed; Event.Evidence
	// is what has been done for each item of Event.Plan (DESIGN §15).
	EvidenceChanged
	// TextDelta: the model wrote Event.Text, the next piece of reply
	// Event.Reply, as it streams (OpenAIOptions.Stream). Not logged: what
	// the model writes is in the store only once its round commits, as
	// the turn's answer (TurnEnded) or the interim text of a round that
	// calls tools (TextDone).
	TextDelta
	// TextDone: reply Event.Reply is complete, Event.Text whole. Interim:
	// the round goes on to call tools, and the text is all that round
	// says; a final answer ends with TurnEnded instead, whose Text is the
	// reply's whole text. Not logged.
	TextDone
	// Notice: Event.Text is to be said in the thread as it is (files a
	// message came with that could not be given to the model). Logged
	// with the round.
	Notice
)

// Outcome is how a turn ended.
type Outcome string

// Turn outcomes.
const (
	Done    Outcome = "done"
	Failed  Outcome = "failed"
	Stopped Outcome = "stopped"
	Limited Outcome = "limited" // PINPLAN_MAX_ROUNDS reached
	// TurnBudget: the turn's next model request would have passed
	// PINPLAN_TURN_TOKENS.
	TurnBudget Outcome = "turn_budget"
	// DayBudget: the requester has used their PINPLAN_USER_TOKENS_PER_DAY
	// (or the next request would pass it); a turn refused at its start
	// made no model request.
	DayBudget Outcome = "day_budget"
)

// Event is published after the checkpoint it reports has been committed;
// a logged one (Seq > 0) was committed with it, as a LogEntry.
type Event struct {
	Session string
	// Seq is the event's number in the session's log (LogEntry.Seq); 0
	// for an event that is not logged (ToolStarted, ToolEnded, a resumed
	// turn's start, a failure to read or write the session, a reset).
	Seq      int64
	Kind     EventKind
	Resumed  bool // TurnStarted: the turn resumes after a restart
	Plan     todo.Snapshot
	Revision int64
	// Text is what TurnEnded tells the thread: the answer of a Done
	// turn, or why it ended otherwise ("" for nothing to say).
	Text    string
	Outcome Outcome // TurnEnded
	Err     error   // TurnEnded with Failed: the detail, for logs
	// Turn is the session's turn number (Checkpoint.Turns): TurnStarted
	// and TurnEnded.
	Turn int64
	// StoppedBy is who stopped the turn (TurnEnded with Stopped).
	StoppedBy string
	// Requester is the platform user id whose message started the turn
	// (TurnStarted).
	Requester string
	// Reply names one streamed reply of the model (TextDelta, TextDone):
	// unique in the process, a retried request's reply a new one. A final
	// answer streamed is the last reply before its TurnEnded.
	Reply    string
	Interim  bool      // TextDone: tool calls follow the text
	Approval *Approval // ApprovalNeeded, ApprovalDecided
	Decision *Decision // ApprovalDecided
	Tool     string    // ToolStarted, ToolEnded
	// Evidence is the calls attributed to each item (PlanChanged,
	// EvidenceChanged, TurnStarted); Calls and Approvals count the turn's
	// tool calls and decided cards so far.
	Evidence  Evidence
	Calls     int
	Approvals int
	At        time.Time
}

// Subscriber is told of a turn's events. Observe is called from the
// session's goroutine (ToolStarted from a timer, ordered before its
// ToolEnded), for different sessions at once, and must not block for long:
// the chat plan board coalesces.
type Subscriber interface {
	Observe(Event)
}

// SubscriberFunc is a function as a Subscriber.
type SubscriberFunc func(Event)

// Observe implements Subscriber.
func (f SubscriberFunc) Observe(e Event) { f(e) }

// Publisher takes the events a Runner publishes (Options.Events). Events
// implements it.
type Publisher interface {
	Publish(Event)
}

// Events passes each published event to its subscribers: synchronously,
// one after the other in the order they subscribed, so a subscriber sees
// a session's events in the order they happened. cmd/bot subscribes the
// metrics, the chat router (plan boards and cards) and the console's read
// model. The zero value is ready and has no subscribers.
type Events struct {
	mu   sync.Mutex // guards subs
	subs []Subscriber
}

var _ Publisher = (*Events)(nil)

// Subscribe adds s; it sees the events published from then on.
func (ev *Events) Subscribe(s Subscriber) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	// A new slice: a Publish in progress keeps the one it read.
	ev.subs = append(ev.subs[:len(ev.subs):len(ev.subs)], s)
}

// Publish implements Publisher.
func (ev *Events) Publish(e Event) {
	ev.mu.Lock()
	subs := ev.subs
	ev.mu.Unlock()
	for _, s := range subs {
		s.Observe(e)
	}
}

// nopPublisher drops events: a Runner with no Options.Events.
type nopPublisher struct{}

func (nopPublisher) Publish(Event) {}
