#!/usr/bin/env bash
# Runs the side-by-side benchmarks (mirror vs client-go in ./bench, and
# the etcd rows, informer vs raw clientv3, in ./test/etcd when they
# exist), summarises them with benchstat and writes bench/RESULTS.md,
# bench/ratios.svg and the raw results (bench/results*.txt).
#
#   bash bench/run.sh                  # the full run: -count=10
#   COUNT=3 bash bench/run.sh          # a quicker one
#   BENCH=DeltaFIFO COUNT=1 bash bench/run.sh   # a subset (-bench regexp)
#   PROFILE=0 bash bench/run.sh        # skip the profiles
#
# Needs only Go and the module proxy; installs benchstat itself.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
export PATH="$(go env GOPATH)/bin:$PATH"

COUNT=${COUNT:-10}
BENCH=${BENCH:-.}
PROFILE=${PROFILE:-1}
BENCHSTAT_VERSION=v0.0.0-20260908200009-22c9c6c9d4da # golang.org/x/perf
out=bench
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

start=$(date +%s)
load_before=$(uptime | sed 's/.*load average: //')

echo "== installing benchstat ($BENCHSTAT_VERSION)"
go install "golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION"

echo "== bench: mirror vs client-go (count $COUNT)"
go test -run '^$' -bench "$BENCH" -count "$COUNT" -timeout 60m ./bench/ | tee "$out/results.txt"

# The etcd rows come from test/etcd (written separately): informer vs a
# raw clientv3 loop. Their sub-benchmarks are named informer and raw; they
# are renamed impl=informer and impl=raw so that benchstat can put them
# side by side as it does the others.
etcd=no
rm -f "$out/results-etcd.txt"
if grep -qs 'func BenchmarkInitialSync\|func BenchmarkWatchApply' test/etcd/*_test.go; then
  etcd=yes
  echo "== test/etcd: informer vs raw clientv3 (count $COUNT)"
  go test -run '^$' -bench "$BENCH" -count "$COUNT" -timeout 60m ./test/etcd/ |
    sed -E 's#^Benchmark(InitialSync|WatchApply)/(informer|raw)#Benchmark\1/impl=\2#' |
    tee "$out/results-etcd.txt"
else
  echo "== test/etcd has no BenchmarkInitialSync or BenchmarkWatchApply: etcd rows skipped"
fi

echo "== benchstat"
files=("$out/results.txt")
[ -s "$out/results-etcd.txt" ] && files+=("$out/results-etcd.txt")
: >"$tmp/benchstat.txt"
: >"$tmp/benchstat.csv"
for f in "${files[@]}"; do
  benchstat -col /impl "$f" >>"$tmp/benchstat.txt"
  echo >>"$tmp/benchstat.txt"
  benchstat -col /impl -format csv "$f" >>"$tmp/benchstat.csv" 2>/dev/null
  echo >>"$tmp/benchstat.csv"
done
cat "$tmp/benchstat.txt"
go run ./bench/cmd/chart -in "$tmp/benchstat.csv" -md "$tmp/table.md" -svg "$out/ratios.svg"

if [ "$PROFILE" = 1 ]; then
  echo "== profiles (one run each)"
  for spec in 'Informer_EndToEnd1M/handlers=1$/impl=mirror' 'Informer_EndToEnd1M/handlers=16$/impl=mirror' 'Informer_Heap1M/impl=mirror'; do
    name=$(echo "$spec" | tr -c 'A-Za-z0-9\n' '_' | sed 's/__*/_/g')
    go test -run '^$' -bench "$spec" -benchtime 1x -count 1 -timeout 10m \
      -cpuprofile "$tmp/$name.cpu" -memprofile "$tmp/$name.mem" -o "$tmp/bench.test" ./bench/ >/dev/null
    {
      echo "#### $spec: CPU, top 15 by flat share"
      echo '```'
      go tool pprof -top -nodecount 15 "$tmp/$name.cpu" 2>/dev/null | sed -n '/flat%/,$p' | cut -c1-160
      echo '```'
      echo "#### $spec: allocated bytes, top 8"
      echo '```'
      go tool pprof -sample_index alloc_space -top -nodecount 8 "$tmp/$name.mem" 2>/dev/null | sed -n '/flat%/,$p' | cut -c1-160
      echo '```'
    } >>"$tmp/profiles.md"
  done
fi

end=$(date +%s)
load_after=$(uptime | sed 's/.*load average: //')
cpu=$(sed -n 's/^cpu: //p' "$out/results.txt" | head -1)

{
  echo "# Benchmarks: mirror side by side with client-go"
  echo
  echo "Written by \`bench/run.sh\`; do not edit by hand (the notes come from"
  echo "\`bench/NOTES.md\`). Regenerate with \`bash bench/run.sh\`."
  echo
  echo "| | |"
  echo "| --- | --- |"
  echo "| date | $(date -u '+%Y-%m-%d %H:%M UTC') |"
  echo "| Go | $(go version | sed 's/^go version //') |"
  echo "| CPU | ${cpu:-unknown}, $(nproc) cores |"
  echo "| client-go | $(cd bench && go list -m -f '{{.Version}}' k8s.io/client-go) |"
  echo "| runs | -count=$COUNT, -bench '$BENCH' |"
  echo "| run time | $(((end - start) / 60)) min $(((end - start) % 60)) s |"
  echo "| load average (1, 5, 15 min) | before: $load_before; after: $load_after |"
  echo "| etcd rows | $etcd |"
  echo
  echo "## Summary"
  echo
  cat "$tmp/table.md"
  echo
  echo '![ratios: how many times better mirror is, per row](ratios.svg)'
  echo
  cat bench/NOTES.md
  if [ -s "$tmp/profiles.md" ]; then
    echo
    echo "## Profiles of this run"
    echo
    echo "From \`go test -bench <row> -benchtime 1x -cpuprofile -memprofile\`,"
    echo "one run of each row, read with \`go tool pprof -top\`."
    echo
    cat "$tmp/profiles.md"
  fi
  echo
  echo "## benchstat"
  echo
  echo '```'
  cat "$tmp/benchstat.txt"
  echo '```'
} >"$out/RESULTS.md"

echo "== wrote $out/RESULTS.md and $out/ratios.svg in $(((end - start) / 60)) min $(((end - start) % 60)) s"
