//! `tidemark publish`: the synthetic market, or a replay of a recorded event file.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tidemark_intake::curve::Client;
use tidemark_market::{PublishOptions, Source};
use tidemark_wire::parse_duration;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    market: crate::market::MarketArgs,
    /// Endpoints to bind (shards or a proxy connect here)
    #[arg(long, default_value = "tcp://127.0.0.1:5556")]
    bind: Vec<String>,
    /// Endpoints to connect to (e.g. a proxy's frontend) instead of binding
    #[arg(long)]
    connect: Vec<String>,
    /// Replay a file of JSON event payloads, one per line, in time order
    #[arg(long)]
    replay: Option<PathBuf>,
    /// With --replay: go on reading past the end (a pipe such as `kcat … |
    /// tidemark publish --replay /dev/stdin --follow`, or a growing file),
    /// ticking while idle, until stopped
    #[arg(long, requires = "replay")]
    follow: bool,
    /// Event time per wall time (a replay at 0 goes as fast as it can)
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Wall time to publish for, e.g. 30s (default: until the replay ends, or forever)
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Event time the synthetic market starts at, ms since the epoch (default: now)
    #[arg(long)]
    start_ms: Option<i64>,
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
    /// Synthetic market: read each bid's person's profile from this database before publishing it, and add its counters to the bid's features (SPEC 11; see --no-profile-counters)
    #[arg(long)]
    profiles: Option<String>,
    /// With --profiles: also add the person's master identifier to each bid's features as `person` (a categorical feature)
    #[arg(long, requires = "profiles")]
    profile_person: bool,
    /// With --profiles: add NAME = logit((CLICKS + 10 × PRIOR) / (VIEWS + 10)), the person's rate from two of its counters (clicks capped at views) smoothed towards PRIOR, e.g. ctr_1h=clk_1h/imp_1h@0.1 (repeatable)
    #[arg(long, value_name = "NAME=CLICKS/VIEWS@PRIOR", requires = "profiles", value_parser = tidemark_reader::ProfileRate::parse)]
    profile_rate: Vec<tidemark_reader::ProfileRate>,
    /// With --profiles: leave the counters themselves out of bids (only what --profile-person and --profile-rate derive goes in)
    #[arg(long, requires = "profiles")]
    no_profile_counters: bool,
    /// With --profiles: hot standbys to read them from
    #[command(flatten)]
    replicas: crate::reads::Replicas,
    /// Synthetic market: write the true label probabilities and delays of transactions with an impression to FILE
    #[arg(long)]
    truth: Option<PathBuf>,
    /// Serve Prometheus metrics at this address (host:port): events published by type, and with --profiles the lookups' latency
    #[arg(long)]
    metrics_addr: Option<String>,
    /// This publisher's CURVE secret key (`tidemark keys new`; subscribers list its FILE.pub)
    #[arg(long, value_name = "FILE", requires = "curve_server_key")]
    curve_secret_key: Option<PathBuf>,
    /// The subscribers' public key: the fleet's FLEET.pub, or a keyed proxy's
    #[arg(long, value_name = "FILE", requires = "curve_secret_key")]
    curve_server_key: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let span_ms = args.span.map(|d| d.as_millis() as i64);
    let start_ms = args
        .start_ms
        .unwrap_or_else(|| tidemark_market::start_ending_now(span_ms, args.duration, args.speed));
    let source = match args.replay {
        Some(path) => Source::Replay(path),
        None => Source::Synthetic(args.market.config()),
    };
    let curve = match (&args.curve_secret_key, &args.curve_server_key) {
        (Some(k), Some(s)) => Some(Client::from_files(k, s).map_err(crate::Misconfigured)?),
        _ => None,
    };
    if args.no_profile_counters && args.profile_rate.is_empty() && !args.profile_person {
        return Err(crate::Misconfigured(
            "--no-profile-counters leaves nothing to read profiles for: add --profile-rate or --profile-person".into(),
        )
        .into());
    }
    let opts = PublishOptions {
        curve,
        follow: args.follow,
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
        profile_replicas: args.replicas.urls.clone(),
        profile_person: args.profile_person,
        profile_counters: !args.no_profile_counters,
        profile_rates: args.profile_rate,
        max_lag: args.replicas.max_lag()?,
        truth: args.truth,
        metrics_addr: args.metrics_addr,
    };
    let stop = Arc::new(AtomicBool::new(false));
    crate::stop_on_signal(stop.clone());
    let report = tidemark_market::publish(&opts, source, &stop)?;
    println!("{}", report.to_json());
    Ok(())
}
