//! Benchmarks that drive the real `tidemark` binary, real ZeroMQ sockets and
//! a real PostgreSQL cluster, and print figures (`just bench-intake`,
//! `just bench-phases`). Performance is measured here, never in tests.
//!
//! Each run uses the embedded cluster under `target/bench-home` and a fresh
//! database, and compares against a ceiling measured in the same run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod e2e;
mod links;
mod ops;
mod profiles;
mod proxy;
mod soak;
mod store;

use tidemark_testkit::terminate;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use tidemark_market::{Market, MarketConfig, Out};
use tidemark_shard::store::buffer::{EventRow, Layout};
use tidemark_shard::store::state;
use tidemark_shard::telemetry::{Counter, Family};
use tidemark_store::Cluster;

#[derive(Parser)]
#[command(about = "Tidemark benchmarks")]
struct Cli {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// Sustained intake through sockets into a shard with phases running, vs plain COPY
    Intake {
        /// Events per second the publisher offers
        #[arg(long, default_value_t = 130_000.0)]
        offered: f64,
        /// Event time per wall time (windows are scaled down so phases run)
        #[arg(long, default_value_t = 5.0)]
        speed: f64,
        /// Seconds measured, after the warm-up
        #[arg(long, default_value_t = 40)]
        seconds: u64,
        #[arg(long, default_value_t = 10)]
        warmup: u64,
    },
    /// Recorded files (dense, and sparse over days) replayed at --speed 0 through one
    /// shard, from the first message published to the last observation, checked exact
    E2e {
        /// Events in the dense file (three hours of event time)
        #[arg(long, default_value_t = 2_000_000)]
        dense_events: u64,
        /// Days of event time in the sparse file
        #[arg(long, default_value_t = 3)]
        sparse_days: u64,
        /// Transactions per second of event time in the sparse file
        #[arg(long, default_value_t = 2.0)]
        sparse_tps: f64,
        /// The shard learns cvr_long early (SPEC 5 v1.3: provisional, late and final rows)
        #[arg(long)]
        early: bool,
    },
    /// Profile ingest: Zipf persons into logged profile tables, sustained
    ProfileIngest {
        /// Events per second offered
        #[arg(long, default_value_t = 55_000.0)]
        rate: f64,
        /// Seconds measured after the warm-up
        #[arg(long, default_value_t = 300)]
        seconds: u64,
        #[arg(long, default_value_t = 20)]
        warmup: u64,
        /// Distinct persons
        #[arg(long, default_value_t = 1_000_000)]
        persons: usize,
        /// Keep trails (7 days) too
        #[arg(long)]
        trail: bool,
        /// With --trail: events already in the trail table per UTC day, for
        /// each of the 7 days before today and for today until now
        #[arg(long, default_value_t = 0)]
        trail_fill: i64,
        /// Every event links a device to a member id
        #[arg(long)]
        linked: bool,
        /// The share of events sent twice, the copy 200,000 events (seconds) later,
        /// in a later batch
        #[arg(long, default_value_t = 0.0)]
        copies: f64,
        /// The profile process's `worker_cache` (persons each worker
        /// remembers; its default when omitted)
        #[arg(long)]
        worker_cache: Option<u64>,
    },
    /// Storage soak: --days of event time in --minutes at --rate,
    /// profile tables' bytes on disk sampled as event time passes
    ProfileSoak {
        #[arg(long, default_value_t = 20_000.0)]
        rate: f64,
        #[arg(long, default_value_t = 10.0)]
        days: f64,
        #[arg(long, default_value_t = 30.0)]
        minutes: f64,
        #[arg(long, default_value_t = 1_000_000)]
        persons: usize,
        /// Keep trails (7 days) too
        #[arg(long)]
        trail: bool,
    },
    /// Link shapes: a chain and a tree of merges up to max_ids 2000,
    /// a 10,000-identifier star; time and longest transaction of each
    LinkShapes,
    /// Profile reads through tidemark-reader, idle and under ingest at --load-rate
    ProfileRead {
        #[arg(long, default_value_t = 100_000)]
        samples: usize,
        #[arg(long, default_value_t = 1_000_000)]
        persons: usize,
        #[arg(long, default_value_t = 45_000.0)]
        load_rate: f64,
        /// Ingest (before and during the reads) links devices to member ids
        #[arg(long)]
        linked: bool,
        /// Read from a hot standby of the primary that ingests (a cluster of
        /// its own under target/bench-home-standby)
        #[arg(long)]
        standby: bool,
    },
    /// Trail reads of 7 days over a trail table of --rows events
    TrailRead {
        #[arg(long, default_value_t = 10_000_000)]
        rows: i64,
        /// Events per person over the 7 days
        #[arg(long, default_value_t = 1000)]
        per_person: i64,
        #[arg(long, default_value_t = 10_000)]
        samples: usize,
    },
    /// Operations: connect, lookups and COPY over a unix socket,
    /// TCP and TCP with TLS (verify-full); metrics scrape latency
    Ops {
        /// Lookups timed per size (1 and 100 identifiers) and connection kind
        #[arg(long, default_value_t = 20_000)]
        samples: usize,
        /// Rows COPYed per connection kind (100 bytes each)
        #[arg(long, default_value_t = 2_000_000)]
        copy_rows: usize,
    },
    /// Messages per second through `tidemark proxy`, this build against --old-bin, interleaved
    Proxy {
        #[arg(long, default_value_t = 1_000_000)]
        messages: u64,
        /// Payload bytes per message
        #[arg(long, default_value_t = 300)]
        size: usize,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Another build's `tidemark` binary to compare with
        #[arg(long)]
        old_bin: Option<PathBuf>,
    },
    /// The cost of CURVE keys: the dense file replayed through one shard,
    /// plain and with keys in turn (interleaved), each run end to end and exact
    Curve {
        /// Events in the dense file (three hours of event time)
        #[arg(long, default_value_t = 2_000_000)]
        events: u64,
        /// Runs of each mode
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// Sweeping a buffer of N transactions through every phase
    Phases {
        /// Transactions buffered before the sweep
        #[arg(long, default_value_t = 1_000_000)]
        transactions: u64,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let bin = std::env::current_exe()?.with_file_name("tidemark");
    if !bin.exists() {
        bail!(
            "{} not found: build it first (cargo build --release)",
            bin.display()
        );
    }
    let home = PathBuf::from("target/bench-home");
    let cluster = Cluster::new(&home)?;
    cluster.up(None)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match cli.bench {
        Bench::Intake {
            offered,
            speed,
            seconds,
            warmup,
        } => rt.block_on(intake(&bin, &cluster, offered, speed, seconds, warmup)),
        Bench::Curve { events, rounds } => rt.block_on(e2e::curve(&bin, &cluster, events, rounds)),
        Bench::Phases { transactions } => rt.block_on(phases(&bin, &cluster, transactions)),
        Bench::Ops { samples, copy_rows } => rt.block_on(ops::run(samples, copy_rows)),
        Bench::Proxy {
            messages,
            size,
            rounds,
            old_bin,
        } => proxy::run(&bin, old_bin.as_deref(), messages, size, rounds),
        Bench::ProfileIngest {
            rate,
            seconds,
            warmup,
            persons,
            trail,
            trail_fill,
            linked,
            copies,
            worker_cache,
        } => rt
            .block_on(profiles::ingest(
                &bin,
                &cluster,
                profiles::Offer {
                    rate,
                    persons,
                    linked,
                    copies,
                },
                (seconds, warmup),
                trail.then_some(trail_fill),
                worker_cache,
            ))
            .map(drop),
        Bench::ProfileSoak {
            rate,
            days,
            minutes,
            persons,
            trail,
        } => rt.block_on(soak::run(
            &bin,
            &cluster,
            soak::Soak {
                rate,
                days,
                minutes,
                persons,
                trail,
            },
        )),
        Bench::LinkShapes => rt.block_on(links::run(&bin, &cluster)),
        Bench::ProfileRead {
            samples,
            persons,
            load_rate,
            linked,
            standby,
        } => rt.block_on(profiles::read_bench(
            &bin,
            &cluster,
            profiles::Offer {
                rate: load_rate,
                persons,
                linked,
                copies: 0.0,
            },
            samples,
            standby,
        )),
        Bench::TrailRead {
            rows,
            per_person,
            samples,
        } => rt.block_on(profiles::trail_bench(&cluster, rows, per_person, samples)),
        Bench::E2e {
            dense_events,
            sparse_days,
            sparse_tps,
            early,
        } => rt.block_on(e2e::e2e(
            &bin,
            &cluster,
            dense_events,
            sparse_days,
            sparse_tps,
            early,
        )),
    }
}

/// A fresh, migrated database.
async fn fresh_db(cluster: &Cluster, name: &str) -> anyhow::Result<String> {
    tidemark_store::recreate_database(&cluster.url_for("postgres"), name).await?;
    let url = cluster.url_for(name);
    let mut c = tidemark_store::connect(&url).await?;
    tidemark_store::migrate(&mut c).await?;
    Ok(url)
}

const WINDOWS: &str = r#"
[windows]
impression = "20s"
click = "2m"
install_short = "10m"
install_long = "30m"
[grace]
impression = "2s"
click = "5s"
install_short = "10s"
install_long = "10s"
"#;

fn spawn_shard(
    bin: &Path,
    dir: &Path,
    name: &str,
    url: &str,
    endpoint: &str,
) -> anyhow::Result<Child> {
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "name = \"{name}\"\nendpoints = [\"{endpoint}\"]\ndatabase_url = \"{url}\"\nclock = \"event\"\nlateness = \"1s\"\nperiod = \"1s\"\n{WINDOWS}"
        ),
    )?;
    let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
    Ok(Command::new(bin)
        .args(["shard", "--config"])
        .arg(&config)
        .env(
            "RUST_LOG",
            std::env::var("BENCH_SHARD_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?)
}

/// CPU seconds (user + system) and peak RSS in MB of a process.
fn proc_usage(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Fields after the command name: utime is the 12th, stime the 13th (0-based 11, 12).
    let cpu = (ticks(11) + ticks(12)) / 100.0;
    (cpu, memory_mib(pid, "VmHWM:"))
}

/// A process's resident memory now, MiB (`VmRSS`).
fn rss_mib(pid: u32) -> f64 {
    memory_mib(pid, "VmRSS:")
}

/// A `/proc/<pid>/status` memory line (`key`, in kB), MiB; 0 if absent.
fn memory_mib(pid: u32, key: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

struct Sample {
    at: Instant,
    received: i64,
    written: i64,
    dropped: i64,
    observations: i64,
    buffer_rows: i64,
    cpu: f64,
}

async fn sample(c: &tokio_postgres::Client, shard: &str, pid: u32) -> anyhow::Result<Sample> {
    let counters = state::counters(c, shard).await?;
    let rows = store::live_rows(c, &format!("shard_{shard}")).await?;
    let (cpu, _) = proc_usage(pid);
    Ok(Sample {
        at: Instant::now(),
        received: Family::Received.sum(&counters),
        written: Counter::RowsWritten.get(&counters) + Counter::Merged.get(&counters),
        dropped: Counter::DroppedOverflow.get(&counters),
        observations: Family::Observations.sum(&counters),
        buffer_rows: rows,
        cpu,
    })
}

async fn intake(
    bin: &Path,
    cluster: &Cluster,
    offered: f64,
    speed: f64,
    seconds: u64,
    warmup: u64,
) -> anyhow::Result<()> {
    let url = fresh_db(cluster, "bench_intake").await?;
    let dir = PathBuf::from("target/bench-home/run");
    std::fs::create_dir_all(&dir)?;
    let endpoint = "tcp://127.0.0.1:57311";
    let mut shard = spawn_shard(bin, &dir, "b", &url, endpoint)?;
    std::thread::sleep(Duration::from_secs(2));
    // ~1.33 events per transaction (bid, 30% impressions, a few clicks and installs, 1% duplicates).
    let tps = offered / speed / 1.33;
    let total = warmup + seconds + 3;
    let mut publisher = Command::new(bin)
        .args([
            "publish",
            "--bind",
            endpoint,
            "--speed",
            &speed.to_string(),
            "--tps",
            &format!("{tps:.0}"),
        ])
        .args([
            "--duration",
            &format!("{total}s"),
            "--click-window",
            "2m",
            "--install-short",
            "10m",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let c = tidemark_store::connect(&url).await?;
    println!("intake: offering {offered:.0} events/s (event time ×{speed}), warm-up {warmup}s, measuring {seconds}s");
    println!(
        "{:>6} {:>12} {:>12} {:>10} {:>12} {:>12}",
        "t(s)", "received/s", "written/s", "dropped", "buffer rows", "observations"
    );
    tokio::time::sleep(Duration::from_secs(warmup)).await;
    let first = sample(&c, "b", shard.id()).await?;
    let mut prev = first.received;
    let mut prev_w = first.written;
    let mut last = first.at;
    let mut peak_rows = 0;
    let mut end = None;
    for i in 1..=(seconds / 5) {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let s = sample(&c, "b", shard.id()).await?;
        let dt = s.at.duration_since(last).as_secs_f64();
        println!(
            "{:>6} {:>12.0} {:>12.0} {:>10} {:>12} {:>12}",
            warmup + i * 5,
            (s.received - prev) as f64 / dt,
            (s.written - prev_w) as f64 / dt,
            s.dropped,
            s.buffer_rows,
            s.observations
        );
        peak_rows = peak_rows.max(s.buffer_rows);
        prev = s.received;
        prev_w = s.written;
        last = s.at;
        end = Some(s);
    }
    let end = end.context("measure at least 5 seconds")?;
    let (_, rss) = proc_usage(shard.id());
    let wall = end.at.duration_since(first.at).as_secs_f64();
    let received = (end.received - first.received) as f64 / wall;
    let written = (end.written - first.written) as f64 / wall;
    let cpu = (end.cpu - first.cpu) / wall * 100.0;
    let _ = publisher.wait();
    let mut published = String::new();
    if let Some(mut out) = publisher.stdout.take() {
        use std::io::Read;
        out.read_to_string(&mut published)?;
    }
    terminate(&mut shard);

    // The ceiling: the same kind of rows written by plain binary COPY, no sockets, no routing.
    let rows = market_rows(tps, 2_000_000, i64::MAX / 4);
    let copy_u = copy_rate(&url, "ceil_unlogged", true, &rows).await?;
    let copy_l = copy_rate(&url, "ceil_logged", false, &rows).await?;
    println!();
    println!("shard received        {received:>10.0} events/s over {wall:.0}s");
    println!("shard wrote           {written:>10.0} rows/s (COPY into events + merges)");
    println!("dropped at intake     {:>10}", end.dropped);
    println!("shard CPU             {cpu:>10.0} % of one core");
    println!("shard peak RSS        {rss:>10.1} MB");
    println!("peak buffer rows      {peak_rows:>10}");
    println!("observations emitted  {:>10}", end.observations);
    println!("COPY ceiling unlogged {copy_u:>10.0} rows/s");
    println!(
        "COPY ceiling logged   {copy_l:>10.0} rows/s (unlogged/logged = {:.2})",
        copy_u / copy_l
    );
    println!("intake / COPY ceiling {:>10.2}", received / copy_u);
    println!("publisher             {}", published.trim());
    Ok(())
}

/// Events of the synthetic market, as owned rows with the bid's features
/// split out: at most `max_rows`, created at most `span_ms` after the start.
fn market_rows(tps: f64, max_rows: usize, span_ms: i64) -> Vec<(Out, String)> {
    let cfg = MarketConfig {
        tps,
        click_window_ms: 120_000,
        install_short_ms: 600_000,
        ..MarketConfig::default()
    };
    let start = 1_800_000_000_000;
    let mut m = Market::new(cfg, start);
    let mut out = Vec::new();
    let mut o = Out::default();
    let mut until = start;
    while out.len() < max_rows && until < start + span_ms {
        until += 1000;
        while out.len() < max_rows && m.next_until(until, &mut o) {
            let features = o.extra.split_once(r#""features":"#).map(|(_, f)| {
                f.rsplit_once(r#","price""#)
                    .map_or(f, |(a, _)| a)
                    .to_owned()
            });
            out.push((o.clone(), features.unwrap_or_default()));
        }
    }
    out
}

/// Rows/s of binary COPY, in batches of 20,000 like the shard, into a fresh buffer.
async fn copy_rate(
    url: &str,
    shard: &str,
    unlogged: bool,
    rows: &[(Out, String)],
) -> anyhow::Result<f64> {
    let c = tidemark_store::connect(url).await?;
    c.batch_execute("SET synchronous_commit = off").await?;
    let mut layout = Layout::new(shard, &[], 120_000, 1.0);
    layout.unlogged = unlogged;
    layout.ensure_schema(&c).await?;
    let p = 60_000;
    let first = rows
        .iter()
        .map(|r| r.0.txid.created_ms() as i64)
        .min()
        .unwrap_or(0)
        / p
        * p;
    let last = rows
        .iter()
        .map(|r| r.0.txid.created_ms() as i64)
        .max()
        .unwrap_or(0);
    let mut from = first;
    while from <= last {
        layout
            .create_partition(&c, "events", from, from + p)
            .await?;
        from += p;
    }
    let owned: Vec<(String, EventRowOwned)> = rows
        .iter()
        .enumerate()
        .map(|(i, (o, f))| {
            (
                o.txid.to_string(),
                EventRowOwned {
                    created: o.txid.created_ms() as i64,
                    type_name: o.type_name.clone(),
                    ts: o.ts,
                    arrival: i as i64,
                    features: (o.type_name == "bid").then(|| f.clone()),
                },
            )
        })
        .collect();
    let started = Instant::now();
    for batch in owned.chunks(20_000) {
        let rows: Vec<EventRow<'_>> = batch
            .iter()
            .map(|(txid, r)| EventRow {
                txid,
                created_ms: r.created,
                type_name: &r.type_name,
                ts_ms: r.ts.max(r.created),
                arrival: r.arrival,
                features: r.features.as_deref(),
                price: Some(0.5),
                user: None,
            })
            .collect();
        layout.copy_events(&c, &rows).await?;
    }
    Ok(rows.len() as f64 / started.elapsed().as_secs_f64())
}

struct EventRowOwned {
    created: i64,
    type_name: String,
    ts: i64,
    arrival: i64,
    features: Option<String>,
}

async fn phases(bin: &Path, cluster: &Cluster, transactions: u64) -> anyhow::Result<()> {
    let url = fresh_db(cluster, "bench_phases").await?;
    let dir = PathBuf::from("target/bench-home/run");
    std::fs::create_dir_all(&dir)?;
    // Fill the buffer directly: `transactions` over 1,000 s of creation time.
    let rows = market_rows(transactions as f64 / 1000.0, usize::MAX, 1_000_000);
    let events = rows.len();
    let fill = copy_rate(&url, "p", true, &rows).await?;
    let c = tidemark_store::connect(&url).await?;
    let buffered = store::buffered(&c, "p").await?;
    println!("phases: {transactions} transactions, {events} events buffered (filled at {fill:.0} rows/s)");

    let ctx = zmq::Context::new();
    let publ = ctx.socket(zmq::PUB)?;
    let endpoint = "tcp://127.0.0.1:57312";
    publ.bind(endpoint)?;
    let mut shard = spawn_shard(bin, &dir, "p", &url, endpoint)?;
    std::thread::sleep(Duration::from_secs(2));
    // One tick past every window: the shard sweeps the whole buffer, in slices.
    let target = 1_800_000_000_000 + 1_000_000 + 3_600_000;
    let started = Instant::now();
    let tick = tidemark_wire::tick_payload("bench", target + 1000, &[]);
    loop {
        publ.send_multipart([b"tick".as_slice(), tick.as_bytes()], 0)?;
        let clock = store::shard_clock(&c, "p").await?;
        if clock.is_some_and(|v| v >= target) {
            break;
        }
        if started.elapsed() > Duration::from_secs(1800) {
            bail!("sweep did not finish in 30 minutes");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    terminate(&mut shard);
    let counters = state::counters(&c, "p").await?;
    let get = |c: Counter| c.get(&counters);
    let obs = Family::Observations.sum(&counters);
    println!("swept every phase in  {secs:>10.2} s (includes up to 1 s of period and start-up)");
    println!(
        "transactions swept    {:>10} ({:.0}/s)",
        get(Counter::TransactionsSwept),
        get(Counter::TransactionsSwept) as f64 / secs
    );
    println!(
        "buffered events       {buffered:>10} ({:.0}/s)",
        buffered as f64 / secs
    );
    println!(
        "observations emitted  {obs:>10} ({:.0}/s)",
        obs as f64 / secs
    );
    for t in ["ctr", "cvr_short", "cvr_long"] {
        println!(
            "  {t:<10} {:>10} rows, {:>8} positive",
            counters
                .iter()
                .find(|(n, _)| *n == Family::Observations.name(t))
                .map_or(0, |c| c.1),
            counters
                .iter()
                .find(|(n, _)| *n == Family::Positives.name(t))
                .map_or(0, |c| c.1)
        );
    }
    println!("kept after impression {:>10}", get(Counter::KeptImpressed));
    println!("kept after click      {:>10}", get(Counter::KeptClicked));
    println!("sweeps (transactions) {:>10}", get(Counter::Sweeps));
    Ok(())
}
