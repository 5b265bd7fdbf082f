package replica

import (
	"strings"
	"testing"

	"github.com/pinplan/pinplan/internal/etcdtest"
)

// TestStatus: /readyz says nothing of replicas without one, and with one
// the platforms it runs, its id and that it holds its lease.
func TestStatus(t *testing.T) {
	t.Parallel()
	if got := Status(nil); got != "" {
		t.Errorf("without a replica: %q, want nothing", got)
	}
	rep, _ := replicaOn(t, etcdtest.Start(t).Client(t), "r1", "web", "slack")
	got := Status(rep)
	for _, want := range []string{"replica r1: platforms slack, web\n", "replica r1: lease ", " held (ttl 2s), 0 sessions held, 1 replicas live\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("got %q, want it to contain %q", got, want)
		}
	}
}
