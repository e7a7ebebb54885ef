# Everyday recipes. Each is a one-liner over cargo; none is needed to build or test.

# The README's test command
test:
    bash scripts/test.sh
    cargo run -q -- db down --home target/tmp/tidemark-test

# The e2e suite `runs` times in a row with every core kept busy by a busy loop
test-under-load runs="5":
    bash scripts/under-load.sh {{runs}}

# Formatting and lints, as CI runs them
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
    RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

# Lines of Rust per crate (the design pass's before/after figures)
loc:
    for d in src crates/*/src; do printf '%-32s %6s\n' "$d" "$(find $d -name '*.rs' | xargs cat | wc -l)"; done

# Everything CI does
ci:
    bash .ci/run

# The main job
demo:
    cargo run --release -- demo

# Fuzz the message decoder for `secs` seconds (needs `cargo install cargo-fuzz`)
fuzz secs="300":
    cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run decode --sanitizer none -- -max_total_time={{secs}} -max_len=70000

# Without cargo-fuzz: the decoder's random-input properties with many cases
fuzz-props cases="2000000":
    TIDEMARK_FUZZ_CASES={{cases}} cargo test --release -p tidemark-wire --test decode

# The embedded cluster under $TIDEMARK_HOME (default ./.tidemark)
db-up:
    cargo run -q -- db up
db-down:
    cargo run -q -- db down

# Sustained intake through sockets into a shard with phases running, vs the COPY ceiling
bench-intake seconds="60":
    cargo build --release --workspace
    target/release/tidemark-bench intake --seconds {{seconds}}

# Sweeping a buffer of N transactions through every phase
bench-phases transactions="1000000":
    cargo build --release --workspace
    target/release/tidemark-bench phases --transactions {{transactions}}

# The offline learner against Vowpal Wabbit and datatable (installs them in target/peers-venv)
bench-learner:
    bash bench/learner.sh

# The differential runs (tests/e2e/shard/exact.rs) `n` times at size `scale` (1 = CI)
check-exact n="20" scale="1":
    cargo build --workspace --tests
    for i in $(seq {{n}}); do echo "run $i/{{n}}"; TIDEMARK_EXACT_SCALE={{scale}} cargo test -q --test e2e -- exact:: || exit 1; done

# Dense (2M events, 3 h) and sparse (3 days) files replayed at --speed 0 through one shard, end to end, checked exact
bench-e2e dense="2000000" days="3":
    cargo build --release --workspace
    target/release/tidemark-bench e2e --dense-events {{dense}} --sparse-days {{days}}

# Profile ingest sustained for `seconds` (Zipf persons, logged tables), reads idle and
# under half of peak ingest through tidemark-reader (primary and standby), trail ingest into an empty
# and an 8-day table, and 7-day trails over a 10M-event table
bench-profiles seconds="300":
    cargo build --release --workspace
    target/release/tidemark-bench profile-ingest --rate 55000 --seconds {{seconds}}
    target/release/tidemark-bench profile-ingest --trail --rate 55000 --seconds {{seconds}}
    target/release/tidemark-bench profile-ingest --trail --trail-fill 3000000 --rate 55000 --seconds {{seconds}}
    target/release/tidemark-bench profile-read
    target/release/tidemark-bench profile-read --standby
    target/release/tidemark-bench trail-read

# Storage on the event clock, 10 days at 20,000 events/s in 30 minutes, marks and
# 7-day trails (trail="" for marks alone)
bench-soak days="10" minutes="30" trail="--trail":
    cargo build --release --workspace
    target/release/tidemark-bench profile-soak --days {{days}} --minutes {{minutes}} {{trail}}

# Chain, tree and star link shapes (longest transaction each), linked ingest
# with trails (persons with several devices and a member login), reads under linked load
bench-links seconds="120":
    cargo build --release --workspace
    target/release/tidemark-bench link-shapes
    target/release/tidemark-bench profile-ingest --linked --trail --rate 40000 --seconds {{seconds}} --warmup 10
    target/release/tidemark-bench profile-read --linked

# Messages per second through `tidemark proxy` (its own forwarding loop);
# with old=PATH, another build's binary interleaved run by run
bench-proxy old="":
    cargo build --release --workspace
    target/release/tidemark-bench proxy {{ if old != "" { "--old-bin " + old } else { "" } }}

# The cost of CURVE keys, the dense file replayed plain and with keys
# in turn (three runs each, interleaved), end to end and checked exact
bench-curve events="2000000":
    cargo build --release --workspace
    target/release/tidemark-bench curve --events {{events}}

# The default demo's figures, and on its exported ctr rows Tidemark's learner against Vowpal Wabbit
# Connect, profile lookups and COPY over a unix socket, TCP, and TCP with TLS
# (verify-full), one cluster, one run; metrics scrape latency
bench-ops:
    cargo build --release --workspace
    target/release/tidemark-bench ops

bench-demo:
    bash bench/demo_peers.sh

# Issue 48: what cvr_long learned early costs a shard end to end (with and without, interleaved)
bench-early-cost pairs="2" dense="2000000" days="3":
    bash bench/early_cost.sh {{pairs}} {{dense}} {{days}}

# Issue 48: the as-of-bid figures, default market, criteo delays with a shift, and the same published longer, seeds 1..N
bench-early-seeds seeds="3":
    bash bench/early_seeds.sh {{seeds}}

# Issue 48: how much of an early target's gap the shard's rows allow (the oracle told each label with the first row of its member), seeds 1..N
bench-early-bound seeds="3":
    bash bench/early_bound.sh {{seeds}}

# The online learner's per-row cost in process: final, early, and pooled rows (issue 48)
bench-models members="200000" rounds="3":
    cargo run --release -q -p tidemark-ftrl --example models {{members}} {{rounds}}

# Issue 48: early weights through a shift, simulated (one logit; no build)
bench-early-transient:
    python3 bench/early_transient.py

# Issue 48: a feature whose values are all recent, under early weights, simulated (no build)
bench-early-young:
    python3 bench/early_young.py

# Issue 48: a count taken as a number against the lag of late rows, simulated (no build)
bench-early-lag:
    python3 bench/early_lag.py num && python3 bench/early_lag.py cat && python3 bench/early_lag.py num fixed

# Issue 48: an early target's rows, weighted, learned by Tidemark and by VW --ftrl with the same weights
bench-early-vw *flags:
    bash bench/early_peers.sh {{flags}}

# A screenshot of the demo's report page in headless Chromium (installs it if missing) into docs/
report-screenshot:
    bash bench/report_screenshot.sh

# Learner, intake, profile ingest with trails and e2e, old and new interleaved
# (`old` is another build's target/release, e.g. a worktree of an earlier commit)
bench-compare old:
    bash bench/compare.sh {{old}}
