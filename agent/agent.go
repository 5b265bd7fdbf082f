// Package agent runs pinplan's per-thread agent sessions: model rounds over
// an OpenAI-compatible API, the tool registry with todo_write, the stale
// reminder, and one checkpoint per round through the Store interface it
// declares. It imports todo and go-openai; chat and store import it.
package agent

import (
	"context"
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

// Entry is one message of a session's stored conversation.
type Entry struct {
	Message openai.ChatCompletionMessage `json:"message"`
	At      time.Time                    `json:"at"`
	Author  string                       `json:"author,omitempty"` // display name of a user message
}

// Inbound is a user message waiting in a session's inbox. The inbox is
// persisted on arrival, so a message that arrives during a turn or just
// before a crash is never lost.
type Inbound struct {
	ID     uint64    `json:"id"` // assigned by the store, increasing per session
	Text   string    `json:"text"`
	Author string    `json:"author,omitempty"`
	At     time.Time `json:"at"`
}

// PlanRevision is one accepted todo_write call.
type PlanRevision struct {
	Revision   int64       `json:"revision"`
	Items      []todo.Item `json:"items"`
	At         time.Time   `json:"at"`
	ToolCallID string      `json:"tool_call_id"`
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
	// Pending is an assistant message whose non-idempotent tools may have
	// run before their results were committed.
	Pending *openai.ChatCompletionMessage `json:"pending,omitempty"`
	Created time.Time                     `json:"created"`
	Updated time.Time                     `json:"updated"`
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
	// Enqueue persists an inbound message and returns it with its ID.
	Enqueue(ctx context.Context, key string, in Inbound) (Inbound, error)
	// Resumable lists sessions left running or with a non-empty inbox.
	Resumable(ctx context.Context) ([]string, error)
}

// EventKind says what an Event reports.
type EventKind int

// Event kinds, in the order a turn produces them.
const (
	TurnStarted EventKind = iota + 1
	PlanChanged
	Replied
	TurnEnded
)

// Outcome is how a turn ended.
type Outcome string

// Turn outcomes.
const (
	Done    Outcome = "done"
	Failed  Outcome = "failed"
	Stopped Outcome = "stopped"
	Limited Outcome = "limited" // PINPLAN_MAX_ROUNDS reached
)

// Event is published after the checkpoint it reports has been committed.
type Event struct {
	Session  string
	Kind     EventKind
	Resumed  bool // TurnStarted: the turn resumes after a restart
	Plan     todo.Snapshot
	Revision int64
	Text     string  // Replied: the answer; TurnEnded: a message for the user
	Outcome  Outcome // TurnEnded
	Err      error   // TurnEnded with Failed: the detail, for logs
	At       time.Time
}

// Observer receives events. It is called from the session's goroutine and
// must not block for long; the chat plan board coalesces.
type Observer func(Event)
