// Package k8s holds the tests of the Kubernetes adapter, and of the mirror
// fed by it, against a real kube-apiserver started in-process on loopback
// over an embedded etcd.
//
// All of them live in this one package because linking a test binary that
// holds a kube-apiserver costs about 16 seconds and 2.6 GB. Most tests share
// one server (sharedCluster), each in namespaces of its own; those that
// compact etcd, restart the server or flip its feature gates run one at a
// time, before the parallel ones start.
package k8s
