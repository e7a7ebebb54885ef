#!/usr/bin/env bash
# `just bench-compare OLD`: figures that must stay within noise of a change,
# old and new interleaved in one sitting (old, new, old, new): the offline
# learner on learner_peers.py's 1M-row file, intake, profile ingest with
# trails, and end to end at --speed 0. OLD is another build's
# target/release (e.g. a `git worktree` of an earlier commit, built with
# `cargo build --release --workspace`).
set -euo pipefail
cd "$(dirname "$0")/.."
old="${1:?usage: bench/compare.sh OLD_TARGET_RELEASE_DIR}"
new="$PWD/target/release"
shared="$(cd .. && pwd)/shared"
venv=target/peers-venv
data=/tmp/tidemark-peers/data/synth_1m.tsv
cargo build --release --workspace
if [ ! -f "$data" ]; then
    [ -x "$venv/bin/python" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q numpy scikit-learn; }
    "$venv/bin/python" "$shared/bench/learner_peers.py" gen --rows 1000000 --data "$data"
fi
run() { # label, command (with $B the build's directory)
    for round in 1 2; do
        for who in old new; do
            if [ "$who" = old ]; then B="$old"; else B="$new"; fi
            echo "=== $1 $who round $round"
            eval "$2"
        done
    done
}
run learner '"$B/tidemark" learn --input "$data" | grep -E "rows/s|logloss"'
run intake '"$B/tidemark-bench" intake --seconds 30 | grep -E "received|wrote|dropped|CPU|RSS|ceiling"'
run profile-ingest '"$B/tidemark-bench" profile-ingest --trail --rate 55000 --seconds 60 | grep -E "^sustained"'
run e2e '"$B/tidemark-bench" e2e --dense-events 500000 --sparse-days 1 | tail -3'
