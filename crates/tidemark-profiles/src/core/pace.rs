//! How many events one transaction takes, so that none holds its rows long
//! (a standby's replay and the partition DDL between batches wait
//! for the longest one). Sized by what the last ones took, not by a
//! setting: the same count costs ten times more on a cold cache or a busy
//! database than on an idle one.

use std::time::Duration;

/// The events of the next transaction, steered towards [`Pace::TARGET`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    events: usize,
    min: usize,
    max: usize,
}

impl Pace {
    /// What a transaction should last: a quarter of the ~100 ms bound,
    /// since one transaction's cost can be four times the last's (measured
    /// under linked ingest: at 25 ms, worker transactions p99 104 ms; at
    /// 40 ms, 156 ms; docs/benchmarks/profiles.md). 15 ms halved the p99 and raised
    /// trail ingest into an empty table, but cost 0.62-0.88 of the events/s
    /// into a table holding 7 days ("part four" there).
    pub const TARGET: Duration = Duration::from_millis(25);

    /// Starting at `start` events, never under `min` or over `max`.
    pub fn new(start: usize, min: usize, max: usize) -> Pace {
        let (min, max) = (min.max(1), max.max(min.max(1)));
        Pace {
            events: start.clamp(min, max),
            min,
            max,
        }
    }

    /// The events the next transaction takes.
    pub fn events(&self) -> usize {
        self.events
    }

    /// A transaction of `n` events took `elapsed`: the next takes what
    /// would have lasted the target at that rate, at most twice or half as
    /// many as now, so one outlier does not swing it far.
    pub fn took(&mut self, n: usize, elapsed: Duration) {
        // A short piece (the end of a share) is mostly fixed costs (round
        // trips, the commit) and would make the rate look worse than it is:
        // it counts only when it was slow anyway.
        if n == 0 || (n < self.events / 2 && elapsed <= Self::TARGET) {
            return;
        }
        let per_event = elapsed.as_secs_f64().max(1e-6) / n as f64;
        let want = (Self::TARGET.as_secs_f64() / per_event).round() as usize;
        self.events = want
            .clamp(self.events / 2, self.events.saturating_mul(2))
            .clamp(self.min, self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steers_towards_the_target_by_at_most_a_factor_of_two() {
        assert_eq!(Pace::TARGET, Duration::from_millis(25), "as below");
        let mut p = Pace::new(1_000, 100, 50_000);
        // 10 µs an event: 2,500 fit in 25 ms, reached by at most doubling.
        p.took(1_000, Duration::from_millis(10));
        assert_eq!(p.events(), 2_000);
        p.took(2_000, Duration::from_millis(20));
        assert_eq!(p.events(), 2_500);
        p.took(2_500, Duration::from_millis(25));
        assert_eq!(p.events(), 2_500);
        // The database slows tenfold: halved at each step.
        p.took(2_500, Duration::from_millis(250));
        assert_eq!(p.events(), 1_250);
        p.took(1_250, Duration::from_millis(125));
        assert_eq!(p.events(), 625);
        // A short transaction (the end of a share) says nothing when quick,
        // and shrinks the next when slow.
        p.took(10, Duration::from_micros(1_000));
        assert_eq!(p.events(), 625);
        p.took(10, Duration::from_millis(100));
        assert_eq!(p.events(), 312);
    }

    #[test]
    fn stays_within_its_bounds() {
        let mut p = Pace::new(1_000_000, 100, 5_000);
        assert_eq!(p.events(), 5_000);
        for _ in 0..20 {
            p.took(p.events(), Duration::from_secs(10));
        }
        assert_eq!(p.events(), 100);
        for _ in 0..20 {
            p.took(p.events(), Duration::ZERO);
        }
        assert_eq!(p.events(), 5_000);
    }
}
