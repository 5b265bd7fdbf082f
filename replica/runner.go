package replica

import (
	"context"
	"log/slog"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/etcdstore"
)

// Runner is the runner as the router sees it with replicas: a stop for a
// session another replica holds is passed to that one.
type Runner struct {
	*agent.Runner
	rep *etcdstore.Replica
	log *slog.Logger
}

var _ chat.Runner = Runner{}

// NewRunner returns r as the router of a replica sees it.
func NewRunner(r *agent.Runner, rep *etcdstore.Replica, log *slog.Logger) Runner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return Runner{Runner: r, rep: rep, log: log}
}

// Stop stops the session's turn here when this replica holds it, else
// decides a waiting card here (a checkpoint update, fine anywhere) or
// asks the holder to stop it.
func (r Runner) Stop(key, by string) bool {
	if r.rep.Holds(key) {
		return r.Runner.Stop(key, by)
	}
	if r.Runner.StopWaiting(key, by) { // a checkpoint update, fine anywhere
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.rep.RequestStop(ctx, key, by); err != nil {
		r.log.Error("pass a stop on to the session's replica", "session", key, "err", err)
		return false
	}
	return true
}
