//! `tidemark-bench profile-ingest`: sustained ingest of the offered rate,
//! applied events/s per interval, lag, CPU, memory and transactions.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_store::Cluster;

use super::process::{publisher, spawn_profiles, Offer};
use super::trail_table::prefill_trail;
use super::xacts::Xacts;
use crate::store::applied;
use crate::{fresh_db, proc_usage, terminate};

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
