package slack

import (
	"context"

	"github.com/slack-go/slack"

	"github.com/pinplan/pinplan/chat"
)

var _ chat.PrivateReplier = (*Adapter)(nil)

// ReplyPrivately implements chat.PrivateReplier: an ephemeral message in
// the thread that only user sees. text is the router's own, so it is not
// escaped: its mentions show as mentions.
func (a *Adapter) ReplyPrivately(ctx context.Context, th chat.Thread, user, text string) error {
	_, err := a.on(th).api.PostEphemeralContext(ctx, th.Channel, user, slack.MsgOptionText(text, false), slack.MsgOptionTS(th.ThreadID))
	return classify("private reply", err)
}
