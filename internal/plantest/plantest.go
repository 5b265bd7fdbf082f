// Package plantest holds the plans every adapter's rendering tests use,
// so that Slack, Discord and the console are held to the same cases.
package plantest

import (
	"fmt"
	"strings"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/todo"
)

// Hostile is the text a platform's renderer must escape: an item to work
// on and one left to do (TypicalEvidence), a long step phrase (repeated to
// 1,000 characters) and call arguments (WorstCaseEvidence).
type Hostile struct {
	Working, Todo, Phrase, Args string
}

// Text each platform escapes differently.
var (
	SlackText   = Hostile{Working: "Fix the parser <edge case>", Todo: "Run the suite & report", Phrase: "very long step with <html> & @channel ", Args: `{"path":"<b>&amp;@channel.md"}`}
	DiscordText = Hostile{Working: "Fix the parser_edge case", Todo: "Run the suite & ping <@123>", Phrase: "very long step with *markdown* & @everyone ", Args: `{"path":"*a*_b_@everyone.md"}`}
	WebText     = Hostile{Working: "Fix the parser <edge case>", Todo: "Run the suite & report", Phrase: "very long step with <script> & @channel ", Args: `{"path":"<img src=x onerror=alert(1)>.md"}`}
)

// TypicalEvidence is a plan with evidence under some items: tools used
// more than once, a denied call, and a completed item without any.
func TypicalEvidence(at time.Time, h Hostile) chat.Plan {
	call := func(tool, outcome string, sec int) agent.Call {
		c := agent.Call{Tool: tool, Server: "fs", Outcome: outcome, Start: at.Add(time.Duration(sec) * time.Second), Duration: 120 * time.Millisecond, Args: `{"path":"notes.md"}`}
		if outcome == agent.OutcomeDenied {
			c.Approver = "ann"
		}
		return c
	}
	return chat.Plan{Revision: 6, State: chat.StateWorking, Updated: at, Calls: 5, Approvals: 1, Items: []todo.Item{
		{Content: "Read the failing test", Status: todo.Completed},
		{Content: "Check the old notes", Status: todo.Completed},
		{Content: h.Working, Status: todo.InProgress},
		{Content: h.Todo, Status: todo.Pending},
	}, Evidence: agent.Evidence{
		"Read the failing test": {Calls: []agent.Call{call("fs__read_text_file", agent.OutcomeOK, 1), call("fs__search_files", agent.OutcomeOK, 2), call("fs__read_text_file", agent.OutcomeOK, 3)}},
		h.Working:               {Calls: []agent.Call{call("fs__write_file", agent.OutcomeDenied, 4), call("fs__read_text_file", agent.OutcomeError, 5)}},
	}}
}

// WorstCaseEvidence is the worst case with evidence: 50 items of 1,000
// characters, each with the 50 calls kept over many tools with long
// names, some failed, and more counted beyond them.
func WorstCaseEvidence(at time.Time, h Hostile) chat.Plan {
	long := strings.Repeat(h.Phrase, 1000/len(h.Phrase)+1)[:997]
	tools := []string{"filesystem__read_multiple_files", "filesystem__search_files", "filesystem__write_file", "filesystem__list_directory_with_sizes",
		"github__create_pull_request_review", "github__get_pull_request_comments", "github__search_code", "fetch__fetch",
		"memory__create_entities", "memory__search_nodes", "sqlite__read_query", "puppeteer__puppeteer_screenshot",
		"sequential_thinking__sequentialthinking", "git__git_diff_unstaged", "time__convert_time", "everything__longRunningOperation"}
	outcomes := []string{agent.OutcomeOK, agent.OutcomeOK, agent.OutcomeError, agent.OutcomeOK, agent.OutcomeDenied, agent.OutcomeOK,
		agent.OutcomeTimeout, agent.OutcomeOK, agent.OutcomeInterrupted, agent.OutcomeOK, agent.OutcomeUnavailable}
	args := strings.Repeat(h.Args, 200/len(h.Args)+1)[:200]
	p := chat.Plan{Revision: 50, State: chat.StateWorking, Updated: at, Stoppable: true, Activity: "running filesystem__read_multiple_files",
		Calls: 2600, Approvals: 50, Evidence: agent.Evidence{}}
	for i := 0; i < todo.MaxItems; i++ {
		it := todo.Item{Content: fmt.Sprintf("%02d %s", i+1, long), Status: []todo.Status{todo.Completed, todo.InProgress, todo.Pending}[i%3]}
		p.Items = append(p.Items, it)
		var ie agent.ItemEvidence
		for j := 0; j < 50; j++ {
			tool := tools[(i+j)%len(tools)]
			c := agent.Call{Tool: tool, Server: strings.Split(tool, "__")[0], Outcome: outcomes[(i+j)%len(outcomes)],
				Start: at.Add(time.Duration(i*50+j) * time.Second), Duration: time.Duration(j*37+11) * time.Millisecond, Args: args}
			if c.Outcome == agent.OutcomeDenied {
				c.Approver = "ann"
			}
			ie.Calls = append(ie.Calls, c)
		}
		ie.More = 2 + i
		p.Evidence[it.Content] = ie
	}
	return p
}
