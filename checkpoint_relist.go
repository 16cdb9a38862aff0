package mirror

import (
	"encoding/binary"
	"fmt"
)

// A resumed informer starts its Reflector from the checkpoint's version
// while the checkpoint loads (see earlyReflector). If the source no longer
// has that version, the Reflector lists, and the list is usually begun
// before the load ends. The checkpoint's objects are then not a state any
// handler needs: the cache is filled from the list as a first list fills
// an empty cache, streamed, and the handlers handed a state get the
// listed one, as a handler added to a synced informer is handed the
// cache. Only the handlers registered with HandlerOptions.ChangesOnly
// before the load ended need the checkpoint, to be told what changed
// since: for each listed key, nothing if the checkpoint holds it at the
// same version, else an add or an update from the checkpoint's state (a
// delete and an add across identities, see SameObject); for each key of
// the checkpoint the list lacks, a delete of the checkpoint's state. That
// needs the checkpoint's keys and versions, which its file holds beside
// each object, and the objects of the few keys changed or gone only: the
// checkpoint is indexed, not decoded.
//
// The listeners following the checkpoint (sinceCheckpoint) and the others
// read one feed: the list's adds are addressed to the others
// (audienceState), the differences from the checkpoint to them
// (audienceChanges).

// checkpointIndex is a checkpoint kept as its file, indexed by key, to
// tell a list's differences from it.
type checkpointIndex[T any] struct {
	file  *checkpointFile
	codec Codec[T]
	path  string
	// Set by build: the objects' records by key, their file's bytes as
	// a string (which the keys are parts of), and whether each was
	// listed.
	keys   map[string]int32
	recs   []indexedRecord
	data   string
	listed []uint64
}

// indexedRecord is one object of a checkpointIndex: its version and its
// encoding, parts of checkpointIndex.data.
type indexedRecord struct {
	version string
	obj     string
}

// build indexes the checkpoint's records by key. Its file, checked when it
// was read, has its keys and versions (checkpointFile.indexed).
func (x *checkpointIndex[T]) build() {
	n := x.file.header.count
	x.data = string(x.file.objects)
	x.keys = make(map[string]int32, n)
	x.recs = make([]indexedRecord, 0, n)
	x.listed = make([]uint64, (n+63)/64)
	b, pos := x.file.objects, 0
	x.file = nil
	field := func() string {
		v, k := binary.Uvarint(b[pos:])
		start := pos + k
		pos = start + int(v)
		return x.data[start:pos]
	}
	for i := range n {
		key := field()
		x.recs = append(x.recs, indexedRecord{version: field(), obj: field()})
		// A key written twice is the cache's bug, not the file's: the
		// last stands, and the first is never listed, so it is deleted.
		x.keys[key] = int32(i)
	}
}

// find returns the record of key and marks it listed.
func (x *checkpointIndex[T]) find(key string) (int, bool) {
	i, ok := x.keys[key]
	if ok {
		x.listed[i/64] |= 1 << (i % 64)
	}
	return int(i), ok
}

// decode returns the object of the i-th record. The file's checksum
// matched, so it fails only with a codec that cannot read what it wrote.
func (x *checkpointIndex[T]) decode(i int) (obj T, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = panicked(v)
		}
	}()
	return x.codec.Decode([]byte(x.recs[i].obj))
}

// unlisted yields the keys and records never marked listed.
func (x *checkpointIndex[T]) unlisted(yield func(key string, i int) bool) {
	for key, i := range x.keys {
		if x.listed[i/64]&(1<<(i%64)) == 0 && !yield(key, int(i)) {
			return
		}
	}
}

// listFirst implements checkpointSeam: the queue tells.
func (inf *Informer[K, T]) listFirst() bool {
	if inf.index() == nil {
		return false
	}
	return inf.queue.startFromList()
}

// index implements checkpointSeam.
func (inf *Informer[K, T]) index() func(T) (key, version string) {
	if _, ok := any(*new(K)).(string); !ok || inf.opts.ResourceVersion == nil {
		return nil
	}
	return func(obj T) (string, string) {
		k, err := inf.opts.KeyFunc(obj)
		if err != nil {
			// Cached, so its key computed; a key function that fails
			// now fails the write.
			panic(err)
		}
		return any(k).(string), inf.opts.ResourceVersion(obj)
	}
}

// resumeListing prepares Run to start from a list while x, the checkpoint
// it resumed from, tells the listeners registered so far with ChangesOnly
// what changed since. The cache is empty and at no version. Run calls it
// with applyMu held, before anything is applied.
func (inf *Informer[K, T]) resumeListing(x *checkpointIndex[T]) {
	inf.proc.mu.RLock()
	defer inf.proc.mu.RUnlock()
	following := false
	for _, l := range inf.proc.listeners {
		if l.changesOnly {
			l.mu.Lock()
			l.sinceCheckpoint = true
			l.mu.Unlock()
			following = true
		}
	}
	if following {
		x.build()
		inf.behind = x
	}
}

// listedSinceCheckpoint tells the listeners following the checkpoint of
// obj, listed under key while the cache did not hold key, with origin:
// what changed since the checkpoint. initial says that the list completes
// the informer's first sync. It belongs to the goroutine applying.
func (inf *Informer[K, T]) listedSinceCheckpoint(key K, obj T, initial bool, origin Origin) {
	x := inf.behind
	n := notification[K, T]{kind: notifyAdd, key: key, obj: obj, initial: initial, origin: origin, audience: audienceChanges}
	i, ok := x.find(any(key).(string))
	if !ok {
		inf.proc.distribute(n, false)
		return
	}
	if v, ok := inf.versionOf(obj); ok && v == x.recs[i].version {
		return
	}
	old, err := x.decode(i)
	if err != nil {
		// The handler is told of the key's state, not of where from.
		inf.reportIndexed(x, key, err)
		inf.proc.distribute(n, false)
		return
	}
	if !inf.sameObject(old, obj) {
		inf.proc.distribute(notification[K, T]{kind: notifyDelete, key: key, obj: old, unknown: true, origin: origin, audience: audienceChanges}, false)
		inf.proc.distribute(n, false)
		return
	}
	n.kind, n.old, n.initial = notifyUpdate, old, false
	inf.proc.distribute(n, false)
}

// deletedSinceCheckpoint tells the listeners following the checkpoint of
// the deletion, with origin, of each of its keys no list found, and lets
// the checkpoint go. It belongs to the goroutine applying.
func (inf *Informer[K, T]) deletedSinceCheckpoint(origin Origin) {
	x := inf.behind
	inf.behind = nil
	for key, i := range x.unlisted {
		k := any(key).(K)
		old, err := x.decode(i)
		if err != nil {
			inf.reportIndexed(x, k, err)
			continue
		}
		inf.proc.distribute(notification[K, T]{kind: notifyDelete, key: k, obj: old, unknown: true, origin: origin, audience: audienceChanges}, false)
	}
}

// versionOf returns obj's version; false if ResourceVersion panics.
func (inf *Informer[K, T]) versionOf(obj T) (v string, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return inf.opts.ResourceVersion(obj), true
}

// sameObject reports whether old and obj are one object (SameObject); a
// panic there counts as yes, the change then told as an update.
func (inf *Informer[K, T]) sameObject(old, obj T) (same bool) {
	if inf.opts.SameObject == nil {
		return true
	}
	defer func() {
		if recover() != nil {
			same = true
		}
	}()
	return inf.opts.SameObject(old, obj)
}

// reportIndexed reports that the checkpoint's object of key, which its
// codec wrote, could not be decoded.
func (inf *Informer[K, T]) reportIndexed(x *checkpointIndex[T], key K, err error) {
	inf.checkpointErrors.Add(1)
	inf.report(&CheckpointError{Op: "load", Path: x.path, Err: fmt.Errorf("%w: object of key %v: %w", ErrCheckpointInvalid, key, err)})
}
