//! A shard's live figures, beside its counters: what the liveness gate and
//! the metrics endpoint read (when each socket was last heard, time spent
//! writing and sweeping, the clock and each phase's watermark, observations
//! emitted per target, buffer rows per tier). Set by intake and the writer,
//! read at scrape time, never stored.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tidemark_metrics::{counter, gauge, Sample, Times, WRITE_BOUNDS};

/// See the module documentation.
#[derive(Debug)]
pub struct Live {
    /// Wall ms at which the high (0) and low (1) socket last carried an
    /// accepted event (0: not in this run).
    heard_ms: [AtomicI64; 2],
    batches: Times,
    sweeps: Times,
    /// The clock applied by the last sweep (ms; 0 before the first).
    applied_ms: AtomicI64,
    watermarks: Mutex<Vec<(String, i64)>>,
    /// Per target: observations emitted in this run, and positives.
    emitted: Mutex<BTreeMap<String, (u64, u64)>>,
    /// Per buffer tier: rows, as the statistics collector last estimated.
    buffer_rows: Mutex<Vec<(String, i64)>>,
}

impl Default for Live {
    fn default() -> Live {
        Live {
            heard_ms: Default::default(),
            batches: Times::new(WRITE_BOUNDS),
            sweeps: Times::new(WRITE_BOUNDS),
            applied_ms: Default::default(),
            watermarks: Default::default(),
            emitted: Default::default(),
            buffer_rows: Default::default(),
        }
    }
}

impl Live {
    /// Counts a batch write's duration.
    pub fn batch_took(&self, d: Duration) {
        self.batches.record(d);
    }

    /// Counts a sweep transaction's duration, where the clock and each
    /// phase's watermark now stand, and what it emitted per target.
    pub fn swept(
        &self,
        d: Duration,
        clock: i64,
        watermarks: Vec<(String, i64)>,
        emitted: &[(String, i64, i64)],
    ) {
        self.sweeps.record(d);
        self.applied_ms.store(clock, Ordering::Relaxed);
        if let Ok(mut w) = self.watermarks.lock() {
            *w = watermarks;
        }
        if let Ok(mut e) = self.emitted.lock() {
            for (target, rows, positives) in emitted {
                let t = e.entry(target.clone()).or_default();
                t.0 += *rows as u64;
                t.1 += *positives as u64;
            }
        }
    }

    /// Replaces the buffer's rows per tier.
    pub fn buffer_rows(&self, tiers: Vec<(String, i64)>) {
        if let Ok(mut b) = self.buffer_rows.lock() {
            *b = tiers;
        }
    }

    /// Notes an accepted event on the low-frequency socket (`low`) or the high one.
    pub fn heard(&self, low: bool, now_ms: i64) {
        self.heard_ms[usize::from(low)].store(now_ms, Ordering::Relaxed);
    }

    /// How long before `now_ms` the socket last carried an event, if it has in this run.
    pub fn since_heard(&self, low: bool, now_ms: i64) -> Option<Duration> {
        let at = self.heard_ms[usize::from(low)].load(Ordering::Relaxed);
        (at > 0).then(|| Duration::from_millis((now_ms - at).max(0) as u64))
    }

    /// The figures as metric samples, at wall time `now_ms`.
    pub fn samples(&self, shard: &str, now_ms: i64) -> Vec<Sample> {
        let s = [("shard", shard)];
        let mut v = vec![
            self.batches.read().sample(
                "batch_write_duration_seconds",
                "a batch written to the buffer (one transaction), seconds",
                &s,
            ),
            self.sweeps
                .read()
                .sample("sweep_duration_seconds", "a sweep transaction, seconds", &s),
        ];
        let applied = self.applied_ms.load(Ordering::Relaxed);
        if applied > 0 {
            v.push(gauge(
                "clock_lag_seconds",
                "wall time minus the clock the phases were swept to",
                &s,
                (now_ms - applied) as f64 / 1000.0,
            ));
        }
        let read = |m: &Mutex<Vec<(String, i64)>>| m.lock().map(|w| w.clone()).unwrap_or_default();
        for (phase, wm) in read(&self.watermarks) {
            v.push(gauge(
                "watermark_timestamp_seconds",
                "creation time (epoch s) each phase has swept to",
                &[("shard", shard), ("phase", &phase)],
                wm as f64 / 1000.0,
            ));
        }
        for (tier, rows) in read(&self.buffer_rows) {
            v.push(gauge(
                "buffer_rows",
                "rows the buffer holds per tier (the statistics collector's estimate)",
                &[("shard", shard), ("tier", &tier)],
                rows as f64,
            ));
        }
        let emitted = self.emitted.lock().map(|e| e.clone()).unwrap_or_default();
        for (target, (rows, positives)) in emitted {
            let l = [("shard", shard), ("target", target.as_str())];
            v.push(counter(
                "observations",
                "observations emitted, per target",
                &l,
                rows as f64,
            ));
            v.push(counter(
                "positive_observations",
                "observations labelled 1, per target",
                &l,
                positives as f64,
            ));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emitted_rows_add_up_per_target_and_show_as_counters() {
        let live = Live::default();
        let e = |n, p| vec![("ctr".to_owned(), n, p)];
        live.swept(
            Duration::from_millis(2),
            5_000,
            vec![("ctr".into(), 4_000)],
            &e(10, 3),
        );
        live.swept(
            Duration::from_millis(1),
            6_000,
            vec![("ctr".into(), 5_000)],
            &e(5, 1),
        );
        live.buffer_rows(vec![("events".into(), 42)]);
        let s = live.samples("s0", 8_000);
        let get = |name: &str| s.iter().find(|x| x.name == name).map(|x| x.value);
        assert_eq!(get("observations"), Some(15.0));
        assert_eq!(get("positive_observations"), Some(4.0));
        assert_eq!(get("clock_lag_seconds"), Some(2.0));
        assert_eq!(get("watermark_timestamp_seconds"), Some(5.0));
        assert_eq!(get("buffer_rows"), Some(42.0));
        let sweeps = s
            .iter()
            .find(|x| x.name == "sweep_duration_seconds")
            .unwrap();
        assert!((sweeps.value - 0.003).abs() < 1e-9);
        assert_eq!(sweeps.buckets.last(), Some(&(f64::INFINITY, 2)));
    }
}
