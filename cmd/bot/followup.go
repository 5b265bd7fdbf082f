package main

import (
	"context"

	"github.com/pinplan/pinplan/chat"
)

// held reports whether a follow-up (chat.Incoming.FollowUp) of a thread
// that no replica knows a session for was kept to wait for one (DESIGN
// §14): the session its mention makes takes it, on whichever replica
// holds it (chat.Router.Handle), else it expires. Such a follow-up is
// neither handed over nor taken: that would make every thread reply in
// a channel pinplan is in a session held for good. The store's hold
// checks again, in one transaction, that no session was made meanwhile;
// false means hand the message on as any other.
func (x *replicas) held(ctx context.Context, in chat.Incoming) (bool, error) {
	if !in.FollowUp || x.Known(in.Thread.Key) {
		return false, nil
	}
	held, err := x.router.Hold(ctx, in)
	if err != nil {
		x.log.Error("hold a follow-up for its thread's session", "session", in.Thread.Key, "err", err)
	}
	return held, err
}
