//! Issue 24's storage soak: days of event time published at a steady
//! wall-clock rate on the event clock, the profile tables' bytes on disk
//! (indexes included) sampled as event time passes, so that first-copy
//! marks (each type kept to its own `dedup`) and trails are seen to level
//! off once their horizons are reached instead of growing with the run.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_store::Cluster;

use crate::fresh_db;
use crate::profiles::{applied, publisher, spawn_profiles};

const DAY_MS: f64 = 86_400_000.0;

/// What the soak offers.
pub struct Soak {
    /// Events per second of wall time.
    pub rate: f64,
    /// Days of event time.
    pub days: f64,
    /// Minutes of wall time they take.
    pub minutes: f64,
    /// Distinct persons (Zipf s = 1.1).
    pub persons: usize,
    /// Keep trails (`trail = "7d"`).
    pub trail: bool,
}

/// Runs the soak, printing one line per sample and a summary.
pub async fn run(bin: &std::path::Path, cluster: &Cluster, soak: Soak) -> anyhow::Result<()> {
    let url = fresh_db(cluster, "bench_soak").await?;
    let dir = PathBuf::from("target/bench-home/soak");
    std::fs::create_dir_all(&dir)?;
    let endpoint = "tcp://127.0.0.1:57413".to_string();
    let trail = if soak.trail { "trail = \"7d\"\n" } else { "" };
    let extra = format!("clock = \"event\"\nlateness = \"0s\"\n{trail}");
    let mut child = spawn_profiles(bin, &dir, &url, &endpoint, &extra)?;
    let c = tidemark_store::connect(&url).await?;
    let speed = soak.days * DAY_MS / (soak.minutes * 60_000.0);
    let t0 = tidemark_market::now_ms();
    let (stop, sent) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let offer = crate::profiles::Offer {
        rate: soak.rate,
        persons: soak.persons,
        linked: false,
        copies: 0.0,
    };
    let publisher = publisher(
        endpoint,
        offer,
        Some((t0, speed)),
        stop.clone(),
        sent.clone(),
    );
    println!(
        "profile storage soak: {:.0} events/s for {:.0} min, {} days of event time ({speed:.0}x), \
         {} persons, dedup impression 1h / click 3h / install 8d, trail {}",
        soak.rate,
        soak.minutes,
        soak.days,
        soak.persons,
        if soak.trail { "7d" } else { "off" }
    );
    println!("event day | applied | lag | marks MB | marks (est.) | bytes/mark | mark partitions | trail MB | profiles+ids MB");
    let start = Instant::now();
    let every = Duration::from_secs_f64(soak.minutes * 60.0 / (soak.days * 4.0).max(1.0));
    let mut rows = Vec::new();
    while start.elapsed().as_secs_f64() < soak.minutes * 60.0 {
        tokio::time::sleep(every).await;
        if child.try_wait()?.is_some() {
            anyhow::bail!(
                "the profile process exited (see {}/profiles.log)",
                dir.display()
            );
        }
        let day = start.elapsed().as_secs_f64() * speed * 1e3 / DAY_MS;
        let done = applied(&c).await?;
        let lag = sent.load(Ordering::Relaxed) as i64 - done;
        let (marks, rows_est, parts, trail, profiles) = crate::store::soak_sizes(&c).await?;
        let per = if rows_est > 0 {
            marks as f64 / rows_est as f64
        } else {
            0.0
        };
        let mb = |b: i64| b as f64 / 1e6;
        println!(
            "{day:9.2} | {done:>9} | {lag:>7} | {:8.1} | {rows_est:>12} | {per:10.1} | {parts:>15} | {:8.1} | {:15.1}",
            mb(marks),
            mb(trail),
            mb(profiles)
        );
        rows.push((day, marks, trail));
    }
    stop.store(true, Ordering::Relaxed);
    publisher.join().expect("publisher");
    crate::terminate(&mut child);
    let (n, bytes) = crate::store::marks_on_disk(&c).await?;
    println!(
        "at the end: {n} marks in {:.1} MB, {:.1} bytes per mark on disk with its index",
        bytes as f64 / 1e6,
        bytes as f64 / n.max(1) as f64
    );
    // Flat: the largest size over the last day against the one before it.
    let last = rows.last().map_or(0.0, |r| r.0);
    let peak = |from: f64, to: f64, f: fn(&(f64, i64, i64)) -> i64| {
        rows.iter()
            .filter(|r| r.0 > from && r.0 <= to)
            .map(f)
            .max()
            .unwrap_or(0)
    };
    println!(
        "marks: largest over the last day {:.1} MB, over the day before {:.1} MB; trail: {:.1} MB, {:.1} MB",
        peak(last - 1.0, last, |r| r.1) as f64 / 1e6,
        peak(last - 2.0, last - 1.0, |r| r.1) as f64 / 1e6,
        peak(last - 1.0, last, |r| r.2) as f64 / 1e6,
        peak(last - 2.0, last - 1.0, |r| r.2) as f64 / 1e6,
    );
    Ok(())
}
