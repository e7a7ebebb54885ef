#!/usr/bin/env bash
# Issue 48's as-of-bid figures: the demo on the default market and on the
# criteo delays with a shift at 40 minutes, seeds 1..N (default 3), one
# after the other (each starts its own PostgreSQL under target/early-seeds),
# then one table per market from the reports (bench/early_table.py).
# Prints what docs/benchmarks/early.md records. About 90 s a run.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${1:-3}"
out=target/early-seeds
mkdir -p "$out"
cargo build --release -q
for market in default criteo; do
    for seed in $(seq 1 "$seeds"); do
        home="$out/$market-$seed"
        flags=(--seed "$seed")
        [ "$market" = criteo ] && flags+=(--delays criteo --shift-at 40m)
        echo "bench/early_seeds.sh: $market, seed $seed" >&2
        TIDEMARK_HOME="$home" target/release/tidemark demo "${flags[@]}" > "$out/$market-seed$seed.txt" 2>&1
        cp "$home/report/report.json" "$out/$market-seed$seed.json"
        TIDEMARK_HOME="$home" target/release/tidemark db down > /dev/null 2>&1 || true
    done
done
python3 bench/early_table.py "$out"
