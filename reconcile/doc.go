// Package reconcile runs a controller's reconcile loop: informers feed a
// workqueue with the keys of the objects that changed, and workers call
// Reconcile for each key, one worker per key at a time.
//
// The queue ranks each key by where its change came from (see
// mirror.Origin and the workqueue package's priorities): a change just
// made is reconciled ahead of the keys of an initial list, a relist or a
// resync queued before it, and aging bounds how long those wait. A key
// whose Reconcile fails is retried after its own backoff, until it
// succeeds or, with Options.MaxRetries, until the loop gives up on it; one
// whose error wraps ErrTerminal (see Terminal) is reported and dropped; a
// panic counts as an error, its stack reported once per key; a Result can
// ask for the key again after a delay.
//
//	loop := reconcile.New(reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
//		obj, ok := inf.GetByKey(key)
//		... // make the world match obj, or clean up after it if !ok
//		return reconcile.Result{}, nil
//	}), reconcile.Options{Name: "services", Workers: 4})
//	if _, err := reconcile.Watch(loop, inf, mirror.HandlerOptions{}); err != nil {
//		return err
//	}
//	go inf.Run(ctx)
//	return loop.Run(ctx) // waits for inf's first list, then reconciles until ctx ends
package reconcile
