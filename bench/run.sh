#!/usr/bin/env bash
# Runs the side-by-side benchmarks (mirror vs client-go in ./bench, and
# the etcd rows, informer vs raw clientv3, in ./test/etcd when they
# exist), summarises them with benchstat and writes bench/RESULTS.md and
# bench/ratios.svg. The raw results stay beside them (bench/results*.txt,
# bench/run-info.txt, bench/profiles.md), so the report can be rewritten
# without running again.
#
#   bash bench/run.sh                  # the full run: 10 rounds
#   COUNT=3 bash bench/run.sh          # a quicker one
#   BENCH=DeltaFIFO COUNT=1 bash bench/run.sh   # a subset (-bench regexp)
#   PROFILE=0 bash bench/run.sh        # skip the profiles
#   REPORT_ONLY=1 bash bench/run.sh    # rewrite RESULTS.md from the last run's files
#
# Needs only Go and the module proxy; installs benchstat itself.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
export PATH="$(go env GOPATH)/bin:$PATH"

COUNT=${COUNT:-10}
BENCH=${BENCH:-.}
PROFILE=${PROFILE:-1}
REPORT_ONLY=${REPORT_ONLY:-0}
BENCHSTAT_VERSION=v0.0.0-20260908200009-22c9c6c9d4da # golang.org/x/perf
out=bench
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== installing benchstat ($BENCHSTAT_VERSION)"
go install "golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION"

# rounds runs the benchmarks of package $1 COUNT times, one round after
# another, rather than with -count: -count runs each sub-benchmark COUNT
# times in a row, so that ours and the peer's would meet a machine whose
# load drifts at different times. Interleaved, a drift lands on both.
rounds() {
  local i
  for i in $(seq "$COUNT"); do
    go test -run '^$' -bench "$BENCH" -count 1 -timeout 60m "$1" || return
  done
}

run() {
  local start load_before etcd=no
  start=$(date +%s)
  load_before=$(uptime | sed 's/.*load average: //')

  echo "== bench: mirror vs client-go (count $COUNT)"
  rounds ./bench/ | tee "$out/results.txt"

  # The etcd rows come from test/etcd (written separately): informer vs a
  # raw clientv3 loop (and the adapter alone). Their sub-benchmarks are
  # named informer, adapter and raw; they are renamed impl=informer... so
  # that benchstat can put them side by side as it does the others.
  rm -f "$out/results-etcd.txt"
  if grep -qs 'func BenchmarkInitialSync\|func BenchmarkWatchApply' test/etcd/*_test.go; then
    etcd=yes
    echo "== test/etcd: informer vs raw clientv3 (count $COUNT)"
    rounds ./test/etcd/ |
      sed -E 's#^Benchmark(InitialSync|WatchApply)/(informer|adapter|raw)#Benchmark\1/impl=\2#' |
      tee "$out/results-etcd.txt"
  else
    echo "== test/etcd has no BenchmarkInitialSync or BenchmarkWatchApply: etcd rows skipped"
  fi

  : >"$out/profiles.md"
  if [ "$PROFILE" = 1 ]; then
    echo "== profiles (one run each)"
    # pprof names generic functions with their whole type arguments;
    # short() drops them (innermost brackets first) so the lines fit.
    short() { sed -n '/flat%/,$p' | sed -E ':a; s/\[[^][]*\]//; ta' | cut -c1-150; }
    local spec name n
    # Each row with enough iterations for a few seconds of samples.
    for spec in 'Informer_EndToEnd1M/handlers=1$/impl=mirror 1x' 'Informer_EndToEnd1M/handlers=16$/impl=mirror 1x' \
      'Informer_EndToEnd1M/handlers=16$/impl=clientgo 1x' 'DeltaFIFO_Churn100k/impl=mirror$ 20x' \
      'DeltaFIFO_Churn100k/impl=clientgo$ 10x'; do
      n=${spec#* }
      spec=${spec% *}
      name=$(echo "$spec" | tr -c 'A-Za-z0-9\n' '_')
      go test -run '^$' -bench "$spec" -benchtime "$n" -count 1 -timeout 10m \
        -cpuprofile "$tmp/$name.cpu" -memprofile "$tmp/$name.mem" -o "$tmp/bench.test" ./bench/ >/dev/null
      {
        echo "#### $spec (-benchtime $n): CPU, top 15 by flat share"
        echo '```'
        go tool pprof -top -nodecount 15 "$tmp/$name.cpu" 2>/dev/null | short
        echo '```'
        echo "#### $spec: allocated bytes, top 6"
        echo '```'
        go tool pprof -sample_index alloc_space -top -nodecount 6 "$tmp/$name.mem" 2>/dev/null | short
        echo '```'
      } >>"$out/profiles.md"
    done
    # -heapprofile is the benchmark's own flag: it goes after -args.
    go test -run '^$' -bench 'Informer_Heap1M' -benchtime 1x -count 1 -timeout 10m \
      -o "$tmp/bench.test" ./bench/ -args -heapprofile "$tmp/heap" >/dev/null
    for impl in mirror clientgo; do
      {
        echo "#### Informer_Heap1M/impl=$impl: live heap of the synced informer, top 6"
        echo '```'
        go tool pprof -sample_index inuse_space -top -nodecount 6 "$tmp/heap-$impl.pprof" 2>/dev/null | short
        echo '```'
      } >>"$out/profiles.md"
    done
  fi

  local end
  end=$(date +%s)
  {
    echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "go=$(go version | sed 's/^go version //')"
    echo "cpu=$(sed -n 's/^cpu: //p' "$out/results.txt" | head -1), $(nproc) cores"
    echo "clientgo=$(cd bench && go list -m -f '{{.Version}}' k8s.io/client-go)"
    echo "runs=$COUNT rounds of -count=1, interleaved, -bench '$BENCH'"
    echo "time=$(((end - start) / 60)) min $(((end - start) % 60)) s"
    echo "load=before: $load_before; after: $(uptime | sed 's/.*load average: //')"
    echo "etcd=$etcd"
  } >"$out/run-info.txt"
}

report() {
  local f
  local files=("$out/results.txt")
  [ -s "$out/results-etcd.txt" ] && files+=("$out/results-etcd.txt")
  : >"$tmp/benchstat.txt"
  : >"$tmp/benchstat.csv"
  for f in "${files[@]}"; do
    benchstat -col /impl "$f" >>"$tmp/benchstat.txt"
    echo >>"$tmp/benchstat.txt"
    benchstat -col /impl -format csv "$f" >>"$tmp/benchstat.csv" 2>/dev/null
    echo >>"$tmp/benchstat.csv"
  done
  go run ./bench/cmd/chart -in "$tmp/benchstat.csv" -md "$tmp/table.md" -svg "$out/ratios.svg"

  info() { sed -n "s/^$1=//p" "$out/run-info.txt"; }
  {
    echo "# Benchmarks: mirror side by side with client-go"
    echo
    echo "Written by \`bench/run.sh\` (the notes come from \`bench/NOTES.md\`);"
    echo "regenerate with \`bash bench/run.sh\`. Raw results: \`results.txt\`"
    echo "(and \`results-etcd.txt\`), for \`benchstat -col /impl\`."
    echo
    echo "| | |"
    echo "| --- | --- |"
    echo "| date | $(info date) |"
    echo "| Go | $(info go) |"
    echo "| CPU | $(info cpu) |"
    echo "| client-go | $(info clientgo) |"
    echo "| runs | $(info runs) |"
    echo "| run time of run.sh (with profiles) | $(info time) |"
    echo "| load average (1, 5, 15 min) | $(info load) |"
    echo "| etcd rows (test/etcd) | $(info etcd) |"
    echo
    echo "## Summary"
    echo
    cat "$tmp/table.md"
    echo
    echo '![ratios: how many times better mirror is, per row](ratios.svg)'
    echo
    cat bench/NOTES.md
    if [ -s "$out/profiles.md" ]; then
      echo
      echo "## Profiles of this run"
      echo
      echo "One run of each, read with \`go tool pprof -top\`; generic type arguments dropped."
      echo
      cat "$out/profiles.md"
    fi
    echo
    echo "## benchstat"
    echo
    echo '```'
    cat "$tmp/benchstat.txt"
    echo '```'
  } >"$out/RESULTS.md"
  echo "== wrote $out/RESULTS.md and $out/ratios.svg"
}

if [ "$REPORT_ONLY" != 1 ]; then
  run
fi
report
