// Package bench runs the same workloads through mirror and through
// Kubernetes client-go's tools/cache, side by side, so that benchstat can
// compare them: each benchmark has one sub-benchmark per implementation,
// named impl=mirror, impl=clientgo and, where client-go has a second queue
// worth measuring, impl=clientgo-realfifo.
//
// Both sides handle the very same objects: *Obj, a small struct that
// implements client-go's metav1.Object and runtime.Object, so that
// client-go's standard key function, reflector and informer accept it
// unchanged. mirror keys it by a {Namespace, Name} struct (Key), client-go
// by its "namespace/name" string, as each library is meant to be used.
//
// The sources are source.ListWatcher implementations (memsource, or a
// generator for the memory benchmark); ListerWatcher adapts one to
// client-go's cache.ListerWatcher, so that both informers read the same
// source.
//
// The Workqueue benchmarks compare mirror's workqueue package with
// client-go's util/workqueue and controller-runtime's priority queue
// (impl=mirror, impl=client-go, impl=controller-runtime); WORKQUEUE.md
// reports them.
//
// BenchmarkK8sStartup (with -k8s.pods) starts informers of every Pod of
// a real kube-apiserver, run in a child process with its etcd
// (test/k8s/cmd/benchapiserver): mirror's, client-go's typed informer over
// JSON and over protobuf, and controller-runtime's cache; K8S.md reports
// it.
//
// run.sh runs every pair, summarises them with benchstat and writes
// RESULTS.md and ratios.svg (see cmd/chart).
package bench
