package replica

import "sync"

// Takes carries the sessions a replica takes to the hand-over handler
// (Handler.Taken), as an event service does: the etcd replica is made
// with Takes.Taken as its etcdstore.ReplicaOptions.OnTake, before the
// handler can be (the handler needs the router, which needs the
// replica's store), and the handler is made following it
// (Options.Takes). Both are made before anything starts, so no session
// is taken before the handler follows.
type Takes struct {
	mu sync.Mutex // guards to
	to *Handler
}

// Taken tells the handler that follows t that its replica took the
// session key.
func (t *Takes) Taken(key string) {
	t.mu.Lock()
	to := t.to
	t.mu.Unlock()
	if to != nil {
		to.Taken(key)
	}
}

func (t *Takes) follow(x *Handler) {
	t.mu.Lock()
	t.to = x
	t.mu.Unlock()
}
