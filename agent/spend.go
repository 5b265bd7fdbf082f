package agent

import (
	"context"
	"errors"
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

// A request's cost is reserved before it is made: round asks
// Store.Reserve for its prompt estimate plus its max_tokens, in the one
// transaction that checks the person's day, so parallel threads (and
// replicas) of one person cannot pass the budget together; the request
// asks for no more output than the day has left. The round's commit
// settles the reservation with what the server's usage says (Round.Spend
// is usage less the reservation, so it gives back what was not used). A
// request that fails is settled by the commit that ends the turn; one
// cut short by a shutdown gives its reservation back (release). A
// process killed with a request in flight leaves its reservation
// charged: at most one request's max_tokens more than was used, never
// less. A server that sends no usage is charged an estimate (complete).

// minOutput is the least max_tokens a request is made with under a daily
// budget: a request with less room is not worth its prompt.
const minOutput = 256

// maxOutput is every request's max_tokens (Options.MaxOutputTokens, or
// the share of the context kept for the answer).
func (r *Runner) maxOutput() int {
	if n := r.opts.MaxOutputTokens; n > 0 {
		return n
	}
	return max(int(float64(r.opts.ContextTokens)*completionReserve), 1)
}

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
	if res := s.reserved; res != nil {
		// Settled on the day the reservation was made.
		if n -= res.Tokens; n == 0 {
			return nil
		}
		return &Spend{Person: res.Person, Day: res.Day, Tokens: n}
	}
	p := Person(s.key, next.Requester)
	if n <= 0 || p == "" {
		return nil
	}
	return &Spend{Person: p, Day: Day(next.Updated), Tokens: n}
}

// reserve charges tokens for a request that is not a round's own (a
// summary) to the requester's day, up to the budget: ErrOverBudget when
// they do not fit. The next commit settles it with the round's.
func (r *Runner) reserve(ctx context.Context, s *session, tokens int64) error {
	budget, p := r.opts.UserTokens, Person(s.key, s.cp.Requester)
	if budget <= 0 || p == "" {
		return nil
	}
	day := Day(r.opts.Now())
	charged, _, err := r.opts.Store.Reserve(ctx, p, day, tokens, tokens, budget)
	switch {
	case errors.Is(err, ErrOverBudget):
		return err
	case err != nil:
		r.opts.Logger.Warn("reserve the requester's tokens; going on without the daily budget", "session", s.key, "err", err)
		return nil
	}
	r.held(s, p, day, charged)
	return nil
}

// held adds a reservation of charged tokens to what the session's next
// commit settles.
func (r *Runner) held(s *session, person, day string, charged int64) {
	if res := s.reserved; res != nil && res.Person == person && res.Day == day {
		charged += res.Tokens
	} else if res != nil {
		r.release(s) // another day's: given back, its request settled already or never made
	}
	s.reserved = &Spend{Person: person, Day: day, Tokens: charged}
}

// release gives back a reservation no commit will settle.
func (r *Runner) release(s *session) {
	res := s.reserved
	if res == nil {
		return
	}
	s.reserved = nil
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := r.opts.Store.Reserve(ctx, res.Person, res.Day, -res.Tokens, -res.Tokens, 0); err != nil {
		r.opts.Logger.Warn("give back a token reservation; the person's day stays charged with it", "session", s.key, "tokens", res.Tokens, "err", err)
	}
}

// overBudget ends the turn, with rd, when its next model request would
// pass a token budget; next is that request's estimated prompt tokens
// (1 before it is built: a request costs something). With out > 0 the
// request is about to be made with up to out tokens of output: its cost
// is reserved against the person's day (s.reserved), between next +
// minOutput and next + out, or the turn ends when not even the least
// fits. It reports whether it ended the turn.
func (r *Runner) overBudget(ctx context.Context, s *session, rd *Round, next, out int) (bool, error) {
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
	var spent int64
	var err error
	if out > 0 {
		need := int64(next + min(out, minOutput))
		var charged int64
		charged, spent, err = r.opts.Store.Reserve(ctx, p, Day(now), need, int64(next+out), budget)
		if err == nil {
			r.held(s, p, Day(now), charged)
			s.grant = charged
			return false, nil
		}
		if errors.Is(err, ErrOverBudget) {
			err, next = nil, int(need)
		}
	} else {
		spent, err = r.opts.Store.Spent(ctx, p, Day(now))
	}
	if err != nil {
		if ctx.Err() != nil {
			return false, nil // stopped or shutting down: the request says so
		}
		// The store answers the round's commit next, or says why not.
		r.opts.Logger.Warn("read the requester's tokens today; going on without the daily budget", "session", s.key, "err", err)
		return false, nil
	}
	if out == 0 && spent+int64(next) <= budget {
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
