#!/usr/bin/env bash
# `just bench-early-cost [pairs] [dense events]`: what early feedback for
# cvr_long costs a shard end to end. `tidemark-bench e2e` on the dense file
# (three hours of event time, production windows), without and with
# `[feedback] cvr_long = "early"`, interleaved `pairs` times; every run is
# checked row by row against the reference. Prints each run's events/s.
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-2}
dense=${2:-2000000}
cargo build --release -p tidemark -p tidemark-bench
for i in $(seq "$pairs"); do
    for mode in final early; do
        flag=""
        [ "$mode" = early ] && flag="--early"
        # shellcheck disable=SC2086
        out=$(TIDEMARK_BENCH_ONLY=dense target/release/tidemark-bench e2e --dense-events "$dense" $flag 2>&1)
        rate=$(echo "$out" | awk '$1 == "dense" && NF == 7 {print $5, $7}')
        echo "pair $i $mode: events/s e2e, exact = $rate"
    done
done
