package bench

import (
	"context"
	"errors"
	"time"

	"github.com/listwatch/mirror/source"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ListerWatcher adapts a source.ListWatcher of Objs to client-go's
// cache.ListerWatcher, so that a client-go informer reads the same source,
// and gets the same objects, as a mirror informer.
//
// client-go's reflector reads an event's version from its object, so the
// objects a benchmark puts into the source must carry the version the
// source gives them (the benchmarks know it in advance: a new
// memsource.Source is at revision 1 and numbers its changes 2, 3, 4...).
// Deleted objects carry their last
// version, and bookmarks get a fresh Obj with the bookmark's version.
type ListerWatcher struct {
	Source source.ListWatcher[*Obj]
}

var (
	_ cache.ListerWatcher            = ListerWatcher{}
	_ cache.ListerWatcherWithContext = ListerWatcher{}
)

// IsWatchListSemanticsUnSupported tells client-go's reflector to list and
// then watch, as the mirror informers in these benchmarks do, rather than
// ask for a streaming list.
func (ListerWatcher) IsWatchListSemanticsUnSupported() bool { return true }

// List implements cache.Lister.
func (a ListerWatcher) List(opts metav1.ListOptions) (runtime.Object, error) {
	return a.ListWithContext(context.Background(), opts)
}

// ListWithContext implements cache.ListerWithContext: one page, as
// *ObjList.
func (a ListerWatcher) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	res, err := a.Source.List(ctx, source.ListOptions{
		ResourceVersion: opts.ResourceVersion,
		Limit:           opts.Limit,
		Continue:        opts.Continue,
	})
	if err != nil {
		return nil, statusError(err)
	}
	return &ObjList{
		ListMeta: metav1.ListMeta{ResourceVersion: res.ResourceVersion, Continue: res.Continue},
		Items:    res.Items,
	}, nil
}

// Watch implements cache.Watcher.
func (a ListerWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return a.WatchWithContext(context.Background(), opts)
}

// WatchWithContext implements cache.WatcherWithContext. A goroutine moves
// the source's events to the result channel, which holds up to
// watch.DefaultChanSize events, as client-go's own watchers do.
func (a ListerWatcher) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	wopts := source.WatchOptions{
		ResourceVersion: opts.ResourceVersion,
		AllowBookmarks:  opts.AllowWatchBookmarks,
	}
	if opts.TimeoutSeconds != nil {
		wopts.Timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	w, err := a.Source.Watch(ctx, wopts)
	if err != nil {
		cancel()
		return nil, statusError(err)
	}
	cw := &clientWatch{ch: make(chan watch.Event, watch.DefaultChanSize), cancel: cancel, w: w}
	go cw.run(ctx)
	return cw, nil
}

// clientWatch is a watch.Interface fed by a source.Watcher.
type clientWatch struct {
	ch     chan watch.Event
	cancel context.CancelFunc
	w      source.Watcher[*Obj]
}

// Stop implements watch.Interface.
func (cw *clientWatch) Stop() {
	cw.cancel()
	cw.w.Stop()
}

// ResultChan implements watch.Interface.
func (cw *clientWatch) ResultChan() <-chan watch.Event { return cw.ch }

func (cw *clientWatch) run(ctx context.Context) {
	defer close(cw.ch)
	for {
		ev, err := cw.w.Next(ctx)
		var out watch.Event
		switch {
		case err != nil:
			if ctx.Err() != nil || !errors.Is(err, source.ErrExpired) {
				return // an ordinary end: the reflector watches again
			}
			status := statusError(err).(*apierrors.StatusError).ErrStatus
			out = watch.Event{Type: watch.Error, Object: &status}
		case ev.Type == source.Added:
			out = watch.Event{Type: watch.Added, Object: ev.Object}
		case ev.Type == source.Updated:
			out = watch.Event{Type: watch.Modified, Object: ev.Object}
		case ev.Type == source.Deleted:
			out = watch.Event{Type: watch.Deleted, Object: ev.Object}
		case ev.Type == source.Bookmark:
			out = watch.Event{Type: watch.Bookmark, Object: &Obj{ResourceVersion: ev.ResourceVersion}}
		default:
			continue // an object the source could not produce
		}
		select {
		case cw.ch <- out:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// statusError turns an expired version into client-go's 410 Gone, which
// makes its reflector relist; other errors pass unchanged.
func statusError(err error) error {
	if errors.Is(err, source.ErrExpired) {
		return apierrors.NewResourceExpired(err.Error())
	}
	return err
}
