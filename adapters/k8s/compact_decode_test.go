package k8s

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"reflect"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
)

// clusterPod is Pod i of a Deployment app as bench's realistic generator
// makes them: the IPs, times and kubelet's managedFields entry of the
// first Pod, the rest the Pod's own.
func clusterPod(app string, i int) *corev1.Pod {
	p, first := templatePod(app, i), templatePod(app, 0)
	p.Status.PodIP, p.Status.PodIPs, p.Status.StartTime = first.Status.PodIP, first.Status.PodIPs, first.Status.StartTime
	p.Status.Conditions = first.Status.Conditions
	p.ManagedFields[1] = first.ManagedFields[1]
	return p
}

func managedFieldsStripped(pods []*corev1.Pod) []*corev1.Pod {
	for _, p := range pods {
		p.ManagedFields = nil
	}
	return pods
}

func podsOf(each int, pod func(app string, i int) *corev1.Pod) []*corev1.Pod {
	var pods []*corev1.Pod
	for i := range each {
		for _, app := range []string{"web", "db", "cache"} {
			pods = append(pods, pod(app, i))
		}
	}
	return pods
}

// roomyCompactLW returns a compactLW whose table of runs seen has room
// enough that no run of a test loses its slot to another (which would
// hold it as a literal once more, and make which runs are shared a
// matter of the hash seed).
func roomyCompactLW() *compactLW[*corev1.Pod] {
	c := CompactListWatcher[*corev1.Pod](plainLW{}, newPod, nil).(*compactLW[*corev1.Pod])
	c.chunks.reserve(1 << 16)
	return c
}

// decodedRefs counts the runs of c that reads decode apart.
func decodedRefs(c *Compact[*corev1.Pod]) int {
	n := 0
	for _, r := range c.enc.refs {
		if r.run.decodedFor(rootType[*corev1.Pod]()) != nil {
			n++
		}
	}
	return n
}

func TestCompact_EveryReadEqualsTheObjectStored(t *testing.T) {
	tests := []struct {
		name string
		pods []*corev1.Pod
		// decodesRuns is set if reads must decode shared runs apart.
		decodesRuns bool
	}{
		{"pods of a cluster, managedFields kept", podsOf(20, clusterPod), true},
		{"pods of a cluster, managedFields stripped", managedFieldsStripped(podsOf(20, clusterPod)), true},
		{"pods with their own IPs and times, managedFields kept", podsOf(20, templatePod), true},
		{"pods with their own IPs and times, managedFields stripped", managedFieldsStripped(podsOf(20, templatePod)), true},
		{"every field filled at random", randomPods(3, 8, 5), true},
		{"every field filled at random, other seed", randomPods(4, 8, 5), true},
		{"empty pods", []*corev1.Pod{{}, {}, {}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := roomyCompactLW()
			compacts := make([]*Compact[*corev1.Pod], len(tt.pods))
			for i, p := range tt.pods {
				var err error
				compacts[i], err = c.compact(p.DeepCopy())
				require.NoError(t, err)
			}
			decoded := 0
			for round := range 2 { // the first decodes the runs, the second reuses them
				for i, p := range tt.pods {
					want := roundTripped(t, p)
					got, err := compacts[i].Object()
					require.NoError(t, err)
					require.Equal(t, want, got, "round %d, pod %d, Object", round, i)
					got, err = compacts[i].Shared()
					require.NoError(t, err)
					require.Equal(t, want, got, "round %d, pod %d, Shared", round, i)
					if round == 1 {
						decoded += decodedRefs(compacts[i])
					}
				}
			}
			if tt.decodesRuns {
				assert.Positive(t, decoded, "some runs were decoded apart")
			}
		})
	}
}

func TestCompact_ObjectSharesNothingAndSharedSharesTheRuns(t *testing.T) {
	c := roomyCompactLW()
	var compacts []*Compact[*corev1.Pod]
	for i := range 3 {
		cobj, err := c.compact(clusterPod("web", i))
		require.NoError(t, err)
		compacts = append(compacts, cobj)
	}
	last := compacts[2]
	_, err := last.Shared()
	require.NoError(t, err)
	require.Positive(t, decodedRefs(last), "the Pod shares runs that Shared decodes apart")

	got, err := last.Object()
	require.NoError(t, err)
	got.Spec.Containers[0].Image = "changed by a reader"
	got.Spec.Containers[0].Env[0].ValueFrom.FieldRef.FieldPath = "changed"
	got.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = got.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]
	got.Spec.Tolerations[0].Key = "changed"
	got.OwnerReferences[0].Name = "changed"
	got.Annotations["changed"] = "yes"
	for i, cobj := range compacts {
		again, err := cobj.Object()
		require.NoError(t, err)
		assert.Equal(t, roundTripped(t, clusterPod("web", i)), again, "Object's objects share nothing")
	}

	a, err := compacts[1].Shared()
	require.NoError(t, err)
	b, err := last.Shared()
	require.NoError(t, err)
	assert.Same(t, &a.Spec.Containers[0], &b.Spec.Containers[0], "Shared's objects share the decoded runs")
}

func TestCompact_ReadsThroughAPathTheTypeDoesNotHaveDecodeTheWhole(t *testing.T) {
	c := roomyCompactLW()
	_, err := c.compact(clusterPod("web", 0))
	require.NoError(t, err)
	cobj, err := c.compact(clusterPod("web", 1))
	require.NoError(t, err)
	want := roundTripped(t, clusterPod("web", 1))

	// The containers' run, moved to a path of the same types that
	// this Pod does not have: its 9th container's env.
	var paths []string
	for i, r := range cobj.enc.refs {
		if r.run.path == string(protowire.AppendVarint(protowire.AppendVarint(protowire.AppendVarint(nil, 2), 0), 2)) {
			p := protowire.AppendVarint(protowire.AppendVarint(protowire.AppendVarint(nil, 2), 0), 2)
			p = protowire.AppendVarint(protowire.AppendVarint(p, 9), 7)
			cobj.enc.refs[i].run = runs.intern(maphash.String(runSeed, r.run.bytes), string(p), []byte(r.run.bytes))
			paths = append(paths, string(p))
		}
	}
	require.Len(t, paths, 1, "the Pod shares its containers")
	for _, read := range []func() (*corev1.Pod, error){cobj.Object, cobj.Shared} {
		got, err := read()
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
}

func TestCompact_AFieldInTwoRunsIsDecodedAsAWhole(t *testing.T) {
	// A Pod whose spec holds its containers in two runs, apart: protobuf
	// merges them, so neither run is the whole of the field.
	spec := func(s corev1.PodSpec) []byte {
		b, err := s.Marshal()
		require.NoError(t, err)
		return b
	}
	web := templatePod("web", 1)
	meta, err := web.ObjectMeta.Marshal()
	require.NoError(t, err)
	pod := func(node string) []byte {
		var body, raw []byte
		body = append(body, spec(corev1.PodSpec{Containers: web.Spec.Containers[:1]})...)
		body = append(body, spec(corev1.PodSpec{NodeName: node})...)
		body = append(body, spec(corev1.PodSpec{Containers: web.Spec.Containers[1:]})...)
		raw = protowire.AppendBytes(protowire.AppendTag(raw, 1, protowire.BytesType), meta)
		return protowire.AppendBytes(protowire.AppendTag(raw, 2, protowire.BytesType), body)
	}
	raw := pod("node-2")
	want := new(corev1.Pod)
	require.NoError(t, want.Unmarshal(raw))
	require.Len(t, want.Spec.Containers, 2)

	c := roomyCompactLW()
	_, err = c.compactEncoded(pod("node-1"))
	require.NoError(t, err)
	cobj, err := c.compactEncoded(raw)
	require.NoError(t, err)
	require.NotEmpty(t, cobj.enc.refs)
	for _, read := range []func() (*corev1.Pod, error){cobj.Object, cobj.Shared} {
		got, err := read()
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
}

func TestAppendFiller_IsAFieldOfExactlyTheLengthAskedThatUnmarshalSkips(t *testing.T) {
	for n := 7; n < 1<<15; n += 1 + n/64 {
		b := appendFiller(make([]byte, 0, n), n)
		require.Len(t, b, n)
		num, typ, m := protowire.ConsumeField(b)
		require.Equal(t, n, m, "n=%d", n)
		assert.Equal(t, fillerNum, num)
		assert.Equal(t, protowire.BytesType, typ)
	}
	for _, n := range []int{32, 134, 16500} {
		var p corev1.Pod
		require.NoError(t, p.Unmarshal(appendFiller(make([]byte, 0, n), n)), "n=%d", n)
		assert.True(t, reflect.ValueOf(p).IsZero())
	}
}

// A malformed map entry read by the generated Unmarshal can run into the
// filler after it: what it finds there must be zeros, never what a
// pooled buffer held of another object.
func TestAppendFiller_HoldsZerosWhateverTheBufferHeld(t *testing.T) {
	const n = 300
	used := bytes.Repeat([]byte{0xab}, n)
	b := appendFiller(used[:0], n)
	_, _, m := protowire.ConsumeTag(b)
	_, l := protowire.ConsumeVarint(b[m:])
	assert.Equal(t, make([]byte, n-m-l), b[m+l:])
}

func TestCompact_SharedAndObjectReadConcurrently(t *testing.T) {
	c := roomyCompactLW()
	var pods []*corev1.Pod
	var compacts []*Compact[*corev1.Pod]
	for i := range 40 {
		p := clusterPod(fmt.Sprint("app-", i%4), i)
		cobj, err := c.compact(p.DeepCopy())
		require.NoError(t, err)
		pods, compacts = append(pods, p), append(compacts, cobj)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range compacts {
				i = (i + g*10) % len(compacts)
				read := compacts[i].Shared
				if g%2 == 0 {
					read = compacts[i].Object
				}
				got, err := read()
				if !assert.NoError(t, err) || !assert.Equal(t, roundTripped(t, pods[i]), got) {
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestRuns_ARunGoesWhenNoObjectHoldsIt(t *testing.T) {
	path := string(protowire.AppendVarint(nil, 12345))
	bytes := []byte("a run that only this test makes, 0123456789")
	h := maphash.Bytes(runSeed, bytes)
	func() {
		r := runs.intern(h, path, bytes)
		require.Same(t, r, runs.intern(h, path, bytes), "interned once")
	}()
	runtime.GC()
	s := &runs.shards[h%runShards]
	s.mu.Lock()
	w := s.m[runKey{h, path}]
	s.mu.Unlock()
	assert.Nil(t, w.Value(), "the run has gone")
}

func TestRuns_TwoRunsOfOneHashAreEachTheirOwn(t *testing.T) {
	path := string(protowire.AppendVarint(nil, 12346))
	a := []byte("one run that only this test makes, 0123456789")
	b := []byte("another run that only this test makes, 01234")
	ra := runs.intern(42, path, a)
	rb := runs.intern(42, path, b)
	assert.Equal(t, string(a), ra.bytes)
	assert.Equal(t, string(b), rb.bytes, "not the run of the same hash")
	assert.Same(t, ra, runs.intern(42, path, a))
}

func TestCompact_APackedFieldWithEntriesOutsideItsRunIsDecodedAsAWhole(t *testing.T) {
	// A repeated scalar's entries may come packed (one length-delimited
	// field) and not (a varint each), mixed: Unmarshal appends them all,
	// so the packed run is not the whole of the field.
	tests := []struct {
		name        string
		packedFirst bool
	}{
		{"packed, then an entry", true},
		{"an entry, then packed", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := func(i int) []byte {
				web := templatePod("web", i)
				meta, err := web.ObjectMeta.Marshal()
				require.NoError(t, err)
				spec, err := web.Spec.Marshal()
				require.NoError(t, err)
				var packed, entry, sc []byte
				for g := range 20 {
					packed = protowire.AppendVarint(packed, uint64(1000+g))
				}
				entry = protowire.AppendVarint(protowire.AppendTag(entry, 4, protowire.VarintType), 7)
				// The security context's own (runAsUser), so that the cut
				// walks into it, then its supplementalGroups (4).
				sc = protowire.AppendVarint(protowire.AppendTag(sc, 2, protowire.VarintType), uint64(i))
				if !tt.packedFirst {
					sc = append(sc, entry...)
				}
				sc = protowire.AppendBytes(protowire.AppendTag(sc, 4, protowire.BytesType), packed)
				if tt.packedFirst {
					sc = append(sc, entry...)
				}
				spec = protowire.AppendBytes(protowire.AppendTag(spec, 14, protowire.BytesType), sc)
				var raw []byte
				raw = protowire.AppendBytes(protowire.AppendTag(raw, 1, protowire.BytesType), meta)
				return protowire.AppendBytes(protowire.AppendTag(raw, 2, protowire.BytesType), spec)
			}
			c := roomyCompactLW()
			_, err := c.compactEncoded(pod(0))
			require.NoError(t, err)
			raw := pod(1)
			want := new(corev1.Pod)
			require.NoError(t, want.Unmarshal(raw))
			require.Len(t, want.Spec.SecurityContext.SupplementalGroups, 21)
			cobj, err := c.compactEncoded(raw)
			require.NoError(t, err)
			require.NotEmpty(t, cobj.enc.refs, "the packed run is shared")
			for _, read := range []func() (*corev1.Pod, error){cobj.Object, cobj.Shared} {
				got, err := read()
				require.NoError(t, err)
				assert.Equal(t, want, got)
			}
		})
	}
}
