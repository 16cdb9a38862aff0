// Package metricscompat checks that the mirrorprom module's metrics can
// share a Prometheus registry with client-go's: a Kubernetes program
// exposes client-go's informer and workqueue metrics (registered by
// k8s.io/component-base) and mirror's from one registry.
//
// It is a package of its own, apart from the tests against a real
// kube-apiserver, so that its test binary links no apiserver and builds in
// seconds; its informers list and watch a fake clientset, and its
// workqueues are fed by the test.
package metricscompat
