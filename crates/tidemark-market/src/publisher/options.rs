//! What `tidemark publish` is asked to do: where events come from
//! ([`Source`]) and how and where they go ([`PublishOptions`]).

use std::path::PathBuf;
use std::time::Duration;

use crate::market::MarketConfig;
use tidemark_reader::ProfileRate;

/// Where events come from.
pub enum Source {
    /// The synthetic market.
    Synthetic(MarketConfig),
    /// JSON lines, one event payload each, in time order (up to the
    /// publisher's disorder bound).
    Replay(PathBuf),
}

/// How and where to publish.
pub struct PublishOptions {
    /// Endpoints to bind (subscribers connect).
    pub bind: Vec<String>,
    /// Endpoints to connect to (a proxy's frontend).
    pub connect: Vec<String>,
    /// Name in ticks.
    pub publisher: String,
    /// Event milliseconds per wall millisecond; 0 replays as fast as possible.
    pub speed: f64,
    /// Event time to start the synthetic market at.
    pub start_ms: i64,
    /// Wall time to run for; `None` until the source ends or `stop`.
    pub duration: Option<Duration>,
    /// Wall time to wait after binding, so subscribers can connect first.
    pub warmup: Duration,
    /// Synthetic market: event time to generate (needed at speed 0).
    pub span_ms: Option<i64>,
    /// After the last event, keep stepping ticks through this much event
    /// time, so shards sweep every window and emit the last observations.
    pub tick_past_ms: i64,
    /// How long to wait on exit for queued messages to reach subscribers.
    pub drain: Duration,
    /// Write the events' payloads, one per line, to this file instead of
    /// publishing (a file `--replay` reads).
    pub write: Option<PathBuf>,
    /// Messages queued per subscriber before sending blocks.
    pub sndhwm: i32,
    /// A profile database (SPEC 11): before each bid goes out, its person's
    /// counters are read from it and added to the bid's features under the
    /// counters' names, as a bidder does.
    pub profiles: Option<String>,
    /// Hot standbys of `profiles` the lookups go to while they lag it by at
    /// most `max_lag` (`tidemark_reader::Reader::with_replicas`).
    pub profile_replicas: Vec<String>,
    /// See `profile_replicas`.
    pub max_lag: Duration,
    /// With `profiles`: also add the person's master identifier (its
    /// bridged identity, SPEC 11) as the categorical feature `person`, so
    /// the learner can learn each person's own propensity.
    pub profile_person: bool,
    /// With `profiles`: add every counter as read (else only what
    /// `profile_person` and `profile_rates` derive).
    pub profile_counters: bool,
    /// With `profiles`: rates derived from pairs of counters, added as
    /// numeric features (`tidemark_reader::rate`).
    pub profile_rates: Vec<ProfileRate>,
    /// Synthetic market: write the truth of every transaction with an
    /// impression to this file, tab-separated with a header
    /// (`crate::truth::TSV_HEADER`).
    pub truth: Option<PathBuf>,
    /// Serve Prometheus metrics here (`host:port`): events published by
    /// type and, with `profiles`, the bidder's lookup latency.
    pub metrics_addr: Option<String>,
    /// A replay goes on reading past the end of its file (a pipe, a growing
    /// file), ticking while idle, until stopped or `duration` passes.
    pub follow: bool,
    /// CURVE keys (SPEC 2): without them the socket is plain, and a warning
    /// names every endpoint outside loopback.
    pub curve: Option<tidemark_intake::curve::Client>,
}
