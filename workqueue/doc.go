// Package workqueue is a queue of keys for controller workers: keys to
// reconcile go in, workers take them out one at a time, and a key is
// processed by at most one worker at a time.
//
// It does what client-go's util/workqueue does (deduplication, a key added
// while in process is processed again after Done, delays, per-key
// exponential backoff, shutdown with drain) and differs where that queue's
// users get hurt:
//
//   - Priorities. A key carries a Priority; higher priorities are served
//     first, and keys of one priority in the order they came. Live changes
//     (PriorityLive) go ahead of the keys of an initial list or a relist
//     (PriorityBackground) and of a periodic resync (PriorityResync), so a
//     resync of a large cache does not bury the change that just happened.
//   - Aging. A key that has waited Options.MaxWait is aged, and aged keys
//     below the highest priority queued get one key handed out in four,
//     the oldest first, however many keys of higher priority keep coming.
//     A share, not precedence: however large and old the backlog of an
//     initial list, a live key waits for at most one aged key.
//   - One entry per key across the ready and the delayed keys: a key added
//     with and without a delay is processed once.
//   - Bounded memory. A key's retry count lives while the queue holds the
//     key (queued, waiting out a delay, or in process) and for a while
//     after Done (at least a second), so AddRateLimited backs off whether
//     it is called before Done or after it; then it is forgotten. The
//     queue's tables shrink when a burst has passed.
//   - ShutDownWithDrain waits for the queued keys as well as those in
//     process, and ShutDown may be called any number of times.
//
// The worker loop:
//
//	for {
//		key, err := q.Get(ctx)
//		if err != nil {
//			return // ErrShutdown, or ctx ended
//		}
//		if err := reconcile(ctx, key); err != nil {
//			q.AddRateLimited(key) // retry after a per-key backoff
//		} else {
//			q.Forget(key)
//		}
//		q.Done(key)
//	}
package workqueue
