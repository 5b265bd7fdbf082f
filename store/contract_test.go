package store

import (
	"testing"
	"time"

	"github.com/pinplan/pinplan/internal/storetest"
)

// TestContract runs the suite both stores pass (DESIGN §14).
func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store { return openTemp(t) }, nil)
}

// BenchmarkRounds100: rounds per second with 100 sessions committing at
// once (compare with etcdstore's BenchmarkRounds100 in one run).
func BenchmarkRounds100(b *testing.B) {
	db, err := Open(b.TempDir()+"/bench.db", Options{BatchDelay: 2 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	storetest.BenchRounds(b, db, 100, nil)
}
