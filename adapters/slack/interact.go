package slack

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"

	"github.com/slack-go/slack"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
)

var (
	_ chat.Interactive = (*Adapter)(nil)
	_ chat.History     = (*Adapter)(nil)
)

// PostCard implements chat.Interactive: the card as a reply in the
// thread. A post with a key (chat.SendKey) is tagged like a reply
// (event_type pinplan_card); when an earlier attempt may have landed
// (chat.SentMaybe: its answer lost, or the process that made it killed
// before it recorded the card's ref), the card that attempt left in the
// thread is returned instead of posting another.
func (a *Adapter) PostCard(ctx context.Context, th chat.Thread, c chat.Card) (chat.MessageRef, error) {
	key := chat.SendKey(ctx)
	if since, maybe := chat.SentMaybe(ctx); maybe && th.ThreadID != "" {
		found, err := a.tagged(ctx, th, since, cardEvent)
		if err := a.lookFailed("post approval card", th, err); err != nil {
			return chat.MessageRef{}, err
		}
		if ts, ok := found[key]; ok {
			return chat.MessageRef{Channel: th.Channel, ID: ts}, nil
		}
	}
	opts := []slack.MsgOption{slack.MsgOptionTS(th.ThreadID),
		slack.MsgOptionText(CardText(c), false), slack.MsgOptionBlocks(CardBlocks(c)...), slack.MsgOptionDisableLinkUnfurl()}
	if key != "" {
		opts = append(opts, tag(cardEvent, key))
	}
	_, ts, err := a.on(th).api.PostMessageContext(ctx, th.Channel, opts...)
	if err != nil {
		return chat.MessageRef{}, classify("post approval card", err)
	}
	return chat.MessageRef{Channel: th.Channel, ID: ts}, nil
}

// EditCard implements chat.Interactive.
func (a *Adapter) EditCard(ctx context.Context, th chat.Thread, ref chat.MessageRef, c chat.Card) error {
	_, _, _, err := a.on(th).api.UpdateMessageContext(ctx, ref.Channel, ref.ID, slack.MsgOptionText(CardText(c), false), slack.MsgOptionBlocks(CardBlocks(c)...))
	return classify("update approval card "+ref.ID, err)
}

// History implements chat.History with conversations.replies: the
// thread's messages before the one that starts the session, oldest first,
// without bots' messages.
func (a *Adapter) History(ctx context.Context, th chat.Thread, before string, limit int) ([]agent.Quoted, error) {
	if th.ThreadID == "" || th.ThreadID == before {
		return nil, nil // a new thread has no earlier messages
	}
	w := a.on(th)
	msgs, _, _, err := w.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: th.Channel, Timestamp: th.ThreadID, Limit: 200})
	if err != nil {
		return nil, classify("read thread", err)
	}
	bot, team := w.bot(), teamOf(th.Key)
	var out []agent.Quoted
	for _, m := range msgs {
		if m.BotID != "" || m.User == bot || m.User == "" || !tsBefore(m.Timestamp, before) {
			continue
		}
		author := "<@" + m.User + ">"
		if name := a.displayName(ctx, team, m.User); name != "" {
			author = name
		}
		out = append(out, agent.Quoted{Author: author, Text: a.mentions(ctx, team, m.Text)})
	}
	if len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, nil
}

// tsBefore compares Slack timestamps ("1700000000.000100").
func tsBefore(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// interact handles a block_actions payload (a message_action one is the
// message shortcut, shortcut.go): the router decides, and the
// adapter shows the outcome (the card edited, or a note only the presser
// sees). Slack has been acknowledged already.
func (a *Adapter) interact(ctx context.Context, cb slack.InteractionCallback) {
	if cb.Type == slack.InteractionTypeMessageAction {
		a.shortcut(ctx, cb)
		return
	}
	if cb.Type != slack.InteractionTypeBlockActions || len(cb.ActionCallback.BlockActions) == 0 {
		a.log.Debug("slack interaction ignored", "type", cb.Type)
		return
	}
	act := cb.ActionCallback.BlockActions[0]
	channel := cmp.Or(cb.Container.ChannelID, cb.Channel.ID)
	msgTS := cmp.Or(cb.Container.MessageTs, cb.Message.Timestamp)
	thread := cmp.Or(cb.Container.ThreadTs, cb.Message.ThreadTimestamp, msgTS)
	team := cmp.Or(cb.Team.ID, a.team())
	a.space(team).learn(cb.Enterprise.ID, "")
	th := chat.Thread{Platform: "slack", Key: Key(team, channel, thread), Channel: channel, ThreadID: thread}
	if action, _, _ := chat.ParseButtonID(act.ActionID); action == chat.ActionChange {
		// Edit plan, or Change while the plan waits for Start: the
		// modal, on the press's trigger_id, which expires in 3 s.
		a.openEdit(ctx, cb, th, act.Value)
		return
	}
	name := cmp.Or(cb.User.Name, cb.User.Username, cb.User.ID)
	if dn := a.displayName(ctx, team, cb.User.ID); dn != "" {
		name = dn
	}
	// A decided card is shown by the router, through its delivery step
	// (Click.Show): Slack's answer to a click carries no edit. A Stop
	// or a Start shows on the plan message through the plan board.
	res := a.in.Click(ctx, chat.Click{Thread: th, Button: act.ActionID, UserID: cb.User.ID, UserName: name, Show: true})
	if res.Private != "" {
		a.in.Tell(ctx, th, cb.User.ID, res.Private) // logged by the router if it fails
	}
}

// InteractionsHandler serves POST /slack/interactions: the signature and
// timestamp are verified like events, the click is acknowledged at once
// and handled in the background, on a queue key of its own: a click never
// waits behind its thread's events. A submitted plan modal is answered
// in the response (submitEdit): its errors, or nothing to close it.
func (a *Adapter) InteractionsHandler(ctx context.Context) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := a.readSigned(w, r)
		if !ok {
			return
		}
		form, err := url.ParseQuery(string(body))
		if err != nil || form.Get("payload") == "" {
			http.Error(w, "no payload", http.StatusBadRequest)
			return
		}
		var cb slack.InteractionCallback
		if err := json.Unmarshal([]byte(form.Get("payload")), &cb); err != nil {
			a.log.Warn("slack interaction not understood", "err", err)
			http.Error(w, "bad payload", http.StatusBadRequest)
			return
		}
		if cb.Type == slack.InteractionTypeViewSubmission {
			a.answerView(w, a.viewSubmitted(ctx, cb))
			return
		}
		w.WriteHeader(http.StatusOK)
		a.queue.Add("interaction/"+cb.TriggerID+cb.ActionTs, func() { a.interact(ctx, cb) })
	})
}

// viewSubmitted answers a view_submission: the plan's modal (submitEdit);
// any other view closes.
func (a *Adapter) viewSubmitted(ctx context.Context, cb slack.InteractionCallback) *slack.ViewSubmissionResponse {
	if cb.View.CallbackID != editCallbackID {
		a.log.Debug("slack view submission ignored", "callback_id", cb.View.CallbackID)
		return nil
	}
	return a.submitEdit(ctx, cb)
}

// answerView writes a view_submission's answer as the HTTP response: an
// empty 200 closes the view.
func (a *Adapter) answerView(w http.ResponseWriter, ans *slack.ViewSubmissionResponse) {
	if ans == nil {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(ans); err != nil {
		a.log.Warn("slack view submission answer", "err", err)
	}
}

// readSigned reads a request body of at most 1 MiB signed by Slack; it
// answers 413 or 401 itself and then reports false.
func (a *Adapter) readSigned(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return nil, false
	}
	if err := a.verify(r.Header, body); err != nil {
		a.log.Warn("slack request rejected", "path", r.URL.Path, "err", err, "remote", r.RemoteAddr)
		http.Error(w, "invalid signature or timestamp", http.StatusUnauthorized)
		return nil, false
	}
	return body, true
}

// verify checks a request's Slack signature and 5-minute window.
func (a *Adapter) verify(h http.Header, body []byte) error {
	sv, err := slack.NewSecretsVerifier(h, a.opts.SigningSecret)
	if err != nil {
		return err
	}
	if _, err := sv.Write(body); err != nil {
		return err
	}
	if err := sv.Ensure(); err != nil {
		return errors.Join(errors.New("bad signature"), err)
	}
	return nil
}
