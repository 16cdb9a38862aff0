package k8s

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/listwatch/mirror"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// syncedPods returns a synced informer of pods, made by NewInformer, and
// its Lister.
func syncedPods(t *testing.T, pods ...*corev1.Pod) (*mirror.Informer[Key, *corev1.Pod], *Lister[*corev1.Pod]) {
	t.Helper()
	src, newLW, _ := podSource(t, pods...)
	_ = src
	inf := NewInformer(newLW("", Options{}), InformerOptions[*corev1.Pod]{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = inf.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	require.NoError(t, inf.WaitForSync(ctx))
	l, err := NewLister(inf)
	require.NoError(t, err)
	return inf, l
}

func names(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	slices.Sort(out)
	return out
}

func TestLister_ListMatchesAScanForEverySelector(t *testing.T) {
	var pods []*corev1.Pod
	for i := range 60 {
		l := map[string]string{"app": fmt.Sprintf("app-%d", i%6), "tier": []string{"web", "db", "cache"}[i%3]}
		if i%4 == 0 {
			l["canary"] = "true"
		}
		pods = append(pods, labelled(fmt.Sprintf("ns-%d", i%5), fmt.Sprintf("p-%d", i), l))
	}
	pods = append(pods, labelled("ns-0", "bare", nil))
	inf, l := syncedPods(t, pods...)

	for _, s := range []string{
		"", "app=app-1", "app==app-2,tier=db", "app in (app-1,app-3)", "app=app-1,canary",
		"tier=web,!canary", "app!=app-1", "canary", "!canary", "tier notin (web)",
		"app=none", "app=app-1,tier=db", "app in (app-1,app-2),tier in (web,db),canary=true",
	} {
		sel, err := labels.Parse(s)
		require.NoError(t, err, s)
		for _, ns := range []string{"", "ns-0", "ns-3", "none"} {
			var want []*corev1.Pod
			for _, p := range inf.List() {
				if (ns == "" || p.Namespace == ns) && sel.Matches(labels.Set(p.Labels)) {
					want = append(want, p)
				}
			}
			got := l.List(sel)
			if ns != "" {
				got = l.Namespace(ns).List(sel)
			}
			assert.Equal(t, names(want), names(got), "selector %q in %q", s, ns)
		}
	}
	assert.Len(t, l.List(nil), len(pods), "nil selects everything")
	p, ok := l.Namespace("ns-0").Get("bare")
	require.True(t, ok)
	assert.Equal(t, "bare", p.Name)
	_, ok = l.Get("ns-1", "bare")
	assert.False(t, ok)
}

func TestLister_ListFollowsLabelChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, newLW, _ := podSource(t, labelled("a", "p", map[string]string{"app": "x"}))
		inf := NewInformer(newLW("", Options{}), InformerOptions[*corev1.Pod]{
			Indexers: mirror.Indexers[*corev1.Pod]{LabelIndex: IndexByLabels[*corev1.Pod]}})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); _ = inf.Run(ctx) }()
		defer func() { cancel(); <-done }()
		require.NoError(t, inf.WaitForSync(ctx))
		l, err := NewLister(inf) // the index is there already
		require.NoError(t, err)

		x, y := labels.SelectorFromSet(labels.Set{"app": "x"}), labels.SelectorFromSet(labels.Set{"app": "y"})
		require.Len(t, l.List(x), 1)
		_, err = src.Put(labelled("a", "p", map[string]string{"app": "y"}))
		require.NoError(t, err)
		synctest.Wait()
		assert.Len(t, l.List(y), 1)
		assert.Empty(t, l.List(x), "the old value's index entry is gone")
	})
}
