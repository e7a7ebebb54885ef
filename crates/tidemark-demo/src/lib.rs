//! The demo (`tidemark demo`): the whole pipeline on the embedded default. A synthetic
//! market publishes through ZeroMQ into two shards planned by `tidemark plan`,
//! each with its buffer in the embedded PostgreSQL; a learner trains on their
//! observations as they come and writes checkpoints. Event time runs 60×
//! faster than wall time and the windows are minutes, so every phase is seen
//! within a minute. Ends with a report read back from the database and the
//! last checkpoint, and a few bids scored with it.
//!
//! Owns: the demo's orchestration (configurations, child processes of the
//! `tidemark` binary for shards and learner, the publisher, progress and the
//! report). Its SQL is `tidemark-store`'s.

#![warn(missing_docs)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tidemark_checkpoint::Checkpoint;
use tidemark_market::{MarketConfig, PublishOptions, Source};
use tidemark_store::telemetry::{Counter, Family};
use tidemark_store::Cluster;

/// The shape of a demo run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Share of all transactions the shards sample.
    pub rate: f64,
    /// Number of shards.
    pub shards: u64,
    /// Wall seconds the market publishes for.
    pub seconds: u64,
    /// Transactions per second of event time.
    pub tps: f64,
    /// Event time per wall time.
    pub speed: f64,
}

const DATABASE: &str = "tidemark_demo";
const ENDPOINT: &str = "tcp://127.0.0.1:5599";
const WINDOWS: &str = r#"clock = "event"
lateness = "2s"
period = "500ms"
[windows]
impression = "30s"
click = "5m"
install_short = "10m"
install_long = "30m"
[grace]
impression = "10s"
click = "30s"
install_short = "1m"
install_long = "1m"
"#;

/// Runs the demo, printing progress on stderr and the report on stdout.
/// `exe` is the `tidemark` binary the shards and the learner run as; `stop`
/// set (by a signal) ends publishing early.
pub fn run(args: Options, exe: &Path, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    let started = Instant::now();
    let cluster = Cluster::new(&Cluster::default_home())?;
    eprintln!(
        "[1/6] embedded PostgreSQL under {} …",
        cluster.home().display()
    );
    let url = cluster.url_for(DATABASE);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        tidemark_store::up(&cluster, None).await?;
        tidemark_store::recreate_database(&cluster.url_for("postgres"), DATABASE).await?;
        let mut c = tidemark_store::connect(&url).await?;
        tidemark_store::migrate(&mut c).await?;
        anyhow::Ok(())
    })?;
    eprintln!("      {url}");

    eprintln!(
        "[2/6] planning {} shards sampling {} of transactions …",
        args.shards, args.rate
    );
    let plan = tidemark_plan::plan(args.rate, args.shards)?;
    let dir = cluster.home().join("demo");
    std::fs::create_dir_all(&dir)?;
    let mut shards: Vec<(String, Child)> = Vec::new();
    for s in &plan.shards {
        let name = format!("demo{}", &s.name[1..]);
        let prefixes: Vec<String> = s.prefixes.iter().map(|p| format!("{p:?}")).collect();
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(
            &config,
            format!(
                "name = \"{name}\"\nendpoints = [\"{ENDPOINT}\"]\nprefixes = [{}]\ndatabase_url = \"{url}\"\n{WINDOWS}",
                prefixes.join(", ")
            ),
        )?;
        let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
        let child = Command::new(exe)
            .args(["shard", "--config"])
            .arg(&config)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting a shard")?;
        eprintln!(
            "      {name}: {} prefixes, share {:.4} (config {})",
            s.prefixes.len(),
            s.rate,
            config.display()
        );
        shards.push((name, child));
    }

    let ckpt = dir.join("checkpoints");
    let _ = std::fs::remove_dir_all(&ckpt);
    let learn_cfg = dir.join("learn.toml");
    std::fs::write(
        &learn_cfg,
        format!(
            "checkpoint_dir = \"{}\"\ncheckpoint_interval = \"3s\"\nbits = 20\npoll = \"200ms\"\ncrosses = [[\"app\", \"os\"]]\n\n[[sources]]\nname = \"demo\"\ndatabase_url = \"{url}\"\n",
            ckpt.display()
        ),
    )?;
    let mut learner = Command::new(exe)
        .args(["learn", "--config"])
        .arg(&learn_cfg)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("learn.log"))?)
        .spawn()
        .context("starting the learner")?;
    eprintln!("      learner: checkpoints in {}", ckpt.display());
    eprintln!(
        "[3/6] publishing the synthetic market for {}s: {} transactions per event-second, event time ×{} …",
        args.seconds, args.tps, args.speed
    );
    let opts = PublishOptions {
        profiles: None,
        bind: vec![ENDPOINT.to_owned()],
        connect: Vec::new(),
        publisher: "demo-market".into(),
        speed: args.speed,
        start_ms: tidemark_market::now_ms(),
        duration: Some(Duration::from_secs(args.seconds)),
        warmup: Duration::from_secs(2),
        span_ms: None,
        tick_past_ms: 0,
        drain: Duration::from_secs(60),
        write: None,
        sndhwm: 200_000,
    };
    let market = MarketConfig {
        tps: args.tps,
        click_window_ms: 5 * 60_000,
        install_short_ms: 10 * 60_000,
        ..MarketConfig::default()
    };
    let publisher = std::thread::spawn(move || {
        tidemark_market::publish(&opts, Source::Synthetic(market), &stop)
    });
    let names: Vec<String> = shards.iter().map(|(n, _)| n.clone()).collect();
    while !publisher.is_finished() {
        std::thread::sleep(Duration::from_secs(5));
        let line = rt
            .block_on(progress(&url, &names))
            .unwrap_or_else(|e| format!("(progress unavailable: {e})"));
        eprintln!("      {:>4.0}s {line}", started.elapsed().as_secs_f64());
    }
    let report = publisher.join().expect("publisher thread")?;

    eprintln!("[4/6] letting the shards sweep what the last ticks allow, then stopping them …");
    std::thread::sleep(Duration::from_secs(3));
    for (name, child) in &mut shards {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let status = child.wait()?;
        if !status.success() {
            anyhow::bail!(
                "shard {name} exited with {status}; see {}",
                dir.join(format!("{name}.log")).display()
            );
        }
    }

    eprintln!("[5/6] letting the learner catch up, then stopping it …");
    let total: i64 = rt.block_on(async {
        let c = tidemark_store::connect(&url).await?;
        tidemark_store::observations::count(&c).await
    })?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let learned = tidemark_checkpoint::latest(&ckpt)
            .and_then(|p| Checkpoint::read(&p, false).ok())
            .map_or(0, |c| c.targets.iter().map(|t| t.trained).sum::<u64>());
        if learned as i64 >= total {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &learner.id().to_string()])
        .status();
    if !learner.wait()?.success() {
        anyhow::bail!(
            "the learner failed; see {}",
            dir.join("learn.log").display()
        );
    }

    eprintln!("[6/6] report");
    let text = rt.block_on(final_report(&url, &names))?;
    println!(
        "published     {} events in {:.1}s ({:.0}/s), event time through {}",
        report.events,
        report.elapsed.as_secs_f64(),
        report.events as f64 / report.elapsed.as_secs_f64(),
        report.through_ms
    );
    for (t, n) in &report.by_type {
        println!("  {t:<12} {n}");
    }
    print!("{text}");
    println!("database      {url}");
    println!("inspect       psql \"{url}\" -c 'select * from tidemark.shard_status'");
    println!("elapsed       {:.1}s", started.elapsed().as_secs_f64());
    let latest = tidemark_checkpoint::latest(&ckpt).context("the learner wrote no checkpoint")?;
    let c = Checkpoint::read(&latest, false)?;
    println!(
        "checkpoint    {} ({} observations learned)",
        latest.display(),
        c.targets.iter().map(|t| t.trained).sum::<u64>()
    );
    println!(
        "  {:<10} {:>9} {:>9} {:>9} {:>7} {:>11}",
        "target", "learned", "weights", "logloss", "auc", "calibration"
    );
    for t in &c.targets {
        let m = &t.metrics;
        println!(
            "  {:<10} {:>9} {:>9} {:>9.5} {:>7.4} {:>11.3}",
            t.name,
            t.trained,
            t.weights.len(),
            m["logloss"].as_f64().unwrap_or(f64::NAN),
            m["auc"].as_f64().unwrap_or(f64::NAN),
            m["calibration"].as_f64().unwrap_or(f64::NAN)
        );
    }
    let scorer = tidemark_checkpoint::Scorer::open(&ckpt)?;
    println!(
        "scored        (tidemark score --checkpoint {})",
        ckpt.display()
    );
    for bid in [
        r#"{"app":"app1","campaign":"c3","country":"us","exchange":"adx","os":"android","size":"320x50","user_clicks":9,"wifi":true}"#,
        r#"{"app":"app1500","campaign":"c40","country":"jp","exchange":"mopub","os":"other","size":"728x90","user_clicks":0,"wifi":false}"#,
    ] {
        let features: serde_json::Map<String, serde_json::Value> = serde_json::from_str(bid)?;
        println!("  {bid}\n    → {}", scorer.score(&features).to_json());
    }
    Ok(())
}

async fn progress(url: &str, shards: &[String]) -> anyhow::Result<String> {
    let c = tidemark_store::connect(url).await?;
    let mut parts = Vec::new();
    for s in shards {
        let counters = tidemark_store::state::counters(&c, s).await?;
        parts.push(format!(
            "{s}: {} received, {} observations",
            Family::Received.sum(&counters),
            Family::Observations.sum(&counters)
        ));
    }
    Ok(parts.join(" | "))
}

async fn final_report(url: &str, shards: &[String]) -> anyhow::Result<String> {
    use std::fmt::Write;
    let c = tidemark_store::connect(url).await?;
    let mut out = String::new();
    for s in shards {
        let counters = tidemark_store::state::counters(&c, s).await?;
        writeln!(
            out,
            "shard {s:<7} received {:>8}  lost on the wire {:>3}  rejected {:>3}  late {:>5}  duplicates {:>5}  orphans {:>4}  kept after impression {:>7}  after click {:>6}",
            Family::Received.sum(&counters),
            Counter::LostEstimate.get(&counters),
            Family::Rejected.sum(&counters),
            Family::Late.sum(&counters),
            Counter::Duplicates.get(&counters),
            Counter::Orphans.get(&counters),
            Counter::KeptImpressed.get(&counters),
            Counter::KeptClicked.get(&counters)
        )?;
    }
    let rates = tidemark_store::state::observation_rates(&c).await?;
    writeln!(
        out,
        "observations  {:<10} {:>9} {:>10}",
        "target", "rows", "label rate"
    )?;
    let mut rate = std::collections::HashMap::new();
    for (target, n, r) in &rates {
        writeln!(out, "              {target:<10} {n:>9} {r:>10.5}")?;
        rate.insert(target.clone(), *r);
    }
    if let (Some(ctr), Some(s), Some(l)) =
        (rate.get("ctr"), rate.get("cvr_short"), rate.get("cvr_long"))
    {
        writeln!(
            out,
            "p(install | impression) = ctr × (cvr_short + cvr_long) = {:.5}",
            ctr * (s + l)
        )?;
    }
    Ok(out)
}
