// Package agent runs pinplan's per-thread agent sessions: model rounds over
// an OpenAI-compatible API, the tool registry with todo_write, the stale
// reminder, and one checkpoint per round through the Store interface it
// declares. It imports todo and go-openai; chat, mcp and store import it.
package agent

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/todo"
)

// RunState is a session's persisted run state.
type RunState string

// Run states. A session left Running by a crash resumes on start.
const (
	Idle    RunState = "idle"
	Running RunState = "running"
	// Waiting: the turn is paused until a person decides on a tool call
	// (Checkpoint.Waiting). No goroutine is held while a session waits.
	Waiting RunState = "waiting"
)

// InTurn reports whether a session in this state is in a turn: running,
// or waiting for a decision.
func (s RunState) InTurn() bool { return s == Running || s == Waiting }

// Approval is a tool call waiting for a person's decision (DESIGN.md §12).
type Approval struct {
	CallID    string    `json:"call_id"`
	Tool      string    `json:"tool"`
	Server    string    `json:"server,omitempty"`
	Arguments string    `json:"arguments"`
	Requester string    `json:"requester,omitempty"` // platform user id of the turn's requester
	Deadline  time.Time `json:"deadline"`
	// Turn is the session's turn number: with CallID it names the
	// approval uniquely, as some servers reuse call ids across turns.
	Turn int64 `json:"turn"`
	// Asked is when the card asked: the wait for a decision began then.
	Asked time.Time `json:"asked,omitzero"`
	// Plan: not a tool call but the turn's first plan, which waits for
	// Start (PINPLAN_PLAN_APPROVAL=ask, DESIGN §19); CallID is
	// PlanCallID's, Tool is todo_write and Arguments the plan.
	Plan bool `json:"plan,omitempty"`
}

// PlanCallID is the CallID of turn's plan approval (Approval.Plan).
func PlanCallID(turn int64) string { return "plan-" + strconv.FormatInt(turn, 10) }

// Grant is an "Always allow here": Tool runs without a card on later turns
// of Requester (and of approvers).
type Grant struct {
	Tool      string `json:"tool"`
	Requester string `json:"requester,omitempty"`
}

// Decision is what became of an approval.
type Decision struct {
	Allow  bool      `json:"allow"`
	Always bool      `json:"always,omitempty"` // allow this tool for the rest of the session
	By     string    `json:"by,omitempty"`     // platform user id; empty when it timed out
	ByName string    `json:"by_name,omitempty"`
	At     time.Time `json:"at"`
	// Reason says why a decision was made without a person's choice;
	// empty when a person chose.
	Reason DecisionReason `json:"reason,omitempty"`
	// Asked is when the call's card asked (Approval.Asked), zero for a
	// call decided without one: the wait the decision ended, for traces.
	Asked time.Time `json:"asked,omitzero"`
}

// DecisionReason is why a call was decided without a person's choice. Its
// values are stored in checkpoints: keep them.
type DecisionReason string

// Decision reasons.
const (
	// ReasonTimeout: nobody decided before the approval's deadline.
	ReasonTimeout DecisionReason = "timeout"
	// ReasonStopped: the turn was stopped while the call waited.
	ReasonStopped DecisionReason = "stopped"
)

// Usage is token usage summed over a session's model calls.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
	Calls            int64 `json:"calls"`
}

func (u *Usage) add(o openai.Usage) {
	u.PromptTokens += int64(o.PromptTokens)
	u.CompletionTokens += int64(o.CompletionTokens)
	u.TotalTokens += int64(o.TotalTokens)
	u.Calls++
}

// Tokens is what the token budgets count (DESIGN §18): prompt and
// completion tokens as the server's usage reported them. (Not
// TotalTokens, which some servers leave out.)
func (u Usage) Tokens() int64 { return u.PromptTokens + u.CompletionTokens }

// Spend is tokens charged to a person's UTC day (DESIGN §18,
// PINPLAN_USER_TOKENS_PER_DAY).
type Spend struct {
	// Person is the platform and its user id: "slack/U123".
	Person string `json:"person"`
	// Day is the UTC date, "2006-01-02".
	Day    string `json:"day"`
	Tokens int64  `json:"tokens"`
}

// Entry is one message of a session's stored conversation.
type Entry struct {
	Message openai.ChatCompletionMessage `json:"message"`
	At      time.Time                    `json:"at"`
	Author  string                       `json:"author,omitempty"` // display name of a user message
	// Material: a user entry that quotes a message's files (files.go),
	// masked like an old tool result when the context is short.
	Material bool `json:"material,omitempty"`
	// Images are the images a file entry gives the model, by reference
	// (files.go): the bytes are the session's while their turn runs.
	Images []ImageRef `json:"images,omitempty"`
	// Quote: a user entry that quotes messages as material (the thread's
	// earlier messages, a message handed over), not what a person wrote.
	Quote bool `json:"quote,omitempty"`
	// Steer: a user entry that tells the model of a person's change of
	// the plan (DESIGN §19), not a message a person wrote in the thread.
	Steer bool `json:"steer,omitempty"`
	// Extra is what the server sent with an assistant message's tool
	// calls beyond OpenAI's fields (Reply.Extra), sent back with the
	// message in every request: Gemini refuses a turn's calls without
	// their thought signature, DeepSeek without reasoning_content.
	Extra *Extra `json:"extra,omitempty"`
}

// Inbound is a user message waiting in a session's inbox. The inbox is
// persisted on arrival, so a message that arrives during a turn or just
// before a crash is never lost.
type Inbound struct {
	ID       uint64    `json:"id"` // assigned by the store, increasing per session
	Text     string    `json:"text"`
	Author   string    `json:"author,omitempty"`
	AuthorID string    `json:"author_id,omitempty"` // platform user id, for approvals
	At       time.Time `json:"at"`
	// Context is the thread's earlier messages, quoted, given with the
	// first message of a session (DESIGN.md §12).
	Context []Quoted `json:"context,omitempty"`
	// Files are the message's attached files, by reference (files.go).
	Files []File `json:"files,omitempty"`
	// Handed are messages the author handed over with this one as its
	// task (Slack's "Give to pinplan" shortcut), quoted as material
	// after it.
	Handed []Quoted `json:"handed,omitempty"`
	// Event is the platform's key for the event the message came in
	// (Slack's channel and ts, Discord's message id), or "". The store
	// records it in the same write that queues the message and queues a
	// message whose Event it has seen within EventTTL never again
	// (ErrDuplicate), so a redelivered event is taken in exactly once,
	// even when the process died between deciding to take it and
	// queueing it. It shares the dedupe keys of chat.Deduper.
	Event string `json:"event,omitempty"`
	// MessageID is the platform's id of the message in its thread (a
	// Slack ts, a Discord message id), or "": a turn's answer replies to
	// the message it began on, and its working indicator goes there.
	MessageID string `json:"message_id,omitempty"`
	// Steer is a person's change of the plan (DESIGN §19), queued here
	// so that it is applied in order with the session's messages; such
	// an Inbound carries nothing else and starts no turn.
	Steer *Steer `json:"steer,omitempty"`
}

// EventTTL is how long the store remembers an Inbound's Event.
const EventTTL = 24 * time.Hour

// ErrDuplicate: Enqueue refused a message whose Event was seen before;
// nothing was queued.
var ErrDuplicate = errors.New("this event was taken in before")

// Entry is the history entry for the message: its text, after the
// author's name and ": " when there is one, is what the model reads.
func (in Inbound) Entry() Entry {
	text := in.Text
	if text == "" && len(in.Files) > 0 {
		text = "(files attached)" // a model refuses a user message without content
	}
	if in.Author != "" {
		text = in.Author + ": " + text
	}
	return Entry{Message: openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: text}, At: in.At, Author: in.Author}
}

// Text is what the person wrote: a user entry's content without the
// author prefix Inbound.Entry adds.
func (e Entry) Text() string {
	if e.Author == "" {
		return e.Message.Content
	}
	return strings.TrimPrefix(e.Message.Content, e.Author+": ")
}

// Quoted is an earlier message of a thread, given to the model as quoted
// material, never as instructions.
type Quoted struct {
	Author string `json:"author"`
	Text   string `json:"text"`
}

// PlanRevision is one accepted todo_write call.
type PlanRevision struct {
	Revision   int64       `json:"revision"`
	Items      []todo.Item `json:"items"`
	At         time.Time   `json:"at"`
	ToolCallID string      `json:"tool_call_id"`
	// Evidence is what had been done for each item by this revision.
	Evidence Evidence `json:"evidence,omitempty"`
	// Change is the person's change this revision is (DESIGN §19); nil
	// for the agent's todo_write (ToolCallID).
	Change *Steer `json:"change,omitempty"`
}

// Checkpoint is the agent's part of a session record.
type Checkpoint struct {
	Key        string      `json:"key"`
	State      RunState    `json:"state"`
	Plan       []todo.Item `json:"plan"`
	Revision   int64       `json:"revision"`
	Stale      int         `json:"stale"`
	Usage      Usage       `json:"usage"`
	HistoryLen int         `json:"history_len"`
	TurnRounds int         `json:"turn_rounds"` // model rounds in the turn in progress
	Turns      int64       `json:"turns"`       // turns started
	// Pending is an assistant message whose tools have not all been
	// answered: while Running, its non-idempotent tools may have run
	// before their results were committed; while Waiting, it waits for
	// the approval in Waiting.
	Pending *openai.ChatCompletionMessage `json:"pending,omitempty"`
	// PendingExtra is Pending's Entry.Extra.
	PendingExtra *Extra `json:"pending_extra,omitempty"`
	// Requester is the platform user id whose message started the turn;
	// RequesterName their display name.
	Requester     string `json:"requester,omitempty"`
	RequesterName string `json:"requester_name,omitempty"`
	// Trigger is the platform's id of the message the turn began on
	// (Inbound.MessageID), which its log entries carry.
	Trigger string `json:"trigger,omitempty"`
	// Starter is the platform user id whose message began the session's
	// first turn: they may stop any of its turns and reset it (DESIGN
	// §12). A reset begins a new session, and a new starter.
	Starter string `json:"starter,omitempty"`
	// Trace is the W3C traceparent of the turn's first invoke_agent span
	// (DESIGN §17), "" when it was not traced: a turn that goes on after
	// an approval, a restart or a takeover goes on in that trace.
	Trace string `json:"trace,omitempty"`
	// Ended is how the last turn ended, committed with its end and
	// cleared by the next one's start, which is committed with that
	// turn's first round (Runner.Ending).
	Ended *Ending `json:"ended,omitempty"`
	// Waiting is the approval the turn waits for, Decisions what was
	// decided for Pending's calls so far.
	Waiting   *Approval           `json:"waiting,omitempty"`
	Decisions map[string]Decision `json:"decisions,omitempty"`
	// Grants are the session's "Always allow here" decisions, each for
	// the requester whose turn it was given on. (Grants of the whole
	// session, stored as "allowed" before they were scoped, are no longer
	// honoured: those tools ask again, once.)
	Grants []Grant `json:"grants,omitempty"`
	// Evidence is the calls attributed to the current plan's items;
	// Unattributed the calls made while no item was in progress, waiting
	// for the next snapshot (DESIGN §15). TurnCalls and TurnApprovals
	// count the turn's tool calls (not one a stop kept from running)
	// and decided cards, for the footer.
	Evidence      Evidence `json:"evidence,omitempty"`
	Unattributed  []Call   `json:"unattributed,omitempty"`
	TurnCalls     int      `json:"turn_calls,omitempty"`
	TurnApprovals int      `json:"turn_approvals,omitempty"`
	// TurnBase is Usage.Tokens() when the turn started: the turn has
	// used the difference (PINPLAN_TURN_TOKENS).
	TurnBase int64 `json:"turn_base,omitempty"`
	// Summary stands in for the oldest history entries in requests.
	Summary *Summary `json:"summary,omitempty"`
	// TokenRatio is the server's prompt_tokens over pinplan's estimate,
	// learned from usage; 0 until a server reports usage.
	TokenRatio float64 `json:"token_ratio,omitempty"`
	// LogSeq is the number of the session's newest log entry (LogEntry),
	// 0 before the first; it goes on across resets.
	LogSeq int64 `json:"log_seq,omitempty"`
	// Marks are the people's changes the plan keeps (DESIGN §19): items
	// skipped, and items reopened or added (Steer).
	Marks []Mark `json:"marks,omitempty"`
	// PlanApproved is the last turn whose first plan was started (its
	// Start pressed), with PINPLAN_PLAN_APPROVAL=ask: that turn's later
	// plans do not wait again.
	PlanApproved int64 `json:"plan_approved,omitempty"`
	// Changed counts the changes made to the checkpoint outside the
	// session's run while its turn waited (a decision, a stop): a round
	// written while it waits (Round.Guard) must have read the last.
	Changed int64     `json:"changed,omitempty"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

// Ending is how a turn ended: what TurnEnded reported. A Done turn's
// answer is its last history entry, so Text is kept only for the others.
type Ending struct {
	Turn      int64     `json:"turn"`
	Outcome   Outcome   `json:"outcome"`
	Text      string    `json:"text,omitempty"`
	StoppedBy string    `json:"stopped_by,omitempty"`
	At        time.Time `json:"at"`
}

// Round is everything one checkpoint writes, in one transaction: the
// messages appended to history (drained user messages, the assistant
// message, its tool results), the plan revisions the round accepted, the
// inbox entries it consumed and the new checkpoint. Appended entries go at
// positions Base, Base+1, ... so a repeated commit writes the same keys.
type Round struct {
	Base       int
	Append     []Entry
	Plans      []PlanRevision
	Drained    []uint64
	Checkpoint Checkpoint
	// Log is the round's entries of the session's log, numbered
	// Checkpoint.LogSeq-len(Log)+1 ... Checkpoint.LogSeq: what the round
	// did to the thread, written with it.
	Log []LogEntry
	// Guard: the round was made while the turn waits for a decision, so
	// the store writes it only if the stored checkpoint's Changed is the
	// round's (else ErrChanged, nothing written): a decision or a stop
	// recorded meanwhile is not overwritten.
	Guard bool
	// Spend is the tokens the round's model requests used less what was
	// reserved for them (Store.Reserve), added to the person's day in
	// the same transaction (negative gives back what was reserved and
	// not used; the day's count never goes below 0); nil when there is
	// nothing to settle or the turn has no requester.
	Spend *Spend
}

// Store persists sessions. store.DB implements it on bbolt.
type Store interface {
	// Load returns a session's checkpoint (nil if it has none yet), its
	// history and its inbox.
	Load(ctx context.Context, key string) (*Checkpoint, []Entry, []Inbound, error)
	// Commit writes a round atomically and durably.
	Commit(ctx context.Context, r *Round) error
	// Inbox returns the messages waiting for the session, oldest first.
	Inbox(ctx context.Context, key string) ([]Inbound, error)
	// Enqueue persists an inbound message and returns it with its ID. A
	// message with an Event seen within EventTTL is ErrDuplicate and not
	// queued; otherwise the Event is recorded in the same write.
	Enqueue(ctx context.Context, key string, in Inbound) (Inbound, error)
	// Resumable lists sessions left running or waiting, or with a
	// non-empty inbox.
	Resumable(ctx context.Context) ([]string, error)
	// UpdateCheckpoint changes the session's stored checkpoint by
	// compare-and-set: it reads the checkpoint, calls fn with it (nil when
	// the session has none) and writes what fn left, unless fn returned an
	// error, which UpdateCheckpoint then returns wrapped (errors.Is finds
	// fn's sentinels) with nothing written. No other write of the
	// checkpoint (a Commit, another UpdateCheckpoint) lands between the
	// read and the write: store.DB runs all of it in one bbolt write
	// transaction; a store on etcd reads the record with its ModRevision
	// and writes it in a Txn that compares that revision, reading and
	// calling fn again when the comparison fails. So fn may run more than
	// once and must depend on nothing but its argument. fn changes the
	// turn's state (decisions, State); it must not change Key or
	// HistoryLen, which belong to Commit. With nil, returning nil writes
	// nothing.
	//
	// The rules for what may change (is this call pending, was it decided)
	// are the agent's (see turn); the store only makes them atomic.
	UpdateCheckpoint(ctx context.Context, key string, fn func(*Checkpoint) error) error
	// Archive keeps the session's history and plan revisions aside and
	// starts it afresh (DESIGN.md §13, reset).
	Archive(ctx context.Context, key string) error
	// Spent returns the tokens charged to person on day (Round.Spend and
	// Reserve), across every session and replica; 0 when none.
	Spent(ctx context.Context, person, day string) (int64, error)
	// Reserve charges a model request's cost to person's day before it
	// is made (DESIGN §18), in the one transaction that reads the day's
	// count, so requests of one person in parallel (other sessions,
	// other replicas) cannot pass budget together. It charges
	// min(want, budget-spent) when that is at least need, and returns
	// what it charged and the day's count before; with less left it
	// charges nothing and returns the count with ErrOverBudget. A budget
	// of 0 or less checks nothing: need and want are then the same and
	// may be negative, which gives back a reservation no commit will
	// settle (the count never goes below 0). A later Round.Spend
	// settles the reservation: its Tokens are what the requests used
	// less what was reserved, so they may be negative.
	Reserve(ctx context.Context, person, day string, need, want, budget int64) (charged, spent int64, err error)
}

// ErrOverBudget: the person's day has less left than the request needs
// (Store.Reserve).
var ErrOverBudget = errors.New("over the daily token budget")

// Reservation is what Reserve grants when a budget leaves room: need, or
// more up to want. spent is the day's count before.
func Reservation(need, want, budget, spent int64) (int64, error) {
	if budget <= 0 {
		return want, nil
	}
	left := budget - spent
	if left < need {
		return 0, ErrOverBudget
	}
	return min(want, left), nil
}

// ErrFenced: this process no longer holds the session (its lease is gone,
// another replica runs it now), so the write was refused and changed
// nothing (DESIGN §14). Stores shared by replicas return errors wrapping it.
var ErrFenced = errors.New("this replica no longer holds the session")

// Owners decides which process runs a session when several share one
// store (DESIGN §14); a runner without Owners runs every session itself.
type Owners interface {
	// Take reports whether this process runs the session's work now: it
	// holds the session, or it just took it because nobody held it. When
	// another process holds it, Take lets that process know the session
	// has work, and reports false.
	Take(ctx context.Context, key string) (bool, error)
}

// ErrNotPending: the approval was already decided, or is not this
// session's.
var ErrNotPending = errors.New("no such approval is pending")
