package etcdstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// DialOptions are the settings Dial connects with: the
// PINPLAN_ETCD_* ones.
type DialOptions struct {
	Endpoints          []string
	Username, Password string
	CA, Cert, Key      string // files; "" for none
	Prefix             string // read once, to check the cluster answers
}

// Dial connects to the cluster with the TLS and auth of o, and checks
// that it answers. An error names the settings to look at.
func Dial(ctx context.Context, o DialOptions) (*clientv3.Client, error) {
	cc := clientv3.Config{Endpoints: o.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		Username: o.Username, Password: o.Password, DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 3 * time.Second}
	if o.CA != "" || o.Cert != "" {
		tc, setting, err := ClientTLS(o.CA, o.Cert, o.Key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", setting, err)
		}
		cc.TLS = tc
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("etcd at %v: %w", o.Endpoints, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Get(pctx, o.Prefix+"meta/schema"); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd at %v does not answer: %w", o.Endpoints, err)
	}
	return cli, nil
}

// WarnOld warns when the cluster runs etcd older than 3.5: Debian 12
// ships 3.4, which answers every call pinplan makes, but the tests run
// the etcd of go.mod (3.7), and 3.4 is out of support. The first member
// that answers speaks for the cluster.
func WarnOld(ctx context.Context, cli *clientv3.Client, log *slog.Logger) {
	for _, ep := range cli.Endpoints() {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, ep)
		cancel()
		if err != nil {
			continue
		}
		if Before35(st.Version) {
			log.Warn("etcd is older than 3.5: it answers pinplan's calls, but only 3.5 and later are supported and tested; upgrade when you can", "etcd_version", st.Version, "endpoint", redact(ep))
		} else {
			log.Debug("etcd version", "etcd_version", st.Version)
		}
		return
	}
}

// redact drops a URL's user info, for a log line.
func redact(ep string) string {
	u, err := url.Parse(ep)
	if err != nil || u.User == nil {
		return ep
	}
	u.User = nil
	return u.String()
}

// ClientTLS is an etcd client's TLS from the files of PINPLAN_ETCD_CA
// (the cluster's CA, PEM) and PINPLAN_ETCD_CERT and _KEY (the client's
// certificate and key, PEM); either may be "". When one cannot be read,
// setting names the settings to change.
func ClientTLS(ca, cert, key string) (tc *tls.Config, setting string, err error) {
	tc = &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, "PINPLAN_ETCD_CA", err
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, "PINPLAN_ETCD_CA", fmt.Errorf("%s holds no PEM certificate", ca)
		}
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, "PINPLAN_ETCD_CERT, PINPLAN_ETCD_KEY", err
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, "", nil
}

// Before35 reports whether an etcd version ("3.4.23") is before 3.5: it
// answers every call pinplan makes, but only 3.5 and later are supported
// and tested. A version it cannot read is not.
func Before35(v string) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return err1 == nil && err2 == nil && (major < 3 || major == 3 && minor < 5)
}
