package main

import (
	"context"
	"strings"
	"time"

	"github.com/pinplan/pinplan/adapters/web"
	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
)

// consoleState is the console's read model of the sessions' run states: it
// shows each turn's state and status pill (runState) in the thread list.
type consoleState struct {
	router  *chat.Router
	console *web.Console
}

var _ agent.Subscriber = consoleState{}

// Observe implements agent.Subscriber.
func (c consoleState) Observe(e agent.Event) {
	if state, status, ok := runState(e); ok {
		if th, ok := c.router.Thread(e.Session); ok {
			c.console.SetState(th, state, status)
		}
	}
}

// webStore gives the web console its read-only view of the database.
type webStore struct {
	db       stateStore
	sessions func(context.Context) ([]sessionInfo, error)
}

func (s webStore) Threads(ctx context.Context) ([]web.Summary, error) {
	infos, err := s.sessions(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]web.Summary, 0, len(infos))
	for _, in := range infos {
		title, hidden := chat.DecodeListing(in.Listing, in.Board)
		if hidden {
			continue // deleted from the console
		}
		cp := in.Checkpoint
		sum := web.Summary{Key: cp.Key, Platform: strings.SplitN(cp.Key, "/", 2)[0], State: string(cp.State), Updated: cp.Updated, Usage: cp.Usage}
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

// History is the stored conversation plus messages still in the inbox.
func (s webStore) History(ctx context.Context, key string) ([]agent.Entry, error) {
	_, hist, inbox, err := s.db.Load(ctx, key)
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

func (s webStore) Plans(ctx context.Context, key string) ([]agent.PlanRevision, error) {
	return s.db.Plans(ctx, key)
}

var _ web.UsageSource = webStore{}

// UsageOn implements web.UsageSource: the tokens charged to each person
// on day, named as the sessions they asked in know them.
func (s webStore) UsageOn(ctx context.Context, day string) ([]web.PersonUsage, error) {
	spends, err := s.db.SpentOn(ctx, day)
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
	out := make([]web.PersonUsage, len(spends))
	for i, sp := range spends {
		out[i] = web.PersonUsage{Person: sp.Person, Name: names[sp.Person], Tokens: sp.Tokens}
	}
	return out, nil
}

// platformSessions lists the sessions for the platforms' /pinplan
// status: every session's key, state and title, from whichever store is
// open.
func (s webStore) platformSessions(ctx context.Context) ([]chat.Listed, error) {
	infos, err := s.sessions(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]chat.Listed, 0, len(infos))
	for _, in := range infos {
		title, _ := chat.DecodeListing(in.Listing, in.Board)
		out = append(out, chat.Listed{Key: in.Checkpoint.Key, Title: title, State: in.Checkpoint.State, Updated: in.Checkpoint.Updated})
	}
	return out, nil
}
