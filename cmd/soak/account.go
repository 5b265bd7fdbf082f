package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/pinplan/pinplan/todo"
)

// turnResult is what one turn got: the copies of its answer that reached
// the platform.
type turnResult struct {
	Thread, Tag, Platform string
	Want                  bool // sent, and not stopped: it should be answered once
	Stopped               bool // a stop was sent
	Answers               int  // messages carrying its marker
}

// replyResult is what one control word got: its sends, and the bot's
// replies to it in the thread.
type replyResult struct {
	Thread, Word string
	Sent, Got    int
}

// planResult compares a thread's newest plan message with the last
// revision the model wrote in the thread.
type planResult struct {
	Thread    string      `json:"thread"`
	Want      []shownItem `json:"want"`
	Got       []shownItem `json:"got"`
	WantState string      `json:"want_state"` // done or stopped
	GotState  string      `json:"got_state"`
	Revision  int         `json:"revision"`
	OK        bool        `json:"ok"`
	Why       string      `json:"why,omitempty"`
}

// tally is the accounting of a run.
type tally struct {
	AnswersWanted     int `json:"answers_wanted"`       // turns that should be answered
	AnswersOnce       int `json:"answers_exactly_once"` // of those, answered exactly once
	AnswersLost       int `json:"answers_lost"`         // of those, never answered
	AnswersDuplicated int `json:"answers_duplicated"`   // extra copies, over every turn
	StopsSent         int `json:"stops_sent"`
	StopsIgnored      int `json:"stops_ignored"` // stopped turns answered anyway
	RepliesWanted     int `json:"control_replies_wanted"`
	RepliesLost       int `json:"control_replies_lost"`
	RepliesDuplicated int `json:"control_replies_duplicated"`
	PlansChecked      int `json:"plans_checked"`
	PlansOnLast       int `json:"plans_on_last_revision"`
	PlansOff          int `json:"plans_not_on_last_revision"`
	// Lost and Duplicated are the run's verdict: both must be 0. Lost is
	// answers and control replies never delivered and plans whose last
	// revision never reached their message; Duplicated is extra copies of
	// answers and control replies.
	Lost       int `json:"lost"`
	Duplicated int `json:"duplicated"`
}

// account adds up turns, control replies and plans.
func account(turns []turnResult, replies []replyResult, plans []planResult) tally {
	var t tally
	for _, r := range turns {
		switch {
		case r.Want:
			t.AnswersWanted++
			switch {
			case r.Answers == 0:
				t.AnswersLost++
			case r.Answers == 1:
				t.AnswersOnce++
			}
		case r.Stopped:
			t.StopsSent++
			if r.Answers > 0 {
				t.StopsIgnored++
			}
		}
		if r.Answers > 1 {
			t.AnswersDuplicated += r.Answers - 1
		}
	}
	for _, r := range replies {
		t.RepliesWanted += r.Sent
		if r.Got < r.Sent {
			t.RepliesLost += r.Sent - r.Got
		}
		if r.Got > r.Sent {
			t.RepliesDuplicated += r.Got - r.Sent
		}
	}
	for _, p := range plans {
		t.PlansChecked++
		if p.OK {
			t.PlansOnLast++
		} else {
			t.PlansOff++
		}
	}
	t.Lost = t.AnswersLost + t.RepliesLost + t.PlansOff
	t.Duplicated = t.AnswersDuplicated + t.RepliesDuplicated
	return t
}

// countText counts the bot's plain replies in ms that contain any of subs.
func countText(ms []botMsg, subs ...string) int {
	n := 0
	for _, m := range ms {
		if !m.Reply {
			continue
		}
		for _, s := range subs {
			if strings.Contains(m.Text, s) {
				n++
				break
			}
		}
	}
	return n
}

// checkPlan compares the thread's newest plan message with want, the
// last revision the model wrote, and its footer's run state with
// wantState.
func checkPlan(name string, ms []botMsg, want []todo.Item, wantState string) planResult {
	r := planResult{Thread: name, WantState: wantState}
	for _, it := range want {
		r.Want = append(r.Want, shownItem{Content: it.Content, Status: string(it.Status)})
	}
	m, ok := latestPlan(ms)
	if !ok {
		r.Why = "no plan message"
		return r
	}
	r.Got, r.Revision, r.GotState = parsePlan(m.Text)
	switch {
	case !sameItems(r.Want, r.Got):
		r.Why = "items differ from the last revision written"
	case wantState == "stopped" && !(strings.HasPrefix(r.GotState, "stopped") && !strings.HasPrefix(r.GotState, "stopped at")):
		r.Why = fmt.Sprintf("footer says %q, want stopped", r.GotState)
	case wantState == "done" && !strings.HasPrefix(r.GotState, "done"):
		r.Why = fmt.Sprintf("footer says %q, want done", r.GotState)
	default:
		r.OK = true
	}
	return r
}

func sameItems(a, b []shownItem) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// scan reads every started thread's messages from the fakes after the
// run: the answers of its turns, the replies to its control words, and
// its plan.
func scan(threads []*thread, platforms map[string]platform) ([]turnResult, []replyResult, []planResult) {
	var turns []turnResult
	var replies []replyResult
	var plans []planResult
	for _, th := range threads {
		th.mu.Lock()
		started, stopTexts, resets := th.started, th.stopTexts, th.resets
		lastPlan, hasPlan := th.lastPlan, th.hasPlan
		th.mu.Unlock()
		if !started {
			continue
		}
		ms := platforms[th.Platform].messages(th)
		lastState := ""
		for _, t := range th.Turns {
			t.mu.Lock()
			sent, stopped := t.sent, t.stopSent
			t.mu.Unlock()
			if !sent {
				continue
			}
			r := turnResult{Thread: th.Name, Tag: t.Tag, Platform: th.Platform, Want: !stopped, Stopped: stopped, Answers: countText(ms, t.Marker)}
			turns = append(turns, r)
			lastState = "done"
			if stopped && r.Answers == 0 {
				lastState = "stopped"
			}
		}
		if stopTexts > 0 {
			replies = append(replies, replyResult{Thread: th.Name, Word: "stop", Sent: stopTexts, Got: countText(ms, replyStopping, replyIdle)})
		}
		if resets > 0 {
			replies = append(replies, replyResult{Thread: th.Name, Word: "reset", Sent: resets, Got: countText(ms, replyReset)})
		}
		if hasPlan && lastState != "" {
			plans = append(plans, checkPlan(th.Name, ms, lastPlan, lastState))
		}
	}
	sort.Slice(plans, func(i, j int) bool { return plans[i].Thread < plans[j].Thread })
	return turns, replies, plans
}
