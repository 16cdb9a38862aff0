package mirror

import (
	"fmt"
	"hash/maphash"
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
	// Set by build: the records by their key's hash (byHash: the
	// record's number, then its version's hash, see hashed), and by key
	// those whose hash another record's key has (collided); where each
	// record starts in the file's objects; whether each was listed.
	seed     maphash.Seed
	byHash   map[uint64]uint64
	collided map[string]int32
	starts   []int
	listed   []uint64
}

// build indexes the checkpoint's records by key. Its file, checked when it
// was read, has its keys and versions (checkpointFile.indexed). The index
// holds no key of its own: a record's is read from the file when its
// hash is found.
func (x *checkpointIndex[T]) build() {
	n := x.file.header.count
	x.seed = maphash.MakeSeed()
	x.byHash = make(map[uint64]uint64, n)
	x.starts = make([]int, 0, n)
	x.listed = make([]uint64, (n+63)/64)
	r := checkpointBytes{b: x.file.objects}
	for i := range int32(n) {
		x.starts = append(x.starts, len(x.file.objects)-len(r.b))
		key, version := r.field(), r.field()
		r.field()
		h := maphash.Bytes(x.seed, key)
		if _, ok := x.byHash[h]; ok {
			if x.collided == nil {
				x.collided = make(map[string]int32)
			}
			x.collided[string(key)] = i
		} else {
			x.byHash[h] = hashed(i, maphash.Bytes(x.seed, version))
		}
	}
}

// record returns the key, version and encoding of the i-th record.
func (x *checkpointIndex[T]) record(i int) (key, version, data []byte) {
	r := checkpointBytes{b: x.file.objects[x.starts[i]:]}
	return r.field(), r.field(), r.field()
}

// hashed packs record i and its version's hash for byHash.
func hashed(i int32, version uint64) uint64 { return uint64(i)<<32 | version&(1<<32-1) }

// find returns the record of key, if the checkpoint has it, and whether
// it is at version; it marks it listed.
//
// A key whose hash and whose version's hash (96 bits in all) are a
// record's is taken for that record at that version without reading the
// record: one look in byHash, where reading the file at a random place
// for every listed key cost more than the rest of the comparison. Two
// keys, or versions, differing under equal hashes are so unlikely (about
// one in 2^96 for a pair) that a restart meets one as rarely as a
// corrupt file that passes its checksum.
func (x *checkpointIndex[T]) find(key, version string) (i int, unchanged, ok bool) {
	if e, found := x.byHash[maphash.String(x.seed, key)]; found {
		i = int(e >> 32)
		if e == hashed(int32(i), maphash.String(x.seed, version)) {
			x.mark(i)
			return i, true, true
		}
		if k, v, _ := x.record(i); string(k) == key {
			x.mark(i)
			return i, string(v) == version, true
		}
	}
	if j, found := x.collided[key]; found {
		i = int(j)
		x.mark(i)
		_, v, _ := x.record(i)
		return i, string(v) == version, true
	}
	return 0, false, false
}

// mark marks record i listed.
func (x *checkpointIndex[T]) mark(i int) { x.listed[i/64] |= 1 << (i % 64) }

// decode returns the object of the i-th record. The file's checksum
// matched, so it fails only with a codec that cannot read what it wrote.
func (x *checkpointIndex[T]) decode(i int) (obj T, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = panicked(v)
		}
	}()
	_, _, data := x.record(i)
	return x.codec.Decode(data)
}

// unlisted yields the keys and records never marked listed, in the order
// they were written.
func (x *checkpointIndex[T]) unlisted(yield func(key string, i int) bool) {
	for i := range x.starts {
		if x.listed[i/64]&(1<<(i%64)) == 0 {
			key, _, _ := x.record(i)
			if !yield(string(key), i) {
				return
			}
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
	// A version that cannot be had matches none: the object is compared
	// as changed.
	v, known := inf.versionOf(obj)
	i, unchanged, ok := x.find(any(key).(string), v)
	if !ok {
		inf.proc.distribute(n, false)
		return
	}
	if unchanged && known {
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
