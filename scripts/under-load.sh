#!/usr/bin/env bash
# The end-to-end suite `runs` times in a row while a busy loop keeps every
# core busy: a suite that passes only on an idle machine
# hides races. Stops at the first failed run; each run's output is kept in
# target/under-load/run-N.log.
#
#   bash scripts/under-load.sh [runs] [-- extra cargo test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"
shift || true
[ "${1:-}" = "--" ] && shift
logs="target/under-load"
mkdir -p "$logs"
# Built before the load starts, so each run times the tests, not the build.
bash scripts/test.sh --test e2e --no-run >"$logs/build.log" 2>&1 || {
    tail -30 "$logs/build.log"
    exit 1
}
cores="$(nproc)"
hogs=()
stop_hogs() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop_hogs EXIT
for _ in $(seq "$cores"); do
    # A pure CPU burner at normal priority, as a busy neighbour would be.
    sh -c 'while :; do :; done' &
    hogs+=("$!")
done
echo "under load: $cores busy loops (pids ${hogs[*]}), $runs runs"
for i in $(seq "$runs"); do
    start=$(date +%s)
    if bash scripts/test.sh --test e2e "$@" >"$logs/run-$i.log" 2>&1; then
        echo "run $i/$runs: passed in $(($(date +%s) - start)) s ($(grep -o 'test result: ok. [0-9]* passed' "$logs/run-$i.log" | tail -1))"
    else
        echo "run $i/$runs: FAILED after $(($(date +%s) - start)) s; see $logs/run-$i.log"
        grep -E '^test .* FAILED|^    [a-z_:]+$|panicked at' "$logs/run-$i.log" | head -20
        exit 1
    fi
done
echo "all $runs runs passed under load"
