package k8s

import (
	"context"
	"errors"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
)

func int64p(v int64) *int64 { return &v }
func boolp(v bool) *bool    { return &v }

func TestWatch_AsksForTheVersionBookmarksAndTimeoutTheCallerMeans(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts source.WatchOptions
		want metav1.ListOptions
	}{
		{"after a version", source.WatchOptions{ResourceVersion: "42"},
			metav1.ListOptions{Watch: true, ResourceVersion: "42"}},
		{"bookmarks and a timeout in whole seconds", source.WatchOptions{ResourceVersion: "42", AllowBookmarks: true, Timeout: 1500 * time.Millisecond},
			metav1.ListOptions{Watch: true, ResourceVersion: "42", AllowWatchBookmarks: true, TimeoutSeconds: int64p(2)}},
		{"streaming list, consistent", source.WatchOptions{SendInitialEvents: true},
			metav1.ListOptions{Watch: true, SendInitialEvents: boolp(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true}},
		{"streaming list not older than a version", source.WatchOptions{ResourceVersion: "42", SendInitialEvents: true, Timeout: time.Minute},
			metav1.ListOptions{Watch: true, ResourceVersion: "42", SendInitialEvents: boolp(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true, TimeoutSeconds: int64p(60)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakePods{watches: []fakeWatch{{src: newFakeSource()}}}
			w, err := f.lw(Options{LabelSelector: "app=web"}).Watch(context.Background(), tc.opts)
			require.NoError(t, err)
			defer w.Stop()
			tc.want.LabelSelector = "app=web"
			assert.Equal(t, []metav1.ListOptions{tc.want}, f.watchOpts)
			assert.Empty(t, f.listOpts)
		})
	}
}

func TestWatch_FromNowReadsTheNewestVersionAndWatchesAfterIt(t *testing.T) {
	// Kubernetes answers a watch from "" or "0" with the whole state as
	// Added events; "from now" means only what changes after now.
	for _, rv := range []string{"", "0"} {
		t.Run(rv, func(t *testing.T) {
			f := &fakePods{
				lists:   []fakeList{{list: podList("77", "tok", pod("a", "p", "3"))}},
				watches: []fakeWatch{{src: newFakeSource()}},
			}
			w, err := f.lw(Options{FieldSelector: "x=y"}).Watch(context.Background(), source.WatchOptions{ResourceVersion: rv})
			require.NoError(t, err)
			defer w.Stop()
			assert.Equal(t, []metav1.ListOptions{{FieldSelector: "x=y", Limit: 1}}, f.listOpts, "a consistent list of one object")
			assert.Equal(t, []metav1.ListOptions{{FieldSelector: "x=y", Watch: true, ResourceVersion: "77"}}, f.watchOpts)
		})
	}
}

func TestWatch_FromNowFailsWithTheListsClassifiedError(t *testing.T) {
	f := &fakePods{lists: []fakeList{{err: apierrors.NewTooManyRequests("slow down", 1)}}}
	_, err := f.lw(Options{}).Watch(context.Background(), source.WatchOptions{})
	require.ErrorIs(t, err, source.ErrUnavailable)
	assert.True(t, apierrors.IsTooManyRequests(err))
}

func TestWatch_EventsCarryTypedObjectsAndTheirVersions(t *testing.T) {
	src := newFakeSource()
	f := &fakePods{watches: []fakeWatch{{src: src}}}
	w, err := f.lw(Options{}).Watch(context.Background(), source.WatchOptions{ResourceVersion: "1", AllowBookmarks: true})
	require.NoError(t, err)
	defer w.Stop()
	p2, p3, p4 := pod("a", "p", "2"), pod("a", "p", "3"), pod("a", "p", "4")
	src.events <- watch.Event{Type: watch.Added, Object: p2}
	src.events <- watch.Event{Type: watch.Modified, Object: p3}
	src.events <- watch.Event{Type: watch.Deleted, Object: p4}
	src.events <- watch.Event{Type: watch.Bookmark, Object: pod("", "", "9")}
	want := []source.Event[*corev1.Pod]{
		{Type: source.Added, Object: p2, ResourceVersion: "2"},
		{Type: source.Updated, Object: p3, ResourceVersion: "3"},
		{Type: source.Deleted, Object: p4, ResourceVersion: "4"},
		{Type: source.Bookmark, ResourceVersion: "9"},
	}
	for i, ev := range want {
		got, err := w.Next(context.Background())
		require.NoError(t, err, "event %d", i)
		assert.Equal(t, ev, got, "event %d", i)
	}
}

func TestWatch_BookmarksPassOnlyIfAllowedExceptTheEndOfAStreamingList(t *testing.T) {
	end := pod("", "", "9")
	end.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	for _, tc := range []struct {
		name string
		opts source.WatchOptions
		want []source.Event[*corev1.Pod]
	}{
		{"allowed", source.WatchOptions{ResourceVersion: "1", AllowBookmarks: true}, []source.Event[*corev1.Pod]{
			{Type: source.Bookmark, ResourceVersion: "8"},
			{Type: source.Bookmark, ResourceVersion: "9"}, // not a streaming list: no end to mark
		}},
		{"not allowed", source.WatchOptions{ResourceVersion: "1"}, nil},
		{"streaming list", source.WatchOptions{SendInitialEvents: true}, []source.Event[*corev1.Pod]{
			{Type: source.Bookmark, ResourceVersion: "9", InitialEventsEnd: true},
		}},
		{"streaming list with bookmarks", source.WatchOptions{SendInitialEvents: true, AllowBookmarks: true}, []source.Event[*corev1.Pod]{
			{Type: source.Bookmark, ResourceVersion: "8"},
			{Type: source.Bookmark, ResourceVersion: "9", InitialEventsEnd: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newFakeSource()
			f := &fakePods{watches: []fakeWatch{{src: src}}}
			w, err := f.lw(Options{}).Watch(context.Background(), tc.opts)
			require.NoError(t, err)
			defer w.Stop()
			src.events <- watch.Event{Type: watch.Bookmark, Object: pod("", "", "8")}
			src.events <- watch.Event{Type: watch.Bookmark, Object: end}
			close(src.events)
			var got []source.Event[*corev1.Pod]
			for {
				ev, err := w.Next(context.Background())
				if err != nil {
					require.ErrorIs(t, err, io.EOF)
					break
				}
				got = append(got, ev)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestWatch_ObjectOfAnotherTypeIsAnEventErrorAndTheStreamGoesOn(t *testing.T) {
	src := newFakeSource()
	f := &fakePods{watches: []fakeWatch{{src: src}}}
	w, err := f.lw(Options{}).Watch(context.Background(), source.WatchOptions{ResourceVersion: "1"})
	require.NoError(t, err)
	defer w.Stop()
	src.events <- watch.Event{Type: watch.Modified, Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "cm", ResourceVersion: "5"}}}
	src.events <- watch.Event{Type: watch.Added, Object: (*corev1.Pod)(nil)}
	src.events <- watch.Event{Type: watch.Added, Object: pod("a", "p", "6")}

	ev, err := w.Next(context.Background())
	require.NoError(t, err)
	assert.Equal(t, source.Error, ev.Type)
	var oe *mirror.ObjectError
	require.ErrorAs(t, ev.Err, &oe)
	assert.Equal(t, "a/cm", oe.Key)
	assert.Equal(t, "5", oe.ResourceVersion)

	ev, err = w.Next(context.Background())
	require.NoError(t, err)
	assert.Equal(t, source.Error, ev.Type, "a nil object")

	ev, err = w.Next(context.Background())
	require.NoError(t, err)
	assert.Equal(t, source.Added, ev.Type)
	assert.Equal(t, "6", ev.ResourceVersion)
}

func TestWatch_ErrorEventEndsTheStreamWithTheClassifiedStatus(t *testing.T) {
	expired := apierrors.NewResourceExpired("too old resource version: 1 (5)")
	asUnstructured, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old",
	})
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		obj    runtime.Object
		kind   error
		status bool
	}{
		{"expired", &expired.ErrStatus, source.ErrExpired, true},
		{"expired, from the dynamic client", &unstructured.Unstructured{Object: asUnstructured}, source.ErrExpired, true},
		{"too large", &tooLarge().(*apierrors.StatusError).ErrStatus, source.ErrTooLargeResourceVersion, true},
		{"429", &apierrors.NewTooManyRequests("slow down", 1).ErrStatus, source.ErrUnavailable, true},
		{"500 decoding", &apierrors.NewInternalError(errors.New("unable to decode")).ErrStatus, nil, true},
		{"not a status", pod("a", "p", "3"), nil, false},
		{"no object", nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newFakeSource()
			f := &fakePods{watches: []fakeWatch{{src: src}}}
			w, err := f.lw(Options{}).Watch(context.Background(), source.WatchOptions{ResourceVersion: "1"})
			require.NoError(t, err)
			defer w.Stop()
			src.events <- watch.Event{Type: watch.Error, Object: tc.obj}
			src.events <- watch.Event{Type: watch.Added, Object: pod("a", "p", "6")}

			_, err = w.Next(context.Background())
			require.Error(t, err)
			assert.NotErrorIs(t, err, io.EOF, "an error is not the end of the stream")
			for _, kind := range []error{source.ErrExpired, source.ErrTooLargeResourceVersion, source.ErrUnavailable} {
				assert.Equal(t, kind == tc.kind, errors.Is(err, kind), "errors.Is(err, %v)", kind)
			}
			var status apierrors.APIStatus
			assert.Equal(t, tc.status, errors.As(err, &status), "the status stays visible")
			assert.True(t, src.isStopped(), "the stream is released")
			_, again := w.Next(context.Background())
			assert.Equal(t, err, again, "every later Next returns the same error")
		})
	}
}

func TestWatch_StreamEndedByTheSourceIsEOF(t *testing.T) {
	src := newFakeSource()
	f := &fakePods{watches: []fakeWatch{{src: src}}}
	w, err := f.lw(Options{}).Watch(context.Background(), source.WatchOptions{ResourceVersion: "1"})
	require.NoError(t, err)
	close(src.events)
	_, err = w.Next(context.Background())
	require.ErrorIs(t, err, io.EOF)
	assert.True(t, src.isStopped())
	w.Stop()
}

func TestWatch_StopIsIdempotentAndEndsANextInProgressWithEOF(t *testing.T) {
	src := newFakeSource()
	f := &fakePods{watches: []fakeWatch{{src: src}}}
	w, err := f.lw(Options{}).Watch(context.Background(), source.WatchOptions{ResourceVersion: "1"})
	require.NoError(t, err)
	done := make(chan error)
	go func() {
		_, err := w.Next(context.Background())
		done <- err
	}()
	w.Stop()
	w.Stop()
	require.ErrorIs(t, <-done, io.EOF)
	assert.True(t, src.isStopped())
	_, err = w.Next(context.Background())
	require.ErrorIs(t, err, io.EOF)
	w.Stop()
}

func TestWatch_ErrorEventCausedByStopIsStillEOF(t *testing.T) {
	// client-go's stream watcher reports the connection Stop closes as a
	// decoding error when its reader is waiting for the next event.
	decoding := apierrors.NewInternalError(errors.New("unable to decode an event from the watch stream: http2: response body closed"))
	for _, end := range []string{"Stop", "context"} {
		// Next chooses at random between the event and the end it also
		// sees: twenty rounds make a wrong choice all but certain to show.
		for range 20 {
			src := newFakeSource()
			f := &fakePods{watches: []fakeWatch{{src: src}}}
			ctx, cancel := context.WithCancel(context.Background())
			w, err := f.lw(Options{}).Watch(ctx, source.WatchOptions{ResourceVersion: "1"})
			require.NoError(t, err)
			if end == "Stop" {
				w.Stop()
			} else {
				cancel()
				<-src.stopped
			}
			src.events <- watch.Event{Type: watch.Error, Object: &decoding.ErrStatus}
			_, err = w.Next(context.Background())
			cancel()
			if end == "Stop" {
				require.ErrorIs(t, err, io.EOF, end)
			} else {
				require.ErrorIs(t, err, context.Canceled, end)
			}
		}
	}
}

func TestWatch_NextReturnsItsContextsErrorAndReleasesTheStream(t *testing.T) {
	src := newFakeSource()
	f := &fakePods{watches: []fakeWatch{{src: src}}}
	w, err := f.lw(Options{}).Watch(context.Background(), source.WatchOptions{ResourceVersion: "1"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = w.Next(ctx)
	require.ErrorIs(t, err, context.Canceled)
	assert.True(t, src.isStopped())
	_, err = w.Next(context.Background())
	require.ErrorIs(t, err, context.Canceled, "the stream stays ended")
}

func TestWatch_EndOfTheWatchContextReleasesTheStreamWithoutStopOrNext(t *testing.T) {
	src := newFakeSource()
	f := &fakePods{watches: []fakeWatch{{src: src}}}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := f.lw(Options{}).Watch(ctx, source.WatchOptions{ResourceVersion: "1"})
	require.NoError(t, err)
	cancel()
	<-src.stopped // client-go's watch is stopped though nobody called Stop or Next
	_, err = w.Next(context.Background())
	require.ErrorIs(t, err, context.Canceled)
	w.Stop()
}

func TestWatch_StreamingListRefusedIsUnsupported(t *testing.T) {
	refused := apierrors.NewInvalid(schema.GroupKind{Group: "meta.k8s.io", Kind: "ListOptions"}, "", field.ErrorList{
		field.Forbidden(field.NewPath("sendInitialEvents"), "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"),
	})
	f := &fakePods{watches: []fakeWatch{{err: refused}, {err: refused}}}
	lw := f.lw(Options{})
	_, err := lw.Watch(context.Background(), source.WatchOptions{SendInitialEvents: true})
	require.ErrorIs(t, err, errors.ErrUnsupported)
	assert.True(t, apierrors.IsInvalid(err))

	_, err = lw.Watch(context.Background(), source.WatchOptions{ResourceVersion: "5"})
	require.Error(t, err)
	assert.NotErrorIs(t, err, errors.ErrUnsupported, "only a streaming list can be refused as one")
}

func TestWatch_ErrorsStartingTheWatchAreClassified(t *testing.T) {
	f := &fakePods{watches: []fakeWatch{{err: gone()}, {err: netError("dial", syscall.ECONNREFUSED)}}}
	lw := f.lw(Options{})
	_, err := lw.Watch(context.Background(), source.WatchOptions{ResourceVersion: "5"})
	require.ErrorIs(t, err, source.ErrExpired)
	_, err = lw.Watch(context.Background(), source.WatchOptions{ResourceVersion: "5"})
	require.ErrorIs(t, err, source.ErrUnavailable)
}
