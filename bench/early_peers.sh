#!/usr/bin/env bash
# `just bench-early-vw [demo flags]`: a demo run (cvr_long learned early),
# then, offline on its exported cvr_long rows of every kind, Tidemark's
# learner at its defaults (the demo's hashing, 2^20) writing the weight it
# applied to each row, and Vowpal Wabbit --ftrl learning the same rows with
# those weights and the same settings (bench/early_vw.py), given Tidemark's
# base margin as each row's base and without it: the loglosses on matured
# rows, and each one's rows per second; then Tidemark at its defaults. VW is installed in a
# throwaway virtual environment under target/.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/peers-venv
work=/tmp/tidemark-peers/early
cargo build --release -p tidemark
if ! "$venv/bin/python" -c "import vowpalwabbit" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q vowpalwabbit
fi
mkdir -p "$work"
if [ -z "${SKIP_DEMO:-}" ]; then
    target/release/tidemark demo "$@" > "$work/demo.txt"
    grep -E "^  (ctr|cvr_short|cvr_long|p_install) " "$work/demo.txt" || true
fi
target/release/tidemark export --target cvr_long --kinds all --output "$work/cvr_long.tsv"
start=$(date +%s.%N)
target/release/tidemark learn --input "$work/cvr_long.tsv" --header --bits 20 --alpha 0.1 \
    --tune-alpha 1 --tune-l2 1 --no-tune-rate \
    --weights "$work/weights.txt" --predictions "$work/preds.txt" --json > "$work/tidemark.json"
end=$(date +%s.%N)
cat "$work/tidemark.json"; echo
# VW given Tidemark's base margin as each row's base (the same model), then
# VW learning its bias from zero (its own model).
for base in --base --no-base; do
    "$venv/bin/python" bench/early_vw.py "$work/cvr_long.tsv" "$work/weights.txt" "$work/preds.txt" \
        --work "$work" --bits 20 --alpha 0.1 $base \
        --tidemark-seconds "$(echo "$end - $start" | bc)"
done
# Tidemark at its defaults (the grid of eight settings, 2^22 weights), whole process.
start=$(date +%s.%N)
target/release/tidemark learn --input "$work/cvr_long.tsv" --header --json > "$work/defaults.json"
end=$(date +%s.%N)
echo "{\"tidemark_defaults_logloss\": $(python3 -c "import json; print(json.load(open('$work/defaults.json'))['logloss'])"), \"tidemark_defaults_rows_per_second\": $(echo "($(wc -l < "$work/cvr_long.tsv") - 1) / ($end - $start)" | bc)}"
