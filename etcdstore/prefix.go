package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrForeign means the prefix holds keys that are not pinplan's: another
// application's data, which pinplan must neither read nor write into.
var ErrForeign = errors.New("the etcd prefix holds data that is not pinplan's")

// ErrMigrating means a `bot migrate` into the prefix began and did not
// finish: the prefix holds part of a copy, which no replica may serve.
var ErrMigrating = errors.New("the etcd prefix holds an unfinished `bot migrate` copy")

// A prefix is pinplan's when it is empty or holds its schema key P
// meta/schema (DESIGN §14). Migrate marks the prefix with P
// meta/migrating first and removes the mark last.
func schemaKey(p string) string    { return p + "meta/schema" }
func migratingKey(p string) string { return p + "meta/migrating" }

// claim makes sure the prefix is pinplan's before anything is written
// into it: an empty prefix gets the schema key, a prefix holding keys but
// no schema key is ErrForeign, one with a newer schema is refused, and
// one an interrupted migrate marked is ErrMigrating unless migrating
// (migrate itself, which starts over on it). It reads and writes only
// the schema and marker keys and at most one other key, however large
// the prefix.
func claim(ctx context.Context, cli *clientv3.Client, p string, migrating bool) error {
	schema := schemaKey(p)
	for range 5 {
		resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(schema), "=", 0)).
			Then(clientv3.OpGet(p, clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly())).
			Else(clientv3.OpGet(schema), clientv3.OpGet(migratingKey(p))).Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: open %s: %w", p, err)
		}
		if resp.Succeeded { // no schema key
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
				return fmt.Errorf("etcdstore: %s: %w (it holds %s and no %s); set PINPLAN_ETCD_PREFIX to a prefix of pinplan's own",
					p, ErrForeign, kvs[0].Key, schema)
			}
			// Empty: write the schema, unless something was written since.
			put, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(p).WithPrefix(), "=", 0)).
				Then(clientv3.OpPut(schema, strconv.Itoa(SchemaVersion))).Commit()
			if err != nil {
				return fmt.Errorf("etcdstore: open %s: %w", p, err)
			}
			if put.Succeeded {
				return nil
			}
			continue
		}
		kv := resp.Responses[0].GetResponseRange().Kvs[0]
		v, err := strconv.Atoi(string(kv.Value))
		switch {
		case err != nil || v < 1:
			return fmt.Errorf("etcdstore: %s: %w (its %s is %.40q, not a pinplan schema version); set PINPLAN_ETCD_PREFIX to a prefix of pinplan's own",
				p, ErrForeign, schema, kv.Value)
		case v > SchemaVersion:
			return fmt.Errorf("etcdstore: %s has schema %d, newer than this pinplan's %d; run the newer version", p, v, SchemaVersion)
		}
		if marks := resp.Responses[1].GetResponseRange().Kvs; len(marks) > 0 && !migrating {
			return migratingError(p, marks[0].Value)
		}
		return nil
	}
	return fmt.Errorf("etcdstore: open %s: keys keep appearing in it while it is opened", p)
}

func migratingError(p string, began []byte) error {
	return fmt.Errorf("etcdstore: %s: %w (begun %s): run `bot migrate -to etcd` again, which starts the copy over, before a replica serves it",
		p, ErrMigrating, began)
}

// BeginMigrate marks the prefix as being copied into, for migrate: a
// replica refuses a marked prefix until EndMigrate removes the mark. An
// empty prefix (nothing but its meta keys) is marked; a prefix marked by
// an interrupted migrate is cleared of everything under it and marked
// again, and restarted says so; a prefix holding data without the mark is
// ErrNotEmpty. The store must have been opened with Options.Migrate.
func (s *Store) BeginMigrate(ctx context.Context) (restarted bool, err error) {
	marker, now := migratingKey(s.p), s.now().UTC().Format(time.RFC3339)
	meta, end := s.p+"meta/", clientv3.GetPrefixRangeEnd(s.p)
	for range 5 {
		resp, err := s.get(ctx, marker)
		if err != nil {
			return false, fmt.Errorf("etcdstore: mark %s for migrate: %w", s.p, err)
		}
		if len(resp.Kvs) == 1 {
			// Start over: everything under the prefix but its meta keys is
			// what the last migrate copied (replicas refused it meanwhile).
			tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(marker), "=", resp.Kvs[0].ModRevision)).Then(
				clientv3.OpDelete(s.p, clientv3.WithRange(meta)),
				clientv3.OpDelete(clientv3.GetPrefixRangeEnd(meta), clientv3.WithRange(end)),
				clientv3.OpPut(marker, now),
			).Commit()
			if err != nil {
				return false, fmt.Errorf("etcdstore: clear %s of the interrupted copy: %w", s.p, err)
			}
			if tr.Succeeded {
				return true, nil
			}
			continue
		}
		empty, err := s.Empty(ctx)
		if err != nil {
			return false, fmt.Errorf("etcdstore: mark %s for migrate: %w", s.p, err)
		}
		if !empty {
			return false, ErrNotEmpty
		}
		// Marked only if still empty: a replica that registered since
		// keeps the prefix.
		tr, err := s.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(marker), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(s.p), "=", 0).WithRange(meta),
			clientv3.Compare(clientv3.CreateRevision(clientv3.GetPrefixRangeEnd(meta)), "=", 0).WithRange(end),
		).Then(clientv3.OpPut(marker, now)).Commit()
		if err != nil {
			return false, fmt.Errorf("etcdstore: mark %s for migrate: %w", s.p, err)
		}
		if tr.Succeeded {
			return false, nil
		}
	}
	return false, fmt.Errorf("etcdstore: mark %s for migrate: it keeps changing; is a replica or another migrate using it?", s.p)
}

// EndMigrate removes the mark BeginMigrate wrote, once the copy is
// complete and checked: replicas may serve the prefix from then on.
func (s *Store) EndMigrate(ctx context.Context) error {
	if _, err := s.cli.Delete(ctx, migratingKey(s.p)); err != nil {
		return fmt.Errorf("etcdstore: unmark %s after migrate: %w", s.p, err)
	}
	return nil
}
