package etcd

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memberFreezes are the two ways a member stops serving its clients, played
// by a proxy in front of it.
var memberFreezes = []struct {
	name   string
	freeze func(p *proxy)
}{
	// SIGSTOP: the connections stay up, nothing answers.
	{"paused", (*proxy).Pause},
	// Killed: the connections are reset, new ones refused; the client
	// reconnects, and holds its progress requests meanwhile.
	{"killed", (*proxy).Cut},
}

// silenceOptions make a watch give up on a silent member within half a
// second, and a Watch on one within a second.
var silenceOptions = etcdmirror.Options{ProgressInterval: 200 * time.Millisecond, RequestTimeout: time.Second}

// watchResults runs w.Next until it fails: events other than bookmarks go
// to the first channel, the error to the second.
func watchResults[T any](w source.Watcher[T]) (<-chan source.Event[T], <-chan error) {
	events, errs := make(chan source.Event[T], 16), make(chan error, 1)
	go func() {
		for {
			ev, err := w.Next(context.Background())
			if err != nil {
				errs <- err
				return
			}
			if ev.Type != source.Bookmark {
				events <- ev
			}
		}
	}()
	return events, errs
}

// requireEnds waits, up to convergeTimeout, for the watch whose errors
// come on errs to end, and returns its error.
func requireEnds(t *testing.T, errs <-chan error) error {
	t.Helper()
	require.Eventually(t, func() bool { return len(errs) > 0 }, convergeTimeout, 10*time.Millisecond,
		"the watch ends instead of going silent")
	return <-errs
}

func TestWatch_SilentMemberEndsWithUnavailableAndANewWatchMissesNothing(t *testing.T) {
	t.Parallel()
	for _, f := range memberFreezes {
		for _, idle := range []bool{false, true} {
			name := f.name + "/after an event"
			if idle {
				// The watch starts just after the store's revision,
				// where etcd answers no progress request: it has to
				// start again behind the store, and that meets the
				// silent member too.
				name = f.name + "/ahead of an idle store"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				m := startEtcd(t)
				direct := newClient(t, m.endpoint())
				p := newProxy(t, m.cliURL.Host)
				c := newClient(t, p.endpoint())
				ctx := context.Background()
				lw := etcdmirror.New(c, "/quiet/", silenceOptions)
				last := rvOf(currentRev(t, direct))
				w := watch(t, lw, source.WatchOptions{ResourceVersion: last, AllowBookmarks: true})
				events, errs := watchResults(w)
				if !idle {
					put, err := direct.Put(ctx, "/quiet/a", "1")
					require.NoError(t, err)
					last = rvOf(put.Header.Revision)
					select {
					case ev := <-events:
						require.Equal(t, last, ev.ResourceVersion)
					case <-time.After(eventTimeout):
						t.Fatal("no event")
					}
				}

				f.freeze(p)
				_, err := direct.Put(ctx, "/quiet/b", "2")
				require.NoError(t, err)
				err = requireEnds(t, errs)
				require.ErrorIs(t, err, source.ErrUnavailable)
				assert.Empty(t, events, "nothing came through the frozen member")

				_, err = lw.Watch(ctx, source.WatchOptions{ResourceVersion: last})
				require.ErrorIs(t, err, source.ErrUnavailable, "no new watch while frozen")

				p.Resume()
				w = watchRetrying(t, lw, source.WatchOptions{ResourceVersion: last})
				ev := next(t, w)
				assert.Equal(t, "/quiet/b", ev.Object.Key, "the put made meanwhile arrives")
			})
		}
	}
}

// adapterGoroutines returns the stacks of the goroutines that run code of
// the etcd adapter.
func adapterGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var ours []string
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("github.com/listwatch/mirror/adapters/etcd.")) {
			ours = append(ours, string(g))
		}
	}
	return ours
}

// Not parallel: it counts the adapter's goroutines, so no other watch may
// run meanwhile. A killed member is where a progress request waits for the
// client to reconnect, which it does not: the watch's end must end it.
func TestWatch_EndedBySilenceLeavesNoGoroutineOfTheAdapter(t *testing.T) {
	for _, f := range memberFreezes {
		t.Run(f.name, func(t *testing.T) {
			m := startEtcd(t)
			p := newProxy(t, m.cliURL.Host)
			c := newClient(t, p.endpoint())
			require.Empty(t, adapterGoroutines(), "none before")

			lw := etcdmirror.New(c, "/quiet/", silenceOptions)
			w := watch(t, lw, source.WatchOptions{ResourceVersion: rvOf(currentRev(t, c)), AllowBookmarks: true})
			_, errs := watchResults(w)
			f.freeze(p)
			require.ErrorIs(t, requireEnds(t, errs), source.ErrUnavailable)
			require.Eventually(t, func() bool { return len(adapterGoroutines()) == 0 }, convergeTimeout, 10*time.Millisecond,
				"the watch's goroutines end with it, although the member is still frozen")
			p.Resume()
		})
	}
}
