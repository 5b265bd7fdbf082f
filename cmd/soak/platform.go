package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/fakeslack"
)

// botMsg is a message the bot has in a thread, as the soak reads it.
type botMsg struct {
	ID      string
	Text    string   // all its text: content, fallback text, embeds, text displays
	Buttons []string // action and custom ids
	Plan    bool     // a plan message (its footer names a revision)
	Card    bool     // an approval card
	Reply   bool     // a plain reply: no blocks, embeds or components
}

// platform is how the soak acts as a user on one chat platform's fake.
type platform interface {
	// post sends the user's message in the thread; the first one
	// mentions the bot and starts the thread.
	post(th *thread, text string, first bool) error
	// messages are the bot's messages in the thread, oldest first.
	messages(th *thread) []botMsg
	// click presses a button of the bot's message as the thread's user.
	click(th *thread, msgID, actionID string) error
	// sessionStop presses the platform's own Stop for the thread (Slack's
	// agent session Stop); false when there is none to press.
	sessionStop(th *thread) bool
}

// Users the soak writes as: the requester of every thread.
const (
	slackUser   = "U1"
	discordUser = "111"
)

var footerRE = regexp.MustCompile(`revision (\d+) · ([^·\n"\\]+)`)

type slackPlatform struct {
	s *fakeslack.Server

	mu  sync.Mutex // guards ts and seq
	ts  int64      // the newest message timestamp handed out, microseconds
	seq int
}

func (p *slackPlatform) nextLocked() (ts, eventID string) {
	now := time.Now().UnixMicro()
	if now <= p.ts {
		now = p.ts + 1
	}
	p.ts = now
	p.seq++
	return fmt.Sprintf("%d.%06d", now/1e6, now%1e6), fmt.Sprintf("EvSoak%07d", p.seq)
}

func (p *slackPlatform) post(th *thread, text string, first bool) error {
	p.mu.Lock()
	ts, id := p.nextLocked()
	p.mu.Unlock()
	var ev map[string]any
	if first {
		th.Root = ts
		ev = map[string]any{"type": "app_mention", "user": slackUser, "text": "<@UBOT> " + text, "ts": ts, "channel": th.Channel, "event_ts": ts}
	} else {
		ev = map[string]any{"type": "message", "channel_type": "channel", "user": slackUser, "text": text, "ts": ts, "thread_ts": th.Root, "channel": th.Channel, "event_ts": ts}
	}
	_, err := p.s.Push(id, ev)
	return err
}

var actionIDRE = regexp.MustCompile(`"action_id":"([^"]+)"`)

func (p *slackPlatform) messages(th *thread) []botMsg {
	var out []botMsg
	for _, m := range p.s.Messages(th.Channel) {
		if m.BotID == "" || m.ThreadTS != th.Root || m.Recipient != "" {
			continue
		}
		b := botMsg{ID: m.TS, Text: m.Text, Reply: m.Blocks == ""}
		for _, id := range actionIDRE.FindAllStringSubmatch(m.Blocks, -1) {
			b.Buttons = append(b.Buttons, id[1])
		}
		b.Plan = m.Blocks != "" && footerRE.MatchString(m.Text)
		b.Card = m.Blocks != "" && strings.Contains(m.Text, "Approval needed")
		out = append(out, b)
	}
	return out
}

func (p *slackPlatform) click(th *thread, msgID, actionID string) error {
	payload := p.s.BlockActions(slackUser, th.Channel, msgID, actionID)
	if payload == nil {
		return errNoButton
	}
	_, err := p.s.PushInteraction(payload)
	return err
}

func (p *slackPlatform) sessionStop(th *thread) bool {
	ev := p.s.StopSession(slackUser, th.Channel, th.Root)
	if ev == nil {
		return false
	}
	p.mu.Lock()
	_, id := p.nextLocked()
	p.mu.Unlock()
	_, err := p.s.Push(id, ev)
	return err == nil
}

var errNoButton = errors.New("no such button")

type discordPlatform struct {
	s *fakediscord.Server
}

func (p *discordPlatform) post(th *thread, text string, first bool) error {
	// Every message mentions the bot: in a channel that is not a thread,
	// only mentions reach it.
	p.s.UserMessage(th.Channel, discordUser, text, true)
	return nil
}

func (p *discordPlatform) messages(th *thread) []botMsg {
	var out []botMsg
	for _, m := range p.s.Messages(th.Channel) {
		if m.AuthorID != fakediscord.BotID || m.Recipient != "" {
			continue
		}
		var b strings.Builder
		b.WriteString(m.Content)
		for _, e := range m.Embeds {
			for _, k := range []string{"title", "description"} {
				if s, ok := e[k].(string); ok {
					b.WriteString("\n" + s)
				}
			}
			if f, ok := e["footer"].(map[string]any); ok {
				if s, ok := f["text"].(string); ok {
					b.WriteString("\n" + s)
				}
			}
		}
		for _, t := range m.TextDisplays() {
			b.WriteString("\n" + t)
		}
		text := b.String()
		out = append(out, botMsg{
			ID: m.ID, Text: text, Buttons: m.CustomIDs(),
			Plan:  (len(m.Embeds) > 0 || m.IsComponentsV2()) && footerRE.MatchString(text),
			Card:  strings.Contains(text, "Approval needed"),
			Reply: len(m.Embeds) == 0 && len(m.Components) == 0,
		})
	}
	return out
}

func (p *discordPlatform) click(th *thread, msgID, actionID string) error {
	_, err := p.s.Click(th.Channel, msgID, discordUser, actionID)
	if errors.Is(err, fakediscord.ErrNoButton) {
		return errNoButton
	}
	return err
}

func (p *discordPlatform) sessionStop(*thread) bool { return false }

// Marks of the plan's items, as chat.Plan.ItemMark draws them: an item
// left in progress by an ended run shows chat.MarkHalted.
var marks = map[string]string{"✅": "completed", "🔄": "in_progress", "⏸️": "in_progress", "⬜": "pending", "⏭️": "skipped"}

// itemNumber is the number a steerable plan puts before each item on
// Discord ("2. "), for its item menu (DESIGN §19).
var itemNumber = regexp.MustCompile(`^[0-9]+\. `)

// shownItem is an item as a plan message shows it.
type shownItem struct {
	Content, Status string
}

// parsePlan reads a plan message's text: the items (lines starting with
// a mark, their Markdown or mrkdwn emphasis taken off), the revision and
// the run state in the footer.
func parsePlan(text string) (items []shownItem, revision int, state string) {
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		for mark, status := range marks {
			if rest, ok := strings.CutPrefix(line, mark+" "); ok {
				rest = strings.Trim(itemNumber.ReplaceAllString(rest, ""), "~*")
				items = append(items, shownItem{Content: strings.TrimSpace(rest), Status: status})
			}
		}
	}
	if m := footerRE.FindAllStringSubmatch(text, -1); len(m) > 0 {
		last := m[len(m)-1]
		revision, _ = strconv.Atoi(last[1])
		state = strings.TrimSpace(last[2])
	}
	return items, revision, state
}
