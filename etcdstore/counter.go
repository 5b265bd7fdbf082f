package etcdstore

import (
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// counter is a sequence key (iseq, oseq, fseq) as read: the ids after
// last are free, and a Txn that compares unchanged takes them only if no
// one advanced the key meanwhile. The callers loop: read, try, read again
// when the compare failed.
type counter struct {
	key  string
	last uint64
	mod  int64 // 0: the key does not exist yet
}

// counterOf reads the counter at key from a Get of it.
func counterOf(key string, resp *clientv3.GetResponse) counter {
	c := counter{key: key}
	if len(resp.Kvs) == 1 {
		c.last, _ = strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64)
		c.mod = resp.Kvs[0].ModRevision
	}
	return c
}

// unchanged compares the key with the revision it was read at.
func (c counter) unchanged() clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(c.key), "=", c.mod)
}

// take advances the key past n more ids.
func (c counter) take(n int) clientv3.Op {
	return clientv3.OpPut(c.key, strconv.FormatUint(c.last+uint64(n), 10))
}
