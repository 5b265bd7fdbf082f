package slack

import (
	"cmp"
	"context"
	"fmt"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/pinplan/pinplan/chat"
)

// Every thread session is a Slack agent session (Slack's changelog
// 2026-08-20; assistant_view and assistant.threads.* retire in February
// 2027). The router moves its status (agents.sessions.setStatus): the
// processing status, with Slack's own Stop, is the working indicator.
// Slack's Stop arrives as agent_session_stopped and goes through the Stop
// rule of the plan message's button; a title the user changes renames the
// session in the console.

// Handler is where the adapter hands its events (chat.Router, or with
// replicas the hand-over handler): messages and clicks, Slack's own Stop
// (chat.Router.StopSession) and a title the user changed
// (chat.Router.Rename).
type Handler interface {
	chat.Inbox
	StopSession(ctx context.Context, c chat.Click) chat.ClickResult
	Rename(key, title string) (chat.Thread, bool)
}

var _ Handler = (*chat.Router)(nil)

// SetSessionStatus implements chat.SessionStatus with
// agents.sessions.setStatus. Once Slack has answered that this token or
// app cannot use sessions (appDenied), it answers chat.ErrNoSessions for
// the rest of the process without asking Slack again (the router then
// uses the working reaction), and says so in the log once. The title
// comes cut to Slack's 200 characters (chat.SessionStatus).
func (a *Adapter) SetSessionStatus(ctx context.Context, th chat.Thread, s chat.SessionState, title string) error {
	w := a.on(th)
	if w.flag(&w.noSessions) {
		return fmt.Errorf("slack: agent sessions not available: %w", chat.ErrNoSessions)
	}
	_, err := w.api.SetAgentSessionStatusContext(ctx, slack.AgentSessionSetStatusParameters{
		Status: string(s), ChannelID: th.Channel, ThreadTS: th.ThreadID, Title: title})
	if code := slackCode(err); appDenied(code) {
		a.turnOff(w, &w.noSessions, "slack agent sessions are not available to this token or app; the working indicator is a reaction for this workspace (see slack-app-manifest.yaml: features.agent_view, assistant:write)", err)
		return fmt.Errorf("slack: set session status %s: %s: %w", s, code, chat.ErrNoSessions)
	}
	return classify("set session status "+string(s), err)
}

// routeSession queues an agent session event (Slack's Stop, a new title)
// on a queue of its own for the thread, so it never waits behind the
// thread's messages. It reports whether api was one.
func (a *Adapter) routeSession(ctx context.Context, api slackevents.EventsAPIEvent) bool {
	cb, _ := api.Data.(*slackevents.EventsAPICallbackEvent)
	team := cmp.Or(api.TeamID, a.team())
	var eventID string
	if cb != nil {
		eventID = cb.EventID
	}
	switch ev := api.InnerEvent.Data.(type) {
	case *slackevents.AgentSessionStoppedEvent:
		if eventID != "" && ev.Channel != "" && ev.ThreadTimestamp != "" && ev.User != "" {
			a.queue.Add("session/"+ev.Channel+"/"+ev.ThreadTimestamp, func() { a.sessionStopped(ctx, eventID, team, ev) })
		}
	case *slackevents.AgentSessionTitleChangedEvent:
		if eventID != "" && ev.Channel != "" && ev.ThreadTimestamp != "" {
			a.queue.Add("session/"+ev.Channel+"/"+ev.ThreadTimestamp, func() { a.titleChanged(ctx, eventID, cmp.Or(ev.TeamID, team), ev) })
		}
	default:
		return false
	}
	return true
}

// firstSeen dedupes an event on its event_id; a store error lets it
// through (handled twice rather than lost).
func (a *Adapter) firstSeen(ctx context.Context, eventID string) bool {
	first, err := a.opts.Dedupe.FirstSeen(ctx, "slack/event/"+eventID, dedupeTTL)
	if err != nil {
		a.log.Error("slack dedupe", "event_id", eventID, "err", err)
		return true
	}
	if !first {
		a.log.Info("slack event redelivered; ignored", "event_id", eventID)
	}
	return first
}

// sessionStopped handles Slack's Stop: the router decides by the Stop
// button's rule and moves the session's status whatever it decides (Slack
// leaves it); a refusal is told to the presser privately.
func (a *Adapter) sessionStopped(ctx context.Context, eventID, team string, ev *slackevents.AgentSessionStoppedEvent) {
	if !a.firstSeen(ctx, eventID) {
		return
	}
	th := chat.Thread{Platform: "slack", Key: Key(team, ev.Channel, ev.ThreadTimestamp), Channel: ev.Channel, ThreadID: ev.ThreadTimestamp}
	name := cmp.Or(a.displayName(ctx, team, ev.User), "<@"+ev.User+">")
	res := a.in.StopSession(ctx, chat.Click{Thread: th, UserID: ev.User, UserName: name})
	if res.Private == "" {
		a.log.Info("slack agent session stopped", "session", th.Key, "user", ev.User)
		return
	}
	a.in.Tell(ctx, th, ev.User, res.Private) // logged by the router if it fails
}

// titleChanged renames the session to the title the user gave it in
// Slack, so the console lists it so too. A thread pinplan has no session
// for is left alone.
func (a *Adapter) titleChanged(ctx context.Context, eventID, team string, ev *slackevents.AgentSessionTitleChangedEvent) {
	if !a.firstSeen(ctx, eventID) {
		return
	}
	key := Key(team, ev.Channel, ev.ThreadTimestamp)
	if _, ok := a.in.Rename(key, ev.Title); ok {
		a.log.Info("slack agent session renamed", "session", key, "user", ev.User)
	}
}
