//! Progressive validation: every observation is predicted before it is
//! learned; logloss, AUC and calibration over everything and over a sliding
//! window of the most recent observations.

use serde_json::json;

/// Counts for one span of observations.
#[derive(Debug, Clone, Copy, Default)]
pub struct Window {
    /// Rows counted.
    pub rows: u64,
    /// Rows labelled 1.
    pub positives: u64,
    /// Sum of per-row logloss.
    pub logloss_sum: f64,
    /// Sum of predictions.
    pub prediction_sum: f64,
}

impl Window {
    /// Counts prediction `p` for a row labelled `y`.
    pub fn add(&mut self, p: f64, y: bool) {
        let q = p.clamp(1e-15, 1.0 - 1e-15);
        self.rows += 1;
        self.positives += u64::from(y);
        self.logloss_sum -= if y { q.ln() } else { (1.0 - q).ln() };
        self.prediction_sum += p;
    }

    /// Mean logloss (0 over no rows).
    pub fn logloss(&self) -> f64 {
        self.logloss_sum / self.rows.max(1) as f64
    }

    /// Mean prediction over label rate: 1 when calibrated.
    pub fn calibration(&self) -> f64 {
        if self.positives == 0 {
            return f64::NAN;
        }
        self.prediction_sum / self.positives as f64
    }
}

/// All-time counts plus a sliding window made of `buckets` spans of `span` rows.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Everything since the start.
    pub total: Window,
    span: u64,
    buckets: Vec<Window>,
    current: usize,
    /// AUC over the recent window: a 1,000-bin histogram of predictions per label.
    hist: [Vec<u64>; 2],
}

const BINS: usize = 1000;

impl Metrics {
    /// A window of about `window` rows, kept in ten spans.
    pub fn new(window: u64) -> Metrics {
        Metrics {
            total: Window::default(),
            span: (window / 10).max(1),
            buckets: vec![Window::default(); 10],
            current: 0,
            hist: [vec![0; BINS], vec![0; BINS]],
        }
    }

    /// Counts prediction `p` for a row labelled `y`.
    pub fn add(&mut self, p: f64, y: bool) {
        self.total.add(p, y);
        if self.buckets[self.current].rows >= self.span {
            self.current = (self.current + 1) % self.buckets.len();
            self.buckets[self.current] = Window::default();
        }
        self.buckets[self.current].add(p, y);
        self.hist[usize::from(y)][((p * BINS as f64) as usize).min(BINS - 1)] += 1;
    }

    /// The sliding window's counts.
    pub fn recent(&self) -> Window {
        let mut w = Window::default();
        for b in &self.buckets {
            w.rows += b.rows;
            w.positives += b.positives;
            w.logloss_sum += b.logloss_sum;
            w.prediction_sum += b.prediction_sum;
        }
        w
    }

    /// AUC of all predictions so far, from the histogram (ties within a bin count half).
    pub fn auc(&self) -> f64 {
        let (neg, pos) = (&self.hist[0], &self.hist[1]);
        let (tn, tp): (u64, u64) = (neg.iter().sum(), pos.iter().sum());
        if tn == 0 || tp == 0 {
            return f64::NAN;
        }
        let mut below = 0u64;
        let mut area = 0f64;
        for b in 0..BINS {
            area += pos[b] as f64 * (below as f64 + neg[b] as f64 / 2.0);
            below += neg[b];
        }
        area / (tp as f64 * tn as f64)
    }

    /// The figures a checkpoint records: logloss, AUC and calibration, all time and recent.
    pub fn to_json(&self) -> serde_json::Value {
        let r = self.recent();
        json!({
            "rows": self.total.rows,
            "positives": self.total.positives,
            "logloss": self.total.logloss(),
            "calibration": finite(self.total.calibration()),
            "auc": finite(self.auc()),
            "recent": {"rows": r.rows, "logloss": r.logloss(), "calibration": finite(r.calibration())},
        })
    }
}

fn finite(x: f64) -> serde_json::Value {
    if x.is_finite() {
        json!(x)
    } else {
        serde_json::Value::Null
    }
}

/// Exact AUC of `(prediction, label)` pairs (ties count half). Sorts `pairs`.
pub fn auc(pairs: &mut [(f32, bool)]) -> f64 {
    pairs.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    let (mut neg_below, mut area) = (0u64, 0f64);
    let mut i = 0;
    while i < pairs.len() {
        let mut j = i;
        let (mut pos, mut neg) = (0u64, 0u64);
        while j < pairs.len() && pairs[j].0 == pairs[i].0 {
            if pairs[j].1 {
                pos += 1;
            } else {
                neg += 1;
            }
            j += 1;
        }
        area += pos as f64 * (neg_below as f64 + neg as f64 / 2.0);
        neg_below += neg;
        i = j;
    }
    let tp = pairs.iter().filter(|p| p.1).count() as f64;
    let tn = pairs.len() as f64 - tp;
    if tp == 0.0 || tn == 0.0 {
        return f64::NAN;
    }
    area / (tp * tn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auc_of_known_orders() {
        assert_eq!(auc(&mut [(0.1, false), (0.9, true)]), 1.0);
        assert_eq!(auc(&mut [(0.9, false), (0.1, true)]), 0.0);
        assert_eq!(auc(&mut [(0.5, false), (0.5, true)]), 0.5);
        assert!(
            (auc(&mut [(0.1, false), (0.4, true), (0.35, false), (0.8, true)]) - 1.0).abs() < 1e-12
        );
    }

    #[test]
    fn logloss_and_calibration() {
        let mut m = Metrics::new(100);
        m.add(0.5, true);
        m.add(0.5, false);
        assert!((m.total.logloss() - std::f64::consts::LN_2).abs() < 1e-12);
        assert_eq!(m.total.calibration(), 1.0);
        assert_eq!(m.recent().rows, 2);
    }
}
