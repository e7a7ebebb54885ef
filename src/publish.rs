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
    let start_ms = args.start_ms.unwrap_or_else(now_ms);
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
            ..MarketConfig::default()
        }),
    };
    let bind = if args.connect.is_empty() {
        args.bind
    } else {
        Vec::new()
    };
    let opts = PublishOptions {
        bind,
        connect: args.connect,
        publisher: args.name,
        speed: args.speed,
        start_ms,
        duration: args.duration,
        warmup: args.warmup,
    };
    let stop = Arc::new(AtomicBool::new(false));
    crate::stop_on_signal(stop.clone());
    let report = tidemark_market::publish(&opts, source, &stop).map_err(anyhow::Error::msg)?;
    let secs = report.elapsed.as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "events": report.events,
            "ticks": report.ticks,
            "seconds": secs,
            "events_per_second": report.events as f64 / secs.max(1e-9),
            "through_ms": report.through_ms,
            "by_type": report.by_type.iter().map(|(k, v)| (k.clone(), (*v).into()))
                .collect::<serde_json::Map<String, serde_json::Value>>(),
        })
    );
    Ok(())
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
