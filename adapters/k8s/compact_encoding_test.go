package k8s

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/randfill"
)

func newPod() *corev1.Pod { return new(corev1.Pod) }

// templatePod is Pod i of a Deployment app, as the server holds it: what
// the template gives every Pod of the ReplicaSet (containers, volumes,
// labels, owner, tolerations, the controller's managedFields) and what
// is the Pod's own (name, UID, node, IPs, container IDs).
func templatePod(app string, i int) *corev1.Pod {
	ts := metav1.NewTime(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	own := metav1.NewTime(ts.Add(time.Duration(i) * time.Second))
	container := func(name, image string, port int32) corev1.Container {
		return corev1.Container{
			Name: name, Image: image,
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: port, Protocol: corev1.ProtocolTCP}},
			Env: []corev1.EnvVar{
				{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
				{Name: "CONFIG_PATH", Value: "/etc/" + name + "/config.yaml"},
			},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
			},
			VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/" + name, ReadOnly: true}},
			LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(port)}}, PeriodSeconds: 10},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
		}
	}
	status := func(name, image string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Ready: true, Image: image, ImageID: image + "@sha256:4f1e7b1c",
			ContainerID: fmt.Sprintf("containerd://%s-%d-%s", app, i, name), Started: new(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: own}}}
	}
	ip := fmt.Sprintf("10.244.%d.%d", i/250, i%250)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-7d9f8c6b5-%05d", app, i), GenerateName: app + "-7d9f8c6b5-", Namespace: "shop",
			UID: types.UID(fmt.Sprintf("0b1c2d3e-4f50-6172-8394-%012d", i)), ResourceVersion: fmt.Sprint(1000 + i),
			CreationTimestamp: ts, Generation: 1,
			Labels:          map[string]string{"app": app, "pod-template-hash": "7d9f8c6b5", "tier": "web"},
			Annotations:     map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-7d9f8c6b5", UID: types.UID("rs-" + app), Controller: new(true)}},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &ts, FieldsType: "FieldsV1",
					FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{}}}}}`)},
				{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &own, FieldsType: "FieldsV1", Subresource: "status",
					FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:podIPs":{".":{},"k:{\"ip\":\"` + ip + `\"}":{".":{},"f:ip":{}}}}}`)},
			},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{container("app", "registry.example.com/"+app+":v1.42.3", 8080), container("metrics", "registry.example.com/exporter:v0.9.1", 9090)},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: app + "-config"}, DefaultMode: new(int32(420))}}}},
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: new(int64(30)), DNSPolicy: corev1.DNSClusterFirst,
			NodeName: fmt.Sprintf("node-%d", i%7), SchedulerName: "default-scheduler",
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(int64(300))}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, HostIP: fmt.Sprintf("10.0.0.%d", i%7), PodIP: ip, StartTime: &own, QOSClass: corev1.PodQOSBurstable,
			PodIPs:            []corev1.PodIP{{IP: ip}},
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: own}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: ts}},
			ContainerStatuses: []corev1.ContainerStatus{status("app", "registry.example.com/"+app+":v1.42.3"), status("metrics", "registry.example.com/exporter:v0.9.1")},
		},
	}
}

// roundTripped is obj as protobuf gives it back, the most a compact form
// can promise (protobuf does not tell a nil slice from an empty one).
func roundTripped(t *testing.T, obj *corev1.Pod) *corev1.Pod {
	t.Helper()
	raw, err := obj.Marshal()
	require.NoError(t, err)
	got := new(corev1.Pod)
	require.NoError(t, got.Unmarshal(raw))
	return got
}

// randomPods fills Pods at random, every field of them, in families: a
// family's Pods are copies of one with a few fields of their own, as the
// Pods of a ReplicaSet are, so that the compact form shares runs.
func randomPods(seed uint64, families, each int) []*corev1.Pod {
	f := randfill.NewWithSeed(int64(seed)).NilChance(0.2).NumElements(1, 3).Funcs(
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewQuantity(c.Int63n(1<<20), resource.BinarySI)
		},
		func(r *metav1.FieldsV1, c randfill.Continue) {
			*r = *metav1.NewFieldsV1(fmt.Sprintf(`{"f:%d":{}}`, c.Uint32()))
		},
	)
	r := rand.New(rand.NewPCG(seed, 1))
	var pods []*corev1.Pod
	for range families {
		base := new(corev1.Pod)
		f.Fill(base)
		for i := range each {
			p := base.DeepCopy()
			p.Name = fmt.Sprintf("%s-%d", base.Name, i)
			p.UID = types.UID(fmt.Sprint(r.Uint64()))
			p.ResourceVersion = fmt.Sprint(r.Uint32())
			p.Spec.NodeName = fmt.Sprint("node-", r.IntN(5))
			if r.IntN(2) == 0 && len(p.Spec.Containers) > 0 {
				p.Spec.Containers[0].Image = fmt.Sprint("image-", r.IntN(3))
			}
			pods = append(pods, p)
		}
	}
	return pods
}

func TestCompact_EveryFieldOfAPodRoundTrips(t *testing.T) {
	tests := []struct {
		name string
		pods []*corev1.Pod
	}{
		{"pods of one template, and of another", func() []*corev1.Pod {
			var pods []*corev1.Pod
			for i := range 40 {
				pods = append(pods, templatePod("web", i), templatePod("db", i))
			}
			return pods
		}()},
		{"every field filled at random", randomPods(1, 8, 4)},
		{"every field filled at random, other seed", randomPods(2, 8, 4)},
		{"empty pod", []*corev1.Pod{{}, {}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := CompactListWatcher[*corev1.Pod](plainLW{}, newPod, nil).(*compactLW[*corev1.Pod])
			compacts := make([]*Compact[*corev1.Pod], len(tt.pods))
			for i, p := range tt.pods {
				var err error
				compacts[i], err = c.compact(p.DeepCopy())
				require.NoError(t, err)
			}
			for i, p := range tt.pods {
				cobj := compacts[i]
				want := roundTripped(t, p)
				got, err := cobj.Object()
				require.NoError(t, err)
				require.Equal(t, want, got, "pod %d", i)
				raw, err := p.Marshal()
				require.NoError(t, err)
				assert.Equal(t, raw, cobj.enc.bytes(), "pod %d: the same bytes", i)
				assert.Equal(t, len(raw), cobj.Len())
				assert.Equal(t, Key{Namespace: p.Namespace, Name: p.Name}, cobj.Key())
				assert.Equal(t, p.ResourceVersion, cobj.ResourceVersion())
				assert.Equal(t, p.UID, cobj.UID())
				for k, v := range p.Labels {
					got, ok := cobj.Labels().Lookup(k)
					assert.True(t, ok, "label %q", k)
					assert.Equal(t, v, got)
				}
				assert.True(t, labels.SelectorFromSet(p.Labels).Matches(cobj.Labels()))
				assert.Equal(t, len(p.Labels), cobj.labels.len())
			}
		})
	}
}

func TestCompact_PodsOfOneTemplateShareTheirRepeatedRuns(t *testing.T) {
	c := CompactListWatcher[*corev1.Pod](plainLW{}, newPod, nil).(*compactLW[*corev1.Pod])
	var whole, own int
	for i := range 50 {
		cobj, err := c.compact(templatePod("web", i))
		require.NoError(t, err)
		if i == 0 {
			continue // the first shares only what it repeats itself
		}
		whole += cobj.Len()
		own += len(cobj.enc.lit)
	}
	assert.Less(t, own, whole/3, "the Pods after the first hold less than a third of their encoding as their own")
}

func TestCompact_ObjectsAreIndependentOfEachOtherAndOfTheirSource(t *testing.T) {
	c := CompactListWatcher[*corev1.Pod](plainLW{}, newPod, nil).(*compactLW[*corev1.Pod])
	p := templatePod("web", 1)
	raw, err := p.Marshal()
	require.NoError(t, err)
	a, err := c.compactEncoded(raw)
	require.NoError(t, err)
	b, err := c.compact(templatePod("web", 1))
	require.NoError(t, err)
	require.NotEmpty(t, b.enc.refs, "the second shares runs with the first")

	clear(raw) // the source reuses its buffer
	got, err := a.Object()
	require.NoError(t, err)
	assert.Equal(t, roundTripped(t, p), got)
	got.Spec.Containers[0].Image = "changed by a reader"
	again, err := b.Object()
	require.NoError(t, err)
	assert.Equal(t, "registry.example.com/web:v1.42.3", again.Spec.Containers[0].Image)
}

// encodedPods is a ListWatcher of Pods that also hands them out as their
// encodings, from one buffer as a page read off the network; its List
// and Watch fail, as they must not be called.
type encodedPods struct {
	items   [][]byte
	events  chan source.Event[[]byte]
	decoded int
}

func (e *encodedPods) List(context.Context, source.ListOptions) (source.ListResult[*corev1.Pod], error) {
	e.decoded++
	return source.ListResult[*corev1.Pod]{}, errors.New("List called")
}

func (e *encodedPods) Watch(context.Context, source.WatchOptions) (source.Watcher[*corev1.Pod], error) {
	e.decoded++
	return nil, errors.New("Watch called")
}

func (e *encodedPods) ListEncoded(context.Context, source.ListOptions) (source.ListResult[[]byte], error) {
	return source.ListResult[[]byte]{Items: e.items, ResourceVersion: "10"}, nil
}

func (e *encodedPods) WatchEncoded(ctx context.Context, _ source.WatchOptions) (source.Watcher[[]byte], error) {
	return chanWatcher{e.events}, nil
}

type chanWatcher struct{ ch chan source.Event[[]byte] }

func (w chanWatcher) Next(ctx context.Context) (source.Event[[]byte], error) {
	select {
	case ev := <-w.ch:
		return ev, nil
	case <-ctx.Done():
		return source.Event[[]byte]{}, ctx.Err()
	}
}
func (w chanWatcher) Stop() {}

func TestCompactListWatcher_KeepsEncodingsAsTheyArriveAndSkipsBadOnes(t *testing.T) {
	pods := []*corev1.Pod{templatePod("web", 1), templatePod("web", 2)}
	var page []byte
	var items [][]byte
	for _, p := range pods {
		raw, err := p.Marshal()
		require.NoError(t, err)
		page = append(page, raw...)
		items = append(items, page[len(page)-len(raw):])
	}
	secret := []byte("\x0a\x05hunter2-password")              // metadata that is no message
	items = append(items, []byte("\xffnot protobuf hunter2"), // not protobuf at all
		[]byte{0x12, 0x02, 0x08, 0x01}, secret) // protobuf without metadata
	src := &encodedPods{items: items, events: make(chan source.Event[[]byte], 1)}
	lw := CompactListWatcher[*corev1.Pod](src, newPod, nil)

	res, err := lw.List(t.Context(), source.ListOptions{})
	require.NoError(t, err)
	assert.Zero(t, src.decoded, "the encodings were kept, no object decoded")
	require.Len(t, res.Items, 2)
	clear(page)
	for i, cobj := range res.Items {
		got, err := cobj.Object()
		require.NoError(t, err)
		assert.Equal(t, roundTripped(t, pods[i]), got)
		assert.Equal(t, "web", cobj.Labels().Get("app"))
	}
	require.Len(t, res.Skipped, 3)
	for _, err := range res.Skipped {
		var oe *mirror.ObjectError
		require.ErrorAs(t, err, &oe)
		assert.NotContains(t, err.Error(), "hunter2", "no object contents in errors")
	}

	w, err := lw.Watch(t.Context(), source.WatchOptions{})
	require.NoError(t, err)
	p := templatePod("web", 3)
	raw, err := p.Marshal()
	require.NoError(t, err)
	src.events <- source.Event[[]byte]{Type: source.Added, Object: raw, ResourceVersion: p.ResourceVersion}
	ev, err := w.Next(t.Context())
	require.NoError(t, err)
	require.Equal(t, source.Added, ev.Type)
	assert.Equal(t, Key{Namespace: "shop", Name: p.Name}, ev.Object.Key())
	assert.Equal(t, p.ResourceVersion, ev.Object.ResourceVersion())
	src.events <- source.Event[[]byte]{Type: source.Updated, Object: []byte("\xffhunter2")}
	ev, err = w.Next(t.Context())
	require.NoError(t, err, "a bad object does not end the stream")
	assert.Equal(t, source.Error, ev.Type)
	assert.NotContains(t, ev.Err.Error(), "hunter2")
}

func TestCompactListWatcher_WithATransformDecodesEvenAnEncodedSource(t *testing.T) {
	src := &encodedPods{}
	lw := CompactListWatcher[*corev1.Pod](src, newPod, StripManagedFields[*corev1.Pod])
	_, err := lw.List(t.Context(), source.ListOptions{})
	require.Error(t, err)
	assert.Equal(t, 1, src.decoded, "the transform needs the decoded object")
}

func TestCompactListWatcher_CompactsAndReadsConcurrently(t *testing.T) {
	c := CompactListWatcher[*corev1.Pod](plainLW{}, newPod, nil).(*compactLW[*corev1.Pod])
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 60 {
				p := templatePod(fmt.Sprint("app-", i%3), g*100+i)
				cobj, err := c.compact(p.DeepCopy())
				if !assert.NoError(t, err) {
					return
				}
				got, err := cobj.Object()
				if !assert.NoError(t, err) || !assert.Equal(t, roundTripped(t, p), got) {
					return
				}
			}
		})
	}
	wg.Go(func() {
		for n := 1; n < 1<<16; n *= 2 {
			c.chunks.reserve(n) // the table grows while others cut
		}
	})
	wg.Wait()
}

func TestProtoLabels_ReadOnlyWellFormedEntries(t *testing.T) {
	tests := []struct {
		name string
		l    protoLabels
		want map[string]string
	}{
		{"encoded", encodeLabels(map[string]string{"app": "web", "empty": ""}), map[string]string{"app": "web", "empty": ""}},
		{"none", "", map[string]string{}},
		{"truncated", encodeLabels(map[string]string{"app": "web"})[:5], map[string]string{}},
		{"garbage", "\xff\xff\xff", map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]string{}
			tt.l.each(func(k, v string) bool { got[k] = v; return true })
			assert.Equal(t, tt.want, got)
			assert.False(t, tt.l.Has("missing"))
		})
	}
}

// FuzzCompact_CutPutsBackTheSameBytes checks that an encoding cut into
// literal and shared runs, of any bytes, is put back as it was, and
// decoded as Unmarshal decodes it.
func FuzzCompact_CutPutsBackTheSameBytes(f *testing.F) {
	for i := range 3 {
		raw, err := templatePod("web", i).Marshal()
		require.NoError(f, err)
		f.Add(raw)
	}
	f.Add([]byte("\xff"))
	c := newChunker()
	f.Fuzz(func(t *testing.T, raw []byte) {
		for range 2 { // the second time, runs are shared
			enc, k, ok := c.encode(raw)
			if !ok {
				return
			}
			k.release()
			require.Equal(t, raw, enc.bytes())
			// Reads that decode runs apart give what Unmarshal gives.
			want := new(corev1.Pod)
			if want.Unmarshal(raw) != nil {
				continue
			}
			got := new(corev1.Pod)
			require.NoError(t, enc.decode(got, rootType[*corev1.Pod]()))
			require.Equal(t, want, got)
		}
		_, _ = metaSpans(raw)
	})
}
