//! How long lookups take, as a bidder would chart them: a fixed-bucket
//! histogram updated with one atomic add per lookup, read without stopping
//! the readers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, seconds (the last is +Inf).
pub const BOUNDS: [f64; 12] = [
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

/// Lookup durations counted so far.
#[derive(Debug, Default)]
pub struct Times {
    buckets: [AtomicU64; BOUNDS.len()],
    sum_ns: AtomicU64,
}

/// A reading of [`Times`].
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// `(upper bound in seconds, lookups at or under it)`, cumulative, the
    /// last bound +Inf: Prometheus's shape.
    pub buckets: Vec<(f64, u64)>,
    /// Seconds over every lookup.
    pub sum: f64,
    /// Lookups.
    pub count: u64,
}

impl Times {
    /// Counts one lookup.
    pub fn record(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = BOUNDS
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(BOUNDS.len() - 1);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(
            d.as_nanos().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
    }

    /// What has been counted.
    pub fn read(&self) -> Histogram {
        let mut total = 0;
        let buckets = BOUNDS
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
    /// The smallest bucket bound under which at least `q` of the lookups
    /// fall (an upper estimate of that quantile), if any were counted.
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
        let t = Times::default();
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
        assert_eq!(Times::default().read().quantile_bound(0.5), None);
    }
}
