package memsource_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
)

// listAll follows a paged list to its end, calling between after each page.
func listAll(t *testing.T, s *memsource.Source[obj], opts source.ListOptions, between func()) ([]obj, string) {
	t.Helper()
	var items []obj
	rv := ""
	for {
		res, err := s.List(context.Background(), opts)
		require.NoError(t, err)
		if rv == "" {
			rv = res.ResourceVersion
		}
		require.Equal(t, rv, res.ResourceVersion, "every page is at the first page's version")
		if opts.Limit > 0 {
			require.LessOrEqual(t, int64(len(res.Items)), opts.Limit)
		}
		items = append(items, res.Items...)
		if res.Continue == "" {
			return items, rv
		}
		opts.Continue = res.Continue
		if between != nil {
			between()
		}
	}
}

func fill(s *memsource.Source[obj], n int) []obj {
	var want []obj
	for i := range n {
		o := obj{fmt.Sprintf("k%02d", i), i}
		s.Put(o)
		want = append(want, o)
	}
	return want
}

func TestList_ResourceVersions(t *testing.T) {
	s := newSource(memsource.Options{})
	want := fill(s, 3) // revision 4
	tests := []struct {
		rv      string
		wantErr error
	}{
		{"", nil},
		{"0", nil},
		{"1", nil}, // not older than 1: the current state will do
		{"2", nil}, // nor than 2, the first change
		{"4", nil},
		{"5", source.ErrTooLargeResourceVersion},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("rv=%q", tt.rv), func(t *testing.T) {
			res, err := s.List(context.Background(), source.ListOptions{ResourceVersion: tt.rv})
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "4", res.ResourceVersion)
			assert.Equal(t, want, res.Items)
			assert.Empty(t, res.Continue)
		})
	}
}

func TestList_ItemsAreInKeyOrder(t *testing.T) {
	s := newSource(memsource.Options{})
	for _, k := range []string{"m", "b", "z", "a", ""} {
		s.Put(obj{k, 0})
	}
	for _, limit := range []int64{0, 1, 2, 10} {
		items, _ := listAll(t, s, source.ListOptions{Limit: limit}, nil)
		assert.Equal(t, []obj{{"", 0}, {"a", 0}, {"b", 0}, {"m", 0}, {"z", 0}}, items, "limit %d", limit)
	}
}

func TestList_PagesAreAtTheFirstPagesRevisionWhileWritersChangeTheSource(t *testing.T) {
	tests := []struct {
		name   string
		limit  int64
		change func(s *memsource.Source[obj], page int)
	}{
		{"updates", 3, func(s *memsource.Source[obj], page int) { s.Put(obj{"k05", 100 + page}) }},
		{"deletes ahead of the cursor", 3, func(s *memsource.Source[obj], page int) { s.Delete(fmt.Sprintf("k%02d", 9-page)) }},
		{"deletes behind the cursor", 2, func(s *memsource.Source[obj], page int) { s.Delete(fmt.Sprintf("k%02d", page)) }},
		{"creates between keys", 4, func(s *memsource.Source[obj], page int) { s.Put(obj{fmt.Sprintf("k%02d+", page*2), 0}) }},
		{"delete and recreate", 1, func(s *memsource.Source[obj], page int) {
			s.Delete("k07")
			s.Put(obj{"k07", 700 + page})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSource(memsource.Options{})
			want := fill(s, 10)
			page := 0
			got, rv := listAll(t, s, source.ListOptions{Limit: tt.limit}, func() {
				page++
				tt.change(s, page)
			})
			assert.Equal(t, "11", rv)
			assert.Equal(t, want, got)
			assert.Greater(t, s.Revision(), int64(11), "the source changed meanwhile")
		})
	}
}

func TestList_PagesRebuildAnOlderRevisionFromHistory(t *testing.T) {
	// More lists in progress than the source keeps sorted states for: the
	// first ones are answered by rebuilding their revision from history.
	s := newSource(memsource.Options{})
	fill(s, 6)
	type list struct {
		want []obj
		opts source.ListOptions
		got  []obj
	}
	var lists []*list
	for i := range 8 {
		res, err := s.List(context.Background(), source.ListOptions{Limit: 2})
		require.NoError(t, err)
		lists = append(lists, &list{want: listCurrent(t, s), opts: source.ListOptions{Limit: 2, Continue: res.Continue}, got: res.Items})
		// Change every kind of thing before the next list starts.
		s.Put(obj{"k01", 100 + i})
		s.Put(obj{fmt.Sprintf("new%d", i), i})
		s.Delete(fmt.Sprintf("k%02d", 2+i%4))
		s.Put(obj{fmt.Sprintf("k%02d", 2+(i+1)%4), i})
	}
	for i, l := range lists {
		for l.opts.Continue != "" {
			res, err := s.List(context.Background(), l.opts)
			require.NoError(t, err)
			l.got = append(l.got, res.Items...)
			l.opts.Continue = res.Continue
		}
		assert.Equal(t, l.want, l.got, "list %d", i)
	}
}

// listCurrent returns the current content in key order, in one page.
func listCurrent(t *testing.T, s *memsource.Source[obj]) []obj {
	res, err := s.List(context.Background(), source.ListOptions{})
	require.NoError(t, err)
	return res.Items
}

func TestList_ContinuationAfterCompactionExpires(t *testing.T) {
	tests := []struct {
		name    string
		compact func(s *memsource.Source[obj])
		wantErr error
	}{
		{"compaction past the list", func(s *memsource.Source[obj]) { s.Put(obj{"x", 0}); s.Compact(s.Revision()) }, source.ErrExpired},
		{"compaction at the list", func(s *memsource.Source[obj]) { s.Put(obj{"x", 0}); s.Compact(5) }, nil},
		{"history limit overtaking the list", func(s *memsource.Source[obj]) {
			for i := range 5 {
				s.Put(obj{"x", i})
			}
		}, source.ErrExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSource(memsource.Options{HistoryLimit: 4})
			fill(s, 4)
			res, err := s.List(context.Background(), source.ListOptions{Limit: 2})
			require.NoError(t, err)
			tt.compact(s)
			_, err = s.List(context.Background(), source.ListOptions{Limit: 2, Continue: res.Continue})
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.wantErr)
			}
		})
	}
}

func TestList_ContinuationIgnoresResourceVersion(t *testing.T) {
	s := newSource(memsource.Options{})
	fill(s, 4)
	res, err := s.List(context.Background(), source.ListOptions{Limit: 2})
	require.NoError(t, err)
	res, err = s.List(context.Background(), source.ListOptions{Limit: 2, Continue: res.Continue, ResourceVersion: "999"})
	require.NoError(t, err)
	assert.Equal(t, []obj{{"k02", 2}, {"k03", 3}}, res.Items)
	assert.Equal(t, "5", res.ResourceVersion)
}

func TestList_MalformedContinueIsInvalid(t *testing.T) {
	s := newSource(memsource.Options{})
	fill(s, 4)
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, token := range []string{
		"not base64!",
		enc("k01"),    // no revision
		enc("x:k01"),  // revision not a number
		enc("0:k01"),  // no list is at revision 0
		enc("-1:k01"), // negative
		enc("9:k01"),  // beyond the current revision
	} {
		_, err := s.List(context.Background(), source.ListOptions{Limit: 2, Continue: token})
		assert.ErrorIs(t, err, memsource.ErrInvalid, "token %q", token)
	}
}

func TestList_EmptySourceIsAtRevisionOne(t *testing.T) {
	// Not "0": a watch from "0" starts now, not at the list.
	s := newSource(memsource.Options{})
	res, err := s.List(context.Background(), source.ListOptions{Limit: 5})
	require.NoError(t, err)
	assert.Empty(t, res.Items)
	assert.Equal(t, "1", res.ResourceVersion)
	assert.Empty(t, res.Continue)
}

func TestList_WatchFromTheListsVersionGetsTheChangesMadeSince(t *testing.T) {
	// A consumer lists, then watches from the list's version; what changed
	// in between must reach the watch. A new source is the case that broke:
	// its list must not say "0", which a watch reads as "from now".
	tests := []struct {
		name   string
		before int // changes made before the list
	}{
		{"new source", 0},
		{"source with changes", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSource(memsource.Options{})
				fill(s, tt.before)
				res, err := s.List(t.Context(), source.ListOptions{})
				require.NoError(t, err)

				// Between the list and the watch:
				added := must(s.Put(obj{"x", 1}))
				modified := must(s.Put(obj{"x", 2}))
				w := watch(t, s, source.WatchOptions{ResourceVersion: res.ResourceVersion})
				for _, want := range []source.Event[obj]{
					ev(source.Added, obj{"x", 1}, int(added)),
					ev(source.Updated, obj{"x", 2}, int(modified)),
				} {
					got := nextAsync(t.Context(), w)
					synctest.Wait()
					select {
					case r := <-got:
						require.NoError(t, r.err)
						assert.Equal(t, want, r.ev)
					default:
						require.FailNow(t, "a change made between the list and the watch was lost",
							"listed at %q; want %+v", res.ResourceVersion, want)
					}
				}
				requireBlocked(t, nextAsync(t.Context(), w))
			})
		})
	}
}
