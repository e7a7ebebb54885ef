//! `tidemark-bench profile-read`: reads through `tidemark-reader`, idle
//! after an ingest and under ingest, from the primary or a hot standby.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_market::Zipf;
use tidemark_reader::Reader;
use tidemark_store::Cluster;
use tidemark_testkit::Rng;

use super::ingest::ingest;
use super::process::{publisher, spawn_profiles, Offer};
use crate::store::applied;
use crate::terminate;

/// Latency percentiles (ms) of a benchmark's reads.
pub(super) fn percentiles(mut v: Vec<f64>) -> String {
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
async fn reads(url: &str, samples: usize, persons: usize, label: &str) -> anyhow::Result<()> {
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
