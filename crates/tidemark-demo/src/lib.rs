//! The demo (`tidemark demo`): the whole pipeline on the embedded default,
//! and the proof that it is right. A synthetic market with a known truth
//! publishes through ZeroMQ into two shards planned by `tidemark plan` and a
//! profile process, all writing to the embedded PostgreSQL; the market's
//! bidder reads each bid's person from the profile database into the bid;
//! a learner trains on the shards' observations as they come and writes
//! checkpoints. Event time runs 60× faster than wall time and the windows
//! are minutes, so every phase is seen within a minute. The report
//! (`$TIDEMARK_HOME/report/index.html` and `report.json`) scores the learner
//! against the market's truth, with and without what the bidder read from
//! the profiles.
//!
//! Owns: the demo's orchestration (configurations, child processes,
//! progress, Ctrl-C), its evaluation and its report, and the demo-only
//! truth table its evaluation joins (`store`).

#![warn(missing_docs)]

mod evaluate;
mod html;
mod procs;
mod progress;
mod report;
mod store;
mod svg;

pub use evaluate::{deciles, logloss, Decile, TargetEval};
pub use procs::stop_children_now;
pub use report::at;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tidemark_checkpoint::Checkpoint;
use tidemark_market::{MarketConfig, PublishOptions, PublishReport, Source};
use tidemark_store::telemetry::{Counter, Family};
use tidemark_store::Cluster;

use crate::procs::Proc;
use crate::progress::{Display, Sample};

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
    /// Persons behind the transactions.
    pub persons: u32,
    /// Zipf exponent of persons' activity (0: equally active).
    pub person_skew: f64,
    /// The bidder also sends the profile counters themselves, beside the
    /// rate it derives from them ([`BIDDER_RATE`]).
    pub raw_counters: bool,
    /// With `raw_counters`: their transform in the learner's configuration
    /// (`log1p`, `none`, or any transform `[transforms]` takes).
    pub counter_transform: String,
    /// Where the embedded cluster, the configurations, logs, checkpoints
    /// and the report go.
    pub home: PathBuf,
}

/// What a run left behind.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The database it wrote.
    pub url: String,
    /// `report.json`'s value.
    pub report: serde_json::Value,
    /// The report's directory (`index.html`, `report.json`).
    pub report_dir: PathBuf,
    /// The learner's checkpoints.
    pub checkpoints: PathBuf,
}

/// The database the demo writes (recreated by each run).
pub const DATABASE: &str = "tidemark_demo";
const ENDPOINT: &str = "tcp://127.0.0.1:5599";
/// Windows (ms): impression, click, install_short, install_long.
const WINDOW_MS: [i64; 4] = [30_000, 5 * 60_000, 10 * 60_000, 30 * 60_000];
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
/// The profile process's counters: the bidder derives [`BIDDER_RATE`]
/// from the hour's clicks and impressions (with `raw_counters` it also
/// copies all three into bids, SPEC 11).
const COUNTERS: [(&str, &str, &str); 3] = [
    ("clk_1h", "click", "1h"),
    ("clk_10m", "click", "10m"),
    ("imp_1h", "impression", "1h"),
];

/// What the demo's bidder derives from the counters: the person's click
/// rate over the last hour's impressions, smoothed towards 0.1. With the
/// person a feature, the raw counts cost `ctr` (a linear model extrapolates
/// activity, which in this market says nothing of clicks); the rate helps.
pub const BIDDER_RATE: &str = "ctr_1h=clk_1h/imp_1h@0.1";

/// Runs the demo, progress on stderr, the report on stdout and in
/// `home/report/`. `exe` is the `tidemark` binary the shards, the profile
/// process and the learner run as; `stop` set (by a signal) ends the run
/// early, and the report covers what ran.
pub fn run(args: Options, exe: &Path, stop: Arc<AtomicBool>) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    let t0_ms = tidemark_market::now_ms();
    let cluster = Cluster::new(&args.home)?;
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
        "[2/6] starting {} shards sampling {} of transactions, a profile process and a learner …",
        args.shards, args.rate
    );
    let dir = cluster.home().join("demo");
    std::fs::create_dir_all(&dir)?;
    let plan = tidemark_plan::plan(args.rate, args.shards)?;
    let mut shards: Vec<Proc> = Vec::new();
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
        shards.push(Proc::start(
            exe,
            &dir,
            &name,
            &["shard", "--config", &path(&config)],
        )?);
        eprintln!(
            "      {name}: {} prefixes, share {:.4} (config {})",
            s.prefixes.len(),
            s.rate,
            config.display()
        );
    }
    let profile_cfg = dir.join("profiles.toml");
    let mut text = format!(
        "name = \"demo_profiles\"\nendpoints = [\"{ENDPOINT}\"]\ndatabase_url = \"{url}\"\nclock = \"event\"\nlateness = \"2s\"\ntrail = \"1d\"\nmax_ids = 6\nblocklist_after = 20\nbatch_delay = \"100ms\"\n"
    );
    for (name, event, half_life) in COUNTERS {
        text += &format!(
            "[[counters]]\nname = \"{name}\"\nevent = \"{event}\"\nhalf_life = \"{half_life}\"\n"
        );
    }
    std::fs::write(&profile_cfg, text)?;
    let mut profiles = Proc::start(
        exe,
        &dir,
        "profiles",
        &["profiles", "--config", &path(&profile_cfg)],
    )?;
    eprintln!(
        "      profiles: counters {:?} (config {})",
        COUNTERS.map(|c| c.0),
        profile_cfg.display()
    );
    let ckpt = dir.join("checkpoints");
    let _ = std::fs::remove_dir_all(&ckpt);
    let learn_cfg = dir.join("learn.toml");
    let mut learn_text = format!(
        "checkpoint_dir = \"{}\"\ncheckpoint_interval = \"3s\"\nbits = 20\nalpha = 0.15\npoll = \"200ms\"\ncrosses = [[\"country\", \"exchange\"]]\n\n[[sources]]\nname = \"demo\"\ndatabase_url = \"{url}\"\n",
        ckpt.display()
    );
    if args.raw_counters && args.counter_transform != "none" {
        learn_text += "\n[transforms]\n";
        for (name, _, _) in COUNTERS {
            learn_text += &format!("{name} = \"{}\"\n", args.counter_transform);
        }
    }
    std::fs::write(&learn_cfg, &learn_text)?;
    let mut learner = Proc::start(
        exe,
        &dir,
        "learner",
        &["learn", "--config", &path(&learn_cfg)],
    )?;
    eprintln!("      learner: checkpoints in {}", ckpt.display());

    eprintln!(
        "[3/6] publishing the market for {}s: {} transactions per event-second, event time ×{}, {} persons …",
        args.seconds, args.tps, args.speed, args.persons
    );
    let span_ms = (args.seconds as f64 * 1000.0 * args.speed) as i64;
    let truth_file = dir.join("truth.tsv");
    let opts = PublishOptions {
        profiles: Some(url.clone()),
        profile_replicas: Vec::new(),
        profile_person: true,
        profile_counters: args.raw_counters,
        profile_rates: vec![tidemark_market::ProfileRate::parse(BIDDER_RATE).expect("valid")],
        max_lag: Duration::ZERO,
        truth: Some(truth_file.clone()),
        metrics_addr: None,
        bind: vec![ENDPOINT.to_owned()],
        connect: Vec::new(),
        publisher: "demo-market".into(),
        speed: args.speed,
        // Event time ends near wall time, so profiles read "now" afterwards.
        start_ms: t0_ms + 2000 - span_ms,
        duration: Some(Duration::from_secs(args.seconds)),
        warmup: Duration::from_secs(2),
        span_ms: None,
        tick_past_ms: 0,
        drain: Duration::from_secs(60),
        write: None,
        sndhwm: 200_000,
        curve: None,
        follow: false,
    };
    let market = MarketConfig {
        tps: args.tps,
        click_window_ms: WINDOW_MS[1],
        install_short_ms: WINDOW_MS[2],
        install_long_ms: WINDOW_MS[3],
        persons: args.persons,
        // Skewed activity, as real persons': a few persons' counters run
        // into the hundreds.
        person_skew: args.person_skew,
        person_effect: 0.8,
        linked: true,
        ..MarketConfig::default()
    };
    let pub_stop = stop.clone();
    let publisher = std::thread::spawn(move || {
        tidemark_market::publish(&opts, Source::Synthetic(market), &pub_stop)
    });
    let names: Vec<String> = shards.iter().map(|p| p.name.clone()).collect();
    let mut display = Display::new();
    let mut samples: Vec<Sample> = Vec::new();
    let watch = |samples: &mut Vec<Sample>, display: &mut Display, market: &str| {
        let t = started.elapsed().as_secs_f64();
        match rt.block_on(sample_once(&url, t, &names, &ckpt)) {
            Ok(s) => {
                let rate = samples.last().map_or(0.0, |p| {
                    (s.received - p.received) as f64 / (s.t - p.t).max(1e-3)
                });
                display.show(&s, rate, market);
                samples.push(s);
            }
            Err(e) => display.println(&format!("      (progress unavailable: {e:#})")),
        }
    };
    while !publisher.is_finished() {
        std::thread::sleep(Duration::from_secs(1));
        let p = started.elapsed().as_secs_f64();
        watch(
            &mut samples,
            &mut display,
            &format!("publishing, {p:.0}s of {}s", args.seconds + 2),
        );
    }
    let published = publisher.join().expect("publisher thread");
    let interrupted = stop.load(Ordering::Relaxed);
    let report = match published {
        Ok(r) => r,
        Err(e) if interrupted => {
            display.println(&format!("      the market stopped: {e}"));
            PublishReport::default()
        }
        Err(e) => return Err(e.into()),
    };
    let market_line = format!(
        "published {} events in {:.1}s",
        report.events,
        report.elapsed.as_secs_f64()
    );

    display.println("[4/6] letting the shards sweep what the last ticks allow, then stopping them and the profile process …");
    for _ in 0..3 {
        if !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_secs(1));
            watch(&mut samples, &mut display, &market_line);
        }
    }
    for p in shards.iter_mut().chain([&mut profiles]) {
        p.stop()?;
    }

    display.println("[5/6] letting the learner catch up, then stopping it …");
    let total: i64 = rt.block_on(async {
        let c = tidemark_store::connect(&url).await?;
        tidemark_store::observations::count(&c).await
    })?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_secs(1));
        watch(&mut samples, &mut display, &market_line);
        if samples.last().is_some_and(|s| s.learned as i64 >= total) {
            break;
        }
    }
    learner.stop()?;
    display.finish();

    eprintln!("[6/6] scoring the run against the market's truth …");
    let interrupted = stop.load(Ordering::Relaxed);
    let online: BTreeMap<String, f64> = tidemark_checkpoint::latest(&ckpt)
        .and_then(|p| Checkpoint::read(&p, false).ok())
        .map(|c| {
            c.targets
                .iter()
                .filter_map(|t| Some((t.name.clone(), t.metrics["logloss"].as_f64()?)))
                .collect()
        })
        .unwrap_or_default();
    let config = tidemark_learner::Config::from_toml(&learn_text)?;
    let rate = tidemark_market::ProfileRate::parse(BIDDER_RATE).expect("valid");
    let raw = COUNTERS.iter().filter(|_| args.raw_counters);
    let from_counters: Vec<String> = raw.map(|c| c.0.to_owned()).chain([rate.name]).collect();
    // What the bidder read from the profile: what came from the counters,
    // and the person.
    let features: Vec<String> = from_counters
        .iter()
        .cloned()
        .chain(["person".into()])
        .collect();
    let (targets, delays, bridging) = rt.block_on(async {
        let c = tidemark_store::connect(&url).await?;
        let tsv = std::fs::read(&truth_file).with_context(|| truth_file.display().to_string())?;
        crate::store::load_truth(&c, tsv).await?;
        let rows = crate::store::scored(&c).await?;
        let targets = evaluate::evaluate(&rows, &config, (&features, &from_counters), t0_ms)?;
        let delays = crate::store::delays(&c).await?;
        let ids = tidemark_profiles::store::identifiers(&c).await?;
        let persons = ids
            .iter()
            .map(|r| r.1)
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let q = tidemark_market::Quality::measure(ids.iter().map(|(id, p)| (id.as_str(), *p)));
        anyhow::Ok((targets, delays, (q, persons)))
    })?;
    let value = report::build(&report::Inputs {
        events: report.events,
        by_type: &report.by_type,
        seconds: started.elapsed().as_secs_f64(),
        interrupted,
        database: &url,
        targets: &targets,
        online: &online,
        bridging: Some(bridging),
        samples: &samples,
        delays: &delays,
        windows: WINDOW_MS,
        profile_features: &features,
    });
    let report_dir = cluster.home().join("report");
    std::fs::create_dir_all(&report_dir)?;
    std::fs::write(
        report_dir.join("report.json"),
        serde_json::to_string_pretty(&value)?,
    )?;
    std::fs::write(report_dir.join("index.html"), html::page(&value))?;

    println!(
        "published     {} events in {:.1}s ({:.0}/s), event time through {}",
        report.events,
        report.elapsed.as_secs_f64(),
        report.events as f64 / report.elapsed.as_secs_f64().max(1e-9),
        report.through_ms
    );
    for (t, n) in &report.by_type {
        println!("  {t:<12} {n}");
    }
    print!("{}", rt.block_on(final_report(&url, &names))?);
    println!(
        "against the market's truth (progressive logloss; gap = share of baseline→truth closed):"
    );
    print!("{}", report::text(&value));
    if let Some(c) = tidemark_checkpoint::latest(&ckpt) {
        println!("checkpoint    {}", c.display());
        let scorer = tidemark_checkpoint::Scorer::open(&ckpt)?;
        let bid = r#"{"app":"app1","campaign":"c3","country":"us","exchange":"adx","os":"android","size":"320x50","user_clicks":9,"wifi":true,"ctr_1h":-1.8,"person":"user:p7"}"#;
        let features: serde_json::Map<String, serde_json::Value> = serde_json::from_str(bid)?;
        println!(
            "scored        {bid}\n           → {}",
            scorer.score(&features).to_json()
        );
    }
    println!("database      {url}");
    println!("inspect       psql \"{url}\" -c 'select * from tidemark.shard_status'");
    println!("report        {}", report_dir.join("index.html").display());
    println!(
        "elapsed       {:.1}s{}",
        started.elapsed().as_secs_f64(),
        if interrupted {
            " (stopped early by a signal)"
        } else {
            ""
        }
    );
    Ok(Outcome {
        url,
        report: value,
        report_dir,
        checkpoints: ckpt,
    })
}

/// Renders `dir/index.html` again from `dir/report.json` (a report written
/// by an earlier run, e.g. after upgrading tidemark).
pub fn render(dir: &Path) -> anyhow::Result<PathBuf> {
    let json = dir.join("report.json");
    let text = std::fs::read_to_string(&json).with_context(|| json.display().to_string())?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| json.display().to_string())?;
    let page = dir.join("index.html");
    std::fs::write(&page, html::page(&value))?;
    Ok(page)
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

async fn sample_once(url: &str, t: f64, shards: &[String], ckpt: &Path) -> anyhow::Result<Sample> {
    let c = tidemark_store::connect(url).await?;
    progress::sample(&c, t, shards, ckpt).await
}

async fn final_report(url: &str, shards: &[String]) -> anyhow::Result<String> {
    use std::fmt::Write;
    let c = tidemark_store::connect(url).await?;
    let mut out = String::new();
    for s in shards {
        let counters = tidemark_shard::store::state::counters(&c, s).await?;
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
    let rates = tidemark_store::observations::rates(&c).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bidders_rate_reads_counters_the_profile_process_keeps() {
        let r = tidemark_market::ProfileRate::parse(BIDDER_RATE).unwrap();
        for name in [&r.clicks, &r.views] {
            assert!(COUNTERS.iter().any(|c| c.0 == name), "{name}");
        }
        assert!(COUNTERS.iter().all(|c| c.0 != r.name));
    }
}
