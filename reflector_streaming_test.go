package mirror

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// preferringLW is a fakeLW that says whether it prefers streaming lists.
type preferringLW struct {
	*fakeLW
	prefers bool
}

func (p preferringLW) PrefersStreamingList() bool { return p.prefers }

// newPreferringRig is newRig over a source that says whether it prefers
// streaming lists, or says nothing if prefers is nil.
func newPreferringRig(opts ReflectorOptions, prefers *bool) *reflectorRig {
	g := newRig(opts)
	if prefers != nil {
		opts.ErrorHandler = g.errs.handle
		g.r = NewReflector[tobj](preferringLW{g.lw, *prefers}, g.store, opts)
	}
	return g
}

func ptr[V any](v V) *V { return &v }

func TestReflector_StreamsListsWhenTheSourcePrefersThemOrTheOptionAsks(t *testing.T) {
	tests := []struct {
		name   string
		option bool
		// prefers is nil for a source without PrefersStreamingList.
		prefers *bool
		stream  bool
	}{
		{name: "source prefers streaming", prefers: ptr(true), stream: true},
		{name: "source prefers List", prefers: ptr(false), stream: false},
		{name: "source does not say", stream: false},
		{name: "option on, source prefers List", option: true, prefers: ptr(false), stream: true},
		{name: "option on, source does not say", option: true, stream: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newPreferringRig(ReflectorOptions{ListWatch: ListWatchOptions{StreamingList: tt.option}}, tt.prefers)
				if tt.stream {
					g.lw.watch(addedEvent("a", "1", "5"), initialEnd("6"))
				} else {
					g.lw.page("6", "", tobj{"a", "1"})
					g.lw.watch()
				}
				g.start(t)
				synctest.Wait()

				calls := g.lw.Watches()
				require.Len(t, calls, 1)
				assert.Equal(t, tt.stream, calls[0].Opts.SendInitialEvents, "the watch is a streaming list")
				if tt.stream {
					assert.Empty(t, g.lw.Lists(), "no List")
				} else {
					assert.Equal(t, []string{"0"}, g.lw.ListVersions())
				}
				assert.Equal(t, []string{"replace@6 [a=1]"}, g.store.Log())
				assert.Empty(t, g.errs.Errors())
				g.stopRun()
			})
		})
	}
}

func TestReflector_SourceThatPrefersStreamingButRefusesItGetsList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newPreferringRig(ReflectorOptions{ListWatch: ListWatchOptions{Jitter: noJitter}}, ptr(true))
		lw, store, errs := g.lw, g.store, g.errs
		lw.watchErr(errSrcUnsupported)
		lw.page("10", "", tobj{"a", "1"})
		lw.watch(addedEvent("b", "1", "11"), end(errBoom))
		lw.page("11", "", tobj{"a", "1"}, tobj{"b", "1"})
		lw.watch()
		g.runFor(t, time.Second)

		calls := lw.Watches()
		require.Len(t, calls, 3)
		assert.True(t, calls[0].Opts.SendInitialEvents, "asks for a streaming list first")
		assert.False(t, calls[1].Opts.SendInitialEvents)
		assert.False(t, calls[2].Opts.SendInitialEvents, "and not again after the refusal")
		assert.Equal(t, []string{"0", "11"}, lw.ListVersions(), "lists, and relists with List")
		assert.Equal(t, []string{"replace@10 [a=1]", "add b=1", "replace@11 [a=1 b=1]"}, store.Log())
		require.Len(t, errs.Errors(), 1, "the refusal is not a failure")
		assert.ErrorIs(t, errs.Errors()[0], errBoom)
		g.stopRun()
	})
}
