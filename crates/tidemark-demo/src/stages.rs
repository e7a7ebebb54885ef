//! The stages of a demo run, one function each, in the order [`run`] calls
//! them: the cluster and the database, the shards, the profile process, the
//! learner, the market (watched once a second), the shards' last sweeps,
//! the learner catching up, the scores, the report written and printed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use tidemark_checkpoint::Checkpoint;
use tidemark_market::{MarketConfig, PublishError, PublishOptions, PublishReport, Source};
use tidemark_shard::telemetry::{Counter, Family};
use tidemark_store::Cluster;

use crate::procs::Proc;
use crate::progress::{self, Display, Sample};
use crate::{evaluate, html, report, store};
use crate::{
    Options, Outcome, BIDDER_RATE, COUNTERS, DATABASE, EARLY_TARGET, ENDPOINT, LEARNER_SETTINGS,
    POOL, USER_CLICKS, WINDOWS, WINDOW_MS,
};

/// Runs the demo, progress on stderr, the report on stdout and in
/// `home/report/`. `exe` is the `tidemark` binary the shards, the profile
/// process and the learner run as; `stop` set (by a signal) ends the run
/// early, and the report covers what ran.
pub fn run(args: Options, exe: &Path, stop: Arc<AtomicBool>) -> anyhow::Result<Outcome> {
    let demo = Demo::up(args, exe, stop)?;
    eprintln!(
        "[2/6] starting {} shards sampling {} of transactions, a profile process and a learner …",
        demo.args.shards, demo.args.rate
    );
    std::fs::create_dir_all(&demo.dir)?;
    let mut shards = demo.start_shards()?;
    let mut profiles = demo.start_profiles()?;
    let mut learner = demo.start_learner()?;
    let publisher = demo.start_market();
    let mut watch = Watch::new(&shards, &learner.checkpoints);
    let published = demo.wait_for_market(publisher, &mut watch)?;
    let market_line = format!(
        "published {} events in {:.1}s",
        published.events,
        published.elapsed.as_secs_f64()
    );
    demo.settle(&mut watch, &market_line, &mut shards, &mut profiles)?;
    demo.catch_up(&mut watch, &market_line, &mut learner.proc)?;
    let (value, interrupted) = demo.score(&learner, &published, &watch.samples)?;
    let report_dir = demo.write_report(&value)?;
    demo.print(&published, &watch.shards, &learner.checkpoints, &value)?;
    demo.print_footer(&report_dir, interrupted);
    Ok(Outcome {
        url: demo.url,
        report: value,
        report_dir,
        checkpoints: learner.checkpoints,
    })
}

/// One run: what every stage reads.
struct Demo<'a> {
    args: Options,
    exe: &'a Path,
    stop: Arc<AtomicBool>,
    started: Instant,
    /// Wall time at the start (the market's event time ends near wall time).
    t0_ms: i64,
    rt: tokio::runtime::Runtime,
    cluster: Cluster,
    url: String,
    /// The children's configurations and logs, the checkpoints, the truth file.
    dir: PathBuf,
}

/// The learner as started: its process, its configuration (the evaluation
/// replays with the same) and where it writes checkpoints.
struct Learner {
    proc: Proc,
    config: String,
    checkpoints: PathBuf,
}

/// The run's progress: a sample of every stage each time it is asked,
/// shown and kept for the plots.
struct Watch {
    shards: Vec<String>,
    checkpoints: PathBuf,
    display: Display,
    samples: Vec<Sample>,
}

impl Watch {
    fn new(shards: &[Proc], checkpoints: &Path) -> Watch {
        Watch {
            shards: shards.iter().map(|p| p.name.clone()).collect(),
            checkpoints: checkpoints.to_owned(),
            display: Display::new(),
            samples: Vec::new(),
        }
    }

    /// Takes a sample and shows it beside `market`, the publisher's line.
    fn sample(&mut self, demo: &Demo, market: &str) {
        let t = demo.started.elapsed().as_secs_f64();
        let taken = demo
            .rt
            .block_on(sample_once(&demo.url, t, &self.shards, &self.checkpoints));
        match taken {
            Ok(s) => {
                let rate = self.samples.last().map_or(0.0, |p| {
                    (s.received - p.received) as f64 / (s.t - p.t).max(1e-3)
                });
                self.display.show(&s, rate, market);
                self.samples.push(s);
            }
            Err(e) => self
                .display
                .println(&format!("      (progress unavailable: {e:#})")),
        }
    }
}

impl<'a> Demo<'a> {
    /// [1/6] The embedded cluster, up, with the demo's database recreated
    /// and migrated.
    fn up(args: Options, exe: &'a Path, stop: Arc<AtomicBool>) -> anyhow::Result<Demo<'a>> {
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
        let dir = cluster.home().join("demo");
        Ok(Demo {
            args,
            exe,
            stop,
            started,
            t0_ms,
            rt,
            cluster,
            url,
            dir,
        })
    }

    /// The shards `tidemark plan` cuts for the demo's rate, started.
    fn start_shards(&self) -> anyhow::Result<Vec<Proc>> {
        let (dir, url) = (&self.dir, &self.url);
        let plan = tidemark_plan::plan(self.args.rate, self.args.shards)?;
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
                self.exe,
                dir,
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
        Ok(shards)
    }

    /// The profile process, with the counters the bidder reads.
    fn start_profiles(&self) -> anyhow::Result<Proc> {
        let (dir, url) = (&self.dir, &self.url);
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
        let profiles = Proc::start(
            self.exe,
            dir,
            "profiles",
            &["profiles", "--config", &path(&profile_cfg)],
        )?;
        eprintln!(
            "      profiles: counters {:?} (config {})",
            COUNTERS.map(|c| c.0),
            profile_cfg.display()
        );
        Ok(profiles)
    }

    /// The learner, on the shards' observations as they come.
    fn start_learner(&self) -> anyhow::Result<Learner> {
        let (dir, url, args) = (&self.dir, &self.url, &self.args);
        let ckpt = dir.join("checkpoints");
        let _ = std::fs::remove_dir_all(&ckpt);
        let learn_cfg = dir.join("learn.toml");
        let mut learn_text = format!(
            "checkpoint_dir = \"{}\"\ncheckpoint_interval = \"3s\"\npoll = \"200ms\"\n{LEARNER_SETTINGS}\n[[sources]]\nname = \"demo\"\ndatabase_url = \"{url}\"\n{POOL}{EARLY_TARGET}",
            ckpt.display()
        );
        // The bid's click count is a number from 0 to 10 on almost every
        // row: taken raw it steps like a second bias ten times as bold
        // (docs/demo.md, "The learner's features").
        learn_text += &format!("\n[transforms]\nuser_clicks = \"{USER_CLICKS}\"\n");
        if args.raw_counters && args.counter_transform != "none" {
            for (name, _, _) in COUNTERS {
                learn_text += &format!("{name} = \"{}\"\n", args.counter_transform);
            }
        }
        std::fs::write(&learn_cfg, &learn_text)?;
        let learner = Proc::start(
            self.exe,
            dir,
            "learner",
            &["learn", "--config", &path(&learn_cfg)],
        )?;
        eprintln!("      learner: checkpoints in {}", ckpt.display());
        Ok(Learner {
            proc: learner,
            config: learn_text,
            checkpoints: ckpt,
        })
    }

    /// Where the market writes its truth.
    fn truth_file(&self) -> PathBuf {
        self.dir.join("truth.tsv")
    }

    /// [3/6] The market, publishing in a thread of its own, its bidder
    /// reading profiles into bids and its truth recorded.
    fn start_market(&self) -> JoinHandle<Result<PublishReport, PublishError>> {
        let (args, url) = (&self.args, &self.url);
        eprintln!(
            "[3/6] publishing the market for {}s: {} transactions per event-second, event time ×{}, {} persons, install delays {}{} …",
            args.seconds,
            args.tps,
            args.speed,
            args.persons,
            args.delays,
            match self.shift() {
                Some((at, kind)) => format!(
                    ", the shift ({kind}) of a fifth of the apps at event time {at} ms"
                ),
                None => String::new(),
            }
        );
        let opts = PublishOptions {
            profiles: Some(url.clone()),
            profile_replicas: Vec::new(),
            profile_person: true,
            profile_counters: args.raw_counters,
            profile_rates: vec![tidemark_market::ProfileRate::parse(BIDDER_RATE).expect("valid")],
            max_lag: Duration::ZERO,
            truth: Some(self.truth_file()),
            metrics_addr: None,
            bind: vec![ENDPOINT.to_owned()],
            connect: Vec::new(),
            publisher: "demo-market".into(),
            speed: args.speed,
            start_ms: self.market_start_ms(),
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
            seed: args.seed,
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
            delays: args.delays,
            shift_at_ms: args.shift_at_ms,
            shift: args.shift,
            ..MarketConfig::default()
        };
        let pub_stop = self.stop.clone();
        std::thread::spawn(move || {
            tidemark_market::publish(&opts, Source::Synthetic(market), &pub_stop)
        })
    }

    /// Where the market's event time starts: it ends near wall time, so
    /// profiles read "now" afterwards.
    fn market_start_ms(&self) -> i64 {
        let span_ms = (self.args.seconds as f64 * 1000.0 * self.args.speed) as i64;
        self.t0_ms + 2000 - span_ms
    }

    /// The market's shift, if any: its event time (ms since the epoch) and kind.
    fn shift(&self) -> Option<(i64, tidemark_market::Shift)> {
        let at = self.args.shift_at_ms?;
        Some((self.market_start_ms() + at, self.args.shift))
    }

    /// Waits for the market to end, watching the pipeline once a second;
    /// a market stopped by a signal reports nothing.
    fn wait_for_market(
        &self,
        publisher: JoinHandle<Result<PublishReport, PublishError>>,
        watch: &mut Watch,
    ) -> anyhow::Result<PublishReport> {
        while !publisher.is_finished() {
            std::thread::sleep(Duration::from_secs(1));
            let p = self.started.elapsed().as_secs_f64();
            let market = format!("publishing, {p:.0}s of {}s", self.args.seconds + 2);
            watch.sample(self, &market);
        }
        let published = publisher.join().expect("publisher thread");
        let interrupted = self.stop.load(Ordering::Relaxed);
        match published {
            Ok(r) => Ok(r),
            Err(e) if interrupted => {
                watch
                    .display
                    .println(&format!("      the market stopped: {e}"));
                Ok(PublishReport::default())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// [4/6] Lets the shards sweep what the last ticks allow, then stops
    /// them and the profile process.
    fn settle(
        &self,
        watch: &mut Watch,
        market_line: &str,
        shards: &mut [Proc],
        profiles: &mut Proc,
    ) -> anyhow::Result<()> {
        watch.display.println("[4/6] letting the shards sweep what the last ticks allow, then stopping them and the profile process …");
        for _ in 0..3 {
            if !self.stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_secs(1));
                watch.sample(self, market_line);
            }
        }
        for p in shards.iter_mut().chain([profiles]) {
            p.stop()?;
        }
        Ok(())
    }

    /// [5/6] Lets the learner catch up with every observation (30 s at
    /// most), then stops it.
    fn catch_up(
        &self,
        watch: &mut Watch,
        market_line: &str,
        learner: &mut Proc,
    ) -> anyhow::Result<()> {
        watch
            .display
            .println("[5/6] letting the learner catch up, then stopping it …");
        let total: i64 = self.rt.block_on(async {
            let c = tidemark_store::connect(&self.url).await?;
            tidemark_store::observations::count(&c).await
        })?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && !self.stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_secs(1));
            watch.sample(self, market_line);
            if watch
                .samples
                .last()
                .is_some_and(|s| s.learned as i64 >= total)
            {
                break;
            }
        }
        learner.stop()?;
        watch.display.finish();
        Ok(())
    }

    /// [6/6] Scores the run against the market's truth, with and without
    /// what the bidder read from the profiles: `report.json`'s value, and
    /// whether a signal stopped the run.
    fn score(
        &self,
        learner: &Learner,
        published: &PublishReport,
        samples: &[Sample],
    ) -> anyhow::Result<(serde_json::Value, bool)> {
        let (url, t0_ms, truth_file) = (&self.url, self.t0_ms, self.truth_file());
        eprintln!("[6/6] scoring the run against the market's truth …");
        let interrupted = self.stop.load(Ordering::Relaxed);
        let online: BTreeMap<String, f64> = tidemark_checkpoint::latest(&learner.checkpoints)
            .and_then(|p| Checkpoint::read(&p, false).ok())
            .map(|c| {
                c.targets
                    .iter()
                    .filter_map(|t| Some((t.name.clone(), t.metrics["logloss"].as_f64()?)))
                    .collect()
            })
            .unwrap_or_default();
        let config = tidemark_learner::Config::from_toml(&learner.config)?;
        let rate = tidemark_market::ProfileRate::parse(BIDDER_RATE).expect("valid");
        let raw = COUNTERS.iter().filter(|_| self.args.raw_counters);
        let from_counters: Vec<String> = raw.map(|c| c.0.to_owned()).chain([rate.name]).collect();
        // What the bidder read from the profile: what came from the counters,
        // and the person.
        let features: Vec<String> = from_counters
            .iter()
            .cloned()
            .chain(["person".into()])
            .collect();
        let shift_at = self.shift().map(|s| s.0);
        let (targets, delays, bridging, as_of_bid) = self.rt.block_on(async {
            let c = tidemark_store::connect(url).await?;
            let tsv =
                std::fs::read(&truth_file).with_context(|| truth_file.display().to_string())?;
            store::load_truth(&c, tsv).await?;
            let rows = store::scored(&c).await?;
            let targets = evaluate::evaluate(&rows, &config, (&features, &from_counters), t0_ms)?;
            let delays = store::delays(&c).await?;
            let setup = crate::asof::Setup {
                config: &config,
                slice_ms: crate::SLICE_MS,
                final_offset_ms: crate::FINAL_OFFSET_MS,
                shift_at_ms: shift_at,
                oracle_at_first_row: false,
            };
            let as_of_bid = crate::asof::evaluate(&store::emitted(&c).await?, &setup)?;
            let ids = tidemark_profiles::store::identifiers(&c).await?;
            let persons = ids
                .iter()
                .map(|r| r.1)
                .collect::<std::collections::BTreeSet<_>>()
                .len();
            let q = tidemark_market::Quality::measure(ids.iter().map(|(id, p)| (id.as_str(), *p)));
            anyhow::Ok((targets, delays, (q, persons), as_of_bid))
        })?;
        let mut value = report::build(&report::Inputs {
            events: published.events,
            by_type: &published.by_type,
            seconds: self.started.elapsed().as_secs_f64(),
            interrupted,
            database: url,
            targets: &targets,
            online: &online,
            bridging: Some(bridging),
            samples,
            delays: &delays,
            windows: WINDOW_MS,
            profile_features: &features,
            delays_preset: self.args.delays,
            shift: self.shift(),
        });
        report::add_as_of_bid(&mut value, as_of_bid);
        Ok((value, interrupted))
    }

    /// `report.json` and the page drawn from it, in `home/report/`.
    fn write_report(&self, value: &serde_json::Value) -> anyhow::Result<PathBuf> {
        let report_dir = self.cluster.home().join("report");
        std::fs::create_dir_all(&report_dir)?;
        std::fs::write(
            report_dir.join("report.json"),
            serde_json::to_string_pretty(value)?,
        )?;
        std::fs::write(report_dir.join("index.html"), html::page(value))?;
        Ok(report_dir)
    }

    /// The report on stdout: what was published, each shard's counters,
    /// the observations, the scores, and a bid scored by the last checkpoint.
    fn print(
        &self,
        published: &PublishReport,
        shards: &[String],
        checkpoints: &Path,
        value: &serde_json::Value,
    ) -> anyhow::Result<()> {
        println!(
            "published     {} events in {:.1}s ({:.0}/s), event time through {}",
            published.events,
            published.elapsed.as_secs_f64(),
            published.events as f64 / published.elapsed.as_secs_f64().max(1e-9),
            published.through_ms
        );
        for (t, n) in &published.by_type {
            println!("  {t:<12} {n}");
        }
        print!("{}", self.rt.block_on(final_report(&self.url, shards))?);
        println!(
            "against the market's truth (progressive logloss; gap = share of baseline→truth closed):"
        );
        print!("{}", report::text(value));
        if let Some(c) = tidemark_checkpoint::latest(checkpoints) {
            println!("checkpoint    {}", c.display());
            let scorer = tidemark_checkpoint::Scorer::open(checkpoints)?;
            let bid = r#"{"app":"app1","campaign":"c3","country":"us","exchange":"adx","os":"android","size":"320x50","user_clicks":9,"wifi":true,"ctr_1h":-1.8,"person":"user:p7"}"#;
            let features: serde_json::Map<String, serde_json::Value> = serde_json::from_str(bid)?;
            println!(
                "scored        {bid}\n           → {}",
                scorer.score(&features).to_json()
            );
        }
        Ok(())
    }

    /// Where to look next, and how long the run took.
    fn print_footer(&self, report_dir: &Path, interrupted: bool) {
        let url = &self.url;
        println!("database      {url}");
        println!("inspect       psql \"{url}\" -c 'select * from tidemark.shard_status'");
        println!("report        {}", report_dir.join("index.html").display());
        println!(
            "elapsed       {:.1}s{}",
            self.started.elapsed().as_secs_f64(),
            if interrupted {
                " (stopped early by a signal)"
            } else {
                ""
            }
        );
    }
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
