#!/usr/bin/env bash
# `just bench-learner`: Tidemark's offline learner against Vowpal Wabbit and
# datatable on learner_peers.py's reproducible 1M-row file, then with the 8
# true feature crosses against VW given the same crosses. Peers are installed
# in a throwaway virtual environment under target/.
set -euo pipefail
cd "$(dirname "$0")/.."
shared="$(cd .. && pwd)/shared"
venv=target/peers-venv
data=/tmp/tidemark-peers/data/synth_1m.tsv
work=/tmp/tidemark-peers/work
cargo build --release -p tidemark
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q numpy scikit-learn vowpalwabbit datatable
fi
[ -f "$data" ] || "$venv/bin/python" "$shared/bench/learner_peers.py" gen --rows 1000000 --data "$data"
"$venv/bin/python" "$shared/bench/learner_peers.py" run --data "$data" --work "$work" \
    --peers "${PEERS:-vw_ftrl,dt_ftrl}" \
    --external "tidemark=$PWD/target/release/tidemark learn --input {data} --predictions {preds}"
"$venv/bin/python" bench/learner_crosses.py "$data" "$PWD/target/release/tidemark" "$work"
# the self-tuning learner at its defaults against VW at its
# defaults, at SPEC 8's settings, and at each setting of the same grid.
"$venv/bin/python" bench/learner_tuning.py "$data" "$PWD/target/release/tidemark" "$work"
