package bench

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// impl names one implementation of a workload; run runs it as a
// sub-benchmark named impl=<name>, which benchstat groups with -col /impl.
type impl struct {
	name string
	run  func(b *testing.B)
}

func runImpls(b *testing.B, impls ...impl) {
	for _, im := range impls {
		b.Run("impl="+im.name, im.run)
	}
}

const namespace = "default"

// names returns n object names, shared by every version of an object.
func names(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("obj-%07d", i)
	}
	return s
}

// objects returns one version of n objects, all at resource version rv.
func objects(names []string, rv int) []*Obj {
	v := strconv.Itoa(rv)
	objs := make([]*Obj, len(names))
	for i, n := range names {
		objs[i] = &Obj{Namespace: namespace, Name: n, ResourceVersion: v, Value: int64(rv)}
	}
	return objs
}

func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// reportPer reports the rate of a benchmark whose every op moves perOp
// units (events, objects) as unit+"/s", and its allocations per unit as
// "allocs/"+unit: allocs/op of a large op hides a fraction of an
// allocation per unit. mallocs0 is mallocs() read before the loop.
func reportPer(b *testing.B, unit string, perOp int, mallocs0 uint64) {
	units := float64(b.N) * float64(perOp)
	b.ReportMetric(units/b.Elapsed().Seconds(), unit+"s/s")
	b.ReportMetric(float64(mallocs()-mallocs0)/units, "allocs/"+unit)
}

// heapAlloc returns the bytes of live heap after two collections (the
// second finishes what finalizers and sweeping left).
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// cpuClock measures the process's CPU time over the timed part of a
// benchmark: start and stop where the benchmark starts and stops its
// timer. On a shared machine, CPU time per unit is disturbed less by
// other jobs than wall time is.
type cpuClock struct {
	total, from time.Duration
}

func (c *cpuClock) start() { c.from = processCPU() }
func (c *cpuClock) stop()  { c.total += processCPU() - c.from }

// report reports the CPU time per unit as "cpu-ns/"+unit, for b.N ops of
// perOp units each.
func (c *cpuClock) report(b *testing.B, unit string, perOp int) {
	b.ReportMetric(float64(c.total.Nanoseconds())/(float64(b.N)*float64(perOp)), "cpu-ns/"+unit)
}
