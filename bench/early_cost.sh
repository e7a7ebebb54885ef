#!/usr/bin/env bash
# `just bench-early-cost [pairs] [dense events] [sparse days]`: what early
# feedback for cvr_long costs a shard end to end. `tidemark-bench e2e` on the
# dense file (three hours of event time: no install reaches the long window,
# so it measures provisional rows and empty looks) and the sparse one (days
# of event time: late rows too), without and with `[feedback] cvr_long =
# "early"`, interleaved `pairs` times; every run is checked row by row
# against the reference. Prints each run's events/s and its rows by kind.
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-2}
dense=${2:-2000000}
days=${3:-3}
cargo build --release -p tidemark -p tidemark-bench
for i in $(seq "$pairs"); do
    for mode in final early; do
        flag=""
        [ "$mode" = early ] && flag="--early"
        # shellcheck disable=SC2086
        out=$(target/release/tidemark-bench e2e --dense-events "$dense" --sparse-days "$days" $flag 2>&1)
        echo "$out" | awk -v p="$i" -v m="$mode" '($1 == "dense" || $1 == "sparse") && NF == 7 {print "pair " p " " m " " $1 ": " $5 " events/s e2e, exact " $7}'
        echo "$out" | grep "observations by kind" | sed "s/^/pair $i $mode /"
    done
done
