package reconcile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/shard"
	"github.com/listwatch/mirror/workqueue"
)

// Options configures a Loop. The zero value is a loop of one worker, with
// the queue's defaults, that retries a failing key until it succeeds and
// logs failures through slog.Default().
type Options struct {
	// Name names the loop in its errors and logs, the handlers Watch
	// registers (unless given a name of their own) and the queue's
	// metrics (unless Queue.Name is set).
	Name string
	// Workers is how many keys are reconciled at once. Zero or less
	// means 1.
	Workers int
	// Queue configures the loop's queue: aging, per-key backoff, metrics.
	Queue workqueue.Options
	// MaxRetries bounds the retries of a failing key. Zero or less, the
	// default, means no bound: the key is retried, after the queue's
	// backoff, until it succeeds. A positive MaxRetries gives up on a key
	// that fails MaxRetries+1 times in a row: its last *Error has Dropped
	// set, and the key is forgotten until a change queues it again.
	MaxRetries int
	// Priority ranks the key of a watched change by the change's origin.
	// Nil means DefaultPriority.
	Priority func(mirror.Origin) workqueue.Priority
	// ErrorHandler, if not nil, is called with an *Error[K] for each
	// failed Reconcile, from the worker, once the key has been let go of.
	// Nil logs the failure through Logger at Error level, with the
	// stack of a key's first panic (see Error.Err), cut to a few KB.
	ErrorHandler func(error)
	// Logger is where failures are logged when ErrorHandler is nil. Nil
	// means slog.Default().
	Logger *slog.Logger

	// Shards, if not nil, makes the loop one replica of a sharded
	// controller: it reconciles only the keys of the shards the member
	// holds, each only while the member grants it (see shard.Member.Hold),
	// with the claim's shard.Token in Reconcile's ctx. A watched change of
	// a key in another shard is not queued; the keys of a shard the member
	// gains (those in the watched informers' caches, and those seen deleted
	// within twice the lease's TTL) are queued at background priority; the
	// queued keys of a shard it loses are dropped, and the ctx of its
	// Reconcile calls in progress ends, before the shard is released.
	// The loop does not run the member: run it beside the loop. The
	// informers run on every replica, so a replica that gains a shard
	// lists nothing.
	Shards *shard.Member
	// ShardKey places a key in a shard by its 64-bit hash. Nil means
	// KeyHash. Every replica must use the same. Where the server shards
	// the caches too (k8s.ShardedListWatcher places objects by the hash of
	// their UID), place a key by its cached object's k8s.ShardHash, so
	// that a replica reconciles the objects it caches.
	ShardKey func(key any) uint64
}

// Loop is a reconcile loop: a queue of keys, fed by the informers it
// watches (see Watch) and by its callers (see Queue), and workers that
// call a Reconciler for each key. Make one with New; it runs once, with
// Run. It is safe for concurrent use.
type Loop[K comparable] struct {
	r        Reconciler[K]
	opts     Options
	priority func(mirror.Origin) workqueue.Priority
	q        *workqueue.Queue[K]

	sh *sharding[K] // nil unless Options.Shards is set

	mu      sync.Mutex
	started bool
	watched []watch[K]
	stacked map[K]struct{} // keys whose panic's stack was reported
}

// watch is a handler Watch registered, to wait for and to remove.
type watch[K comparable] struct {
	reg    *mirror.Registration
	remove func()
	keys   func(yield func(K) bool) // the keys in the informer's cache
}

// New returns a loop that reconciles keys with r, which must not be nil.
// Nothing runs until Run.
func New[K comparable](r Reconciler[K], opts Options) *Loop[K] {
	if opts.Workers <= 0 {
		opts.Workers = 1
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Queue.Name == "" {
		opts.Queue.Name = opts.Name
	}
	l := &Loop[K]{r: r, opts: opts, priority: opts.Priority, q: workqueue.New[K](opts.Queue), stacked: map[K]struct{}{}, sh: newSharding[K](opts)}
	if l.priority == nil {
		l.priority = DefaultPriority
	}
	return l
}

// DefaultPriority is the priority a Loop gives the key of a change from
// origin when Options.Priority is nil: workqueue.PriorityLive for a live
// change, workqueue.PriorityResync for a resync, and
// workqueue.PriorityBackground for the initial list and a relist. A
// handler that feeds a workqueue of its own can use it too.
func DefaultPriority(o mirror.Origin) workqueue.Priority {
	switch o {
	case mirror.OriginLive:
		return workqueue.PriorityLive
	case mirror.OriginResync:
		return workqueue.PriorityResync
	}
	return workqueue.PriorityBackground
}

// Queue returns the loop's queue, for callers that queue keys of their
// own: keys mapped from the objects of an informer of another key type,
// say, or a periodic sweep. Run shuts it down when it returns, and then it
// takes no more keys.
func (l *Loop[K]) Queue() *workqueue.Queue[K] { return l.q }

// Watch registers a handler with inf that queues the key of each change
// at the priority of its origin (see Options.Priority), and returns its
// registration. opts are the handler's; an empty opts.Name becomes the
// loop's Name. Run waits for every watched handler to be handed its
// informer's initial list before it starts the workers, and removes the
// handlers when it returns.
//
// Watch must be called before Run: afterwards it returns ErrStarted. One
// loop may watch any number of informers of its key type, whatever their
// object types.
func Watch[K comparable, T any](l *Loop[K], inf *mirror.Informer[K, T], opts mirror.HandlerOptions) (*mirror.Registration, error) {
	if opts.Name == "" {
		opts.Name = l.opts.Name
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return nil, ErrStarted
	}
	q, priority, sh := l.q, l.priority, l.sh
	reg, err := inf.AddChangeHandler(func(c mirror.Change[K, T]) {
		if sh != nil && !sh.owns(c.Key) {
			if c.Type == mirror.Deleted {
				sh.park(c.Key)
			}
			return
		}
		q.AddWithPriority(c.Key, priority(c.Origin))
	}, opts)
	if err != nil {
		return nil, fmt.Errorf("reconcile: watch: %w", err)
	}
	l.watched = append(l.watched, watch[K]{
		reg:    reg,
		remove: func() { _ = inf.RemoveEventHandler(reg) },
		keys: func(yield func(K) bool) {
			for k := range inf.All() {
				if !yield(k) {
					return
				}
			}
		},
	})
	return reg, nil
}

// Run waits for the watched handlers to be handed their informers'
// initial lists (see mirror.WaitForCacheSync), then starts Options.Workers
// workers, which reconcile the queued keys until ctx ends. The keys queued
// meanwhile wait, ranked by priority, for the workers.
//
// When ctx ends, Run shuts the queue down (the keys still queued are
// dropped), waits for the calls of Reconcile in progress to return (their
// ctx is ctx, ended), removes the watched handlers from their informers,
// and returns nil; no goroutine it started is left. If an informer gives
// up before its first sync (its source refused it for good: the error
// wraps mirror.ErrPermanent), Run stops the same way and returns that
// error. A loop runs once: a second call returns ErrStarted.
func (l *Loop[K]) Run(ctx context.Context) error {
	l.mu.Lock()
	if l.started {
		l.mu.Unlock()
		return ErrStarted
	}
	l.started = true
	watched := l.watched
	l.mu.Unlock()

	var fillers sync.WaitGroup
	if l.sh != nil {
		keys := make([]func(yield func(K) bool), len(watched))
		for i, w := range watched {
			keys[i] = w.keys
		}
		fctx, stop := context.WithCancel(ctx)
		defer fillers.Wait()
		defer stop()
		unsubscribe := l.sh.m.Subscribe(l.sh.gain)
		defer unsubscribe()
		fillers.Go(func() { l.sh.fill(fctx, l.q, keys) })
	}
	waiters := make([]mirror.SyncWaiter, len(watched))
	for i, w := range watched {
		waiters[i] = w.reg
	}
	err := mirror.WaitForCacheSync(ctx, waiters...)
	switch {
	case ctx.Err() != nil:
		err = nil
	case err != nil:
		err = fmt.Errorf("%s: waiting for the informers' first list: %w", l.what(), err)
	default:
		var wg sync.WaitGroup
		for range l.opts.Workers {
			wg.Go(func() { l.work(ctx) })
		}
		<-ctx.Done()
		l.q.ShutDown()
		wg.Wait()
	}
	l.q.ShutDown()
	for _, w := range watched {
		w.remove()
	}
	return err
}

// work is a worker: it reconciles keys until the queue is shut down or
// ctx ends.
func (l *Loop[K]) work(ctx context.Context) {
	for {
		key, err := l.q.Get(ctx)
		if err != nil {
			return
		}
		rctx, done := ctx, func() {}
		if l.sh != nil {
			var ok bool
			if rctx, done, ok = l.hold(ctx, key); !ok {
				continue
			}
		}
		e := l.process(ctx, rctx, key)
		done()
		if e != nil {
			l.report(e)
		}
	}
}

// process reconciles key with rctx (ctx, or a shard's grant derived from
// it), queues it again as the outcome asks, and lets go of it; it returns
// the failure to report, if any.
func (l *Loop[K]) process(ctx, rctx context.Context, key K) *Error[K] {
	defer l.q.Done(key)
	res, err := l.call(rctx, key)
	if err == nil {
		l.forget(key)
		if res.RequeueAfter > 0 {
			l.q.AddAfter(key, res.RequeueAfter)
		}
		return nil
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil // the loop is stopping, not failing
	}
	if rctx.Err() != nil && errors.Is(err, rctx.Err()) && l.sh != nil {
		// The member stopped the work: its shard is leaving, or its
		// lease could not be renewed in time, and may yet be.
		l.letGo(key, l.sh.hash(key))
		return nil
	}
	e := &Error[K]{Loop: l.opts.Name, Key: key, Err: err, Retries: l.q.NumRequeues(key)}
	switch {
	case errors.Is(err, ErrTerminal):
		e.Dropped = true
		l.forget(key)
	case l.opts.MaxRetries > 0 && e.Retries >= l.opts.MaxRetries:
		e.Dropped = true
		l.forget(key)
	default:
		l.q.AddRateLimited(key) // before Done, which would forget the count
	}
	return e
}

// forget resets key's retry count and its panic's reported stack: the
// key succeeded, or is dropped.
func (l *Loop[K]) forget(key K) {
	l.q.Forget(key)
	l.mu.Lock()
	delete(l.stacked, key)
	l.mu.Unlock()
}

// call calls Reconcile and turns a panic into a *mirror.PanicError, with
// the stack on the key's first panic only (see forget).
func (l *Loop[K]) call(ctx context.Context, key K) (res Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			p := &mirror.PanicError{Value: v}
			l.mu.Lock()
			_, reported := l.stacked[key]
			l.stacked[key] = struct{}{}
			l.mu.Unlock()
			if !reported {
				// Stack from here still shows where the panic happened.
				p.Stack = debug.Stack()
			}
			err = p
		}
	}()
	return l.r.Reconcile(ctx, key)
}

// what names the loop in errors.
func (l *Loop[K]) what() string {
	if l.opts.Name == "" {
		return "reconcile"
	}
	return fmt.Sprintf("reconcile %q", l.opts.Name)
}

func (l *Loop[K]) report(e *Error[K]) {
	if l.opts.ErrorHandler != nil {
		l.opts.ErrorHandler(e)
		return
	}
	msg := "reconcile failed"
	switch {
	case e.gaveUp():
		msg = "reconcile gave up on key"
	case e.Dropped:
		msg = "reconcile dropped key"
	}
	attrs := []slog.Attr{
		slog.String("loop", l.opts.Name),
		keyAttr(e.Key),
		slog.Int("attempts", e.Retries+1),
		slog.Bool("dropped", e.Dropped),
		slog.String("err", errText(e.Err)),
	}
	if p, ok := e.Err.(*mirror.PanicError); ok && len(p.Stack) > 0 {
		attrs = append(attrs, slog.String("stack", stackText(p.Stack)))
	}
	l.opts.Logger.LogAttrs(context.Background(), slog.LevelError, msg, attrs...)
}

// keyAttr is key as a log attribute: as it is, unless its text is longer
// than maxKeyText, then that text cut (see keyText).
func keyAttr(key any) slog.Attr {
	if text := keyText(key); text != fmt.Sprint(key) {
		return slog.String("key", text)
	}
	return slog.Any("key", key)
}

// maxLogStack caps the stack in a log line, so that the line stays under
// 4 KB; the frames nearest the panic come first, and tell where it was.
// An ErrorHandler gets the whole stack (Error.Err's Stack).
const maxLogStack = 2048

// stackText is stack cut, at the end of a line, to maxLogStack bytes,
// saying how much was left out.
func stackText(stack []byte) string {
	if len(stack) <= maxLogStack {
		return string(stack)
	}
	n := bytes.LastIndexByte(stack[:maxLogStack], '\n') + 1
	return string(stack[:n]) + "…[" + strconv.Itoa(len(stack)-n) + " bytes cut]"
}
