package mirror

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"time"
)

// CheckpointOptions makes an informer keep a checkpoint: a file of its
// cache and the source's version it is at, from which the next Run
// watches instead of listing again. The zero value keeps none.
//
// A checkpoint is written every Interval and when Run returns, each time
// atomically (a temporary file beside Path, synced, renamed over it), so
// a crash never leaves a broken one. Run loads it before it lists; with
// no file it logs so at Info and lists; one truncated, corrupt, in
// another format or for another Identity is reported (*CheckpointError)
// and ignored. Two informers must not share a Path.
//
// Resumed, the informer has synced once its watch from the checkpoint's
// version is open. If the source no longer has that version, it relists;
// either way each change made while it was down is delivered once to a
// handler registered with HandlerOptions.ChangesOnly before the load is
// done. Other handlers registered by then are handed a state as initial
// adds: the checkpoint's, then the changes since; or, if the informer
// learns before the load is done that the source no longer has the
// version, the listed state, as a handler added to a synced informer is
// handed the cache (the cache is then filled from the list as without a
// checkpoint, and the checkpoint serves only to tell the ChangesOnly
// handlers what changed). If it learns so after the load, the list is
// applied against the checkpoint's objects as any relist.
//
// Against a checkpoint, a listed key at the version the checkpoint holds
// (InformerOptions.ResourceVersion) is unchanged: a source whose versions
// name one write, as etcd's and Kubernetes' do, never gives a re-created
// key the version of the object before. The checkpoint file holds each
// object's key and version beside it when the informer's keys are strings
// and it has a ResourceVersion; a file written by an earlier version of
// this package loads as before.
type CheckpointOptions[T any] struct {
	// Path is the checkpoint's file; empty means no checkpoint. Its
	// directory must exist.
	Path string

	// Interval is how often Run writes a checkpoint; zero or less means
	// only when Run returns.
	Interval time.Duration

	// Codec encodes the objects; nil means JSONCodec.
	Codec Codec[T]

	// Identity names what is mirrored (say, the source's address and
	// prefix), with the objects' Go type: a checkpoint written under
	// another is not loaded. Empty means the informer's Name.
	Identity string
}

// checkpointSeam is what the checkpoint machinery needs of an informer:
// the state to write, and a way to fill its empty cache with a
// checkpoint's. It reads nothing else of the informer.
type checkpointSeam[T any] interface {
	// snapshot returns the cache's objects and the version they are at,
	// taken together: "" if the cache is at no version yet. If the cache
	// holds only part of the change at its version, or part of a list,
	// it returns no objects and a channel closed once the rest is in.
	snapshot() (objs []T, rv string, wait <-chan struct{})
	// restore fills the empty cache with the objects fill puts, after
	// fill has said, through reserve, how many to expect. If fill or a
	// put fails, the cache is left empty and restore returns the error.
	restore(fill func(reserve func(n int), put func(obj T) error) error) error
	// listFirst reports whether the Reflector, started from the
	// checkpoint's version while it loads, has begun a list before it
	// queued anything else (a change, a bookmark): the source no longer
	// has that version. If it returns true, the informer has committed to
	// applying that list as its first (and must be given the checkpoint
	// as a checkpointIndex, its cache left empty); it returns false if
	// the informer cannot compare a list with an index (see index).
	listFirst() bool
	// index returns each object's key and version for the checkpoint
	// file, or nil if the informer's keys are not strings or it has no
	// ResourceVersion.
	index() func(T) (key, version string)
}

// checkpointer is an informer's checkpoint machinery.
type checkpointer[T any] struct {
	seam     checkpointSeam[T]
	report   func(error) // a failure to load or write
	logger   *slog.Logger
	path     string
	interval time.Duration
	codec    Codec[T]
	identity string
}

// newCheckpointer returns the checkpointer of o for the informer named
// name, or nil if o keeps no checkpoint.
func newCheckpointer[T any](seam checkpointSeam[T], name string, report func(error), logger *slog.Logger, o CheckpointOptions[T]) *checkpointer[T] {
	if o.Path == "" {
		return nil
	}
	c := &checkpointer[T]{seam: seam, report: report, logger: logger, path: o.Path, interval: o.Interval, codec: o.Codec, identity: o.Identity}
	if c.codec == nil {
		c.codec = JSONCodec[T]{}
	}
	if c.identity == "" {
		c.identity = name
	}
	var zero T
	c.identity = fmt.Sprintf("%s\x00%T", c.identity, zero)
	return c
}

// load fills the informer's cache from the checkpoint and returns its
// version; on failure it reports why, leaves the cache empty and returns
// "". Once it has read the checkpoint's version, before its objects, it
// calls begin, if not nil, with it.
//
// If, while it fills the cache, the Reflector begins a list before
// anything else (the source no longer has the version: see
// checkpointSeam.listFirst), it stops, leaves the cache empty and returns
// the version with the checkpoint as an index, to tell the list's
// differences from it rather than to serve as the cache's state.
func (c *checkpointer[T]) load(begin func(rv string)) (string, *checkpointIndex[T]) {
	// No write has started yet: any temporary file is a crash's.
	removeStaleTemps(c.path)
	var f *checkpointFile
	err := c.seam.restore(func(reserve func(int), put func(T) error) error {
		var err error
		room := 0
		f, err = readCheckpointFile(c.path, c.identity, func(h checkpointHeader, n int) {
			if begin != nil && h.version != "" {
				begin(h.version)
			}
			room = n
		})
		if err != nil {
			return &CheckpointError{Op: "load", Path: c.path, Err: err}
		}
		if f.header.version == "" {
			return &CheckpointError{Op: "load", Path: c.path, Err: fmt.Errorf("%w: no version", ErrCheckpointInvalid)}
		}
		var stop func() bool
		if f.indexed {
			stop = c.seam.listFirst
		}
		// Room for the objects is made with the first: a load that
		// stops at once (listFirst) makes none.
		err = decodeRecords(f, c.codec, checkListEvery, stop, func(obj T) error {
			if room > 0 {
				reserve(room)
				room = 0
			}
			return put(obj)
		})
		if err != nil && !errors.Is(err, errStopped) {
			err = &CheckpointError{Op: "load", Path: c.path, Err: err}
		}
		return err
	})
	if errors.Is(err, fs.ErrNotExist) {
		// A first start: nothing went wrong.
		c.logger.Info("no checkpoint yet, listing", "path", c.path)
		return "", nil
	}
	if errors.Is(err, errStopped) {
		h := f.header
		c.logger.Info("resuming from a checkpoint whose version the source no longer has: listing",
			"path", c.path, "objects", h.count, "resourceVersion", h.version, "written", h.writtenAt)
		return h.version, &checkpointIndex[T]{file: f, codec: c.codec, path: c.path}
	}
	if err != nil {
		c.report(err)
		return "", nil
	}
	h := f.header
	c.logger.Info("resuming from a checkpoint", "path", c.path, "objects", h.count,
		"resourceVersion", h.version, "written", h.writtenAt)
	return h.version, nil
}

// checkListEvery is how many objects a load decodes between two looks at
// whether the Reflector has begun a list.
const checkListEvery = 1024

// restore fills the cache from a checkpoint (see checkpointSeam). If a
// handler registered so far is to be handed the checkpoint's objects, it
// also keeps them, with their keys, in loaded, as they come: resumeAt
// then hands them over without walking the cache again.
func (inf *Informer[K, T]) restore(fill func(reserve func(n int), put func(obj T) error) error) error {
	var set *replaySet[K, T]
	if inf.proc.anyReplaying() {
		set = &replaySet[K, T]{}
	}
	err := fill(inf.cache.reserve, func(obj T) error {
		key, err := keyOf(inf.opts.KeyFunc, obj)
		if err != nil {
			// An object left out would be lost: a watch brings only
			// what changes.
			return fmt.Errorf("%w: %w", ErrCheckpointInvalid, err)
		}
		_, existed, err := inf.cache.Set(key, obj)
		if existed {
			// A key twice: the set would hand both out. resumeAt
			// reads the cache instead.
			set = nil
		}
		if err == nil && set != nil {
			set.add(key, obj)
		}
		return err
	})
	if err != nil {
		_ = inf.cache.Replace(nil, "")
		return err
	}
	inf.loaded = set
	return nil
}

// resumeAt prepares Run to start from a checkpoint's state at rv, already
// in the cache: the handlers registered so far that want them get the
// cached objects as initial adds. (The Reflector watches from rv: see
// Reflector.resumeFrom.) Run calls it with applyMu held, before anything
// is applied, so that a handler added meanwhile is handed the objects
// here or, once the informer is live, by AddEventHandler: never by both,
// never a part of them.
func (inf *Informer[K, T]) resumeAt(rv string) {
	inf.appliedRV = rv
	set := inf.loaded
	inf.loaded = nil // the listeners' to let go of
	inf.proc.mu.RLock()
	defer inf.proc.mu.RUnlock()
	// Nothing is distributed yet: every listener reads the feed from
	// its end.
	at := inf.proc.feed.seq
	for _, l := range inf.proc.listeners {
		if !l.changesOnly {
			if set == nil {
				// Registered during the load, or the load kept none.
				set = collectReplay(inf.cache.All())
			}
			l.replay(set, at)
		}
	}
}

// anyReplaying reports whether a listener is to be handed the state its
// informer starts from (see HandlerOptions.ChangesOnly).
func (p *processor[K, T]) anyReplaying() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, l := range p.listeners {
		if !l.changesOnly {
			return true
		}
	}
	return false
}

// earlyReflector is an informer's Reflector started while the checkpoint
// it resumes from is still loading, once its version is read: its first
// watch, and the list that follows if the source no longer has that
// version, overlap the load instead of following it. What it hands the
// queue waits there until the load is done and the queue is applied.
type earlyReflector struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startEarly starts r from rv, as resumeFrom says, until ctx ends or stop.
func startEarly[T any](ctx context.Context, r *Reflector[T], rv string, resumed, relisting func()) *earlyReflector {
	r.resumeFrom(rv, resumed, relisting)
	ctx, cancel := context.WithCancel(ctx)
	e := &earlyReflector{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		r.Run(ctx)
	}()
	return e
}

// stop stops the Reflector and waits until Run has returned.
func (e *earlyReflector) stop() {
	e.cancel()
	<-e.done
}

// wait waits until Run has returned, once the informer's context ended.
func (e *earlyReflector) wait() {
	<-e.done
	e.cancel()
}

// run writes a checkpoint every interval until ctx ends.
func (c *checkpointer[T]) run(ctx context.Context) {
	if c.interval <= 0 {
		return
	}
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.write(ctx)
		}
	}
}

// write writes a checkpoint of the cache at the version it is at, if it
// is at one yet. If the cache holds part of a change (see Event.More) or
// of a list, it waits for the rest while ctx lasts, and else writes nothing: the
// previous checkpoint stays, whole.
func (c *checkpointer[T]) write(ctx context.Context) {
	objs, rv, wait := c.seam.snapshot()
	for wait != nil {
		select {
		case <-wait:
			objs, rv, wait = c.seam.snapshot()
		case <-ctx.Done():
			c.logger.Info("checkpoint not written: the cache holds part of a change",
				"path", c.path, "resourceVersion", rv)
			return
		}
	}
	if rv == "" {
		return
	}
	h := checkpointHeader{identity: c.identity, version: rv, writtenAt: time.Now(), count: len(objs)}
	if err := writeIndexedCheckpoint(c.path, h, slices.Values(objs), c.codec, c.seam.index()); err != nil {
		c.report(err)
	}
}

// snapshot returns the cache's state for a checkpoint (see
// checkpointSeam). Under applyMu the cache is at appliedRV: the queue
// applies changes in the order the source made them.
func (inf *Informer[K, T]) snapshot() (objs []T, rv string, wait <-chan struct{}) {
	inf.applyMu.Lock()
	defer inf.applyMu.Unlock()
	if wait := inf.partial.wait(); wait != nil {
		return nil, inf.appliedRV, wait
	}
	if wait := inf.halfListed.wait(); wait != nil {
		// The cache's objects are not all at appliedRV: a watch from
		// it, resumed, would bring history some are already past.
		return nil, inf.appliedRV, wait
	}
	if inf.appliedRV == "" {
		return nil, "", nil
	}
	return inf.cache.List(), inf.appliedRV, nil
}

// resumed is called by the Reflector once the watch from the checkpoint's
// version is open: the informer has synced.
func (inf *Informer[K, T]) resumed() {
	inf.queue.push(inOrderEntry[K, T]{kind: entryResumed})
}
