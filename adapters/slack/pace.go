package slack

import (
	"sync"

	"github.com/pinplan/pinplan/chat"
)

// Slack's budgets (DESIGN §6), each counted per workspace and app as
// Slack counts it, so that one kind of request never waits behind
// another: chat.update in Tier 3 (about 50 a minute; Options.EditsPerMinute,
// 45 by default), pins.add and pins.remove in Tier 2 (about 20 each: 18
// each), reactions.add in Tier 3 (45) and reactions.remove in Tier 2
// (18), chat.postMessage at about one a second per channel with short
// bursts, and chat.appendStream, a live answer's appends, in Tier 4
// (Options.AppendsPerMinute, 90 by default).
// Pins go one at a time (a burst of 1): a board that owes a pin is given
// its slot ahead of the call (chat.Budget.Notify), and the call may come
// a little after the slot; the burst left unused keeps those calls
// inside Slack's window of about 20 a minute.
// A plan's first post and a reply wait on their channel's posts only,
// never behind other threads' edits. Within a budget the board's
// priorities decide who goes next (chat.Budget). A 429 holds its method
// only (heldTransport).
const (
	editBurst         = 5
	pinsPerMinute     = 18
	pinBurst          = 1
	reactsPerMinute   = 45 // reactions.add, Tier 3
	reactBurst        = 5
	unreactsPerMinute = 18 // reactions.remove, Tier 2
	unreactBurst      = 2
	postsPerMinute    = 60 // per channel
	postBurst         = 3
	appendBurst       = 5
	// maxPostBudgets bounds the channels whose post budget is kept; past
	// it, the idle ones (nobody waiting, burst back) are dropped.
	maxPostBudgets = 1024
)

type budgets struct {
	editsPerMinute   float64
	appendsPerMinute float64

	mu      sync.Mutex // guards share and posts
	share   int        // replicas sharing the workspace's budgets
	edit    *chat.Budget
	pin     *chat.Budget            // pins.add
	unpin   *chat.Budget            // pins.remove
	react   *chat.Budget            // reactions.add
	unreact *chat.Budget            // reactions.remove
	appends *chat.Budget            // chat.appendStream
	posts   map[string]*chat.Budget // by channel
}

func newBudgets(editsPerMinute, appendsPerMinute float64) *budgets {
	return &budgets{editsPerMinute: editsPerMinute, appendsPerMinute: appendsPerMinute, share: 1,
		edit: chat.NewBudget(editsPerMinute, editBurst), pin: chat.NewBudget(pinsPerMinute, pinBurst), unpin: chat.NewBudget(pinsPerMinute, pinBurst),
		react: chat.NewBudget(reactsPerMinute, reactBurst), unreact: chat.NewBudget(unreactsPerMinute, unreactBurst),
		appends: chat.NewBudget(appendsPerMinute, appendBurst), posts: map[string]*chat.Budget{}}
}

// of returns the budget a request is counted in; nil for one Slack does
// not limit below what heldTransport keeps to.
func (b *budgets) of(req chat.Request) *chat.Budget {
	switch req.Method {
	case chat.MethodEdit:
		return b.edit
	case chat.MethodPin:
		return b.pin
	case chat.MethodUnpin:
		return b.unpin
	case chat.MethodReaction:
		return b.react
	case chat.MethodUnreaction:
		return b.unreact
	case chat.MethodAppend:
		return b.appends
	case chat.MethodPost:
		b.mu.Lock()
		defer b.mu.Unlock()
		p, ok := b.posts[req.Thread.Channel]
		if !ok {
			if len(b.posts) >= maxPostBudgets {
				for ch, o := range b.posts {
					if o.Idle() {
						delete(b.posts, ch)
					}
				}
			}
			n := float64(b.share)
			p = chat.NewBudget(postsPerMinute/n, max(postBurst/b.share, 1))
			b.posts[req.Thread.Channel] = p
		}
		return p
	}
	return nil
}

// forget drops the channel's post budget once it is idle (a new one in
// its place would pace the same): a session of the channel left memory.
func (b *budgets) forget(channel string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.posts[channel]; ok && p.Idle() {
		delete(b.posts, channel)
	}
}

// setShare divides every budget by n replicas (DESIGN §14).
func (b *budgets) setShare(n int) {
	n = max(n, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.share = n
	b.edit.SetPerMinute(b.editsPerMinute / float64(n))
	b.edit.SetBurst(max(editBurst/n, 1))
	for _, p := range []struct {
		b         *chat.Budget
		perMinute float64
		burst     int
	}{{b.pin, pinsPerMinute, pinBurst}, {b.unpin, pinsPerMinute, pinBurst}, {b.react, reactsPerMinute, reactBurst}, {b.unreact, unreactsPerMinute, unreactBurst},
		{b.appends, b.appendsPerMinute, appendBurst}} {
		p.b.SetPerMinute(p.perMinute / float64(n))
		p.b.SetBurst(max(p.burst/n, 1))
	}
	for _, p := range b.posts {
		p.SetPerMinute(postsPerMinute / float64(n))
		p.SetBurst(max(postBurst/n, 1))
	}
}

// Budget implements chat.Paced.
func (a *Adapter) Budget(req chat.Request) *chat.Budget { return a.on(req.Thread).budgets.of(req) }

// idle reports whether nobody waits on any of the budgets and each has
// its burst back: dropping them loses nothing.
func (b *budgets) idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.posts {
		if !p.Idle() {
			return false
		}
	}
	return b.edit.Idle() && b.pin.Idle() && b.unpin.Idle() && b.react.Idle() && b.unreact.Idle() && b.appends.Idle()
}
