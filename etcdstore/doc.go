// Package etcdstore is the store on an etcd cluster (DESIGN §14).
package etcdstore
