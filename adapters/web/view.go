package web

import (
	"fmt"
	"strings"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/todo"
)

// The page gets chat's types as they are, plus a "view" computed here: the
// words chat renders on every platform (the plan's title and footer, the
// card's title, status and button labels), the controls chat offers (an
// item's Skip, Reopen and Add, with the ids chat reads back) and the
// classes the page styles by. So the console says what Slack and Discord
// say, and app.js re-implements neither chat's strings nor its rules.
//
// The views embed chat's types to keep their JSON fields; chat.Plan and
// chat.Card must not grow a MarshalJSON, which the embedding would promote
// over the view.

// planJSON is a plan as the page gets it.
type planJSON struct {
	chat.Plan
	View planView `json:"view"`
}

type planView struct {
	Title    string      `json:"title"`          // chat.Plan.Title: "Plan · 2/5 done"
	Progress string      `json:"progress"`       // "2/5 done", for the thread list
	Footer   string      `json:"footer"`         // chat.Plan.Footer
	Stop     *buttonView `json:"stop,omitempty"` // while a turn runs
	// Start is the plan's Start button while the turn waits for a person
	// to start its first plan (PINPLAN_PLAN_APPROVAL=ask, DESIGN §19);
	// the page's Change beside it points to the item controls.
	Start *buttonView `json:"start,omitempty"`
	Items []itemView  `json:"items"` // one per item, in order
	// Accent is the run state the plan's border shows, as Discord's
	// container colour: working, waiting, done, stopped or failed.
	Accent string `json:"accent"`
}

// accent is the plan's run state as its border shows it (see planView).
func accent(s chat.PlanState) string {
	switch s {
	case chat.StateWaiting:
		return "waiting"
	case chat.StateDone:
		return "done"
	case chat.StateStopped, chat.StateLimited, chat.StateTurnBudget, chat.StateDayBudget:
		return "stopped"
	case chat.StateFailed:
		return "failed"
	}
	return "working" // working, resumed after restart
}

// itemView is what the page shows of an item beside its own fields. The
// calls behind its evidence line are the plan's own evidence (by the
// item's text), sent once.
type itemView struct {
	Mark string `json:"mark"` // chat.Plan.ItemMark: an item left in progress by an ended run is not shown working
	// Evidence is chat.Plan.EvidenceLine: "↳ fs__read_text_file ×2"; an
	// item a person changed says so first: "↳ skipped by ann".
	Evidence string `json:"evidence,omitempty"`
	// Struck: the item is shown struck through, done or skipped by a
	// person (its status is chat.Skipped, "skipped").
	Struck bool `json:"struck,omitempty"`
	// Controls are what a person may do to the item from the plan
	// (DESIGN §19), in chat's order: chat.Plan.Actions, each sending
	// chat.ItemButton as the button of POST .../click; Add sends the
	// new item's text with it. Only the shown plan's items have them,
	// and only when chat.Plan.Steerable; never a stored revision's.
	Controls []buttonView `json:"controls,omitempty"`
}

// itemViews is the view of each of p's items.
func itemViews(p chat.Plan) []itemView {
	out := make([]itemView, len(p.Items))
	for i, it := range p.Items {
		out[i].Mark, out[i].Evidence = p.ItemMark(it), p.EvidenceLine(it)
		out[i].Struck = it.Status == todo.Completed || it.Status == chat.Skipped
	}
	return out
}

// itemControls are the controls of each of p's items (itemView.Controls),
// nil when p offers none. p is the plan as chat holds it, before Clean:
// a control's id names its item by a hash of the item's text as chat
// knows it.
func itemControls(p chat.Plan) [][]buttonView {
	if !p.Steerable() {
		return nil
	}
	out := make([][]buttonView, len(p.Items))
	for i, it := range p.Items {
		for _, action := range p.Actions(it) {
			out[i] = append(out[i], buttonView{ID: chat.ItemButton(action, p, it), Action: action, Label: itemLabels[action], Style: "secondary"})
		}
	}
	return out
}

// itemLabels are the item controls' labels, chat's on every platform.
var itemLabels = map[string]string{chat.ActionSkip: chat.LabelSkip, chat.ActionReopen: chat.LabelReopen, chat.ActionAdd: chat.LabelAdd}

// cleanMarks is marks without bidirectional control characters, as
// chat.Plan.Clean leaves the items: a mark names its item by the item's
// text, so both must be cleaned alike for the item's line to say who
// changed it.
func cleanMarks(marks []agent.Mark) []agent.Mark {
	if marks == nil {
		return nil
	}
	out := make([]agent.Mark, len(marks))
	for i, m := range marks {
		m.Item, m.After, m.By = chat.StripBidi(m.Item), chat.StripBidi(m.After), chat.StripBidi(m.By)
		out[i] = m
	}
	return out
}

// buttonView is a button: its label and what a press sends.
type buttonView struct {
	ID     string `json:"id"` // chat.ButtonID, the body of POST .../click
	Action string `json:"action"`
	Label  string `json:"label"`
	Style  string `json:"style"` // primary, secondary or danger
}

// stopButton is the plan's Stop button; the session comes from the
// thread, as on Slack and Discord.
var stopButton = buttonView{ID: chat.ButtonID(chat.ActionStop, "plan"), Action: chat.ActionStop, Label: chat.LabelStop, Style: "danger"}

func progress(done, total int) string { return fmt.Sprintf("%d/%d done", done, total) }

func viewPlan(p *chat.Plan) *planJSON {
	if p == nil {
		return nil
	}
	controls := itemControls(*p)
	cp := p.Clean()
	cp.Marks = cleanMarks(cp.Marks)
	p = &cp
	v := planJSON{Plan: *p, View: planView{Title: p.Title(), Progress: progress(p.Progress()), Footer: p.Footer(), Items: itemViews(*p), Accent: accent(p.State)}}
	for i := range controls {
		v.View.Items[i].Controls = controls[i]
	}
	if p.Stoppable {
		stop := stopButton
		v.View.Stop = &stop
	}
	if p.Start != "" {
		v.View.Start = &buttonView{ID: p.Start, Action: chat.ActionStart, Label: chat.LabelStart, Style: "primary"}
	}
	return &v
}

// cardJSON is an approval card as the page gets it.
type cardJSON struct {
	chat.Card
	View cardView `json:"view"`
}

type cardView struct {
	Title  string `json:"title"`  // chat.Card.Title
	Status string `json:"status"` // chat.Card.Status
	// Class is open, decided (allowed), denied, or stopped: closed by
	// Stop, its call never ran.
	Class   string       `json:"class"`
	Buttons []buttonView `json:"buttons"` // while open; in the order every platform shows them
}

// viewCard renders c. Console cards carry no requester (the console
// sends no user id), so Status never holds a Slack or Discord mention.
func viewCard(c *chat.Card) *cardJSON {
	if c == nil {
		return nil
	}
	cc := c.Clean()
	c = &cc
	v := cardJSON{Card: *c, View: cardView{Title: c.Title(), Status: c.Status(), Class: "decided", Buttons: []buttonView{}}}
	switch {
	case c.Open():
		v.View.Class = "open"
		v.View.Buttons = []buttonView{
			{ID: chat.ButtonID(chat.ActionAllow, c.ID), Action: chat.ActionAllow, Label: chat.LabelAllow, Style: "primary"},
			{ID: chat.ButtonID(chat.ActionAlways, c.ID), Action: chat.ActionAlways, Label: chat.LabelAlways, Style: "secondary"},
			{ID: chat.ButtonID(chat.ActionDeny, c.ID), Action: chat.ActionDeny, Label: chat.LabelDeny, Style: "danger"},
		}
	case strings.HasPrefix(c.Outcome, "Denied"):
		v.View.Class = "denied"
	case strings.HasPrefix(c.Outcome, "Not run"):
		v.View.Class = "stopped"
	}
	return &v
}

// threadJSON is a thread as the page gets it: the summary, its plan's view
// and its status pill's class. Its Plan hides Summary's in the JSON.
type threadJSON struct {
	Summary
	Plan        *planJSON `json:"plan,omitempty"`
	StatusClass string    `json:"status_class"`
	UsageText   string    `json:"usage_text,omitempty"` // the session's tokens, for the thread's header
}

func viewThread(s Summary) threadJSON {
	s.Title = chat.StripBidi(s.Title)
	return threadJSON{Summary: s, Plan: viewPlan(s.Plan), StatusClass: pillClass(s.Status), UsageText: usageText(s.Usage)}
}

// pillClass is the class of a status pill (Summary.Status), by run state.
func pillClass(status string) string {
	switch chat.PlanState(status) {
	case chat.StateWorking, chat.StateResumed:
		return "pill-working"
	case chat.StateWaiting:
		return "pill-waiting"
	case chat.StateDone:
		return "pill-done"
	case chat.StateFailed:
		return "pill-failed"
	case chat.StateStopped, chat.StateLimited, chat.StateTurnBudget, chat.StateDayBudget:
		return "pill-stopped"
	}
	return "pill-idle"
}

// revisionJSON is a stored plan revision as the history lists it.
type revisionJSON struct {
	agent.PlanRevision
	View revisionView `json:"view"`
}

type revisionView struct {
	Progress string     `json:"progress"` // "2/5 done"
	Items    []itemView `json:"items"`    // each item's evidence line by this revision
	// Change says who made the revision when a person did (DESIGN §19):
	// "Skipped by ann: Tag the release"; "" for the agent's.
	Change string `json:"change,omitempty"`
}

func viewRevision(r agent.PlanRevision) revisionJSON {
	p := chat.Plan{Items: r.Items, Evidence: r.Evidence}.Clean()
	r.Items, r.Evidence = p.Items, p.Evidence
	return revisionJSON{PlanRevision: r, View: revisionView{Progress: progress(p.Progress()), Items: itemViews(p), Change: changeLine(r.Change)}}
}

// changeLine is what the history says of a person's change.
func changeLine(st *agent.Steer) string {
	if st == nil {
		return ""
	}
	verb, item := "", st.Item
	switch st.Action {
	case agent.SteerSkip:
		verb = "Skipped"
	case agent.SteerReopen:
		verb = "Reopened"
	case agent.SteerAdd:
		verb, item = "Added", st.Text
	default:
		return ""
	}
	return chat.StripBidi(verb + " by " + st.By + ": " + chat.Shorten(item, 200))
}

// clickJSON is the answer to a button press: chat.ClickResult with views.
type clickJSON struct {
	Card    *cardJSON `json:"card,omitempty"`
	Plan    *planJSON `json:"plan,omitempty"`
	Private string    `json:"private,omitempty"`
}
