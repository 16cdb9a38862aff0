package nats

import "sync/atomic"

// Stats counts what a ListWatcher has asked of the server since it was
// made: the cost of starting a mirror, say, or of a restart (take the
// difference of two Stats). Each count only grows.
type Stats struct {
	// Lists counts the lists started: calls to List.
	Lists int64

	// ListKeys and ListBytes count the keys lists returned and the bytes
	// of those keys and their values, whether the values decode or not.
	ListKeys, ListBytes int64

	// Watches counts the watches started on the server.
	Watches int64

	// Expired counts the watches refused or ended because the bucket no
	// longer held a revision they had to deliver (see Watch): each costs
	// a Reflector a relist.
	Expired int64
}

// stats holds a ListWatcher's Stats as they grow. Each field is added to
// once per request or per list, never per key.
type stats struct {
	lists, listKeys, listBytes, watches, expired atomic.Int64
}

// Stats returns what lw has asked of the server so far. It is safe to call
// concurrently with anything else.
func (lw *ListWatcher[V]) Stats() Stats {
	s := &lw.stats
	return Stats{
		Lists:     s.lists.Load(),
		ListKeys:  s.listKeys.Load(),
		ListBytes: s.listBytes.Load(),
		Watches:   s.watches.Load(),
		Expired:   s.expired.Load(),
	}
}
