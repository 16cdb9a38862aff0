// Package etcd holds the tests of the etcd adapter, and of the mirror fed by
// it, against real etcd servers started in-process on loopback.
package etcd
