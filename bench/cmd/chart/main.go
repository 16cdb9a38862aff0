// Command chart reads benchstat's CSV output (benchstat -col /impl
// -format csv) for the side-by-side benchmarks and writes two summaries:
// a Markdown table of our figure, the peer's and their ratio for every
// row, with the target each row has in DESIGN.md, and an SVG bar chart of
// those ratios.
//
// Usage:
//
//	chart -in results.csv -md table.md -svg ratios.svg
//
// In every benchstat table, the column named mirror (or informer, for the
// etcd benchmarks) is ours and every other column is a peer. A ratio is
// always "how many times better ours is": the peer's figure over ours
// for costs (sec/op, B/op, heap-MB...), ours over the peer's for rates
// (units ending in /s). Above 1, ours is better.
package main

import (
	"bufio"
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	in := flag.String("in", "", "benchstat CSV `file` (default: standard input)")
	md := flag.String("md", "", "write the Markdown table to `file`")
	svg := flag.String("svg", "", "write the SVG chart to `file`")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("chart: ")

	r := io.Reader(os.Stdin)
	if *in != "" {
		f, err := os.Open(*in)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		r = f
	}
	cells, err := parse(r)
	if err != nil {
		log.Fatal(err)
	}
	if len(cells) == 0 {
		log.Fatal("no comparison found in the input")
	}
	rows := summarise(cells)
	if *md != "" {
		if err := os.WriteFile(*md, []byte(markdown(rows)), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	if *svg != "" {
		if err := os.WriteFile(*svg, []byte(chart(rows)), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

// cell is one figure of one benchmark for one implementation.
type cell struct {
	bench, unit, impl string
	value             float64
}

// parse reads benchstat's CSV: tables separated by blank lines, each with
// a line of column names (implementations), a line of units, then one
// line per benchmark. Lines before the first table (goos, cpu...) and
// geomean lines are skipped.
func parse(r io.Reader) ([]cell, error) {
	var cells []cell
	var table [][]string
	flush := func() {
		if len(table) >= 3 {
			cells = append(cells, parseTable(table)...)
		}
		table = nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if !strings.HasPrefix(line, ",") && len(table) == 0 {
			continue // goos: linux and the like
		}
		rec, err := csv.NewReader(strings.NewReader(line)).Read()
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", line, err)
		}
		table = append(table, rec)
	}
	flush()
	return cells, sc.Err()
}

func parseTable(t [][]string) []cell {
	names, units := t[0], t[1]
	type col struct {
		idx        int
		impl, unit string
	}
	var cols []col
	for i := 1; i < len(names) && i < len(units); i++ {
		if names[i] != "" {
			cols = append(cols, col{i, names[i], units[i]})
		}
	}
	var cells []cell
	for _, rec := range t[2:] {
		if len(rec) == 0 || rec[0] == "geomean" {
			continue
		}
		for _, c := range cols {
			if c.idx >= len(rec) || rec[c.idx] == "" {
				continue
			}
			v, err := strconv.ParseFloat(rec[c.idx], 64)
			if err != nil {
				continue
			}
			cells = append(cells, cell{bench: trimProcs(rec[0]), unit: c.unit, impl: c.impl, value: v})
		}
	}
	return cells
}

var procsSuffix = regexp.MustCompile(`-\d+$`)

// trimProcs drops the -GOMAXPROCS suffix of a benchmark name.
func trimProcs(name string) string { return procsSuffix.ReplaceAllString(name, "") }

// ours reports whether impl is the implementation under test.
func ours(impl string) bool { return impl == "mirror" || impl == "informer" }

// higherIsBetter reports whether a bigger figure in unit is better.
func higherIsBetter(unit string) bool { return strings.HasSuffix(unit, "/s") }

// target is what DESIGN.md asks of a row.
type target struct {
	unit  string  // the unit the target is about
	ratio float64 // the least "times better" that meets it
	text  string
	// also are further criteria: the least "times better" in other
	// units.
	also map[string]float64
	// oursAtMost bounds our own figures, by unit.
	oursAtMost map[string]float64
}

// targets maps a benchmark name, or the start of one up to a "/", and a
// peer to its target; the longest name that matches wins. Rows without
// one are shown for information.
var targets = map[[2]string]target{
	{"DeltaFIFO_Churn100k", "clientgo"}:             {unit: "sec/op", ratio: 4, text: "≥ 4× ops/s, ≤ 1 alloc/event"},
	{"DeltaFIFO_ReplaceDrain100k", "clientgo"}:      {unit: "sec/op", ratio: 3, text: "≥ 3×"},
	{"Informer_EndToEnd1M/handlers=1", "clientgo"}:  {unit: "sec/op", ratio: 3, text: "≥ 3× events/s"},
	{"Informer_EndToEnd1M/handlers=16", "clientgo"}: {unit: "sec/op", ratio: 15, text: "≥ 15× events/s"},
	{"Informer_Heap1M", "clientgo"}:                 {unit: "heap-B", ratio: 2, text: "heap ≤ 0.5× the peer's (2×)"},
	{"Informer_StalledHandler1M", "clientgo"}:       {unit: "heap-B", ratio: 10, text: "bounded by keys: ≥ 10× less growth"},
	{"InitialSync", "raw-stream"}: {unit: "keys/s", ratio: 0.8, text: "≥ 0.8× keys/s, CPU ≤ 1.3×",
		also: map[string]float64{"cpu-us/key": 1 / 1.3}},
	{"InitialSync/keys=1M", "raw-stream"}: {unit: "keys/s", ratio: 0.8, text: "≥ 0.8× keys/s, CPU ≤ 1.3×, peak heap ≤ 1.3× held",
		also: map[string]float64{"cpu-us/key": 1 / 1.3}, oursAtMost: map[string]float64{"peak/held": 1.3}},
	{"Relist", "raw-stream"}: {unit: "keys/s", ratio: 0.8, text: "≥ 0.8× keys/s, CPU ≤ 1.3×",
		also: map[string]float64{"cpu-us/key": 1 / 1.3}},
	{"WatchApply", "raw"}: {unit: "puts/s", ratio: 0.95, text: "≥ 0.95× puts/s"},
}

// primaryUnit is the unit a row is judged and charted by.
func primaryUnit(bench string) string {
	if t, ok := targetFor(bench, ""); ok {
		return t.unit
	}
	return "sec/op"
}

// targetFor returns the target of bench against peer; an empty peer
// matches any.
func targetFor(bench, peer string) (target, bool) {
	var best target
	bestLen := -1
	for k, t := range targets {
		if (k[0] == bench || strings.HasPrefix(bench, k[0]+"/")) && (peer == "" || k[1] == peer) && len(k[0]) > bestLen {
			best, bestLen = t, len(k[0])
		}
	}
	return best, bestLen >= 0
}

// metBy reports whether r meets t, and if not, what misses.
func metBy(r row, t target) (bool, string) {
	var missed []string
	if ratio := r.ratio(t.unit); !(ratio >= t.ratio) {
		missed = append(missed, fmt.Sprintf("%s %.2f×", display(t.unit), ratio))
	}
	for _, u := range sortedUnits(t.also) {
		if ratio := r.ratio(u); !(ratio >= t.also[u]) {
			missed = append(missed, fmt.Sprintf("%s %.2f×", display(u), ratio))
		}
	}
	for _, u := range sortedUnits(t.oursAtMost) {
		if v, ok := r.ours[u]; !ok || v > t.oursAtMost[u] {
			missed = append(missed, fmt.Sprintf("%s %.2f", display(u), v))
		}
	}
	return len(missed) == 0, strings.Join(missed, ", ")
}

// row is one benchmark compared with one peer.
type row struct {
	bench, peer, ourName string
	// figures by unit: ours and the peer's
	ours, theirs map[string]float64
}

// ratio is how many times better ours is in unit, or NaN.
func (r row) ratio(unit string) float64 {
	o, ok1 := r.ours[unit]
	t, ok2 := r.theirs[unit]
	if !ok1 || !ok2 || o == 0 || t == 0 {
		return math.NaN()
	}
	if higherIsBetter(unit) {
		return o / t
	}
	return t / o
}

// summarise pairs our figures with each peer's, in input order.
func summarise(cells []cell) []row {
	type key struct{ bench, impl string }
	byKey := map[key]map[string]float64{}
	var benches []string
	impls := map[string][]string{}
	ourName := map[string]string{}
	for _, c := range cells {
		k := key{c.bench, c.impl}
		if byKey[k] == nil {
			byKey[k] = map[string]float64{}
			if !slices.Contains(benches, c.bench) {
				benches = append(benches, c.bench)
			}
			if ours(c.impl) {
				ourName[c.bench] = c.impl
			} else {
				impls[c.bench] = append(impls[c.bench], c.impl)
			}
		}
		byKey[k][c.unit] = c.value
	}
	var rows []row
	for _, b := range benches {
		o := byKey[key{b, ourName[b]}]
		if o == nil {
			continue
		}
		for _, p := range impls[b] {
			rows = append(rows, row{bench: b, peer: p, ourName: ourName[b], ours: o, theirs: byKey[key{b, p}]})
		}
	}
	return rows
}

// perUnitAllocs returns the allocs/<unit> figure a row reports, if any.
func perUnitAllocs(m map[string]float64) (string, float64, bool) {
	for u, v := range m {
		if strings.HasPrefix(u, "allocs/") && u != "allocs/op" {
			return u, v, true
		}
	}
	return "", 0, false
}

func markdown(rows []row) string {
	var b strings.Builder
	b.WriteString("| benchmark | peer | metric | ours | peer's | ours is | target | met |\n")
	b.WriteString("| --- | --- | --- | ---: | ---: | ---: | --- | --- |\n")
	for _, r := range rows {
		unit := primaryUnit(r.bench)
		t, hasTarget := targetFor(r.bench, r.peer)
		met, goal := "", ""
		ratio := r.ratio(unit)
		if hasTarget {
			goal = t.text
			met = "yes"
			if ok, why := metBy(r, t); !ok {
				met = "no (" + why + ")"
			}
			// "≤ 1 alloc" allows what the harness adds: a map or
			// slice growing now and then, a few thousandths.
			if u, v, ok := perUnitAllocs(r.ours); ok && strings.Contains(t.text, "alloc") && v > 1.01 {
				met = fmt.Sprintf("no (%s %.3f)", u, v)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.bench, r.peer, display(unit), format(r.ours[unit], unit), format(r.theirs[unit], unit), times(ratio, unit), goal, met)
		if u, v, ok := perUnitAllocs(r.ours); ok {
			fmt.Fprintf(&b, "| | | %s | %s | %s | %s | | |\n", u, format(v, u), format(r.theirs[u], u), times(r.ratio(u), u))
		}
		if _, ok := r.ours["B/op"]; ok {
			fmt.Fprintf(&b, "| | | B/op | %s | %s | %s | | |\n", format(r.ours["B/op"], "B/op"), format(r.theirs["B/op"], "B/op"), times(r.ratio("B/op"), "B/op"))
		}
		for _, u := range sortedUnits(r.ours) {
			if u == unit || u == "B/op" || u == "allocs/op" || strings.HasPrefix(u, "allocs/") || u == "sec/op" {
				continue
			}
			fmt.Fprintf(&b, "| | | %s | %s | %s | %s | | |\n", display(u), format(r.ours[u], u), format(r.theirs[u], u), times(r.ratio(u), u))
		}
		if unit != "sec/op" {
			fmt.Fprintf(&b, "| | | sec/op | %s | %s | %s | | |\n", format(r.ours["sec/op"], "sec/op"), format(r.theirs["sec/op"], "sec/op"), times(r.ratio("sec/op"), "sec/op"))
		}
	}
	b.WriteString("\n\"ours is\" is how many times better ours is: the peer's figure over ours for costs, ours over the peer's for rates (units ending in /s).\n")
	return b.String()
}

// display names a unit as the benchmark reported it: benchstat reads
// heap-MB as heap-B, in bytes, and cpu-ns/x as cpu-sec/x, in seconds.
func display(unit string) string {
	if rest, ok := strings.CutPrefix(unit, "cpu-sec/"); ok {
		return "cpu-ns/" + rest
	}
	if strings.HasSuffix(unit, "-B") {
		return strings.TrimSuffix(unit, "-B") + "-MB"
	}
	return unit
}

func sortedUnits(m map[string]float64) []string {
	var us []string
	for u := range m {
		us = append(us, u)
	}
	slices.Sort(us)
	return us
}

// format prints v in unit compactly: seconds with a scaled unit, bytes in
// MiB, other figures with 3 significant digits.
func format(v float64, unit string) string {
	switch {
	case v == 0:
		return "–"
	case strings.HasPrefix(unit, "cpu-sec/"):
		return fmt.Sprintf("%.0f", v*1e9) // shown as cpu-ns
	case unit == "sec/op":
		switch {
		case v >= 1:
			return fmt.Sprintf("%.2f s", v)
		case v >= 1e-3:
			return fmt.Sprintf("%.1f ms", v*1e3)
		case v >= 1e-6:
			return fmt.Sprintf("%.1f µs", v*1e6)
		}
		return fmt.Sprintf("%.0f ns", v*1e9)
	case unit == "B/op" || strings.HasSuffix(unit, "-B"):
		// benchstat reads a heap-MB metric as heap-B, in bytes.
		return fmt.Sprintf("%.1f MB", v/1e6)
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case strings.HasPrefix(unit, "allocs/"):
		return fmt.Sprintf("%.3f", v)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func times(ratio float64, _ string) string {
	if math.IsNaN(ratio) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", ratio)
}

// chart draws one horizontal bar per row: how many times better ours is
// in the row's primary unit, on a log scale, with a line at 1× and a tick
// at the row's target. Bars that meet their target are green, bars that
// miss it red, rows without a target grey.
func chart(rows []row) string {
	const (
		left, right, top, barH, gap = 360, 60, 66, 18, 8
		width                       = 900
		minX, maxX                  = 0.25, 64.0 // the log scale's ends
	)
	plotW := float64(width - left - right)
	x := func(v float64) float64 {
		v = math.Min(math.Max(v, minX), maxX)
		return float64(left) + plotW*math.Log(v/minX)/math.Log(maxX/minX)
	}
	height := top + len(rows)*(barH+gap) + 40
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">mirror vs peer: how many times better (log scale; above 1× mirror is better)</text>`+"\n", 10)
	fmt.Fprintf(&b, `<text x="%d" y="38" fill="#444">green: meets its target (dashed tick); red: misses it; grey: no target. Time rows compare sec/op, memory rows heap-MB (benchstat: heap-B).</text>`+"\n", 10)
	for _, v := range []float64{0.25, 0.5, 1, 2, 4, 8, 16, 32, 64} {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x(v), top-10, x(v), height-30, map[bool]string{true: "black", false: "#ddd"}[v == 1])
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%g×</text>`+"\n", x(v), height-14, v)
	}
	for i, r := range rows {
		unit := primaryUnit(r.bench)
		ratio := r.ratio(unit)
		y := top + i*(barH+gap)
		label := fmt.Sprintf("%s vs %s (%s)", r.bench, r.peer, display(unit))
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, y+barH-5, escape(label))
		if math.IsNaN(ratio) {
			continue
		}
		color := "#999"
		t, ok := targetFor(r.bench, r.peer)
		if ok {
			color = "#c33"
			if good, _ := metBy(r, t); good {
				color = "#3a3"
			}
		}
		x0, x1 := x(1), x(ratio)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", math.Min(x0, x1), y, math.Abs(x1-x0), barH, color)
		labelX := math.Max(x0, x1)
		if ok {
			tx := x(t.ratio)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black" stroke-width="2" stroke-dasharray="3,2"/>`+"\n", tx, y-2, tx, y+barH+2)
			labelX = math.Max(labelX, tx)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%.2f×</text>`+"\n", labelX+4, y+barH-5, ratio)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
