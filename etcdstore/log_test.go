package etcdstore

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/storetest"
)

// TestLogEndsAtTheRecord: log entries a round wrote in a prepare Txn of
// its own (a round too big for one Txn), whose last Txn never moved the
// record (the replica died, or lost the fence, in between), are not part
// of the log: Log reads only up to the record's LogSeq. Delivering them
// would show what the agent never committed, and the deliverer would then
// skip the real entries written under the same numbers.
func TestLogEndsAtTheRecord(t *testing.T) {
	cli := shared(t)
	s, _ := openReplica(t, cli, "r1", 10*time.Second)
	ctx := context.Background()
	key := "web/orphans"
	if ok, err := s.rep.TryTake(ctx, key); err != nil || !ok {
		t.Fatalf("take: %v %v", ok, err)
	}
	r := storetest.Round(key, 0, "task")
	r.Log = []agent.LogEntry{{Seq: 1, Kind: agent.TurnStarted, Turn: 1}, {Seq: 2, Kind: agent.PlanChanged, Turn: 1, Revision: 1}}
	r.Checkpoint.LogSeq = 2
	if err := s.Commit(ctx, r); err != nil {
		t.Fatal(err)
	}
	for _, seq := range []int64{3, 4} { // a prepare Txn's entries, never committed
		raw, _ := json.Marshal(agent.LogEntry{Seq: seq, Kind: agent.TurnEnded, Turn: 1, Text: "never committed"})
		if _, err := cli.Put(ctx, s.logKey(key)+num(uint64(seq)), string(raw)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Log(ctx, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Seq != 1 || got[1].Seq != 2 {
		t.Errorf("Log = %+v, want entries 1 and 2 only", got)
	}
	if got, err := s.Log(ctx, key, 2); err != nil || len(got) != 0 {
		t.Errorf("Log after 2 = %+v, %v; want none", got, err)
	}
	if got, err := s.Log(ctx, "web/none", 0); err != nil || len(got) != 0 {
		t.Errorf("Log of a session without a record = %+v, %v; want none", got, err)
	}
}
