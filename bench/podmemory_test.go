package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/source"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
)

var pods100k = flag.Bool("pods100k", false, "BenchmarkInformer_HeapPerPod also at 100k Pods")

// realisticPod is a Pod of a Deployment as the server sends it: two
// containers with env, mounts, probes and resources, a scheduled and
// running status, and the managedFields of kube-controller-manager and
// the kubelet. As JSON it is about 7 KB, 2 KB of it managedFields.
func realisticPod(i int) *corev1.Pod {
	app := fmt.Sprintf("app-%d", i/20)
	ts := metav1.NewTime(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	container := func(name, image string, port int32) corev1.Container {
		return corev1.Container{
			Name: name, Image: image,
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: port, Protocol: corev1.ProtocolTCP}},
			Env: []corev1.EnvVar{
				{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
				{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
				{Name: "LOG_LEVEL", Value: "info"}, {Name: "CONFIG_PATH", Value: "/etc/" + name + "/config.yaml"},
			},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
			},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "config", MountPath: "/etc/" + name, ReadOnly: true},
				{Name: "kube-api-access-x7k2p", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
			},
			LivenessProbe:            &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(port), Scheme: "HTTP"}}, PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3},
			ReadinessProbe:           &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(port), Scheme: "HTTP"}}, PeriodSeconds: 5, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3},
			TerminationMessagePath:   "/dev/termination-log",
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			ImagePullPolicy:          corev1.PullIfNotPresent,
		}
	}
	status := func(name, image string) corev1.ContainerStatus {
		return corev1.ContainerStatus{
			Name: name, Ready: true, Image: image, ImageID: image + "@sha256:4f1e7b1c2a9d0e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f",
			ContainerID: fmt.Sprintf("containerd://%064x", i), Started: new(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: ts}},
		}
	}
	fields := metav1.NewFieldsV1
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-7d9f8c6b5-%05d", app, i), GenerateName: app + "-7d9f8c6b5-",
			Namespace: fmt.Sprintf("ns-%d", i/20%100), UID: types.UID(fmt.Sprintf("0b1c2d3e-4f50-6172-8394-%012d", i)),
			ResourceVersion: fmt.Sprint(1000 + i), CreationTimestamp: ts,
			Labels: map[string]string{"app": app, "pod-template-hash": "7d9f8c6b5", "tier": "web", "team": "payments"},
			Annotations: map[string]string{
				"kubectl.kubernetes.io/restartedAt": "2026-11-01T11:59:00Z",
				"prometheus.io/scrape":              "true", "prometheus.io/port": "9090",
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-7d9f8c6b5",
				UID: "9a8b7c6d-5e4f-3a2b-1c0d-9e8f7a6b5c4d", Controller: new(true), BlockOwnerDeletion: new(true)}},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &ts, FieldsType: "FieldsV1",
					FieldsV1: fields(`{"f:metadata":{"f:annotations":{".":{},"f:kubectl.kubernetes.io/restartedAt":{},"f:prometheus.io/port":{},"f:prometheus.io/scrape":{}},"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{},"f:team":{},"f:tier":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"9a8b7c6d-5e4f-3a2b-1c0d-9e8f7a6b5c4d\"}":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:env":{".":{},"k:{\"name\":\"CONFIG_PATH\"}":{".":{},"f:name":{},"f:value":{}},"k:{\"name\":\"LOG_LEVEL\"}":{".":{},"f:name":{},"f:value":{}},"k:{\"name\":\"POD_NAME\"}":{".":{},"f:name":{},"f:valueFrom":{".":{},"f:fieldRef":{}}}},"f:image":{},"f:imagePullPolicy":{},"f:livenessProbe":{".":{},"f:failureThreshold":{},"f:httpGet":{".":{},"f:path":{},"f:port":{},"f:scheme":{}},"f:periodSeconds":{}},"f:name":{},"f:ports":{".":{},"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{},"f:name":{},"f:protocol":{}}},"f:resources":{".":{},"f:limits":{".":{},"f:cpu":{},"f:memory":{}},"f:requests":{".":{},"f:cpu":{},"f:memory":{}}},"f:volumeMounts":{".":{},"k:{\"mountPath\":\"/etc/app\"}":{".":{},"f:mountPath":{},"f:name":{},"f:readOnly":{}}}}},"f:dnsPolicy":{},"f:enableServiceLinks":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{},"f:volumes":{".":{},"k:{\"name\":\"config\"}":{".":{},"f:configMap":{".":{},"f:defaultMode":{},"f:name":{}},"f:name":{}}}}}`)},
				{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &ts, FieldsType: "FieldsV1", Subresource: "status",
					FieldsV1: fields(`{"f:status":{"f:conditions":{"k:{\"type\":\"ContainersReady\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Initialized\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"PodReadyToStartContainers\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Ready\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}}},"f:containerStatuses":{},"f:hostIP":{},"f:hostIPs":{},"f:phase":{},"f:podIP":{},"f:podIPs":{".":{},"k:{\"ip\":\"10.244.1.23\"}":{".":{},"f:ip":{}}},"f:startTime":{}}}`)},
			},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{container("app", "registry.example.com/payments/"+app+":v1.42.3", 8080), container("metrics", "registry.example.com/observability/exporter:v0.9.1", 9090)},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: app + "-config"}, DefaultMode: new(int32(420))}}},
				{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{DefaultMode: new(int32(420)), Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: new(int64(3607)), Path: "token"}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				}}}},
			},
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: new(int64(30)), DNSPolicy: corev1.DNSClusterFirst,
			ServiceAccountName: "default", NodeName: fmt.Sprintf("node-%d", i%500), SchedulerName: "default-scheduler",
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(int64(300))},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(int64(300))},
			},
			Priority: new(int32(0)), EnableServiceLinks: new(true), PreemptionPolicy: new(corev1.PreemptLowerPriority),
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, HostIP: "10.0.3.17", PodIP: "10.244.1.23", StartTime: &ts, QOSClass: corev1.PodQOSBurstable,
			HostIPs: []corev1.HostIP{{IP: "10.0.3.17"}}, PodIPs: []corev1.PodIP{{IP: "10.244.1.23"}},
			Conditions: []corev1.PodCondition{
				{Type: "PodReadyToStartContainers", Status: corev1.ConditionTrue, LastTransitionTime: ts},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: ts},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: ts},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: ts},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: ts},
			},
			ContainerStatuses: []corev1.ContainerStatus{status("app", "registry.example.com/payments/"+app+":v1.42.3"), status("metrics", "registry.example.com/observability/exporter:v0.9.1")},
		},
	}
}

// wirePods holds n Pods as the server would send them, as JSON (or as
// protobuf, made by newProtoWirePods), and decodes them on each list, as
// a client does: nothing of the cached objects is shared with the source.
type wirePods struct {
	json  [][]byte
	proto [][]byte
}

// newProtoWirePods is newWirePods with the Pods as protobuf, as a client
// that asks for application/vnd.kubernetes.protobuf gets them.
func newProtoWirePods(n int) *wirePods {
	w := &wirePods{proto: make([][]byte, n)}
	for i := range n {
		b, err := realisticPod(i).Marshal()
		if err != nil {
			panic(err)
		}
		w.proto[i] = b
	}
	return w
}

// len returns the number of Pods.
func (w *wirePods) len() int { return max(len(w.json), len(w.proto)) }

func newWirePods(n int) *wirePods { return newWirePodsOf(n, realisticPod) }

// newWirePodsOf is newWirePods of the Pods pod makes.
func newWirePodsOf(n int, pod func(int) *corev1.Pod) *wirePods {
	w := &wirePods{json: make([][]byte, n)}
	for i := range n {
		p := pod(i)
		p.APIVersion, p.Kind = "v1", "Pod"
		b, err := json.Marshal(p)
		if err != nil {
			panic(err)
		}
		w.json[i] = b
	}
	return w
}

// variedPod is realisticPod(i) with what differs from Pod to Pod of one
// ReplicaSet in a real cluster and not in realisticPod: its IP (in
// status and in the key of the kubelet's managedFields), its node's IP,
// and the times it started, became ready and was last written by the
// kubelet.
func variedPod(i int) *corev1.Pod {
	p := realisticPod(i)
	ip := fmt.Sprintf("10.%d.%d.%d", 244+i/65536, i/256%256, i%256)
	host := fmt.Sprintf("10.0.%d.%d", i%500/250, i%500%250)
	started := metav1.NewTime(p.CreationTimestamp.Add(time.Duration(i%3600) * time.Second))
	p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	p.Status.HostIP, p.Status.HostIPs = host, []corev1.HostIP{{IP: host}}
	p.Status.StartTime = &started
	for c := range p.Status.Conditions {
		p.Status.Conditions[c].LastTransitionTime = started
	}
	for c := range p.Status.ContainerStatuses {
		p.Status.ContainerStatuses[c].State.Running.StartedAt = started
	}
	kubelet := &p.ManagedFields[1]
	kubelet.Time = &started
	kubelet.FieldsV1 = metav1.NewFieldsV1(strings.ReplaceAll(kubelet.FieldsV1.GetRawString(), "10.244.1.23", ip))
	return p
}

var podDecoder = serializer.NewCodecFactory(scheme.Scheme).UniversalDeserializer()

// decode decodes Pod i off the wire into into.
func (w *wirePods) decode(i int, into runtime.Object) {
	if w.proto != nil {
		if err := into.(interface{ Unmarshal([]byte) error }).Unmarshal(w.proto[i]); err != nil {
			panic(err)
		}
		return
	}
	if _, _, err := podDecoder.Decode(w.json[i], nil, into); err != nil {
		panic(err)
	}
}

// podSource lists the Pods, decoded as T, in one page; its watches stay
// idle.
type podSource[T k8s.Object] struct {
	w     *wirePods
	alloc func() T
}

func (s podSource[T]) List(context.Context, source.ListOptions) (source.ListResult[T], error) {
	items := make([]T, s.w.len())
	for i := range items {
		items[i] = s.alloc()
		s.w.decode(i, items[i])
	}
	return source.ListResult[T]{Items: items, ResourceVersion: "100000000"}, nil
}

func (s podSource[T]) Watch(ctx context.Context, _ source.WatchOptions) (source.Watcher[T], error) {
	return &idleWatcher[T]{ctx: ctx}, nil
}

type idleWatcher[T any] struct{ ctx context.Context }

func (w *idleWatcher[T]) Next(ctx context.Context) (source.Event[T], error) {
	select {
	case <-ctx.Done():
	case <-w.ctx.Done():
	}
	return source.Event[T]{}, context.Canceled
}
func (w *idleWatcher[T]) Stop() {}

// startMirrorPods runs a k8s informer of the Pods decoded as T and waits
// until it has synced.
func startMirrorPods[T k8s.Object](src podSource[T], transform mirror.TransformFunc[T]) func() {
	inf := k8s.NewInformer[T](src, k8s.InformerOptions[T]{Transform: transform, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = inf.Run(ctx)
	}()
	if err := inf.WaitForSync(ctx); err != nil {
		panic(err)
	}
	return func() { cancel(); <-done }
}

// startClientGoPods runs client-go's shared index informer (namespace
// index, as its factory's) over the Pods, decoded into a PodList as its
// reflector gets them, and waits until it has synced.
func startClientGoPods(w *wirePods, transform cache.TransformFunc) func() {
	lw := noWatchList{&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "100000000"}, Items: make([]corev1.Pod, w.len())}
			for i := range list.Items {
				w.decode(i, &list.Items[i])
			}
			return list, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return watch.NewFake(), nil
		},
	}}
	inf := cache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, cache.SharedIndexInformerOptions{
		Indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
	})
	if transform != nil {
		if err := inf.SetTransform(transform); err != nil {
			panic(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(ctx)
	}()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		panic("client-go informer did not sync")
	}
	return func() { cancel(); <-done }
}

// noWatchList is a ListWatch that says it cannot stream lists, so that
// client-go's reflector lists.
type noWatchList struct{ *cache.ListWatch }

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

func stripClientGo(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// BenchmarkInformer_HeapPerPod measures the live heap a synced informer
// holds per cached Pod (heap-B/pod: the heap after a collection with the
// informer running, less the heap before it started, over the Pods), at
// 10k Pods (and 100k with -pods100k), for client-go's shared index
// informer and mirror's k8s.NewInformer, as decoded (default), with
// managedFields stripped by a transform (stripped), held as protobuf by
// k8s.NewCompactInformer (compact, compact-stripped), of variedPod's Pods
// by client-go and as compact (varied, varied-compact), and metadata-only
// (metav1.PartialObjectMetadata decoded from the same JSON, as the
// metadata client receives it). json-B/pod is the Pods' JSON. One op
// builds and syncs the informer. -short measures 1k Pods instead of 10k.
func BenchmarkInformer_HeapPerPod(b *testing.B) {
	sizes := []int{scaled(10_000)}
	if *pods100k {
		sizes = append(sizes, 100_000)
	}
	newPod := func() *corev1.Pod { return new(corev1.Pod) }
	newMeta := func() *metav1.PartialObjectMetadata { return new(metav1.PartialObjectMetadata) }
	for _, n := range sizes {
		w := newWirePods(n)
		// Made once, and only if a varied form runs.
		varied := sync.OnceValue(func() *wirePods { return newWirePodsOf(n, variedPod) })
		jsonBytes := 0
		for _, j := range w.json {
			jsonBytes += len(j)
		}
		impls := []struct {
			name  string
			start func() func()
		}{
			{"form=default/impl=client-go", func() func() { return startClientGoPods(w, nil) }},
			{"form=default/impl=mirror", func() func() { return startMirrorPods(podSource[*corev1.Pod]{w, newPod}, nil) }},
			{"form=stripped/impl=client-go", func() func() { return startClientGoPods(w, stripClientGo) }},
			{"form=stripped/impl=mirror", func() func() {
				return startMirrorPods(podSource[*corev1.Pod]{w, newPod}, k8s.StripManagedFields[*corev1.Pod])
			}},
			{"form=compact/impl=mirror", func() func() { return startCompactPods(w, nil) }},
			{"form=compact-stripped/impl=mirror", func() func() { return startCompactPods(w, k8s.StripManagedFields[*corev1.Pod]) }},
			// Every Pod read with Object and with Shared: the heap then
			// holds the shared runs decoded, once each.
			{"form=compact-read/impl=mirror", func() func() { return startCompactPodsAndRead(w) }},
			{"form=varied/impl=client-go", func() func() { return startClientGoPods(varied(), nil) }},
			{"form=varied-compact/impl=mirror", func() func() { return startCompactPods(varied(), nil) }},
			{"form=varied-compact-read/impl=mirror", func() func() { return startCompactPodsAndRead(varied()) }},
			{"form=metadata/impl=mirror", func() func() {
				return startMirrorPods(podSource[*metav1.PartialObjectMetadata]{w, newMeta}, nil)
			}},
			{"form=metadata-stripped/impl=mirror", func() func() {
				return startMirrorPods(podSource[*metav1.PartialObjectMetadata]{w, newMeta}, k8s.StripManagedFields[*metav1.PartialObjectMetadata])
			}},
		}
		for _, im := range impls {
			b.Run(fmt.Sprintf("pods=%s/%s", thousands(n), im.name), func(b *testing.B) {
				b.ReportAllocs()
				if strings.HasPrefix(im.name, "form=varied") {
					varied() // the wire is not the informer's heap
				}
				var heap uint64
				for b.Loop() {
					before := heapAlloc()
					stop := im.start()
					heap += heapAlloc() - before
					stop()
				}
				b.ReportMetric(float64(heap)/float64(b.N)/float64(n), "heap-B/pod")
				b.ReportMetric(float64(jsonBytes)/float64(n), "json-B/pod")
			})
		}
	}
}

// startCompactPodsAndRead starts a compact informer of the Pods and reads
// each of them with Object and with Shared.
func startCompactPodsAndRead(w *wirePods) func() {
	inf, stop := runCompactPods(w, nil, false)
	for _, c := range inf.List() {
		if _, err := c.Object(); err != nil {
			panic(err)
		}
		if _, err := c.Shared(); err != nil {
			panic(err)
		}
	}
	return stop
}

// thousands writes n as "10k".
func thousands(n int) string { return fmt.Sprintf("%dk", n/1000) }
