// Package etcdstore keeps pinplan's state on an etcd cluster, so that
// several replicas of the bot share it (DESIGN §14). It implements the
// same consumer interfaces as package store (agent.Store and the chat
// package's records, outbox and dedupe) and passes the same contract
// suite; it imports agent and todo of pinplan's packages, never store.
//
// The rules of a turn stay in agent: this package offers atomic writes
// (one Txn per round, compare-and-set for checkpoint updates) and fences
// them with the session's owner key (replica.go), nothing more.
//
// Layout under the prefix P (each session key K path-escaped, numbers as
// 16 hex digits so that keys sort in order):
//
//	P meta/schema               "2": a prefix is pinplan's if empty or holding it
//	P idx/{undelivered,running,boards}/K  the sessions with work left (index.go)
//	P meta/migrating            while migrate copies (prefix.go)
//	P rec/K                     agent.Checkpoint as JSON
//	P board/K, cards/K, listing/K  chat's opaque records
//	P hist/K/N                  agent.Entry as JSON; only N < HistoryLen counts
//	P plan/K/REV                agent.PlanRevision; only REV <= Revision counts
//	P inbox/K/ID, P iseq/K      queued messages and their last id
//	P arch/K/N/{rec,hist/,plan/}, P aseq/K  the archives a reset keeps
//	P dedupe/KEY                an event seen, on a lease that ends it
//	P outbox/K/ID, P oseq/K     replies not delivered yet (opaque)
//	P marks/NAME                an adapter's read marks (opaque)
//	P owners/K, P replicas/ID   ownership (replica.go)
//	P fwd/K/N, P fseq/K         events handed to a session's owner
//	P held/K/ORDER              follow-ups waiting for their thread's session (followups.go)
//	P wake/K, P stop/K          nudges for a session's owner
//	P spend/DAY/PERSON          tokens charged to a person on a UTC day, decimal (spend.go)
//
// Entries past HistoryLen and plans past Revision are what a round that
// had to be split (etcd's --max-txn-ops, its request size) wrote first:
// readers ignore them until the round's last Txn moves the record.
package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinplan/pinplan/agent"
)

// SchemaVersion is the layout version this code reads and writes.
const SchemaVersion = 2

// Limits of one Txn. etcd's defaults are 128 operations (--max-txn-ops)
// and a 1.5 MiB request (--max-request-bytes); pinplan stays below both
// with room for the compares and the gRPC framing.
const (
	maxOps   = 120
	maxBytes = 1 << 20
)

// ErrConflict means a commit does not follow the stored session.
var ErrConflict = errors.New("commit does not follow the stored session")

// ErrNotEmpty means the prefix holds data (migrate refuses it).
var ErrNotEmpty = errors.New("the etcd prefix already holds pinplan data")

// Options tunes New.
type Options struct {
	// Prefix is where every key lives (PINPLAN_ETCD_PREFIX), ending in "/".
	Prefix string
	// Replica fences the writes a session's owner makes; nil writes
	// unfenced (migrate, and tests of the bare store).
	Replica *Replica
	// Migrate opens the store for migrate, which accepts a prefix an
	// interrupted migrate marked (BeginMigrate starts over on it).
	Migrate bool
	Now     func() time.Time
}

// Store is pinplan's state on etcd. It is safe for concurrent use.
type Store struct {
	cli *clientv3.Client
	p   string
	rep *Replica
	now func() time.Time

	// Requests and Bytes count the etcd requests this store made and the
	// bytes it sent in them (for BENCHMARKS.md).
	Requests atomic.Int64
	Bytes    atomic.Int64

	leaseMu sync.Mutex                    // guards dedupe
	dedupe  map[time.Duration]dedupeLease // by ttl

	recMu sync.Mutex // guards recs
	recs  map[string]writtenRecord

	spendMu sync.Mutex         // guards spends
	spends  map[string]counter // spend counters as last read or written, by key
}

var _ agent.Store = (*Store)(nil)

// New returns the store on cli under opts.Prefix, writing the schema
// version to an empty prefix and refusing a prefix that is not pinplan's
// (ErrForeign), one written by a newer version, and, unless opts.Migrate,
// one an interrupted migrate left (ErrMigrating).
func New(ctx context.Context, cli *clientv3.Client, opts Options) (*Store, error) {
	if opts.Prefix == "" {
		opts.Prefix = "/pinplan/"
	}
	if !strings.HasSuffix(opts.Prefix, "/") {
		opts.Prefix += "/"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Store{cli: cli, p: opts.Prefix, rep: opts.Replica, now: opts.Now}
	if s.rep != nil {
		s.rep.store = s
	}
	if err := claim(ctx, cli, s.p, opts.Migrate); err != nil {
		return nil, err
	}
	if err := s.upgrade(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// upgrade brings a prefix of schema 1 to this one: it builds the indexes
// of the sessions with work left, then moves the schema on (replicas that
// start together may both build them: the same keys). A replica of an
// older pinplan still serving the prefix would not keep the indexes, so
// the upgrade waits for every one of them to stop: a rolling deploy
// cannot cross it.
func (s *Store) upgrade(ctx context.Context) error {
	resp, err := s.cli.Get(ctx, schemaKey(s.p))
	if err != nil {
		return fmt.Errorf("etcdstore: open %s: %w", s.p, err)
	}
	if len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) != "1" {
		return nil
	}
	live, err := s.cli.Get(ctx, s.p+"replicas/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return fmt.Errorf("etcdstore: open %s: %w", s.p, err)
	}
	var others []string
	for _, kv := range live.Kvs {
		if id := s.sessionOf("replicas", kv.Key); s.rep == nil || id != s.rep.id {
			others = append(others, id)
		}
	}
	if len(others) > 0 {
		return fmt.Errorf("etcdstore: %s is at schema 1 and replicas %v still serve it with an older pinplan, which would not keep the indexes this one reads: stop them, then start this version (it builds the indexes once); a rolling deploy cannot cross this upgrade", s.p, others)
	}
	if err := s.buildIndexes(ctx); err != nil {
		return fmt.Errorf("etcdstore: build the indexes of sessions with work left in %s: %w", s.p, err)
	}
	_, err = s.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(schemaKey(s.p)), "=", "1")).
		Then(clientv3.OpPut(schemaKey(s.p), strconv.Itoa(SchemaVersion))).Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: open %s: %w", s.p, err)
	}
	return nil
}

// Prefix returns the prefix the store lives under.
func (s *Store) Prefix() string { return s.p }

func esc(key string) string { return url.PathEscape(key) }

func unesc(k string) string {
	key, err := url.PathUnescape(k)
	if err != nil {
		return k
	}
	return key
}

func num(n uint64) string { return fmt.Sprintf("%016x", n) }

func (s *Store) rec(key string) string           { return s.p + "rec/" + esc(key) }
func (s *Store) hist(key string) string          { return s.p + "hist/" + esc(key) + "/" }
func (s *Store) plans(key string) string         { return s.p + "plan/" + esc(key) + "/" }
func (s *Store) inbox(key string) string         { return s.p + "inbox/" + esc(key) + "/" }
func (s *Store) iseq(key string) string          { return s.p + "iseq/" + esc(key) }
func (s *Store) arch(key string) string          { return s.p + "arch/" + esc(key) + "/" }
func (s *Store) aseq(key string) string          { return s.p + "aseq/" + esc(key) }
func (s *Store) outbox(key string) string        { return s.p + "outbox/" + esc(key) + "/" }
func (s *Store) oseq(key string) string          { return s.p + "oseq/" + esc(key) }
func (s *Store) chatKey(name, key string) string { return s.p + name + "/" + esc(key) }

// sessionOf returns the session key of a full key under P+area+"/".
func (s *Store) sessionOf(area string, full []byte) string {
	rest := strings.TrimPrefix(string(full), s.p+area+"/")
	k, _, _ := strings.Cut(rest, "/")
	return unesc(k)
}

// seqOf returns the number a key ends in.
func seqOf(full []byte) uint64 {
	k := string(full)
	n, _ := strconv.ParseUint(k[strings.LastIndexByte(k, '/')+1:], 16, 64)
	return n
}

// count records one request of n bytes.
func (s *Store) count(n int) {
	s.Requests.Add(1)
	s.Bytes.Add(int64(n))
}

func opSize(ops []clientv3.Op) int {
	n := 0
	for _, op := range ops {
		n += len(op.KeyBytes()) + len(op.ValueBytes()) + 16
	}
	return n
}

// fits returns how many of ops, from the first, one Txn takes within
// etcd's limits: at least one.
func fits(ops []clientv3.Op) int {
	n, size := 0, 0
	for n < len(ops) && n < maxOps {
		size += opSize(ops[n : n+1])
		if size > maxBytes && n > 0 {
			break
		}
		n++
	}
	return n
}

// fence returns the compare that holds a write to the session's owner as
// this replica took it; without a Replica, none.
func (s *Store) fence(key string) ([]clientv3.Cmp, error) {
	if s.rep == nil {
		return nil, nil
	}
	return s.rep.fence(key)
}

// txn runs one Txn: cmps, then ops or, when a compare fails, elseOps. A
// failed fence is reported as agent.ErrFenced.
func (s *Store) txn(ctx context.Context, key string, cmps []clientv3.Cmp, ops, elseOps []clientv3.Op) (*clientv3.TxnResponse, error) {
	s.count(opSize(ops))
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Else(elseOps...).Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded && s.rep != nil && key != "" {
		if err := s.rep.check(ctx, key); err != nil {
			return resp, err
		}
	}
	return resp, nil
}

// fencedTxn runs ops under the session's fence; a failed fence is
// agent.ErrFenced and changed nothing.
func (s *Store) fencedTxn(ctx context.Context, key string, ops ...clientv3.Op) error {
	cmps, err := s.fence(key)
	if err != nil {
		return err
	}
	resp, err := s.txn(ctx, key, cmps, ops, nil)
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return s.rep.lose(key)
	}
	return nil
}

func (s *Store) get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	s.count(len(key))
	return s.cli.Get(ctx, key, opts...)
}

// rangeAll reads every key under prefix, in pages, calling f with each.
func (s *Store) rangeAll(ctx context.Context, prefix string, f func(kv *mvccpb.KeyValue) error, opts ...clientv3.OpOption) error {
	const page = 500
	end := clientv3.GetPrefixRangeEnd(prefix)
	from := prefix
	var rev int64
	for {
		o := append([]clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(page), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}, opts...)
		if rev != 0 {
			o = append(o, clientv3.WithRev(rev)) // one consistent view
		}
		resp, err := s.get(ctx, from, o...)
		if err != nil {
			return err
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			if err := f(kv); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// Load implements agent.Store. The record, history, plans and inbox are
// read at one revision.
func (s *Store) Load(ctx context.Context, key string) (*agent.Checkpoint, []agent.Entry, []agent.Inbound, error) {
	cp, hist, inbox, err := s.load(ctx, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("etcdstore: load session %s: %w", key, err)
	}
	return cp, hist, inbox, nil
}

func (s *Store) load(ctx context.Context, key string) (*agent.Checkpoint, []agent.Entry, []agent.Inbound, error) {
	s.count(len(key))
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.rec(key)),
		clientv3.OpGet(s.hist(key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)),
		clientv3.OpGet(s.inbox(key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)),
	).Commit()
	if err != nil {
		return nil, nil, nil, err
	}
	var cp *agent.Checkpoint
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		cp = new(agent.Checkpoint)
		if err := json.Unmarshal(kvs[0].Value, cp); err != nil {
			return nil, nil, nil, fmt.Errorf("record: %w", err)
		}
	}
	var hist []agent.Entry
	n := 0
	if cp != nil {
		n = cp.HistoryLen
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		if seqOf(kv.Key) >= uint64(n) {
			break // written by a round not finished yet
		}
		var e agent.Entry
		if err := json.Unmarshal(kv.Value, &e); err != nil {
			return nil, nil, nil, fmt.Errorf("history entry: %w", err)
		}
		hist = append(hist, e)
	}
	if len(hist) != n {
		return nil, nil, nil, fmt.Errorf("record says %d history entries, found %d", n, len(hist))
	}
	inbox, err := decodeInbox(resp.Responses[2].GetResponseRange().Kvs)
	if err != nil {
		return nil, nil, nil, err
	}
	return cp, hist, inbox, nil
}

func decodeInbox(kvs []*mvccpb.KeyValue) ([]agent.Inbound, error) {
	var inbox []agent.Inbound
	for _, kv := range kvs {
		var in agent.Inbound
		if err := json.Unmarshal(kv.Value, &in); err != nil {
			return nil, fmt.Errorf("inbox entry: %w", err)
		}
		inbox = append(inbox, in)
	}
	return inbox, nil
}

// Inbox implements agent.Store.
func (s *Store) Inbox(ctx context.Context, key string) ([]agent.Inbound, error) {
	resp, err := s.get(ctx, s.inbox(key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("etcdstore: inbox of %s: %w", key, err)
	}
	inbox, err := decodeInbox(resp.Kvs)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: inbox of %s: %w", key, err)
	}
	return inbox, nil
}

// consumedKey is the context key of WithConsumed.
type consumedKey struct{}

// WithConsumed returns a context under which Enqueue also deletes the
// handed-over event at key (a P fwd/ key), in the same Txn: the event
// becomes a queued message exactly once. When the key is gone already
// (another pass queued it), Enqueue queues nothing and reports success.
func WithConsumed(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, consumedKey{}, key)
}

// Enqueue implements agent.Store: any replica may queue a message for any
// session (the owner is told through its watch). The id comes from the
// session's counter, advanced by compare-and-set.
func (s *Store) Enqueue(ctx context.Context, key string, in agent.Inbound) (agent.Inbound, error) {
	consumed, _ := ctx.Value(consumedKey{}).(string)
	regranted := false
	for {
		resp, err := s.get(ctx, s.iseq(key))
		if err != nil {
			return in, fmt.Errorf("etcdstore: enqueue for %s: %w", key, err)
		}
		seq := counterOf(s.iseq(key), resp)
		in.ID = seq.last + 1
		raw, err := json.Marshal(in)
		if err != nil {
			return in, fmt.Errorf("etcdstore: enqueue for %s: %w", key, err)
		}
		cmps := []clientv3.Cmp{seq.unchanged()}
		ops := []clientv3.Op{seq.take(1), clientv3.OpPut(s.inbox(key)+num(in.ID), string(raw))}
		var elseOps []clientv3.Op
		if consumed != "" {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(consumed), ">", 0))
			ops = append(ops, clientv3.OpDelete(consumed))
			elseOps = append(elseOps, clientv3.OpGet(consumed, clientv3.WithCountOnly()))
		}
		event := s.p + "dedupe/" + esc(in.Event)
		if in.Event != "" {
			lease, err := s.leaseFor(ctx, agent.EventTTL)
			if err != nil {
				return in, fmt.Errorf("etcdstore: enqueue for %s: %w", key, err)
			}
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(event), "=", 0))
			ops = append(ops, clientv3.OpPut(event, "", clientv3.WithLease(lease)))
			elseOps = append(elseOps, clientv3.OpGet(event, clientv3.WithCountOnly()))
		}
		tr, err := s.txn(ctx, "", cmps, ops, elseOps)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && !regranted {
			s.forgetDedupeLease(agent.EventTTL) // revoked or expired under us: grant another
			regranted = true
			continue
		}
		if err != nil {
			return in, fmt.Errorf("etcdstore: enqueue for %s: %w", key, err)
		}
		if tr.Succeeded {
			return in, nil
		}
		if consumed != "" && tr.Responses[0].GetResponseRange().Count == 0 {
			return in, nil // queued by an earlier pass
		}
		if in.Event != "" && tr.Responses[len(tr.Responses)-1].GetResponseRange().Count > 0 {
			return in, fmt.Errorf("etcdstore: enqueue for %s: %w", key, agent.ErrDuplicate)
		}
		// The counter moved: another replica queued one meanwhile.
	}
}

// Commit implements agent.Store: the round in one Txn under the session's
// fence, comparing the record's revision as read, so that a round that
// does not follow the stored session is refused. A round too big for one
// Txn writes its history entries and plan revisions first (invisible to
// readers until the record moves, see the package comment). The round's
// Spend is added to its person's day in the last Txn, compared and
// retried like the record (spend.go).
func (s *Store) Commit(ctx context.Context, r *agent.Round) error {
	if err := s.commit(ctx, r); err != nil {
		return fmt.Errorf("etcdstore: commit round of %s: %w", r.Checkpoint.Key, err)
	}
	return nil
}

func (s *Store) commit(ctx context.Context, r *agent.Round) error {
	key := r.Checkpoint.Key
	record, err := json.Marshal(r.Checkpoint)
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	puts, err := s.roundPuts(r)
	if err != nil {
		return err
	}
	sp := r.Spend
	if sp != nil && (sp.Tokens == 0 || sp.Person == "") {
		sp = nil
	}
	final := s.finalOps(r, string(record), sp)
	if len(final) > maxOps || opSize(final) > maxBytes {
		return fmt.Errorf("a round that drains %d messages with a %d-byte record does not fit one etcd transaction", len(r.Drained), len(record))
	}
	for attempt := 0; ; attempt++ {
		done, err := s.commitAttempt(ctx, r, puts, final, sp, attempt)
		if err != nil || done {
			return err
		}
		s.forget(key)
		// The record moved between the read and the write (a decision
		// recorded on another replica): read it again.
	}
}

// roundPuts are the round's writes that may go ahead of its record: its
// history entries, plan revisions and log entries.
func (s *Store) roundPuts(r *agent.Round) ([]clientv3.Op, error) {
	key := r.Checkpoint.Key
	var puts []clientv3.Op
	for i, e := range r.Append {
		raw, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("encode history: %w", err)
		}
		puts = append(puts, clientv3.OpPut(s.hist(key)+num(uint64(r.Base+i)), string(raw)))
	}
	for _, p := range r.Plans {
		raw, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("encode plan: %w", err)
		}
		puts = append(puts, clientv3.OpPut(s.plans(key)+num(uint64(p.Revision)), string(raw)))
	}
	logged, err := s.logPuts(key, r.Log)
	if err != nil {
		return nil, err
	}
	return append(puts, logged...), nil
}

// finalOps are the writes of the round's last Txn: the record, the
// running index, the drained inbox messages, the undelivered index when
// the round logged anything, and, with sp, room for the spend counter's
// put (made in each attempt).
func (s *Store) finalOps(r *agent.Round, record string, sp *agent.Spend) []clientv3.Op {
	key := r.Checkpoint.Key
	final := append([]clientv3.Op{clientv3.OpPut(s.rec(key), record), s.runningOp(key, r.Checkpoint.State)}, s.drains(key, r.Drained)...)
	if len(r.Log) > 0 {
		final = append(final, s.indexOp(idxUndelivered, key, true))
	}
	if sp != nil {
		final = append(final, clientv3.OpPut(s.spendKey(sp.Day, sp.Person), strconv.FormatUint(1<<63, 10)))
	}
	return final
}

// commitAttempt writes the round once: done is false when the record
// moved since it was read, and the round must be tried again.
func (s *Store) commitAttempt(ctx context.Context, r *agent.Round, puts, final []clientv3.Op, sp *agent.Spend, attempt int) (done bool, err error) {
	key := r.Checkpoint.Key
	mod, err := s.recordMod(ctx, r, attempt)
	if err != nil {
		return false, err
	}
	// What does not fit beside the record goes first, in Txns of its
	// own, under the fence; the last Txn moves the record.
	ops := puts
	for len(ops)+len(final) > maxOps || opSize(ops)+opSize(final) > maxBytes {
		n := fits(ops)
		if err := s.fencedTxn(ctx, key, ops[:n]...); err != nil {
			return false, err
		}
		ops = ops[n:]
	}
	cmps, err := s.fence(key)
	if err != nil {
		return false, err
	}
	cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.rec(key)), "=", mod))
	last := append(append([]clientv3.Op(nil), ops...), final...)
	var spent counter
	if sp != nil {
		// The person's day is counted in the round's Txn, by
		// compare-and-set: another session of theirs (here or on
		// another replica) that counted first makes this attempt
		// fail, and the next reads the counter again.
		if spent, err = s.spendCounter(ctx, sp, attempt > 0); err != nil {
			return false, err
		}
		cmp, put := spendOps(spent, sp)
		cmps = append(cmps, cmp)
		last[len(last)-1] = put
	}
	tr, err := s.txn(ctx, key, cmps, last, nil)
	if err != nil {
		return false, err
	}
	if !tr.Succeeded {
		return false, nil
	}
	s.wrote(key, tr.Header.Revision, r.Checkpoint.HistoryLen)
	if sp != nil {
		s.keepSpend(counter{key: spent.key, last: spent.plus(sp.Tokens), mod: tr.Header.Revision})
	}
	return true, nil
}

// recordMod is the mod revision of the session's record the round's Txn
// compares: the one this store last wrote, if it did and the round
// follows it, on the first attempt; read from etcd otherwise.
func (s *Store) recordMod(ctx context.Context, r *agent.Round, attempt int) (int64, error) {
	// The record as this store last wrote it, if it did: no read is
	// needed when nobody wrote it since (the compare says).
	mod, histLen, known := s.written(r.Checkpoint.Key)
	if known && attempt == 0 {
		if histLen != r.Base && histLen != r.Checkpoint.HistoryLen {
			known = false // read it: the round may follow a newer record
		}
	}
	if !known || attempt > 0 || r.Guard {
		// A guarded round is checked against the record as it is.
		return s.readRecord(ctx, r)
	}
	return mod, nil
}

// drains returns the deletes of a round's drained inbox entries: one
// ranged delete for each run of consecutive ids (a round drains the
// oldest messages, so usually one), so that however many messages a turn
// takes in, they go in the round's one Txn.
func (s *Store) drains(key string, ids []uint64) []clientv3.Op {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	var ops []clientv3.Op
	for i := 0; i < len(ids); {
		j := i + 1
		for j < len(ids) && ids[j] == ids[j-1]+1 {
			j++
		}
		if j-i == 1 {
			ops = append(ops, clientv3.OpDelete(s.inbox(key)+num(ids[i])))
		} else {
			ops = append(ops, clientv3.OpDelete(s.inbox(key)+num(ids[i]), clientv3.WithRange(s.inbox(key)+num(ids[j-1]+1))))
		}
		i = j
	}
	return ops
}

// readRecord reads the session's record and checks that the round
// follows it; it returns the record's ModRevision (0: none).
func (s *Store) readRecord(ctx context.Context, r *agent.Round) (int64, error) {
	key := r.Checkpoint.Key
	{
		resp, err := s.get(ctx, s.rec(key))
		if err != nil {
			return 0, err
		}
		var mod int64
		if len(resp.Kvs) == 1 {
			var cur struct {
				HistoryLen int   `json:"history_len"`
				Changed    int64 `json:"changed"`
			}
			if err := json.Unmarshal(resp.Kvs[0].Value, &cur); err != nil {
				return 0, fmt.Errorf("record: %w", err)
			}
			if cur.HistoryLen != r.Base && cur.HistoryLen != r.Checkpoint.HistoryLen {
				return 0, fmt.Errorf("%w: stored history has %d entries, round starts at %d", ErrConflict, cur.HistoryLen, r.Base)
			}
			if r.Guard && cur.Changed != r.Checkpoint.Changed {
				return 0, agent.ErrChanged
			}
			mod = resp.Kvs[0].ModRevision
		} else if r.Base != 0 {
			return 0, fmt.Errorf("%w: no record, round starts at %d", ErrConflict, r.Base)
		}
		return mod, nil
	}
}

// written returns the ModRevision and history length of the session's
// record as this store last wrote it.
func (s *Store) written(key string) (mod int64, histLen int, ok bool) {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	w, ok := s.recs[key]
	return w.mod, w.histLen, ok
}

func (s *Store) wrote(key string, mod int64, histLen int) {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	if s.recs == nil {
		s.recs = map[string]writtenRecord{}
	}
	if len(s.recs) > 10000 {
		clear(s.recs) // a cache: forgetting costs one read
	}
	s.recs[key] = writtenRecord{mod, histLen}
}

func (s *Store) forget(key string) {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	delete(s.recs, key)
}

type writtenRecord struct {
	mod     int64
	histLen int
}

// Resumable implements agent.Store: sessions whose record says running or
// waiting, and sessions with queued messages.
func (s *Store) Resumable(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	var keys []string
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	err := s.rangeAll(ctx, s.p+"inbox/", func(kv *mvccpb.KeyValue) error {
		add(s.sessionOf("inbox", kv.Key))
		return nil
	}, clientv3.WithKeysOnly())
	if err == nil {
		var running []string
		running, err = s.indexed(ctx, idxRunning)
		for _, k := range running {
			add(k)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("etcdstore: list resumable sessions: %w", err)
	}
	return keys, nil
}

// UpdateCheckpoint implements agent.Store: it reads the record with its
// ModRevision, calls fn and writes the result in a Txn that compares that
// revision, reading and calling fn again when another write came between.
// Any replica may update (a click is decided where it arrives); the
// compare keeps it atomic against the owner's commits.
func (s *Store) UpdateCheckpoint(ctx context.Context, key string, fn func(*agent.Checkpoint) error) error {
	for {
		resp, err := s.get(ctx, s.rec(key))
		if err != nil {
			return fmt.Errorf("etcdstore: update checkpoint of %s: %w", key, err)
		}
		if len(resp.Kvs) == 0 {
			if err := fn(nil); err != nil {
				return fmt.Errorf("etcdstore: update checkpoint of %s: %w", key, err)
			}
			return nil
		}
		kv := resp.Kvs[0]
		var cp agent.Checkpoint
		if err := json.Unmarshal(kv.Value, &cp); err != nil {
			return fmt.Errorf("etcdstore: update checkpoint of %s: record: %w", key, err)
		}
		storedKey, storedLen := cp.Key, cp.HistoryLen
		if err := fn(&cp); err != nil {
			return fmt.Errorf("etcdstore: update checkpoint of %s: %w", key, err)
		}
		if cp.Key != storedKey || cp.HistoryLen != storedLen {
			return fmt.Errorf("etcdstore: update checkpoint of %s: %w: an update may not change the record's key or history length", key, ErrConflict)
		}
		out, err := json.Marshal(cp)
		if err != nil {
			return fmt.Errorf("etcdstore: update checkpoint of %s: %w", key, err)
		}
		tr, err := s.txn(ctx, "", []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.rec(key)), "=", kv.ModRevision)},
			[]clientv3.Op{clientv3.OpPut(s.rec(key), string(out)), s.runningOp(key, cp.State)}, nil)
		if err != nil {
			return fmt.Errorf("etcdstore: update checkpoint of %s: %w", key, err)
		}
		if tr.Succeeded {
			return nil
		}
	}
}

// Archive implements agent.Store: the session's record, history and plan
// revisions are kept as archive n and the session starts afresh. The
// copies are written first, under the fence, in Txns within etcd's
// limits; the last Txn counts the archive, deletes the originals (one
// ranged delete each) and writes the fresh record, so a reader sees
// either the old session or the fresh one with its archive.
func (s *Store) Archive(ctx context.Context, key string) error {
	if err := s.archive(ctx, key); err != nil {
		return fmt.Errorf("etcdstore: archive session %s: %w", key, err)
	}
	return nil
}

func (s *Store) archive(ctx context.Context, key string) error {
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.rec(key)),
		clientv3.OpGet(s.aseq(key)),
	).Commit()
	s.count(len(key))
	if err != nil {
		return err
	}
	recKVs := resp.Responses[0].GetResponseRange().Kvs
	if len(recKVs) == 0 {
		return nil
	}
	var n uint64
	var seqMod int64
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 1 {
		n, _ = strconv.ParseUint(string(kvs[0].Value), 10, 64)
		seqMod = kvs[0].ModRevision
	}
	n++
	dst := s.arch(key) + num(n) + "/"
	rev := resp.Header.Revision
	var old agent.Checkpoint
	if err := json.Unmarshal(recKVs[0].Value, &old); err != nil {
		old = agent.Checkpoint{} // an unreadable record is archived as it was
	}
	if err := s.copyArchived(ctx, key, dst, old, rev); err != nil {
		return err
	}
	old.Key = key
	reset := old.Reset(s.now())
	fresh, err := json.Marshal(reset)
	if err != nil {
		return err
	}
	cmps, err := s.fence(key)
	if err != nil {
		return err
	}
	cmps = append(cmps,
		clientv3.Compare(clientv3.ModRevision(s.rec(key)), "=", recKVs[0].ModRevision),
		clientv3.Compare(clientv3.ModRevision(s.aseq(key)), "=", seqMod))
	tr, err := s.txn(ctx, key, cmps, []clientv3.Op{
		clientv3.OpPut(dst+"rec", string(recKVs[0].Value)),
		clientv3.OpPut(s.aseq(key), strconv.FormatUint(n, 10)),
		clientv3.OpDelete(s.hist(key), clientv3.WithPrefix()),
		clientv3.OpDelete(s.plans(key), clientv3.WithPrefix()),
		clientv3.OpPut(s.rec(key), string(fresh)),
		s.runningOp(key, reset.State),
	}, nil)
	if err != nil {
		return err
	}
	if !tr.Succeeded {
		return fmt.Errorf("%w: the session changed while it was archived", ErrConflict)
	}
	return nil
}

// copyArchived copies the session's history entries and plan revisions,
// as read at rev, under dst, in fenced Txns within etcd's limits.
func (s *Store) copyArchived(ctx context.Context, key, dst string, old agent.Checkpoint, rev int64) error {
	// What the record counts, no more: entries and plans a split round
	// wrote before it failed are not the session's.
	var copies []clientv3.Op
	for _, src := range []struct {
		from, to string
		counts   func(n uint64) bool
	}{
		{s.hist(key), dst + "hist/", func(n uint64) bool { return n < uint64(old.HistoryLen) }},
		{s.plans(key), dst + "plan/", func(n uint64) bool { return int64(n) <= old.Revision }},
	} {
		err := s.rangeAll(ctx, src.from, func(kv *mvccpb.KeyValue) error {
			if src.counts(seqOf(kv.Key)) {
				copies = append(copies, clientv3.OpPut(src.to+strings.TrimPrefix(string(kv.Key), src.from), string(kv.Value)))
			}
			return nil
		}, clientv3.WithRev(rev))
		if err != nil {
			return err
		}
	}
	for len(copies) > 0 {
		i := fits(copies)
		if err := s.fencedTxn(ctx, key, copies[:i]...); err != nil {
			return err
		}
		copies = copies[i:]
	}
	return nil
}

// Archived returns how many times the session was reset and the history
// of archive n (1-based), for audit.
func (s *Store) Archived(ctx context.Context, key string, n uint64) (int, []agent.Entry, error) {
	resp, err := s.get(ctx, s.aseq(key))
	if err != nil {
		return 0, nil, fmt.Errorf("etcdstore: archives of %s: %w", key, err)
	}
	count := 0
	if len(resp.Kvs) == 1 {
		count, _ = strconv.Atoi(string(resp.Kvs[0].Value))
	}
	var hist []agent.Entry
	if n >= 1 && n <= uint64(count) {
		err := s.rangeAll(ctx, s.arch(key)+num(n)+"/hist/", func(kv *mvccpb.KeyValue) error {
			var e agent.Entry
			if err := json.Unmarshal(kv.Value, &e); err != nil {
				return err
			}
			hist = append(hist, e)
			return nil
		})
		if err != nil {
			return 0, nil, fmt.Errorf("etcdstore: archives of %s: %w", key, err)
		}
	}
	return count, hist, nil
}

// Plans returns every plan revision of a session, oldest first.
func (s *Store) Plans(ctx context.Context, key string) ([]agent.PlanRevision, error) {
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.rec(key)),
		clientv3.OpGet(s.plans(key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)),
	).Commit()
	s.count(len(key))
	if err != nil {
		return nil, fmt.Errorf("etcdstore: plans of %s: %w", key, err)
	}
	var cur struct {
		Revision int64 `json:"revision"`
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		if err := json.Unmarshal(kvs[0].Value, &cur); err != nil {
			return nil, fmt.Errorf("etcdstore: plans of %s: record: %w", key, err)
		}
	}
	var out []agent.PlanRevision
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		if int64(seqOf(kv.Key)) > cur.Revision {
			break // written by a round not finished yet
		}
		var p agent.PlanRevision
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			return nil, fmt.Errorf("etcdstore: plans of %s: %w", key, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// Board implements chat.BoardStore: the plan board record (nil if none).
func (s *Store) Board(ctx context.Context, key string) ([]byte, error) {
	return s.chatRecord(ctx, "board", key)
}

// SaveBoard implements chat.BoardStore, under the session's fence: the
// record, and whether it has work left in the index of such boards.
func (s *Store) SaveBoard(ctx context.Context, key string, data []byte, pending bool) error {
	err := s.fencedTxn(ctx, key, clientv3.OpPut(s.chatKey("board", key), string(data)), s.indexOp(idxBoards, key, pending))
	if err != nil {
		return fmt.Errorf("etcdstore: save board of %s: %w", key, err)
	}
	return nil
}

// Cards implements chat.CardStore.
func (s *Store) Cards(ctx context.Context, key string) ([]byte, error) {
	return s.chatRecord(ctx, "cards", key)
}

// SaveCards implements chat.CardStore, under the session's fence.
func (s *Store) SaveCards(ctx context.Context, key string, data []byte) error {
	return s.saveChatRecord(ctx, "cards", key, data)
}

// Listing implements chat.ListingStore.
func (s *Store) Listing(ctx context.Context, key string) ([]byte, error) {
	return s.chatRecord(ctx, "listing", key)
}

// SaveListing implements chat.ListingStore, under the session's fence.
func (s *Store) SaveListing(ctx context.Context, key string, data []byte) error {
	return s.saveChatRecord(ctx, "listing", key, data)
}

func (s *Store) chatRecord(ctx context.Context, name, key string) ([]byte, error) {
	resp, err := s.get(ctx, s.chatKey(name, key))
	if err != nil {
		return nil, fmt.Errorf("etcdstore: %s of %s: %w", name, key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return resp.Kvs[0].Value, nil
}

func (s *Store) saveChatRecord(ctx context.Context, name, key string, data []byte) error {
	if err := s.fencedTxn(ctx, key, clientv3.OpPut(s.chatKey(name, key), string(data))); err != nil {
		return fmt.Errorf("etcdstore: save %s of %s: %w", name, key, err)
	}
	return nil
}

// SessionInfo is a session as listed for operators.
type SessionInfo struct {
	Checkpoint agent.Checkpoint
	Board      []byte
	Listing    []byte
}

// Sessions lists every session that has a record, a board or queued
// messages, in key order.
func (s *Store) Sessions(ctx context.Context) ([]SessionInfo, error) {
	byKey := map[string]*SessionInfo{}
	var order []string
	info := func(k string) *SessionInfo {
		if in, ok := byKey[k]; ok {
			return in
		}
		in := &SessionInfo{Checkpoint: agent.Checkpoint{Key: k, State: agent.Idle}}
		byKey[k] = in
		order = append(order, k)
		return in
	}
	read := func(area string, f func(in *SessionInfo, v []byte) error) error {
		return s.rangeAll(ctx, s.p+area+"/", func(kv *mvccpb.KeyValue) error {
			return f(info(s.sessionOf(area, kv.Key)), kv.Value)
		})
	}
	err := read("rec", func(in *SessionInfo, v []byte) error { return json.Unmarshal(v, &in.Checkpoint) })
	if err == nil {
		err = read("board", func(in *SessionInfo, v []byte) error { in.Board = v; return nil })
	}
	if err == nil {
		err = read("listing", func(in *SessionInfo, v []byte) error { in.Listing = v; return nil })
	}
	if err == nil {
		err = s.rangeAll(ctx, s.p+"inbox/", func(kv *mvccpb.KeyValue) error { info(s.sessionOf("inbox", kv.Key)); return nil }, clientv3.WithKeysOnly())
	}
	if err != nil {
		return nil, fmt.Errorf("etcdstore: list sessions: %w", err)
	}
	slices.Sort(order)
	out := make([]SessionInfo, 0, len(order))
	for _, k := range order {
		out = append(out, *byKey[k])
	}
	return out, nil
}

// SessionCount returns the number of sessions with a record.
func (s *Store) SessionCount() (int, error) {
	resp, err := s.get(context.Background(), s.p+"rec/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("etcdstore: count sessions: %w", err)
	}
	return int(resp.Count), nil
}

// Known reports whether the session has a record or a plan board, read
// from the cluster (a replica that never ran it knows it too).
func (s *Store) Known(ctx context.Context, key string) (bool, error) {
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.rec(key), clientv3.WithCountOnly()),
		clientv3.OpGet(s.chatKey("board", key), clientv3.WithCountOnly()),
	).Commit()
	s.count(len(key))
	if err != nil {
		return false, err
	}
	return resp.Responses[0].GetResponseRange().Count+resp.Responses[1].GetResponseRange().Count > 0, nil
}

// Glance is what a replica needs to know of a session to decide whether
// to take it over: its run state and how much waits for it, read in one
// request without its history.
type Glance struct {
	State   agent.RunState // "" without a record
	Inbox   int64          // queued messages
	Handed  int64          // events handed to its holder (P fwd/K/)
	Outbox  int64          // replies not delivered yet
	Unknown bool           // the record could not be read
	// BoardPending: chat's plan board was last saved with work left
	// (its index of them, chat.BoardStore.SaveBoard).
	BoardPending bool
	// Undelivered: the session's log goes past its delivery cursor.
	Undelivered bool
}

// Glance reads the session's Glance.
func (s *Store) Glance(ctx context.Context, key string) (Glance, error) {
	s.count(len(key))
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.rec(key)),
		clientv3.OpGet(s.inbox(key), clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(s.p+"fwd/"+esc(key)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(s.outbox(key), clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(s.idx(idxBoards, key), clientv3.WithCountOnly()),
		clientv3.OpGet(s.dlv(key)),
	).Commit()
	if err != nil {
		return Glance{}, fmt.Errorf("etcdstore: glance at %s: %w", key, err)
	}
	var g Glance
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		var cp struct {
			State  agent.RunState `json:"state"`
			LogSeq int64          `json:"log_seq"`
		}
		g.Unknown = json.Unmarshal(kvs[0].Value, &cp) != nil
		g.State = cp.State
		var delivered int64
		if kvs := resp.Responses[5].GetResponseRange().Kvs; len(kvs) == 1 {
			delivered, _ = strconv.ParseInt(string(kvs[0].Value), 10, 64)
		}
		g.Undelivered = cp.LogSeq > delivered
	}
	g.Inbox = resp.Responses[1].GetResponseRange().Count
	g.Handed = resp.Responses[2].GetResponseRange().Count
	g.Outbox = resp.Responses[3].GetResponseRange().Count
	g.BoardPending = resp.Responses[4].GetResponseRange().Count > 0
	return g, nil
}

// Ping reports whether the cluster answers a linearizable read.
func (s *Store) Ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := s.get(ctx, s.p+"meta/schema"); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	return nil
}

// Empty reports whether the prefix holds nothing but its schema version
// (migrate's precondition): no session data, and no replica using it.
func (s *Store) Empty(ctx context.Context) (bool, error) {
	all, err := s.get(ctx, s.p, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return false, err
	}
	meta, err := s.get(ctx, s.p+"meta/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithRev(all.Header.Revision))
	if err != nil {
		return false, err
	}
	return all.Count == meta.Count, nil
}

// PutArchive writes archive n of the session (its record as stored, its
// history and plan revisions), for migrate, and counts it: the archive
// count becomes n. Unfenced; for a prefix migrate checked empty.
func (s *Store) PutArchive(ctx context.Context, key string, n uint64, rec []byte, hist []agent.Entry, plans []agent.PlanRevision) error {
	dst := s.arch(key) + num(n) + "/"
	var ops []clientv3.Op
	if rec != nil {
		ops = append(ops, clientv3.OpPut(dst+"rec", string(rec)))
	}
	for i, e := range hist {
		raw, err := json.Marshal(e)
		if err != nil {
			return err
		}
		ops = append(ops, clientv3.OpPut(dst+"hist/"+num(uint64(i)), string(raw)))
	}
	for _, p := range plans {
		raw, err := json.Marshal(p)
		if err != nil {
			return err
		}
		ops = append(ops, clientv3.OpPut(dst+"plan/"+num(uint64(p.Revision)), string(raw)))
	}
	ops = append(ops, clientv3.OpPut(s.aseq(key), strconv.FormatUint(n, 10)))
	for len(ops) > 0 {
		i := fits(ops)
		if _, err := s.txn(ctx, "", nil, ops[:i], nil); err != nil {
			return fmt.Errorf("etcdstore: archive %d of %s: %w", n, key, err)
		}
		ops = ops[i:]
	}
	return nil
}

// ArchivedState returns archive n's record (as stored) and plan
// revisions; nil and none if there is no archive n.
func (s *Store) ArchivedState(ctx context.Context, key string, n uint64) ([]byte, []agent.PlanRevision, error) {
	dst := s.arch(key) + num(n) + "/"
	resp, err := s.get(ctx, dst+"rec")
	if err != nil {
		return nil, nil, fmt.Errorf("etcdstore: archive %d of %s: %w", n, key, err)
	}
	var rec []byte
	if len(resp.Kvs) == 1 {
		rec = resp.Kvs[0].Value
	}
	var plans []agent.PlanRevision
	err = s.rangeAll(ctx, dst+"plan/", func(kv *mvccpb.KeyValue) error {
		var p agent.PlanRevision
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			return err
		}
		plans = append(plans, p)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("etcdstore: archive %d of %s: %w", n, key, err)
	}
	return rec, plans, nil
}
