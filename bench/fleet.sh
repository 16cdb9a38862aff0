#!/bin/sh
# fleet.sh runs test/etcd's fleet measurement (TestFleet, behind -fleet)
# and writes its table to bench/results-fleet.txt; bench/FLEET.md reads it.
# The members and the proxy run in child processes of the test binary.
#
#   bench/fleet.sh                        # 100 and 500 mirrors, 3000 keys, 100 puts/s
#   bench/fleet.sh -fleet.mirrors 100     # one size
set -eu
cd "$(dirname "$0")/../test/etcd"
go test -c -o /tmp/mirror-fleet.test .
cd /tmp
/tmp/mirror-fleet.test -test.run '^TestFleet$' -test.v -test.timeout 60m \
	-fleet -fleet.mirrors 100,500 -fleet.keys 3000 -fleet.rate 100 -fleet.seconds 15 "$@" 2>&1 |
	grep -E 'fleet_test.go|^(---|ok|FAIL|PASS)' | tee "$OLDPWD/../../bench/results-fleet.txt"
