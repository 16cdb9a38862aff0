#!/usr/bin/env bash
# The NATS KV benchmarks of bench/NATS.md: the mirror against a raw KV
# watcher, nats-server in a child process, each round a fresh run of both
# benchmarks so that raw and mirror alternate (go test's -count repeats a
# sub-benchmark in a row). Writes results-nats.txt here.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-8}
out=$PWD/bench/results-nats.txt
(cd test/nats && go test -c -o /tmp/mirror-natstest .)
: >"$out"
for i in $(seq "$rounds"); do
  /tmp/mirror-natstest -test.run '^$' -test.bench 'BenchmarkNATSInitialSync' -test.benchtime 3x 2>/dev/null | grep '^Benchmark' >>"$out"
  /tmp/mirror-natstest -test.run '^$' -test.bench 'BenchmarkNATSWatch' -test.benchtime 100000x 2>/dev/null | grep '^Benchmark' >>"$out"
done
benchstat -col /impl "$out"
