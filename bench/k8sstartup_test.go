package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/source"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
)

var (
	k8sPods = flag.String("k8s.pods", "", "BenchmarkK8sStartup at these numbers of Pods, such as 10000,100000 (none: skipped)")
	k8sDir  = flag.String("k8s.dir", filepath.Join(os.TempDir(), "mirror-k8sstartup"),
		"where BenchmarkK8sStartup keeps its servers' etcd data, so that Pods are loaded once")
	k8sRounds = flag.Int("k8s.rounds", 5, "BenchmarkK8sStartup's rounds, each of every impl in turn")
	k8sImpls  = flag.String("k8s.impls", "", "BenchmarkK8sStartup only for these impls, comma-separated (empty: all)")
)

// protobufContentType is what a client asks a server for to get protobuf.
const protobufContentType = "application/vnd.kubernetes.protobuf"

// startupImpl is one informer BenchmarkK8sStartup measures: start runs it
// and returns once it has synced, and a function that stops it and waits
// until it has stopped. What start keeps reachable is what it holds.
type startupImpl struct {
	name  string
	start func(ctx context.Context, cfg *rest.Config) (stop func())
}

func startupImpls() []startupImpl {
	discard := slog.New(slog.DiscardHandler)
	runMirror := func(ctx context.Context, inf interface {
		Run(context.Context) error
		WaitForSync(context.Context) error
	}) func() {
		ctx, cancel := context.WithCancel(ctx)
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
	typedMirror := func(contentType string) func(context.Context, *rest.Config) func() {
		return func(ctx context.Context, cfg *rest.Config) func() {
			cfg = rest.CopyConfig(cfg)
			cfg.ContentType = contentType
			pods := kubernetes.NewForConfigOrDie(cfg).CoreV1().Pods("")
			lw := k8s.New[*corev1.Pod](pods.List, pods.Watch, k8s.Options{})
			return runMirror(ctx, k8s.NewInformer(lw, k8s.InformerOptions[*corev1.Pod]{Logger: discard}))
		}
	}
	// wireMirror's informer lists by pages (NewForConfig's default), or
	// with streaming, by a streaming list.
	wireMirror := func(opts k8s.Options, streaming bool) func(context.Context, *rest.Config) func() {
		return func(ctx context.Context, cfg *rest.Config) func() {
			lw, err := k8s.NewForConfig[*corev1.Pod](cfg, corev1.SchemeGroupVersion.WithResource("pods"), "", opts)
			if err != nil {
				panic(err)
			}
			iopts := k8s.InformerOptions[*corev1.Pod]{Logger: discard}
			iopts.ListWatch.StreamingList = streaming
			return runMirror(ctx, k8s.NewInformer(lw, iopts))
		}
	}
	// compactMirror's informer keeps each Pod's protobuf as the server
	// sent it (NewForConfig's ListWatcher is an EncodedListWatcher);
	// with decoded, it is made to decode each Pod and encode it again,
	// as it did before.
	compactMirror := func(decoded bool) func(context.Context, *rest.Config) func() {
		return func(ctx context.Context, cfg *rest.Config) func() {
			lw, err := k8s.NewForConfig[*corev1.Pod](cfg, corev1.SchemeGroupVersion.WithResource("pods"), "", k8s.Options{})
			if err != nil {
				panic(err)
			}
			var src source.ListWatcher[*corev1.Pod] = lw
			if decoded {
				src = decodedOnly{lw, lw}
			}
			clw := k8s.CompactListWatcher(src, func() *corev1.Pod { return new(corev1.Pod) }, nil)
			return runMirror(ctx, k8s.NewCompactInformer(clw, mirror.InformerOptions[k8s.Key, *k8s.Compact[*corev1.Pod]]{Logger: discard}))
		}
	}
	clientGo := func(contentType string, disableCompression bool) func(context.Context, *rest.Config) func() {
		return func(ctx context.Context, cfg *rest.Config) func() {
			cfg = rest.CopyConfig(cfg)
			cfg.ContentType = contentType
			cfg.DisableCompression = disableCompression
			cs := kubernetes.NewForConfigOrDie(cfg)
			f := informers.NewSharedInformerFactory(cs, 0)
			inf := f.Core().V1().Pods().Informer()
			ctx, cancel := context.WithCancel(ctx)
			f.Start(ctx.Done())
			if !cache.WaitFor(ctx, "pods", inf.HasSyncedChecker()) {
				panic("client-go informer did not sync")
			}
			return func() { cancel(); f.Shutdown() }
		}
	}
	return []startupImpl{
		{"mirror", wireMirror(k8s.Options{}, false)},
		{"mirror-stripped", wireMirror(k8s.Options{StripManagedFields: true}, false)},
		{"mirror-streaming", wireMirror(k8s.Options{}, true)},
		{"mirror-compact", compactMirror(false)},
		{"mirror-compact-decoded", compactMirror(true)},
		{"mirror-typed-json", typedMirror("")},
		{"mirror-typed-protobuf", typedMirror(protobufContentType)},
		{"client-go-json", clientGo("", false)},
		{"client-go-protobuf", clientGo(protobufContentType, false)},
		{"client-go-protobuf-nogzip", clientGo(protobufContentType, true)},
		{"controller-runtime", func(ctx context.Context, cfg *rest.Config) func() {
			c, err := crcache.New(cfg, crcache.Options{Scheme: scheme.Scheme})
			if err != nil {
				panic(err)
			}
			if _, err := c.GetInformer(ctx, &corev1.Pod{}); err != nil {
				panic(err)
			}
			ctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = c.Start(ctx)
			}()
			if !c.WaitForCacheSync(ctx) {
				panic("controller-runtime cache did not sync")
			}
			return func() { cancel(); <-done }
		}},
	}
}

// decodedOnly hides the ListEncoded and WatchEncoded of the ListWatcher
// it holds, keeping its preference for streaming lists.
type decodedOnly struct {
	source.ListWatcher[*corev1.Pod]
	source.StreamingListPreferrer
}

// BenchmarkK8sStartup measures how an informer of every Pod of a real
// kube-apiserver gets to synced, with the server (and its etcd) in a
// child process so that this process's CPU and heap are the client's
// alone. It runs only with -k8s.pods (such as 10000,100000): a server per
// number of Pods, loaded once (the Pods, realisticPod's, are written into
// its etcd as the server stores them, and stay under -k8s.dir for the
// next run), and every impl in turn within each round (-k8s.rounds
// rounds, each starting with the next impl; run it with -benchtime=1x
// -count=1). It prints a line per impl
// and round itself, in the benchmark format, once every round is done:
//
// ns/op is the time from starting the informer to synced; cpu-ms/op the
// process's CPU time (user and system, getrusage) over it; peak-MB the
// largest heap of objects (live and not yet collected) sampled every
// millisecond over it; peaklive-MB the largest live heap a collection
// found over it; steady-MB the live heap after a collection once synced;
// all heaps less the heap before the informer started. server-cpu-ms/op is
// the server process's CPU time over the start-up (Linux only).
func BenchmarkK8sStartup(b *testing.B) {
	if *k8sPods == "" {
		b.Skip("-k8s.pods not set")
	}
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	crlog.SetLogger(logr.Discard())
	impls := startupImpls()
	if *k8sImpls != "" {
		var keep []startupImpl
		for _, im := range impls {
			for name := range strings.SplitSeq(*k8sImpls, ",") {
				if im.name == name {
					keep = append(keep, im)
				}
			}
		}
		impls = keep
	}
	for field := range strings.SplitSeq(*k8sPods, ",") {
		n, err := strconv.Atoi(field)
		if err != nil || n <= 0 {
			b.Fatalf("-k8s.pods: bad number %q", field)
		}
		cfg, server := startupServer(b, n)
		results := make([][]startupResult, len(impls))
		// Each round starts with the next impl: the first start-up after
		// the server's warm-up costs the server more, and a fixed order
		// would charge that to the first impl every time.
		for round := range *k8sRounds {
			for j := range impls {
				i := (round + j) % len(impls)
				results[i] = append(results[i], measureStartup(cfg, server, impls[i].start))
			}
		}
		// The rounds are interleaved, so each impl's lines are printed
		// here, in the benchmark format benchstat reads.
		for i, im := range impls {
			for _, r := range results[i] {
				fmt.Printf("BenchmarkK8sStartup/pods=%s/impl=%s \t1\t%d ns/op\t%d cpu-ms/op\t%d server-cpu-ms/op\t%.1f peak-MB\t%.1f peaklive-MB\t%.1f steady-MB\n",
					thousands(n), im.name, r.sync.Nanoseconds(), r.cpu.Milliseconds(), r.serverCPU.Milliseconds(), mb(r.peak), mb(r.peakLive), mb(r.steady))
			}
		}
	}
}

func mb(v uint64) float64 { return float64(v) / 1e6 }

type startupResult struct {
	sync, cpu, serverCPU   time.Duration
	peak, peakLive, steady uint64
}

// measureStartup starts one informer with start, measures it until it
// has synced, and stops it. The heaps are less the heap without it: the
// smaller of the heaps before it started and after it stopped.
func measureStartup(cfg *rest.Config, server int, start func(context.Context, *rest.Config) func()) startupResult {
	settle()
	before := heapObjectBytes()
	sampler := newHeapSampler()
	cpu0, server0 := processCPU(), childCPU(server)
	t0 := time.Now()
	stop := start(context.Background(), cfg)
	sync := time.Since(t0)
	cpu, serverCPU := processCPU()-cpu0, childCPU(server)-server0
	peak, peakLive := sampler.stop()
	runtime.GC()
	steady := heapObjectBytes()
	stop()
	settle()
	base := min(before, heapObjectBytes())
	sub := func(v uint64) uint64 { return v - min(v, base) }
	return startupResult{sync: sync, cpu: cpu, serverCPU: serverCPU, peak: sub(peak), peakLive: sub(peakLive), steady: sub(steady)}
}

// settle lets what a stopped informer left (connections closing, their
// goroutines ending) go, and collects it.
func settle() {
	time.Sleep(300 * time.Millisecond)
	runtime.GC()
	runtime.GC()
}

var heapSamples = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}

// heapObjectBytes returns the bytes of heap objects, live or not yet swept.
func heapObjectBytes() uint64 {
	s := []metrics.Sample{heapSamples[0]}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// heapSampler records the largest heap, sampled every millisecond, until
// stopped.
type heapSampler struct {
	done           chan struct{}
	wg             sync.WaitGroup
	peak, peakLive uint64
}

func newHeapSampler() *heapSampler {
	s := &heapSampler{done: make(chan struct{})}
	s.wg.Go(func() {
		samples := append([]metrics.Sample(nil), heapSamples...)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(samples)
			s.peak = max(s.peak, samples[0].Value.Uint64())
			s.peakLive = max(s.peakLive, samples[1].Value.Uint64())
			select {
			case <-s.done:
				return
			case <-t.C:
			}
		}
	})
	return s
}

func (s *heapSampler) stop() (peak, peakLive uint64) {
	close(s.done)
	s.wg.Wait()
	return s.peak, s.peakLive
}

// childCPU returns the CPU time (user and system) process pid has used, as
// Linux's /proc counts it (0 elsewhere).
func childCPU(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command's parenthesis: utime and stime are
	// the 12th and 13th, in clock ticks (100 a second on Linux).
	_, rest, _ := strings.Cut(string(raw), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	user, _ := strconv.ParseInt(f[11], 10, 64)
	sys, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(user+sys) * 10 * time.Millisecond
}

// startupServer starts a kube-apiserver holding n realistic Pods in a
// child process, for as long as b runs, and returns a config of a client
// of it and the server's process id.
func startupServer(b *testing.B, n int) (*rest.Config, int) {
	b.Helper()
	bin := os.Getenv("MIRROR_BENCHAPISERVER")
	if bin == "" {
		bin = filepath.Join(b.TempDir(), "benchapiserver")
		build := exec.Command("go", "build", "-o", bin, "github.com/listwatch/mirror/test/k8s/cmd/benchapiserver")
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("build the server: %v\n%s", err, out)
		}
	}
	dir := filepath.Join(*k8sDir, fmt.Sprintf("pods-%d", n))
	loaded := filepath.Join(dir, "loaded")
	args := []string{"-dir", dir, "-out", filepath.Join(dir, "server.json")}
	if _, err := os.Stat(loaded); err != nil {
		// A directory left by a run that did not finish loading holds
		// an unknown number of Pods.
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		records := filepath.Join(dir, "pods.records")
		if err := writePodRecords(records, n); err != nil {
			b.Fatal(err)
		}
		args = append(args, "-load", records)
	}
	_ = os.Remove(filepath.Join(dir, "server.json"))
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	var exitErr error
	go func() {
		exitErr = cmd.Wait()
		close(exited)
	}()
	b.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	var info struct{ Host, Token string }
	for {
		raw, err := os.ReadFile(filepath.Join(dir, "server.json"))
		if err == nil {
			if err := json.Unmarshal(raw, &info); err != nil {
				b.Fatal(err)
			}
			break
		}
		select {
		case <-exited:
			b.Fatalf("the server exited: %v", exitErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
	_ = os.Remove(filepath.Join(dir, "pods.records"))
	if err := os.WriteFile(loaded, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	cfg := &rest.Config{Host: info.Host, BearerToken: info.Token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: -1}
	// The server's watch cache may still be filling: wait until a
	// consistent list counts every Pod, then sync one informer, unmeasured.
	cs := kubernetes.NewForConfigOrDie(cfg)
	deadline := time.Now().Add(5 * time.Minute)
	for {
		l, err := cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{Limit: 1})
		if err == nil && int64(len(l.Items))+ptrValue(l.RemainingItemCount) >= int64(n) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the server does not serve %d Pods: %v", n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, im := range startupImpls() {
		if im.name == "client-go-protobuf" {
			im.start(context.Background(), cfg)()
		}
	}
	return cfg, cmd.Process.Pid
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// writePodRecords writes n realistic Pods to file as benchapiserver's
// -load reads them: each key ("/registry/pods/ns/name") and value (the
// Pod as the server stores it: protobuf, without a resource version)
// preceded by its length.
func writePodRecords(file string, n int) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	enc := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	put := func(b []byte) {
		var l [4]byte
		binary.BigEndian.PutUint32(l[:], uint32(len(b)))
		_, _ = w.Write(l[:])
		_, _ = w.Write(b)
	}
	var raw bytesWriter
	for i := range n {
		p := realisticPod(i)
		p.APIVersion, p.Kind = "v1", "Pod"
		p.ResourceVersion = ""
		raw.b = raw.b[:0]
		if err := enc.Encode(p, &raw); err != nil {
			_ = f.Close()
			return err
		}
		put([]byte("/registry/pods/" + p.Namespace + "/" + p.Name))
		put(raw.b)
	}
	return errors.Join(w.Flush(), f.Close())
}

type bytesWriter struct{ b []byte }

func (w *bytesWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}
