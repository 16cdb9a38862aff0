package mirror

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/listwatch/mirror/source"
)

// Defaults of ListWatchOptions.
const (
	defaultPageSize       = 5000
	defaultWatchTimeout   = 5 * time.Minute
	defaultInitialBackoff = 800 * time.Millisecond
	defaultMaxBackoff     = 30 * time.Second
	defaultBackoffReset   = 2 * time.Minute
	defaultJitter         = 1.0
	defaultStreamStall    = 10 * time.Second
)

// ReflectorOptions configures a Reflector used on its own. The zero value
// gives the defaults described on each field.
type ReflectorOptions struct {
	// Name identifies the Reflector in logs and in the errors it reports.
	Name string

	// ResyncPeriod is how often the Reflector calls the store's Resync
	// while it watches; 0 or less means never.
	ResyncPeriod time.Duration

	// ShouldResync, if set, is asked before every periodic resync, from a
	// goroutine of its own; nil means always resync.
	ShouldResync func() bool

	// ErrorHandler is called with every failure (list, watch, skipped
	// object, store error), each wrapping its cause. nil means logging at
	// Warn through Logger, repeats within a minute as a count. Calls are
	// never concurrent and must return quickly.
	ErrorHandler func(err error)

	// Logger receives the Reflector's logs; nil means slog.Default().
	Logger *slog.Logger

	// ListWatch tunes how the source is listed and watched.
	ListWatch ListWatchOptions
}

// ListWatchOptions tunes how a Reflector lists, watches and retries. The
// zero value gives the defaults described on each field.
type ListWatchOptions struct {
	// PageSize is the most objects one List call asks for, and a hint
	// for a ChunkLister's chunk size; 0 or less means 5000 (client-go's
	// is 500). A page is held whole while it is read.
	PageSize int64

	// StreamingList makes the Reflector list with a streaming list (a
	// Watch with SendInitialEvents) and keep watching on that stream; a
	// source that answers errors.ErrUnsupported gets List from then on.
	// False leaves the choice to a StreamingListPreferrer source.
	StreamingList bool

	// StreamingListStall is how long a streaming list may go without an
	// event before its closing bookmark (0 or less means 10s); a stalled
	// stream, or a change event before the bookmark, is reported and the
	// Reflector uses List from then on.
	StreamingListStall time.Duration

	// WatchTimeout is the least time a watch is asked to last: each Watch
	// asks for a random timeout in [WatchTimeout, 2*WatchTimeout). 0 or
	// less means 5 minutes.
	WatchTimeout time.Duration

	// InitialBackoff and MaxBackoff bound the pause before a retry: it
	// starts at InitialBackoff and doubles after every failure up to
	// MaxBackoff, counted from the start of the attempt that failed. 0 or
	// less means 800ms and 30s.
	InitialBackoff, MaxBackoff time.Duration

	// BackoffReset is how long the source must work, after a pause, for
	// the next pause to start again from InitialBackoff, or any event or
	// bookmark. 0 or less means 2 minutes.
	BackoffReset time.Duration

	// Jitter lengthens each pause d by a random amount in [0, Jitter*d).
	// 0 means 1.0; a negative value turns jitter off.
	Jitter float64
}

// withDefaults returns o with every zero field set to its default.
func (o ListWatchOptions) withDefaults() ListWatchOptions {
	if o.PageSize <= 0 {
		o.PageSize = defaultPageSize
	}
	if o.WatchTimeout <= 0 {
		o.WatchTimeout = defaultWatchTimeout
	}
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = defaultInitialBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = defaultMaxBackoff
	}
	if o.BackoffReset <= 0 {
		o.BackoffReset = defaultBackoffReset
	}
	if o.Jitter == 0 {
		o.Jitter = defaultJitter
	}
	if o.StreamingListStall <= 0 {
		o.StreamingListStall = defaultStreamStall
	}
	return o
}

// ReflectorStats counts what a Reflector did since its Run started.
type ReflectorStats struct {
	// Lists counts the completed lists handed to the store.
	Lists int64
	// Relists counts completed lists after the first, by cause: the
	// version gone, or another watch failure.
	Relists, RelistsExpired, RelistsAfterError int64
	// Watches counts the watch streams opened, streaming lists included.
	Watches int64
	// WatchRestarts counts watches reopened from the last version without
	// a relist, by why the previous one ended: normally, too soon without
	// an event, or the source unavailable.
	WatchRestarts, RestartsClosed, RestartsShort, RestartsUnavailable int64
	// Events counts the watch events received, of every type.
	Events int64
	// Errors counts the errors reported to ErrorHandler; the others count
	// them by kind.
	Errors, ListErrors, WatchErrors, Skipped, StoreErrors int64
}

// reflectorCounters are the atomic counters behind ReflectorStats.
type reflectorCounters struct {
	lists, relists, relistsExpired, relistsAfterError     atomic.Int64
	watches, watchRestarts                                atomic.Int64
	restartsClosed, restartsShort, restartsUnavailable    atomic.Int64
	events                                                atomic.Int64
	errors, listErrors, watchErrors, skipped, storeErrors atomic.Int64
}

// Reflector mirrors a ListWatcher into a ReflectorStore, as client-go's
// Reflector: it lists into the store's Replace, then watches from the
// list's version and applies events in order. After a watch ends:
//
//   - normally: a new watch from the last version, at once; one that
//     lasted under a second without an event is a very short watch,
//     reported and followed by a pause;
//   - ErrUnavailable: a pause, then a watch from the last version;
//   - ErrExpired or ErrTooLargeResourceVersion: a relist, after a pause
//     only if the last relist had the same cause and no event since;
//   - any other error: a pause, then a relist.
//
// A list asks for version "0" first, the last version seen after that,
// and "" once the source said a version is gone. Create it with
// NewReflector; its methods are safe for concurrent use.
type Reflector[T any] struct {
	lw      source.ListWatcher[T]
	store   ReflectorStore[T]
	keyOnly KeyOnlyDeleter[T]     // store, if it is one
	evicter Evicter[T]            // store, if it is one
	events  eventStore[T]         // store, if it is one
	applier listApplier[T]        // store, if it is one
	chunks  source.ChunkLister[T] // lw, if it is one
	opts    ReflectorOptions      // defaults filled in
	logger  *slog.Logger
	logs    logLimiter
	prefix  string // starts every reported error
	onError func(error)

	// storeMu makes the calls to store one at a time: the periodic resync
	// runs on its own goroutine while the watch applies events. Without
	// resync, only Run's goroutine calls the store and storeMu is left
	// alone (see lockStore).
	storeMu sync.Mutex

	// reportMu makes the calls to onError one at a time.
	reportMu sync.Mutex

	mu     sync.Mutex
	lastRV string
	// confirmedAt and failure are for Freshness.
	confirmedAt time.Time
	failure     error
	// listFloor is the version of the last list that failed after the
	// store applied part of it, until a list completes: the next list
	// must not be older (see relistVersion).
	listFloor string
	// versionGone is set when the source said that the version to list or
	// watch from is expired or too large, and cleared by a completed list.
	// While it is set, lists read consistently (version ""): asking again
	// for a version the source refused would loop.
	versionGone bool

	stats   reflectorCounters
	started atomic.Bool
	// stampDue says that the next event reads the clock (see confirmed);
	// stampTimer sets it.
	stampDue   atomic.Bool
	stampTimer *time.Timer

	// The rest belongs to the goroutine running Run.
	backoff backoff
	// attemptStart is when the current list or watch attempt started.
	attemptStart time.Time
	// listCause is why the next list is made.
	listCause ListCause
	// onListed, if set (by an informer with metrics), is told of every
	// completed list.
	onListed func(cause ListCause, objects int, took time.Duration)
	// resumed, if set (by an informer started from a checkpoint), makes
	// Run watch from lastRV before any list, and is called once that
	// watch is open: the store already holds the state at lastRV.
	resumed func()
	// relisting, if set with resumed, is called once the watch from
	// lastRV has ended and a list is to follow, before it begins, unless
	// Run's context has ended. It is called at most once.
	relisting func()
	// change is the change the Reflector has handed part of to the store.
	change openChange
	// noStreaming is set once the source said it cannot stream lists.
	noStreaming bool
	// noChunks is set once the source said it cannot list in chunks.
	noChunks bool
	// expiredRelist is set while the current list and watch were started
	// because a watch found its version gone; together with
	// eventsSinceList it lets a source that keeps expiring versions slow
	// the Reflector down instead of making it relist in a tight loop.
	expiredRelist   bool
	eventsSinceList int64
	// skipped are the objects the source could not produce that were
	// reported, as of the last complete list and the watch events since:
	// each state of each is reported once, not again on every relist.
	skipped map[objectRef]struct{}
	// listSkipped collects the objects the list in progress skipped.
	listSkipped map[objectRef]struct{}
}

// objectRef names one state of an object that a source could not produce.
type objectRef struct{ key, rv string }

// maxSkipped bounds Reflector.skipped: a source that fails on more
// objects than this between two lists gets some of them reported again.
const maxSkipped = 10000

// NewReflector returns a Reflector that mirrors lw into store. It does
// nothing until Run.
func NewReflector[T any](lw source.ListWatcher[T], store ReflectorStore[T], opts ReflectorOptions) *Reflector[T] {
	opts.ListWatch = opts.ListWatch.withDefaults()
	if p, ok := lw.(source.StreamingListPreferrer); ok && !opts.ListWatch.StreamingList {
		opts.ListWatch.StreamingList = p.PrefersStreamingList()
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	prefix := "mirror: reflector: "
	if opts.Name != "" {
		logger = logger.With("reflector", opts.Name)
		prefix = fmt.Sprintf("mirror: reflector %q: ", opts.Name)
	}
	r := &Reflector[T]{
		lw:      lw,
		store:   store,
		opts:    opts,
		logger:  logger,
		prefix:  prefix,
		onError: opts.ErrorHandler,
		backoff: backoff{
			initial: opts.ListWatch.InitialBackoff,
			max:     opts.ListWatch.MaxBackoff,
			reset:   opts.ListWatch.BackoffReset,
			jitter:  opts.ListWatch.Jitter,
		},
	}
	if r.onError == nil {
		r.onError = func(err error) { r.logs.logError(logger, "mirror: reflector error", err) }
	}
	r.keyOnly, _ = store.(KeyOnlyDeleter[T])
	r.evicter, _ = store.(Evicter[T])
	r.events, _ = store.(eventStore[T])
	r.applier, _ = store.(listApplier[T])
	r.chunks, _ = lw.(source.ChunkLister[T])
	return r
}

// lastVersion returns the version of the last list or watch event the
// Reflector handed to the store; "" before the first list.
func (r *Reflector[T]) lastVersion() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastRV
}

// lastFailure returns the last failure to list or watch, if it is not
// over (see Freshness.Err).
func (r *Reflector[T]) lastFailure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failure
}

// Stats returns the Reflector's counters, read one by one.
func (r *Reflector[T]) Stats() ReflectorStats {
	c := &r.stats
	return ReflectorStats{
		Lists:               c.lists.Load(),
		Relists:             c.relists.Load(),
		RelistsExpired:      c.relistsExpired.Load(),
		RelistsAfterError:   c.relistsAfterError.Load(),
		Watches:             c.watches.Load(),
		WatchRestarts:       c.watchRestarts.Load(),
		RestartsClosed:      c.restartsClosed.Load(),
		RestartsShort:       c.restartsShort.Load(),
		RestartsUnavailable: c.restartsUnavailable.Load(),
		Events:              c.events.Load(),
		Errors:              c.errors.Load(),
		ListErrors:          c.listErrors.Load(),
		WatchErrors:         c.watchErrors.Load(),
		Skipped:             c.skipped.Load(),
		StoreErrors:         c.storeErrors.Load(),
	}
}

// Run lists and watches until ctx is done, and returns once every
// goroutine it started has stopped and it no longer uses the store. A
// second call reports an error wrapping ErrStarted and returns at once.
func (r *Reflector[T]) Run(ctx context.Context) {
	if !r.started.CompareAndSwap(false, true) {
		r.report(r.errorf("Run: %w", ErrStarted))
		return
	}
	defer r.startStamps()()
	r.listCause = ListInitial
	r.logger.Debug("reflector started")
	defer r.logger.Debug("reflector stopped")
	for ctx.Err() == nil {
		relistNow := r.listAndWatch(ctx)
		// Only the first watch may resume: from here on the store holds
		// what lists make of it.
		r.resumed = nil
		if ctx.Err() != nil {
			return
		}
		if relisting := r.relisting; relisting != nil {
			r.relisting = nil
			relisting()
		}
		if !relistNow && !r.pause(ctx) {
			return
		}
	}
}

// resumeFrom makes Run start by watching from rv, as if a list at rv had
// been handed to the store (which holds that state already), and call
// resumed once that watch is open. If the source no longer has rv, Run
// calls relisting, if not nil, then lists as usual: the list is then a
// relist against the state the store holds. It must be called before Run.
func (r *Reflector[T]) resumeFrom(rv string, resumed, relisting func()) {
	r.mu.Lock()
	r.lastRV = rv
	r.mu.Unlock()
	r.resumed, r.relisting = resumed, relisting
}

// listAndWatch gets the source's state into the store, unless the store
// holds it already (resumeFrom), then watches until a relist is needed. It
// returns whether that relist may start at once rather than after a pause.
func (r *Reflector[T]) listAndWatch(ctx context.Context) (relistNow bool) {
	var w source.Watcher[T]
	if r.resumed == nil {
		var ok bool
		if w, ok = r.sync(ctx); !ok {
			return false
		}
		// The list replaced what the store held, the part of a change
		// with the rest.
		r.change = openChange{}
	}
	stopResync := r.startResync(ctx)
	defer stopResync()
	return r.watch(ctx, w)
}

// startResync starts calling the store's Resync every ResyncPeriod and
// returns a function that stops it and waits until it stopped.
func (r *Reflector[T]) startResync(ctx context.Context) (stop func()) {
	if r.opts.ResyncPeriod <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(r.opts.ResyncPeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if r.opts.ShouldResync != nil && !r.opts.ShouldResync() {
				continue
			}
			r.lockStore()
			err := r.store.Resync()
			r.unlockStore()
			if err != nil {
				r.stats.storeErrors.Add(1)
				r.report(r.errorf("resync: %w", err))
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// lockStore and unlockStore bracket every call to the store. They lock
// storeMu only if a resync goroutine may call the store too: every event
// goes through here, and an uncontended lock still costs a good share of
// what the Reflector spends on one.
func (r *Reflector[T]) lockStore() {
	if r.opts.ResyncPeriod > 0 {
		r.storeMu.Lock()
	}
}

func (r *Reflector[T]) unlockStore() {
	if r.opts.ResyncPeriod > 0 {
		r.storeMu.Unlock()
	}
}

// pause waits for the next backoff delay, counted from the start of the
// attempt that failed. It returns false if ctx ended first.
func (r *Reflector[T]) pause(ctx context.Context) bool {
	now := time.Now()
	d := r.backoff.next(now, now.Sub(r.attemptStart))
	r.logger.Debug("backing off", "pause", d)
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (r *Reflector[T]) setVersionGone() {
	r.mu.Lock()
	r.versionGone = true
	r.mu.Unlock()
}

// report hands err to the error handler, one call at a time. An error
// whose message is longer than a few KB (the failures of many objects of
// one list, joined) reaches it wrapped, its message cut; errors.Is and
// errors.As see through the wrapping.
func (r *Reflector[T]) report(err error) {
	r.stats.errors.Add(1)
	err = bounded(err)
	r.reportMu.Lock()
	defer r.reportMu.Unlock()
	r.onError(err)
}

// reportSkipped reports err, about an object the source could not
// produce, unless it is an *ObjectError for a state of an object reported
// before, by a watch or by an earlier list: a relist meets a value that
// does not decode again and again, and one report per value is enough.
// listed, if not nil, collects the objects a list in progress skipped.
func (r *Reflector[T]) reportSkipped(err error, listed map[objectRef]struct{}) {
	var oe *ObjectError
	if !errors.As(err, &oe) || oe.ResourceVersion == "" {
		r.stats.skipped.Add(1)
		r.report(err)
		return
	}
	ref := objectRef{oe.Key, oe.ResourceVersion}
	if listed != nil {
		listed[ref] = struct{}{}
	}
	if _, ok := r.skipped[ref]; ok {
		return
	}
	if r.skipped == nil || len(r.skipped) >= maxSkipped {
		r.skipped = make(map[objectRef]struct{})
	}
	r.skipped[ref] = struct{}{}
	r.stats.skipped.Add(1)
	r.report(err)
}

// errorf formats an error that names the Reflector.
func (r *Reflector[T]) errorf(format string, args ...any) error {
	return fmt.Errorf(r.prefix+format, args...)
}

// isGone reports whether err says a resource version can no longer be
// served: the Reflector has to list again.
func isGone(err error) bool {
	return errors.Is(err, source.ErrExpired) || errors.Is(err, source.ErrTooLargeResourceVersion)
}
