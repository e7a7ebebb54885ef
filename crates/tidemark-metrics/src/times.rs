//! How long something takes, as an operator would chart it: a fixed-bucket
//! histogram updated with one atomic add per observation, read without
//! stopping the writers. Needs no exposition, so a bidder's reader links it
//! without the `serve` feature.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bucket bounds for a bidder's lookups, seconds (the last is +Inf).
pub const LOOKUP_BOUNDS: &[f64] = &[
    0.000_25,
    0.000_5,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.25,
    1.0,
    f64::INFINITY,
];

/// Bucket bounds for database writes and sweeps, seconds (the last is +Inf).
pub const WRITE_BOUNDS: &[f64] = &[
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    10.0,
    f64::INFINITY,
];

/// Durations counted so far.
#[derive(Debug)]
pub struct Times {
    bounds: &'static [f64],
    buckets: Vec<AtomicU64>,
    sum_ns: AtomicU64,
}

/// A reading of [`Times`].
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// `(upper bound in seconds, observations at or under it)`, cumulative,
    /// the last bound +Inf: Prometheus's shape.
    pub buckets: Vec<(f64, u64)>,
    /// Seconds over every observation.
    pub sum: f64,
    /// Observations.
    pub count: u64,
}

impl Times {
    /// Nothing counted yet, in buckets under `bounds` (ascending, the last
    /// +Inf).
    pub fn new(bounds: &'static [f64]) -> Times {
        assert_eq!(
            bounds.last(),
            Some(&f64::INFINITY),
            "the last bound is +Inf"
        );
        Times {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
        }
    }

    /// Counts one duration.
    pub fn record(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = self
            .bounds
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(self.bounds.len() - 1);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(
            d.as_nanos().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
    }

    /// What has been counted.
    pub fn read(&self) -> Histogram {
        let mut total = 0;
        let buckets = self
            .bounds
            .iter()
            .zip(&self.buckets)
            .map(|(b, n)| {
                total += n.load(Ordering::Relaxed);
                (*b, total)
            })
            .collect();
        Histogram {
            buckets,
            sum: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
            count: total,
        }
    }
}

impl Histogram {
    /// This reading as the sample `name` (see [`histogram`](crate::histogram)).
    pub fn sample(
        &self,
        name: &str,
        help: &'static str,
        labels: &[(&'static str, &str)],
    ) -> crate::Sample {
        crate::histogram(name, help, labels, self.buckets.clone(), self.sum)
    }

    /// The smallest bucket bound under which at least `q` of the
    /// observations fall (an upper estimate of that quantile), if any were counted.
    pub fn quantile_bound(&self, q: f64) -> Option<f64> {
        let want = (q * self.count as f64).ceil() as u64;
        (self.count > 0).then(|| {
            self.buckets
                .iter()
                .find(|(_, n)| *n >= want)
                .map_or(f64::INFINITY, |(b, _)| *b)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_fall_in_cumulative_buckets() {
        let t = Times::new(LOOKUP_BOUNDS);
        for us in [100, 300, 300, 1_500, 40_000, 3_000_000] {
            t.record(Duration::from_micros(us));
        }
        let h = t.read();
        assert_eq!(h.count, 6);
        assert!((h.sum - 3.0422).abs() < 1e-9);
        let at = |b: f64| h.buckets.iter().find(|(x, _)| *x == b).unwrap().1;
        assert_eq!(
            (at(0.000_25), at(0.000_5), at(0.002), at(0.05), at(1.0)),
            (1, 3, 4, 5, 5)
        );
        assert_eq!(h.buckets.last(), Some(&(f64::INFINITY, 6)));
        assert_eq!(h.quantile_bound(0.5), Some(0.000_5));
        assert_eq!(h.quantile_bound(1.0), Some(f64::INFINITY));
        assert_eq!(Times::new(WRITE_BOUNDS).read().quantile_bound(0.5), None);
    }
}
