package web

import (
	"context"
	"strings"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
)

// Records is what the console's read model reads of the database (a
// *store.DB, or an *etcdstore.Store with replicas): a session's record,
// history and queued messages, its plan revisions, and the tokens spent
// on a day.
type Records interface {
	Load(ctx context.Context, key string) (*agent.Checkpoint, []agent.Entry, []agent.Inbound, error)
	Plans(ctx context.Context, key string) ([]agent.PlanRevision, error)
	SpentOn(ctx context.Context, day string) ([]agent.Spend, error)
}

// Session is a stored session as the read model lists it: its record,
// and chat's records of its plan board and listing.
type Session struct {
	Checkpoint     agent.Checkpoint
	Board, Listing []byte
}

// ReadModel is the console's read-only view of the database (its Store
// and UsageSource), and the sessions the platforms' /pinplan status
// lists (Listed).
type ReadModel struct {
	records  Records
	sessions func(context.Context) ([]Session, error)
}

var (
	_ Store       = (*ReadModel)(nil)
	_ UsageSource = (*ReadModel)(nil)
)

// NewReadModel returns the read model of records, whose sessions lists
// every stored session.
func NewReadModel(records Records, sessions func(context.Context) ([]Session, error)) *ReadModel {
	return &ReadModel{records: records, sessions: sessions}
}

// Threads implements Store: every session not deleted from the console,
// with its title and shown plan.
func (s *ReadModel) Threads(ctx context.Context) ([]Summary, error) {
	infos, err := s.sessions(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Summary, 0, len(infos))
	for _, in := range infos {
		title, hidden := chat.DecodeListing(in.Listing)
		if hidden {
			continue // deleted from the console
		}
		cp := in.Checkpoint
		sum := Summary{Key: cp.Key, Platform: strings.SplitN(cp.Key, "/", 2)[0], State: string(cp.State), Updated: cp.Updated, Usage: cp.Usage}
		if sum.Updated.IsZero() {
			// A session whose first message is still queued: it is new.
			sum.Updated = time.Now()
		}
		if sum.State == "" {
			sum.State = string(agent.Idle)
		}
		sum.Title = title
		if _, shown, ok := chat.DecodeBoard(in.Board); ok && len(shown.Items) > 0 {
			sum.Plan = &shown
		}
		out = append(out, sum)
	}
	return out, nil
}

// History implements Store: the stored conversation plus messages still
// in the inbox.
func (s *ReadModel) History(ctx context.Context, key string) ([]agent.Entry, error) {
	_, hist, inbox, err := s.records.Load(ctx, key)
	if err != nil {
		return nil, err
	}
	for _, in := range inbox {
		hist = append(hist, in.Entry())
		if e, ok := agent.FilesPending(in); ok {
			hist = append(hist, e) // the console lists them under the message
		}
	}
	return hist, nil
}

// Plans implements Store.
func (s *ReadModel) Plans(ctx context.Context, key string) ([]agent.PlanRevision, error) {
	return s.records.Plans(ctx, key)
}

// UsageOn implements UsageSource: the tokens charged to each person on
// day, named as the sessions they asked in know them.
func (s *ReadModel) UsageOn(ctx context.Context, day string) ([]PersonUsage, error) {
	spends, err := s.records.SpentOn(ctx, day)
	if err != nil || len(spends) == 0 {
		return nil, err
	}
	names := map[string]string{}
	if infos, err := s.sessions(ctx); err == nil { // without names, the ids
		for _, in := range infos {
			if cp := in.Checkpoint; cp.RequesterName != "" {
				names[agent.Person(cp.Key, cp.Requester)] = cp.RequesterName
			}
		}
	}
	out := make([]PersonUsage, len(spends))
	for i, sp := range spends {
		out[i] = PersonUsage{Person: sp.Person, Name: names[sp.Person], Tokens: sp.Tokens}
	}
	return out, nil
}

// Listed lists the sessions for the platforms' /pinplan status: every
// session's key, state and title.
func (s *ReadModel) Listed(ctx context.Context) ([]chat.Listed, error) {
	infos, err := s.sessions(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]chat.Listed, 0, len(infos))
	for _, in := range infos {
		title, _ := chat.DecodeListing(in.Listing)
		out = append(out, chat.Listed{Key: in.Checkpoint.Key, Title: title, State: in.Checkpoint.State, Updated: in.Checkpoint.Updated})
	}
	return out, nil
}

// Threads finds a session's thread by its key (chat.Router.Thread).
type Threads interface {
	Thread(key string) (chat.Thread, bool)
}

// RunStates is the console's read model of the sessions' run states: a
// subscriber to the agent's events (agent.EventService.Subscribe, drained
// on its own goroutine) that shows each turn's state and status pill in
// the thread list, for every platform's sessions.
type RunStates struct {
	console *Console
	threads Threads
}

var _ agent.Subscriber = RunStates{}

// NewRunStates returns the run states shown on console, of the threads
// threads knows.
func NewRunStates(console *Console, threads Threads) RunStates {
	return RunStates{console: console, threads: threads}
}

// Observe implements agent.Subscriber.
func (r RunStates) Observe(e agent.Event) {
	if state, status, ok := runState(e); ok {
		if th, ok := r.threads.Thread(e.Session); ok {
			r.console.SetState(th, state, status)
		}
	}
}

// runState is the console's run state and status pill after an event.
func runState(e agent.Event) (state, status string, ok bool) {
	switch e.Kind {
	case agent.TurnStarted:
		if e.Resumed {
			return "running", string(chat.StateResumed), true
		}
		return "running", string(chat.StateWorking), true
	case agent.ApprovalNeeded:
		return "waiting", string(chat.StateWaiting), true
	case agent.ApprovalDecided:
		return "running", string(chat.StateWorking), true
	case agent.TurnEnded:
		return "idle", string(chat.StateOf(e.Outcome)), true
	}
	return "", "", false
}
