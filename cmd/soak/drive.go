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

func (d *driver) turn(ctx context.Context, th *thread, t *turn) error {
	p := d.platforms[th.Platform]
	answered := func(ms []botMsg) bool { return hasText(ms, t.Marker) }
	switch {
	case t.CardStep >= 0:
		var card botMsg
		var button string
		action := t.Click
		if action == "" {
			action = "allow" // only to see the card is there
		}
		err := d.waitFor(ctx, th, "the approval card", func(ms []botMsg) bool {
			var ok bool
			card, button, ok = openCard(ms, action)
			return ok || answered(ms)
		})
		if err != nil {
			return err
		}
		if button == "" {
			break // answered without a card (the tool was not there yet after a restart)
		}
		if t.Stop == stopButton {
			return d.stop(ctx, th, t, func() error {
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
				return p.click(th, plan.ID, stop)
			})
		}
		if err := sleepCtx(ctx, t.ClickDelay); err != nil {
			return err
		}
		// Pressed again if the card is still open a while later: a click
		// lost on the way is pressed again by its user too.
		for try := 0; ; try++ {
			if err := p.click(th, card.ID, button); err != nil && !errors.Is(err, errNoButton) {
				return err
			}
			err := d.waitForWithin(ctx, th, 30*time.Second, func(ms []botMsg) bool {
				_, _, open := openCard(ms, action)
				return !open || answered(ms)
			})
			if err == nil || try == 3 {
				break
			}
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			var ok bool
			if card, button, ok = openCard(p.messages(th), action); !ok {
				break
			}
		}
	case t.ParkStep >= 0:
		err := d.waitForChan(ctx, th, "the held model request", t.parked, answered)
		if err != nil {
			return err
		}
		if answered(p.messages(th)) {
			break
		}
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return err
		}
		return d.stop(ctx, th, t, func() error {
			if t.Stop == stopSession && p.sessionStop(th) {
				return nil
			}
			th.mu.Lock()
			th.stopTexts++
			th.mu.Unlock()
			return p.post(th, "stop", false)
		})
	}
	return d.waitFor(ctx, th, "the answer of "+t.Tag, answered)
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
