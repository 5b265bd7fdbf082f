package chat

import (
	"cmp"
	"context"
	"log/slog"
	"slices"

	"github.com/pinplan/pinplan/agent"
)

// rules are who may do what in a session (DESIGN §12): decide on an
// approval, stop a turn, reset a session. They read the approvers, each
// platform's capabilities (an anonymous platform has one user) and the
// session's turn as the agent has it.
type rules struct {
	approvers []string
	caps      map[string]Caps
	runner    Runner
	log       *slog.Logger
}

// mayDecide reports whether user may decide for requester's turn on
// platform. On an anonymous platform (Caps.Anonymous: the local console,
// whoever holds its token is its one user) the requester is always empty. A
// turn elsewhere whose requester is unknown (started before requesters
// were recorded) is left to the approvers.
func (p rules) mayDecide(platform, requester, user string) bool {
	if p.caps[platform].Anonymous && requester == "" {
		return true
	}
	return (requester != "" && user == requester) || slices.Contains(p.approvers, user)
}

// mayStop reports whether user may stop the session's turn t: its
// requester, the session's starter, or an approver (DESIGN §12), on
// every turn.
func (p rules) mayStop(platform string, t agent.TurnInfo, user string) bool {
	return p.mayDecide(platform, t.Requester, user) || (t.Starter != "" && user == t.Starter)
}

// turn returns the session's turn as the agent has it (Runner.Turn); one
// that cannot be read is reported as not running, and logged.
func (p rules) turn(ctx context.Context, key string) agent.TurnInfo {
	t, err := p.runner.Turn(ctx, key)
	if err != nil {
		p.log.Error("read the session's turn", "session", key, "err", err)
	}
	return t
}

// mayReset reports whether user may reset the session whose last turn
// is t: its starter (who, or else that turn's requester, startedBy
// says) or an approver.
func (p rules) mayReset(platform string, t agent.TurnInfo, user string) bool {
	return p.mayDecide(platform, startedBy(t), user)
}

// startedBy is who started the session whose last turn is t; a session
// recorded before starters were kept falls back to that turn's
// requester.
func startedBy(t agent.TurnInfo) string { return cmp.Or(t.Starter, t.Requester) }

func stopRefusal(t agent.TurnInfo) string {
	who := mention(t.Requester)
	if st := t.Starter; st != "" && st != t.Requester {
		who += ", " + mention(st) + " (who started this session)"
	}
	return "Only " + who + " or an approver can stop this turn."
}
