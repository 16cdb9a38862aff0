package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/listwatch/mirror/source"
)

// CompareVersions orders two resource versions of the ListWatcher, etcd
// revisions in decimal; it implements source.VersionComparer, so that an
// informer of etcd keys can wait for a revision and serve consistent reads
// (mirror.Informer.WaitForVersion, Consistent). A string that is not a
// revision gets an error wrapping source.ErrInvalidVersion.
func (lw *ListWatcher[V]) CompareVersions(a, b string) (int, error) {
	return source.CompareDecimalVersions(a, b)
}

// CurrentVersion returns the cluster's current revision, read
// linearizably: no older than any write that completed before the call,
// under any prefix. It implements source.CurrentVersioner. It costs one
// count-only read of a single key, whatever the prefix's size. Errors are
// classified as List's are.
func (lw *ListWatcher[V]) CurrentVersion(ctx context.Context) (string, error) {
	rctx, done := lw.requestContext(ctx)
	resp, err := lw.client.Get(rctx, lw.start, clientv3.WithCountOnly())
	if err = done(err); err != nil {
		return "", lw.wrapError(ctx, err, "etcd: current revision of %q", lw.prefix)
	}
	return formatRev(resp.Header.Revision), nil
}

// RequestProgress asks etcd to send every open watch of the ListWatcher a
// progress notification, a bookmark at the revision the cluster has
// reached, and returns without waiting for it; it implements
// source.ProgressRequester. The requests go out on the watches' own
// progress goroutines, one pending at a time per watch, so that a burst
// of consistent reads costs etcd at most one request per watch in flight.
// etcd answers once the watch has caught up; one that comes while it is
// catching up is dropped, and a consistent read asks again after its
// interval. Watches opened with Options.ProgressInterval negative have no
// such goroutine and are not asked.
func (lw *ListWatcher[V]) RequestProgress(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	lw.watchMu.Lock()
	defer lw.watchMu.Unlock()
	for w := range lw.watching {
		w.ask()
	}
	return nil
}

// track records w as open, for RequestProgress, if it has a prober.
func (lw *ListWatcher[V]) track(w *watcher[V]) {
	if w.asks == nil {
		return
	}
	lw.watchMu.Lock()
	defer lw.watchMu.Unlock()
	if w.untracked {
		return // torn down already
	}
	if lw.watching == nil {
		lw.watching = make(map[*watcher[V]]struct{})
	}
	lw.watching[w] = struct{}{}
}

// untrack forgets w; it runs before w's prober stops.
func (lw *ListWatcher[V]) untrack(w *watcher[V]) {
	lw.watchMu.Lock()
	defer lw.watchMu.Unlock()
	delete(lw.watching, w)
	w.untracked = true
}

var (
	_ source.VersionComparer   = (*ListWatcher[[]byte])(nil)
	_ source.CurrentVersioner  = (*ListWatcher[[]byte])(nil)
	_ source.ProgressRequester = (*ListWatcher[[]byte])(nil)
)
