//! Prometheus metrics for Tidemark's long-running processes: a `/metrics`
//! endpoint in the text exposition format, its samples taken at scrape time
//! from the process's own state (atomic counters, the last status it saved),
//! so a scrape never waits on PostgreSQL and costs nothing between scrapes.
//!
//! Owns: metric naming, duration histograms ([`Times`]), liveness
//! ([`alive`]: `/readyz` and the systemd watchdog read it), the exposition
//! (`prometheus-client`) and the listener (`tiny_http`, one thread), the
//! last two behind the default `serve` feature. Knows nothing of shards or
//! learners: they hand it a closure that lists samples.
//!
//! # Names
//!
//! Every metric a process lists is exposed as
//! `tidemark_<component>_<name>[_<unit>][_total]`, the component being the
//! process (`shard`, `profiles`, `learner`, `proxy`, `publisher`); what
//! varies within a metric (type, reason, error class, phase) is a label,
//! never part of the name; counters end in `_total`, timestamps in
//! `_timestamp_seconds`, latency histograms in `_duration_seconds`. Beside
//! them every endpoint serves `tidemark_build_info{component, version}`
//! and the standard `process_*` metrics (resident memory, CPU, open file
//! descriptors, start time).

#![warn(missing_docs)]

pub mod alive;
#[cfg(feature = "serve")]
mod process;
#[cfg(feature = "serve")]
mod serve;
mod times;

use std::sync::Arc;

/// Wall time in milliseconds since the Unix epoch (0 before it): the one
/// reading of the wall clock that liveness, checkpoints, status lines and
/// the tools share.
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(feature = "serve")]
pub use serve::{render, serve, Endpoint, ServeError};
pub use times::{Histogram, Times, LOOKUP_BOUNDS, WRITE_BOUNDS};

/// Whether a metric only goes up (resetting when the process restarts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotone within a run; exposed with the `_total` suffix.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations counted into buckets (`Sample::buckets`), `value`
    /// their sum: `_bucket`, `_sum` and `_count` series.
    Histogram,
}

/// One value of one metric.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Its name after `tidemark_<component>_` (and before `_total` for
    /// counters).
    pub name: String,
    /// What it measures, for `# HELP`.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// Its labels.
    pub labels: Vec<(&'static str, String)>,
    /// Its value (a histogram's: the sum of what it observed).
    pub value: f64,
    /// A histogram's `(upper bound, observations at or under it)`,
    /// cumulative, the last bound +Inf; empty for counters and gauges.
    pub buckets: Vec<(f64, u64)>,
}

/// Samples a process posts at its own pace (after a batch, at a
/// checkpoint), served as they last stood.
#[derive(Debug, Clone, Default)]
pub struct Board(Arc<std::sync::Mutex<Vec<Sample>>>);

impl Board {
    /// Replaces what the board shows.
    pub fn post(&self, samples: Vec<Sample>) {
        if let Ok(mut b) = self.0.lock() {
            *b = samples;
        }
    }

    /// What it shows now.
    pub fn read(&self) -> Vec<Sample> {
        self.0.lock().map(|b| b.clone()).unwrap_or_default()
    }
}

/// A metric as its component defines it, once: its name (after
/// `tidemark_<component>_`, before `_total`), help and kind. Each
/// component lists its own (`tidemark_shard::telemetry` for a shard's
/// counters), so the names a scrape shows, the code that posts them and a
/// test against docs/operations.md agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    /// Its name after `tidemark_<component>_`.
    pub name: &'static str,
    /// What it counts or shows.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
}

impl Metric {
    /// A counter.
    pub const fn counter(name: &'static str, help: &'static str) -> Metric {
        Metric {
            name,
            help,
            kind: Kind::Counter,
        }
    }

    /// A gauge.
    pub const fn gauge(name: &'static str, help: &'static str) -> Metric {
        Metric {
            name,
            help,
            kind: Kind::Gauge,
        }
    }

    /// One value of it.
    pub fn sample(&self, labels: &[(&'static str, &str)], value: f64) -> Sample {
        Sample {
            kind: self.kind,
            ..counter(self.name, self.help, labels, value)
        }
    }

    /// Its whole name as a scrape shows it, for `component`.
    pub fn exposed(&self, component: &str) -> String {
        let total = if self.kind == Kind::Counter {
            "_total"
        } else {
            ""
        };
        format!("tidemark_{component}_{}{total}", self.name)
    }
}

/// A counter sample.
pub fn counter(
    name: &str,
    help: &'static str,
    labels: &[(&'static str, &str)],
    value: f64,
) -> Sample {
    Sample {
        name: name.to_owned(),
        help,
        kind: Kind::Counter,
        labels: labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
        value,
        buckets: Vec::new(),
    }
}

/// A histogram sample: `buckets` cumulative (the last +Inf), `sum` the
/// total observed.
pub fn histogram(
    name: &str,
    help: &'static str,
    labels: &[(&'static str, &str)],
    buckets: Vec<(f64, u64)>,
    sum: f64,
) -> Sample {
    Sample {
        kind: Kind::Histogram,
        buckets,
        ..counter(name, help, labels, sum)
    }
}

/// A gauge sample.
pub fn gauge(
    name: &str,
    help: &'static str,
    labels: &[(&'static str, &str)],
    value: f64,
) -> Sample {
    Sample {
        kind: Kind::Gauge,
        ..counter(name, help, labels, value)
    }
}
