package main

//lint:file-ignore SA1019 max_tokens is what DESIGN §8 sends and what the servers people run (Ollama, vLLM, llama.cpp) read; max_completion_tokens is OpenAI's newer name for it.

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/todo"
)

// TestTokenBudgets, through the binary on Slack (DESIGN §18): a turn that
// keeps calling tools stops before the model request that would pass
// PINPLAN_TURN_TOKENS, says so in the thread and in the plan's footer,
// and leaves the plan as it was; the same person's next message, in
// another thread, is past PINPLAN_USER_TOKENS_PER_DAY and is answered
// with the budget and when it resets, with no model request, although
// they are an approver; someone else is answered. /metrics and the
// console count it all.
func TestTokenBudgets(t *testing.T) {
	t.Parallel()
	plan := todo.Encode([]todo.Item{{Content: "read the logs", Status: todo.InProgress}, {Content: "fix the bug", Status: todo.Pending}})
	// Every answer reports 3,000 tokens. The first thread's turn: two
	// rounds (6,000) fit its budget of 7,000, the third's prompt
	// (about 1,500 more) would not. That leaves its requester 200 short
	// of their day's 6,200: less than any request's prompt.
	model := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		// Completions of 1,000 fit each request's max_tokens, which is
		// what the day has left (the second round's is under 1,500).
		usage := &openai.Usage{PromptTokens: 2000, CompletionTokens: 1000, TotalTokens: 3000}
		var asked string
		tools := 0
		for _, m := range req.Messages {
			switch {
			case m.Role == openai.ChatMessageRoleUser && asked == "":
				asked = m.Content
			case m.Role == openai.ChatMessageRoleTool:
				tools++
			}
		}
		switch {
		case !strings.Contains(asked, "find the bug"):
			return fakeopenai.Reply{Content: "Here you are.", Usage: usage}
		case tools == 0:
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: todo.ToolName, Arguments: plan}}, Usage: usage}
		}
		return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: "current_time", Arguments: "{}"}}, Usage: usage}
	}}
	rig, p := budgetRig(t, model, map[string]string{
		"PINPLAN_TURN_TOKENS": "7000", "PINPLAN_USER_TOKENS_PER_DAY": "6200", "PINPLAN_APPROVERS": "U1",
	})
	defer p.stop(t)
	slack := rig.slack

	const first, second, other = "1700000100.000100", "1700000200.000200", "1700000300.000300"
	if _, err := slack.Push("Ev1", mention("C1", first, "find the bug")); err != nil {
		t.Fatal(err)
	}
	stop := waitReply(t, slack, "C1", first, "This turn reached its budget of 7,000 tokens")
	if !strings.Contains(stop.Text, "used 6,000, and its next model request needed about") {
		t.Errorf("the stop %q does not say what the turn used and the next request needed", stop.Text)
	}
	if n := len(model.Requests()); n != 2 {
		t.Errorf("model requests = %d, want 2: the third would have passed the turn's budget", n)
	}
	var shown fakeslack.Message
	waitFor(t, 20*time.Second, "the plan's footer to name the budget", func() bool {
		for _, m := range planMessages(slack, "C1") {
			if m.ThreadTS == first && strings.Contains(m.Blocks, "revision 1 · stopped at the token budget") {
				shown = m
				return true
			}
		}
		return false
	})
	if !strings.Contains(shown.Text, "Plan · 0/2 done") || !strings.Contains(shown.Blocks, "2 open items left") {
		t.Errorf("the plan after the stop: %q %s; want it as the model left it, nothing ticked", shown.Text, shown.Blocks)
	}

	// The same person, another thread: over the day's budget.
	if _, err := slack.Push("Ev2", mention("C1", second, "and write the release notes")); err != nil {
		t.Fatal(err)
	}
	refusal := waitReply(t, slack, "C1", second, "You have used 6,000 of your 6,200 tokens for today")
	if !strings.Contains(refusal.Text, "did not start on this message") || !strings.Contains(refusal.Text, "resets at 00:00 UTC") {
		t.Errorf("the refusal %q does not say that nothing was done and when the budget resets", refusal.Text)
	}
	if n := len(model.Requests()); n != 2 {
		t.Errorf("model requests = %d after the refused message, want still 2", n)
	}
	// Someone else is answered.
	ev := mention("C1", other, "say hello")
	ev["user"] = "U2"
	if _, err := slack.Push("Ev3", ev); err != nil {
		t.Fatal(err)
	}
	waitReply(t, slack, "C1", other, "Here you are.")

	_, metrics := httpGet(t, p.URL+"/metrics")
	// Plain, even when the scraper takes gzip: the series are a few
	// kilobytes, a gzip writer a megabyte of the bot's memory.
	req, _ := http.NewRequest(http.MethodGet, p.URL+"/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Error(err)
	} else {
		resp.Body.Close()
		if enc := resp.Header.Get("Content-Encoding"); enc != "" {
			t.Errorf("/metrics answered with Content-Encoding %q", enc)
		}
	}
	for _, want := range []string{
		`pinplan_budget_refusals_total{budget="turn"} 1`,
		`pinplan_budget_refusals_total{budget="day"} 1`,
		`pinplan_model_tokens_total{kind="prompt"} 6000`,
		`pinplan_model_tokens_total{kind="completion"} 3000`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	var usage struct {
		Budget int64 `json:"budget"`
		People []struct {
			Person string `json:"person"`
			Tokens int64  `json:"tokens"`
		} `json:"people"`
	}
	getJSON(t, p.URL+"/api/usage", &usage)
	if got := fmt.Sprint(usage.Budget, usage.People); got != "6200 [{slack/U1 6000} {slack/U2 3000}]" {
		t.Errorf("console usage today: %s, want budget 6200, slack/U1 6000 and slack/U2 3000", got)
	}
	var view struct {
		Thread struct {
			UsageText string `json:"usage_text"`
		} `json:"thread"`
	}
	getJSON(t, p.URL+"/api/threads/slack~T1~C1~"+first, &view)
	if view.Thread.UsageText != "6,000 tokens · 2 model calls" {
		t.Errorf("the thread's usage in the console: %q", view.Thread.UsageText)
	}
}

// TestDailyBudgetAcrossReplicas: the day's count is the store's, not a
// replica's: a person who used their day's tokens in a thread one replica
// ran is refused on the other, with the first killed, and no model
// request is made (DESIGN §18).
func TestDailyBudgetAcrossReplicas(t *testing.T) {
	t.Parallel()
	r := newReplicaRig(t, 1) // a plan, a tool call and the answer: 6,000 tokens
	respond := r.model.Respond
	r.model.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		reply := respond(req)
		reply.Usage = &openai.Usage{PromptTokens: 1000, CompletionTokens: 1000, TotalTokens: 2000}
		return reply
	}
	r.env["PINPLAN_USER_TOKENS_PER_DAY"] = "6200"
	ps := []*botProc{r.start(t, 0), r.start(t, 1)}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("messages: %+v\n%s", r.slack.Messages("C1"), stderrs(ps...))
		}
	})
	const first, second = "1700000400.000100", "1700000500.000100"
	if _, err := r.slack.Push("EvDay1", mention("C1", first, "plan the week")); err != nil {
		t.Fatal(err)
	}
	waitReply(t, r.slack, "C1", first, "All done.")
	key := "slack/T1/C1/" + first
	owner := ownerOf(ps, key)
	if owner < 0 {
		t.Fatalf("no replica says it took %s\n%s", key, stderrs(ps...))
	}
	ps[owner].kill()
	other := ps[1-owner]
	asked := len(r.model.Requests())
	if _, err := r.slack.Push("EvDay2", mention("C1", second, "and the next week")); err != nil {
		t.Fatal(err)
	}
	refusal := waitReply(t, r.slack, "C1", second, "You have used 6,000 of your 6,200 tokens for today")
	if !strings.Contains(refusal.Text, "resets at 00:00 UTC") {
		t.Errorf("the refusal %q does not say when the budget resets", refusal.Text)
	}
	if n := len(r.model.Requests()); n != asked {
		t.Errorf("model requests went from %d to %d for a message over the day's budget\n%s", asked, n, other.stderr)
	}
}

// budgetRig is a bot on Slack with the model m and the budgets' settings
// in env.
func budgetRig(t *testing.T, m *fakeopenai.Server, env map[string]string) (*slackRig, *botProc) {
	slack := &fakeslack.Server{}
	ss := httptest.NewServer(slack)
	t.Cleanup(ss.Close)
	ms := httptest.NewServer(m)
	t.Cleanup(ms.Close)
	rig := &slackRig{slack: slack, model: m, slackURL: ss.URL, env: map[string]string{
		"PINPLAN_DB": filepath.Join(t.TempDir(), "budget.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"OPENAI_BASE_URL": ms.URL + "/v1", "OPENAI_API_KEY": "sk-test",
		"SLACK_BOT_TOKEN": "xoxb-test-token", "SLACK_API_URL": ss.URL + "/api/", "SLACK_APP_TOKEN": "xapp-test-token",
	}}
	maps.Copy(rig.env, env)
	p := rig.start(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("model requests: %d\nslack messages: %+v\nbot stderr:\n%s", len(m.Requests()), slack.Messages("C1"), p.stderr)
		}
	})
	return rig, p
}

// usageOf is what the console says a person used today.
func usageOf(t *testing.T, p *botProc, person string) int64 {
	var usage struct {
		People []struct {
			Person string `json:"person"`
			Tokens int64  `json:"tokens"`
		} `json:"people"`
	}
	getJSON(t, p.URL+"/api/usage", &usage)
	for _, u := range usage.People {
		if u.Person == person {
			return u.Tokens
		}
	}
	return 0
}

// TestDailyBudgetParallelThreads: one person mentioning the bot in 24
// threads at once cannot pass PINPLAN_USER_TOKENS_PER_DAY together: each
// request's cost (its prompt and its max_tokens) is reserved before it is
// made, so while one request is in flight the others find the day spent
// and are answered with the budget, with no model request (DESIGN §18).
// Before reservations, all 24 were answered: 45,600 of 2,000 tokens
// (BENCHMARKS.md "Budgets").
func TestDailyBudgetParallelThreads(t *testing.T) {
	t.Parallel()
	const budget = 2000
	model := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		time.Sleep(time.Second) // the requests of the threads overlap
		return fakeopenai.Reply{Content: "Here you are.", Usage: &openai.Usage{PromptTokens: 400, CompletionTokens: 1500, TotalTokens: 1900}}
	}}
	rig, p := budgetRig(t, model, map[string]string{"PINPLAN_USER_TOKENS_PER_DAY": fmt.Sprint(budget)})
	defer p.stop(t)
	// Three threads in each of 8 channels: the refusals are posts, and
	// Slack paces posts per channel.
	type thread struct{ channel, ts string }
	var threads []thread
	for i := range 24 {
		th := thread{fmt.Sprint("C", i%8+1), fmt.Sprintf("1700001%03d.000100", i)}
		threads = append(threads, th)
		if _, err := rig.slack.Push(fmt.Sprint("EvPar", i), mention(th.channel, th.ts, "summarise the incident")); err != nil {
			t.Fatal(err)
		}
	}
	answered, refused := 0, 0
	waitFor(t, 60*time.Second, "every thread answered or refused", func() bool {
		answered, refused = 0, 0
		for _, th := range threads {
			for _, m := range rig.slack.Messages(th.channel) {
				if m.ThreadTS != th.ts || m.BotID == "" || m.Blocks != "" {
					continue
				}
				switch {
				case strings.Contains(m.Text, "Here you are."):
					answered++
				case strings.Contains(m.Text, "tokens for today"):
					refused++
				}
			}
		}
		return answered+refused == len(threads)
	})
	used := usageOf(t, p, "slack/U1")
	t.Logf("24 threads at once on a budget of %d: %d answered, %d refused, %d model requests, %d tokens charged", budget, answered, refused, len(model.Requests()), used)
	if answered != 1 || refused != 23 {
		t.Errorf("24 threads at once on a budget of %d, 1,900 tokens a request: %d answered, %d refused; want 1 and 23", budget, answered, refused)
	}
	if n := len(model.Requests()); n != answered {
		t.Errorf("model requests = %d for %d answers", n, answered)
	}
	for i, req := range model.Requests() {
		if req.MaxTokens <= 0 || req.MaxTokens > budget {
			t.Errorf("request %d: max_tokens = %d, want within the day's %d", i, req.MaxTokens, budget)
		}
	}
	if used > budget {
		t.Errorf("the console says slack/U1 used %d of %d tokens", used, budget)
	}
}

// TestDailyBudgetWithoutUsage: a server that reports no usage is charged
// an estimate of what it was sent and what it wrote, and the log says
// once that it sends none; before, every long answer went through a
// 2,000-token budget and the console listed nobody (DESIGN §18).
func TestDailyBudgetWithoutUsage(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("The incident began when the primary database ran out of disk. ", 300) // about 2,700 words
	model := &fakeopenai.Server{NoUsage: true, Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		return fakeopenai.Reply{Content: long}
	}}
	rig, p := budgetRig(t, model, map[string]string{"PINPLAN_USER_TOKENS_PER_DAY": "2000"})
	defer p.stop(t)
	answered := 0
	for i := range 5 {
		ts := fmt.Sprintf("1700002%03d.000100", i)
		if _, err := rig.slack.Push(fmt.Sprint("EvNoUsage", i), mention("C1", ts, "write up the incident")); err != nil {
			t.Fatal(err)
		}
		reply := waitReply(t, rig.slack, "C1", ts, "")
		if strings.Contains(reply.Text, "The incident began") {
			answered++
		} else if !strings.Contains(reply.Text, "tokens for today") {
			t.Errorf("thread %d answered %q, want the answer or the budget", i, reply.Text)
		}
	}
	if answered != 1 {
		t.Errorf("%d of 5 long answers went through a budget of 2,000 from a server that sends no usage, want 1", answered)
	}
	if used := usageOf(t, p, "slack/U1"); used <= 0 || used > 2000 {
		t.Errorf("the console says slack/U1 used %d tokens, want an estimate above 0 and within the budget", used)
	}
	if n := strings.Count(p.stderr.String(), "sends no usage"); n != 1 {
		t.Errorf("the log says %d times that the server sends no usage, want once", n)
	}
}

// TestDailyBudgetParallelAcrossReplicas: the reservation holds across
// replicas: one person's 8 threads at once, spread over two replicas on
// etcd, make one model request between them, and the day's count stays
// within the budget (DESIGN §18).
func TestDailyBudgetParallelAcrossReplicas(t *testing.T) {
	t.Parallel()
	const budget = 2000
	r := newReplicaRig(t, 1)
	respond := r.model.Respond
	r.model.Respond = func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		time.Sleep(time.Second) // the threads' requests overlap
		reply := respond(req)
		reply.Usage = &openai.Usage{PromptTokens: 400, CompletionTokens: 1500, TotalTokens: 1900}
		return reply
	}
	r.env["PINPLAN_USER_TOKENS_PER_DAY"] = fmt.Sprint(budget)
	ps := []*botProc{r.start(t, 0), r.start(t, 1)}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("messages: %+v\n%s", r.slack.Messages("C1"), stderrs(ps...))
		}
	})
	var threads []string
	for i := range 8 {
		ts := fmt.Sprintf("1700003%03d.000100", i)
		threads = append(threads, ts)
		if _, err := r.slack.Push(fmt.Sprint("EvRepPar", i), mention("C1", ts, "plan the week")); err != nil {
			t.Fatal(err)
		}
	}
	refused := 0
	waitFor(t, 60*time.Second, "seven threads refused with the budget", func() bool {
		refused = 0
		for _, ts := range threads {
			for _, m := range r.slack.Messages("C1") {
				if m.ThreadTS == ts && m.BotID != "" && m.Blocks == "" && strings.Contains(m.Text, "tokens for today") {
					refused++
					break
				}
			}
		}
		return refused >= 7
	})
	took := map[int]bool{}
	for _, ts := range threads {
		if o := ownerOf(ps, "slack/T1/C1/"+ts); o >= 0 {
			took[o] = true
		}
	}
	time.Sleep(2 * time.Second) // a second request would have come by now
	if n := len(r.model.Requests()); n != 1 {
		t.Errorf("%d model requests for one person's 8 threads on a budget of %d, want 1", n, budget)
	}
	if len(took) != 2 {
		t.Logf("the threads ran on %d replica(s) only", len(took))
	}
	var usage struct {
		People []struct {
			Person string `json:"person"`
			Tokens int64  `json:"tokens"`
		} `json:"people"`
	}
	getJSON(t, ps[0].URL+"/api/usage", &usage)
	for _, u := range usage.People {
		if u.Person == "slack/U1" && u.Tokens > budget {
			t.Errorf("slack/U1 charged %d of %d tokens", u.Tokens, budget)
		}
	}
}
