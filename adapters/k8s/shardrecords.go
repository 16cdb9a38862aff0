package k8s

import (
	"context"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/shard"
	"github.com/listwatch/mirror/source"
	coordinationv1 "k8s.io/api/coordination/v1"
)

// leaseRecords is the source of a ShardBackend's records: its group's
// Leases, through a ListWatcher of this package, each read as a
// shard.Record.
type leaseRecords struct {
	lw *ListWatcher[*coordinationv1.Lease]
}

var (
	_ source.ListWatcher[shard.Record] = (*leaseRecords)(nil)
	_ source.StreamingListPreferrer    = (*leaseRecords)(nil)
)

// PrefersStreamingList passes the question on to the Leases' ListWatcher.
func (r *leaseRecords) PrefersStreamingList() bool { return r.lw.PrefersStreamingList() }

// List lists the group's Leases as records.
func (r *leaseRecords) List(ctx context.Context, opts source.ListOptions) (source.ListResult[shard.Record], error) {
	res, err := r.lw.List(ctx, opts)
	out := source.ListResult[shard.Record]{ResourceVersion: res.ResourceVersion, Continue: res.Continue, Skipped: res.Skipped}
	if err != nil {
		return out, err
	}
	out.Items = make([]shard.Record, 0, len(res.Items))
	for _, lease := range res.Items {
		rec, err := recordOf(lease)
		if err != nil {
			out.Skipped = append(out.Skipped, leaseError(lease, err))
			continue
		}
		out.Items = append(out.Items, rec)
	}
	return out, nil
}

// Watch watches the group's Leases as records.
func (r *leaseRecords) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[shard.Record], error) {
	w, err := r.lw.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return recordWatcher{w}, nil
}

// leaseError reports a Lease of the group that is not a valid record,
// naming it and not its contents.
func leaseError(lease *coordinationv1.Lease, err error) error {
	return &mirror.ObjectError{Key: Key{Namespace: lease.Namespace, Name: lease.Name}.String(), ResourceVersion: lease.ResourceVersion, Err: err}
}

// recordWatcher reads a watch of Leases as a watch of records.
type recordWatcher struct {
	w source.Watcher[*coordinationv1.Lease]
}

func (w recordWatcher) Next(ctx context.Context) (source.Event[shard.Record], error) {
	ev, err := w.w.Next(ctx)
	out := source.Event[shard.Record]{Type: ev.Type, ResourceVersion: ev.ResourceVersion, More: ev.More, InitialEventsEnd: ev.InitialEventsEnd, Err: ev.Err}
	if err != nil {
		return out, err
	}
	switch ev.Type {
	case source.Added, source.Updated, source.Deleted:
		rec, err := recordOf(ev.Object)
		switch {
		case err == nil:
			out.Object = rec
		case ev.Type == source.Deleted:
			// Gone either way: the name is enough to delete it.
			out.Object, out.KeyOnly = shard.Record{Name: ev.Object.Name, Shard: -1}, true
		default:
			// A record that changed into something unreadable is
			// evicted, not left as it was.
			return source.Event[shard.Record]{Type: source.Error, Object: shard.Record{Name: ev.Object.Name, Shard: -1}, KeyOnly: true,
				ResourceVersion: ev.ResourceVersion, Err: leaseError(ev.Object, err)}, nil
		}
	}
	return out, nil
}

func (w recordWatcher) Stop() { w.w.Stop() }
