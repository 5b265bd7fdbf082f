package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/todo"
)

// Thread kinds, each a script of user actions and the model's replies.
const (
	kindPlan     = "plan"     // todo_write revisions with current_time between; maybe a follow-up
	kindTools    = "tools"    // reads through the filesystem server between revisions
	kindApproval = "approval" // a write that asks: the card is clicked after a delay
	kindStop     = "stop"     // stopped mid-turn (stop, the Stop button, Slack's session Stop); maybe a follow-up
	kindReset    = "reset"    // a task, reset, a new task in the same thread
)

// Ways a turn is stopped.
const (
	stopText    = "text"    // "stop" while the model is slow to answer
	stopButton  = "button"  // the plan message's Stop while an approval card waits
	stopSession = "session" // Slack's agent session Stop while the model is slow
)

// thread is one conversation of the workload: its script, fixed at the
// start from the seed, and what the driver did of it.
type thread struct {
	ID       int
	Name     string // t0042: in every message and item, so the model and the accounting find the thread
	Platform string // slack or discord
	Kind     string
	Channel  string
	Root     string // Slack: the ts of the message that started the thread
	Start    time.Duration
	Turns    []*turn
	Script   []action
	dir      string // where its files go on the filesystem server

	mu        sync.Mutex // guards the fields below
	started   bool
	finished  bool
	stuck     string // what the driver waited for in vain
	stopTexts int    // "stop" messages sent
	resets    int    // "reset" messages sent
	lastPlan  []todo.Item
	lastAt    [2]int // turn and step of lastPlan
	hasPlan   bool
	overrun   int // requests past the end of a turn's script
}

// action is one step of a thread's script: a turn, or a reset.
type action struct {
	Reset bool
	Turn  int
}

// turn is one message that reaches the model, and the model's replies to
// it, step by step (the step is the number of assistant messages since
// the message).
type turn struct {
	Index   int // 0-based; the message says m<Index+1>
	Tag     string
	Text    string
	Replies []fakeopenai.Reply
	Marker  string // in the answer, and only there
	// Stop is how the turn is stopped ("" for none); ParkStep is the step
	// whose model request is held (a slow answer) for a stop to land in.
	Stop     string
	ParkStep int
	// CardStep is the step whose reply calls the tool that asks; Click is
	// the button pressed ("allow" or "deny", "" for none) after
	// ClickDelay.
	CardStep   int
	Click      string
	ClickDelay time.Duration

	parkOnce sync.Once
	parked   chan struct{} // closed when the park step's request arrives

	mu       sync.Mutex // guards sent and stopSent
	sent     bool
	stopSent bool
}

var itemWords = []string{"gather the inputs", "read the notes", "draft the change", "write the file", "review the draft",
	"run the checks", "update the docs", "ship it", "tell the team", "close the ticket"}

// newThreads draws n threads from the seed, their starts spread evenly
// over spread.
func newThreads(n int, spread time.Duration, discordShare float64, slackChannels int, seed uint64, workDir string) []*thread {
	out := make([]*thread, n)
	for i := range n {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		th := &thread{ID: i, Name: fmt.Sprintf("t%04d", i)}
		th.dir = workDir
		step := spread / time.Duration(max(n, 1))
		th.Start = time.Duration(i)*step + time.Duration(rng.Int64N(int64(step)+1))
		if rng.Float64() < discordShare {
			th.Platform = "discord"
			th.Channel = fmt.Sprintf("DC%04d", i)
		} else {
			th.Platform = "slack"
			th.Channel = fmt.Sprintf("C%02d", i%slackChannels+1)
		}
		switch r := rng.Float64(); {
		case r < 0.30:
			th.Kind = kindPlan
		case r < 0.50:
			th.Kind = kindTools
		case r < 0.70:
			th.Kind = kindApproval
		case r < 0.85:
			th.Kind = kindStop
		default:
			th.Kind = kindReset
		}
		th.script(rng)
		out[i] = th
	}
	return out
}

// items is the thread's plan items: n of them, from word offset off.
func (th *thread) items(n, off int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = th.Name + " " + prefix + itemWords[(off+i)%len(itemWords)]
	}
	return out
}

// revision is a plan over names with the first done completed and the
// next in progress.
func revision(names []string, done int) []todo.Item {
	out := make([]todo.Item, len(names))
	for i, n := range names {
		out[i] = todo.Item{Content: n, Status: todo.Pending}
		switch {
		case i < done:
			out[i].Status = todo.Completed
		case i == done:
			out[i].Status = todo.InProgress
		}
	}
	return out
}

func write(items []todo.Item) fakeopenai.Reply {
	return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: todo.ToolName, Arguments: todo.Encode(items)}}}
}

func call(name, args string) fakeopenai.Reply {
	return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: name, Arguments: args}}}
}

var clock = call("current_time", "{}")

// planReplies writes k revisions over names, from `from` items done to
// all of them, with a current_time round after the first two.
func planReplies(names []string, from, k int) []fakeopenai.Reply {
	var out []fakeopenai.Reply
	for j := range k {
		done := len(names)
		if k > 1 {
			done = from + j*(len(names)-from)/(k-1)
		}
		out = append(out, write(revision(names, done)))
		if j < 2 && j < k-1 {
			out = append(out, clock)
		}
	}
	return out
}

func (th *thread) newTurn(text string) *turn {
	t := &turn{Index: len(th.Turns), ParkStep: -1, CardStep: -1, parked: make(chan struct{})}
	t.Tag = fmt.Sprintf("%sm%d", th.Name, t.Index+1)
	t.Text = t.Tag + " " + text
	t.Marker = "ANSWER " + t.Tag
	th.Turns = append(th.Turns, t)
	th.Script = append(th.Script, action{Turn: t.Index})
	return t
}

func (t *turn) answer() {
	t.Replies = append(t.Replies, fakeopenai.Reply{Content: t.Marker + ": all done, see the plan above."})
}

// approval is a turn that writes a file, which asks first.
func (th *thread) approval(t *turn, names []string, from int, rng *rand.Rand) {
	t.Replies = append(t.Replies, write(revision(names, from)))
	t.CardStep = len(t.Replies)
	path := filepath.Join(th.dir, t.Tag+".txt")
	t.Replies = append(t.Replies, call("fs__write_file", fmt.Sprintf(`{"path":%q,"content":%q}`, path, "written for "+t.Tag)))
	t.Replies = append(t.Replies, write(revision(names, len(names))))
	t.Click = "allow"
	if rng.Float64() < 0.2 {
		t.Click = "deny"
	}
	t.ClickDelay = time.Duration(1000+rng.IntN(9000)) * time.Millisecond
}

// followUp is a later turn that adds an item and finishes the plan.
func (th *thread) followUp(names []string, rng *rand.Rand) []string {
	t := th.newTurn("one more thing, please")
	names = append(append([]string(nil), names...), th.Name+" follow up "+strconv.Itoa(t.Index+1))
	if th.Kind == kindApproval && rng.Float64() < 0.5 {
		th.approval(t, names, len(names)-1, rng)
	} else {
		t.Replies = append(t.Replies, write(revision(names, len(names)-1)), clock, write(revision(names, len(names))))
	}
	t.answer()
	return names
}

func (th *thread) script(rng *rand.Rand) {
	names := th.items(3+rng.IntN(3), rng.IntN(len(itemWords)), "")
	first := th.newTurn("please plan and do the task")
	switch th.Kind {
	case kindPlan:
		first.Replies = planReplies(names, 0, 3+rng.IntN(4))
		first.answer()
		if rng.Float64() < 0.5 {
			th.followUp(names, rng)
		}
	case kindTools:
		notes := filepath.Join(th.dir, "notes.txt")
		first.Replies = []fakeopenai.Reply{
			write(revision(names, 0)),
			call("fs__read_text_file", fmt.Sprintf(`{"path":%q}`, notes)),
			call("fs__list_directory", fmt.Sprintf(`{"path":%q}`, th.dir)),
			write(revision(names, len(names)/2)),
			clock,
			write(revision(names, len(names))),
		}
		first.answer()
		if rng.Float64() < 0.3 {
			th.followUp(names, rng)
		}
	case kindApproval:
		th.approval(first, names, 0, rng)
		first.answer()
		if rng.Float64() < 0.3 {
			th.followUp(names, rng)
		}
	case kindStop:
		switch r := rng.Float64(); {
		case r < 0.3:
			first.Stop = stopButton
			th.approval(first, names, 0, rng)
			first.Click = ""
		case r < 0.5 && th.Platform == "slack":
			first.Stop = stopSession
		default:
			first.Stop = stopText
		}
		if first.Stop != stopButton {
			// Held on the round after the second revision: what was
			// written before it is committed (its result is in the held
			// request), and no todo_write is in flight when the stop lands.
			first.Replies = planReplies(names, 0, 4)
			first.ParkStep = 3
		}
		first.answer() // what a stop that did not land lets the model say
		if rng.Float64() < 0.6 {
			th.followUp(names, rng)
		}
	case kindReset:
		first.Replies = planReplies(names, 0, 3+rng.IntN(3))
		first.answer()
		th.Script = append(th.Script, action{Reset: true})
		fresh := th.items(2+rng.IntN(3), rng.IntN(len(itemWords)), "fresh ")
		second := th.newTurn("a new task now")
		second.Replies = planReplies(fresh, 0, 2+rng.IntN(3))
		second.answer()
	}
}

// model answers the bot's requests from the threads' scripts. It keeps
// no conversation state: the reply is picked by the thread and turn the
// newest user message names and the number of assistant messages after
// it, so a request sent again after a restart gets the same reply.
type model struct {
	threads map[string]*thread
}

var tagRE = regexp.MustCompile(`\b(t\d{4,})m(\d+)\b`)

// locate finds the request's thread, turn and step.
func (m *model) locate(req *openai.ChatCompletionRequest) (*thread, *turn, int) {
	last := -1
	for i, msg := range req.Messages {
		if msg.Role == openai.ChatMessageRoleUser {
			last = i
		}
	}
	if last < 0 {
		return nil, nil, 0
	}
	tags := tagRE.FindAllStringSubmatch(req.Messages[last].Content, -1)
	if len(tags) == 0 {
		return nil, nil, 0
	}
	tag := tags[len(tags)-1]
	th := m.threads[tag[1]]
	n, _ := strconv.Atoi(tag[2])
	if th == nil || n < 1 || n > len(th.Turns) {
		return nil, nil, 0
	}
	step := 0
	for _, msg := range req.Messages[last+1:] {
		if msg.Role == openai.ChatMessageRoleAssistant {
			step++
		}
	}
	return th, th.Turns[n-1], step
}

// respond is the fake model's Respond.
func (m *model) respond(req *openai.ChatCompletionRequest) fakeopenai.Reply {
	th, t, step := m.locate(req)
	if th == nil {
		return fakeopenai.Reply{Content: "ok"}
	}
	if step >= len(t.Replies) {
		th.mu.Lock()
		th.overrun++
		th.mu.Unlock()
		return fakeopenai.Reply{Content: "nothing more for " + t.Tag}
	}
	r := t.Replies[step]
	if len(r.ToolCalls) == 1 && r.ToolCalls[0].Name == todo.ToolName {
		items, err := todo.Parse(r.ToolCalls[0].Arguments)
		at := [2]int{t.Index, step}
		th.mu.Lock()
		if err == nil && (!th.hasPlan || at[0] > th.lastAt[0] || at[0] == th.lastAt[0] && at[1] >= th.lastAt[1]) {
			th.lastPlan, th.lastAt, th.hasPlan = items, at, true
		}
		th.mu.Unlock()
	}
	return r
}

// modelFront is the model's HTTP front: it injects the model's faults
// (500s and slow answers, through the fake's Fail) and holds the park
// step's request of a turn to be stopped until the bot gives up on it
// (the stop cancels it) or parkFor passes.
type modelFront struct {
	fake    *fakeopenai.Server
	model   *model
	faults  *faults
	parkFor time.Duration
}

func (f *modelFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var req openai.ChatCompletionRequest
	if json.Unmarshal(body, &req) == nil {
		if th, t, step := f.model.locate(&req); th != nil && t.ParkStep == step {
			t.parkOnce.Do(func() { close(t.parked) })
			select {
			case <-r.Context().Done():
				return
			case <-time.After(f.parkFor):
			}
		} else {
			f.faults.model(f.fake)
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	f.fake.ServeHTTP(w, r)
}

// summary of a thread's script, for the report.
func (th *thread) summary() string {
	var parts []string
	for _, a := range th.Script {
		if a.Reset {
			parts = append(parts, "reset")
			continue
		}
		t := th.Turns[a.Turn]
		s := "turn"
		switch {
		case t.Stop != "":
			s += "+stop(" + t.Stop + ")"
		case t.CardStep >= 0:
			s += "+card(" + t.Click + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ",")
}
