package chat

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/pinplan/pinplan/agent"
)

// Button labels, exactly as DESIGN.md §12 names them.
const (
	LabelAllow  = "Allow once"
	LabelAlways = "Always allow here"
	LabelDeny   = "Deny"
	LabelStop   = "Stop"
)

// Button actions, carried in a button's id.
const (
	ActionAllow  = "allow"
	ActionAlways = "always"
	ActionDeny   = "deny"
	ActionStop   = "stop"
)

// maxCardArguments caps the arguments a card shows (DESIGN.md §12).
const maxCardArguments = 1000

// Card is an approval card: a thread reply asking a person to decide on a
// tool call. Every platform renders the same card.
type Card struct {
	ID        string    `json:"id"` // short, carried by the buttons
	Tool      string    `json:"tool"`
	Server    string    `json:"server,omitempty"`
	Arguments string    `json:"arguments"` // compact JSON, at most 1,000 characters
	Requester string    `json:"requester,omitempty"`
	Deadline  time.Time `json:"deadline"`
	// Outcome is empty while the card is open, else what was decided
	// ("Allowed once", "Always allowed here", "Denied", ...), by whom and
	// when.
	Outcome string    `json:"outcome,omitempty"`
	By      string    `json:"by,omitempty"`
	At      time.Time `json:"at,omitzero"`
}

// Open reports whether the card still takes a decision.
func (c Card) Open() bool { return c.Outcome == "" }

// Title is the card's first line.
func (c Card) Title() string {
	if c.Server != "" {
		return fmt.Sprintf("Approval needed: %s (server %s)", c.Tool, c.Server)
	}
	return "Approval needed: " + c.Tool
}

// Status is the card's last line: who may decide, or what was decided.
func (c Card) Status() string {
	if c.Open() {
		s := "Waiting for a decision"
		if c.Requester != "" {
			s += " from " + mention(c.Requester) + " or an approver"
		}
		if !c.Deadline.IsZero() {
			s += "; denied if nobody decides by " + c.Deadline.UTC().Format("15:04 UTC")
		}
		return s + "."
	}
	s := c.Outcome
	if c.By != "" {
		s += " by " + c.By
	}
	if !c.At.IsZero() {
		s += " at " + c.At.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	return s + "."
}

// ButtonID is the id a button carries: pinplan:<action>:<id>, at most 100
// characters (Discord's custom_id limit).
func ButtonID(action, id string) string { return "pinplan:" + action + ":" + id }

// ParseButtonID reads a ButtonID.
func ParseButtonID(s string) (action, id string, ok bool) {
	rest, ok := strings.CutPrefix(s, "pinplan:")
	if !ok {
		return "", "", false
	}
	action, id, ok = strings.Cut(rest, ":")
	switch action {
	case ActionAllow, ActionAlways, ActionDeny, ActionStop, ActionSkip, ActionReopen, ActionAdd, ActionStart, ActionChange:
		if ok && id != "" {
			return action, id, true
		}
	}
	return "", "", false
}

// Cards are posted and edited while a turn waits: a few quick attempts,
// then the thread is told in words.
const (
	cardAttempts = 5
	cardBackoff  = 16 * time.Second
)

// cardID derives a card's id from its session and call, so a card posted
// again after a crash carries the same buttons.
func cardID(key string, a agent.Approval) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%s", key, a.Turn, a.CallID)))
	return hex.EncodeToString(h[:8])
}

// compactArguments is the arguments as compact JSON, cut at 1,000
// characters.
func compactArguments(args string) string {
	var v any
	if json.Unmarshal([]byte(args), &v) == nil {
		if b, err := json.Marshal(v); err == nil {
			args = string(b)
		}
	}
	return Shorten(args, maxCardArguments)
}

// Interactive is implemented by platforms that show approval cards and
// buttons. The router decides who may press them; adapters only render
// and decode.
type Interactive interface {
	// PostCard posts a card as a reply in the thread.
	PostCard(ctx context.Context, th Thread, c Card) (MessageRef, error)
	// EditCard shows the card's new state (a decided card has no buttons).
	EditCard(ctx context.Context, th Thread, ref MessageRef, c Card) error
}

// Click is a button press an adapter decoded.
type Click struct {
	Thread   Thread // the session the pressed message belongs to
	Button   string // the button's id
	UserID   string // the platform's user id
	UserName string
	// Show: the router shows a decided card itself, through the one
	// delivery step (paced, classified, retried), for a platform whose
	// answer to the click cannot carry the edit (Slack). Without it the
	// adapter shows ClickResult.Card in its answer (Discord's message
	// update, the console's response).
	Show bool
	// Text is what the person typed with the click: a new item's text
	// (ActionAdd).
	Text string
}

// ClickResult is how the adapter answers a click: with the pressed
// message as it now is (Card or Plan), or with a note only the presser
// sees (Private). Exactly one is set.
type ClickResult struct {
	Card    *Card  `json:"card,omitempty"`
	Plan    *Plan  `json:"plan,omitempty"`
	Private string `json:"private,omitempty"`
	// Refused: Private says why the press changed nothing (a plan
	// change or Start refused), so a form can stay open.
	Refused bool `json:"refused,omitempty"`
}

// CardStore keeps each session's approval cards record, apart from its
// plan board record. store.DB implements it.
type CardStore interface {
	// Cards returns the session's cards record; nil if it has none.
	Cards(ctx context.Context, key string) ([]byte, error)
	// SaveCards stores the session's cards record whole.
	SaveCards(ctx context.Context, key string, data []byte) error
}

// cardsRecord is what survives a restart of a session's approval cards:
// every card of its current conversation, by card id. A reset starts it
// over.
type cardsRecord struct {
	Cards map[string]cardRecord `json:"cards"`
}

// put records cr as card id.
func (c *cardsRecord) put(id string, cr cardRecord) {
	if c.Cards == nil {
		c.Cards = map[string]cardRecord{}
	}
	c.Cards[id] = cr
}

// open returns the cards still waiting for a decision.
func (c *cardsRecord) open() []cardRecord {
	var open []cardRecord
	for _, cr := range c.Cards {
		if cr.Card.Open() {
			open = append(open, cr)
		}
	}
	return open
}

// DecodeCards reads a stored cards record (CardStore): the session's
// approval cards, in no order. ok is false for an unreadable record; an
// empty one holds none. The console of a replica that does not hold the
// session shows them from its watch of the records (DESIGN §14).
func DecodeCards(raw []byte) (cards []Card, ok bool) {
	var v cardsRecord
	if len(raw) > 0 && json.Unmarshal(raw, &v) != nil {
		return nil, false
	}
	for _, cr := range v.Cards {
		cards = append(cards, cr.Card)
	}
	return cards, true
}

// cardRecord is one card as the cards record keeps it.
type cardRecord struct {
	CallID string     `json:"call_id"`
	Ref    MessageRef `json:"ref"`
	Card   Card       `json:"card"`
	// Posting is when the first attempt at posting the card began, while
	// it has no Ref: an attempt may have landed unseen since then.
	Posting *time.Time `json:"posting,omitempty"`
}

// Click handles a button press: a decision on an approval card, or Stop
// on a plan message. Only the person whose message started the turn, or
// an approver, may press them; anyone else is told so privately and
// nothing changes.
func (r *Router) Click(ctx context.Context, c Click) ClickResult {
	action, id, ok := ParseButtonID(c.Button)
	if !ok {
		return ClickResult{Private: "I don't know that button.", Refused: true}
	}
	s := r.out.session(c.Thread.Key, nil)
	if s == nil {
		return ClickResult{Private: "This conversation no longer exists in pinplan, so there is nothing to decide here.", Refused: true}
	}
	_, want := s.board.state()
	log := r.opts.Logger.With("session", c.Thread.Key, "user", c.UserID, "action", action)
	if action == ActionStop {
		t := r.rules.turn(ctx, c.Thread.Key)
		if !t.Running {
			return ClickResult{Private: "Nothing is running in this thread.", Refused: true}
		}
		if !r.rules.mayStop(c.Thread.Platform, t, c.UserID) {
			return ClickResult{Private: stopRefusal(t), Refused: true}
		}
		if !r.runner.Stop(c.Thread.Key, c.UserName) {
			return ClickResult{Private: "Nothing is running in this thread.", Refused: true}
		}
		log.Info("turn stopped from the plan message")
		p := want
		p.Stoppable, p.Activity = false, ""
		return ClickResult{Plan: &p}
	}
	switch action {
	case ActionSkip, ActionReopen, ActionAdd:
		return steer(ctx, r.rules, c, action, id, want)
	case ActionStart:
		return start(ctx, r.rules, c, id, want)
	case ActionChange:
		return ClickResult{Private: "Change the plan with its item controls (Skip, Reopen, Add), then press Start."}
	}
	var cr cardRecord
	s.cards.read(func(v *cardsRecord) { cr, ok = v.Cards[id] })
	if !ok {
		return ClickResult{Private: "This card does not belong to this thread's conversation.", Refused: true}
	}
	if !cr.Card.Open() {
		return ClickResult{Private: "This was already decided: " + cr.Card.Status(), Refused: true}
	}
	if !r.rules.mayDecide(c.Thread.Platform, cr.Card.Requester, c.UserID) {
		return ClickResult{Private: "Only " + mention(cr.Card.Requester) + " or an approver can decide this.", Refused: true}
	}
	d := agent.Decision{Allow: action != ActionDeny, Always: action == ActionAlways, By: c.UserID, ByName: c.UserName, At: r.opts.Now()}
	if _, err := r.runner.Decide(ctx, c.Thread.Key, cr.CallID, d); err != nil {
		if errors.Is(err, agent.ErrNotPending) {
			return ClickResult{Private: "This approval is no longer pending.", Refused: true}
		}
		log.Error("record a decision", "err", err)
		return ClickResult{Private: "I couldn't record your decision (the database is unavailable). Please try again in a moment.", Refused: true}
	}
	log.Info("approval decided", "tool", cr.Card.Tool, "allow", d.Allow, "always", d.Always)
	card := decided(cr.Card, d)
	if c.Show {
		// Edited as the deliverer closes a card decided elsewhere, and
		// recorded once shown: one left to the next deliverer stays open
		// in the record, and that deliverer closes it.
		r.out.closeCardID(ctx, s, c.Thread, id, d, 0)
		return ClickResult{Card: &card}
	}
	s.cards.update(func(v *cardsRecord) {
		if got, ok := v.Cards[id]; ok {
			got.Card = card
			v.Cards[id] = got
		}
	})
	return ClickResult{Card: &card}
}

// decided is the card after decision d.
func decided(c Card, d agent.Decision) Card {
	switch {
	case d.Reason == agent.ReasonTimeout:
		c.Outcome = "Denied: no decision in time"
	case d.Reason == agent.ReasonStopped:
		c.Outcome = "Not run: the turn was stopped"
	case d.Allow && d.Always:
		c.Outcome = "Always allowed here"
	case d.Allow:
		c.Outcome = "Allowed once"
	default:
		c.Outcome = "Denied"
	}
	c.By, c.At = d.ByName, d.At
	return c
}

func mention(requester string) string {
	if requester == "" {
		return "the person who asked"
	}
	return "<@" + requester + ">"
}

// showCard posts the approval's card, unless the session has it already
// (after a restart the same approval is announced again), in its n-th
// attempt (retried): it returns how long to wait before the next one, or
// whether it is done, false when the card is left to the next deliverer.
func (d *deliverer) showCard(ctx context.Context, s *session, th Thread, a agent.Approval, n int) (time.Duration, bool) {
	b := s.board
	id := cardID(th.Key, a)
	var cr cardRecord
	var have bool
	s.cards.read(func(v *cardsRecord) { cr, have = v.Cards[id] })
	requester := a.Requester
	ip := b.caps.Cards
	if ip == nil {
		b.log.Error("platform shows no approval cards", "platform", th.Platform)
		return 0, true
	}
	if have && !cr.Ref.IsZero() {
		// Announced again after a restart: the card is there. Show it
		// again as it is (the console keeps cards in memory only).
		err := d.paceSend(ctx, b.platform, th, MethodEdit, PriorityFinal, time.Now(), func(ctx context.Context) error {
			return ip.EditCard(ctx, th, cr.Ref, cr.Card)
		})
		if err != nil {
			b.log.Warn("refresh approval card", "err", err)
		}
		return 0, true
	}
	card := Card{ID: id, Tool: a.Tool, Server: a.Server, Arguments: compactArguments(a.Arguments), Requester: requester, Deadline: a.Deadline}
	if have {
		card = cr.Card
	}
	// Recorded before it is posted, so a click as soon as it shows finds
	// it, with when the first attempt began: a card recorded without its
	// ref may have been posted by an attempt whose answer was lost, here
	// or in a process since stopped (a replica killed between the
	// platform's answer and this record), so every later attempt asks
	// the platform to look for it (SendKey, SentMaybe) before posting.
	since, unsure := time.Now(), have
	s.cards.update(func(v *cardsRecord) {
		got, ok := v.Cards[id]
		switch {
		case !ok:
			v.put(id, cardRecord{CallID: a.CallID, Card: card, Posting: &since})
		case got.Posting != nil:
			since = *got.Posting
		default: // recorded by a binary that kept no time: look through the thread
			since = time.Time{}
		}
	})
	var ref MessageRef
	wait, err := d.retried(ctx, "post_card", th, since, n, func(ctx context.Context) error {
		return d.paceSend(ctx, b.platform, th, MethodPost, PriorityFinal, since, func(ctx context.Context) error {
			var err error
			ref, err = ip.PostCard(withSend(ctx, "card/"+id, since, unsure), th, card)
			unsure = true // even a 429: a client may have retried a 5xx before it
			return err
		})
	})
	if wait > 0 {
		return wait, false
	}
	if d.leftToNext(err) {
		// Shutting down, or another replica holds the session now: the
		// card stays recorded as being posted, and the approval is
		// announced again to whoever delivers next.
		b.log.Info("approval card left to the next deliverer", "err", err)
		return 0, false
	}
	if err != nil {
		// The turn still waits: say so in words, with the way out.
		b.log.Error("post approval card", "err", err)
		d.outbox.add(th, "", fmt.Sprintf("A call to %s needs approval, but I could not post its approval card here (the bot's log has the details). It will be denied at %s unless decided; send `stop` to end this turn now.",
			card.Tool, card.Deadline.UTC().Format("15:04 UTC")))
		return 0, true
	}
	d.cardPosted(ctx, s, th, id, ref)
	return 0, true
}

// cardPosted records the ref of card id, posted as ref, and shows a
// decision made while it was being posted at once.
func (d *deliverer) cardPosted(ctx context.Context, s *session, th Thread, id string, ref MessageRef) {
	b := s.board
	var decided *Card
	s.cards.update(func(v *cardsRecord) {
		got := v.Cards[id]
		got.Ref, got.Posting = ref, nil
		v.put(id, got)
		if !got.Card.Open() {
			decided = &got.Card
		}
	})
	if decided == nil {
		return
	}
	err := d.paceSend(ctx, b.platform, th, MethodEdit, PriorityFinal, time.Now(), func(ctx context.Context) error {
		return b.caps.Cards.EditCard(ctx, th, ref, *decided)
	})
	if err != nil {
		b.log.Warn("edit approval card", "err", err)
	}
}

// closeCard shows a decision on the card, unless a click already did
// (closeCardID).
func (d *deliverer) closeCard(ctx context.Context, s *session, th Thread, a agent.Approval, dec agent.Decision, n int) (time.Duration, bool) {
	return d.closeCardID(ctx, s, th, cardID(th.Key, a), dec, n)
}

// closeCardID shows decision dec on card id and records it, in its n-th
// attempt (retried): it returns how long to wait before the next one, or
// whether it is done, false when the card is left to the next deliverer.
// A card not posted yet is only recorded as decided: its post shows the
// decision (cardPosted).
func (d *deliverer) closeCardID(ctx context.Context, s *session, th Thread, id string, dec agent.Decision, n int) (time.Duration, bool) {
	b := s.board
	var cr cardRecord
	var ok bool
	s.cards.read(func(v *cardsRecord) { cr, ok = v.Cards[id] })
	if !ok || !cr.Card.Open() {
		return 0, true
	}
	card := decided(cr.Card, dec)
	if cr.Ref.IsZero() {
		// Not posted yet, or posted and its ref not recorded yet: the
		// decision is recorded, and whichever of this and cardPosted
		// comes second shows it.
		var posted MessageRef
		s.cards.update(func(v *cardsRecord) {
			if got, ok := v.Cards[id]; ok && got.Card.Open() {
				got.Card = card
				v.Cards[id] = got
				posted = got.Ref
			}
		})
		if ip := b.caps.Cards; ip != nil && !posted.IsZero() {
			err := d.paceSend(ctx, b.platform, th, MethodEdit, PriorityFinal, time.Now(), func(ctx context.Context) error {
				return ip.EditCard(ctx, th, posted, card)
			})
			if err != nil && !d.leftToNext(err) {
				b.log.Warn("edit approval card", "err", err)
			}
		}
		return 0, true
	}
	if ip := b.caps.Cards; ip != nil {
		since := time.Now()
		wait, err := d.retried(ctx, "edit_card", th, since, n, func(ctx context.Context) error {
			return d.paceSend(ctx, b.platform, th, MethodEdit, PriorityFinal, since, func(ctx context.Context) error {
				return ip.EditCard(ctx, th, cr.Ref, card)
			})
		})
		if wait > 0 {
			return wait, false
		}
		if d.leftToNext(err) {
			return 0, false // still open in the record: the next deliverer closes it
		}
		if err != nil {
			b.log.Warn("edit approval card", "err", err)
		}
	}
	s.cards.update(func(v *cardsRecord) {
		if got, ok := v.Cards[id]; ok && got.Card.Open() {
			got.Card = card
			v.Cards[id] = got
		}
	})
	return 0, true
}

// CardInfo is a card as Cards lists it.
type CardInfo struct {
	Card
	CallID string
	Ref    MessageRef
}

// Cards lists a session's approval cards, for operators, the console
// and tests. A session not in memory is read from the store and left
// there: looking does not bring an evicted session back.
func (r *Router) Cards(key string) []CardInfo {
	var v cardsRecord
	r.out.mu.Lock()
	s, ok := r.out.sessions[key]
	r.out.mu.Unlock()
	if ok {
		s.cards.read(func(c *cardsRecord) { v.Cards = maps.Clone(c.Cards) })
	} else {
		raw, err := r.out.cards.Cards(r.ctx, key)
		if err != nil {
			r.opts.Logger.Warn("read approval cards", "session", key, "err", err)
			return nil
		}
		if len(raw) > 0 && json.Unmarshal(raw, &v) != nil {
			r.opts.Logger.Warn("decode approval cards", "session", key)
			return nil
		}
	}
	out := make([]CardInfo, 0, len(v.Cards))
	for _, cr := range v.Cards {
		out = append(out, CardInfo{Card: cr.Card, CallID: cr.CallID, Ref: cr.Ref})
	}
	return out
}
