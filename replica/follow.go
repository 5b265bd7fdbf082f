package replica

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/etcdstore"
)

// Sharer is a platform whose pacing budget the replicas share (the Slack
// and Discord adapters).
type Sharer interface{ Share(n int) }

// ShareBudgets gives each platform's pace an even share among the live
// replicas (DESIGN §14: Slack's Tier 3 per workspace and Discord's
// per-channel edits are the bot's, not each replica's), following the
// count as replicas come and go, until ctx ends.
func ShareBudgets(ctx context.Context, rep *etcdstore.Replica, log *slog.Logger, platforms ...Sharer) {
	if len(platforms) == 0 {
		return
	}
	last := 0
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if n := rep.Replicas(); n != last {
			for _, p := range platforms {
				p.Share(n)
			}
			log.Info("platform pace shared", "replicas", n)
			last = n
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Holder is a platform that keeps to its Retry-Afters (the Slack
// adapter): a hold one replica meets holds every replica's calls of that
// budget (DESIGN §14).
type Holder interface {
	HoldRetryAfter(key string, until time.Time)
	OnRetryAfter(say func(key string, until time.Time))
}

// ShareHolds tells the other replicas of each Retry-After h meets, and
// holds h's calls for each one another replica met, through etcd
// ("hold/<budget>", on the lease of the replica that met it), until ctx
// ends. A hold reaches the others within a watch's delay: a call already
// on its way then is not held.
func ShareHolds(ctx context.Context, rep *etcdstore.Replica, log *slog.Logger, h Holder) {
	h.OnRetryAfter(func(key string, until time.Time) {
		go func() {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := rep.Say(sctx, "hold", key, []byte(until.UTC().Format(time.RFC3339Nano))); err != nil && ctx.Err() == nil {
				log.Warn("tell the other replicas of a Retry-After", "budget", key, "err", err)
			}
		}()
	})
	hold := func(key string, v []byte) {
		until, err := time.Parse(time.RFC3339Nano, string(v))
		if err != nil {
			log.Warn("unreadable Retry-After from another replica", "budget", key, "err", err)
			return
		}
		h.HoldRetryAfter(key, until)
	}
	rep.Follow(ctx, "hold", hold)
	// The holds said before this replica watched (a start during a long
	// one); a past one holds nothing.
	said, err := rep.Said(ctx, "hold")
	if err != nil {
		log.Warn("read the other replicas' Retry-Afters", "err", err)
	}
	for key, v := range said {
		hold(key, v)
	}
}

// Console is what Follow shows a thread held elsewhere on (the web
// console).
type Console interface {
	EditPlan(ctx context.Context, th chat.Thread, ref chat.MessageRef, p chat.Plan) error
	Mirror(th chat.Thread, p chat.Plan)
	SetState(th chat.Thread, state, status string)
	Reply(ctx context.Context, th chat.Thread, replyTo, text string) error
	MirrorCards(th chat.Thread, cards []chat.Card)
}

// Follow keeps the console live for the threads other replicas run
// (DESIGN §14): their plan boards' shown content and run state, their
// approval cards (which the console decides from any replica), and the
// answers they commit, from etcd watches.
func Follow(ctx context.Context, rep *etcdstore.Replica, console Console) {
	rep.Follow(ctx, "board", func(_ string, v []byte) {
		th, shown, ok := chat.DecodeBoard(v)
		if !ok || len(shown.Items) == 0 {
			return
		}
		if th.Platform == "web" {
			console.EditPlan(ctx, th, chat.MessageRef{}, shown)
		} else {
			console.Mirror(th, shown)
		}
		state := "idle"
		switch shown.State {
		case chat.StateWorking, chat.StateResumed:
			state = "running"
		case chat.StateWaiting:
			state = "waiting"
		}
		console.SetState(th, state, string(shown.State))
	})
	rep.Follow(ctx, "cards", func(key string, v []byte) {
		cards, ok := chat.DecodeCards(v)
		if !ok {
			return
		}
		platform, _, _ := strings.Cut(key, "/")
		console.MirrorCards(chat.Thread{Platform: platform, Key: key}, cards)
	})
	rep.Follow(ctx, "hist", func(key string, v []byte) {
		var e agent.Entry
		if json.Unmarshal(v, &e) != nil || e.Message.Role != openai.ChatMessageRoleAssistant || e.Message.Content == "" || len(e.Message.ToolCalls) > 0 {
			return
		}
		platform, _, _ := strings.Cut(key, "/")
		if platform != "web" {
			return // other platforms' answers are in their own threads
		}
		console.Reply(ctx, chat.Thread{Platform: platform, Key: key}, "", e.Message.Content)
	})
}
