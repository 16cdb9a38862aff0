#!/usr/bin/env bash
# Runs the side-by-side benchmarks (mirror vs client-go in ./bench, and
# the etcd rows, informer vs raw clientv3 loops with the etcd server in a
# child process, in ./test/etcd), summarises them with benchstat and
# writes bench/RESULTS.md and bench/ratios.svg. The raw results stay
# beside them (bench/results*.txt, bench/run-info.txt, bench/profiles.md),
# so the report can be rewritten without running again. The workqueue
# rows (ours vs client-go's and controller-runtime's queues) go to
# bench/results-workqueue.txt and their benchstat to
# bench/benchstat-workqueue.txt, which bench/WORKQUEUE.md discusses.
#
#   bash bench/run.sh                  # the full run: 10 rounds, etcd rows at 100k and 1M keys
#   COUNT=3 bash bench/run.sh          # a quicker one
#   ETCD_1M=0 bash bench/run.sh        # without the 1M-key etcd rows (minutes each round)
#   BENCH=DeltaFIFO COUNT=1 bash bench/run.sh   # a subset (-bench regexp)
#   PROFILE=0 bash bench/run.sh        # skip the profiles
#   WQ=0 bash bench/run.sh             # without the workqueue rows (about 80 s a round)
#   REPORT_ONLY=1 bash bench/run.sh    # rewrite RESULTS.md from the last run's files
#
# Needs only Go and the module proxy; installs benchstat itself.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
export PATH="$(go env GOPATH)/bin:$PATH"

COUNT=${COUNT:-10}
BENCH=${BENCH:-.}
ETCD_1M=${ETCD_1M:-1}
PROFILE=${PROFILE:-1}
WQ=${WQ:-1}
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
# Arguments after $1 go to the test binary.
rounds() {
  local i pkg=$1
  shift
  for i in $(seq "$COUNT"); do
    go test -run '^$' -bench "$BENCH" -count 1 -timeout 120m "$pkg" "$@" || return
  done
}

run() {
  local start load_before etcd
  start=$(date +%s)
  load_before=$(uptime | sed 's/.*load average: //')

  echo "== bench: mirror vs client-go (count $COUNT)"
  rounds ./bench/ -skip Workqueue | tee "$out/results.txt"

  # The workqueue rows have peers of their own (client-go's and
  # controller-runtime's queues) and a report of their own.
  if [ "$WQ" = 1 ]; then
    echo "== bench: workqueue vs client-go and controller-runtime (count $COUNT)"
    rounds ./bench/ -run '^$' -bench "Workqueue.*$BENCH" | tee "$out/results-workqueue.txt"
  fi

  # The etcd rows come from test/etcd: informer vs raw clientv3 loops
  # (and the adapter alone), each sub-benchmark named impl=..., with one
  # etcd member in a child process serving the whole round.
  local etcd_args=()
  [ "$ETCD_1M" = 1 ] && etcd_args=(-args -etcd.1m)
  echo "== test/etcd: informer vs raw clientv3, server in a child process (count $COUNT, 1M rows: $ETCD_1M)"
  rounds ./test/etcd/ "${etcd_args[@]}" | tee "$out/results-etcd.txt"
  etcd="$(cd test/etcd && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3): server/v3/embed in a child process of the test binary, loopback, one member, UnsafeNoFsync; 1M-key rows: $ETCD_1M"

  : >"$out/profiles.md"
  if [ "$PROFILE" = 1 ]; then
    echo "== profiles (one run each)"
    # pprof names generic functions with their whole type arguments;
    # short() drops them (innermost brackets first) so the lines fit.
    short() { sed -n '/flat%/,$p' | sed -E ':a; s/\[[^][]*\]//; ta' | cut -c1-150; }
    # profile PKG 'SPEC N': the CPU and allocation profiles of one row,
    # with enough iterations for a few seconds of samples.
    profile() {
      local pkg=$1 spec=${2% *} n=${2#* } name
      name=$(echo "$pkg$spec" | tr -c 'A-Za-z0-9\n' '_')
      go test -run '^$' -bench "$spec" -benchtime "$n" -count 1 -timeout 10m \
        -cpuprofile "$tmp/$name.cpu" -memprofile "$tmp/$name.mem" -o "$tmp/$name.test" "$pkg" >/dev/null
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
    }
    local spec
    for spec in 'Informer_EndToEnd1M/handlers=1$/impl=mirror 1x' 'Informer_EndToEnd1M/handlers=16$/impl=mirror 1x' \
      'Informer_EndToEnd1M/handlers=16$/impl=clientgo 1x' 'DeltaFIFO_Churn100k/impl=mirror$ 20x' \
      'DeltaFIFO_Churn100k/impl=clientgo$ 10x'; do
      profile ./bench/ "$spec"
    done
    # The etcd rows' profiles are the client's alone: the server runs in
    # a child process.
    for spec in 'InitialSync/keys=100k/impl=informer$ 10x' 'InitialSync/keys=100k/impl=raw-stream$ 10x' \
      'Relist/keys=100k/impl=informer$ 5x' 'WatchApply/impl=informer$ 20x' 'WatchApply/impl=raw$ 20x'; do
      profile ./test/etcd/ "$spec"
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
    echo "controllerruntime=$(cd bench && go list -m -f '{{.Version}}' sigs.k8s.io/controller-runtime)"
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
  if [ -s "$out/results-workqueue.txt" ]; then
    benchstat -col /impl "$out/results-workqueue.txt" >"$out/benchstat-workqueue.txt"
    echo "== wrote $out/benchstat-workqueue.txt (see $out/WORKQUEUE.md)"
  fi

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
    echo "| etcd server (test/etcd rows) | $(info etcd) |"
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
