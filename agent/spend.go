package agent

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Token budgets (DESIGN §18). Tokens are counted as the model's usage
// reports them, prompt and completion (Usage.Tokens), summary calls
// included. A turn is stopped before a model request that would pass
// Options.TurnTokens; a person, before one that would pass
// Options.UserTokens for their UTC day. What each round used is charged
// to the requester's day in the round's own commit (Round.Spend), so
// every session and replica sharing the store counts it.

// Person is whom a session's turn is charged to: the platform (the
// session key's first part) and the requester's user id, as user ids are
// only unique on their platform; "" when the turn has no requester (the
// web console's operator), whom no daily budget limits.
func Person(key, requester string) string {
	if requester == "" {
		return ""
	}
	platform, _, _ := strings.Cut(key, "/")
	return platform + "/" + requester
}

// Day is the UTC date t falls on, as Spend.Day names it.
func Day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// NextDay is the next 00:00 UTC after t: when a daily budget resets.
func NextDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
}

// turnUsed is the tokens the checkpoint's turn has used so far.
func turnUsed(cp Checkpoint) int64 { return cp.Usage.Tokens() - cp.TurnBase }

// spend is what committing next charges to the requester's day: the
// tokens next's usage has over the session's committed usage (nil when
// none, or nobody to charge).
func (r *Runner) spend(s *session, next Checkpoint) *Spend {
	n := next.Usage.Tokens() - s.cp.Usage.Tokens()
	p := Person(s.key, next.Requester)
	if n <= 0 || p == "" {
		return nil
	}
	return &Spend{Person: p, Day: Day(next.Updated), Tokens: n}
}

// overBudget ends the turn, with rd, when its next model request would
// pass a token budget; next is that request's estimated prompt tokens
// (1 before it is built: a request costs something). It reports whether
// it ended the turn.
func (r *Runner) overBudget(ctx context.Context, s *session, rd *Round, next int) (bool, error) {
	if budget := r.opts.TurnTokens; budget > 0 {
		if used := turnUsed(s.cp); used+int64(next) > budget {
			text := fmt.Sprintf("This turn reached its budget of %s tokens (PINPLAN_TURN_TOKENS): it used %s", count(budget), count(used))
			if next > 1 {
				text += fmt.Sprintf(", and its next model request needed about %s more", count(int64(next)))
			}
			text += ", so I stopped before that request. The plan is kept as it was; send a message to go on."
			return true, r.endTurn(ctx, s, rd, TurnBudget, text, nil)
		}
	}
	budget := r.opts.UserTokens
	p := Person(s.key, s.cp.Requester)
	if budget <= 0 || p == "" {
		return false, nil
	}
	now := r.opts.Now()
	spent, err := r.opts.Store.Spent(ctx, p, Day(now))
	if err != nil {
		if ctx.Err() != nil {
			return false, nil // stopped or shutting down: the request says so
		}
		// The store answers the round's commit next, or says why not.
		r.opts.Logger.Warn("read the requester's tokens today; going on without the daily budget", "session", s.key, "err", err)
		return false, nil
	}
	if spent+int64(next) <= budget {
		return false, nil
	}
	text := fmt.Sprintf("You have used %s of your %s tokens for today (PINPLAN_USER_TOKENS_PER_DAY)", count(spent), count(budget))
	if next > 1 && spent < budget {
		text += fmt.Sprintf(", and the next model request needs about %s", count(int64(next)))
	}
	if s.cp.TurnRounds == 0 && turnUsed(s.cp) == 0 {
		text += ", so I did not start on this message."
	} else {
		text += ", so I stopped this turn before its next model request. The plan is kept as it was."
	}
	reset := NextDay(now)
	text += fmt.Sprintf(" Your budget resets at 00:00 UTC (%s), in %s.", reset.Format(time.DateOnly), until(reset.Sub(now)))
	return true, r.endTurn(ctx, s, rd, DayBudget, text, nil)
}

// count writes n with thousands separators: 1,250,000.
func count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// until is d in hours and minutes, rounded up to a minute: "5 h 3 min".
func until(d time.Duration) string {
	m := int((d + time.Minute - 1) / time.Minute)
	if m < 60 {
		return fmt.Sprintf("%d min", m)
	}
	return fmt.Sprintf("%d h %d min", m/60, m%60)
}
