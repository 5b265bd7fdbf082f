package web

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
)

type usageByDay map[string][]PersonUsage

func (u usageByDay) UsageOn(_ context.Context, day string) ([]PersonUsage, error) { return u[day], nil }

// GET /api/usage lists today's (UTC) tokens per person, most first, with
// the daily budget and when it resets; the thread's header says what the
// session used.
func TestUsageToday(t *testing.T) {
	now := time.Date(2026, 3, 1, 23, 30, 0, 0, time.FixedZone("UTC+2", 2*3600)) // 21:30 UTC
	c := New(Options{DailyBudget: 50000, Now: func() time.Time { return now }, Usage: usageByDay{
		"2026-03-01": {{Person: "slack/U2", Tokens: 700}, {Person: "slack/U1", Name: "Ann", Tokens: 1250}},
		"2026-03-02": {{Person: "slack/U3", Tokens: 9}},
	}})
	defer c.Close()
	rec := httptest.NewRecorder()
	c.usageToday(rec, httptest.NewRequest("GET", "/api/usage", nil))
	var got struct {
		Day      string        `json:"day"`
		ResetsAt time.Time     `json:"resets_at"`
		Budget   int64         `json:"budget"`
		People   []PersonUsage `json:"people"`
	}
	if err := json.NewDecoder(rec.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Day != "2026-03-01" || !got.ResetsAt.Equal(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)) || got.Budget != 50000 {
		t.Errorf("day %s, resets %s, budget %d; want 2026-03-01, 2026-03-02 00:00 UTC, 50000", got.Day, got.ResetsAt, got.Budget)
	}
	want := []PersonUsage{{Person: "slack/U1", Name: "Ann", Tokens: 1250, Text: "1,250 of 50,000 tokens"}, {Person: "slack/U2", Tokens: 700, Text: "700 of 50,000 tokens"}}
	if len(got.People) != 2 || got.People[0] != want[0] || got.People[1] != want[1] {
		t.Errorf("people %+v\nwant %+v", got.People, want)
	}
	for _, c := range []struct {
		u    agent.Usage
		want string
	}{
		{agent.Usage{}, ""},
		{agent.Usage{Calls: 3}, ""}, // a server that reports no usage
		{agent.Usage{PromptTokens: 1000, CompletionTokens: 234, Calls: 1}, "1,234 tokens · 1 model call"},
		{agent.Usage{PromptTokens: 12000000, CompletionTokens: 5, Calls: 6}, "12,000,005 tokens · 6 model calls"},
	} {
		if got := viewThread(Summary{Usage: c.u}).UsageText; got != c.want {
			t.Errorf("usage text of %+v = %q, want %q", c.u, got, c.want)
		}
	}
}
