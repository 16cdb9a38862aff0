package mirror

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// QueueKind selects the queue between an Informer's Reflector and its
// cache.
type QueueKind uint8

const (
	// InOrderQueue, the default, applies changes in the order the source
	// produced them, across keys, and applies a relist as one step. Its
	// lock is not held while a batch is applied.
	InOrderQueue QueueKind = iota
	// DeltaFIFOQueue is client-go's classic per-key queue: changes are
	// grouped by key and keys are processed in order of first arrival.
	// Its lock is held while a batch is applied, because it computes a
	// relist's tombstones from the cache.
	DeltaFIFOQueue
)

// ErrStarted is returned by Informer.Run when the informer was run before.
var ErrStarted = errors.New("mirror: informer already started")

// InformerOptions configures an Informer. KeyFunc is required; every
// other field has a useful zero value.
type InformerOptions[K comparable, T any] struct {
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

	// Queue selects the queue; the zero value is InOrderQueue.
	Queue QueueKind

	// BatchSize is the most queue entries applied in one step; zero
	// means 256.
	BatchSize int

	// ResourceVersion, if set, returns an object's version. A relist
	// that finds an object at the version already cached then offers it
	// only to handlers due for a resync, like client-go; without it, every
	// relisted object is delivered to every handler as an update.
	ResourceVersion func(obj T) string

	// Reflector tunes listing and watching (page size, backoff, watch
	// timeout, streaming lists). Its ResyncPeriod, ShouldResync,
	// ErrorHandler and Logger are set by the informer.
	Reflector ReflectorOptions

	// ErrorHandler sees every failure: failed lists and watches, objects
	// skipped (*ObjectError, *KeyError, *IndexError) and handler panics
	// (*HandlerPanicError). Nil means logging them at Warn through Logger.
	ErrorHandler func(err error)

	// Logger receives the informer's logs; nil discards them.
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
	lw      ListWatcher[T]
	opts    InformerOptions[K, T]
	logger  *slog.Logger
	cache   *Indexer[K, T]
	proc    processor[K, T]
	inOrder *inOrderQueue[K, T] // one of inOrder
	fifo    *DeltaFIFO[K, T]    // and fifo

	// applyMu is held while popped entries are applied to the cache and
	// distributed, and while a late handler's replay is taken, so that a
	// late handler sees each change exactly once: in its replay or after.
	applyMu sync.Mutex

	synced     atomic.Bool
	syncedCh   chan struct{}
	syncedOnce sync.Once

	started   atomic.Bool
	reflector atomic.Pointer[Reflector[T]]
	// resyncPeriod is the informer's resync check period, fixed at Run.
	resyncPeriod atomic.Int64
}

// NewInformer returns an Informer over lw. It panics if opts.KeyFunc is
// nil, a programming error.
func NewInformer[K comparable, T any](lw ListWatcher[T], opts InformerOptions[K, T]) *Informer[K, T] {
	if opts.KeyFunc == nil {
		panic("mirror: NewInformer needs a KeyFunc")
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 256
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	inf := &Informer[K, T]{
		lw:       lw,
		opts:     opts,
		logger:   logger,
		cache:    NewIndexer(opts.KeyFunc, opts.Indexers),
		syncedCh: make(chan struct{}),
	}
	inf.proc.report = inf.report
	switch opts.Queue {
	case DeltaFIFOQueue:
		inf.fifo = NewDeltaFIFO(DeltaFIFOOptions[K, T]{
			KeyFunc:      opts.KeyFunc,
			KnownObjects: inf.cache,
			// Replaced, not Sync, so that objects a relist finds
			// changed reach every handler, not only those due for a
			// resync.
			EmitDeltaTypeReplaced: true,
			Transformer:           opts.Transform,
		})
	default:
		inf.inOrder = newInOrderQueue(opts.KeyFunc, opts.Transform)
	}
	return inf
}

func (inf *Informer[K, T]) report(err error) {
	if inf.opts.ErrorHandler != nil {
		inf.opts.ErrorHandler(err)
		return
	}
	inf.logger.Warn("mirror: informer", "err", err)
}

// Registration is a handler's registration with an Informer.
type Registration struct {
	l interface {
		hasSynced() bool
		syncedChan() <-chan struct{}
		backlog() int
	}
	remove func(ctx context.Context, wait bool) error
}

// HasSynced reports whether the informer has synced and this handler has
// been handed every object of the initial list (or, for a handler added
// late, of its replay of the cache). It never goes back to false.
func (r *Registration) HasSynced() bool { return r.l.hasSynced() }

// Synced returns a channel that is closed once HasSynced is true.
func (r *Registration) Synced() <-chan struct{} { return r.l.syncedChan() }

// Backlog returns the number of notifications waiting for the handler.
func (r *Registration) Backlog() int { return r.l.backlog() }

func (l *listener[K, T]) syncedChan() <-chan struct{} {
	// The channel closes from the listener's goroutine; poke it in case
	// the upstream sync happened with nothing left to deliver.
	if !l.hasSynced() {
		l.wakeUp()
	}
	return l.syncedCh
}

// AddEventHandler registers h. It may be called before or after Run. A
// handler added to a running informer first receives every cached object
// as OnAdd(obj, true), then every later change.
func (inf *Informer[K, T]) AddEventHandler(h Handler[T], opts HandlerOptions) (*Registration, error) {
	if h == nil {
		return nil, errors.New("mirror: AddEventHandler with a nil handler")
	}
	period := opts.ResyncPeriod
	if period == 0 {
		period = inf.opts.ResyncPeriod
	}
	if period < 0 {
		period = 0
	}
	if period > 0 && period < minResyncPeriod {
		period = minResyncPeriod
	}
	if running := time.Duration(inf.resyncPeriod.Load()); inf.started.Load() && period > 0 && period < running {
		// The resync timer is already set; it cannot tick faster for
		// this handler.
		inf.logger.Warn("mirror: handler resync period raised to the informer's", "requested", period, "used", running)
		period = running
	}
	l := newListener[K](h, period, opts.MaxBacklog, inf.report, inf.HasSynced)
	l.nextResync = time.Now().Add(period)

	inf.applyMu.Lock()
	l.follow(&inf.proc.feed)
	if inf.started.Load() {
		for k, obj := range inf.cache.All() {
			l.pushOwn(notification[K, T]{kind: notifyAdd, key: k, obj: obj, initial: true}, l.pos.seq)
		}
	}
	inf.proc.add(l)
	inf.applyMu.Unlock()

	reg := &Registration{l: l}
	reg.remove = func(ctx context.Context, wait bool) error {
		if !inf.proc.remove(l) {
			return errors.New("mirror: handler not registered")
		}
		if !wait || !inf.started.Load() {
			return nil
		}
		select {
		case <-l.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return reg, nil
}

// RemoveEventHandler unregisters a handler. Its pending notifications are
// dropped; a call in progress finishes on its own.
func (inf *Informer[K, T]) RemoveEventHandler(r *Registration) error {
	return r.remove(context.Background(), false)
}

// RemoveEventHandlerAndWait unregisters a handler and waits until a call
// in progress has returned, or ctx ends.
func (inf *Informer[K, T]) RemoveEventHandlerAndWait(ctx context.Context, r *Registration) error {
	return r.remove(ctx, true)
}

// Run lists, watches and delivers until ctx ends, then returns nil once
// every goroutine it started has stopped. An Informer runs once: a second
// call returns ErrStarted.
func (inf *Informer[K, T]) Run(ctx context.Context) error {
	if !inf.started.CompareAndSwap(false, true) {
		return ErrStarted
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	period := inf.minResyncPeriod()
	inf.resyncPeriod.Store(int64(period))
	ropts := inf.opts.Reflector
	ropts.ResyncPeriod = period
	ropts.ShouldResync = func() bool { return inf.proc.shouldResync(time.Now()) }
	ropts.ErrorHandler = inf.report
	ropts.Logger = inf.logger
	var store ReflectorStore[T] = inf.inOrder
	if inf.fifo != nil {
		store = fifoSyncWatch[K, T]{inf}
	}
	r := NewReflector(inf.lw, store, ropts)
	inf.reflector.Store(r)

	var wg sync.WaitGroup
	inf.proc.run(ctx, &wg)
	wg.Go(func() { r.Run(ctx) })
	wg.Go(func() { inf.applyLoop(ctx) })
	<-ctx.Done()
	wg.Wait()
	return nil
}

// minResyncPeriod is the shortest resync period among the handlers
// registered before Run, or the informer's default.
func (inf *Informer[K, T]) minResyncPeriod() time.Duration {
	inf.proc.mu.RLock()
	defer inf.proc.mu.RUnlock()
	var min time.Duration
	for _, l := range inf.proc.listeners {
		if l.resyncPeriod > 0 && (min == 0 || l.resyncPeriod < min) {
			min = l.resyncPeriod
		}
	}
	if min == 0 && inf.opts.ResyncPeriod > 0 {
		min = max(inf.opts.ResyncPeriod, minResyncPeriod)
	}
	return min
}

// afterFunc is context.AfterFunc whose stop also waits for f to return if
// it has started, so that f's goroutine does not outlive the caller.
func afterFunc(ctx context.Context, f func()) (stop func()) {
	done := make(chan struct{})
	cancel := context.AfterFunc(ctx, func() {
		defer close(done)
		f()
	})
	return func() {
		if !cancel() {
			<-done
		}
	}
}

// applyLoop pops and applies batches until ctx ends.
func (inf *Informer[K, T]) applyLoop(ctx context.Context) {
	if inf.fifo != nil {
		for {
			err := inf.fifo.PopBatch(ctx, inf.opts.BatchSize, inf.applyDeltas)
			if ctx.Err() != nil || errors.Is(err, ErrClosed) {
				return
			}
			if err != nil {
				inf.report(err)
			}
			inf.checkFIFOSynced()
		}
	}
	defer afterFunc(ctx, inf.inOrder.interrupt)()
	batch := make([]inOrderEntry[K, T], 0, inf.opts.BatchSize)
	for {
		var err error
		batch, err = inf.inOrder.popBatch(ctx, inf.opts.BatchSize, batch[:0])
		if err != nil {
			return
		}
		inf.applyEntries(batch)
		clear(batch) // drop references to popped objects
	}
}

// applyDeltas applies a DeltaFIFO batch; it runs with the queue's lock
// held, so a relist cannot compute tombstones from a cache that has not
// yet applied these deltas.
func (inf *Informer[K, T]) applyDeltas(batch []QueuedDeltas[K, T]) error {
	inf.applyMu.Lock()
	defer inf.applyMu.Unlock()
	for _, item := range batch {
		for _, d := range item.Deltas {
			inf.applyDelta(item.Key, d, item.IsInInitialList)
		}
	}
	inf.proc.publish()
	return nil
}

// applyEntries applies an in-order batch. The queue's lock is not held:
// only this goroutine writes the cache, so each entry sees the cache as
// every earlier entry left it.
func (inf *Informer[K, T]) applyEntries(batch []inOrderEntry[K, T]) {
	inf.applyMu.Lock()
	defer inf.applyMu.Unlock()
	for i := range batch {
		e := &batch[i]
		initial := e.completesSync && !inf.synced.Load()
		switch e.kind {
		case entryAdded:
			inf.applyDelta(e.key, Delta[T]{Type: Added, Object: e.obj}, false)
		case entryUpdated:
			inf.applyDelta(e.key, Delta[T]{Type: Updated, Object: e.obj}, false)
		case entryDeleted:
			inf.applyDelete(e.key, Delta[T]{Type: Deleted, Object: e.obj}, false)
		case entryDeletedKeyOnly:
			inf.applyDelete(e.key, Delta[T]{Type: Deleted, Object: e.obj}, true)
		case entryReplace:
			inf.applyReplace(e.list, initial)
		case entryResync:
			for k, obj := range inf.cache.All() {
				inf.proc.distribute(notification[K, T]{kind: notifyUpdate, key: k, old: obj, obj: obj}, true)
			}
		}
		if e.completesSync {
			// The listeners must count the initial-list adds before
			// they may see the informer synced.
			inf.proc.publish()
			inf.markSynced()
		}
	}
	inf.proc.publish()
}

// applyReplace applies a relist as one step: deletes for every cached key
// it does not list, then adds and updates.
func (inf *Informer[K, T]) applyReplace(list *relist[K, T], initial bool) {
	if inf.cache.Len() > 0 {
		inf.deleteUnlisted(list)
	}
	// What is left are listed keys: make room for the whole list at once
	// rather than growing the cache step by step as it fills.
	inf.cache.reserve(list.len())
	for k, obj := range list.all() {
		inf.applyDelta(k, Delta[T]{Type: Replaced, Object: obj}, initial)
	}
}

// deleteUnlisted deletes every cached key that list lacks and tells the
// handlers that its final state is unknown.
func (inf *Informer[K, T]) deleteUnlisted(list *relist[K, T]) {
	listed := make(map[K]struct{}, list.len()+len(list.kept))
	for k := range list.all() {
		listed[k] = struct{}{}
	}
	for _, k := range list.kept {
		listed[k] = struct{}{}
	}
	var gone []K
	for k := range inf.cache.All() {
		if _, ok := listed[k]; !ok {
			gone = append(gone, k)
		}
	}
	for _, k := range gone {
		if old, ok := inf.cache.DeleteKey(k); ok {
			inf.proc.distribute(notification[K, T]{kind: notifyDelete, key: k, obj: old, unknown: true}, false)
		}
	}
}

// applyDelta updates the cache with one delta and notifies the handlers.
func (inf *Informer[K, T]) applyDelta(key K, d Delta[T], initial bool) {
	switch d.Type {
	case Deleted:
		inf.applyDelete(key, d, false)
	default: // Added, Updated, Replaced, Sync
		old, existed, err := inf.cache.Set(key, d.Object)
		if err != nil {
			inf.report(err)
			return
		}
		if !existed {
			inf.proc.distribute(notification[K, T]{kind: notifyAdd, key: key, obj: d.Object, initial: initial}, false)
			return
		}
		isSync := d.Type == Sync ||
			(d.Type == Replaced && inf.opts.ResourceVersion != nil &&
				inf.opts.ResourceVersion(old) == inf.opts.ResourceVersion(d.Object))
		inf.proc.distribute(notification[K, T]{kind: notifyUpdate, key: key, old: old, obj: d.Object}, isSync)
	}
}

// applyDelete removes key from the cache and notifies the handlers of the
// Deleted delta d. keyOnly says that d's object holds only the key.
func (inf *Informer[K, T]) applyDelete(key K, d Delta[T], keyOnly bool) {
	old, existed := inf.cache.DeleteKey(key)
	if !existed {
		// Never applied here, so no handler has seen it: there is
		// nothing to delete. (The in-order queue relies on this; it
		// queues deletes without knowing the cache.)
		return
	}
	obj := d.Object
	if d.Tombstone || keyOnly {
		// The cache holds the last state this side applied. For a
		// deletion the watch saw, that is the final state: every
		// earlier change to the key was applied before it.
		obj = old
	}
	inf.proc.distribute(notification[K, T]{kind: notifyDelete, key: key, obj: obj, unknown: d.Tombstone}, false)
}

func (inf *Informer[K, T]) markSynced() {
	if inf.synced.Load() {
		return
	}
	inf.syncedOnce.Do(func() {
		inf.synced.Store(true)
		close(inf.syncedCh)
	})
	inf.proc.signalSynced()
}

func (inf *Informer[K, T]) checkFIFOSynced() {
	// HasSynced alone turns true as the last initial key is popped,
	// before applyDeltas has applied it; processedInitial waits for that.
	if inf.synced.Load() || !inf.fifo.processedInitial() {
		return
	}
	// Under applyMu, the listeners have been told of every notification
	// the initial list made.
	inf.applyMu.Lock()
	defer inf.applyMu.Unlock()
	inf.markSynced()
}

// fifoSyncWatch is the Reflector's view of a DeltaFIFO: it notices when
// the queue becomes synced without anything to pop (an empty first list).
type fifoSyncWatch[K comparable, T any] struct{ inf *Informer[K, T] }

func (s fifoSyncWatch[K, T]) Add(obj T) error    { return s.after(s.inf.fifo.Add(obj)) }
func (s fifoSyncWatch[K, T]) Update(obj T) error { return s.after(s.inf.fifo.Update(obj)) }
func (s fifoSyncWatch[K, T]) Delete(obj T) error { return s.after(s.inf.fifo.Delete(obj)) }
func (s fifoSyncWatch[K, T]) Resync() error      { return s.inf.fifo.Resync() }
func (s fifoSyncWatch[K, T]) Replace(list []T, rv string) error {
	return s.after(s.inf.fifo.Replace(list, rv))
}
func (s fifoSyncWatch[K, T]) DeleteKeyOnly(obj T) error {
	return s.after(s.inf.fifo.DeleteKeyOnly(obj))
}

func (s fifoSyncWatch[K, T]) after(err error) error {
	s.inf.checkFIFOSynced()
	return err
}

// HasSynced reports whether the cache holds the whole initial list (or
// the informer has applied a change that came before any list). It never
// goes back to false.
func (inf *Informer[K, T]) HasSynced() bool { return inf.synced.Load() }

// Synced returns a channel that is closed once HasSynced is true.
func (inf *Informer[K, T]) Synced() <-chan struct{} { return inf.syncedCh }

// LastSyncResourceVersion returns the resource version of the last list
// or watch event the Reflector saw; empty before Run.
func (inf *Informer[K, T]) LastSyncResourceVersion() string {
	if r := inf.reflector.Load(); r != nil {
		return r.LastSyncResourceVersion()
	}
	return ""
}

// ReflectorStats returns the Reflector's counters; zero before Run.
func (inf *Informer[K, T]) ReflectorStats() ReflectorStats {
	if r := inf.reflector.Load(); r != nil {
		return r.Stats()
	}
	return ReflectorStats{}
}

// GetByKey returns the cached object with key.
func (inf *Informer[K, T]) GetByKey(key K) (T, bool) { return inf.cache.GetByKey(key) }

// Get returns the cached object with obj's key.
func (inf *Informer[K, T]) Get(obj T) (T, bool, error) { return inf.cache.Get(obj) }

// List returns every cached object, in no particular order.
func (inf *Informer[K, T]) List() []T { return inf.cache.List() }

// ListKeys returns every cached key, in no particular order.
func (inf *Informer[K, T]) ListKeys() []K { return inf.cache.ListKeys() }

// All yields every cached key and object, in no particular order, under
// the cache's read lock: the loop body must be short and must not wait on
// the informer.
func (inf *Informer[K, T]) All() iter.Seq2[K, T] { return inf.cache.All() }

// Len returns the number of cached objects.
func (inf *Informer[K, T]) Len() int { return inf.cache.Len() }

// ByIndex returns the cached objects whose index indexName has the value
// indexedValue.
func (inf *Informer[K, T]) ByIndex(indexName, indexedValue string) ([]T, error) {
	return inf.cache.ByIndex(indexName, indexedValue)
}

// IndexKeys returns the keys of the cached objects whose index indexName
// has the value indexedValue.
func (inf *Informer[K, T]) IndexKeys(indexName, indexedValue string) ([]K, error) {
	return inf.cache.IndexKeys(indexName, indexedValue)
}

// Syncer is anything with a channel that closes once it has synced:
// an Informer or a Registration.
type Syncer interface {
	Synced() <-chan struct{}
}

// WaitForCacheSync waits until every syncer has synced, or ctx ends (then
// it returns ctx.Err()).
func WaitForCacheSync(ctx context.Context, syncers ...Syncer) error {
	for _, s := range syncers {
		select {
		case <-s.Synced():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
