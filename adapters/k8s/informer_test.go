package k8s_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// relistAfterCut runs an informer made by k8s.NewInformer(src, opts) over
// four Pods, then, while its watch is cut, leaves a as it is, changes b,
// deletes c and creates another c (a new UID), deletes d, compacts the
// history so that the informer must relist, and returns the informer and
// what its handler was told from then on, up to the creation of a Pod made
// after the relist.
//
// An in-memory source stands in for the API server: what is pinned here
// is how NewInformer wires the informer, which does not depend on the
// server.
func relistAfterCut(t *testing.T, opts k8s.InformerOptions[*corev1.Pod]) (*mirror.Informer[k8s.Key, *corev1.Pod], []string) {
	t.Helper()
	src := memsource.New(k8s.StringKeyOf[*corev1.Pod], memsource.Options{})
	put := func(name, image, uid string) {
		t.Helper()
		_, err := src.Put(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "shop", Name: name, UID: types.UID(uid),
				ResourceVersion: strconv.FormatInt(src.Revision()+1, 10),
			},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: image}}},
		})
		require.NoError(t, err)
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		put(name, "v1", name+"-1")
	}

	opts.ListWatch.InitialBackoff, opts.ListWatch.MaxBackoff = time.Millisecond, 10*time.Millisecond
	opts.ErrorHandler = func(error) {} // the cut and the compaction, expected
	inf := k8s.NewInformer(src, opts)
	notes := make(chan string, 100)
	image := func(p *corev1.Pod) string { return p.Spec.Containers[0].Image }
	reg, err := inf.AddEventHandler(mirror.HandlerFuncs[*corev1.Pod]{
		AddFunc:    func(p *corev1.Pod, _ bool) { notes <- fmt.Sprintf("add %s %s", p.Name, image(p)) },
		UpdateFunc: func(old, p *corev1.Pod) { notes <- fmt.Sprintf("update %s %s->%s", p.Name, image(old), image(p)) },
		DeleteFunc: func(p *corev1.Pod, unknown bool) {
			notes <- fmt.Sprintf("delete %s %s unknown=%t", p.Name, image(p), unknown)
		},
	}, mirror.HandlerOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	require.NoError(t, mirror.WaitForCacheSync(ctx, reg))
	for range 4 {
		<-notes // the initial adds
	}

	// Every list and watch fails until the changes are made and
	// compacted: the informer can learn of them only by a relist.
	src.FailNext(1<<30, fmt.Errorf("cut: %w", source.ErrUnavailable))
	src.CutWatches()
	put("b", "v2", "b-1")
	_, ok := src.Delete("shop/c")
	require.True(t, ok)
	put("c", "v2", "c-2")
	_, ok = src.Delete("shop/d")
	require.True(t, ok)
	src.Compact(src.Revision())
	src.FailNext(0, nil)

	var got []string
	next := func() string {
		select {
		case n := <-notes:
			return n
		case <-time.After(30 * time.Second):
			require.FailNow(t, "no notification", "got so far: %q", got)
			return ""
		}
	}
	// The relist's notifications come together, its deletions last; z
	// is created after them, so any notification about a comes before
	// its add.
	for len(got) == 0 || got[len(got)-1] != "delete d v1 unknown=true" {
		got = append(got, next())
	}
	put("z", "v1", "z-1")
	for n := next(); n != "add z v1"; n = next() {
		got = append(got, n)
	}
	return inf, got
}

func TestNewInformer_RelistReportsOnlyChangesAndARecreatedObjectAsDeleteThenAdd(t *testing.T) {
	_, got := relistAfterCut(t, k8s.InformerOptions[*corev1.Pod]{})
	assert.ElementsMatch(t, []string{
		"update b v1->v2",
		"delete c v1 unknown=true", // the first c: its deletion was not seen
		"add c v2",
		"delete d v1 unknown=true",
	}, got, "nothing about a, which did not change")
	assert.Less(t, slices.Index(got, "delete c v1 unknown=true"), slices.Index(got, "add c v2"), "c: delete, then add")
}

func TestNewInformer_IndexesByNamespaceBesidesTheCallersIndexes(t *testing.T) {
	byImage := func(p *corev1.Pod) ([]string, error) { return []string{p.Spec.Containers[0].Image}, nil }
	indexers := mirror.Indexers[*corev1.Pod]{"image": byImage}
	inf, _ := relistAfterCut(t, k8s.InformerOptions[*corev1.Pod]{Indexers: indexers})

	inShop, err := inf.IndexKeys(k8s.NamespaceIndex, "shop")
	require.NoError(t, err)
	assert.ElementsMatch(t, []k8s.Key{{Namespace: "shop", Name: "a"}, {Namespace: "shop", Name: "b"},
		{Namespace: "shop", Name: "c"}, {Namespace: "shop", Name: "z"}}, inShop)
	v2, err := inf.IndexKeys("image", "v2")
	require.NoError(t, err)
	assert.ElementsMatch(t, []k8s.Key{{Namespace: "shop", Name: "b"}, {Namespace: "shop", Name: "c"}}, v2)
	assert.Len(t, indexers, 1, "the caller's map is left as it was")
}

func TestNewInformer_KeepsTheCallersFunctions(t *testing.T) {
	byName := func(p *corev1.Pod) ([]string, error) { return []string{p.Name}, nil }
	inf, got := relistAfterCut(t, k8s.InformerOptions[*corev1.Pod]{
		// A caller who wants a re-created object reported as an update,
		// and another index under the namespace index's name.
		SameObject: func(_, _ *corev1.Pod) bool { return true },
		Indexers:   mirror.Indexers[*corev1.Pod]{k8s.NamespaceIndex: byName},
	})
	assert.ElementsMatch(t, []string{
		"update b v1->v2",
		"update c v1->v2",
		"delete d v1 unknown=true",
	}, got)
	a, err := inf.IndexKeys(k8s.NamespaceIndex, "a")
	require.NoError(t, err)
	assert.Equal(t, []k8s.Key{{Namespace: "shop", Name: "a"}}, a, "the caller's index")
}
