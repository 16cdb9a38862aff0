package k8s

import (
	"hash/maphash"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"weak"
)

// The runs that compact objects share are interned here, once for the
// whole process, each with its decoded form once a read asked for it
// (compact_decode.go). The table holds them by weak references: a run,
// and its decoded form, go at the first GC after no object refers to
// it, and its entry soon after.

// run is a run of encoding that objects share, interned in runs.
type run struct {
	bytes string
	// path is the field path of the run if it is the whole of a field
	// (see fieldPath), and "" otherwise.
	path string
	// decoded is the run decoded, once a read asked for it.
	decoded atomic.Pointer[decodedRun]
}

// runKey is what finds a run: the hash of its bytes, and its path (the
// same bytes at two paths are two runs, as they may decode into
// different fields).
type runKey struct {
	hash uint64
	path string
}

// runs interns the shared runs of the whole process. A run goes when no
// object refers to it (after a GC), and its entry soon after.
var runs runTable

const runShards = 64

type runTable struct {
	shards [runShards]struct {
		mu sync.Mutex
		m  map[runKey]weak.Pointer[run]
	}
}

// intern returns the run of bytes b at path, whose hash (with runSeed)
// is h, making it if there is none. It keeps neither b nor path. Should
// two runs of one path have one hash, the second is not interned.
func (t *runTable) intern(h uint64, path string, b []byte) *run {
	s := &t.shards[h%runShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.m[runKey{h, path}].Value(); r != nil {
		if r.bytes == string(b) {
			return r
		}
		return &run{bytes: string(b), path: strings.Clone(path)}
	}
	if s.m == nil {
		s.m = make(map[runKey]weak.Pointer[run])
	}
	r := &run{bytes: string(b), path: strings.Clone(path)}
	key := runKey{h, r.path}
	s.m[key] = weak.Make(r)
	runtime.AddCleanup(r, t.forget, key)
	return r
}

// forget removes the entry of key once its run has gone, unless another
// run of key took its place.
func (t *runTable) forget(key runKey) {
	s := &t.shards[key.hash%runShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.m[key]; ok && w.Value() == nil {
		delete(s.m, key)
	}
}

// runSeed hashes runs to their shard of runs. Every chunker hashes with
// it, so that a run is found in one shard whoever cut it.
var runSeed = maphash.MakeSeed()
