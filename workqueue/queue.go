package workqueue

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrShutdown is returned by Get once the queue is shut down: at once
// after ShutDown, and once the queue has drained after ShutDownWithDrain.
var ErrShutdown = errors.New("workqueue: shut down")

// Options configures a Queue. The zero value is usable: no name, aging
// after 30 s, backoff from 5 ms to 1000 s, no metrics.
type Options struct {
	// Name names the queue in metrics.
	Name string
	// MaxWait is the aging bound. A queued key that has waited this long
	// (give or take an eighth of it) is aged, and aged keys of a priority
	// below the highest queued get a share of the workers: at least one
	// key handed out in four is the oldest of them, the other three go by
	// priority. So under a stream of keys of higher priority that keeps
	// the workers busy, a key waits at most MaxWait and then four
	// hand-outs for itself and for each aged key older than it; and a key
	// of the highest priority queued is delayed by aging by at most one
	// hand-out. Zero means 30 s, and less than 8 ms counts as 8 ms; a
	// negative MaxWait turns aging off, and keys of lower priority then
	// wait for as long as keys of higher priority keep coming.
	MaxWait time.Duration
	// BaseDelay and MaxDelay shape the per-key exponential backoff of
	// AddRateLimited: a key's n-th retry since it was last forgotten (by
	// Forget, or by the queue a while after Done, see Queue) waits
	// BaseDelay·2ⁿ⁻¹, at most MaxDelay. Zero means 5 ms and 1000 s.
	// There is no queue-wide rate limit: a mass failure of many keys
	// retries each after its own backoff.
	BaseDelay, MaxDelay time.Duration
	// Metrics, if not nil, receives the queue's measurements; nil
	// measures nothing and costs nothing.
	Metrics Metrics
}

// The values Options' zero fields stand for.
const (
	// DefaultMaxWait is the aging bound, Options.MaxWait.
	DefaultMaxWait = 30 * time.Second
	// DefaultBaseDelay is the first retry's backoff, Options.BaseDelay.
	DefaultBaseDelay = 5 * time.Millisecond
	// DefaultMaxDelay bounds the backoff, Options.MaxDelay.
	DefaultMaxDelay = 1000 * time.Second
)

// Queue is a queue of keys for workers to process; make one with New. It
// is safe for concurrent use.
//
// A key is in the queue at most once: queued (waiting for a worker, at a
// priority), delayed (waiting out AddAfter's or AddRateLimited's delay
// before it is queued), or neither. Get hands a queued key to one worker,
// which calls Done when it has processed it; until then no other worker
// gets the key, and adding it again marks it to be queued again at Done.
//
// The queue's memory is bounded by the number of keys it holds (queued,
// delayed or in process) and of keys that failed recently, not by the
// keys it has seen: when Done lets go of a key that has a retry count
// (AddRateLimited since it was last forgotten), the queue keeps the count
// for at least a second and at most a second and MaxWait/4 (DefaultMaxWait/4
// without aging), so that an AddRateLimited called after Done backs off
// as one called before it does, and then forgets it; and the queue's
// tables shrink within two ticks of MaxWait/8 after a burst. So keys that
// failed and were never forgotten cost nothing once processed and that
// time has passed, where client-go's rate limiter remembers every failed
// key until Forget.
type Queue[K comparable] struct {
	mu sync.Mutex
	// cond is signalled when a key is queued, and broadcast when Gets
	// may have to return: at shutdown, when a drain has nothing left to
	// hand out, when a waiting Get's context ends.
	cond sync.Cond

	// The keys the queue holds, each with a record (keys.go).
	index map[K]int32
	recs  []rec[K]
	free  int32 // first free record, -1 if none; the free list runs through rec.heap
	peak  int   // the most keys held since the last tick

	// The ready set (ready.go).
	levels   []*level // highest priority first
	entries  int      // entries in the levels' FIFOs, stale ones included
	aging    bool
	ageCheck uint32 // no key ages before this tick
	// sinceAged counts the keys handed out since the last aged one that
	// was not of the highest priority queued, up to agedShare-1.
	sinceAged int

	// The tick (tick.go).
	tick       uint32 // ticks passed
	tickPeriod time.Duration
	tickTimer  *time.Timer
	tickArmed  bool

	// The retry counts kept after Done (keys.go): entries of records in
	// stRemembered, in the order Done let go of them, each with the tick
	// it did; a record is let go of keepTicks ticks after.
	remembered fifo
	keepTicks  uint32

	// The delayed keys (delayed.go).
	delayed      []delayedEntry // a heap, earliest first
	delaySeq     uint64
	delayTimer   *time.Timer
	delayArmedAt int64 // the time delayTimer is set for; noTimer if none
	baseDelay    time.Duration
	maxDelay     time.Duration
	epoch        time.Time // times are kept as nanoseconds since epoch

	nReady   int // keys queued
	nDelayed int // keys delayed
	nWorking int // keys in process
	nDirty   int // keys in process, to be queued again at Done
	adds     int64
	retries  int64

	// Shutdown (shutdown.go).
	closing  bool          // adds are ignored: ShutDown or ShutDownWithDrain was called
	shutdown bool          // Get hands out no more keys
	finished bool          // shut down and nothing in process
	dropped  bool          // ShutDown dropped queued keys
	drained  chan struct{} // closed when finished, once a drain waits for it

	sampling // metrics.go
}

// rec is the state of a key the queue holds.
type rec[K comparable] struct {
	key  K
	prio Priority // queued or delayed at, else handed out at
	// stamp is, with metrics, when the key was queued (stSampled) or
	// handed out, in nanoseconds since Queue.epoch.
	stamp int64
	gen   uint32 // counts the times the key was queued, to tell stale entries
	fails int32  // AddRateLimited calls since the key was forgotten
	// heap is the position in Queue.delayed while stDelayed, the tick at
	// which Done let go of the key while stRemembered, and the next free
	// record while free.
	heap  int32
	prev  int32 // the list of keys in process, oldest first (with metrics)
	next  int32
	state uint8
}

// Record states. stReady and stDelayed exclude each other; with
// stWorking, stReady marks a key to be queued again at Done, stDelayed one
// whose delay runs while it is processed. stRemembered stands alone: a
// key Done let go of, held only for its retry count.
const (
	stReady      = 1 << iota // queued
	stDelayed                // waiting out a delay
	stWorking                // handed out, not yet Done
	stSampled                // stamp is when it was queued, for the metrics
	stTimed                  // stamp is when it was handed out, exactly, for the metrics
	stRemembered             // let go of by Done, kept for its retry count
)

// New returns an empty queue.
func New[K comparable](opts Options) *Queue[K] {
	q := &Queue[K]{
		index:        make(map[K]int32),
		free:         -1,
		delayArmedAt: noTimer,
		baseDelay:    opts.BaseDelay,
		maxDelay:     opts.MaxDelay,
		epoch:        time.Now(),
	}
	q.workHead, q.workTail = -1, -1
	q.cond.L = &q.mu
	q.tickPeriod = DefaultMaxWait / agingSteps
	switch {
	case opts.MaxWait == 0:
		q.aging = true
	case opts.MaxWait > 0:
		q.aging = true
		q.tickPeriod = max(opts.MaxWait/agingSteps, minTick)
	}
	q.ageCheck = agingSteps
	q.sinceAged = agedShare - 1
	q.keepTicks = uint32(max(2, (keepFails+q.tickPeriod-1)/q.tickPeriod+1))
	if q.baseDelay <= 0 {
		q.baseDelay = DefaultBaseDelay
	}
	if q.maxDelay <= 0 {
		q.maxDelay = DefaultMaxDelay
	}
	q.maxDelay = max(q.maxDelay, q.baseDelay)
	if opts.Metrics != nil {
		q.startMetrics(opts.Name, opts.Metrics)
	}
	return q
}

// Add queues key at PriorityLive, as AddWithPriority does.
func (q *Queue[K]) Add(key K) { q.AddWithPriority(key, PriorityLive) }

// AddWithPriority queues key at priority p. A key already queued is not
// queued twice: if p is higher than its priority, the key is raised to p,
// behind the keys queued at p already, and keeps its age (aging counts
// from when it was first queued); its priority is never lowered. A
// delayed key is queued now, at the higher of p and its own priority. A
// key in process is queued again when Done is called for it, at the
// highest priority asked meanwhile. After ShutDown or ShutDownWithDrain,
// AddWithPriority does nothing.
func (q *Queue[K]) AddWithPriority(key K, p Priority) {
	q.mu.Lock()
	if !q.closing {
		q.addLocked(key, p)
	}
	q.mu.Unlock()
}

func (q *Queue[K]) addLocked(key K, p Priority) {
	idx, ok := q.index[key]
	if !ok {
		idx = q.newRecLocked(key, p)
		q.adds++
		q.pushReadyLocked(idx)
		return
	}
	r := &q.recs[idx]
	switch {
	case r.state&stReady != 0:
		if p <= r.prio {
			return
		}
		if r.state&stWorking != 0 {
			r.prio = p
		} else {
			q.raiseLocked(idx, p)
		}
	case r.state&stDelayed != 0:
		q.undelayLocked(idx)
		r.prio = max(r.prio, p)
		q.readyLocked(idx)
	default: // in process, or held only for a moment by AddRateLimited
		r.prio = p
		q.adds++
		q.readyLocked(idx)
	}
}

// readyLocked queues the held key of record idx, which has nothing
// pending: now, or at Done if it is in process.
func (q *Queue[K]) readyLocked(idx int32) {
	r := &q.recs[idx]
	if r.state&stWorking != 0 {
		r.state |= stReady
		q.nDirty++
		return
	}
	q.pushReadyLocked(idx)
}

// Get hands out a queued key for the caller to process, and marks it in
// process until Done is called for it. It blocks until a key is queued;
// it returns ErrShutdown once the queue is shut down (after
// ShutDownWithDrain: once the queue has drained), and ctx.Err() if ctx
// ends first.
//
// The key handed out is the first of the highest priority queued, except
// that one in four, if any key of a lower priority has aged (see
// Options.MaxWait), is the oldest of those.
func (q *Queue[K]) Get(ctx context.Context) (K, error) {
	q.mu.Lock()
	if q.nReady > 0 && !q.shutdown {
		return q.takeLocked()
	}
	return q.waitLocked(ctx)
}

// waitLocked is Get when no key is queued.
func (q *Queue[K]) waitLocked(ctx context.Context) (K, error) {
	var stop func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		if q.shutdown || q.closing && q.nReady == 0 && q.nDirty == 0 {
			q.mu.Unlock()
			var zero K
			return zero, ErrShutdown
		}
		if q.nReady > 0 {
			return q.takeLocked()
		}
		if ctx.Done() != nil {
			if err := ctx.Err(); err != nil {
				q.mu.Unlock()
				var zero K
				return zero, err
			}
			if stop == nil {
				stop = context.AfterFunc(ctx, q.wakeAll)
			}
		}
		q.cond.Wait()
	}
}

// takeLocked hands out the next queued key and unlocks q.
func (q *Queue[K]) takeLocked() (K, error) {
	idx := q.popReadyLocked()
	r := &q.recs[idx]
	r.state |= stWorking
	q.nWorking++
	key := r.key
	if q.closing && q.nReady == 0 && q.nDirty == 0 {
		q.cond.Broadcast() // a drain has handed out its last key
	}
	if q.m == nil {
		q.mu.Unlock()
		return key, nil
	}
	p, wait, sampled := q.startWorkLocked(idx)
	if sampled {
		q.mCalls++
	}
	q.mu.Unlock()
	if sampled {
		q.m.Waited(p, wait)
		q.endCall()
	}
	return key, nil
}

func (q *Queue[K]) wakeAll() {
	q.mu.Lock()
	q.cond.Broadcast()
	q.mu.Unlock()
}

// Done marks key processed. If it was added while in process, it is
// queued again now; else, unless it is delayed, the queue lets go of it.
// It keeps the key's retry count, if it has one, for a while (see Queue),
// so AddRateLimited may be called before Done or after it. Done of a key
// not in process does nothing.
func (q *Queue[K]) Done(key K) {
	q.mu.Lock()
	idx, ok := q.index[key]
	if !ok || q.recs[idx].state&stWorking == 0 {
		q.mu.Unlock()
		return
	}
	r := &q.recs[idx]
	r.state &^= stWorking
	q.nWorking--
	var took time.Duration
	timed := false
	if q.m != nil {
		took, timed = q.endWorkLocked(idx)
		if timed {
			q.mCalls++
		}
	}
	switch {
	case r.state&stReady != 0:
		r.state &^= stReady
		q.nDirty--
		q.pushReadyLocked(idx)
	case r.state&stDelayed != 0:
	case r.fails > 0 && !q.closing:
		q.rememberLocked(idx)
	default:
		q.releaseLocked(idx)
	}
	stopMetrics := q.settleLocked()
	q.mu.Unlock()
	if timed {
		q.m.Processed(took)
		q.endCall()
	}
	if stopMetrics {
		q.m.Stop()
	}
}

// Len returns the number of queued keys: neither the delayed ones nor
// those in process, even if they will be queued again at Done.
func (q *Queue[K]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.nReady
}

// Forget resets key's retry count, so that its next AddRateLimited waits
// BaseDelay. Call it when the key was processed successfully. It does not
// take key out of the queue.
func (q *Queue[K]) Forget(key K) {
	q.mu.Lock()
	if idx, ok := q.index[key]; ok {
		r := &q.recs[idx]
		r.fails = 0
		if r.state == stRemembered {
			q.releaseLocked(idx)
		}
	}
	q.mu.Unlock()
}

// NumRequeues returns the number of AddRateLimited calls for key since it
// was last forgotten, by Forget or by the queue a while after Done.
func (q *Queue[K]) NumRequeues(key K) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if idx, ok := q.index[key]; ok {
		return int(q.recs[idx].fails)
	}
	return 0
}

func (q *Queue[K]) nowLocked() int64 { return int64(time.Since(q.epoch)) }
