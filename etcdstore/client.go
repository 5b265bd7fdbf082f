package etcdstore

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strconv"
	"strings"
)

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
