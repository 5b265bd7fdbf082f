package web

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"

	"github.com/pinplan/pinplan/agent"
)

// UsageSource is what the console reads of the tokens people used
// (DESIGN §18): each person's tokens on a UTC day, across sessions and
// replicas.
type UsageSource interface {
	UsageOn(ctx context.Context, day string) ([]PersonUsage, error)
}

// PersonUsage is one person's tokens on a day.
type PersonUsage struct {
	Person string `json:"person"`         // "slack/U123"
	Name   string `json:"name,omitempty"` // their display name, when a session knows it
	Tokens int64  `json:"tokens"`
	Text   string `json:"text"` // "1,250 of 50,000 tokens", for the page
}

// usageToday serves GET /api/usage: who used how many tokens today (UTC),
// most first, and the daily budget with when it resets.
func (c *Console) usageToday(w http.ResponseWriter, r *http.Request) {
	now := c.opts.Now()
	day := agent.Day(now)
	people := []PersonUsage{}
	if c.opts.Usage != nil {
		got, err := c.opts.Usage.UsageOn(r.Context(), day)
		if err != nil {
			c.opts.Logger.Error("read today's token usage", "err", err)
			writeErr(w, http.StatusInternalServerError, "could not read the database")
			return
		}
		people = append(people, got...)
	}
	sort.SliceStable(people, func(i, j int) bool { return people[i].Tokens > people[j].Tokens })
	for i := range people {
		people[i].Text = tokensText(people[i].Tokens, c.opts.DailyBudget)
	}
	writeJSON(w, http.StatusOK, map[string]any{"day": day, "resets_at": agent.NextDay(now), "budget": c.opts.DailyBudget, "people": people})
}

// tokensText is "1,250 tokens", or "1,250 of 50,000 tokens" under a
// budget.
func tokensText(n, budget int64) string {
	if budget > 0 {
		return fmt.Sprintf("%s of %s tokens", thousands(n), thousands(budget))
	}
	return thousands(n) + " tokens"
}

// usageText is a thread's usage as its header shows it: "12,400 tokens ·
// 6 model calls"; "" while the server has reported none.
func usageText(u agent.Usage) string {
	if u.Tokens() == 0 {
		return ""
	}
	calls := "model calls"
	if u.Calls == 1 {
		calls = "model call"
	}
	return fmt.Sprintf("%s · %d %s", tokensText(u.Tokens(), 0), u.Calls, calls)
}

// thousands writes n (a count, never below 0) with separators: 1,250,000.
func thousands(n int64) string {
	s := strconv.FormatInt(max(n, 0), 10)
	out := make([]byte, 0, len(s)+len(s)/3)
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
