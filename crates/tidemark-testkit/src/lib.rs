//! What the end-to-end tests and the benches share: a test database per
//! test on one embedded cluster, Tidemark processes of the built binary
//! started and stopped, a publisher that sees subscriptions arrive,
//! certificates, connections cut at random, a seeded RNG, waiting, scraping
//! metrics, and the differential harnesses that compare a shard's
//! observations (`exact`) and a profile process's answers (`profiles`) with
//! `tidemark-reference`.
//!
//! Dev-only: nothing in the system depends on it. Owns no behaviour under
//! test; its SQL (creating and dropping test databases, the queries tests
//! inspect with) is in its `store` module.

// `Rng::next` is the generator's step, not an iterator's.
#![allow(clippy::should_implement_trait)]

mod certs;
pub mod config;
mod cutter;
mod db;
pub mod exact;
mod procs;
pub mod profiles;
mod publisher;
mod rng;
mod store;

use std::future::Future;
use std::path::PathBuf;
use std::process::{Command, Output};

pub use certs::certificates;
pub use cutter::Cutter;
pub use db::{query_i64, query_rows, test_home, TestDb};
pub use procs::{signal, signal_group, terminate, Proc, Reaped};
pub use publisher::Publisher;
pub use rng::Rng;
pub use store::Operator;

/// A shard configuration's tail for hostile tests: event clock, short
/// windows, publishers let go after 2 s of silence, at most 8 names counted.
pub const GUARDED_CLOCK: &str = r#"
clock = "event"
lateness = "0s"
publisher_timeout = "2s"
max_publishers = 8
period = "100ms"
batch_delay = "20ms"
[windows]
impression = "10s"
click = "60s"
install_short = "120s"
install_long = "300s"
[grace]
impression = "0s"
click = "0s"
install_short = "0s"
install_long = "0s"
"#;

/// An hour in milliseconds.
pub const HOUR: i64 = 3_600_000;
/// A day in milliseconds.
pub const DAY: i64 = 24 * HOUR;

/// The `tidemark` binary beside the running test or bench executable
/// (`target/<profile>/tidemark`; tests run from `target/<profile>/deps`), or
/// `$TIDEMARK_BIN`.
pub fn bin_path() -> PathBuf {
    if let Some(p) = std::env::var_os("TIDEMARK_BIN") {
        return PathBuf::from(p);
    }
    let path = profile_dir().join("tidemark");
    assert!(
        path.exists(),
        "{} is not built: cargo builds it for the root package's tests; set TIDEMARK_BIN otherwise",
        path.display()
    );
    path
}

/// `target/<profile>`: where cargo puts the binaries of this build.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running executable");
    let dir = exe.parent().expect("a directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.parent().expect("target/<profile>").to_path_buf()
    } else {
        dir
    }
}

/// `target/tmp`: scratch space of this checkout's builds (what cargo calls
/// `CARGO_TARGET_TMPDIR`), or `$TIDEMARK_TEST_TMP`.
pub fn tmp_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("TIDEMARK_TEST_TMP") {
        return PathBuf::from(p);
    }
    let target = profile_dir()
        .parent()
        .expect("target/ above target/<profile>")
        .to_path_buf();
    target.join("tmp")
}

/// The `tidemark` binary of this build, logging warnings only.
pub fn bin() -> Command {
    let mut c = Command::new(bin_path());
    c.env("RUST_LOG", "warn");
    c
}

/// Runs the binary; panics with its output unless it exits 0.
pub fn run_ok(args: &[&str]) -> Output {
    let out = bin().args(args).output().expect("spawn tidemark");
    assert!(
        out.status.success(),
        "tidemark {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A cluster of the test's own under `tmp_dir()/<home>`, made afresh and
/// started (with its hot standby when `standby`), for tests that stop,
/// crash or promote it: doing so to the shared one would disturb others.
pub fn own_cluster(home: &str, standby: bool) -> tidemark_store::Cluster {
    let home = tmp_dir().join(home);
    let cluster = tidemark_store::Cluster::new(&home).unwrap();
    let _ = cluster.destroy();
    let h = home.to_str().unwrap();
    run_ok(&["db", "up", "--home", h]);
    if standby {
        run_ok(&["db", "up", "--standby", "--home", h]);
    }
    cluster
}

/// Runs a future to completion on a private runtime in its own thread, so
/// sync helpers work from sync tests and from inside `#[tokio::test]` alike.
pub fn block_on<F: Future + Send + 'static>(f: F) -> F::Output
where
    F::Output: Send,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    })
    .join()
    .expect("runtime thread panicked")
}

/// Polls `f` every 50 ms until it returns `Some`, for at most 30 s.
pub fn wait_for<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    use std::time::Duration;
    wait_until(what, Duration::from_secs(30), Duration::from_millis(50), f)
}

/// Polls `f` every `every` until it returns `Some`, for at most `limit`.
pub fn wait_until<T>(
    what: &str,
    limit: std::time::Duration,
    every: std::time::Duration,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(every);
    }
}

pub use tidemark_metrics::wall_ms as now_ms;

/// A local TCP address nothing listens on now (for a process to bind).
pub fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// `GET /metrics` from `addr`: the body (a process's Prometheus metrics).
pub fn scrape(addr: &str) -> String {
    try_scrape(addr).expect("a 200 from the metrics endpoint")
}

/// `scrape`, or `None` while nothing answers 200 there.
pub fn try_scrape(addr: &str) -> Option<String> {
    try_get(addr, "/metrics")
}

/// The body of `GET path` at `addr`, if it answers 200.
pub fn try_get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    (head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200")).then(|| body.to_owned())
}

/// The value of the sample line `series` (name and labels, as exposed).
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Held by tests that load the machine hard (a flood) and by tests whose
/// timing such load disturbs (a PostgreSQL crash under ingest), so the two
/// never overlap.
pub static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());
