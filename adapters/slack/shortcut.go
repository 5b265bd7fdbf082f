package slack

import (
	"cmp"
	"context"
	"errors"

	"github.com/slack-go/slack"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
)

// The "Give to pinplan" message shortcut (DESIGN §7; manifest shortcuts,
// callback_id give_to_pinplan): on any message it starts or continues the
// session of that message's thread (a message outside a thread starts
// one on it), with that message as the task, quoted as material with its
// author, and its files. The person who used the shortcut is the
// requester. Acknowledged at once, like every interaction.
const shortcutID = "give_to_pinplan"

// handedText is the request a shortcut stands for, in the name of the
// person who used it.
const handedText = "Work on the task in the message I am handing you."

// shortcut handles a message_action payload.
func (a *Adapter) shortcut(ctx context.Context, cb slack.InteractionCallback) {
	if cb.CallbackID != shortcutID {
		a.log.Debug("slack message shortcut ignored", "callback_id", cb.CallbackID)
		return
	}
	msg := cb.Message
	channel := cb.Channel.ID
	if channel == "" || msg.Timestamp == "" {
		a.log.Warn("slack message shortcut without its message", "channel", channel)
		return
	}
	thread := cmp.Or(msg.ThreadTimestamp, msg.Timestamp)
	team := cmp.Or(cb.Team.ID, a.team())
	th := chat.Thread{Platform: "slack", Key: Key(team, channel, thread), Channel: channel, ThreadID: thread}
	a.noteAuthor(th.Key, msg.Timestamp, person{user: cb.User.ID, team: team})
	author := cmp.Or(a.displayName(ctx, team, cb.User.ID), cb.User.Name, "<@"+cb.User.ID+">")
	wrote := cmp.Or(msg.Username, "a bot")
	if msg.User != "" {
		wrote = cmp.Or(a.displayName(ctx, team, msg.User), "<@"+msg.User+">")
	}
	err := a.in.Handle(ctx, chat.Incoming{Thread: th, Text: handedText, Author: author, AuthorID: cb.User.ID, MessageID: msg.Timestamp,
		Event:  "slack/shortcut/" + cb.TriggerID,
		Handed: []agent.Quoted{{Author: wrote, Text: a.mentions(ctx, team, msg.Text)}}, Files: a.filesOf(msg.Files)})
	if err != nil && !errors.Is(err, chat.ErrRejected) {
		a.log.Error("slack message shortcut not handled", "session", th.Key, "err", err)
	}
}
