//! `tidemark publish`: the synthetic market, or a replay of a recorded event file.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tidemark_market::{MarketConfig, PublishOptions, Source};
use tidemark_wire::parse_duration;

#[derive(clap::Args)]
pub struct Args {
    /// Endpoints to bind (shards or a proxy connect here)
    #[arg(long, default_value = "tcp://127.0.0.1:5556")]
    bind: Vec<String>,
    /// Endpoints to connect to (e.g. a proxy's frontend) instead of binding
    #[arg(long)]
    connect: Vec<String>,
    /// Replay a file of JSON event payloads, one per line, in time order
    #[arg(long)]
    replay: Option<PathBuf>,
    /// Synthetic market: transactions (bids) per second of event time
    #[arg(long, default_value_t = 1000.0)]
    tps: f64,
    /// Event time per wall time (a replay at 0 goes as fast as it can)
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Wall time to publish for, e.g. 30s (default: until the replay ends, or forever)
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Event time the synthetic market starts at, ms since the epoch (default: now)
    #[arg(long)]
    start_ms: Option<i64>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Share of bids that win an impression
    #[arg(long, default_value_t = 0.3)]
    impression_rate: f64,
    /// Share of events sent twice, like a publisher retrying
    #[arg(long, default_value_t = 0.01)]
    duplicate_rate: f64,
    /// Click window the synthetic delays are scaled to
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    click_window: Duration,
    /// Short install window the synthetic delays are scaled to
    #[arg(long, value_parser = parse_duration, default_value = "24h")]
    install_short: Duration,
    /// Custom event types the market also sends after clicks
    #[arg(long)]
    custom_types: Vec<String>,
    /// Wait after binding, so subscribers connect before the first message
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    warmup: Duration,
    /// Publisher name carried in ticks
    #[arg(long, default_value = "tidemark-publish")]
    name: String,
    /// Synthetic market: event time to generate, e.g. 3h (needed at --speed 0); the
    /// market then starts at now minus this, unless --start-ms says otherwise
    #[arg(long, value_parser = parse_duration)]
    span: Option<Duration>,
    /// Synthetic market: events go out up to this much event time late (bounded disorder)
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    disorder: Duration,
    /// Synthetic market: a duplicate's ts differs from the original's by up to this
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    duplicate_shift: Duration,
    /// After the last event, keep stepping ticks through this much event time, so shards sweep every window (e.g. 8d for the default install_long)
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    tick_past: Duration,
    /// On exit, wait at most this long for subscribers to take what is still queued
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
    drain: Duration,
    /// Write the event payloads, one JSON object per line, to FILE instead of publishing (a file --replay reads)
    #[arg(long)]
    write: Option<PathBuf>,
    /// Messages queued per subscriber before sending blocks (never drops)
    #[arg(long, default_value_t = 200_000)]
    sndhwm: i32,
    /// Synthetic market: persons behind the transactions (each with its own activity and click and install propensities; events carry `user`)
    #[arg(long, default_value_t = 10_000)]
    persons: u32,
    /// Synthetic market: persons use 1-3 devices (`user` `p<k>`, `p<k>.1`, `p<k>.2`), members log
    /// in (`ids.member`), a few events share a carrier IP or a QA test device (SPEC 11)
    #[arg(long)]
    linked: bool,
    /// Synthetic market: read each bid's person's counters from this profile database before publishing it, and add them to its features (SPEC 11)
    #[arg(long)]
    profiles: Option<String>,
    /// Synthetic market: write the true label probabilities and delays of transactions with an impression to FILE
    #[arg(long)]
    truth: Option<PathBuf>,
    /// Serve Prometheus metrics at this address (host:port): events published by type, and with --profiles the lookups' latency
    #[arg(long)]
    metrics_addr: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if !(args.tps > 0.0 && args.tps.is_finite()) {
        anyhow::bail!("--tps must be a positive number");
    }
    for (flag, v) in [
        ("--impression-rate", args.impression_rate),
        ("--duplicate-rate", args.duplicate_rate),
    ] {
        if !(0.0..=1.0).contains(&v) {
            anyhow::bail!("{flag} must be between 0 and 1");
        }
    }
    tidemark_wire::Types::new(&args.custom_types)
        .map_err(|e| anyhow::anyhow!("--custom-types: {e}"))?;
    let span_ms = args.span.map(|d| d.as_millis() as i64);
    let start_ms = args
        .start_ms
        .unwrap_or_else(|| tidemark_market::start_ending_now(span_ms, args.duration, args.speed));
    let source = match args.replay {
        Some(path) => Source::Replay(path),
        None => Source::Synthetic(MarketConfig {
            seed: args.seed,
            tps: args.tps,
            impression_rate: args.impression_rate,
            duplicate_rate: args.duplicate_rate,
            click_window_ms: args.click_window.as_millis() as i64,
            install_short_ms: args.install_short.as_millis() as i64,
            custom_types: args.custom_types,
            disorder_ms: args.disorder.as_millis() as i64,
            duplicate_shift_ms: args.duplicate_shift.as_millis() as i64,
            persons: args.persons,
            linked: args.linked,
            ..MarketConfig::default()
        }),
    };
    let opts = PublishOptions {
        bind: if args.connect.is_empty() {
            args.bind
        } else {
            Vec::new()
        },
        connect: args.connect,
        publisher: args.name,
        speed: args.speed,
        start_ms,
        duration: args.duration,
        warmup: args.warmup,
        span_ms,
        tick_past_ms: args.tick_past.as_millis() as i64,
        drain: args.drain,
        write: args.write,
        sndhwm: args.sndhwm,
        profiles: args.profiles,
        truth: args.truth,
        metrics_addr: args.metrics_addr,
    };
    let stop = Arc::new(AtomicBool::new(false));
    crate::stop_on_signal(stop.clone());
    let report = tidemark_market::publish(&opts, source, &stop)?;
    println!("{}", report.to_json());
    Ok(())
}
