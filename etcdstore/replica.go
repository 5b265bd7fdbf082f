package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinplan/pinplan/agent"
)

// Replica is this process among the replicas sharing a prefix: its lease,
// the sessions it holds, and the fence on their writes (DESIGN §14).
//
// A session is held through its owner key P owners/K, created on the
// replica's lease. The CreateRevision of that key as this replica created
// it is the fence: every write for the session made by its turn, its
// plan board or its outbox compares it, so once the lease is gone (a
// pause, a partition) nothing the replica writes lands, even before it
// notices. It notices through its keep-alive, or at once when its last
// renewal is older than the TTL, and Lost is closed: the process stops
// its turns and sends nothing more.
//
// A replica holds a session until its lease ends; it never hands one back
// while it lives. Its lease ends with the process (revoked by Close on a
// graceful stop, so that the others take over at once) or after the TTL.
type Replica struct {
	cli   *clientv3.Client
	p     string
	id    string
	ttl   time.Duration
	lease clientv3.LeaseID
	log   *slog.Logger
	store *Store           // set by New
	runs  map[string]bool  // the platforms this replica runs; nil: every one
	taken func(key string) // ReplicaOptions.OnTake

	// Takeovers counts sessions taken; Fenced counts writes and sends
	// refused because the session is no longer this replica's.
	Takeovers atomic.Int64
	Fenced    atomic.Int64
	replicas  atomic.Int64 // live replicas, from the watch on P replicas/

	closeOnce sync.Once        // Close
	closeErr  error            // what the first Close returned
	mu        sync.Mutex       // guards owned, deadline, lost and lostErr
	owned     map[string]int64 // session key -> owner key's CreateRevision
	deadline  time.Time        // the lease's end as this replica last heard
	lost      chan struct{}
	lostErr   error

	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// ReplicaOptions configures NewReplica.
type ReplicaOptions struct {
	Prefix string
	ID     string        // PINPLAN_REPLICA_ID
	TTL    time.Duration // PINPLAN_LEASE_TTL, whole seconds
	Logger *slog.Logger
	// Platforms are the platforms this replica runs ("slack", "discord",
	// "web"): it takes only sessions of these (a session key begins with
	// its platform), since a session's events and replies need its
	// platform. Nil takes every session.
	Platforms []string
	// OnTake, when set, is called when this replica takes a session (not
	// for one it holds already), before the take returns.
	OnTake func(key string)
}

// NewReplica grants the replica's lease, keeps it alive and registers the
// replica under P replicas/. It refuses a prefix that is not pinplan's
// (ErrForeign) or that an interrupted migrate left (ErrMigrating) before
// it writes anything there.
func NewReplica(ctx context.Context, cli *clientv3.Client, opts ReplicaOptions) (*Replica, error) {
	if opts.TTL < time.Second {
		opts.TTL = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Prefix == "" {
		opts.Prefix = "/pinplan/"
	}
	if !strings.HasSuffix(opts.Prefix, "/") {
		opts.Prefix += "/"
	}
	if err := claim(ctx, cli, opts.Prefix, false); err != nil {
		return nil, err
	}
	grant, err := cli.Grant(ctx, int64(opts.TTL/time.Second))
	if err != nil {
		return nil, fmt.Errorf("etcdstore: grant the replica's lease: %w", err)
	}
	r := &Replica{cli: cli, p: opts.Prefix, id: opts.ID, ttl: opts.TTL, lease: grant.ID, log: opts.Logger, taken: opts.OnTake,
		owned: map[string]int64{}, deadline: time.Now().Add(opts.TTL), lost: make(chan struct{})}
	if opts.Platforms != nil {
		r.runs = map[string]bool{}
		for _, p := range opts.Platforms {
			r.runs[p] = true
		}
	}
	kctx, cancel := context.WithCancel(context.Background())
	r.ctx, r.cancel = kctx, cancel
	if err := r.register(ctx); err != nil {
		cancel()
		cli.Revoke(context.WithoutCancel(ctx), grant.ID)
		return nil, err
	}
	alive, err := cli.KeepAlive(kctx, grant.ID)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("etcdstore: keep the replica's lease alive: %w", err)
	}
	r.wg.Add(2)
	go r.keepAlive(alive)
	go r.watchReplicas(kctx)
	return r, nil
}

// register creates P replicas/ID on the lease, waiting up to the TTL for
// a key left by this id's last process (killed, its lease not expired
// yet); a live replica with the same id is an error: two replicas with
// one PINPLAN_REPLICA_ID would ignore each other's nudges and count as one
// when they share the platforms' pace. A prefix a migrate marked since
// NewReplica checked it is refused: the replica registers only while it
// is unmarked, so a migrate that marks it later sees the replica.
func (r *Replica) register(ctx context.Context) error {
	key := r.p + "replicas/" + esc(r.id)
	marker := migratingKey(r.p)
	deadline := time.Now().Add(r.ttl + 2*time.Second)
	for {
		resp, err := r.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0), clientv3.Compare(clientv3.CreateRevision(marker), "=", 0)).
			Then(clientv3.OpPut(key, time.Now().UTC().Format(time.RFC3339), clientv3.WithLease(r.lease))).
			Else(clientv3.OpGet(marker)).Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: register replica %s: %w", r.id, err)
		}
		if resp.Succeeded {
			return nil
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			return migratingError(r.p, kvs[0].Value)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcdstore: another replica runs as %q (its lease is alive); give each replica its own PINPLAN_REPLICA_ID", r.id)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ID returns the replica's id.
func (r *Replica) ID() string { return r.id }

// Platforms returns the platforms this replica runs, sorted; nil when it
// takes sessions of every platform.
func (r *Replica) Platforms() []string {
	if r.runs == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(r.runs))
}

// Runs reports whether this replica runs the session's platform, the
// first part of its key: only then may it take the session.
func (r *Replica) Runs(key string) bool {
	if r.runs == nil {
		return true
	}
	platform, _, _ := strings.Cut(key, "/")
	return r.runs[platform]
}

// Lease returns the replica's lease id.
func (r *Replica) Lease() clientv3.LeaseID { return r.lease }

// TTL returns the lease's time to live.
func (r *Replica) TTL() time.Duration { return r.ttl }

// keepAlive follows the lease's renewals; when they stop (the lease
// expired, was revoked, or the cluster is out of reach past the TTL) the
// replica is lost.
func (r *Replica) keepAlive(ch <-chan *clientv3.LeaseKeepAliveResponse) {
	defer r.wg.Done()
	for resp := range ch {
		r.mu.Lock()
		if resp.TTL > 0 {
			r.deadline = time.Now().Add(time.Duration(resp.TTL) * time.Second)
		}
		r.mu.Unlock()
	}
	r.markLost(errors.New("the replica's etcd lease ended"))
}

func (r *Replica) markLost(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.lost:
	default:
		r.lostErr = err
		r.owned = map[string]int64{}
		close(r.lost)
	}
}

// Lost is closed once the replica's lease is gone.
func (r *Replica) Lost() <-chan struct{} { return r.lost }

// LostErr says why Lost was closed.
func (r *Replica) LostErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lostErr
}

// alive reports whether the lease is still this replica's as far as it
// knows; called with r.mu held. Past the deadline of its last renewal the
// replica counts itself lost, even before its keep-alive says so (after a
// pause, say).
func (r *Replica) alive() bool {
	select {
	case <-r.lost:
		return false
	default:
	}
	if time.Now().After(r.deadline) {
		r.lostErr = fmt.Errorf("no renewal of the replica's lease for %s", r.ttl)
		r.owned = map[string]int64{}
		close(r.lost)
		return false
	}
	return true
}

func (r *Replica) ownerKey(key string) string { return r.p + "owners/" + esc(key) }

// Holds reports whether this replica holds the session.
func (r *Replica) Holds(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.owned[key]
	return ok && r.alive()
}

// Owned returns how many sessions the replica holds.
func (r *Replica) Owned() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.owned)
}

// Replicas returns how many replicas are live, this one included (at
// least 1).
func (r *Replica) Replicas() int { return max(int(r.replicas.Load()), 1) }

func (r *Replica) fenced(key string) error {
	r.Fenced.Add(1)
	return fmt.Errorf("%w: %s", agent.ErrFenced, key)
}

// fence returns the compare that holds a write to the session's owner
// key as this replica created it.
func (r *Replica) fence(key string) ([]clientv3.Cmp, error) {
	r.mu.Lock()
	rev, ok := r.owned[key]
	ok = ok && r.alive()
	r.mu.Unlock()
	if !ok {
		return nil, r.fenced(key)
	}
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(r.ownerKey(key)), "=", rev)}, nil
}

// lose forgets the session after a write its fence refused.
func (r *Replica) lose(key string) error {
	r.mu.Lock()
	delete(r.owned, key)
	r.mu.Unlock()
	r.log.Warn("a write was fenced: this replica no longer holds the session", "session", key)
	return r.fenced(key)
}

// check tells a failed fence from another failed compare: it returns the
// fenced error when the owner key is no longer the one this replica
// created, and nil when it still is.
func (r *Replica) check(ctx context.Context, key string) error {
	r.mu.Lock()
	rev, ok := r.owned[key]
	r.mu.Unlock()
	if !ok {
		return nil // not a fenced write
	}
	resp, err := r.cli.Get(ctx, r.ownerKey(key))
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != rev {
		return r.lose(key)
	}
	return nil
}

// Held returns agent.ErrFenced unless this replica still holds the
// session, asking the cluster: the plan board, the cards and the outbox
// call it before each platform request, so a replica that lost a session
// sends nothing more for it.
func (r *Replica) Held(ctx context.Context, key string) error {
	cmps, err := r.fence(key)
	if err != nil {
		return err
	}
	resp, err := r.cli.Txn(ctx).If(cmps...).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return r.lose(key)
	}
	return nil
}

// Take implements agent.Owners: it reports true when this replica holds
// the session or has just taken it because no live replica did (and it
// runs the session's platform). Otherwise Take nudges the holder, if any
// (P wake/K), and reports false.
func (r *Replica) Take(ctx context.Context, key string) (bool, error) {
	r.mu.Lock()
	_, ok := r.owned[key]
	alive := r.alive()
	r.mu.Unlock()
	if !alive {
		return false, r.fenced(key)
	}
	if ok {
		return true, nil
	}
	ok, err := r.take(ctx, key)
	if err != nil || ok {
		return ok, err
	}
	_, err = r.cli.Put(ctx, r.p+"wake/"+esc(key), r.id)
	return false, err
}

// take creates the owner key if no replica holds one and this replica
// runs the session's platform: a replica without it could neither send
// the turn's plan and replies nor handle its events, and would keep the
// session from the replicas that can.
func (r *Replica) take(ctx context.Context, key string) (bool, error) {
	if !r.Runs(key) {
		return false, nil
	}
	ok := r.ownerKey(key)
	resp, err := r.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(ok), "=", 0)).
		Then(clientv3.OpPut(ok, r.id, clientv3.WithLease(r.lease))).Commit()
	if err != nil {
		return false, fmt.Errorf("etcdstore: take %s: %w", key, err)
	}
	if !resp.Succeeded {
		return false, nil
	}
	r.mu.Lock()
	if !r.alive() {
		r.mu.Unlock()
		return false, r.fenced(key)
	}
	r.owned[key] = resp.Header.Revision
	r.mu.Unlock()
	r.Takeovers.Add(1)
	r.log.Info("took the session", "session", key)
	if r.taken != nil {
		r.taken(key)
	}
	return true, nil
}

// TryTake takes the session if no live replica holds it and this
// replica runs its platform, without nudging anyone; it reports whether
// this replica holds it now.
func (r *Replica) TryTake(ctx context.Context, key string) (bool, error) {
	if r.Holds(key) {
		return true, nil
	}
	return r.take(ctx, key)
}

// Owner returns the id of the replica that holds the session, or "".
func (r *Replica) Owner(ctx context.Context, key string) (string, error) {
	resp, err := r.cli.Get(ctx, r.ownerKey(key))
	if err != nil || len(resp.Kvs) == 0 {
		return "", err
	}
	return string(resp.Kvs[0].Value), nil
}

// Forward hands an event for the session to whichever replica holds it:
// it goes at the end of the session's queue P fwd/K/, in the order the
// replicas received them, and the holder's watch picks it up.
func (r *Replica) Forward(ctx context.Context, key string, data []byte) error {
	for {
		resp, err := r.cli.Get(ctx, r.p+"fseq/"+esc(key))
		if err != nil {
			return fmt.Errorf("etcdstore: hand over an event of %s: %w", key, err)
		}
		seq := counterOf(r.p+"fseq/"+esc(key), resp)
		tr, err := r.cli.Txn(ctx).If(seq.unchanged()).Then(
			seq.take(1),
			clientv3.OpPut(r.p+"fwd/"+esc(key)+"/"+num(seq.last+1), string(data)),
		).Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: hand over an event of %s: %w", key, err)
		}
		if tr.Succeeded {
			return nil
		}
	}
}

// Handed is an event waiting in a session's queue: Key is its etcd key,
// for WithConsumed and Done.
type Handed struct {
	Key  string
	Data []byte
}

// Queued returns the session's handed-over events, oldest first.
func (r *Replica) Queued(ctx context.Context, key string) ([]Handed, error) {
	resp, err := r.cli.Get(ctx, r.p+"fwd/"+esc(key)+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("etcdstore: events handed to %s: %w", key, err)
	}
	out := make([]Handed, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = Handed{Key: string(kv.Key), Data: kv.Value}
	}
	return out, nil
}

// QueuedKeys lists the sessions with handed-over events.
func (r *Replica) QueuedKeys(ctx context.Context) ([]string, error) {
	var keys []string
	err := r.store.rangeAll(ctx, r.p+"fwd/", func(kv *mvccpb.KeyValue) error {
		if k := r.store.sessionOf("fwd", kv.Key); len(keys) == 0 || keys[len(keys)-1] != k {
			keys = append(keys, k)
		}
		return nil
	}, clientv3.WithKeysOnly())
	return keys, err
}

// Done removes a handed-over event that was handled without queueing a
// message (a command, a refusal), under the session's fence.
func (r *Replica) Done(ctx context.Context, key string, h Handed) error {
	return r.store.fencedTxn(ctx, key, clientv3.OpDelete(h.Key))
}

// RequestStop asks the session's holder to stop its running turn.
func (r *Replica) RequestStop(ctx context.Context, key, by string) error {
	_, err := r.cli.Put(ctx, r.p+"stop/"+esc(key), by)
	return err
}

// PendingStop returns the stop asked of the session's holder that is still
// waiting (its holder died before it saw it).
func (r *Replica) PendingStop(ctx context.Context, key string) (by string, ok bool, err error) {
	resp, err := r.cli.Get(ctx, r.p+"stop/"+esc(key))
	if err != nil || len(resp.Kvs) == 0 {
		return "", false, err
	}
	return string(resp.Kvs[0].Value), true, nil
}

// StopDone removes the session's stop request once it was acted on.
func (r *Replica) StopDone(ctx context.Context, key string) {
	r.cli.Delete(ctx, r.p+"stop/"+esc(key))
}

// Events are what a replica hears through its watches.
type Events struct {
	// Handed: events were handed to a session this replica holds.
	Handed func(key string)
	// Wake: another replica queued work for a session this one holds.
	Wake func(key string)
	// Stop: someone asked to stop the running turn of a session this
	// replica holds.
	Stop func(key, by string)
	// Orphaned: the session's owner key went away (its replica's lease
	// ended); the replica may take it if it has work.
	Orphaned func(key string)
	// Rescan: a watch was restarted and events may have been missed.
	Rescan func()
}

// Watch follows the owners, the handed-over events and the nudges until
// ctx ends, calling ev's functions (from its own goroutines, one per
// area, in order within each). The watches start from the cluster's
// revision as Watch returns: whatever a scan after Watch does not see,
// the watches do. A watch that breaks starts again after the last event
// it saw; one whose revision etcd compacted meanwhile starts from now and
// asks for a rescan (Events.Rescan), since it may have missed events.
func (r *Replica) Watch(ctx context.Context, ev Events) error {
	ctx, cancel := context.WithCancel(ctx)
	context.AfterFunc(r.ctx, cancel)
	from, err := r.revision(ctx)
	if err != nil {
		cancel()
		return fmt.Errorf("etcdstore: start the watches: %w", err)
	}
	areas := map[string]func(e *clientv3.Event, key string){
		"fwd": func(e *clientv3.Event, key string) {
			if e.Type == clientv3.EventTypePut && ev.Handed != nil && r.Holds(key) {
				ev.Handed(key)
			}
		},
		"wake": func(e *clientv3.Event, key string) {
			if e.Type == clientv3.EventTypePut && ev.Wake != nil && string(e.Kv.Value) != r.id && r.Holds(key) {
				ev.Wake(key)
			}
		},
		"stop": func(e *clientv3.Event, key string) {
			if e.Type == clientv3.EventTypePut && ev.Stop != nil && r.Holds(key) {
				ev.Stop(key, string(e.Kv.Value))
			}
		},
		"owners": func(e *clientv3.Event, key string) {
			if e.Type == clientv3.EventTypeDelete && ev.Orphaned != nil {
				ev.Orphaned(key)
			}
		},
	}
	for area, f := range areas {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.watch(ctx, area, from+1, f, ev.Rescan)
		}()
	}
	return nil
}

// revision returns the cluster's current revision.
func (r *Replica) revision(ctx context.Context) (int64, error) {
	resp, err := r.cli.Get(ctx, r.p+"meta/schema", clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// HeldKeys returns the keys of the sessions this replica holds.
func (r *Replica) HeldKeys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]string, 0, len(r.owned))
	for k := range r.owned {
		keys = append(keys, k)
	}
	return keys
}

// Follow calls f with each record written under P area/ (board, hist,
// rec, ...) for a session another replica holds, until ctx ends: the
// console of every replica shows threads run elsewhere live.
func (r *Replica) Follow(ctx context.Context, area string, f func(key string, value []byte)) {
	ctx, cancel := context.WithCancel(ctx)
	context.AfterFunc(r.ctx, cancel)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.watch(ctx, area, 0, func(e *clientv3.Event, key string) {
			if e.Type == clientv3.EventTypePut && !r.Holds(key) {
				f(key, e.Kv.Value)
			}
		}, nil)
	}()
}

// watch follows P area/ from revision from (0: from now), starting again
// after the last event it saw if the watch breaks, or from now with a
// rescan if etcd compacted that revision away.
func (r *Replica) watch(ctx context.Context, area string, from int64, f func(*clientv3.Event, string), rescan func()) {
	prefix := r.p + area + "/"
	for ctx.Err() == nil {
		opts := []clientv3.OpOption{clientv3.WithPrefix()}
		if from > 0 {
			opts = append(opts, clientv3.WithRev(from))
		}
		compacted := false
		for resp := range r.cli.Watch(clientv3.WithRequireLeader(ctx), prefix, opts...) {
			if resp.CompactRevision > 0 {
				compacted = true
			}
			if err := resp.Err(); err != nil {
				r.log.Warn("etcd watch broke; starting it again", "area", area, "err", err)
				break
			}
			for _, e := range resp.Events {
				f(e, r.store.sessionOf(area, e.Kv.Key))
				from = e.Kv.ModRevision + 1
			}
		}
		if ctx.Err() != nil {
			return
		}
		if compacted {
			from = 0
			if rescan != nil {
				go rescan() // after the new watch is asked for; a rescan sees what it missed
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// watchReplicas keeps the count of live replicas.
func (r *Replica) watchReplicas(ctx context.Context) {
	defer r.wg.Done()
	prefix := r.p + "replicas/"
	for ctx.Err() == nil {
		resp, err := r.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil {
			r.replicas.Store(resp.Count)
			wch := r.cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
			for w := range wch {
				if w.Err() != nil {
					break
				}
				for _, e := range w.Events {
					if e.Type == clientv3.EventTypePut && e.IsCreate() {
						r.replicas.Add(1)
					} else if e.Type == clientv3.EventTypeDelete {
						r.replicas.Add(-1)
					}
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// Say puts value at key in area for the other replicas to follow
// (Follow), on this replica's lease: what it says goes with it.
func (r *Replica) Say(ctx context.Context, area, key string, value []byte) error {
	if _, err := r.cli.Put(ctx, r.p+area+"/"+esc(key), string(value), clientv3.WithLease(r.lease)); err != nil {
		return fmt.Errorf("etcdstore: say %s/%s: %w", area, key, err)
	}
	return nil
}

// Said returns what the live replicas say in area (Say), by key.
func (r *Replica) Said(ctx context.Context, area string) (map[string][]byte, error) {
	resp, err := r.cli.Get(ctx, r.p+area+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: read %s: %w", area, err)
	}
	out := map[string][]byte{}
	for _, kv := range resp.Kvs {
		out[unesc(strings.TrimPrefix(string(kv.Key), r.p+area+"/"))] = kv.Value
	}
	return out, nil
}

// Close stops the watches and revokes the lease, so that the sessions
// this replica held are taken over at once rather than after the TTL.
// Only the first call does it; later ones return its error.
func (r *Replica) Close() error {
	r.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := r.cli.Revoke(ctx, r.lease)
		r.cancel()
		r.markLost(errors.New("the replica stopped"))
		r.wg.Wait()
		if err != nil {
			r.closeErr = fmt.Errorf("etcdstore: revoke the replica's lease: %w", err)
		}
	})
	return r.closeErr
}
