// Package mirror keeps a local, indexed, event-driven mirror of a versioned
// source: the list-watch-resync machinery of Kubernetes client-go's
// tools/cache, rebuilt with type parameters and free of Kubernetes.
//
// Data flows one way:
//
//	ListWatcher ──List/Watch──▶ Reflector ──▶ queue (DeltaFIFO, FIFO, in-order)
//	queue ──Pop──▶ Informer ──▶ Indexer (the cache) and ──▶ one goroutine per handler
//
// A ListWatcher is any versioned source: package memsource has an in-memory
// one, and the adapters/etcd and adapters/k8s modules adapt etcd v3 and
// Kubernetes.
package mirror
