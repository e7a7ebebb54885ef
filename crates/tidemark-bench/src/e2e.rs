//! `tidemark-bench e2e`: recorded files replayed at `--speed 0` through one
//! shard (PostgreSQL on the same box, phases running), timed from the first
//! message published to the last observation committed, and checked row by
//! row against `tidemark-reference`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tidemark_reference as reference;
use tidemark_store::Cluster;

use crate::{fresh_db, terminate};

/// Production windows (SPEC 7 defaults): the replay ticks past the longest.
const TICK_PAST: &str = "175h";
const LATENESS_MS: i64 = 5_000;

use tidemark_metrics::wall_ms as now_ms;

/// Writes the market file unless one of that name is already there.
fn market_file(
    bin: &Path,
    dir: &Path,
    name: &str,
    span: &str,
    tps: f64,
) -> anyhow::Result<PathBuf> {
    let path = dir.join(format!("{name}-{span}-{tps:.3}.jsonl"));
    if path.exists() {
        return Ok(path);
    }
    let started = Instant::now();
    let out = Command::new(bin)
        .args(["publish", "--write"])
        .arg(&path)
        .args([
            "--speed",
            "0",
            "--span",
            span,
            "--tps",
            &format!("{tps}"),
            "--seed",
            "7",
        ])
        .args(["--disorder", "2s", "--duplicate-rate", "0.02"])
        .output()?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&path);
        bail!("publish --write: {}", String::from_utf8_lossy(&out.stderr));
    }
    println!(
        "{name}: wrote {} in {:.1}s",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(path)
}

pub async fn e2e(
    bin: &Path,
    cluster: &Cluster,
    dense_events: u64,
    sparse_days: u64,
    sparse_tps: f64,
    early: bool,
) -> anyhow::Result<()> {
    let dir = PathBuf::from("target/bench-home/e2e");
    std::fs::create_dir_all(&dir)?;
    // ~1.33 events per transaction; three hours of event time.
    let dense_tps = dense_events as f64 / 1.33 / 10_800.0;
    let mut runs = vec![
        ("dense", "3h".to_owned(), dense_tps),
        ("sparse", format!("{sparse_days}d"), sparse_tps),
    ];
    if let Ok(only) = std::env::var("TIDEMARK_BENCH_ONLY") {
        runs.retain(|r| r.0 == only);
    }
    let mut results = Vec::new();
    for (name, span, tps) in runs {
        let file = market_file(bin, &dir, name, &span, tps)?;
        results.push(run(bin, cluster, &dir, (name, &file), None, early).await?);
    }
    println!();
    println!(
        "{:<8} {:>10} {:>14} {:>10} {:>14} {:>12} {:>7}",
        "file", "events", "event time", "seconds", "events/s e2e", "observations", "exact"
    );
    for r in &results {
        println!(
            "{:<8} {:>10} {:>13.1}h {:>10.1} {:>14.0} {:>12} {:>7}",
            r.name,
            r.events,
            r.event_hours,
            r.seconds,
            r.events as f64 / r.seconds,
            r.observations,
            if r.exact { "yes" } else { "NO" }
        );
    }
    if results.iter().any(|r| !r.exact) {
        bail!("observations differ from the reference");
    }
    Ok(())
}

struct Outcome {
    name: &'static str,
    events: usize,
    event_hours: f64,
    seconds: f64,
    observations: usize,
    exact: bool,
    /// The publisher's own rate, held back by the shard's intake (its
    /// socket blocks rather than drops).
    published_per_second: f64,
}

/// CURVE keys for one run: the fleet's (the shard's) and the publisher's.
struct Keys {
    fleet: PathBuf,
    publisher: PathBuf,
    publisher_public: String,
}

impl Keys {
    /// Makes (or reuses) the key pairs in `dir` with `tidemark keys new`.
    fn make(bin: &Path, dir: &Path) -> anyhow::Result<Keys> {
        let new = |name: &str| -> anyhow::Result<(PathBuf, String)> {
            let file = dir.join(name);
            if !file.exists() {
                let out = Command::new(bin)
                    .args(["keys", "new"])
                    .arg(&file)
                    .output()?;
                if !out.status.success() {
                    bail!("keys new: {}", String::from_utf8_lossy(&out.stderr));
                }
            }
            let public = std::fs::read_to_string(dir.join(format!("{name}.pub")))?;
            Ok((file, public.trim().to_owned()))
        };
        let (fleet, _) = new("fleet.key")?;
        let (publisher, publisher_public) = new("publisher.key")?;
        Ok(Keys {
            fleet,
            publisher,
            publisher_public,
        })
    }
}

/// `tidemark-bench curve`: the dense file replayed through one shard,
/// plain and with CURVE keys in turn (plain, keys, plain, keys, …), each
/// run timed end to end and checked exact; the cost of keys is the ratio
/// of the medians.
pub async fn curve(
    bin: &Path,
    cluster: &Cluster,
    events: u64,
    rounds: usize,
) -> anyhow::Result<()> {
    let dir = PathBuf::from("target/bench-home/e2e");
    std::fs::create_dir_all(&dir)?;
    let file = market_file(bin, &dir, "dense", "3h", events as f64 / 1.33 / 10_800.0)?;
    let keys = Keys::make(bin, &dir)?;
    let mut runs: [Vec<Outcome>; 2] = Default::default();
    for round in 1..=rounds {
        for (mode, k) in [("plain", None), ("keys", Some(&keys))] {
            println!("round {round}/{rounds}: {mode}");
            let r = run(bin, cluster, &dir, (mode, &file), k, false).await?;
            if !r.exact {
                bail!("{mode}: observations differ from the reference");
            }
            runs[usize::from(k.is_some())].push(r);
        }
    }
    println!();
    println!(
        "{:<6} {:>10} {:>24} {:>24}",
        "mode",
        "events",
        format!("published/s ({rounds} runs)"),
        format!("events/s e2e ({rounds} runs)")
    );
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut medians = Vec::new();
    for (mode, rs) in ["plain", "keys"].iter().zip(&runs) {
        let publ: Vec<f64> = rs.iter().map(|r| r.published_per_second).collect();
        let e2e: Vec<f64> = rs.iter().map(|r| r.events as f64 / r.seconds).collect();
        let show = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!(
            "{mode:<6} {:>10} {:>24} {:>24}",
            rs[0].events,
            show(&publ),
            show(&e2e)
        );
        medians.push((median(publ), median(e2e)));
    }
    let cost = |plain: f64, keys: f64| (1.0 - keys / plain) * 100.0;
    println!(
        "cost of keys (medians): published/s {:.1}%, events/s end to end {:.1}%",
        cost(medians[0].0, medians[1].0),
        cost(medians[0].1, medians[1].1)
    );
    Ok(())
}

async fn run(
    bin: &Path,
    cluster: &Cluster,
    dir: &Path,
    (name, file): (&'static str, &Path),
    keys: Option<&Keys>,
    early: bool,
) -> anyhow::Result<Outcome> {
    let text = std::fs::read_to_string(file)?;
    let lines: Vec<&str> = text.lines().collect();
    let url = fresh_db(cluster, &format!("bench_e2e_{name}")).await?;
    let endpoint = "tcp://127.0.0.1:57411";
    let (mut shard_config, publish_keys) = shard_config(endpoint, &url, keys);
    if early {
        // SPEC 5 v1.3: provisional, late and final rows for cvr_long.
        shard_config += "[feedback]\ncvr_long = \"early\"\n";
    }
    let mut shard = start_shard(bin, dir, name, &shard_config)?;
    std::thread::sleep(Duration::from_secs(2));
    println!("{name}: replaying {} events at --speed 0 …", lines.len());
    let warmup = Duration::from_secs(1);
    let first_ms = now_ms() + warmup.as_millis() as i64;
    let out = Command::new(bin)
        .args(["publish", "--replay"])
        .arg(file)
        .args([
            "--bind",
            endpoint,
            "--speed",
            "0",
            "--tick-past",
            TICK_PAST,
            "--warmup",
            "1s",
        ])
        .args(&publish_keys)
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        terminate(&mut shard);
        bail!("publish --replay failed");
    }
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    println!(
        "{name}: publisher {}",
        String::from_utf8_lossy(&out.stdout).trim()
    );
    let end = report["through_ms"].as_i64().context("through_ms")?;
    let c = tidemark_store::connect(&url).await?;
    if !swept_through(&c, end).await? {
        terminate(&mut shard);
        bail!("{name}: the shard never swept through the end");
    }
    let last_ms = crate::store::last_emission_ms(&c).await?;
    terminate(&mut shard);
    let seconds = (last_ms - first_ms as f64) / 1000.0;
    let (wrong, wanted, observations) = compare(&c, &shard_config, &lines, name).await?;
    let kinds = crate::store::kinds(&c).await?;
    println!("{name}: observations by kind {kinds:?}");
    let ts: Vec<i64> = lines.iter().filter_map(|l| ts_of(l)).collect();
    let span = ts.iter().max().unwrap_or(&0) - ts.iter().min().unwrap_or(&0);
    Ok(Outcome {
        name,
        events: lines.len(),
        event_hours: span as f64 / 3_600_000.0,
        seconds,
        observations,
        exact: wrong == 0 && observations == wanted,
        published_per_second: report["events_per_second"].as_f64().unwrap_or(0.0),
    })
}

/// The shard's configuration (`keys`: CURVE, the replaying publisher
/// listed), and the arguments that give the publisher its keys.
fn shard_config(endpoint: &str, url: &str, keys: Option<&Keys>) -> (String, Vec<String>) {
    let mut shard_config = format!(
        "name = \"e\"\nendpoints = [\"{endpoint}\"]\ndatabase_url = \"{url}\"\nclock = \"event\"\nlateness = \"5s\"\n"
    );
    let mut publish_keys = Vec::new();
    if let Some(k) = keys {
        shard_config += &format!(
            "[curve]\nsecret_key_file = \"{}\"\n[[curve.publishers]]\nname = \"tidemark-publish\"\npublic_key = \"{}\"\n",
            k.fleet.display(),
            k.publisher_public
        );
        let fleet_public = format!("{}.pub", k.fleet.display());
        publish_keys.extend([
            "--curve-secret-key".into(),
            k.publisher.display().to_string(),
        ]);
        publish_keys.extend(["--curve-server-key".into(), fleet_public]);
    }
    (shard_config, publish_keys)
}

/// Starts the shard `name` with `config`, logging to `dir/name.log`.
fn start_shard(bin: &Path, dir: &Path, name: &str, config: &str) -> anyhow::Result<Child> {
    let config_path = dir.join(format!("{name}.toml"));
    std::fs::write(&config_path, config)?;
    let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
    Ok(Command::new(bin)
        .args(["shard", "--config"])
        .arg(&config_path)
        .env(
            "RUST_LOG",
            std::env::var("TIDEMARK_BENCH_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?)
}

/// Waits (30 minutes at most) for the shard's clock to pass `end`, the
/// replay's last tick, less the lateness, when everything is swept; false
/// if it never did.
async fn swept_through(c: &tokio_postgres::Client, end: i64) -> anyhow::Result<bool> {
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let clock = crate::store::shard_clock(c, "e").await?;
        if clock.is_some_and(|c| c >= end - LATENESS_MS) {
            return Ok(true);
        }
        if Instant::now() > deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The shard's observations row by row against the reference's for the
/// replayed `lines`: rows that differ (or only one side has), rows wanted,
/// rows observed.
async fn compare(
    c: &tokio_postgres::Client,
    shard_config: &str,
    lines: &[&str],
    name: &str,
) -> anyhow::Result<(usize, usize, usize)> {
    let cfg = reference::Config::from_toml(shard_config).map_err(anyhow::Error::msg)?;
    let sent: Vec<reference::Sent> = lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("the market writes JSON");
            let topic = format!(
                "{}-{}",
                v["type"].as_str().unwrap_or(""),
                v["txid"].as_str().unwrap_or("")
            );
            reference::Sent {
                frames: vec![topic.into_bytes(), l.as_bytes().to_vec()],
                clock_at_least: None,
            }
        })
        .collect();
    let want = reference::expected(&cfg, &sent, now_ms() + 3_600_000);
    let got = observed(c).await?;
    let wrong = want
        .iter()
        .filter(|(k, w)| !got.get(*k).is_some_and(|g| w.admits(g)))
        .count()
        + got.keys().filter(|k| !want.contains_key(*k)).count();
    if wrong > 0 {
        println!(
            "{name}: {wrong} of {} rows differ from the reference",
            want.len()
        );
    }
    Ok((wrong, want.len(), got.len()))
}

fn ts_of(line: &str) -> Option<i64> {
    let at = line.find("\"ts\":")? + 5;
    let rest = &line[at..];
    rest[..rest.find([',', '}'])?].parse().ok()
}

async fn observed(
    c: &tokio_postgres::Client,
) -> anyhow::Result<BTreeMap<(String, String), reference::Expected>> {
    let mut out = BTreeMap::new();
    let mut provisional = std::collections::BTreeSet::new();
    for r in crate::store::observations(c).await? {
        let features: serde_json::Value = r.get(3);
        let features = features
            .as_object()
            .context("features")?
            .iter()
            .map(|(k, v)| {
                let f = match v {
                    serde_json::Value::String(s) => reference::Feature::Str(s.clone()),
                    serde_json::Value::Bool(b) => reference::Feature::Bool(*b),
                    serde_json::Value::Number(n) => {
                        reference::Feature::Num(n.as_f64().unwrap_or(f64::NAN))
                    }
                    _ => reference::Feature::Str(format!("unexpected {v}")),
                };
                (k.clone(), f)
            })
            .collect();
        let key = (r.get::<_, String>(0), r.get::<_, String>(1));
        let delay: Option<i64> = r.get(5);
        let kind = match r.get::<_, &str>(4) {
            "provisional" => {
                // Its matured row follows (rows are read in seq order).
                if !provisional.insert(key) {
                    bail!("a second provisional observation for one (target, txid)");
                }
                continue;
            }
            "late" => reference::Kind::Late,
            _ => reference::Kind::Final,
        };
        let row = reference::Expected {
            label: r.get(2),
            features,
            kind,
            provisional: provisional.remove(&key),
            delay_ms: delay.map(|d| (d, d)),
        };
        if out.insert(key, row).is_some() {
            bail!("a second observation for one (target, txid)");
        }
    }
    Ok(out)
}
