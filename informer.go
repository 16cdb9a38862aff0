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
// other field has a useful zero value. A panic in one of its functions
// on an object is that object's failure, reported with a *PanicError
// inside; the object is skipped as for the function's error.
type InformerOptions[K comparable, T any] struct {
	// Name identifies the informer in logs, errors and metrics.
	Name string

	// KeyFunc computes each object's key.
	KeyFunc KeyFunc[K, T]

	// Indexers are the cache's indexes.
	Indexers Indexers[T]

	// Transform, if set, runs once on each object as it enters the
	// queue, not on a key-only deletion (Event.KeyOnly). If it fails, the
	// error is reported and the change left out: an addition, update or
	// relisted state leaves the cache as it was; a deletion still deletes.
	Transform TransformFunc[T]

	// ResyncPeriod is the resync period of handlers that set none (see
	// HandlerOptions.ResyncPeriod). Zero means no resync.
	ResyncPeriod time.Duration

	// BatchSize is the most queue entries applied in one step; zero
	// means 256.
	BatchSize int

	// ResourceVersion, if set, returns an object's version: a relisted
	// object at the version cached (and, with SameObject, the same
	// object) goes only to handlers due for a resync and the cache keeps
	// its value. Without it, every relisted object is an update. If it
	// panics, the relisted state is left out. Against a checkpoint (see
	// CheckpointOptions), the version alone tells an object unchanged.
	ResourceVersion func(obj T) string

	// SameObject, if set, reports whether the cached and incoming states
	// of a key are one object, not a re-creation under the key (etcd's
	// CreateRevision, Kubernetes' UID). If not, handlers get
	// OnDelete(cached, true) then OnAdd(incoming), never an OnUpdate
	// between two objects. Nil takes a key's states for one object; the
	// adapters set it. If it panics, the incoming state is left out and
	// an *ObjectError naming the key is reported.
	SameObject func(cached, incoming T) bool

	// SyncFailureLimit is how many failures wrapping ErrPermanent before
	// the first sync make WaitForSync (and WaitForCacheSync) return the
	// last of them. The Reflector keeps retrying, so the informer may
	// still sync. Zero means 3; other failures never end the wait.
	SyncFailureLimit int

	// CompareVersions, if set, orders the source's versions, for
	// WaitForVersion and consistent reads; it returns an error wrapping
	// ErrInvalidVersion for a non-version. Nil means the source's
	// VersionComparer, if any.
	CompareVersions func(a, b string) (int, error)

	// Checkpoint, if its Path is set, makes the informer keep a
	// checkpoint of its cache and resume from it.
	Checkpoint CheckpointOptions[T]

	// Metrics, if set, receives the informer's measurements; nil
	// measures nothing. Stats works either way.
	Metrics Metrics

	// ListWatch tunes how the source is listed and watched.
	ListWatch ListWatchOptions

	// ErrorHandler sees every failure: failed lists and watches, skipped
	// objects (*ObjectError, *KeyError, *IndexError) and handler panics
	// (*HandlerPanicError). A watch's skipped object is reported before
	// handlers see it leave. Nil logs them through Logger at Warn (a
	// panic at Error, with its stack), repeats within a minute as a count.
	ErrorHandler func(err error)

	// Logger receives the informer's logs; nil means slog.Default().
	// slog.New(slog.DiscardHandler) silences them.
	Logger *slog.Logger
}

// Informer keeps an indexed cache of a ListWatcher's objects and tells
// handlers of every change, each handler on a goroutine of its own. It
// is safe for concurrent use; its cache must not be written to.
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
	// halfListed says whether the cache holds part of a list: chunks of
	// a list applied directly (see listing.direct), whose end has not
	// come, or which was abandoned and awaits the next list's end. The
	// cache then holds states newer than appliedRV next to older ones.
	// Guarded by applyMu.
	halfListed partialChange
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
	// loaded is what restore kept of the checkpoint it loaded, for
	// resumeAt to hand to the handlers; nil if it kept nothing. It
	// belongs to Run.
	loaded *replaySet[K, T]
	// behind is the checkpoint an informer resumed from, whose version
	// the source no longer had, while its first list is applied: what
	// the listeners following it are told is what changed since (see
	// checkpoint_relist.go). It belongs to the goroutine applying, once
	// Run has set it.
	behind *checkpointIndex[T]

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
// every goroutine it started has stopped: no handler is called after
// Run returns. A handler's call in progress is not interrupted; Run
// waits for it, logging it as stuck (see HandlerOptions.StuckAfter). A
// second call returns ErrStarted.
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
	var behind *checkpointIndex[T]
	if cp != nil {
		// Not under applyMu: AddEventHandler goes on meanwhile, and the
		// handlers it adds are not handed a cache half filled (see live).
		rv, behind = cp.load(func(version string) {
			early = startEarly(ctx, r, version, inf.resumed, inf.queue.listNext)
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
	switch {
	case behind != nil:
		// The Reflector is listing: the cache fills from the list.
		inf.resumeListing(behind)
	case rv != "":
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
