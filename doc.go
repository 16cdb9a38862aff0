// Package mirror keeps a local, indexed copy of a versioned source and
// tells your code what changed, through outages, compactions and
// restarts: the list-watch machinery of Kubernetes client-go's
// tools/cache, rebuilt with type parameters and free of Kubernetes.
//
// # Start here
//
// An [Informer] lists a source, watches it from the list's version, keeps
// an indexed cache of its objects and calls your handlers on every
// change. Make one with the NewInformer of an adapter, each a module of
// its own, or with [NewInformer] over a source of your own (package
// github.com/listwatch/mirror/source says what a source implements):
//
//   - github.com/listwatch/mirror/adapters/etcd: an etcd v3 key prefix;
//   - github.com/listwatch/mirror/adapters/k8s: Kubernetes objects, from
//     typed, dynamic or metadata clients, and a Factory that shares
//     informers between controllers;
//   - github.com/listwatch/mirror/adapters/nats: a NATS JetStream
//     key-value bucket;
//   - github.com/listwatch/mirror/adapters/mirrorprom: Prometheus metrics
//     for informers and workqueues.
//
// Package memsource is an in-memory source, for tests. An informer over
// one:
//
//	inf := mirror.NewInformer(src, mirror.InformerOptions[string, Service]{
//		KeyFunc: func(s Service) (string, error) { return s.Name, nil },
//	})
//	if _, err := inf.AddEventHandler(mirror.HandlerFuncs[Service]{
//		AddFunc:    func(s Service, initial bool) { ... },
//		UpdateFunc: func(old, s Service) { ... },
//		DeleteFunc: func(s Service, finalStateUnknown bool) { ... },
//	}, mirror.HandlerOptions{}); err != nil {
//		return err
//	}
//	go inf.Run(ctx) // returns when ctx ends
//	if err := mirror.WaitForCacheSync(ctx, inf); err != nil {
//		return err
//	}
//	s, ok := inf.GetByKey("api")
//
// Reads come from the cache ([Informer.GetByKey], [Informer.List],
// [Informer.ByIndex]); [Informer.Consistent] and [Informer.GetAfterWrite]
// wait until the cache holds the source's current state or your own
// write; [Informer.Freshness] says how current the cache is, for a health
// check. [InformerOptions.Checkpoint] makes a restart resume from a file
// instead of listing again.
//
// # Controllers
//
// Package reconcile runs a controller's reconcile loop: reconcile.Watch
// feeds an informer's changes, as keys, into a workqueue, and workers call
// Reconcile(ctx, key) for each, one worker per key at a time, retrying
// failures with backoff. Package workqueue is that queue of keys on its
// own: live changes are served ahead of the keys of an initial list, a
// relist or a resync, and none waits forever. To feed a queue of your
// own, [Informer.AddChangeHandler] hands each change with its key and its
// [Origin].
//
// # Building blocks
//
// The parts of the informer are exported for those who assemble a
// pipeline of their own, with client-go's contract: [Reflector] lists and
// watches a ListWatcher into a store; [FIFO] queues the latest value per
// key and [DeltaFIFO] every change per key; [Indexer] is a thread-safe
// cache with secondary indexes. Most programs need none of them.
package mirror
