package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/todo"
)

// Seed 004 (../shared/seeds/004_*.txt) is one agent translating a
// document in 26 parts; its tracker_calls give each call's prompt and
// completion tokens. seedSource is each part's source in tokens (the
// growth of the prompt between calls, less the previous completion) and
// seedTranslation each translation's tokens (the completion).
var (
	seedSource      = []int{2024, 1905, 1846, 2101, 1976, 2038, 1936, 1966, 1638, 1898, 2583, 2104, 2106, 1704, 1887, 2030, 1667, 1919, 2003, 2008, 1994, 1345, 2068, 1753, 2021, 1761}
	seedTranslation = []int{1914, 1741, 1631, 1925, 1769, 1893, 1713, 1830, 1534, 1792, 2498, 1903, 1906, 1506, 1709, 1820, 1507, 1749, 1817, 1761, 1767, 1191, 1885, 1533, 1780, 1578}
)

// seedRun replays the workload with the given context budget through the
// fake model, whose tokenizer counts the sizes above. It returns the
// prompt tokens of every working request (summary calls apart) and how
// many parts were written.
func seedRun(t testing.TB, budget int) (prompts []int, written int, rejected int) {
	t.Helper()
	var mu sync.Mutex
	parts := map[int]bool{}
	read := agent.Tool{Name: "doc__read_part", Idempotent: true, Parameters: map[string]any{"type": "object"},
		Run: func(_ context.Context, _ *agent.ToolEnv, args string) (string, error) {
			var a struct{ Part int }
			json.Unmarshal([]byte(args), &a)
			// ASCII source: the fake counts three bytes a token.
			return fmt.Sprintf("part %d: ", a.Part) + strings.Repeat("source text ", seedSource[a.Part-1]*3/12), nil
		}}
	write := agent.Tool{Name: "doc__write_translation", Idempotent: true, Parameters: map[string]any{"type": "object"},
		Run: func(_ context.Context, _ *agent.ToolEnv, args string) (string, error) {
			var a struct{ Part int }
			json.Unmarshal([]byte(args), &a)
			mu.Lock()
			parts[a.Part] = true
			mu.Unlock()
			return fmt.Sprintf(`{"saved":"part-%02d.md"}`, a.Part), nil
		}}
	fake := &fakeopenai.Server{ContextWindow: max(budget, 0)}
	if budget >= 1_000_000 {
		fake.ContextWindow = 0
	}
	fake.Respond = seedModel
	db, _ := openDB(t)
	h := budgetHarness(t, fake, db, budget, read, write)
	h.send(t, "web/seed", "Translate the document into Chinese, all 26 parts, one at a time.")
	events := h.waitEnd(t, "web/seed")
	if end := events[len(events)-1]; end.Outcome != agent.Done {
		t.Fatalf("budget %d: outcome %s: %q", budget, end.Outcome, end.Text)
	}
	for _, req := range fake.Requests() {
		if !isSummaryCall(&req) {
			prompts = append(prompts, fakeopenai.CountTokens(&req))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return prompts, len(parts), fake.Rejected()
}

// seedModel plays the translator without memory of its own: the plan
// (its latest todo_write snapshot, verbatim in every request) says which
// part is next.
func seedModel(req *openai.ChatCompletionRequest) fakeopenai.Reply {
	if isSummaryCall(req) {
		return fakeopenai.Reply{Content: "Translating the document part by part; the plan lists the parts done."}
	}
	var plan []todo.Item
	for _, m := range req.Messages {
		text := m.Content
		if i := strings.Index(text, `{"todos":`); i >= 0 {
			var snap struct{ Todos []todo.Item }
			if json.Unmarshal([]byte(text[i:]), &snap) == nil {
				plan = snap.Todos
			}
		}
	}
	last := req.Messages[len(req.Messages)-1]
	for i := len(req.Messages) - 1; last.Role == openai.ChatMessageRoleSystem && i > 0; i-- {
		last = req.Messages[i-1]
	}
	call := func(name, args string) fakeopenai.Reply {
		return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: name, Arguments: args}}}
	}
	if plan == nil {
		items := make([]todo.Item, 26)
		for i := range items {
			items[i] = todo.Item{Content: fmt.Sprintf("Translate part %d", i+1), Status: todo.Pending}
		}
		items[0].Status = todo.InProgress
		return call(todo.ToolName, todo.Encode(items))
	}
	next := 0
	for i, it := range plan {
		if it.Status != todo.Completed {
			next = i + 1
			break
		}
	}
	if next == 0 {
		return fakeopenai.Reply{Content: "All 26 parts are translated."}
	}
	switch {
	case last.Role == openai.ChatMessageRoleTool && strings.HasPrefix(last.Content, fmt.Sprintf("part %d: ", next)):
		text := strings.Repeat("译", seedTranslation[next-1]) // the fake counts a CJK character a token
		return call("doc__write_translation", fmt.Sprintf(`{"part":%d,"text":%q}`, next, text))
	case last.Role == openai.ChatMessageRoleTool && strings.Contains(last.Content, fmt.Sprintf(`"part-%02d.md"`, next)):
		plan[next-1].Status = todo.Completed
		if next < len(plan) {
			plan[next].Status = todo.InProgress
		}
		return call(todo.ToolName, todo.Encode(plan))
	}
	return call("doc__read_part", fmt.Sprintf(`{"part":%d}`, next))
}

func peakMean(prompts []int) (peak, mean int) {
	sum := 0
	for _, p := range prompts {
		peak = max(peak, p)
		sum += p
	}
	if len(prompts) > 0 {
		mean = sum / len(prompts)
	}
	return peak, mean
}

func TestSeed004Replay(t *testing.T) {
	prompts, written, rejected := seedRun(t, 20000)
	peak, mean := peakMean(prompts)
	t.Logf("seed 004 with PINPLAN_CONTEXT_TOKENS=20000: %d requests, peak %d, mean %d prompt tokens", len(prompts), peak, mean)
	if written != 26 {
		t.Errorf("%d of 26 parts written", written)
	}
	if peak > 20000 || rejected != 0 {
		t.Errorf("peak %d prompt tokens, %d rejected; want at most 20,000 and none", peak, rejected)
	}
}

// BenchmarkSeed004 reports the peak and mean prompt tokens of the seed-004
// replay with no budget, the default 32,000 and 20,000.
func BenchmarkSeed004(b *testing.B) {
	for _, budget := range []int{10_000_000, 32000, 20000} {
		name := fmt.Sprintf("budget=%d", budget)
		if budget == 10_000_000 {
			name = "no-budget"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				prompts, written, _ := seedRun(b, budget)
				peak, mean := peakMean(prompts)
				b.ReportMetric(float64(peak), "peak-prompt-tokens")
				b.ReportMetric(float64(mean), "mean-prompt-tokens")
				b.ReportMetric(float64(written), "parts-done")
			}
		})
	}
}
