package replica

import (
	"fmt"
	"strings"

	"github.com/pinplan/pinplan/etcdstore"
)

// Status is the replica's lines for /readyz ("" without one): the
// platforms it runs (it takes only their sessions), its id, lease and
// how many sessions it holds (etcd's health is the store's check).
func Status(rep *etcdstore.Replica) string {
	if rep == nil {
		return ""
	}
	platforms := "every platform"
	if p := rep.Platforms(); p != nil {
		platforms = strings.Join(p, ", ")
	}
	state := "held"
	select {
	case <-rep.Lost():
		state = "lost"
	default:
	}
	return fmt.Sprintf("replica %s: platforms %s\nreplica %s: lease %x %s (ttl %s), %d sessions held, %d replicas live\n",
		rep.ID(), platforms, rep.ID(), int64(rep.Lease()), state, rep.TTL(), rep.Owned(), rep.Replicas())
}
