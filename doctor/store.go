package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/pinplan/pinplan/config"
	"github.com/pinplan/pinplan/etcdstore"
	"github.com/pinplan/pinplan/store"
)

// store checks the bbolt file, or etcd with PINPLAN_ETCD_ENDPOINTS.
func (d *doctor) store(ctx context.Context) {
	if len(d.cfg.EtcdEndpoints) > 0 {
		d.etcd(ctx)
		return
	}
	d.bolt()
}

// bolt opens the file read-only, so a running bot's lock is met as a
// lock, and nothing is created or changed.
func (d *doctor) bolt() {
	path := d.cfg.DB
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		d.r.add("store", "bbolt file", OK, "PINPLAN_DB", path+" does not exist yet: the first start creates it")
		return
	}
	db, err := store.Open(path, store.Options{ReadOnly: true, LockTimeout: time.Second})
	switch {
	case errors.Is(err, store.ErrLocked):
		d.r.add("store", "bbolt file", Warning, "PINPLAN_DB", path+" is locked by a running pinplan, so its contents were not checked (stop it to check them; `pinplan backup` works while it runs)")
	case err != nil:
		d.r.add("store", "bbolt file", Failed, "PINPLAN_DB", err.Error())
	default:
		db.Close()
		d.r.add("store", "bbolt file", OK, "PINPLAN_DB", path+" opens and is a pinplan database this version reads")
	}
}

// etcd reaches the cluster, reads its version and the prefix, and writes
// nothing: an empty prefix is claimed by the first start, not here.
func (d *doctor) etcd(ctx context.Context) {
	cfg := d.cfg
	endpoints := make([]string, len(cfg.EtcdEndpoints))
	for i, e := range cfg.EtcdEndpoints {
		endpoints[i] = config.RedactURL(e)
	}
	at := strings.Join(endpoints, ",")
	if d.bad["PINPLAN_ETCD_ENDPOINTS"] {
		d.r.add("store", "etcd", Skipped, "PINPLAN_ETCD_ENDPOINTS", "not asked: fix the endpoints first")
		return
	}
	cc := clientv3.Config{Endpoints: cfg.EtcdEndpoints, DialTimeout: d.opts.EtcdTimeout, Logger: zap.NewNop(),
		Username: cfg.EtcdUsername, Password: cfg.EtcdPassword.Reveal()}
	if cfg.EtcdCA != "" || cfg.EtcdCert != "" {
		tc, setting, err := etcdstore.ClientTLS(cfg.EtcdCA, cfg.EtcdCert, cfg.EtcdKey)
		if err != nil {
			d.r.add("store", "etcd", Failed, setting, err.Error())
			return
		}
		cc.TLS = tc
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		d.r.add("store", "etcd", Failed, "PINPLAN_ETCD_ENDPOINTS", fmt.Sprintf("etcd at %s: %v", at, err))
		return
	}
	defer cli.Close()
	gctx, cancel := context.WithTimeout(ctx, d.opts.EtcdTimeout)
	defer cancel()
	p := cfg.EtcdPrefix
	schema, err := cli.Get(gctx, p+"meta/schema")
	if err != nil {
		d.r.add("store", "etcd", Failed, "PINPLAN_ETCD_ENDPOINTS", fmt.Sprintf("etcd at %s does not answer within %s: %v", at, d.opts.EtcdTimeout, err))
		return
	}
	version := "its version unknown"
	for _, ep := range cli.Endpoints() {
		if st, err := cli.Status(gctx, ep); err == nil {
			version = "etcd " + st.Version
			if etcdstore.Before35(st.Version) {
				d.r.add("store", "etcd", Warning, "", fmt.Sprintf("reachable at %s, but %s is older than 3.5: it answers pinplan's calls, but only 3.5 and later are supported and tested", at, version))
				version = ""
			}
			break
		}
	}
	if version != "" {
		d.r.add("store", "etcd", OK, "PINPLAN_ETCD_ENDPOINTS", fmt.Sprintf("reachable at %s, %s", at, version))
	}
	d.prefix(gctx, cli, schema)
}

// prefix reads what the prefix holds, as etcdstore's claim would judge it.
func (d *doctor) prefix(ctx context.Context, cli *clientv3.Client, schema *clientv3.GetResponse) {
	p := d.cfg.EtcdPrefix
	const setting = "PINPLAN_ETCD_PREFIX"
	if len(schema.Kvs) == 0 {
		keys, err := cli.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly())
		switch {
		case err != nil:
			d.r.add("store", "etcd prefix", Failed, setting, fmt.Sprintf("%s could not be read: %v", p, err))
		case len(keys.Kvs) > 0:
			d.r.add("store", "etcd prefix", Failed, setting, fmt.Sprintf("%s holds keys that are not pinplan's (such as %s) and no %smeta/schema: give pinplan a prefix of its own", p, keys.Kvs[0].Key, p))
		default:
			d.r.add("store", "etcd prefix", OK, setting, p+" is empty: the first start claims it")
		}
		return
	}
	v, err := strconv.Atoi(string(schema.Kvs[0].Value))
	switch {
	case err != nil || v < 1:
		d.r.add("store", "etcd prefix", Failed, setting, fmt.Sprintf("%s holds a %smeta/schema that is not pinplan's: give pinplan a prefix of its own", p, p))
		return
	case v > etcdstore.SchemaVersion:
		d.r.add("store", "etcd prefix", Failed, setting, fmt.Sprintf("%s has schema %d, newer than this pinplan's %d: run the newer version", p, v, etcdstore.SchemaVersion))
		return
	}
	marks, err := cli.Get(ctx, p+"meta/migrating")
	if err == nil && len(marks.Kvs) > 0 {
		d.r.add("store", "etcd prefix", Failed, setting, fmt.Sprintf("%s holds an unfinished `pinplan migrate -to etcd` copy (begun %s): run it again before serving", p, marks.Kvs[0].Value))
		return
	}
	d.r.add("store", "etcd prefix", OK, setting, fmt.Sprintf("%s is pinplan's (schema %d)", p, v))
}
