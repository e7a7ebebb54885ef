#!/usr/bin/env bash
# `just bench-demo`: the demo's own figures, then, offline on its exported
# ctr rows, Tidemark's learner against Vowpal Wabbit --ftrl with the demo
# learner's parameters (α 0.15, β 1, λ1 1, λ2 1, 2^20 weights). Every column
# is categorical for both (the TSV carries no types), so the comparison is of
# the two FTRL implementations on the same rows. Peers are installed in a
# throwaway virtual environment under target/.
set -euo pipefail
cd "$(dirname "$0")/.."
shared="$(cd .. && pwd)/shared"
venv=target/peers-venv
work=/tmp/tidemark-peers/demo
cargo build --release -p tidemark
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q numpy scikit-learn vowpalwabbit datatable
fi
mkdir -p "$work"
/usr/bin/time -f "demo wall time %e s" target/release/tidemark demo > "$work/demo.txt"
grep -E "^published|^  (ctr|cvr_short|cvr_long|target) |bridging|^elapsed" "$work/demo.txt"
target/release/tidemark export --target ctr --output "$work/ctr_header.tsv"
tail -n +2 "$work/ctr_header.tsv" > "$work/ctr.tsv"
"$venv/bin/python" "$shared/bench/learner_peers.py" run --data "$work/ctr.tsv" --work "$work" \
    --peers vw_ftrl --bits 20 --alpha 0.15 --beta 1 --l1 1 --l2 1 --prefix-rows 50000 \
    --external "tidemark=$PWD/target/release/tidemark learn --input {data} --bits 20 --alpha 0.15 --predictions {preds}"
# per target, the self-tuning learner against VW at its defaults and
# over the same grid, on the exported rows with their numeric columns and the
# demo learner's hashing (2^20, the country × exchange cross, and its
# transforms if any: with `demo --raw-counters`, log1p counters).
transforms=$(sed -n '/^\[transforms\]/,$p' "${TIDEMARK_HOME:-.tidemark}/demo/learn.toml" \
    | { grep -o '^[a-z0-9_]* = "[^"]*"' || true; } | sed 's/ = "\(.*\)"/=\1/' | sed 's/^/--transform /' | tr '\n' ' ')
for t in ctr cvr_short cvr_long; do
    target/release/tidemark export --target "$t" --output "$work/$t.tsv"
    # shellcheck disable=SC2086
    "$venv/bin/python" bench/learner_tuning.py "$work/$t.tsv" "$PWD/target/release/tidemark" "$work" --header \
        --bits 20 --alpha 0.15 --cross country,exchange $transforms
done
