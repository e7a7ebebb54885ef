//! The profile process's metrics (`tidemark_profiles_*`), each defined once.

use tidemark_metrics::Metric;

/// Per reason: events and links counted this run (`applied`, `merges`,
/// `links_refused`, `stale`, …, as in `tidemark.profile_counts`).
pub const EVENTS: Metric =
    Metric::counter("events", "events and links counted by reason, this run");
/// Events received, not yet applied.
pub const PENDING_EVENTS: Metric =
    Metric::gauge("pending_events", "events received, not yet applied");
/// Stored persons the workers remember.
pub const WORKER_CACHE_PERSONS: Metric = Metric::gauge(
    "worker_cache_persons",
    "stored persons the workers remember (at most workers x worker_cache)",
);

/// Every metric of the profile process.
pub const ALL: [Metric; 3] = [EVENTS, PENDING_EVENTS, WORKER_CACHE_PERSONS];

#[cfg(test)]
mod tests {
    #[test]
    fn every_metric_is_documented_for_operators() {
        let doc = include_str!("../../../docs/operations.md");
        for m in super::ALL {
            let name = m.exposed("profiles");
            assert!(doc.contains(&name), "{name} is not in docs/operations.md");
        }
    }
}
