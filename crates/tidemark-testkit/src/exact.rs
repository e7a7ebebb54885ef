//! The shard differential harness: market files written by
//! `tidemark publish --write`, replayed into real shards, and every
//! observation compared row by row with `tidemark-reference`.
//!
//! Disorder stays under `lateness` and grace, so every expected row is
//! determined. Sizes scale with `TIDEMARK_EXACT_SCALE` (1 = CI).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use tidemark_reference as reference;

use crate::{bin, block_on, now_ms, query_i64, run_ok, TestDb};

/// The shard configuration of the differential runs, below each run's own keys.
pub const CONFIG: &str = r#"
clock = "event"
lateness = "3s"
publisher_timeout = "1h"
period = "200ms"
batch_delay = "50ms"
[windows]
impression = "10s"
click = "60s"
install_short = "120s"
install_long = "300s"
[grace]
impression = "5s"
click = "10s"
install_short = "10s"
install_long = "10s"
"#;

/// Event time ticked past the last event: the longest window and its grace, and more.
pub const TAIL: &str = "6m";
pub const TAIL_MS: i64 = 6 * 60_000;
pub const LATENESS_MS: i64 = 3_000;

/// `TIDEMARK_EXACT_SCALE`: how many times the CI sizes.
pub fn scale() -> f64 {
    std::env::var("TIDEMARK_EXACT_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0)
}

/// A market file and its lines.
pub struct MarketFile {
    pub path: PathBuf,
    pub lines: Vec<String>,
    /// Largest `ts` in the file.
    pub end_ms: i64,
}

impl Drop for MarketFile {
    fn drop(&mut self) {
        // Kept when the test failed, to look at.
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Writes a synthetic market of `span` event time to a file, as `publish`
/// would send it (duplicates with shifted timestamps, bounded disorder).
pub fn market(label: &str, span: &str, tps: f64, extra: &[&str]) -> MarketFile {
    market_dup(label, span, tps, "0.05", extra)
}

/// [`market`] with a duplicate rate of `dup`.
pub fn market_dup(label: &str, span: &str, tps: f64, dup: &str, extra: &[&str]) -> MarketFile {
    let dir = crate::tmp_dir().join("exact");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{label}-{}.jsonl", std::process::id()));
    let tps = (tps * scale()).to_string();
    let seed = (now_ms() % 1_000_000).to_string();
    let mut args = vec![
        "publish",
        "--write",
        path.to_str().unwrap(),
        "--speed",
        "0",
        "--span",
        span,
        "--tps",
        &tps,
        "--seed",
        &seed,
        "--click-window",
        "60s",
        "--install-short",
        "120s",
        "--duplicate-rate",
        dup,
        "--duplicate-shift",
        "3s",
        "--disorder",
        "2s",
    ];
    args.extend_from_slice(extra);
    run_ok(&args);
    let lines: Vec<String> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let end_ms = lines.iter().map(|l| ts_of(l)).max().unwrap_or(0);
    eprintln!(
        "market {label}: {} events, seed {seed}, {}",
        lines.len(),
        path.display()
    );
    MarketFile {
        path,
        lines,
        end_ms,
    }
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let at = line.find(&format!("\"{key}\":")).expect("field") + key.len() + 3;
    let rest = &line[at..];
    let rest = rest.strip_prefix('"').unwrap_or(rest);
    let end = rest.find(['"', ',', '}']).unwrap();
    &rest[..end]
}

/// A line's `ts`.
pub fn ts_of(line: &str) -> i64 {
    field(line, "ts").parse().unwrap()
}

/// The frames a publisher sends for a payload line.
pub fn frames_of(line: &str) -> Vec<Vec<u8>> {
    let topic = format!("{}-{}", field(line, "type"), field(line, "txid"));
    vec![topic.into_bytes(), line.as_bytes().to_vec()]
}

/// Lines as the reference receives them.
pub fn sent_of(lines: &[String]) -> Vec<reference::Sent> {
    lines
        .iter()
        .map(|l| reference::Sent {
            frames: frames_of(l),
            clock_at_least: None,
        })
        .collect()
}

/// Shard configuration text (the shard and the reference read the same):
/// `top` holds top-level keys, `tables` more tables such as `[[targets]]`.
pub fn config_text(prefixes: &[String], top: &str, tables: &str) -> String {
    let p: Vec<String> = prefixes.iter().map(|p| format!("\"{p}\"")).collect();
    let prefixes = if p.is_empty() {
        String::new()
    } else {
        format!("prefixes = [{}]", p.join(", "))
    };
    format!("{prefixes}\n{top}\n{CONFIG}\n{tables}")
}

/// Observations by (target, txid).
pub type Rows = BTreeMap<(String, String), reference::Expected>;

/// What the reference expects of `sent` under `config`.
pub fn expected(config: &str, sent: &[reference::Sent]) -> Rows {
    let cfg = reference::Config::from_toml(config).expect("reference reads the config");
    // Far enough ahead that the market's own txids are never "future".
    reference::expected(&cfg, sent, now_ms() + 3_600_000)
}

fn feature_of(v: &serde_json::Value) -> reference::Feature {
    match v {
        serde_json::Value::String(s) => reference::Feature::Str(s.clone()),
        serde_json::Value::Bool(b) => reference::Feature::Bool(*b),
        serde_json::Value::Number(n) => reference::Feature::Num(n.as_f64().unwrap()),
        other => panic!("a feature of another kind reached the observations: {other}"),
    }
}

/// A shard's observations as the reference shapes them; panics on a second
/// row for one (target, txid) or a gap in `seq`.
pub fn observed(db: &TestDb, shard: &str) -> Rows {
    let (rows, seqs) = observed_with_seq(db, shard);
    for (i, seq) in seqs.iter().enumerate() {
        assert_eq!(*seq, i as i64 + 1, "seq has a gap or a repeat");
    }
    rows
}

/// A shard's observations as the reference shapes them, and their `seq`s in
/// order (which may jump past a recorded gap, SPEC 5); panics on a repeated
/// `seq` or a row set SPEC 5 does not allow for one (target, txid): one
/// `final`, or a `provisional` 0 followed by one `late` 1 or `final` 0 with
/// the same features.
pub fn observed_with_seq(db: &TestDb, shard: &str) -> (Rows, Vec<i64>) {
    let (url, shard) = (db.url.clone(), shard.to_owned());
    let rows = block_on(async move { crate::store::observations(&url, &shard).await });
    let mut out = Rows::new();
    let mut provisional: BTreeMap<(String, String), reference::Expected> = BTreeMap::new();
    let mut seqs = Vec::with_capacity(rows.len());
    for row in rows {
        let seq = row.seq;
        assert!(seqs.last().is_none_or(|l| *l < seq), "seq {seq} repeated");
        seqs.push(seq);
        let features = row
            .features
            .as_object()
            .expect("features are an object")
            .iter()
            .map(|(k, v)| (k.clone(), feature_of(v)))
            .collect();
        let key = (row.target, row.txid);
        let kind = match row.kind.as_str() {
            "provisional" => reference::Kind::Provisional,
            "late" => reference::Kind::Late,
            "final" => reference::Kind::Final,
            other => panic!("an observation of kind {other:?}"),
        };
        assert_eq!(
            row.delay_ms.is_some(),
            kind == reference::Kind::Late,
            "delay_ms on {key:?} ({kind:?}): {:?}",
            row.delay_ms
        );
        let mut got = reference::Expected {
            label: row.label,
            features,
            kind,
            provisional: false,
            delay_ms: row.delay_ms.map(|d| (d, d)),
        };
        assert!(
            !out.contains_key(&key),
            "a row for {key:?} after its final one"
        );
        if kind == reference::Kind::Provisional {
            assert_eq!(got.label, 0, "a provisional row labelled 1: {key:?}");
            let dup = provisional.insert(key.clone(), got);
            assert!(dup.is_none(), "a second provisional row for {key:?}");
            continue;
        }
        if let Some(p) = provisional.remove(&key) {
            assert_eq!(p.features, got.features, "provisional features of {key:?}");
            got.provisional = true;
        }
        assert!(
            kind != reference::Kind::Late || (got.provisional && got.label == 1),
            "a late row without a provisional one, or labelled 0: {key:?}"
        );
        out.insert(key, got);
    }
    // A provisional row still waiting for its matured one shows as such.
    for (key, p) in provisional {
        out.insert(key, p);
    }
    (out, seqs)
}

/// Asserts the two sets of rows are equal, showing the first differences.
pub fn assert_same(what: &str, got: &Rows, want: &Rows) {
    let mut diffs = Vec::new();
    for (k, w) in want {
        match got.get(k) {
            None => diffs.push(format!("missing {k:?}: want {w:?}")),
            Some(g) if !w.admits(g) => diffs.push(format!("differs {k:?}: got {g:?}, want {w:?}")),
            _ => {}
        }
    }
    for k in got.keys().filter(|k| !want.contains_key(*k)) {
        diffs.push(format!("unexpected {k:?}: {:?}", got[k]));
    }
    assert!(
        diffs.is_empty(),
        "{what}: {} of {} expected rows differ; first ones:\n{}",
        diffs.len(),
        want.len(),
        diffs[..diffs.len().min(15)].join("\n")
    );
    let positives = want.values().filter(|e| e.label == 1).count();
    eprintln!(
        "{what}: {} rows ({positives} positive) exactly as the reference says",
        want.len()
    );
}

/// The sum of a shard's counter `name` (0 if never counted).
pub fn counter(db: &TestDb, shard: &str, name: &str) -> i64 {
    query_i64(&db.url, &crate::store::counter_query(shard, name)).unwrap_or(0)
}

/// Waits until a shard has swept through `clock` (its saved clock is written
/// in the transaction that emits).
pub fn wait_swept(db: &TestDb, shard: &str, clock: i64, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let c = query_i64(&db.url, &crate::store::clock_query(shard));
        if c.is_some_and(|c| c >= clock) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "shard {shard} did not sweep through {clock} (clock {c:?})"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until a shard has swept past every window of a market file's events.
pub fn wait_all_swept(db: &TestDb, shard: &str, m: &MarketFile) {
    wait_swept(
        db,
        shard,
        m.end_ms + TAIL_MS - LATENESS_MS - 1_000,
        Duration::from_secs(120),
    );
}

/// A free loopback port for a publisher to bind.
pub fn free_endpoint() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("tcp://127.0.0.1:{}", l.local_addr().unwrap().port())
}

/// `tidemark publish --replay` of a file, as fast as it goes.
pub fn replay(file: &Path, endpoint: &str, speed: &str) -> Child {
    bin()
        .args([
            "publish",
            "--replay",
            file.to_str().unwrap(),
            "--bind",
            endpoint,
            "--speed",
            speed,
            "--tick-past",
            TAIL,
            "--warmup",
            "2s",
            "--name",
            "replay",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a publisher to exit; asserts it succeeded.
pub fn finish(publisher: Child) {
    let out = publisher.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "publish failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("publish: {}", String::from_utf8_lossy(&out.stdout).trim());
}

/// Ticks as SPEC 3 asks of a publisher sending a market's lines by hand:
/// the first line's `ts` − 1 at once, then, before a line, the newest `ts`
/// seen − 1 whenever 250 ms of wall time have passed or event time moved on
/// by more than a minute, in steps of at most a minute (a tick more than
/// `max_future` ahead would be refused).
pub struct Ticker {
    tick: i64,
    last: Instant,
}

impl Default for Ticker {
    fn default() -> Ticker {
        Ticker {
            tick: i64::MIN,
            last: Instant::now(),
        }
    }
}

impl Ticker {
    /// Ticks what is due before `line` is sent.
    pub fn before(&mut self, publ: &crate::Publisher, line: &str) {
        let through = ts_of(line) - 1;
        if self.tick == i64::MIN {
            self.tick = through;
            publ.tick(through);
            self.last = Instant::now();
            return;
        }
        let due = self.last.elapsed() >= Duration::from_millis(250);
        if through - self.tick > 60_000 || due {
            let before = self.tick;
            self.through(publ, through);
            if due && self.tick == before {
                // Nothing newer: the same tick again, which says the
                // publisher is alive.
                publ.tick(self.tick);
            }
            self.last = Instant::now();
        }
    }

    /// Ticks on to `to` in steps of at most a minute; returns the last tick.
    pub fn through(&mut self, publ: &crate::Publisher, to: i64) -> i64 {
        while self.tick < to {
            self.tick = (self.tick + 60_000).min(to);
            publ.tick(self.tick);
        }
        self.tick
    }

    /// The last tick sent (`i64::MIN` before the first).
    pub fn last(&self) -> i64 {
        self.tick
    }
}

/// `[feedback]` that learns `cvr_long` early (SPEC 5, v1.3).
pub const EARLY: &str = "[feedback]\ncvr_long = \"early\"";

/// A market whose installs come late inside its span (criteo delays, six
/// minutes), so early feedback has late rows to write.
pub fn early_market(label: &str) -> MarketFile {
    market(label, "6m", 80.0, &["--delays", "criteo"])
}

/// `market(label, span, tps)`, or with early feedback in `tables`, an
/// [`early_market`].
pub fn market_for(label: &str, span: &str, tps: f64, tables: &str) -> MarketFile {
    if tables.is_empty() {
        market(label, span, tps, &[])
    } else {
        early_market(label)
    }
}

/// The reference's rows for `config`; with early feedback, at least one
/// late row among them (else the run would not test what it says).
pub fn expected_with(config: &str, m: &MarketFile, tables: &str) -> Rows {
    let want = expected(config, &sent_of(&m.lines));
    if !tables.is_empty() {
        let late = want.values().filter(|e| e.kind == reference::Kind::Late);
        assert!(late.count() > 0, "no late row to check");
    }
    want
}
