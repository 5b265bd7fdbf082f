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
// requester, the session's starter (rec's), or an approver (DESIGN §12),
// on every turn.
func (p rules) mayStop(platform string, rec boardRecord, t agent.TurnInfo, user string) bool {
	return p.mayDecide(platform, t.Requester, user) || (starter(rec) != "" && user == starter(rec))
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

// mayReset reports whether user may reset rec's session: its starter
// (who, or else its last turn's requester t, startedBy says) or an
// approver.
func (p rules) mayReset(platform string, rec boardRecord, t agent.TurnInfo, user string) bool {
	return p.mayDecide(platform, startedBy(rec, t), user)
}

// startedBy is who started rec's session; a session whose first message
// named nobody (or was recorded before starters were kept) falls back to
// its last turn's requester t.
func startedBy(rec boardRecord, t agent.TurnInfo) string { return cmp.Or(starter(rec), t.Requester) }

// starter is who started rec's session; a session recorded before
// starters were kept falls back to its last requester.
func starter(rec boardRecord) string { return rec.Starter }

func stopRefusal(rec boardRecord, t agent.TurnInfo) string {
	who := mention(t.Requester)
	if st := starter(rec); st != "" && st != t.Requester {
		who += ", " + mention(st) + " (who started this session)"
	}
	return "Only " + who + " or an approver can stop this turn."
}
