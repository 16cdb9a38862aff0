// Package nats adapts a NATS JetStream key-value bucket to
// source.ListWatcher, so that a mirror.Reflector or mirror.Informer can keep
// a local copy of the bucket's keys.
//
// The adapter reads through the caller's jetstream.JetStream, so servers,
// TLS, credentials and JetStream domains stay the caller's. A list reads
// the latest value of every key at one revision (the bucket's stream
// sequence), and a watch goes on from the revision after it, delivering
// every revision the bucket holds, deletions and purges included, which
// become deletions in the mirror.
//
// NATS reports no error when a watch resumes from a revision whose
// successors the bucket has dropped (a key's history limit reached, a
// purge, PurgeDeletes, a TTL or the bucket's MaxAge). The adapter watches
// the whole bucket, whose revisions are consecutive, so that any revision
// missing from what it delivers is one the bucket dropped, and it checks,
// once the client reports the watch caught up, that it has delivered up
// to the bucket's last revision when the watch started, so that a dropped
// revision with nothing after it (a deletion written last, which
// PurgeDeletes removes) is caught too: the watch then ends with an error
// wrapping source.ErrExpired, and the Reflector relists.
// A refused connection, a lost server or a timeout is source.ErrUnavailable;
// refused credentials or permissions, and a bucket that does not exist, are
// mirror.ErrPermanent. A value that fails to decode is reported with its
// key and kept out of the mirror; the rest of the bucket is mirrored.
//
// NewTyped (or New, for raw values) makes the ListWatcher; NewInformer makes
// an informer of it, keyed by the bucket's keys, that reports a relisted
// key only if its revision changed, and that keeps its checkpoints (see
// mirror.CheckpointOptions) with Codec. ListWatcher.Stats counts the lists
// and watches it started.
//
// A key's identity: NATS records no creation revision, so a key deleted
// and re-created reaches handlers as a deletion then an addition only when
// the watch delivers both, which it does when every revision after the
// mirror's is still in the bucket as the watch resumes. A revision gone
// from the bucket, the key's or any other's (a History limit reached, a
// purge of a key written since, PurgeDeletes, a TTL or MaxAge), ends the
// watch with source.ErrExpired at the first one missing, and the relist
// that follows reads each key's latest value alone: a key deleted and
// re-created after the last revision the watch delivered then reaches
// handlers as an update, even while the bucket still holds its deletion.
// A mirror cut off from the bucket reports every re-creation as a deletion
// then an addition only if the bucket drops none of the revisions written
// meanwhile: a History at least the number of writes to any one key
// meanwhile, and no purge, PurgeDeletes, TTL or MaxAge removing them.
package nats

import (
	"context"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"github.com/nats-io/nats.go/jetstream"
)

// Object is one key of a bucket as the mirror holds it: the key, its value
// decoded into a V, and the revision that wrote it. In a deletion that
// carries the key alone (source.Event.KeyOnly), every field but Key is zero.
type Object[V any] struct {
	// Key is the key, without the bucket's subject prefix.
	Key string
	// Value is the decoded value.
	Value V
	// Revision is the revision (the stream sequence) of the put that
	// wrote Value.
	Revision uint64
	// Time is when the server stored that put.
	Time time.Time
}

// KV is a key with its raw value, as New produces it.
type KV = Object[[]byte]

// KeyOf returns o.Key. It never fails; its signature lets it serve as a
// mirror.KeyFunc[string, Object[V]].
func KeyOf[V any](o Object[V]) (string, error) { return o.Key, nil }

// DecodeFunc turns the value stored under key into a V. An error is
// reported, and the key is left out of the mirror (a list skips it, a watch
// evicts it; see ListWatcher.Watch); the rest of the bucket is mirrored. A
// panic is recovered and is that key's error (a *mirror.ObjectError whose
// Err wraps a *mirror.PanicError).
type DecodeFunc[V any] func(key string, value []byte) (V, error)

// Options tunes a ListWatcher. The zero value is ready to use.
type Options struct {
	// RequestTimeout bounds each request the adapter makes of the server
	// (looking the bucket up, reading its stream's state) and, during a
	// list, the wait for each next key, so that a server that accepts a
	// connection but never answers yields source.ErrUnavailable instead
	// of a hang. The start of the client's watchers is bounded by the
	// client's own timeout (jetstream's default wait). Zero means 30
	// seconds; a negative value means no bound other than the caller's
	// context.
	RequestTimeout time.Duration
}

const defaultRequestTimeout = 30 * time.Second

func (o Options) requestTimeout() time.Duration {
	if o.RequestTimeout == 0 {
		return defaultRequestTimeout
	}
	return o.RequestTimeout
}

// ListWatcher lists and watches the keys of one JetStream key-value
// bucket, whose values decode into Vs. *ListWatcher[V] implements
// source.ListWatcher[Object[V]]; NewInformer makes an informer of it. It is
// safe for concurrent use; it holds no resources of its own beyond handles
// to the bucket, and every Watcher it returns ends with its context or its
// Stop.
type ListWatcher[V any] struct {
	js     jetstream.JetStream
	bucket string
	decode DecodeFunc[V]
	opts   Options
	stats  stats

	// mu guards the handles, looked up on first use.
	mu     sync.Mutex
	kv     jetstream.KeyValue
	stream jetstream.Stream
}

// New returns a ListWatcher of the raw values of bucket, read through js.
// The values it returns are not shared with anything else and may be kept.
func New(js jetstream.JetStream, bucket string, opts Options) *ListWatcher[[]byte] {
	return NewTyped(js, bucket, rawValue, opts)
}

// NewTyped returns a ListWatcher of the keys of bucket, read through js,
// whose values decode turns into Vs. decode is called from the goroutines
// that call List and Watcher.Next, and must be safe for that. The bucket is
// looked up on the first List or Watch, so that a bucket missing then is
// reported as their error.
func NewTyped[V any](js jetstream.JetStream, bucket string, decode DecodeFunc[V], opts Options) *ListWatcher[V] {
	return &ListWatcher[V]{js: js, bucket: bucket, decode: decode, opts: opts}
}

func rawValue(_ string, v []byte) ([]byte, error) { return v, nil }

// Bucket returns the name of the bucket lw mirrors.
func (lw *ListWatcher[V]) Bucket() string { return lw.bucket }

// handles returns the bucket and its stream, looking them up the first
// time. A failed look-up is not kept: the next call tries again.
func (lw *ListWatcher[V]) handles(ctx context.Context) (jetstream.KeyValue, jetstream.Stream, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.kv != nil {
		return lw.kv, lw.stream, nil
	}
	err := lw.request(ctx, func(ctx context.Context) error {
		kv, err := lw.js.KeyValue(ctx, lw.bucket)
		if err != nil {
			return err
		}
		stream, err := lw.js.Stream(ctx, "KV_"+lw.bucket)
		if err != nil {
			return err
		}
		lw.kv, lw.stream = kv, stream
		return nil
	})
	return lw.kv, lw.stream, err
}

// streamState reads the bucket's stream state: its first and last
// revisions.
func (lw *ListWatcher[V]) streamState(ctx context.Context, stream jetstream.Stream) (jetstream.StreamState, error) {
	var state jetstream.StreamState
	err := lw.request(ctx, func(ctx context.Context) error {
		info, err := stream.Info(ctx)
		if err == nil {
			state = info.State
		}
		return err
	})
	return state, err
}

// object turns a put into an Object, decoding its value with the caller's
// decode function, whose panic it recovers.
func (lw *ListWatcher[V]) object(e jetstream.KeyValueEntry) (o Object[V], err error) {
	o = Object[V]{Key: e.Key(), Revision: e.Revision(), Time: e.Created()}
	defer func() {
		if r := recover(); r != nil {
			err = objectError(e, decodePanic(r))
		}
	}()
	v, err := lw.decode(o.Key, e.Value())
	if err != nil {
		return o, objectError(e, err)
	}
	o.Value = v
	return o, nil
}

// objectError is the error of e, whose value could not be decoded.
func objectError(e jetstream.KeyValueEntry, err error) error {
	return &mirror.ObjectError{Key: e.Key(), ResourceVersion: formatRev(e.Revision()), Err: err}
}

// decodePanic is the error of a decode function that panicked with v. The
// function that recovered must call it, so that the stack shows the panic.
func decodePanic(v any) error {
	return fmt.Errorf("nats: decode: %w", &mirror.PanicError{Value: v, Stack: debug.Stack()})
}

func formatRev(rev uint64) string { return strconv.FormatUint(rev, 10) }

// parseRev reads a resource version this adapter produced: a revision of
// the bucket in decimal, 0 for an empty bucket.
func parseRev(rv string) (uint64, error) {
	rev, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid resource version %q: want a revision of the bucket", rv)
	}
	return rev, nil
}

var _ source.ListWatcher[KV] = (*ListWatcher[[]byte])(nil)
