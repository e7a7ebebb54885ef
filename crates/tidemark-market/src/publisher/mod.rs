//! `tidemark publish`: puts events on a ZeroMQ socket, paced in event time,
//! with heartbeats (`tick`) as SPEC 3 asks: one before the first event, then
//! at least every 250 ms of wall time and, faster than real time, every
//! minute of event time, stepping through quiet stretches.
//!
//! It never drops: the socket is an XPUB with `ZMQ_XPUB_NODROP`, so a full
//! subscriber queue blocks the sender instead of losing messages, and on exit
//! it waits (up to `drain`) until its queues are handed to the subscribers'
//! connections. It can also write what it would send to a file, to replay.
//!
//! This module owns the run ([`publish`]) and its report; by concern:
//! `options` (what to publish, and how), `wire` (the socket or file: frames,
//! ticks, counts, metrics, drain), the two sources `synthetic` (the
//! generated market) and `replay` (a file of events), `profiles` (the
//! synthetic bidder's profile reads, on a runtime of their own), `truth`
//! (the truth file) and `error`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod error;
mod options;
mod profiles;
mod replay;
mod synthetic;
mod truth;
mod wire;

pub use error::PublishError;
pub(crate) use error::{endpoint, socket};
pub use options::{PublishOptions, Source};

use wire::{Wire, TICK_STEP_MS};

/// What a publisher did.
#[derive(Debug, Default, Clone)]
pub struct PublishReport {
    /// Events published.
    pub events: u64,
    /// Ticks published.
    pub ticks: u64,
    /// Wall time spent publishing.
    pub elapsed: Duration,
    /// Event time everything before which was published.
    pub through_ms: i64,
    /// Events published per type name.
    pub by_type: Vec<(String, u64)>,
    /// Wall time spent on exit waiting for queued messages to be taken.
    pub drained: Duration,
}

impl PublishReport {
    /// The report `tidemark publish` prints, one JSON object.
    pub fn to_json(&self) -> serde_json::Value {
        let secs = self.elapsed.as_secs_f64();
        serde_json::json!({
            "events": self.events,
            "ticks": self.ticks,
            "seconds": secs,
            "events_per_second": self.events as f64 / secs.max(1e-9),
            "through_ms": self.through_ms,
            "drain_seconds": self.drained.as_secs_f64(),
            "by_type": self.by_type.iter().map(|(k, v)| (k.clone(), (*v).into()))
                .collect::<serde_json::Map<String, serde_json::Value>>(),
        })
    }
}

/// Publishes until the duration passes, the source ends, or `stop` is set.
pub fn publish(
    opts: &PublishOptions,
    source: Source,
    stop: &AtomicBool,
) -> Result<PublishReport, PublishError> {
    let ctx = zmq::Context::new();
    let mut wire = Wire::open(opts, &ctx)?;
    let _endpoint = match &opts.metrics_addr {
        Some(addr) => Some(wire.serve_metrics(addr)?),
        None => None,
    };
    let started = Instant::now();
    let through = match source {
        Source::Synthetic(cfg) => synthetic::synthetic(opts, cfg, &mut wire, stop, started)?,
        Source::Replay(path) => replay::replay(opts, &path, &mut wire, stop, started)?,
    };
    // Step the ticks past the end, so shards sweep every window.
    let end = through + opts.tick_past_ms;
    let mut last = wire.last_tick_ts().unwrap_or(through).max(through);
    wire.tick(last)?;
    while last < end && !stop.load(Ordering::Relaxed) {
        last = (last + TICK_STEP_MS).min(end);
        wire.tick(last)?;
    }
    let elapsed = started.elapsed();
    wire.post();
    let mut report = PublishReport {
        events: wire.events,
        ticks: wire.ticks,
        elapsed,
        through_ms: last,
        by_type: wire.by_type(),
        drained: Duration::ZERO,
    };
    report.drained = wire.close(ctx, opts.drain)?;
    Ok(report)
}

/// Whether a source should stop: `stop` is set or `opts.duration` has passed.
fn done(opts: &PublishOptions, stop: &AtomicBool, started: Instant) -> bool {
    stop.load(Ordering::Relaxed) || opts.duration.is_some_and(|d| started.elapsed() >= d)
}
