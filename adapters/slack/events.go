package slack

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
)

// dedupeTTL covers Slack's retries (three over about an hour) with margin.
const dedupeTTL = 6 * time.Hour

func (a *Adapter) runSocketMode(ctx context.Context) {
	client := socketmode.New(a.app)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for {
			err := client.RunContext(ctx)
			if ctx.Err() != nil {
				return
			}
			a.setConnected(false)
			a.log.Error("slack socket mode stopped; reconnecting", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case evt, ok := <-client.Events:
			if !ok {
				return
			}
			switch evt.Type {
			case socketmode.EventTypeConnected:
				a.setConnected(true)
				a.log.Info("slack socket mode connected")
			case socketmode.EventTypeConnectionError:
				a.setConnected(false)
				if ce, ok := evt.Data.(*slack.ConnectionErrorEvent); ok {
					a.log.Warn("slack socket mode connection failed", "attempt", ce.Attempt, "backoff", ce.Backoff, "err", ce.ErrorObj)
				}
			case socketmode.EventTypeDisconnect:
				a.setConnected(false)
				a.log.Warn("slack socket mode disconnected")
			case socketmode.EventTypeInteractive:
				cb, ok := evt.Data.(slack.InteractionCallback)
				if ok && cb.Type == slack.InteractionTypeViewSubmission && evt.Request != nil {
					a.ackSubmission(ctx, client, *evt.Request, cb)
					continue
				}
				if evt.Request != nil {
					if err := client.Ack(*evt.Request); err != nil {
						a.log.Warn("slack ack", "err", err)
					}
				}
				if ok {
					a.queue.Add("interaction/"+cb.TriggerID+cb.ActionTs, func() { a.interact(ctx, cb) })
				}
			case socketmode.EventTypeSlashCommand:
				if evt.Request != nil {
					if err := client.Ack(*evt.Request); err != nil {
						a.log.Warn("slack ack", "err", err)
					}
				}
				if cmd, ok := evt.Data.(slack.SlashCommand); ok {
					a.queueCommand(ctx, cmd)
				}
			case socketmode.EventTypeEventsAPI:
				ack := func() {}
				if req := evt.Request; req != nil {
					ack = func() {
						actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
						defer cancel()
						if err := client.AckCtx(actx, req.EnvelopeID, nil); err != nil {
							a.log.Warn("slack ack", "err", err)
						}
					}
				}
				api, ok := evt.Data.(slackevents.EventsAPIEvent)
				if !ok {
					ack()
					continue
				}
				a.route(ctx, api, ack)
			}
		}
	}
}

// HTTPHandler serves the Events API at /slack/events: it verifies the
// signature and the 5-minute timestamp window, answers url_verification,
// acks at once and handles the event in the background.
func (a *Adapter) HTTPHandler(ctx context.Context) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := a.readSigned(w, r)
		if !ok {
			return
		}
		api, err := slackevents.ParseEvent(json.RawMessage(body), slackevents.OptionNoVerifyToken())
		if err != nil {
			a.log.Warn("slack event not understood", "err", err)
			http.Error(w, "bad event", http.StatusBadRequest)
			return
		}
		switch api.Type {
		case slackevents.URLVerification:
			var ch slackevents.ChallengeResponse
			if err := json.Unmarshal(body, &ch); err != nil {
				http.Error(w, "bad challenge", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, ch.Challenge)
		case slackevents.CallbackEvent:
			// Answered once the event is handed on (or within ackWithin,
			// as Slack wants it within 3 s): one that a process dying
			// meanwhile did not hand on is sent again by Slack.
			done := make(chan struct{})
			a.route(ctx, api, func() { close(done) })
			select {
			case <-done:
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusOK)
		default:
			a.log.Info("slack event type ignored", "type", api.Type)
			w.WriteHeader(http.StatusOK)
		}
	})
}

// message is what dispatch needs of a message event.
type message struct {
	eventID                           string
	team, channel, thread, ts, author string
	// authorTeam is the author's own team: in a channel shared with
	// another workspace (Slack Connect) the event's user_team, else team.
	authorTeam string
	text       string
	// followUp: a reply without a mention, for the thread's session only
	// (chat.Incoming.FollowUp).
	followUp bool
	files    []agent.File // attached, by reference (files.go)
}

// ackWithin is how long an event may wait for its acknowledgement:
// Slack sends again what it did not see acknowledged within 3 s.
const ackWithin = 2 * time.Second

// route decides whether an event concerns the bot, before anything is
// written, and queues the ones that do behind the earlier events of their
// thread: handled in the order Slack sent them, one at a time per thread,
// threads in parallel. ack is called once: when the event was handed on
// (its message queued in the store) or dropped, or after ackWithin if
// that takes longer. So a process killed before it handed an event on
// leaves it unacknowledged, and Slack sends it again.
func (a *Adapter) route(ctx context.Context, api slackevents.EventsAPIEvent, ack func()) {
	ack = sync.OnceFunc(ack)
	if a.routeInstall(ctx, api, ack) {
		return
	}
	if a.routeSession(ctx, api) {
		ack()
		return
	}
	m, ok := a.relevant(ctx, api)
	if !ok {
		ack()
		return
	}
	late := time.AfterFunc(ackWithin, ack)
	a.queue.Add(m.channel+"/"+m.thread, func() {
		a.dispatch(ctx, m)
		late.Stop()
		ack()
	})
}

// relevant filters an event without I/O: messages from bots, edits and
// deletions, and channel messages outside any thread are dropped here, at
// no cost. A reply without a mention goes on as a follow-up: it reaches
// the thread's session, or waits a minute for one (DESIGN §14), since
// its mention may not have made the session yet, here or on another
// replica.
func (a *Adapter) relevant(ctx context.Context, api slackevents.EventsAPIEvent) (message, bool) {
	cb, ok := api.Data.(*slackevents.EventsAPICallbackEvent)
	if !ok || cb.EventID == "" {
		return message{}, false
	}
	team := cmp.Or(api.TeamID, a.team())
	bot, ok := a.botOf(ctx, team, api.EnterpriseID, cb)
	if !ok {
		return message{}, false
	}
	m := message{eventID: cb.EventID, team: team}
	switch ev := api.InnerEvent.Data.(type) {
	case *slackevents.AppMentionEvent:
		if ev.BotID != "" || ev.User == bot || ev.User == "" {
			return m, false
		}
		m.channel, m.thread, m.ts, m.author, m.text = ev.Channel, ev.ThreadTimeStamp, ev.TimeStamp, ev.User, ev.Text
		m.authorTeam = cmp.Or(ev.UserTeam, team)
		m.files = a.filesOf(ev.Files)
	case *slackevents.MessageEvent:
		if ev.BotID != "" || ev.User == bot || ev.User == "" {
			return m, false
		}
		switch ev.SubType {
		case "", "thread_broadcast", "file_share":
		default: // message_changed, message_deleted, joins, bot messages...
			return m, false
		}
		m.channel, m.thread, m.ts, m.author, m.text = ev.Channel, ev.ThreadTimeStamp, ev.TimeStamp, ev.User, ev.Text
		m.authorTeam = cmp.Or(ev.UserTeam, team)
		if ev.Message != nil {
			m.files = a.filesOf(ev.Message.Files)
		}
		if !ev.IsIM() {
			// In channels a mention arrives as app_mention; a reply
			// without one reaches only the thread's session.
			if ev.ThreadTimeStamp == "" || strings.Contains(ev.Text, "<@"+bot+">") || strings.Contains(ev.Text, "<@"+bot+"|") {
				return m, false
			}
			m.followUp = true
		}
	default:
		a.log.Debug("slack inner event ignored", "type", api.InnerEvent.Type)
		return m, false
	}
	if m.thread == "" {
		m.thread = m.ts
	}
	return m, true
}

// dispatch hands a relevant event on, with its dedupe key (the message's,
// which can arrive as both app_mention and message). A follow-up is not
// dropped for want of a session known here: the handler keeps it for the
// session its mention makes, wherever that mention is handled.
func (a *Adapter) dispatch(ctx context.Context, m message) {
	// Not recorded here: the message is taken in once where it is
	// queued (chat.Incoming.Event), so a crash between the two cannot
	// lose it. A retry of the event and the app_mention and message
	// events of one message share the key.
	event := "slack/msg/" + m.channel + "/" + m.ts
	th := chat.Thread{Platform: "slack", Key: Key(m.team, m.channel, m.thread), Channel: m.channel, ThreadID: m.thread}
	// Who wrote it is kept for the session's streamed replies: not for a
	// reply in a thread with no session here (most thread chatter in a
	// channel), which would crowd out the live sessions' records.
	if !m.followUp || a.in.Known(th.Key) {
		a.noteAuthor(th.Key, m.ts, person{user: m.author, team: m.authorTeam})
	}
	author := cmp.Or(a.displayName(ctx, m.team, m.author), "<@"+m.author+">")
	err := a.in.Handle(ctx, chat.Incoming{Thread: th, Text: a.mentions(ctx, m.team, m.text), Author: author, AuthorID: m.author, MessageID: m.ts, Event: event, FollowUp: m.followUp, Files: m.files})
	if err != nil && !errors.Is(err, chat.ErrRejected) {
		a.log.Error("slack message not handled", "session", th.Key, "err", err)
	}
}

var reMention = regexp.MustCompile(`<@([UW][A-Z0-9]+)(?:\|([^>]*))?>`)

// mentions removes the bot's own mention and writes other user mentions
// as @name: from the mention's own label, or users.info (cached), or the
// id as it was when the name cannot be had. team is the workspace the
// text was written in.
func (a *Adapter) mentions(ctx context.Context, team, text string) string {
	bot := a.space(team).bot()
	text = reMention.ReplaceAllStringFunc(text, func(s string) string {
		sub := reMention.FindStringSubmatch(s)
		id, label := sub[1], sub[2]
		switch {
		case id == bot:
			return ""
		case label != "":
			return "@" + label
		}
		if name := a.displayName(ctx, team, id); name != "" {
			return "@" + name
		}
		return s
	})
	return strings.TrimSpace(text)
}

// displayName looks a user's display name up once per workspace, with
// the token of team, the workspace the user was seen in; "" if Slack
// won't say. Names are kept by team and user: what users.info answers
// depends on the token's workspace (a Slack Connect user's profile as
// that workspace sees it, or no answer at all), so one workspace's
// answer is not another's.
func (a *Adapter) displayName(ctx context.Context, team, id string) string {
	key := team + "/" + id
	a.mu.Lock()
	name, ok := a.users[key]
	a.mu.Unlock()
	if ok {
		return name
	}
	// A failure is cached too (as ""), so a missing users:read scope
	// costs one call per user, not one per message.
	if u, err := a.space(team).api.GetUserInfoContext(ctx, id); err != nil {
		a.log.Debug("slack users.info", "user", id, "err", err)
	} else {
		name = cmp.Or(u.Profile.DisplayName, u.RealName, u.Name)
	}
	a.mu.Lock()
	if len(a.users) >= 10000 {
		clear(a.users)
	}
	a.users[key] = name
	a.mu.Unlock()
	return name
}

// Key is the session key of a Slack thread.
func Key(team, channel, threadTS string) string {
	return "slack/" + team + "/" + channel + "/" + threadTS
}

// ackSubmission answers a modal's submission in its Socket Mode ack
// (viewSubmitted), off the event loop.
func (a *Adapter) ackSubmission(ctx context.Context, client *socketmode.Client, req socketmode.Request, cb slack.InteractionCallback) {
	a.queue.Add("interaction/"+cb.TriggerID+cb.View.ID, func() {
		var err error
		if ans := a.viewSubmitted(ctx, cb); ans != nil {
			err = client.Ack(req, ans)
		} else {
			err = client.Ack(req)
		}
		if err != nil {
			a.log.Warn("slack ack", "err", err)
		}
	})
}
