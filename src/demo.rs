//! `tidemark demo`: arguments for `tidemark_demo::run`.

#[derive(clap::Args)]
pub struct Args {
    /// Share of all transactions the shards sample
    #[arg(long, default_value_t = 1.0)]
    rate: f64,
    /// Number of shards
    #[arg(long, default_value_t = 2)]
    shards: u64,
    /// Wall seconds the market publishes for
    #[arg(long, default_value_t = 45)]
    seconds: u64,
    /// Transactions per second of event time
    #[arg(long, default_value_t = 150.0)]
    tps: f64,
    /// Event time per wall time (the default runs 90 minutes of event time, three
    /// long install windows)
    #[arg(long, default_value_t = 120.0)]
    speed: f64,
    /// Persons behind the transactions (each with its own propensities)
    #[arg(long, default_value_t = 2_000)]
    persons: u32,
    /// Zipf exponent of persons' activity (0: every person equally active; 1.1 is skewed like real traffic)
    #[arg(long, default_value_t = 1.1)]
    person_skew: f64,
    /// Seed of the market's random choices (the same seed, the same market)
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The bidder also sends the profile counters themselves, beside the click
    /// rate it derives from them (the person known, raw counts cost ctr)
    #[arg(long)]
    raw_counters: bool,
    /// With --raw-counters: the learner's transform of the counters: log1p
    /// (the default), none (raw counts), clip(MIN, MAX) or buckets(B1, ...)
    #[arg(long, requires = "raw_counters")]
    counter_transform: Option<String>,
    /// Only render $TIDEMARK_HOME/report/index.html again from its report.json
    #[arg(long)]
    render: bool,
    #[command(flatten)]
    delays: crate::market::DelayArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.render {
        let dir = tidemark_store::Cluster::default_home().join("report");
        println!("{}", tidemark_demo::render(&dir)?.display());
        return Ok(());
    }
    let counter_transform = args.counter_transform.unwrap_or_else(|| "log1p".into());
    if counter_transform != "none" {
        tidemark_learner::parse_transforms([("--counter-transform", counter_transform.as_str())])
            .map_err(crate::Misconfigured)?;
    }
    let (delays, shift_at_ms, shift) = args.delays.parts();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    crate::stop_on_signal(stop.clone());
    let _ = crate::signals::BEFORE_EXIT.set(tidemark_demo::stop_children_now);
    let opts = tidemark_demo::Options {
        rate: args.rate,
        shards: args.shards,
        seconds: args.seconds,
        tps: args.tps,
        speed: args.speed,
        persons: args.persons,
        person_skew: args.person_skew,
        seed: args.seed,
        raw_counters: args.raw_counters,
        counter_transform,
        delays,
        shift_at_ms,
        shift,
        home: tidemark_store::Cluster::default_home(),
    };
    tidemark_demo::run(opts, &std::env::current_exe()?, stop)?;
    Ok(())
}
