package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Replies to the control words, as chat.Router words them.
const (
	replyStopping = "Stopping the current turn."
	replyIdle     = "Nothing is running in this thread."
	replyReset    = "Started fresh"
)

// driver acts out the threads' scripts as their users.
type driver struct {
	platforms map[string]platform
	timeout   time.Duration // the longest wait for one thing
	poll      time.Duration
}

var errGaveUp = errors.New("gave up waiting")

// gaveUp records what the thread was waiting for when the wait ran out.
func (th *thread) gaveUp(what string) error {
	th.mu.Lock()
	th.stuck = what
	th.mu.Unlock()
	return fmt.Errorf("%s: %s: %w", th.Name, what, errGaveUp)
}

// waitFor polls cond on the thread's bot messages until it holds.
func (d *driver) waitFor(ctx context.Context, th *thread, what string, cond func([]botMsg) bool) error {
	p := d.platforms[th.Platform]
	deadline := time.Now().Add(d.timeout)
	for {
		if cond(p.messages(th)) {
			return nil
		}
		if time.Now().After(deadline) {
			return th.gaveUp(what)
		}
		select {
		case <-ctx.Done():
			th.mu.Lock()
			th.stuck = what + " (the run ended)"
			th.mu.Unlock()
			return context.Cause(ctx)
		case <-time.After(d.poll):
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(d):
		return nil
	}
}

func hasText(ms []botMsg, s string) bool {
	for _, m := range ms {
		if m.Reply && strings.Contains(m.Text, s) {
			return true
		}
	}
	return false
}

// latestPlan is the newest plan message of the thread.
func latestPlan(ms []botMsg) (botMsg, bool) {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Plan {
			return ms[i], true
		}
	}
	return botMsg{}, false
}

// openCard is the approval card still waiting, with the button for
// action ("allow", "deny").
func openCard(ms []botMsg, action string) (botMsg, string, bool) {
	for i := len(ms) - 1; i >= 0; i-- {
		if !ms[i].Card {
			continue
		}
		for _, b := range ms[i].Buttons {
			if strings.HasPrefix(b, "pinplan:"+action+":") {
				return ms[i], b, true
			}
		}
	}
	return botMsg{}, "", false
}

func stopButtonOf(m botMsg) string {
	for _, b := range m.Buttons {
		if strings.HasPrefix(b, "pinplan:stop:") {
			return b
		}
	}
	return ""
}

func planStopped(ms []botMsg) bool {
	m, ok := latestPlan(ms)
	if !ok {
		return false
	}
	_, _, state := parsePlan(m.Text)
	return strings.HasPrefix(state, "stopped") && !strings.HasPrefix(state, "stopped at")
}

// run acts out th's script. It returns at the first thing that does not
// come in time: what the thread did until then is what the accounting
// expects.
func (d *driver) run(ctx context.Context, th *thread) error {
	p := d.platforms[th.Platform]
	th.mu.Lock()
	th.started = true
	th.mu.Unlock()
	defer func() {
		th.mu.Lock()
		th.finished = true
		th.mu.Unlock()
	}()
	first := true
	for _, a := range th.Script {
		if a.Reset {
			if err := p.post(th, "reset", false); err != nil {
				return err
			}
			th.mu.Lock()
			th.resets++
			th.mu.Unlock()
			if err := d.waitFor(ctx, th, "the reset's reply", func(ms []botMsg) bool { return hasText(ms, replyReset) }); err != nil {
				return err
			}
			continue
		}
		t := th.Turns[a.Turn]
		if err := p.post(th, t.Text, first); err != nil {
			return err
		}
		first = false
		t.mu.Lock()
		t.sent = true
		t.mu.Unlock()
		if err := d.turn(ctx, th, t); err != nil {
			return err
		}
	}
	return nil
}

// turn acts out one turn after its message was sent: the approval card
// answered or the held request stopped, as the script says, then the
// answer waited for (a stop ends the turn instead).
func (d *driver) turn(ctx context.Context, th *thread, t *turn) error {
	answered := func(ms []botMsg) bool { return hasText(ms, t.Marker) }
	var over bool
	var err error
	switch {
	case t.CardStep >= 0:
		over, err = d.card(ctx, th, t, answered)
	case t.ParkStep >= 0:
		over, err = d.stopParked(ctx, th, t, answered)
	}
	if over || err != nil {
		return err
	}
	return d.waitFor(ctx, th, "the answer of "+t.Tag, answered)
}

// card waits for the turn's approval card and answers it: with the
// plan's Stop button when the turn is stopped so (over: the stop ends
// the turn), else with the turn's click.
func (d *driver) card(ctx context.Context, th *thread, t *turn, answered func([]botMsg) bool) (over bool, err error) {
	var card botMsg
	var button string
	action := t.Click
	if action == "" {
		action = "allow" // only to see the card is there
	}
	err = d.waitFor(ctx, th, "the approval card", func(ms []botMsg) bool {
		var ok bool
		card, button, ok = openCard(ms, action)
		return ok || answered(ms)
	})
	if err != nil {
		return false, err
	}
	if button == "" {
		return false, nil // answered without a card (the tool was not there yet after a restart)
	}
	if t.Stop == stopButton {
		return true, d.stop(ctx, th, t, func() error { return d.pressStop(ctx, th) })
	}
	if err := sleepCtx(ctx, t.ClickDelay); err != nil {
		return false, err
	}
	return false, d.click(ctx, th, card, button, action, answered)
}

// pressStop presses the Stop button of the thread's latest plan.
func (d *driver) pressStop(ctx context.Context, th *thread) error {
	var stop string
	var plan botMsg
	err := d.waitForWithin(ctx, th, 30*time.Second, func(ms []botMsg) bool {
		m, ok := latestPlan(ms)
		plan, stop = m, stopButtonOf(m)
		return ok && stop != ""
	})
	if err != nil {
		return errNoButton // not there (yet): tried again
	}
	return d.platforms[th.Platform].click(th, plan.ID, stop)
}

// click presses button on the card. It is pressed again if the card is
// still open a while later: a click lost on the way is pressed again by
// its user too.
func (d *driver) click(ctx context.Context, th *thread, card botMsg, button, action string, answered func([]botMsg) bool) error {
	p := d.platforms[th.Platform]
	for try := 0; ; try++ {
		if err := p.click(th, card.ID, button); err != nil && !errors.Is(err, errNoButton) {
			return err
		}
		err := d.waitForWithin(ctx, th, 30*time.Second, func(ms []botMsg) bool {
			_, _, open := openCard(ms, action)
			return !open || answered(ms)
		})
		if err == nil || try == 3 {
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		var ok bool
		if card, button, ok = openCard(p.messages(th), action); !ok {
			return nil
		}
	}
}

// stopParked waits for the turn's held model request and stops the turn
// while it is held (over: the stop ends the turn), by a stop message or
// the thread's own stop; an answer already there is waited for instead.
func (d *driver) stopParked(ctx context.Context, th *thread, t *turn, answered func([]botMsg) bool) (over bool, err error) {
	p := d.platforms[th.Platform]
	if err := d.waitForChan(ctx, th, "the held model request", t.parked, answered); err != nil {
		return false, err
	}
	if answered(p.messages(th)) {
		return false, nil
	}
	if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
		return false, err
	}
	return true, d.stop(ctx, th, t, func() error {
		if t.Stop == stopSession && p.sessionStop(th) {
			return nil
		}
		th.mu.Lock()
		th.stopTexts++
		th.mu.Unlock()
		return p.post(th, "stop", false)
	})
}

// stop sends a stop and waits for the plan to say stopped. A stop that
// has not shown in 30 s is sent again, as its user would, twice at most.
func (d *driver) stop(ctx context.Context, th *thread, t *turn, send func() error) error {
	t.mu.Lock()
	t.stopSent = true
	t.mu.Unlock()
	for try := 0; try < 3; try++ {
		if err := send(); err != nil && !errors.Is(err, errNoButton) {
			return err
		}
		err := d.waitForWithin(ctx, th, 30*time.Second, planStopped)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
	}
	return d.waitFor(ctx, th, "the stopped plan of "+t.Tag, planStopped)
}

// waitForWithin is waitFor with its own deadline, not counted as stuck.
func (d *driver) waitForWithin(ctx context.Context, th *thread, within time.Duration, cond func([]botMsg) bool) error {
	p := d.platforms[th.Platform]
	deadline := time.Now().Add(within)
	for !cond(p.messages(th)) {
		if time.Now().After(deadline) {
			return errGaveUp
		}
		if err := sleepCtx(ctx, d.poll); err != nil {
			return err
		}
	}
	return nil
}

// waitForChan waits for ch to close or cond to hold.
func (d *driver) waitForChan(ctx context.Context, th *thread, what string, ch <-chan struct{}, cond func([]botMsg) bool) error {
	p := d.platforms[th.Platform]
	deadline := time.Now().Add(d.timeout)
	for {
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(d.poll):
		}
		if cond(p.messages(th)) {
			return nil
		}
		if time.Now().After(deadline) {
			return th.gaveUp(what)
		}
	}
}
