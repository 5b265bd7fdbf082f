package agent

import (
	"log/slog"
	"sync"
	"sync/atomic"
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
	// Trigger is the platform's id of the message the turn began on
	// (Checkpoint.Trigger), on every event of the turn: the answer
	// replies to it, and the working indicator is shown on it and
	// cleared from it.
	Trigger string
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
	// Marks are the people's changes the plan keeps (Checkpoint.Marks),
	// on every event that carries the plan; Steer is the change a
	// PlanChanged made by a person reports.
	Marks []Mark
	Steer *Steer
	At    time.Time
}

// Subscriber is told of a turn's events in line (EventService.Follow).
// Observe is called from the session's goroutine (ToolStarted from a
// timer, ordered before its ToolEnded), for different sessions at once,
// and must only queue: the chat router's deliverers follow this way.
type Subscriber interface {
	Observe(Event)
}

// SubscriberFunc is a function as a Subscriber.
type SubscriberFunc func(Event)

// Observe implements Subscriber.
func (f SubscriberFunc) Observe(e Event) { f(e) }

// Publisher takes the events a Runner publishes (Options.Events).
// EventService implements it.
type Publisher interface {
	Publish(Event)
}

// EventService passes each published event on, as wtf's EventService
// does: to the subscribers that follow in line (Follow: the chat router,
// whose Observe only queues, so it sees every event in the order
// published, before Publish returns), then to each Subscription's
// buffered channel, which its subscriber drains on its own goroutine
// (the console's read model, the metrics). A subscription whose buffer
// is full misses the event: it is counted (Subscription.Dropped) and
// logged once until the subscriber catches up, and Publish never waits,
// so a slow watcher never holds up the agent. The zero value is ready
// and logs nothing.
type EventService struct {
	Logger *slog.Logger // where dropped events are reported; nil: nowhere

	mu     sync.RWMutex // guards follow and subs; held for reading while sending
	follow []Subscriber
	subs   map[*Subscription]struct{}
}

var _ Publisher = (*EventService)(nil)

// Follow adds f, which sees the events published from then on, in line
// and in order. f's Observe must not block: it queues.
func (s *EventService) Follow(f Subscriber) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A new slice: a Publish in progress keeps the one it read.
	s.follow = append(s.follow[:len(s.follow):len(s.follow)], f)
}

// Subscribe returns a subscription to the events published from then on,
// whose channel holds up to buffer of them (at least 1). name says whose
// it is in the log. The subscriber drains it (Subscription.C, or Drain)
// on its own goroutine, and closes it when done.
func (s *EventService) Subscribe(name string, buffer int) *Subscription {
	sub := &Subscription{svc: s, name: name, c: make(chan Event, max(1, buffer))}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs == nil {
		s.subs = map[*Subscription]struct{}{}
	}
	s.subs[sub] = struct{}{}
	return sub
}

// Publish implements Publisher.
func (s *EventService) Publish(e Event) {
	s.mu.RLock()
	follow := s.follow
	s.mu.RUnlock()
	for _, f := range follow {
		f.Observe(e)
	}
	s.mu.RLock()
	defer s.mu.RUnlock() // a Close waits for the sends below
	for sub := range s.subs {
		sub.send(e, s.Logger)
	}
}

// Subscription is one subscriber's events (EventService.Subscribe).
type Subscription struct {
	svc     *EventService
	name    string
	c       chan Event
	dropped atomic.Int64
	behind  atomic.Bool // dropped since the last event it took
	once    sync.Once
}

// C is the events, in the order published; closed by Close.
func (sub *Subscription) C() <-chan Event { return sub.c }

// Dropped is how many events the subscription missed with its buffer full.
func (sub *Subscription) Dropped() int64 { return sub.dropped.Load() }

// Name is the name it was subscribed with.
func (sub *Subscription) Name() string { return sub.name }

// Close ends the subscription: no event is sent after it returns, and C
// is closed once the events still buffered are read.
func (sub *Subscription) Close() {
	sub.once.Do(func() {
		sub.svc.mu.Lock()
		defer sub.svc.mu.Unlock()
		delete(sub.svc.subs, sub)
		close(sub.c)
	})
}

// Drain passes each event to to.Observe, on the calling goroutine, until
// the subscription is closed and its buffer read.
func (sub *Subscription) Drain(to Subscriber) {
	for e := range sub.c {
		to.Observe(e)
	}
}

func (sub *Subscription) send(e Event, log *slog.Logger) {
	select {
	case sub.c <- e:
		sub.behind.Store(false)
	default:
		n := sub.dropped.Add(1)
		if !sub.behind.Swap(true) && log != nil {
			log.Warn("an event subscriber is behind; its events are dropped until it catches up", "subscriber", sub.name, "dropped", n, "buffer", cap(sub.c))
		}
	}
}

// nopPublisher drops events: a Runner with no Options.Events.
type nopPublisher struct{}

func (nopPublisher) Publish(Event) {}
