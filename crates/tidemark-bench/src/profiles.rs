//! Issue 10's figures: profile ingest (Zipf-skewed persons into logged
//! tables, sustained), reads through `tidemark-reader` idle and under load,
//! and trail reads over a large trail table.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_market::Zipf;
use tidemark_reader::Reader;
use tidemark_store::Cluster;
use tidemark_wire::Txid;

use crate::{fresh_db, proc_usage, terminate};
use tidemark_testkit::Rng;

const COUNTERS: &str = r#"
[[counters]]
name = "imp_1h"
event = "impression"
half_life = "1h"
[[counters]]
name = "imp_7d"
event = "impression"
half_life = "7d"
[[counters]]
name = "clk_7d"
event = "click"
half_life = "7d"
[[counters]]
name = "ins_30d"
event = "install"
half_life = "30d"
"#;

/// How many events after its original a copy is sent: seconds later, so
/// the copy falls in a later batch and meets the original's first-copy mark
/// (a copy within one batch is dropped before the database).
const COPY_AFTER: u64 = 200_000;

/// Publishes impressions, clicks and installs (70/20/10) of Zipf persons at
/// `offer.rate` events/s until `stop`; counts what it sent in `sent` (copies
/// not included: each is an event already counted). With `offer.linked`
/// every event links: its `user` is one of the person's devices (`p<k>` or
/// `p<k>.<j>`) and it carries `"ids": {"member": "m<k>"}`. With `clock`
/// (start ms, speed-up) events are created and stamped on an event clock
/// running that many times faster than the wall, ticked every 50 ms.
/// With `offer.copies`, that share of the events is sent again
/// [`COPY_AFTER`] events later, as a publisher's retry would.
pub(crate) fn publisher(
    endpoint: String,
    offer: Offer,
    clock: Option<(i64, f64)>,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    let Offer {
        rate,
        persons,
        linked,
        copies,
    } = offer;
    std::thread::spawn(move || {
        let zipf = Zipf::new(persons, 1.1);
        let mut retries: std::collections::VecDeque<(u64, String, String)> = Default::default();
        let ctx = zmq::Context::new();
        let sock = ctx.socket(zmq::PUB).expect("socket");
        sock.set_sndhwm(0).expect("hwm");
        sock.bind(&endpoint).expect("bind");
        std::thread::sleep(Duration::from_millis(500));
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let start = Instant::now();
        let mut n: u64 = 0;
        let mut payload = String::new();
        let mut ticked = start;
        while !stop.load(Ordering::Relaxed) {
            let due = (start.elapsed().as_secs_f64() * rate) as u64;
            let now = match clock {
                Some((t0, speed)) => t0 + (start.elapsed().as_secs_f64() * speed * 1e3) as i64,
                None => tidemark_market::now_ms(),
            };
            if clock.is_some() && ticked.elapsed() >= Duration::from_millis(50) {
                let tick = tidemark_wire::tick_payload("bench", now, &[]);
                sock.send_multipart([b"tick".as_slice(), tick.as_bytes()], 0)
                    .expect("send");
                ticked = Instant::now();
            }
            if n >= due {
                std::thread::sleep(Duration::from_micros(500));
                continue;
            }
            for _ in 0..(due - n).min(1000) {
                let r = rng.next() % 10;
                let t = if r < 7 {
                    "impression"
                } else if r < 9 {
                    "click"
                } else {
                    "install"
                };
                let txid = Txid::new(
                    u128::from(rng.next()) << 16 | u128::from(n as u16),
                    now as u64,
                );
                let person = zipf.rank(rng.unit());
                payload.clear();
                use std::fmt::Write;
                let _ = write!(
                    payload,
                    r#"{{"type":"{t}","txid":"{}","ts":{now},"user":"p{person}"#,
                    txid.as_str()
                );
                if linked {
                    match rng.next() % u64::from(tidemark_market::persons::devices(person as u32)) {
                        0 => {}
                        j => {
                            let _ = write!(payload, ".{j}");
                        }
                    }
                    let _ = write!(payload, r#"","ids":{{"member":"m{person}"}}}}"#);
                } else {
                    payload.push_str("\"}");
                }
                let topic = format!("{t}-{}", txid.as_str());
                sock.send_multipart([topic.as_bytes(), payload.as_bytes()], 0)
                    .expect("send");
                if copies > 0.0 && rng.unit() < copies {
                    retries.push_back((n + COPY_AFTER, topic, payload.clone()));
                }
                while let Some((_, topic, payload)) = retries.front().filter(|r| r.0 <= n) {
                    sock.send_multipart([topic.as_bytes(), payload.as_bytes()], 0)
                        .expect("send");
                    retries.pop_front();
                }
                n += 1;
            }
            sent.store(n, Ordering::Relaxed);
        }
    })
}

pub(crate) fn spawn_profiles(
    bin: &Path,
    dir: &Path,
    url: &str,
    endpoint: &str,
    extra: &str,
) -> anyhow::Result<Child> {
    let config = dir.join("profiles.toml");
    std::fs::write(
        &config,
        format!("name = \"bench\"\nendpoints = [\"{endpoint}\"]\ndatabase_url = \"{url}\"\n{extra}\n{COUNTERS}"),
    )?;
    let log = std::fs::File::create(dir.join("profiles.log"))?;
    Ok(Command::new(bin)
        .args(["profiles", "--config"])
        .arg(&config)
        .env(
            "RUST_LOG",
            std::env::var("BENCH_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?)
}

pub(crate) use crate::store::applied;

/// The profile process's transactions as seen from `pg_stat_activity`,
/// sampled every 5 ms: a row lock is held no longer than the transaction
/// that took it, so the longest transaction bounds every lock. Told apart by
/// connection (`application_name`): the link stage's and the workers'.
pub struct Xacts {
    stop: Arc<AtomicBool>,
    handle: tokio::task::JoinHandle<anyhow::Result<BTreeMap<(i32, u64), Xact>>>,
}

/// One transaction seen: its connection's role, the longest age seen (ms),
/// the lock it was seen waiting on, whether it wrote (had a transaction id:
/// only then can it hold row locks), and, for the longest one's report, the
/// statement it was on when last seen and when it started.
#[derive(Default)]
struct Xact {
    role: String,
    age: f64,
    lock: Option<String>,
    wrote: bool,
    query: String,
    start: f64,
}

impl Xacts {
    /// Starts sampling the other client backends of `url`'s database.
    pub async fn watch(url: &str) -> anyhow::Result<Xacts> {
        let c = tidemark_store::connect(url).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let t0 = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs_f64();
        let handle = tokio::spawn(async move {
            let q = crate::store::transactions_statement(&c).await?;
            let mut seen: BTreeMap<(i32, u64), Xact> = BTreeMap::new();
            while !flag.load(Ordering::Relaxed) {
                for r in c.query(&q, &[]).await? {
                    let key = (r.get::<_, i32>(0), r.get::<_, i64>(1) as u64);
                    let x = seen.entry(key).or_insert_with(|| {
                        // "tidemark profiles NAME: worker 1" -> "worker"
                        let app: String = r.get(4);
                        let role = app.rsplit(": ").next().unwrap_or("");
                        let role = role.split(' ').next().unwrap_or("");
                        Xact {
                            role: if role.is_empty() { "other" } else { role }.to_string(),
                            ..Xact::default()
                        }
                    });
                    x.age = x.age.max(r.get(2));
                    x.wrote |= r.get::<_, bool>(5);
                    x.query = r.get::<_, Option<String>>(6).unwrap_or_default();
                    x.start = (key.1 as f64 / 1e6 - t0).max(0.0);
                    if let Some(lock) = r.get::<_, Option<String>>(3) {
                        x.lock = Some(lock);
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(seen)
        });
        Ok(Xacts { stop, handle })
    }

    /// Stops sampling; a line per role on the transactions seen.
    pub async fn report(self) -> anyhow::Result<String> {
        self.stop.store(true, Ordering::Relaxed);
        let seen = self.handle.await??;
        let mut by_role: BTreeMap<String, Vec<&Xact>> = BTreeMap::new();
        for x in seen.values() {
            let kind = if x.wrote { "writing" } else { "read-only" };
            by_role
                .entry(format!("{} {kind}", x.role))
                .or_default()
                .push(x);
        }
        let mut lines = Vec::new();
        for (role, xs) in by_role {
            let mut ages: Vec<f64> = xs.iter().map(|x| x.age).collect();
            ages.sort_by(f64::total_cmp);
            let q = |p: f64| ages[((ages.len() as f64 * p) as usize).min(ages.len() - 1)];
            // Which locks were waited on (`extend`: two backends growing one table).
            let mut locks: BTreeMap<&str, usize> = BTreeMap::new();
            for lock in xs.iter().filter_map(|x| x.lock.as_deref()) {
                *locks.entry(lock).or_default() += 1;
            }
            let longest = xs.iter().max_by(|a, b| a.age.total_cmp(&b.age));
            let (at, query) = longest.map_or((0.0, ""), |x| (x.start, x.query.as_str()));
            lines.push(format!(
                "{role}: {} transactions seen (sampled every 5 ms), longest {:.0} ms (began {at:.0} s in, last seen on {:?}), p99 {:.0} ms, {} over 100 ms, {} waited on a lock {locks:?}",
                ages.len(),
                q(1.0),
                query.split_whitespace().collect::<Vec<_>>().join(" "),
                q(0.99),
                ages.iter().filter(|a| **a > 100.0).count(),
                locks.values().sum::<usize>()
            ));
        }
        if lines.is_empty() {
            lines.push("no transactions seen".into());
        }
        Ok(lines.join("\n  "))
    }
}

/// CPU seconds of every PostgreSQL process of the cluster.
fn postgres_cpu() -> f64 {
    let mut total = 0.0;
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() == "postgres" {
            total += proc_usage(pid).0;
        }
    }
    total
}

/// What the benchmark publisher offers: events/s, Zipf persons, whether
/// every event links a device to a member id, and the share sent twice.
#[derive(Debug, Clone, Copy)]
pub struct Offer {
    /// Events per second.
    pub rate: f64,
    /// Distinct persons.
    pub persons: usize,
    /// Devices linked to member ids.
    pub linked: bool,
    /// The share of events sent again later (copies).
    pub copies: f64,
}

/// Sustained ingest: publishes `offer` for `seconds` (after `warmup`),
/// prints applied events/s per interval, lag and CPU. `trail`: keep trails,
/// the table already holding that many events per day ([`prefill_trail`]).
pub async fn ingest(
    bin: &Path,
    cluster: &Cluster,
    offer: Offer,
    (seconds, warmup): (u64, u64),
    trail: Option<i64>,
    worker_cache: Option<u64>,
) -> anyhow::Result<String> {
    let Offer {
        rate,
        persons,
        linked,
        copies,
    } = offer;
    let url = fresh_db(cluster, "bench_profiles").await?;
    if let Some(per_day) = trail.filter(|n| *n > 0) {
        prefill_trail(&url, per_day, persons as i64).await?;
    }
    let trail = trail.is_some();
    let dir = PathBuf::from("target/bench-home/profiles");
    std::fs::create_dir_all(&dir)?;
    let endpoint = "tcp://127.0.0.1:57411".to_string();
    let mut extra = String::from("clock = \"wall\"\n");
    if trail {
        extra.push_str("trail = \"7d\"\n");
    }
    if let Some(n) = worker_cache {
        extra.push_str(&format!("worker_cache = {n}\n"));
    }
    let metrics = "127.0.0.1:57413";
    extra.push_str(&format!("metrics_addr = \"{metrics}\"\n"));
    let mut child = spawn_profiles(bin, &dir, &url, &endpoint, &extra)?;
    let c = tidemark_store::connect(&url).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let publisher = publisher(endpoint, offer, None, stop.clone(), sent.clone());
    println!(
        "profile ingest: offered {rate:.0} events/s, {persons} persons (Zipf s=1.1), {}, {:.0}% sent twice, trail {}, warm-up {warmup}s, measured {seconds}s",
        if linked {
            "every event links a device (1-3 per person) to a member id"
        } else {
            "one identifier per event"
        },
        copies * 100.0,
        if trail { "7d" } else { "off" }
    );
    tokio::time::sleep(Duration::from_secs(warmup)).await;
    let xacts = Xacts::watch(&url).await?;
    let (a0, t0, cpu0, pg0) = (
        applied(&c).await?,
        Instant::now(),
        proc_usage(child.id()).0,
        postgres_cpu(),
    );
    let mut last = (a0, t0);
    let mut worst: f64 = f64::MAX;
    while t0.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let a = applied(&c).await?;
        let now = Instant::now();
        let r = (a - last.0) as f64 / now.duration_since(last.1).as_secs_f64();
        worst = worst.min(r);
        let lag = sent.load(Ordering::Relaxed) as i64 - a;
        println!(
            "  t={:>4.0}s  applied {r:>8.0}/s  lag {lag:>8} events",
            t0.elapsed().as_secs_f64()
        );
        last = (a, now);
    }
    let (a1, el) = (applied(&c).await?, t0.elapsed().as_secs_f64());
    let ((cpu1, peak), pg1) = (proc_usage(child.id()), postgres_cpu());
    let rss = crate::rss_mib(child.id());
    let remembered = remembered(metrics).unwrap_or(-1.0);
    let xacts = xacts.report().await?;
    stop.store(true, Ordering::Relaxed);
    let _ = publisher.join();
    let total = sent.load(Ordering::Relaxed) as i64;
    let caught = Instant::now();
    while applied(&c).await? < total && caught.elapsed() < Duration::from_secs(120) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let final_applied = applied(&c).await?;
    terminate(&mut child);
    let sustained = (a1 - a0) as f64 / el;
    let size = crate::store::profile_sizes(&c).await?;
    let summary = format!(
        "sustained {sustained:.0} events/s over {el:.0}s (worst 10s interval {worst:.0}/s); published {total}, applied {final_applied} ({} missing after catch-up {:.1}s); \
         CPU over the measured window: profile process {:.0}%, PostgreSQL {:.0}% (of one core); \
         profile process RSS at the window's end {rss:.0} MiB (peak {peak:.0} MiB), workers remembering {remembered:.0} persons; {} persons of {} identifiers ({} merges), profile row {:.0} bytes avg, profiles table {:.0} MB\n  {xacts}",
        total - final_applied,
        caught.elapsed().as_secs_f64(),
        100.0 * (cpu1 - cpu0) / el,
        100.0 * (pg1 - pg0) / el,
        size.1,
        size.3,
        size.4,
        size.0,
        size.2 as f64 / 1e6
    );
    println!("{summary}");
    Ok(url)
}

/// The profile process's (named `bench`) `worker_cache_persons`, from its
/// metrics.
fn remembered(addr: &str) -> Option<f64> {
    let text = tidemark_testkit::try_scrape(addr)?;
    tidemark_testkit::metric(
        &text,
        "tidemark_profiles_worker_cache_persons{profiles=\"bench\"}",
    )
}

/// A trail table already holding 7 days (a run from an empty
/// table never reaches a real one's size): `per_day` events in each of the
/// 7 UTC days before today and in today's until now, so ingest writes into a
/// partition, and an index, already that large.
async fn prefill_trail(url: &str, per_day: i64, persons: i64) -> anyhow::Result<()> {
    let mut c = tidemark_store::connect(url).await?;
    let now = tidemark_market::now_ms();
    let today = now / DAY * DAY;
    crate::store::trail_types(&c).await?;
    let t = Instant::now();
    for d in 0..=7 {
        let start = today - (7 - d) * DAY;
        let span = if start == today {
            (now - today).max(1)
        } else {
            DAY
        };
        fill_day(&c, (start, span), d * per_day, per_day, persons).await?;
        println!(
            "  trail prefill: day {} of 8, {per_day} events, {:.0}s",
            d + 1,
            t.elapsed().as_secs_f64()
        );
    }
    crate::store::vacuum_trail(&c).await?;
    println!(
        "trail table prefilled: {} events, {:.0} MB, in {:.0}s",
        8 * per_day,
        crate::store::trail_bytes(&c).await? as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    // The 7 days before today, packed as the process packs them an hour
    // after each ends.
    pack_days(&mut c, (1..=7).map(|d| today - d * DAY)).await?;
    let t = Instant::now();
    crate::store::checkpoint(&c).await?;
    println!(
        "trail table packed: {:.0} MB (checkpointed in {:.1}s)",
        crate::store::trail_bytes(&c).await? as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

const DAY: i64 = 86_400_000;

/// Makes the trail partition of the day at `start` and fills it with `rows`
/// events numbered from `first` ([`crate::store::fill_trail`]) over `span`
/// ms, a million per statement.
async fn fill_day(
    c: &tokio_postgres::Client,
    (start, span): (i64, i64),
    first: i64,
    rows: i64,
    persons: i64,
) -> anyhow::Result<()> {
    tidemark_profiles::store::create_partition(
        c,
        tidemark_profiles::store::Daily::Trail,
        tidemark_profiles::days::Part::Span(start, start + DAY),
    )
    .await?;
    let mut done = 0;
    while done < rows {
        let n = 1_000_000.min(rows - done);
        let from = first + done;
        crate::store::fill_trail(c, (start, span), from, from + n - 1, persons).await?;
        done += n;
    }
    Ok(())
}

/// Packs the trail days starting at `days` (`tidemark_profiles::store::pack_trail`),
/// printing the events packed per second.
async fn pack_days(
    c: &mut tokio_postgres::Client,
    days: impl Iterator<Item = i64>,
) -> anyhow::Result<()> {
    let t = Instant::now();
    let mut events = 0;
    for start in days {
        let part = tidemark_profiles::days::Part::Span(start, start + DAY);
        events += tidemark_profiles::store::pack_trail(c, part)
            .await?
            .unwrap_or(0);
        tidemark_profiles::store::tidy_trail(c, part).await?;
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "trail days packed: {events} events in {secs:.1}s ({:.0} events/s, VACUUM and REINDEX included)",
        events as f64 / secs
    );
    Ok(())
}

fn percentiles(mut v: Vec<f64>) -> String {
    if v.is_empty() {
        return "no samples".into();
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)];
    format!(
        "p50 {:.3} ms  p95 {:.3} ms  p99 {:.3} ms  p999 {:.3} ms  (n={})",
        q(0.50),
        q(0.95),
        q(0.99),
        q(0.999),
        v.len()
    )
}

/// Reads of 1 and 100 identifiers (Zipf persons, some unknown) through the
/// reader crate, one at a time on one connection.
pub async fn reads(url: &str, samples: usize, persons: usize, label: &str) -> anyhow::Result<()> {
    let reader = Reader::new(url, 1)?;
    let zipf = Zipf::new(persons, 1.1);
    let mut rng = Rng(42);
    let at = tidemark_market::now_ms();
    for batch in [1usize, 100] {
        let mut lat = Vec::with_capacity(samples);
        // Warm the pool and the statement cache.
        reader.get(&["user:p1"], at).await?;
        for _ in 0..samples {
            let ids: Vec<String> = (0..batch)
                .map(|_| format!("user:p{}", zipf.rank(rng.unit())))
                .collect();
            let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            let t = Instant::now();
            let got = reader.get(&refs, at).await?;
            lat.push(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(got.len(), batch);
        }
        println!("  reads {label}, batch {batch:>3}: {}", percentiles(lat));
    }
    Ok(())
}

/// Reads idle after an ingest, then again while ingest runs at the
/// offered rate; from a hot standby of the ingesting primary with
/// `standby`, the lag it reported sampled meanwhile.
pub async fn read_bench(
    bin: &Path,
    cluster: &Cluster,
    offer: Offer,
    samples: usize,
    standby: bool,
) -> anyhow::Result<()> {
    // A standby switches its primary to `wal_level = replica` for good:
    // a home of its own, so the other benchmarks keep theirs.
    let own = if standby {
        let c = Cluster::new(&PathBuf::from("target/bench-home-standby"))?;
        c.up(None)?;
        c.start_standby()?;
        Some(c)
    } else {
        None
    };
    let cluster = own.as_ref().unwrap_or(cluster);
    let url = ingest(bin, cluster, offer, (30, 5), None, None).await?;
    let read_url = match &own {
        Some(c) => c.standby().url_for("bench_profiles"),
        None => url.clone(),
    };
    let on = if standby { ", on the standby" } else { "" };
    if standby {
        let p = tidemark_store::connect(&url).await?;
        let s = tidemark_store::connect(&read_url).await?;
        let t = Instant::now();
        while applied(&s).await? < applied(&p).await? {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        println!(
            "standby caught up {:.1}s after ingest stopped",
            t.elapsed().as_secs_f64()
        );
    }
    println!("profile reads through tidemark-reader ({samples} samples each{on}):");
    reads(&read_url, samples, offer.persons, &format!("idle{on}")).await?;
    let dir = PathBuf::from("target/bench-home/profiles");
    let endpoint = "tcp://127.0.0.1:57412".to_string();
    let mut child = spawn_profiles(bin, &dir, &url, &endpoint, "clock = \"wall\"")?;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let publisher = publisher(endpoint, offer, None, stop.clone(), sent.clone());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let lags = standby.then(|| lag_sampler(read_url.clone(), stop.clone()));
    reads(
        &read_url,
        samples,
        offer.persons,
        &format!("under {:.0} events/s ingest{on}", offer.rate),
    )
    .await?;
    stop.store(true, Ordering::Relaxed);
    // Printed first: the publisher's socket delivers its whole queue before
    // its thread ends, and a clean stop of the process applies the backlog
    // it accepted, minutes after a run that offered more than it applied.
    if let Some(lags) = lags {
        let lags = lags.await??;
        println!(
            "  standby lag while reading (replica_lag_ms every 100 ms): {}",
            percentiles(lags)
        );
    }
    let _ = publisher.join();
    terminate(&mut child);
    Ok(())
}

/// Samples a standby's `replica_lag_ms` every 100 ms until `stop`.
fn lag_sampler(
    url: String,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<anyhow::Result<Vec<f64>>> {
    tokio::spawn(async move {
        let c = tidemark_store::connect(&url).await?;
        let mut lags = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            lags.extend(crate::store::replica_lag(&c).await?.map(|l| l as f64));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(lags)
    })
}

/// A trail table of `rows` events over 7 days, persons with at most ~1,000
/// events in range; times `tidemark_reader::Reader::trail` of 7 days with
/// one row per event, then as chunks of 3 events (sql/V0015), then again
/// once the days are packed (sql/V0014).
pub async fn trail_bench(
    cluster: &Cluster,
    rows: i64,
    per_person: i64,
    samples: usize,
) -> anyhow::Result<()> {
    let url = fresh_db(cluster, "bench_trail").await?;
    let mut c = tidemark_store::connect(&url).await?;
    let day0 = (tidemark_market::now_ms() / DAY - 7) * DAY;
    let persons = (rows / per_person).max(1);
    let t = Instant::now();
    crate::store::trail_types(&c).await?;
    tidemark_profiles::store::create_partition(
        &c,
        tidemark_profiles::store::Daily::Trail,
        tidemark_profiles::days::Part::Span(day0 + 7 * DAY, day0 + 8 * DAY),
    )
    .await?;
    // Each person gets `per_person` events spread over 7 days.
    for d in 0..7 {
        let (first, last) = (rows * d / 7, rows * (d + 1) / 7);
        fill_day(&c, (day0 + d * DAY, DAY), first, last - first, persons).await?;
    }
    crate::store::vacuum_trail(&c).await?;
    let size = crate::store::trail_bytes(&c).await?;
    println!(
        "trail table: {rows} events, {persons} persons (~{} each over 7 days), {:.0} MB ({:.1} bytes/event), loaded in {:.0}s",
        rows / persons,
        size as f64 / 1e6,
        size as f64 / rows as f64,
        t.elapsed().as_secs_f64()
    );
    let reader = Reader::new(&url, 1)?;
    let read = |label: &'static str| {
        let reader = reader.clone();
        async move {
            let mut rng = Rng(7);
            let mut lat = Vec::with_capacity(samples);
            let mut events = 0;
            for _ in 0..samples {
                let id = format!("user:p{}", rng.next() % persons as u64);
                let t = Instant::now();
                let got = reader.trail(&id, day0, day0 + 8 * DAY, None).await?;
                lat.push(t.elapsed().as_secs_f64() * 1e3);
                events += got.len();
            }
            println!(
                "  trail of one person, 7 days (avg {} events), {label}: {}",
                events / samples,
                percentiles(lat)
            );
            anyhow::Ok(())
        }
    };
    read("one row per event").await?;
    // As workers write them (sql/V0015): 3 events of one identifier a chunk,
    // about what the ingest benchmark's transactions hold (3.4).
    let t = Instant::now();
    let mut chunks = 0;
    for d in 0..7 {
        chunks += crate::store::chunk_day(&c, day0 + d * DAY, 3).await?;
    }
    // The emptied rows' index would count against the chunks.
    c.batch_execute("REINDEX TABLE tidemark.profile_trail")
        .await?;
    crate::store::vacuum_trail(&c).await?;
    let size = crate::store::trail_bytes(&c).await?;
    println!(
        "chunks: {chunks} in {:.0}s, {:.0} MB ({:.1} bytes/event)",
        t.elapsed().as_secs_f64(),
        size as f64 / 1e6,
        size as f64 / rows as f64
    );
    read("chunks of 3 events").await?;
    pack_days(&mut c, (0..7).map(|d| day0 + d * DAY)).await?;
    c.batch_execute("ANALYZE tidemark.profile_trail_packed")
        .await?;
    let size = crate::store::trail_bytes(&c).await?;
    println!(
        "packed: {:.0} MB ({:.1} bytes/event)",
        size as f64 / 1e6,
        size as f64 / rows as f64
    );
    read("packed days").await?;
    Ok(())
}
