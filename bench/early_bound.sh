#!/usr/bin/env bash
# Issue 48: how much of the constant→oracle gap of an early target the
# shard's rows allow, told at once (not a strict bound: docs/demo.md). For
# seeds 1..N (default 3) of the default market and of criteo delays shifted
# at 40 minutes, runs the demo, then replays its rows as of bid time twice
# (`asof_variants`, the demo's learner as built): with the oracle learning
# each label at its bid, and with the first row its shard wrote of the
# member (an early target's at its window's opening, any other's with its
# final row; `TIDEMARK_VARIANTS_ORACLE_AT_FIRST_ROW`). Prints `cvr_long`'s and
# `p_install`'s KL per arm and `early`'s share of each gap, and after the
# criteo runs' shift each arm's mean KL and `early`'s share of the
# naive→oracle gap. About 2 minutes a run. Each run's cluster is deleted
# after its replays.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${1:-3}"
out=target/early-bound
mkdir -p "$out"
cargo build --release -q -p tidemark
for market in default criteo; do
    for seed in $(seq 1 "$seeds"); do
        home="$out/$market-$seed"
        flags=(--seed "$seed")
        [ "$market" = criteo ] && flags+=(--delays criteo --shift-at 40m)
        echo "bench/early_bound.sh: $market, seed $seed" >&2
        TIDEMARK_HOME="$home" target/release/tidemark demo "${flags[@]}" > "$out/$market-$seed.txt" 2>&1 ||
            { echo "bench/early_bound.sh: the demo failed; see $out/$market-$seed.txt" >&2; exit 1; }
        url="$(grep -m1 -o 'postgresql://[^ ]*' "$out/$market-$seed.txt")"
        shift_ms="$(python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['shift']; print(s['at_ms'] if s else '')" "$home/report/report.json")"
        for oracle in bid "first row"; do
            first_row=()
            [ "$oracle" = "first row" ] && first_row=(TIDEMARK_VARIANTS_ORACLE_AT_FIRST_ROW=1)
            echo "== $market seed $seed, oracle at $oracle"
            env "${first_row[@]}" TIDEMARK_VARIANTS_URL="$url" TIDEMARK_VARIANTS=demo \
                TIDEMARK_VARIANTS_SHIFT_MS="$shift_ms" \
                cargo test -q --release -p tidemark-demo --lib asof_variants -- --ignored --nocapture 2>&1 |
                grep -E '^  (cvr_long|p_install|after) '
        done
        bash bench/demo_down.sh "$home"
    done
done
