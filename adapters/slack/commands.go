package slack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/slack-go/slack"

	"github.com/pinplan/pinplan/chat"
)

// The /pinplan slash command (DESIGN §7), over Socket Mode
// (slash_commands envelopes) or signed at POST /slack/commands. Slack
// wants the command acknowledged within 3 s: it is, at once, and handled
// on a queue key of its own.
//
//   - /pinplan <task> starts a new thread session: pinplan posts the task
//     in the channel, attributed to the person who ran the command and
//     made inert (no mention, @channel or link comes of it), and that
//     message is the thread's first; the plan and the answer follow in
//     its thread, the person the requester and the starter. The model is
//     given the task as the person wrote it.
//   - /pinplan status lists the channel's sessions that are working or
//     waiting for approval, with links, to the person alone.
//   - /pinplan help (or nothing) says how to use pinplan, to the person
//     alone.
//
// Answers to the person go to the command's response_url (ephemeral): it
// works in channels the bot is not a member of, where chat.postEphemeral
// does not. A slash command carries no thread, so a thread's own actions
// (a follow-up, stop, reset) stay replies, mentions and buttons.

const commandHelp = "*pinplan* plans a multi-step task as a pinned checklist in a thread and works through it.\n" +
	"• `/pinplan <task>`: start a task in a new thread of this channel.\n" +
	"• `/pinplan status`: this channel's tasks that are working or waiting for approval.\n" +
	"• In a thread: mention @pinplan with a task, reply to go on, `@pinplan stop` or `@pinplan reset`.\n" +
	"• `/pinplan help`: this message."

// command handles one /pinplan command.
func (a *Adapter) command(ctx context.Context, cmd slack.SlashCommand) {
	text := strings.TrimSpace(html.UnescapeString(cmd.Text))
	log := a.log.With("command", cmd.Command, "channel", cmd.ChannelID, "user", cmd.UserID)
	if !a.firstCommand(ctx, cmd, log) {
		return
	}
	switch strings.ToLower(text) {
	case "", "help":
		a.tellCommand(ctx, cmd, commandHelp)
		return
	case "status":
		a.tellCommand(ctx, cmd, a.status(ctx, cmd))
		return
	case "stop", "reset":
		// A command carries no thread: these belong to one.
		a.tellCommand(ctx, cmd, "`"+strings.ToLower(text)+"` acts on a thread's session: send `@pinplan "+strings.ToLower(text)+"` in that thread (or press the plan's Stop button).")
		return
	}
	team := cmp.Or(cmd.TeamID, a.team())
	a.space(team).learn(cmd.EnterpriseID, "")
	author := cmp.Or(a.displayName(ctx, team, cmd.UserID), "<@"+cmd.UserID+">")
	quoted := "> " + strings.ReplaceAll(escape(text), "\n", "\n> ")
	// A post in the channel, through the router's delivery step: paced
	// by the channel's chat.postMessage budget as a first post,
	// classified and retried.
	var ts string
	err := a.in.Post(ctx, chat.Thread{Platform: "slack", Key: Key(team, cmd.ChannelID, ""), Channel: cmd.ChannelID}, func(ctx context.Context) error {
		var err error
		_, ts, err = a.space(team).api.PostMessageContext(ctx, cmd.ChannelID, slack.MsgOptionText(fmt.Sprintf("<@%s> asked pinplan:\n%s", cmd.UserID, quoted), false),
			slack.MsgOptionDisableLinkUnfurl())
		return err
	})
	if ctx.Err() != nil {
		return // shutting down: Slack shows the command failed
	}
	if err != nil {
		log.Warn("slack: the task of a slash command could not be posted", "err", err)
		a.tellCommand(ctx, cmd, "I could not post the task in this channel ("+cmp.Or(slackCode(err), "error")+"): invite @pinplan to the channel, or mention it in a thread.")
		return
	}
	th := chat.Thread{Platform: "slack", Key: Key(team, cmd.ChannelID, ts), Channel: cmd.ChannelID, ThreadID: ts}
	a.noteAuthor(th.Key, ts, person{user: cmd.UserID, team: team})
	err = a.in.Handle(ctx, chat.Incoming{Thread: th, Text: text, Author: author, AuthorID: cmd.UserID, MessageID: ts,
		Event: "slack/cmd/" + cmd.TriggerID})
	if err != nil && !errors.Is(err, chat.ErrRejected) {
		log.Error("slack slash command not handled", "session", th.Key, "err", err)
		a.tellCommand(ctx, cmd, "The task is posted, but I could not start on it (the bot's log has the details). Mention @pinplan in its thread to try again.")
	}
}

// firstCommand reports whether cmd is seen for the first time, by its
// trigger_id, in the store (so on every replica at once): a signed
// request sent again within its signature's 5-minute window, or a Socket
// Mode envelope delivered twice, is handled once, before anything is
// posted. A command without a trigger_id is not one Slack sent. When the
// store cannot say, the command is refused (the person is told to send it
// again) rather than risk a second task.
func (a *Adapter) firstCommand(ctx context.Context, cmd slack.SlashCommand, log *slog.Logger) bool {
	if cmd.TriggerID == "" {
		log.Warn("slack: a slash command without a trigger_id; ignored")
		return false
	}
	if a.opts.Dedupe == nil {
		return true
	}
	first, err := a.opts.Dedupe.FirstSeen(ctx, "slack/trigger/"+cmp.Or(cmd.TeamID, a.team())+"/"+cmd.TriggerID, dedupeTTL)
	switch {
	case err != nil:
		log.Error("slack: dedupe a slash command", "trigger_id", cmd.TriggerID, "err", err)
		a.tellCommand(ctx, cmd, "I could not take this command just now (the bot's log has the details); send it again in a moment.")
		return false
	case !first:
		log.Warn("slack slash command replayed; ignored", "trigger_id", cmd.TriggerID)
		return false
	}
	return true
}

// status lists the channel's sessions that are working or waiting.
func (a *Adapter) status(ctx context.Context, cmd slack.SlashCommand) string {
	if a.opts.Sessions == nil {
		return "`/pinplan status` is not available here: each thread's plan message shows its state."
	}
	all, err := a.opts.Sessions(ctx)
	if err != nil {
		a.log.Error("slack: list sessions for /pinplan status", "err", err)
		return "I could not read the sessions just now (the bot's log has the details); try again in a moment."
	}
	prefix := Key(cmp.Or(cmd.TeamID, a.team()), cmd.ChannelID, "")
	here := func(s chat.Listed) bool { return strings.HasPrefix(s.Key, prefix) }
	return chat.StatusList(all, here, "in this channel", func(s chat.Listed, state string) string {
		title := cmp.Or(s.Title, "a task")
		ts := strings.TrimPrefix(s.Key, prefix)
		if link := permalink(cmd.TeamDomain, cmd.ChannelID, ts); link != "" {
			return fmt.Sprintf("<%s|%s>: %s", link, escape(title), state)
		}
		return fmt.Sprintf("%s (thread %s): %s", escape(title), ts, state)
	})
}

// permalink is the link to a thread's first message, in the workspace's
// domain as the command names it ("" without one).
func permalink(domain, channel, ts string) string {
	if domain == "" || ts == "" {
		return ""
	}
	return fmt.Sprintf("https://%s.slack.com/archives/%s/p%s", domain, channel, strings.ReplaceAll(ts, ".", ""))
}

// tellCommand answers the person who ran cmd, ephemerally, through the
// command's response_url.
func (a *Adapter) tellCommand(ctx context.Context, cmd slack.SlashCommand, text string) {
	if cmd.ResponseURL == "" {
		a.log.Warn("slack: a slash command without a response_url cannot be answered", "user", cmd.UserID)
		return
	}
	if u, err := url.Parse(cmd.ResponseURL); err != nil || !a.hookURL(u) {
		// Only Slack's hooks take the answer: a body naming another
		// address (a local server, a plain-http one) gets nothing sent.
		a.log.Warn("slack: a slash command's response_url is not Slack's; the answer is not sent", "channel", cmd.ChannelID, "user", cmd.UserID,
			"scheme", schemeOf(u), "host", hostOf(u))
		return
	}
	msg := &slack.WebhookMessage{Text: text, ResponseType: slack.ResponseTypeEphemeral}
	if err := slack.PostWebhookCustomHTTPContext(ctx, cmd.ResponseURL, a.opts.HTTPClient, msg); err != nil {
		a.log.Warn("slack: could not answer a slash command", "channel", cmd.ChannelID, "user", cmd.UserID, "err", err)
	}
}

// CommandsHandler serves POST /slack/commands: signed like events, the
// command is acknowledged at once with an empty 200 and handled in the
// background.
func (a *Adapter) CommandsHandler(ctx context.Context) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := a.readSigned(w, r)
		if !ok {
			return
		}
		form, err := url.ParseQuery(string(body))
		if err != nil || form.Get("command") == "" {
			http.Error(w, "no command", http.StatusBadRequest)
			return
		}
		cmd := slack.SlashCommand{TeamID: form.Get("team_id"), TeamDomain: form.Get("team_domain"), ChannelID: form.Get("channel_id"),
			ChannelName: form.Get("channel_name"), UserID: form.Get("user_id"), UserName: form.Get("user_name"), Command: form.Get("command"),
			Text: form.Get("text"), ResponseURL: form.Get("response_url"), TriggerID: form.Get("trigger_id"), APIAppID: form.Get("api_app_id")}
		w.WriteHeader(http.StatusOK)
		a.queueCommand(ctx, cmd)
	})
}

// queueCommand handles cmd in the background, on a queue key of its own.
func (a *Adapter) queueCommand(ctx context.Context, cmd slack.SlashCommand) {
	a.queue.Add("command/"+cmd.ChannelID+"/"+cmd.TriggerID, func() { a.command(ctx, cmd) })
}
