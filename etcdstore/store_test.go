package etcdstore

import (
	"context"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinplan/pinplan/internal/etcdtest"
	"github.com/pinplan/pinplan/internal/storetest"
)

var (
	serverOnce sync.Once
	server     *etcdtest.Server
)

// shared starts one embedded etcd for the package's tests; each test
// gets a prefix of its own.
func shared(t *testing.T) *clientv3.Client {
	serverOnce.Do(func() { server = etcdtest.Start(&keepAlive{T: t}) })
	return server.Client(t)
}

// keepAlive lets the package's one server outlive the test that started
// it (its cleanups never run; the process exit ends it).
type keepAlive struct{ *testing.T }

func (k *keepAlive) Cleanup(func()) {}

func (k *keepAlive) TempDir() string { return tempDir }

var tempDir string

func TestMain(m *testing.M) {
	dir, err := mkdirTemp()
	if err != nil {
		panic(err)
	}
	tempDir = dir
	code := m.Run()
	removeAll(dir)
	exit(code)
}

func prefix(t *testing.T) string { return "/t/" + t.Name() + "/" }

// openReplica returns a store under the test's prefix fenced by a
// replica of its own, closed when the test ends.
func openReplica(t *testing.T, cli *clientv3.Client, id string, ttl time.Duration) (*Store, *Replica) {
	t.Helper()
	ctx := context.Background()
	rep, err := NewReplica(ctx, cli, ReplicaOptions{Prefix: prefix(t), ID: id, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rep.Close() })
	s, err := New(ctx, cli, Options{Prefix: prefix(t), Replica: rep})
	if err != nil {
		t.Fatal(err)
	}
	return s, rep
}

// TestContract runs the suite both stores pass (DESIGN §14), with every
// write fenced by the session's owner key.
func TestContract(t *testing.T) {
	cli := shared(t)
	storetest.Run(t, func(t *testing.T) storetest.Store {
		s, _ := openReplica(t, cli, "r1", 10*time.Second)
		return s
	}, func(t *testing.T, s storetest.Store, key string) {
		if ok, err := s.(*Store).rep.TryTake(context.Background(), key); err != nil || !ok {
			t.Fatalf("take %s: %v, %v", key, ok, err)
		}
	})
}

// TestContractUnfenced runs the suite on the bare store (what migrate
// writes through).
func TestContractUnfenced(t *testing.T) {
	cli := shared(t)
	storetest.Run(t, func(t *testing.T) storetest.Store {
		s, err := New(context.Background(), cli, Options{Prefix: prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, nil)
}

// BenchmarkRounds100: rounds per second with 100 sessions committing at
// once on the embedded etcd, fenced, and the etcd requests and bytes per
// round (compare with store's BenchmarkRounds100 in one run).
func BenchmarkRounds100(b *testing.B) {
	server := etcdtest.Start(b)
	cli := server.Client(b)
	ctx := context.Background()
	rep, err := NewReplica(ctx, cli, ReplicaOptions{Prefix: "/bench/", ID: "bench", TTL: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer rep.Close()
	s, err := New(ctx, cli, Options{Prefix: "/bench/", Replica: rep})
	if err != nil {
		b.Fatal(err)
	}
	storetest.BenchRounds(b, s, 100, func(key string) {
		if ok, err := rep.TryTake(ctx, key); err != nil || !ok {
			b.Fatalf("take %s: %v %v", key, ok, err)
		}
	})
	rounds := float64(b.N/100+1) * 100
	b.ReportMetric(float64(s.Requests.Load())/rounds, "requests/round")
	b.ReportMetric(float64(s.Bytes.Load())/rounds, "bytes/round")
}

// BenchmarkBudget: a request's budget check before reservations against
// the reservation now, on the embedded etcd (storetest.BenchBudget).
func BenchmarkBudget(b *testing.B) {
	server := etcdtest.Start(b)
	s, err := New(context.Background(), server.Client(b), Options{Prefix: "/bench/"})
	if err != nil {
		b.Fatal(err)
	}
	storetest.BenchBudget(b, s)
}
