package slack

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"

	"github.com/pinplan/pinplan/chat"
)

// dedupeTTL covers Slack's retries (three over about an hour) with margin.
const dedupeTTL = 6 * time.Hour

func (a *Adapter) runSocketMode(ctx context.Context) {
	client := socketmode.New(a.api)
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
			case socketmode.EventTypeEventsAPI:
				if evt.Request != nil {
					if err := client.Ack(*evt.Request); err != nil {
						a.log.Warn("slack ack", "err", err)
					}
				}
				api, ok := evt.Data.(slackevents.EventsAPIEvent)
				if !ok {
					continue
				}
				a.dispatch(ctx, api)
			}
		}
	}
}

// HTTPHandler serves the Events API at /slack/events: it verifies the
// signature and the 5-minute timestamp window, answers url_verification,
// acks at once and handles the event in the background.
func (a *Adapter) HTTPHandler(ctx context.Context) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		sv, err := slack.NewSecretsVerifier(r.Header, a.opts.SigningSecret)
		if err == nil {
			if _, err = sv.Write(body); err == nil {
				err = sv.Ensure()
			}
		}
		if err != nil {
			a.log.Warn("slack request rejected", "err", err, "remote", r.RemoteAddr)
			http.Error(w, "invalid signature or timestamp", http.StatusUnauthorized)
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
			w.WriteHeader(http.StatusOK) // ack first; Slack wants it within 3 s
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				a.dispatch(ctx, api)
			}()
		default:
			a.log.Info("slack event type ignored", "type", api.Type)
			w.WriteHeader(http.StatusOK)
		}
	})
}

var reMention = regexp.MustCompile(`<@[UW][A-Z0-9]+(\|[^>]*)?>`)

// dispatch dedupes an event on its event_id and routes its message.
func (a *Adapter) dispatch(ctx context.Context, api slackevents.EventsAPIEvent) {
	cb, ok := api.Data.(*slackevents.EventsAPICallbackEvent)
	if !ok || cb.EventID == "" {
		return
	}
	if first, err := a.opts.Dedupe.FirstSeen(ctx, "slack/event/"+cb.EventID, dedupeTTL); err != nil {
		a.log.Error("slack dedupe", "event_id", cb.EventID, "err", err)
	} else if !first {
		a.log.Info("slack event redelivered; ignored", "event_id", cb.EventID)
		return
	}
	a.mu.Lock()
	bot, team := a.botUserID, a.teamID
	a.mu.Unlock()
	if api.TeamID != "" {
		team = api.TeamID
	}
	switch ev := api.InnerEvent.Data.(type) {
	case *slackevents.AppMentionEvent:
		if ev.BotID != "" || ev.User == bot || ev.User == "" {
			return
		}
		thread := ev.ThreadTimeStamp
		if thread == "" {
			thread = ev.TimeStamp
		}
		a.deliver(ctx, team, ev.Channel, thread, ev.TimeStamp, ev.User, ev.Text)
	case *slackevents.MessageEvent:
		if ev.BotID != "" || ev.User == bot || ev.User == "" {
			return
		}
		switch ev.SubType {
		case "", "thread_broadcast", "file_share":
		default: // message_changed, message_deleted, joins, bot messages...
			return
		}
		if ev.IsIM() {
			thread := ev.ThreadTimeStamp
			if thread == "" {
				thread = ev.TimeStamp
			}
			a.deliver(ctx, team, ev.Channel, thread, ev.TimeStamp, ev.User, ev.Text)
			return
		}
		// In channels a mention arrives as app_mention; a reply without one
		// reaches only a thread that already has a session.
		if ev.ThreadTimeStamp == "" || strings.Contains(ev.Text, "<@"+bot+">") {
			return
		}
		if a.opts.Handler.Known(Key(team, ev.Channel, ev.ThreadTimeStamp)) {
			a.deliver(ctx, team, ev.Channel, ev.ThreadTimeStamp, ev.TimeStamp, ev.User, ev.Text)
		}
	default:
		a.log.Debug("slack inner event ignored", "type", api.InnerEvent.Type)
	}
}

// Key is the session key of a Slack thread.
func Key(team, channel, threadTS string) string {
	return "slack/" + team + "/" + channel + "/" + threadTS
}

func (a *Adapter) deliver(ctx context.Context, team, channel, thread, ts, user, text string) {
	// One message can arrive as two events (app_mention and message).
	if first, err := a.opts.Dedupe.FirstSeen(ctx, "slack/msg/"+channel+"/"+ts, dedupeTTL); err == nil && !first {
		return
	}
	text = strings.TrimSpace(reMention.ReplaceAllString(text, ""))
	th := chat.Thread{Platform: "slack", Key: Key(team, channel, thread), Channel: channel, ThreadID: thread}
	err := a.opts.Handler.Handle(ctx, chat.Incoming{Thread: th, Text: text, Author: "<@" + user + ">", MessageID: ts})
	if err != nil && !errors.Is(err, chat.ErrRejected) {
		a.log.Error("slack message not handled", "session", th.Key, "err", err)
	}
}
