package memsource_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
)

// obj is the object type of these tests.
type obj struct {
	Key string
	Val int
}

func keyOf(o obj) (string, error) { return o.Key, nil }

func newSource(opts memsource.Options) *memsource.Source[obj] {
	return memsource.New(keyOf, opts)
}

// must returns the revision of a Put whose key function cannot fail.
func must(rev int64, err error) int64 {
	if err != nil {
		panic(err)
	}
	return rev
}

// Compile-time check that Source is a ListWatcher.
var _ source.ListWatcher[obj] = (*memsource.Source[obj])(nil)

func TestSource_RevisionsAreMonotonic(t *testing.T) {
	s := newSource(memsource.Options{})
	require.Equal(t, int64(1), s.Revision(), "a new source is at revision 1")

	steps := []struct {
		name    string
		do      func() (int64, bool)
		wantRev int64
		wantOK  bool
	}{
		{"create", func() (int64, bool) { return must(s.Put(obj{"a", 1})), true }, 2, true},
		{"create another", func() (int64, bool) { return must(s.Put(obj{"b", 1})), true }, 3, true},
		{"update", func() (int64, bool) { return must(s.Put(obj{"a", 2})), true }, 4, true},
		{"update with the same value", func() (int64, bool) { return must(s.Put(obj{"a", 2})), true }, 5, true},
		{"delete", func() (int64, bool) { return s.Delete("b") }, 6, true},
		{"delete a missing key changes nothing", func() (int64, bool) { return s.Delete("b") }, 6, false},
		{"recreate", func() (int64, bool) { return must(s.Put(obj{"b", 3})), true }, 7, true},
	}
	for _, st := range steps {
		rev, ok := st.do()
		assert.Equal(t, st.wantRev, rev, st.name)
		assert.Equal(t, st.wantOK, ok, st.name)
		assert.Equal(t, st.wantRev, s.Revision(), st.name)
	}
}

func TestSource_ReadsSeeTheCurrentContent(t *testing.T) {
	s := newSource(memsource.Options{})
	s.Put(obj{"a", 1})
	s.Put(obj{"b", 1})
	s.Put(obj{"a", 2})
	s.Delete("b")
	s.Put(obj{"c", 1})

	got, ok := s.Get("a")
	assert.True(t, ok)
	assert.Equal(t, obj{"a", 2}, got)
	_, ok = s.Get("b")
	assert.False(t, ok)
	assert.Equal(t, 2, s.Len())

	snap := s.Snapshot()
	assert.Equal(t, map[string]obj{"a": {"a", 2}, "c": {"c", 1}}, snap)
	snap["z"] = obj{"z", 0}
	assert.Equal(t, 2, s.Len(), "the snapshot is a copy")
}

func TestSource_FailNextFailsTheNextCalls(t *testing.T) {
	errBoom := fmt.Errorf("boom: %w", source.ErrUnavailable)
	list := func(s *memsource.Source[obj]) error {
		_, err := s.List(context.Background(), source.ListOptions{})
		return err
	}
	watch := func(s *memsource.Source[obj]) error {
		w, err := s.Watch(context.Background(), source.WatchOptions{})
		if err == nil {
			w.Stop()
		}
		return err
	}
	tests := []struct {
		name  string
		n     int
		calls []func(*memsource.Source[obj]) error
		fails []bool
	}{
		{"lists", 2, []func(*memsource.Source[obj]) error{list, list, list}, []bool{true, true, false}},
		{"watches", 1, []func(*memsource.Source[obj]) error{watch, watch}, []bool{true, false}},
		{"lists and watches share the count", 2, []func(*memsource.Source[obj]) error{watch, list, watch, list}, []bool{true, true, false, false}},
		{"zero cancels", 0, []func(*memsource.Source[obj]) error{list, watch}, []bool{false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSource(memsource.Options{})
			s.Put(obj{"a", 1})
			s.FailNext(5, errBoom)
			s.FailNext(tt.n, errBoom) // replaces the earlier setting
			for i, call := range tt.calls {
				err := call(s)
				if tt.fails[i] {
					require.ErrorIs(t, err, source.ErrUnavailable, "call %d", i)
				} else {
					require.NoError(t, err, "call %d", i)
				}
			}
		})
	}
}

func TestSource_HistoryLimitCompactsOldestChanges(t *testing.T) {
	s := newSource(memsource.Options{HistoryLimit: 3})
	for i := range 5 {
		s.Put(obj{"a", i})
	}
	// Revisions 4, 5 and 6 are kept: a watch must start at 3 or later.
	_, err := s.Watch(context.Background(), source.WatchOptions{ResourceVersion: "2"})
	require.ErrorIs(t, err, source.ErrExpired)
	w, err := s.Watch(context.Background(), source.WatchOptions{ResourceVersion: "3"})
	require.NoError(t, err)
	defer w.Stop()
	for rev := 4; rev <= 6; rev++ {
		ev, err := w.Next(context.Background())
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprint(rev), ev.ResourceVersion)
	}
}

func TestSource_CompactBeyondCurrentStopsAtCurrent(t *testing.T) {
	s := newSource(memsource.Options{})
	s.Put(obj{"a", 1})
	s.Put(obj{"a", 2})
	s.Compact(100)
	w, err := s.Watch(context.Background(), source.WatchOptions{ResourceVersion: "3"})
	require.NoError(t, err, "the current revision stays watchable")
	w.Stop()
	_, err = s.Watch(context.Background(), source.WatchOptions{ResourceVersion: "2"})
	require.ErrorIs(t, err, source.ErrExpired)
}

func TestSource_InvalidResourceVersionIsInvalid(t *testing.T) {
	s := newSource(memsource.Options{})
	s.Put(obj{"a", 1})
	for _, rv := range []string{"x", "-1", "1.5", " 1"} {
		_, err := s.List(context.Background(), source.ListOptions{ResourceVersion: rv})
		assert.ErrorIs(t, err, memsource.ErrInvalid, "list at %q", rv)
		_, err = s.Watch(context.Background(), source.WatchOptions{ResourceVersion: rv})
		assert.ErrorIs(t, err, memsource.ErrInvalid, "watch at %q", rv)
	}
}

func TestSource_DoneContextFailsListAndWatch(t *testing.T) {
	s := newSource(memsource.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.List(ctx, source.ListOptions{})
	assert.True(t, errors.Is(err, context.Canceled))
	_, err = s.Watch(ctx, source.WatchOptions{})
	assert.True(t, errors.Is(err, context.Canceled))
}

func TestSource_EventsCarryTheirRevisionAsDecimal(t *testing.T) {
	// Revisions cross several powers of ten and many chunks of formatted
	// revision strings.
	s := newSource(memsource.Options{HistoryLimit: 20000})
	w, err := s.Watch(context.Background(), source.WatchOptions{})
	require.NoError(t, err)
	defer w.Stop()
	const n = 12345
	for i := range n {
		s.Put(obj{"a", i})
	}
	for rev := 2; rev <= n+1; rev++ { // a new source is at 1
		ev, err := w.Next(context.Background())
		require.NoError(t, err)
		if ev.ResourceVersion != fmt.Sprint(rev) {
			require.Equal(t, fmt.Sprint(rev), ev.ResourceVersion)
		}
	}
}

func TestSource_PutWithAFailingKeyChangesNothing(t *testing.T) {
	errNoKey := errors.New("no key")
	s := memsource.New(func(o obj) (string, error) {
		if o.Key == "" {
			return "", errNoKey
		}
		return o.Key, nil
	}, memsource.Options{})
	_, err := s.Put(obj{Val: 1})
	var ke *mirror.KeyError
	require.ErrorAs(t, err, &ke)
	require.ErrorIs(t, err, errNoKey)
	assert.EqualValues(t, 1, s.Revision(), "no change recorded")
	assert.Zero(t, s.Len())
}

func TestSource_PutWithAPanickingKeyChangesNothing(t *testing.T) {
	s := memsource.New(func(o obj) (string, error) {
		if o.Val < 0 {
			panic("boom")
		}
		return o.Key, nil
	}, memsource.Options{})
	_, err := s.Put(obj{Key: "a", Val: -1})
	var ke *mirror.KeyError
	require.ErrorAs(t, err, &ke)
	var pe *mirror.PanicError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "boom", pe.Value)
	assert.Contains(t, string(pe.Stack), "source_test.go")
	assert.EqualValues(t, 1, s.Revision(), "no change recorded")
	rev, err := s.Put(obj{Key: "a", Val: 1})
	require.NoError(t, err, "the lock is free")
	assert.EqualValues(t, 2, rev)
}
