package mirror

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// This file checks DeltaFIFO against deltaModel, a deliberately naive
// reference (slices, linear scans, no cleverness) written from the
// contract, on operation sequences decoded from bytes: random ones in
// TestDeltaFIFO_MatchesModel and fuzzer-made ones in FuzzDeltaFIFO.

// modelTransform is the transformer both sides use when the scenario
// turns transforms on: it fails for some versions so that failures are
// exercised too.
func modelTransform(o obj) (obj, error) {
	if o.rv%5 == 4 {
		return o, errors.New("transform failed")
	}
	o.rv = -o.rv
	return o, nil
}

type deltaModel struct {
	known        knownMap // shared with the queue; nil without KnownObjects
	emitReplaced bool
	transform    bool

	queue []string
	items map[string]Deltas[obj]

	populated bool
	initial   int
	synced    bool

	// list is a list taken chunk by chunk (listChunk, listDone,
	// listFailed), while one is in progress.
	list *modelList
}

// modelList is a list in chunks: streamed (queued as it comes) if the
// queue and KnownObjects were empty when it began, kept for one replace
// at its end otherwise.
type modelList struct {
	streaming bool
	listed    map[string]bool // streaming: the keys listed so far
	kept      []obj           // otherwise: the objects so far
}

func (m *deltaModel) listChunk(chunk []obj) {
	if m.list == nil {
		m.list = &modelList{streaming: len(m.queue) == 0 && len(m.known) == 0, listed: map[string]bool{}}
	}
	if !m.list.streaming {
		m.list.kept = append(m.list.kept, chunk...)
		return
	}
	typ := Sync
	if m.emitReplaced {
		typ = Replaced
	}
	before := len(m.queue)
	for _, o := range chunk {
		if o.name == "bad" {
			continue
		}
		m.list.listed[o.name] = true
		if o, ok := m.enter(o); ok {
			m.push(o.name, Delta[obj]{Type: typ, Object: o})
		}
	}
	if !m.populated {
		m.initial += len(m.queue) - before
	}
}

func (m *deltaModel) listDone() {
	l := m.list
	m.list = nil
	if l == nil {
		l = &modelList{streaming: len(m.queue) == 0 && len(m.known) == 0, listed: map[string]bool{}}
	}
	if !l.streaming {
		m.replace(l.kept)
		return
	}
	for _, k := range slices.Clone(m.queue) {
		if !l.listed[k] {
			ds := m.items[k]
			m.push(k, Delta[obj]{Type: Deleted, Object: ds[len(ds)-1].Object, FinalStateUnknown: true})
		}
	}
	m.populate()
}

func (m *deltaModel) populate() {
	if !m.populated {
		m.populated = true
		m.synced = m.initial == 0
	}
}

func (m *deltaModel) queued(key string) bool { return slices.Contains(m.queue, key) }

// enter applies the transformer, if on, to an object entering the queue.
func (m *deltaModel) enter(o obj) (obj, bool) {
	if !m.transform {
		return o, true
	}
	o, err := modelTransform(o)
	return o, err == nil
}

func (m *deltaModel) push(key string, d Delta[obj]) {
	if !m.queued(key) {
		m.queue = append(m.queue, key)
	}
	ds := m.items[key]
	if n := len(ds); n > 0 && ds[n-1].Type == Deleted && d.Type == Deleted {
		switch {
		case !ds[n-1].FinalStateUnknown && !d.FinalStateUnknown: // two real: newer
			ds[n-1] = d
		case ds[n-1].FinalStateUnknown && !d.FinalStateUnknown: // real beats tombstone
			ds[n-1] = d
		default: // a tombstone adds nothing
		}
		m.items[key] = ds
		return
	}
	m.items[key] = append(ds, d)
}

func (m *deltaModel) add(typ DeltaType, o obj) {
	if o.name == "bad" {
		return
	}
	o, ok := m.enter(o)
	if !ok {
		return
	}
	m.populate()
	m.push(o.name, Delta[obj]{Type: typ, Object: o})
}

// last is the newest state of key the queue knows: its newest queued
// object, or else its known object.
func (m *deltaModel) last(key string) obj {
	if ds := m.items[key]; len(ds) > 0 {
		return ds[len(ds)-1].Object
	}
	return m.known[key]
}

func (m *deltaModel) delete(o obj) {
	if o.name == "bad" {
		return
	}
	m.populate()
	if !m.queued(o.name) {
		if m.known == nil {
			return
		}
		if _, ok := m.known[o.name]; !ok {
			return
		}
	}
	if t, ok := m.enter(o); ok {
		o = t
	} else { // the deletion still counts, with the last state known
		o = m.last(o.name)
	}
	m.push(o.name, Delta[obj]{Type: Deleted, Object: o})
}

// deleteKeyOnly is DeleteKeyOnly (tombstone false) and Evict (true): the
// deletion carries the last state known, untransformed, and one that
// names the key alone adds nothing after a queued deletion.
func (m *deltaModel) deleteKeyOnly(key string, tombstone bool) {
	if key == "bad" {
		return
	}
	m.populate()
	if !m.queued(key) {
		if m.known == nil {
			return
		}
		if _, ok := m.known[key]; !ok {
			return
		}
	}
	if ds := m.items[key]; !tombstone && len(ds) > 0 && ds[len(ds)-1].Type == Deleted {
		return
	}
	m.push(key, Delta[obj]{Type: Deleted, Object: m.last(key), FinalStateUnknown: tombstone})
}

func (m *deltaModel) replace(list []obj) {
	typ := Sync
	if m.emitReplaced {
		typ = Replaced
	}
	listed := map[string]bool{}
	for _, o := range list {
		if o.name == "bad" {
			continue
		}
		listed[o.name] = true
		if o, ok := m.enter(o); ok {
			m.push(o.name, Delta[obj]{Type: typ, Object: o})
		}
	}
	for _, k := range slices.Clone(m.queue) {
		if !listed[k] {
			ds := m.items[k]
			m.push(k, Delta[obj]{Type: Deleted, Object: ds[len(ds)-1].Object, FinalStateUnknown: true})
		}
	}
	if m.known != nil {
		for _, k := range slices.Sorted(mapKeys(m.known)) {
			if !listed[k] && !m.queued(k) {
				m.push(k, Delta[obj]{Type: Deleted, Object: m.known[k], FinalStateUnknown: true})
			}
		}
	}
	if !m.populated {
		m.initial = len(m.queue)
		m.populate()
	}
}

func (m *deltaModel) resync() {
	if m.known == nil {
		return
	}
	for _, k := range slices.Sorted(mapKeys(m.known)) {
		if !m.queued(k) {
			m.push(k, Delta[obj]{Type: Sync, Object: m.known[k]})
		}
	}
}

func (m *deltaModel) pop() (string, Deltas[obj], bool) {
	key := m.queue[0]
	m.queue = m.queue[1:]
	ds := m.items[key]
	delete(m.items, key)
	initial := !m.synced
	if m.initial > 0 {
		m.initial--
		if m.initial == 0 && m.populated {
			m.synced = true
		}
	}
	return key, ds, initial
}

func (m *deltaModel) addIfNotPresent(key string, ds Deltas[obj]) {
	m.populate()
	if len(ds) > 0 && !m.queued(key) {
		m.queue = append(m.queue, key)
		m.items[key] = slices.Clone(ds)
	}
}

func mapKeys(m knownMap) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Scenario bytes: the first byte configures the queue, then every two
// bytes are one operation (op, argument).
const (
	cfgKnown = 1 << iota
	cfgEmitReplaced
	cfgTransform
	cfgPrefill // KnownObjects starts non-empty, as after a restart with a cache
)

const (
	opAdd = iota
	opUpdate
	opDelete
	opReplace
	opResync
	opPop
	opPopRequeue
	opAddIfNotPresent // re-adds the last popped deltas
	opPopBatch
	opDeleteKeyOnly
	opEvict
	// A list in chunks, as an informer's Reflector hands it over: while
	// one is in progress, the operations of other producers (and
	// requeues, which an informer never makes) are skipped, as the
	// Reflector makes one call at a time; pops go on.
	opListChunk
	opListDone
	opListFail
	numOps
)

var modelKeys = []string{"k0", "k1", "k2", "k3", "k4", "bad"}

// runModelScenario runs the operations data encodes against a DeltaFIFO
// and the model, failing at the first difference.
func runModelScenario(t *testing.T, data []byte) {
	if len(data) == 0 {
		return
	}
	cfg := data[0]
	data = data[1:]
	m := &deltaModel{
		emitReplaced: cfg&cfgEmitReplaced != 0,
		transform:    cfg&cfgTransform != 0,
		items:        map[string]Deltas[obj]{},
	}
	opts := DeltaFIFOOptions[string, obj]{KeyFunc: objKey, EmitDeltaTypeReplaced: m.emitReplaced}
	if cfg&cfgKnown != 0 {
		m.known = knownMap{}
		if cfg&cfgPrefill != 0 {
			m.known["k0"] = obj{"k0", 1000}
			m.known["k2"] = obj{"k2", 1002}
		}
		opts.KnownObjects = m.known
	}
	if m.transform {
		opts.Transform = modelTransform
	}
	f := NewDeltaFIFO(opts)

	var lastKey string
	var lastPopped Deltas[obj]
	wasSynced := false
	rv := 0
	for i := 0; i+1 < len(data); i += 2 {
		op, arg := int(data[i])%numOps, data[i+1]
		rv++
		if m.list != nil {
			switch op {
			case opAdd, opUpdate, opDelete, opDeleteKeyOnly, opEvict, opReplace, opResync, opPopRequeue, opAddIfNotPresent:
				continue
			case opPopBatch:
				arg &^= 0x80 // no requeue
			}
		}
		o := obj{modelKeys[int(arg)%len(modelKeys)], rv}
		desc := fmt.Sprintf("op %d (%d, %d)", i/2, op, arg)

		// popOne pops on both sides and compares; it reports the key and
		// deltas, and whether there was anything to pop.
		popOne := func(requeue bool) {
			if len(m.queue) == 0 {
				return
			}
			wantKey, wantDeltas, wantInitial := m.pop()
			called := false
			err := f.Pop(context.Background(), func(key string, ds Deltas[obj], initial bool) error {
				called = true
				require.Equal(t, wantKey, key, desc)
				require.Equal(t, wantDeltas, ds, desc)
				require.Equal(t, wantInitial, initial, desc)
				if requeue {
					return ErrRequeue
				}
				if m.known != nil {
					m.known.apply(key, ds)
				}
				return nil
			})
			require.True(t, called, desc)
			if requeue {
				require.ErrorIs(t, err, ErrRequeue, desc)
				m.addIfNotPresent(wantKey, wantDeltas)
			} else {
				require.NoError(t, err, desc)
			}
			lastKey, lastPopped = wantKey, wantDeltas
		}

		switch op {
		case opAdd:
			_ = f.Add(o)
			m.add(Added, o)
		case opUpdate:
			_ = f.Update(o)
			m.add(Updated, o)
		case opDelete:
			_ = f.Delete(o)
			m.delete(o)
		case opReplace:
			list := listArg(arg, rv)
			err := f.Replace(list, "")
			if !m.transform && !slices.ContainsFunc(list, func(o obj) bool { return o.name == "bad" }) {
				require.NoError(t, err, desc)
			}
			m.replace(list)
		case opListChunk:
			chunk := listArg(arg, rv)
			_ = f.listChunk(chunk)
			m.listChunk(chunk)
		case opListDone:
			_ = f.listDone("")
			m.listDone()
		case opListFail:
			f.listFailed()
			m.list = nil
		case opResync:
			require.NoError(t, f.Resync(), desc)
			m.resync()
		case opDeleteKeyOnly:
			_ = f.DeleteKeyOnly(obj{name: o.name})
			m.deleteKeyOnly(o.name, false)
		case opEvict:
			_ = f.Evict(obj{name: o.name})
			m.deleteKeyOnly(o.name, true)
		case opPop:
			popOne(false)
		case opPopRequeue:
			popOne(true)
		case opAddIfNotPresent:
			require.NoError(t, f.AddIfNotPresent(lastKey, lastPopped), desc)
			m.addIfNotPresent(lastKey, lastPopped)
		case opPopBatch:
			if len(m.queue) == 0 {
				break
			}
			maxKeys := int(arg%4) - 1 // -1..2: exercises the "< 1 means 1" rule
			requeue := arg&0x80 != 0
			var want []QueuedDeltas[string, obj]
			for range min(max(maxKeys, 1), len(m.queue)) {
				k, ds, initial := m.pop()
				want = append(want, QueuedDeltas[string, obj]{Key: k, Deltas: ds, IsInInitialList: initial})
			}
			err := f.PopBatch(context.Background(), maxKeys, func(batch []QueuedDeltas[string, obj]) error {
				require.Equal(t, want, batch, desc)
				if requeue {
					return fmt.Errorf("batch: %w", ErrRequeue)
				}
				for _, q := range batch {
					if m.known != nil {
						m.known.apply(q.Key, q.Deltas)
					}
				}
				return nil
			})
			if requeue {
				require.ErrorIs(t, err, ErrRequeue, desc)
				for _, q := range want {
					m.addIfNotPresent(q.Key, q.Deltas)
				}
			} else {
				require.NoError(t, err, desc)
			}
		}

		// The queue agrees with the model and with itself.
		keys := f.ListKeys()
		require.Equal(t, nilIfEmpty(m.queue), nilIfEmpty(keys), desc)
		require.Equal(t, len(keys), f.Len(), desc)
		seen := map[string]bool{}
		var newest []obj
		for _, k := range keys {
			require.False(t, seen[k], "%s: key %q queued twice", desc, k)
			seen[k] = true
			ds, ok := f.GetByKey(k)
			require.True(t, ok, "%s: queued key %q has no deltas", desc, k)
			require.NotEmpty(t, ds, desc)
			require.Equal(t, m.items[k], ds, "%s: deltas of %q", desc, k)
			newest = append(newest, ds[len(ds)-1].Object)
		}
		require.Equal(t, newest, nilIfEmpty(f.List()), desc)
		require.Len(t, m.items, len(m.queue), desc)
		require.Equal(t, m.synced, f.HasSynced(), desc)
		require.False(t, wasSynced && !f.HasSynced(), "%s: HasSynced went back to false", desc)
		wasSynced = f.HasSynced()
	}
}

// listArg is the list arg names: a bit per key of modelKeys, and with
// 0x40 the first of them listed twice.
func listArg(arg byte, rv int) []obj {
	var list []obj
	for b, k := range modelKeys {
		if arg&(1<<b) != 0 {
			list = append(list, obj{k, rv})
		}
	}
	if arg&0x40 != 0 && len(list) > 0 {
		list = append(list, list[0]) // a key listed twice
	}
	return list
}

func TestDeltaFIFO_MatchesModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 400 {
		data := make([]byte, 1+2*r.IntN(120))
		for j := range data {
			data[j] = byte(r.UintN(256))
		}
		ok := t.Run(fmt.Sprint(i), func(t *testing.T) { runModelScenario(t, data) })
		if !ok {
			t.Logf("failing scenario: %q", data)
			return
		}
	}
}

func FuzzDeltaFIFO(f *testing.F) {
	seeds := [][]byte{
		// Seed case: known {k0, k2} by prefill, Delete(k2), Replace([k0])
		// with Replaced: a real delete, a Replaced, a tombstone.
		{cfgKnown | cfgPrefill | cfgEmitReplaced, opDelete, 2, opReplace, 0b1, opPop, 0, opPop, 0},
		// Requeue twice, then succeed.
		{0, opAdd, 0, opAdd, 1, opPopRequeue, 0, opPopRequeue, 0, opPop, 0, opPop, 0},
		// Delete then Resync with a known object.
		{cfgKnown | cfgPrefill, opDelete, 0, opResync, 0, opPop, 0, opPop, 0},
		// HasSynced after the first Replace, tombstones included.
		{cfgKnown | cfgPrefill, opReplace, 0b110, opPop, 0, opPop, 0, opAdd, 3, opPop, 0, opPop, 0},
		// Tombstones colliding with real deletes, transforms on.
		{cfgTransform, opAdd, 1, opDelete, 1, opReplace, 0, opReplace, 0, opDelete, 1, opPopBatch, 0x83, opPopBatch, 3},
		// Bad keys everywhere, and AddIfNotPresent of popped deltas.
		{cfgKnown, opAdd, 5, opReplace, 0b100001, opPop, 0, opAddIfNotPresent, 0, opUpdate, 0, opAddIfNotPresent, 0},
		// A first list in chunks, popped as it comes, then a relist in
		// chunks into the known objects it filled.
		{cfgKnown | cfgEmitReplaced, opListChunk, 0b11, opPop, 0, opListChunk, 0b100, opListDone, 0, opPop, 0,
			opListChunk, 0b110, opListDone, 0, opPopBatch, 3, opPopBatch, 3},
		// A streamed list that fails, then one kept whole.
		{cfgKnown | cfgTransform, opListChunk, 0b1111, opPop, 0, opListFail, 0, opListChunk, 0b1, opListDone, 0, opPopBatch, 3},
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1+2*300 {
			data = data[:1+2*300] // long scenarios add time, not coverage
		}
		runModelScenario(t, data)
	})
}
