#!/usr/bin/env bash
# Time each libcheck suite alone (CK_RUN_SUITE), slowest first, with the
# load average beside each figure (a busy machine inflates every time).
#
#   scripts/time-suites.sh                 # every suite, build/ (make test's)
#   BUILD=build/asan scripts/time-suites.sh cli engine
#
# Each suite runs as `make test` runs it (its own run directory, models made
# once per suite instead of once per run), so the sum is a little above one
# `make test`.  Prints "suite wall-seconds cpu-seconds load-before..after
# checks": the CPU seconds (user + system, the suite and every process it
# ran) hardly depend on the load; on an idle 2-core box the wall time is
# about the CPU time divided by the cores a suite keeps busy.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
suites=("$@")
if [ ${#suites[@]} -eq 0 ]; then
    mapfile -t suites < <(grep -ho 'suite_create("[a-z_0-9]*")' test/test_*.c | sed 's/.*("\(.*\)")/\1/' | sort -u)
fi
out=$(mktemp)
lines=$(mktemp)
total=0
total_cpu=0
rc=0
for s in "${suites[@]}"; do
    l0=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date +%s.%N)
    base=$(mktemp -d "${TMPDIR:-/tmp}/strata-make-test.XXXXXX")
    TIMEFORMAT='%U %S'
    cpu=$( { time TMPDIR=$base CK_RUN_SUITE=$s STRATA_CLI="$PWD/$BUILD/strata-cli" \
        STRATA_ROOT="$PWD" "$BUILD/strata-tests" >"$out" 2>&1; } 2>&1 ) || rc=1
    cpu=$(echo "$cpu" | tail -n 1 | awk '{printf "%.1f", $1 + $2}')
    rmdir "$base" 2>/dev/null || { echo "$s: left files in $base" >&2; rm -rf "$base"; rc=1; }
    t1=$(date +%s.%N)
    l1=$(cut -d' ' -f1 /proc/loadavg)
    dt=$(echo "$t1 - $t0" | bc)
    total=$(echo "$total + $dt" | bc)
    total_cpu=$(echo "$total_cpu + $cpu" | bc)
    printf '%-16s %8.1f s wall %7.1f s cpu  load %s..%s  %s\n' "$s" "$dt" "$cpu" "$l0" "$l1" \
        "$(tail -n 1 "$out")" | tee -a "$lines" >&2
done
echo "== slowest first"
sort -k2 -n -r "$lines"
printf 'total %.1f s wall, %.1f s cpu\n' "$total" "$total_cpu"
rm -f "$out" "$lines"
exit $rc
