package mirror

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requirePanicError checks that err reports a recovered panic with the
// value "boom" and the stack of the panicking function, and returns it.
func requirePanicError(t *testing.T, err error) *PanicError {
	t.Helper()
	var pe *PanicError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "boom", pe.Value)
	assert.Contains(t, string(pe.Stack), "panics_test.go", "the stack is the panic's")
	return pe
}

// A testObj named "panic" panics the key function; one labelled "panic"
// panics the label index.
func panickyKey(o testObj) (string, error) {
	if o.name == "panic" {
		panic("boom")
	}
	return testKey(o)
}

func panickyLabel(o testObj) ([]string, error) {
	if slices.Contains(o.labels, "panic") {
		panic("boom")
	}
	return byLabel(o)
}

func TestIndexer_PanickingCallbackFailsOnlyThatObject(t *testing.T) {
	x := testObj{ns: "a", name: "x", labels: []string{"l1"}, v: 1}
	keyPanics := testObj{ns: "a", name: "panic"}
	indexPanics := testObj{ns: "a", name: "x", labels: []string{"panic"}, v: 2}
	tests := []struct {
		name string
		call func(i *Indexer[string, testObj]) error
		// want is the error's wrapper: *KeyError or *IndexError.
		want any
	}{
		{"Add, key", func(i *Indexer[string, testObj]) error { return i.Add(keyPanics) }, &KeyError{}},
		{"Add, index", func(i *Indexer[string, testObj]) error {
			return i.Add(testObj{ns: "a", name: "y", labels: []string{"panic"}})
		}, &IndexError{}},
		{"Update, index", func(i *Indexer[string, testObj]) error { return i.Update(indexPanics) }, &IndexError{}},
		{"Set, index", func(i *Indexer[string, testObj]) error {
			_, existed, err := i.Set("a/x", indexPanics)
			assert.False(t, existed)
			return err
		}, &IndexError{}},
		{"Set, key", func(i *Indexer[string, testObj]) error { _, _, err := i.Set("a/p", keyPanics); return err }, &KeyError{}},
		{"Delete, key", func(i *Indexer[string, testObj]) error { return i.Delete(keyPanics) }, &KeyError{}},
		{"Get, key", func(i *Indexer[string, testObj]) error { _, _, err := i.Get(keyPanics); return err }, &KeyError{}},
		{"Index, index", func(i *Indexer[string, testObj]) error {
			list, err := i.Index("label", indexPanics)
			assert.Nil(t, list)
			return err
		}, &IndexError{}},
		{"AddIndexers, on a stored object", func(i *Indexer[string, testObj]) error {
			err := i.AddIndexers(Indexers[testObj]{"new": func(testObj) ([]string, error) { panic("boom") }})
			assert.NotContains(t, i.GetIndexers(), "new")
			return err
		}, &IndexError{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := NewIndexer(panickyKey, Indexers[testObj]{"ns": byNamespace, "label": panickyLabel})
			require.NoError(t, i.Add(x))
			err := tt.call(i)
			requirePanicError(t, err)
			switch tt.want.(type) {
			case *KeyError:
				var ke *KeyError
				require.ErrorAs(t, err, &ke)
				assert.Equal(t, keyPanics, ke.Object)
			case *IndexError:
				var ie *IndexError
				require.ErrorAs(t, err, &ie)
				assert.Contains(t, []string{"label", "new"}, ie.Index)
			}
			// Nothing changed, and the lock is free: a later good
			// value for the key is stored.
			assert.Equal(t, []testObj{x}, i.List())
			checkIndexes(t, i)
			x2 := testObj{ns: "a", name: "x", labels: []string{"l2"}, v: 3}
			require.NoError(t, i.Update(x2))
			assert.Equal(t, []string{"x"}, byIndexNames(t, i, "label", "l2"))
			checkIndexes(t, i)
		})
	}
	t.Run("Replace skips only the objects that panic", func(t *testing.T) {
		i := NewIndexer(panickyKey, Indexers[testObj]{"ns": byNamespace, "label": panickyLabel})
		y := testObj{ns: "a", name: "y"}
		err := i.Replace([]testObj{keyPanics, x, indexPanics, y}, "")
		var joined interface{ Unwrap() []error }
		require.ErrorAs(t, err, &joined)
		require.Len(t, joined.Unwrap(), 2)
		var ke *KeyError
		require.ErrorAs(t, joined.Unwrap()[0], &ke)
		requirePanicError(t, ke)
		var ie *IndexError
		require.ErrorAs(t, joined.Unwrap()[1], &ie)
		requirePanicError(t, ie)
		// The x that panicked came after the good one: the good one
		// stays, as a failing object is skipped.
		assert.Equal(t, []string{"x", "y"}, names(i.List()))
		checkIndexes(t, i)
	})
}

func TestFIFO_PanickingKeyFunctionFailsOnlyThatObject(t *testing.T) {
	keyFunc := func(o obj) (string, error) {
		if o.name == "panic" {
			panic("boom")
		}
		return o.name, nil
	}
	bad := obj{"panic", 1}
	ops := []struct {
		name string
		op   func(f *FIFO[string, obj]) error
	}{
		{"Add", func(f *FIFO[string, obj]) error { return f.Add(bad) }},
		{"Update", func(f *FIFO[string, obj]) error { return f.Update(bad) }},
		{"AddIfNotPresent", func(f *FIFO[string, obj]) error { return f.AddIfNotPresent(bad) }},
		{"Delete", func(f *FIFO[string, obj]) error { return f.Delete(bad) }},
		{"Get", func(f *FIFO[string, obj]) error { _, _, err := f.Get(bad); return err }},
	}
	for _, tt := range ops {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFIFO(keyFunc)
			require.NoError(t, f.Add(obj{"a", 1}))
			err := tt.op(f)
			var ke *KeyError
			require.ErrorAs(t, err, &ke)
			assert.Equal(t, bad, ke.Object)
			requirePanicError(t, err)
			assert.Equal(t, []obj{{"a", 1}}, f.List())
			require.NoError(t, f.Add(obj{"a", 2}), "the lock is free")
			assert.Equal(t, []obj{{"a", 2}}, f.List())
		})
	}
	t.Run("Replace", func(t *testing.T) {
		f := NewFIFO(keyFunc)
		err := f.Replace([]obj{{"a", 1}, bad, {"b", 1}, bad}, "")
		var joined interface{ Unwrap() []error }
		require.ErrorAs(t, err, &joined)
		require.Len(t, joined.Unwrap(), 2, "one error per object")
		requirePanicError(t, joined.Unwrap()[0])
		assert.Equal(t, []string{"a", "b"}, f.ListKeys())
	})
}

func TestDeltaFIFO_PanickingCallbackFailsOnlyThatObject(t *testing.T) {
	keyFunc := func(o obj) (string, error) {
		if o.name == "panic" {
			panic("boom")
		}
		return o.name, nil
	}
	transform := func(o obj) (obj, error) {
		if o.rv < 0 {
			panic("boom")
		}
		return o, nil
	}
	newQueue := func() *DeltaFIFO[string, obj] {
		f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{
			KeyFunc: keyFunc, Transform: transform, EmitDeltaTypeReplaced: true,
			KnownObjects: knownMap{"k": {"k", 5}, "t": {"t", 5}},
		})
		require.NoError(t, f.Add(obj{"a", 1}))
		return f
	}
	keyPanics, transformPanics := obj{"panic", 1}, obj{"a", -1}
	tests := []struct {
		name  string
		op    func(f *DeltaFIFO[string, obj]) error
		isKey bool
		// after is the queue once op has failed.
		after []popped
	}{
		{"Add, key", func(f *DeltaFIFO[string, obj]) error { return f.Add(keyPanics) }, true, nil},
		{"Update, key", func(f *DeltaFIFO[string, obj]) error { return f.Update(keyPanics) }, true, nil},
		{"Delete, key", func(f *DeltaFIFO[string, obj]) error { return f.Delete(keyPanics) }, true, nil},
		{"Get, key", func(f *DeltaFIFO[string, obj]) error { _, _, err := f.Get(keyPanics); return err }, true, nil},
		{"Add, transform", func(f *DeltaFIFO[string, obj]) error { return f.Add(transformPanics) }, false, nil},
		{"Update, transform", func(f *DeltaFIFO[string, obj]) error { return f.Update(transformPanics) }, false, nil},
		{"Delete, transform", func(f *DeltaFIFO[string, obj]) error { return f.Delete(transformPanics) }, false,
			// As for a transform's error: deleted, with the last
			// state the queue knows.
			[]popped{{key: "a", deltas: Deltas[obj]{added(obj{"a", 1}), deleted(obj{"a", 1})}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newQueue()
			before := snapshot(f)
			err := tt.op(f)
			requirePanicError(t, err)
			if tt.isKey {
				var ke *KeyError
				require.ErrorAs(t, err, &ke)
				assert.Equal(t, keyPanics, ke.Object)
			} else {
				assert.Contains(t, err.Error(), "transform object with key a: panic: boom")
			}
			if tt.after == nil {
				tt.after = before
			}
			assert.Equal(t, tt.after, snapshot(f))
			require.NoError(t, f.Update(obj{"a", 2}), "the lock is free")
		})
	}
	t.Run("Replace", func(t *testing.T) {
		f := newQueue()
		_ = popAll(t, f)
		// t's transform panics: it counts as listed, so it gets no
		// tombstone; k is not listed and gets one.
		err := f.Replace([]obj{keyPanics, {"a", 2}, {"t", -1}, {"b", 1}}, "")
		var joined interface{ Unwrap() []error }
		require.ErrorAs(t, err, &joined)
		require.Len(t, joined.Unwrap(), 2)
		for _, err := range joined.Unwrap() {
			requirePanicError(t, err)
		}
		var ke *KeyError
		require.ErrorAs(t, joined.Unwrap()[0], &ke)
		assert.Contains(t, joined.Unwrap()[1].Error(), "transform object with key t")
		assert.Equal(t, []popped{
			{key: "a", deltas: Deltas[obj]{replaced(obj{"a", 2})}},
			{key: "b", deltas: Deltas[obj]{replaced(obj{"b", 1})}},
			{key: "k", deltas: Deltas[obj]{tombstone(obj{"k", 5})}},
		}, snapshot(f))
	})
}

func TestHandlerPanicError_IsAPanicError(t *testing.T) {
	err := error(&HandlerPanicError{Handler: "h", PanicError: PanicError{Value: "boom", Stack: []byte("stack")}})
	var pe *PanicError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "boom", pe.Value)
	assert.Equal(t, []byte("stack"), pe.Stack)
	assert.Equal(t, `mirror: event handler "h" panicked: boom`, err.Error())
	assert.False(t, errors.Is(err, errBad))
}

// panickingCodec panics encoding or decoding the object named "panic".
type panickingCodec struct{ JSONCodec[cpObj] }

func (c panickingCodec) Append(dst []byte, o cpObj) ([]byte, error) {
	if o.Name == "panic" {
		panic("boom")
	}
	return c.JSONCodec.Append(dst, o)
}

func (c panickingCodec) Decode(data []byte) (cpObj, error) {
	o, err := c.JSONCodec.Decode(data)
	if o.Name == "panic" {
		panic("boom")
	}
	return o, err
}

func TestCheckpointFile_PanickingCodecOrKeyFailsTheLoadOrWrite(t *testing.T) {
	objs := []cpObj{{"a", 1}, {"panic", 2}, {"c", 3}}
	h := checkpointHeader{identity: "test", version: "43", count: len(objs)}

	t.Run("encode", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "cp")
		writeTestCheckpoint(t, path, []cpObj{{"a", 1}})
		err := writeCheckpoint(path, h, slices.Values(objs), Codec[cpObj](panickingCodec{}))
		var ce *CheckpointError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, "write", ce.Op)
		requirePanicError(t, err)
		got, _, err := loadTestCheckpoint(path)
		require.NoError(t, err)
		assert.Equal(t, []cpObj{{"a", 1}}, got, "the previous checkpoint stays")
		entries, err := os.ReadDir(filepath.Dir(path))
		require.NoError(t, err)
		assert.Len(t, entries, 1, "the temporary file is removed")
	})
	loads := map[string]func(path string) error{
		"decode": func(path string) error {
			_, err := loadCheckpoint(path, "test", Codec[cpObj](panickingCodec{}), nil, func(cpObj) error { return nil })
			return err
		},
		"key": func(path string) error {
			_, err := loadCheckpoint(path, "test", JSONCodec[cpObj]{}, nil, func(o cpObj) error {
				if o.Name == "panic" {
					panic("boom")
				}
				return nil
			})
			return err
		},
	}
	for name, load := range loads {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cp")
			require.NoError(t, writeCheckpoint(path, h, slices.Values(objs), JSONCodec[cpObj]{}))
			err := load(path)
			require.ErrorIs(t, err, ErrCheckpointInvalid)
			var ce *CheckpointError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, "load", ce.Op)
			requirePanicError(t, err)
			assert.ErrorContains(t, err, "object 1")
		})
	}
}
