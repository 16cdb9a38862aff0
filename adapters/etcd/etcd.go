// Package etcd adapts an etcd v3 key prefix to source.ListWatcher, so that a
// mirror.Reflector or mirror.Informer can keep a local copy of the keys under
// the prefix.
//
// The adapter reads through the caller's *clientv3.Client, so endpoints, TLS,
// authentication and namespacing stay the caller's. It lists at one
// revision, through etcd's RangeStream where the server offers it (see
// ListChunks) and in pages otherwise, watches from the revision after the
// list, maps compaction to source.ErrExpired (the Reflector then relists,
// and the queue turns the keys deleted meanwhile into tombstones), ends a
// watch whose member has gone quiet within a bound set by
// Options.ProgressInterval, and maps a refused read (permission denied,
// missing or wrong credentials) to mirror.ErrPermanent. A value that fails
// to decode is reported with its key and kept out of the mirror, as if the
// key had left it without its final state being known; the rest of the
// prefix is mirrored.
//
// NewTyped (or New, for raw values) makes the ListWatcher; NewInformer
// makes an informer of it, keyed by etcd key, that reports a relisted key
// only if its ModRevision changed, and a key deleted and created again
// unseen as a deletion then an addition, and that keeps its checkpoints
// (see mirror.CheckpointOptions) with Codec. ListWatcher.Stats counts the
// lists and watches it asked etcd for: a mirror resumed from a checkpoint
// makes no list while etcd still has the checkpoint's revision.
//
// NewShardBackend keeps a shard group (see package shard: leader election
// and shards of work among a controller's replicas) under a prefix, each
// member an etcd lease; FencedPut, FencedTxn and Fence make a write
// conditional on the shard claim that granted the work, so that etcd
// refuses it once the shard has moved on.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Object is one etcd key as the mirror holds it: the key, its value
// decoded into a V, and etcd's metadata for it. In a deletion that carries
// the key alone (source.Event.KeyOnly; see Options.PrevValues), every
// field but Key is zero.
type Object[V any] struct {
	// Key is the full etcd key, prefix included.
	Key string
	// Value is the decoded value.
	Value V
	// CreateRevision is the revision at which the key was last created.
	CreateRevision int64
	// ModRevision is the revision at which the key was last changed.
	ModRevision int64
	// Version counts the changes since the key was last created, from 1.
	Version int64
	// Lease is the ID of the lease attached to the key, or 0.
	Lease int64
}

// KV is a key with its raw value, as New produces it.
type KV = Object[[]byte]

// KeyOf returns o.Key. It never fails; its signature lets it serve as a
// mirror.KeyFunc[string, Object[V]].
func KeyOf[V any](o Object[V]) (string, error) { return o.Key, nil }

// DecodeFunc turns the value stored under key into a V. An error is
// reported, and the key is left out of the mirror (a list skips it, a watch
// evicts it; see ListWatcher.Watch); the rest of the prefix is mirrored. A
// panic is recovered and is that key's error (a *mirror.ObjectError whose
// Err wraps a *mirror.PanicError).
type DecodeFunc[V any] func(key string, value []byte) (V, error)

// Options tunes a ListWatcher. The zero value is ready to use.
type Options struct {
	// RequestTimeout bounds each list page, the wait for each chunk of
	// ListChunks (not the whole list), each CurrentVersion and the start
	// of each watch: past it, the request fails with an error wrapping
	// source.ErrUnavailable that says what the client's connection tells
	// of why (refused, DNS, TLS, no answer). Zero means 30 seconds; a
	// negative value means no bound but the caller's context.
	//
	// Independently of it, the first request that waits 2 seconds for a
	// connection the client does not have fails the same way, with the
	// cause of the client's last failed attempt to connect, so that an
	// unreachable cluster is reported within seconds; the requests after
	// it wait for the connection, up to RequestTimeout, until one
	// succeeds.
	RequestTimeout time.Duration

	// ProgressInterval is how long a watch hears nothing from etcd before
	// it asks for a progress notification (and again every quarter
	// interval while still silent). A watch silent for two intervals ends
	// with an error wrapping source.ErrUnavailable, within two and a
	// quarter intervals of etcd's last message, and the Reflector watches
	// again from the last revision seen. A watch that allows bookmarks
	// (source.WatchOptions.AllowBookmarks) hands the answers out as
	// bookmarks. Zero means 5 seconds; a negative value turns
	// progress requests off (a watch then waits for a lost member).
	//
	// etcd's gRPC proxy drops progress requests: through it, set the
	// members' --watch-progress-notify-interval below this interval, or
	// a quiet prefix's watch is reopened every two intervals (nothing is
	// lost). How soon a mirror is current again after an outage, and how
	// a client's gRPC reconnection backoff changes it, is measured in
	// bench/OUTAGE.md.
	ProgressInterval time.Duration

	// PrevValues makes watches ask etcd for the value each event
	// replaced, so that an source.Deleted carries the key's last value and
	// metadata. The default, false, sends deletions with the key alone,
	// marked source.Event.KeyOnly; a Reflector's store and an Informer
	// deliver the last value they applied instead. A deletion whose
	// previous value is compacted or fails to decode carries the key
	// alone even with PrevValues. Its cost to etcd is measured in
	// bench/NOTES.md.
	PrevValues bool
}

const (
	defaultRequestTimeout   = 30 * time.Second
	defaultProgressInterval = 5 * time.Second
)

func (o Options) requestTimeout() time.Duration {
	if o.RequestTimeout == 0 {
		return defaultRequestTimeout
	}
	return o.RequestTimeout
}

func (o Options) progressInterval() time.Duration {
	if o.ProgressInterval == 0 {
		return defaultProgressInterval
	}
	return o.ProgressInterval
}

// ListWatcher lists and watches the keys under one prefix of an etcd
// cluster, whose values decode into Vs. *ListWatcher[V] implements
// source.ListWatcher[Object[V]]; NewInformer makes an informer of it. It is
// safe for concurrent use; it holds no resources of its own, and every
// Watcher it returns ends with its context or its Stop.
type ListWatcher[V any] struct {
	client *clientv3.Client
	prefix string
	// start and end bound the range [start, end) that holds the prefix.
	start, end string
	decode     DecodeFunc[V]
	// watchDecode is decode for watches: recovering(decode) if decode
	// is the caller's, which may panic.
	watchDecode DecodeFunc[V]
	opts        Options
	// noStream is set once the server answered that it does not offer
	// RangeStream: ListChunks pages from then on.
	noStream atomic.Bool
	// waitedOut is set once a request ended for want of a connection, and
	// cleared once one succeeds; see guardConn.
	waitedOut atomic.Bool
	stats     stats

	// watching holds the open watches that RequestProgress asks; guarded
	// by watchMu.
	watchMu  sync.Mutex
	watching map[*watcher[V]]struct{}
}

// New returns a ListWatcher of the raw values under prefix, read through c.
// An empty prefix means every key. The values it returns are not shared with
// anything else and may be kept.
func New(c *clientv3.Client, prefix string, opts Options) *ListWatcher[[]byte] {
	lw := NewTyped(c, prefix, rawValue, opts)
	lw.watchDecode = rawValue // cannot panic
	return lw
}

// NewTyped returns a ListWatcher of the keys under prefix, read through c,
// whose values decode turns into Ts. An empty prefix means every key. decode
// is called from the goroutines that call List and Watcher.Next, and must be
// safe for that.
func NewTyped[V any](c *clientv3.Client, prefix string, decode DecodeFunc[V], opts Options) *ListWatcher[V] {
	lw := &ListWatcher[V]{
		client:      c,
		prefix:      prefix,
		start:       prefix,
		end:         clientv3.GetPrefixRangeEnd(prefix),
		decode:      decode,
		watchDecode: recovering(decode),
		opts:        opts,
	}
	if prefix == "" {
		// etcd has no empty key; "\x00" to "\x00" is its name for the
		// whole key space.
		lw.start = "\x00"
	}
	return lw
}

func rawValue(_ string, v []byte) ([]byte, error) { return v, nil }

// Prefix returns the prefix lw mirrors.
func (lw *ListWatcher[V]) Prefix() string { return lw.prefix }

// object turns a key-value pair into an Object, decoding its value with
// decode: lw.decode, or, for a watch, lw.watchDecode.
func (lw *ListWatcher[V]) object(kv *mvccpb.KeyValue, decode DecodeFunc[V]) (Object[V], error) {
	o := Object[V]{
		Key:            string(kv.Key),
		CreateRevision: kv.CreateRevision,
		ModRevision:    kv.ModRevision,
		Version:        kv.Version,
		Lease:          kv.Lease,
	}
	v, err := decode(o.Key, kv.Value)
	if err != nil {
		return o, objectError(kv, err)
	}
	o.Value = v
	return o, nil
}

// recovering returns decode, turning a panic into an error. A watch
// decodes one value per Next, so it recovers around each, for the
// caller's decode functions only (New's raw values cannot panic); beside
// what Next costs, the deferred call did not show in a benchmark even with
// a decode that does nothing. A list recovers once per page instead (see
// objects).
func recovering[V any](decode DecodeFunc[V]) DecodeFunc[V] {
	return func(key string, value []byte) (v V, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = decodePanic(r)
			}
		}()
		return decode(key, value)
	}
}

// objectError is the error of kv, whose value could not be decoded.
func objectError(kv *mvccpb.KeyValue, err error) error {
	return &mirror.ObjectError{Key: string(kv.Key), ResourceVersion: formatRev(kv.ModRevision), Err: err}
}

// decodePanic is the error of a decode function that panicked with v. The
// function that recovered must call it, so that the stack shows the panic.
func decodePanic(v any) error {
	return fmt.Errorf("etcd: decode: %w", &mirror.PanicError{Value: v, Stack: debug.Stack()})
}

// objects appends the Objects of kvs to items, and the errors of those it
// cannot produce to skipped.
func (lw *ListWatcher[V]) objects(kvs []*mvccpb.KeyValue, items []Object[V], skipped []error) ([]Object[V], []error) {
	for i := 0; i < len(kvs); {
		i = lw.objectsFrom(kvs, i, &items, &skipped)
	}
	return items, skipped
}

// objectsFrom is objects of kvs[i:]. It returns len(kvs), or, if the
// decode function panics on one, the position after it, which it skips,
// and the caller goes on from there: one deferred call per page, not per
// value.
func (lw *ListWatcher[V]) objectsFrom(kvs []*mvccpb.KeyValue, i int, items *[]Object[V], skipped *[]error) (next int) {
	defer func() {
		// Only the decode function runs user code here.
		if v := recover(); v != nil {
			*skipped = append(*skipped, objectError(kvs[next], decodePanic(v)))
			next++
		}
	}()
	for next = i; next < len(kvs); next++ {
		o, err := lw.object(kvs[next], lw.decode)
		if err != nil {
			*skipped = append(*skipped, err)
			continue
		}
		*items = append(*items, o)
	}
	return next
}

// requestContext bounds one request by Options.RequestTimeout and, while
// the client has no connection, by connectWait (see guardConn). The
// request runs with rctx; done, called with its error, releases what
// requestContext holds and returns the error to report: the reason the
// client could not connect, if that ended the request.
func (lw *ListWatcher[V]) requestContext(ctx context.Context) (rctx context.Context, done func(error) error) {
	tctx, cancelTimeout := ctx, context.CancelFunc(func() {})
	if d := lw.opts.requestTimeout(); d > 0 {
		tctx, cancelTimeout = context.WithTimeout(ctx, d)
	}
	gctx, cancel := context.WithCancelCause(tctx)
	stop := lw.guardConn(gctx, cancel)
	return gctx, func(err error) error {
		stop()
		var noConn *noAnswerError
		if err != nil && errors.As(context.Cause(gctx), &noConn) && ctx.Err() == nil {
			err = noConn
		}
		cancel(nil)
		cancelTimeout()
		if err == nil {
			lw.connected()
		}
		return err
	}
}

func formatRev(rev int64) string { return strconv.FormatInt(rev, 10) }

// parseRev reads a resource version this adapter produced: a positive etcd
// revision in decimal.
func parseRev(rv string) (int64, error) {
	rev, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || rev <= 0 {
		return 0, fmt.Errorf("invalid resource version %q: want a positive etcd revision", rv)
	}
	return rev, nil
}

var _ source.ListWatcher[KV] = (*ListWatcher[[]byte])(nil)
