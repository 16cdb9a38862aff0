package mirror

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/listwatch/mirror/source"
)

// Lifecycle errors of an Informer.
var (
	// ErrStarted is returned by Informer.Run, and reported by
	// Reflector.Run, when it was run before: each runs once.
	ErrStarted = errors.New("mirror: already started")

	// ErrStopped is returned by Informer.AddEventHandler once Run's
	// context has ended: the handler would never be called. A wait for a
	// version (Informer.WaitForVersion) that Run's end cuts short wraps
	// it.
	ErrStopped = errors.New("mirror: informer stopped")
)

// InformerOptions configures an Informer. KeyFunc is required; every
// other field has a useful zero value.
//
// The functions among the options (KeyFunc, the Indexers, Transform,
// ResourceVersion, SameObject) may panic: a panic on an object is
// recovered and reported as that object's failure, with a *PanicError
// inside, and the object is skipped as for the function's error (see
// PanicError).
type InformerOptions[K comparable, T any] struct {
	// Name identifies the informer, and its Reflector, in logs, errors
	// and metrics.
	Name string

	// KeyFunc computes each object's key.
	KeyFunc KeyFunc[K, T]

	// Indexers are the cache's indexes.
	Indexers Indexers[T]

	// Transform, if set, runs once on each object as it enters the queue,
	// for instance to drop fields the program never reads; not on a
	// deletion that carries the key alone (Event.KeyOnly), whose object
	// is the last state the cache holds. When it fails, the error is
	// reported and the change is left out: an addition or update leaves
	// the cache as it was, and so does a relist for that key; a deletion
	// still deletes, carrying the last state the cache holds.
	Transform TransformFunc[T]

	// ResyncPeriod is the resync period of handlers that do not set their
	// own (see HandlerOptions.ResyncPeriod). Zero means no resync.
	ResyncPeriod time.Duration

	// BatchSize is the most queue entries applied in one step; zero
	// means 256.
	BatchSize int

	// ResourceVersion, if set, returns an object's version. A relist
	// that finds an object at the version already cached (and, with
	// SameObject, the same object) then offers it only to handlers due
	// for a resync, like client-go, and the cache keeps the value it
	// holds; without it, every relisted object is
	// delivered to every handler as an update. If it panics, the
	// relisted state is left out, as SameObject's panic leaves it.
	ResourceVersion func(obj T) string

	// SameObject, if set, reports whether two states of one key belong to
	// the same object, as opposed to an object and another created under
	// its key after it was deleted: etcd's CreateRevision, Kubernetes'
	// UID. cached is the state the cache holds, incoming the new one.
	// When a relist or a watch event brings a key whose incoming state is
	// not the same object, handlers get OnDelete(cached, true) and then
	// OnAdd(incoming), never an OnUpdate from one object to another:
	// the first one's deletion was not seen, which happens when history
	// was compacted while the watch was down. Without SameObject a key's
	// states are all taken for one object. The adapters' constructors
	// set it. If it panics, the incoming state is left out: the cache
	// keeps the cached one, no handler hears of the change, and an
	// *ObjectError naming the key reports the panic.
	SameObject func(cached, incoming T) bool

	// SyncFailureLimit is how many failures wrapping ErrPermanent the
	// source may report before the informer's first sync, before the
	// informer stops waiting for it: WaitForSync (and WaitForCacheSync)
	// then returns the last of them instead of waiting on. The Reflector
	// keeps trying, with backoff, so the informer still syncs if the
	// cause is fixed; HasSynced tells. Zero means 3; failures of other
	// kinds never end the wait.
	SyncFailureLimit int

	// CompareVersions, if set, orders the source's versions, for
	// WaitForVersion and consistent reads (see VersionComparer, which a
	// source implements instead); it returns an error wrapping
	// ErrInvalidVersion for a string that is not a version. Nil means the
	// source's order, if it has one.
	CompareVersions func(a, b string) (int, error)

	// Checkpoint, if its Path is set, makes the informer keep a
	// checkpoint of its cache and resume from it (see CheckpointOptions).
	Checkpoint CheckpointOptions[T]

	// Metrics, if set, receives the informer's measurements (see Metrics);
	// nil measures nothing. Stats works either way.
	Metrics Metrics

	// ListWatch tunes how the source is listed and watched: page size,
	// streaming lists, watch timeout, backoff.
	ListWatch ListWatchOptions

	// ErrorHandler sees every failure: failed lists and watches, objects
	// skipped (*ObjectError, *KeyError, *IndexError, and a *PanicError
	// inside them for a function that panicked) and handler panics
	// (*HandlerPanicError). An object skipped by a watch is reported
	// before handlers see it leave (OnDelete with finalStateUnknown). Nil
	// means logging them through Logger: at Warn, but a panic at Error
	// with the stack (and a handler's with the handler's name), and an
	// error identical to one logged in the last minute only as a count
	// the next time it is logged.
	ErrorHandler func(err error)

	// Logger receives the informer's logs; nil means slog.Default(). To
	// silence them, pass slog.New(slog.DiscardHandler).
	Logger *slog.Logger
}

// Informer keeps an indexed cache of a ListWatcher's objects and tells
// handlers about every change: a Reflector feeds a queue, and the
// informer applies what it pops to the cache, then hands a notification
// to every handler, each on a goroutine of its own.
//
// An Informer is safe for concurrent use. Its cache is read through Get,
// List, All, ByIndex and friends; it must not be written to except by the
// informer.
type Informer[K comparable, T any] struct {
	lw     source.ListWatcher[T]
	opts   InformerOptions[K, T]
	logger *slog.Logger
	logs   logLimiter
	cache  *Indexer[K, T]
	proc   processor[K, T]
	queue  *inOrderQueue[K, T]
	// listing is the list the queue is handing over in chunks;
	// only the goroutine applying the queue's entries uses it.
	listing *listing[K, T]

	// applyMu is held while popped entries are applied to the cache and
	// distributed, and while a late handler's replay is taken, so that a
	// late handler sees each change exactly once: in its replay or after.
	applyMu sync.Mutex
	// appliedRV is the source's version the cache is at: that of the last
	// change, list or bookmark applied. Guarded by applyMu.
	appliedRV string
	// partial says whether the cache holds part of the change at
	// appliedRV. Guarded by applyMu.
	partial partialChange
	// versions tells waiters the version the cache has applied; the
	// goroutine applying publishes to it after each batch.
	versions versionGate
	// progress shares the progress requests of consistent reads.
	progress progressAsker
	// writes are the program's writes the cache has yet to apply
	// (RecordWrite).
	writes writeLog[K]
	// live is set by Run once the cache holds what the handlers are
	// told of: after the checkpoint, if any, is loaded and handed to the
	// handlers registered until then. A handler added from then on is
	// handed the cache (a late handler); one added before, even while
	// Run loads, is one registered before Run. Guarded by applyMu.
	live bool
	// applied counts the queue's entries applied; measured receives how
	// long a sample of them waited. Both belong to the goroutine applying.
	applied  uint64
	measured InformerMetrics
	// applying is the change being applied while SameObject or
	// ResourceVersion runs on it, to undo if it panics. It belongs to the
	// goroutine applying.
	applying applyCall[K, T]
	// applyErrors and checkpointErrors count the errors the informer
	// reports of its own, for Stats.
	applyErrors, checkpointErrors atomic.Int64

	synced     atomic.Bool
	syncedCh   chan struct{}
	syncedOnce sync.Once
	failure    syncFailure

	started   atomic.Bool
	reflector atomic.Pointer[Reflector[T]]
}

// NewInformer returns an Informer over lw. It panics if opts.KeyFunc is
// nil, a programming error.
func NewInformer[K comparable, T any](lw source.ListWatcher[T], opts InformerOptions[K, T]) *Informer[K, T] {
	if opts.KeyFunc == nil {
		panic("mirror: NewInformer needs a KeyFunc")
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 256
	}
	if opts.SyncFailureLimit <= 0 {
		opts.SyncFailureLimit = defaultSyncFailureLimit
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	if opts.Name != "" {
		logger = logger.With("informer", opts.Name)
	}
	inf := &Informer[K, T]{
		lw:       lw,
		opts:     opts,
		logger:   logger,
		cache:    NewIndexer(opts.KeyFunc, opts.Indexers),
		syncedCh: make(chan struct{}),
		failure:  syncFailure{ch: make(chan struct{})},
	}
	inf.failure.last = inf.lastFailure
	inf.proc.report, inf.proc.logger = inf.report, logger
	inf.proc.resyncMoved = make(chan struct{}, 1)
	inf.queue = newInOrderQueue(opts.KeyFunc, opts.Transform)
	return inf
}

func (inf *Informer[K, T]) report(err error) {
	if errors.Is(err, ErrPermanent) && !inf.synced.Load() {
		inf.failure.count(err, inf.opts.SyncFailureLimit)
	}
	if inf.opts.ErrorHandler != nil {
		inf.opts.ErrorHandler(err)
		return
	}
	inf.logs.logError(inf.logger, "mirror: informer error", err)
}

// Run lists, watches and delivers until ctx ends, then returns nil once
// every goroutine it started has stopped: no handler is called after Run
// returns. When ctx ends, delivery stops, but a handler's call in
// progress is not interrupted: Run waits for it to return, however long
// that takes, and meanwhile logs the handler as stuck, by name, every
// HandlerOptions.StuckAfter (30 seconds by default). An Informer runs
// once: a second call returns ErrStarted.
func (inf *Informer[K, T]) Run(ctx context.Context) error {
	if !inf.started.CompareAndSwap(false, true) {
		return ErrStarted
	}
	// From here on AddEventHandler refuses once ctx has ended.
	inf.proc.bind(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	cp := newCheckpointer(checkpointSeam[T](inf), inf.opts.Name, func(err error) {
		inf.checkpointErrors.Add(1)
		inf.report(err)
	}, inf.logger, inf.opts.Checkpoint)
	r := inf.newReflector()
	var im InformerMetrics
	if inf.opts.Metrics != nil {
		im = inf.opts.Metrics.Informer(inf.opts.Name, inf)
		r.onListed = im.Listed
		inf.measured = im
		inf.queueArrivals().start()
		defer inf.queueArrivals().stop()
		defer im.Stop()
	}

	var wg sync.WaitGroup
	var rv string
	var early *earlyReflector
	if cp != nil {
		// Not under applyMu: AddEventHandler goes on meanwhile, and the
		// handlers it adds are not handed a cache half filled (see live).
		rv = cp.load(func(version string) {
			early = startEarly(ctx, r, version, inf.resumed)
		})
		if early != nil && rv == "" {
			// The checkpoint turned out unusable: what the Reflector
			// queued meanwhile was about a state the cache never held.
			early.stop()
			early = nil
			inf.queue.discard()
			r = inf.newReflector()
			if im != nil {
				r.onListed = im.Listed
			}
		}
	}
	inf.applyMu.Lock()
	// A handler added from now on is handed the cache as a late one.
	if rv != "" {
		// The Reflector started from rv once load read it (early).
		inf.resumeAt(rv)
	}
	inf.live = true
	inf.versions.publish(inf.appliedRV, inf.partial.open)
	inf.applyMu.Unlock()
	// Waiters learn that the cache moves no more once everything Run
	// started has stopped.
	defer inf.versions.end()

	inf.proc.run(ctx, &wg, im)
	if early != nil {
		wg.Go(early.wait)
	} else {
		wg.Go(func() { r.Run(ctx) })
	}
	wg.Go(func() { inf.applyLoop(ctx) })
	wg.Go(func() { inf.resyncLoop(ctx) })
	if cp != nil {
		wg.Go(func() { cp.run(ctx) })
	}
	<-ctx.Done()
	// From here on no listener starts, so none can outlive Wait.
	inf.proc.stop()
	wg.Wait()
	if cp != nil {
		// Nothing applies any more: the cache is at the version it says,
		// and a change it holds part of will not complete.
		cp.write(ctx)
	}
	return nil
}

// newReflector makes the informer's Reflector. It is called by Run.
func (inf *Informer[K, T]) newReflector() *Reflector[T] {
	ropts := ReflectorOptions{
		// The informer runs the resync rounds itself (resyncLoop), for
		// each handler at its own period.
		Name:         inf.opts.Name,
		ErrorHandler: inf.report,
		Logger:       inf.logger,
		ListWatch:    inf.opts.ListWatch,
	}
	r := NewReflector[T](inf.lw, inf.queue, ropts)
	inf.reflector.Store(r)
	return r
}

// queueArrivals returns the queue's sampler of waiting times.
func (inf *Informer[K, T]) queueArrivals() *arrivals { return &inf.queue.arrivals }
