package etcd

import (
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Stats counts what a ListWatcher has asked of etcd since it was made:
// the cost to etcd of starting a mirror, say, or of a restart (take the
// difference of two Stats). Each count only grows.
type Stats struct {
	// Lists counts the lists started: calls to List without a continue
	// token, and calls to ListChunks. A Reflector makes one per list of
	// the prefix, however many pages or chunks it takes.
	Lists int64

	// ListRequests counts the read requests lists sent to etcd: a Range
	// for each page List reads, and for the revision ListChunks reads
	// first (counting keys, not fetching them), and a RangeStream for the
	// rest of ListChunks. A read tried again elsewhere (see List and
	// ListChunks on a member behind the list's revision) counts twice.
	ListRequests int64

	// ListKeys and ListBytes count the keys lists read and the bytes of
	// those keys and their values, whether the values decode or not.
	ListKeys, ListBytes int64

	// Watches counts the watches opened on etcd: one for each Watch, and
	// one for each time a watch starts again on its own (see
	// Options.ProgressInterval).
	Watches int64
}

// stats holds a ListWatcher's Stats as they grow. Each field is added to
// once per request or per response, never per key.
type stats struct {
	lists, listRequests, listKeys, listBytes, watches atomic.Int64
}

// Stats returns what lw has asked of etcd so far. It is safe to call
// concurrently with anything else.
func (lw *ListWatcher[V]) Stats() Stats {
	s := &lw.stats
	return Stats{
		Lists:        s.lists.Load(),
		ListRequests: s.listRequests.Load(),
		ListKeys:     s.listKeys.Load(),
		ListBytes:    s.listBytes.Load(),
		Watches:      s.watches.Load(),
	}
}

// listed counts the keys of one list response.
func (s *stats) listed(kvs []*mvccpb.KeyValue) {
	n := 0
	for _, kv := range kvs {
		n += len(kv.Key) + len(kv.Value)
	}
	s.listKeys.Add(int64(len(kvs)))
	s.listBytes.Add(int64(n))
}
