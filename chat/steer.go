package chat

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/todo"
)

// Steering the plan from the pinned message (DESIGN §19): the actions
// of the item controls, carried in their ids as ItemButton makes them.
const (
	ActionSkip   = string(agent.SteerSkip)
	ActionReopen = string(agent.SteerReopen)
	ActionAdd    = string(agent.SteerAdd)
)

// The plan's approval (PINPLAN_PLAN_APPROVAL=ask): Start lets the agent
// begin, Change points to the item controls (a platform may open its
// edit path instead, as Slack's modal).
const (
	ActionStart  = "start"
	ActionChange = "change"
	LabelStart   = "Start"
	LabelChange  = "Change"
)

// Labels of the item controls.
const (
	LabelSkip   = "Skip"
	LabelReopen = "Reopen"
	LabelAdd    = "Add an item after"
)

// Skipped is the status a plan shows for an item a person skipped: not
// one of the agent's (todo's three), it is the person's mark, shown
// struck through with who skipped it.
const Skipped = agent.StatusSkipped

// MarkSkipped is the mark of a skipped item.
const MarkSkipped = "⏭️"

// ItemButton is the id of the control that does action to p's item it:
// the revision the person saw and a short hash of the item's text, so
// that a control of a plan a newer revision replaced is refused, and the
// id stays within Discord's 100 characters whatever the item's length.
func ItemButton(action string, p Plan, it todo.Item) string {
	return ButtonID(action, strconv.FormatInt(p.Revision, 10)+"."+itemHash(it.Content))
}

func itemHash(content string) string {
	sum := sha256.Sum256([]byte(content))
	return hex.EncodeToString(sum[:6])
}

// Actions returns what a person may do to p's item it from the pinned
// message: Skip a pending or in-progress item, Reopen a completed or
// skipped one, and Add an item after any.
func (p Plan) Actions(it todo.Item) []string {
	switch it.Status {
	case todo.Pending, todo.InProgress:
		return []string{ActionSkip, ActionAdd}
	case todo.Completed, Skipped:
		return []string{ActionReopen, ActionAdd}
	}
	return nil
}

// Steerable reports whether the plan message offers item controls: a
// plan with items, which the agent wrote (revision 1 on).
func (p Plan) Steerable() bool { return len(p.Items) > 0 && p.Revision > 0 }

// markLine is what the plan says under an item a person changed: who
// skipped, reopened or added it; "" for none.
func (p Plan) markLine(it todo.Item) string {
	for _, m := range p.Marks {
		if m.Item != it.Content {
			continue
		}
		if m.Action == agent.SteerSkip && it.Status != Skipped {
			continue
		}
		verb := map[agent.SteerAction]string{agent.SteerSkip: "skipped", agent.SteerReopen: "reopened", agent.SteerAdd: "added"}[m.Action]
		return verb + " by " + m.By
	}
	return ""
}

// steer is a click on an item control: the change goes to the agent
// (Runner.Steer), which refuses one made on a replaced revision; the
// person who clicked hears, alone, that it was taken or why not. The
// plan message shows the change once the agent applied it.
func steer(ctx context.Context, p rules, c Click, action, id string, want Plan) ClickResult {
	revText, hash, ok := strings.Cut(id, ".")
	rev, err := strconv.ParseInt(revText, 10, 64)
	if !ok || err != nil {
		return ClickResult{Private: "I don't know that button.", Refused: true}
	}
	t := p.turn(ctx, c.Thread.Key)
	if !p.mayStop(c.Thread.Platform, t, c.UserID) {
		return ClickResult{Private: "Only the person who asked, the one who started this conversation or an approver can change the plan.", Refused: true}
	}
	// Renderers show the plan cleaned of bidi controls (Plan.Clean), so a
	// control's hash may be of the cleaned text.
	i := slices.IndexFunc(want.Items, func(it todo.Item) bool {
		return itemHash(it.Content) == hash || itemHash(StripBidi(it.Content)) == hash
	})
	if i < 0 || rev != want.Revision {
		return ClickResult{Private: "The plan changed since you looked at it; make your change on the pinned plan as it is now.", Refused: true}
	}
	item := want.Items[i].Content
	by := cmp.Or(c.UserName, c.UserID, "someone")
	err = p.runner.Steer(ctx, c.Thread.Key, agent.Steer{Action: agent.SteerAction(action), Item: item, Text: c.Text, Revision: rev, By: by, ByID: c.UserID})
	var refused *agent.SteerError
	switch {
	case errors.As(err, &refused):
		return ClickResult{Private: "I couldn't change the plan: " + refused.Reason, Refused: true}
	case err != nil:
		p.log.Error("record a plan change", "session", c.Thread.Key, "err", err)
		return ClickResult{Private: "I couldn't record your change (the database is unavailable). Please try again in a moment.", Refused: true}
	}
	p.log.Info("plan changed by a person", "session", c.Thread.Key, "action", action, "user", c.UserID)
	what := map[string]string{ActionSkip: "skipped", ActionReopen: "reopened", ActionAdd: "added"}[action]
	subject := Shorten(item, 80)
	if action == ActionAdd {
		subject = Shorten(todo.TrimSpace(c.Text), 80)
	}
	return ClickResult{Private: fmt.Sprintf("You %s “%s”. The agent takes it at its next step (at once if it is waiting), and the plan shows it then.", what, subject)}
}

// start is a press of the plan's Start button: allowed to the requester,
// the session's starter and the approvers, it starts the turn's plan
// (Runner.Decide on the plan's approval); a refusal is private.
// want is the plan as shown, answered with its Start gone.
func start(ctx context.Context, p rules, c Click, id string, want Plan) ClickResult {
	if !strings.HasPrefix(id, "plan-") {
		// Only a plan's wait is started here: a tool call's card is
		// decided by its own buttons, under its own rule (DESIGN §12).
		return ClickResult{Private: "I don't know that button.", Refused: true}
	}
	t := p.turn(ctx, c.Thread.Key)
	if !p.mayStop(c.Thread.Platform, t, c.UserID) {
		return ClickResult{Private: "Only the person who asked, the one who started this conversation or an approver can start this plan.", Refused: true}
	}
	d := agent.Decision{Allow: true, By: c.UserID, ByName: c.UserName}
	if _, err := p.runner.Decide(ctx, c.Thread.Key, id, d); err != nil {
		if errors.Is(err, agent.ErrNotPending) {
			return ClickResult{Private: "This plan is not waiting for Start any more.", Refused: true}
		}
		p.log.Error("record a plan's start", "session", c.Thread.Key, "err", err)
		return ClickResult{Private: "I couldn't record your Start (the database is unavailable). Please try again in a moment.", Refused: true}
	}
	p.log.Info("plan started", "session", c.Thread.Key, "user", c.UserID)
	pl := want
	pl.Start, pl.State = "", StateWorking
	return ClickResult{Plan: &pl}
}
