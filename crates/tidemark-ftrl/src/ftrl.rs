//! FTRL-Proximal (McMahan et al. 2013, Algorithm 1) on sparse `(index, value)`
//! features. The weight of a coordinate is derived from `z` and `n` when
//! needed ("lazy weights"), so only `z` and `n` are stored.

use tidemark_checkpoint::Target;
use tidemark_features::sigmoid;

/// Learning-rate and regularisation settings (SPEC 8 defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Learning-rate scale: larger steps early on.
    pub alpha: f64,
    /// Learning-rate smoothing: keeps early steps of rare coordinates small.
    pub beta: f64,
    /// L1 regularisation: coordinates whose `|z|` stays under it weigh 0 (sparsity).
    pub l1: f64,
    /// L2 regularisation.
    pub l2: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            alpha: 0.1,
            beta: 1.0,
            l1: 1.0,
            l2: 1.0,
        }
    }
}

impl Params {
    /// Checks the settings are usable: all finite and non-negative, `alpha` positive.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("alpha", self.alpha),
            ("beta", self.beta),
            ("l1", self.l1),
            ("l2", self.l2),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{name} must be a non-negative number, got {v}"));
            }
        }
        if self.alpha == 0.0 {
            return Err("alpha must be greater than 0".into());
        }
        Ok(())
    }
}

/// One logistic model.
#[derive(Debug, Clone)]
pub struct Ftrl {
    /// Its learning settings.
    pub params: Params,
    z: Vec<f32>,
    n: Vec<f32>,
    /// Weights of the row being learned, kept between `predict` and `update`.
    w: Vec<f32>,
    /// Rows learned so far.
    pub trained: u64,
    /// `(rows, ones)` the base margin is counted over; `None`: a model
    /// resumed from a version-1 checkpoint, trained without one.
    labels: Option<(u64, u64)>,
    /// The base margin of the next prediction (see [`Ftrl::margin`]).
    margin: f32,
}

impl Ftrl {
    /// A model of `slots` coordinates (the hashing's `slots()`), all zero.
    pub fn new(params: Params, slots: usize) -> Ftrl {
        Ftrl {
            params,
            z: vec![0.0; slots],
            n: vec![0.0; slots],
            w: Vec::with_capacity(64),
            trained: 0,
            labels: Some((0, 0)),
            margin: 0.0,
        }
    }

    /// The base margin every score starts from: the log-odds of the label
    /// rate learned so far, `ln((ones + ½) / (zeros + ½))` (0 before the
    /// first row). The weights learn what moves a row away from the rate, so
    /// a rare target starts at its rate instead of one half, and where data
    /// is thin (L1 and L2 keep weights at 0) predicts the rate.
    pub fn margin(&self) -> f64 {
        match self.labels {
            Some((rows, ones)) => ((ones as f64 + 0.5) / ((rows - ones) as f64 + 0.5)).ln(),
            None => 0.0,
        }
    }

    #[inline]
    fn weight(&self, i: usize) -> f32 {
        let z = self.z[i];
        let l1 = self.params.l1 as f32;
        if z.abs() <= l1 {
            return 0.0;
        }
        let p = &self.params;
        -(z - l1.copysign(z))
            / (((p.beta as f32) + self.n[i].sqrt()) / (p.alpha as f32) + p.l2 as f32)
    }

    /// The probability for features `x`; remembers the weights for `update`.
    pub fn predict(&mut self, x: &[(u32, f32)]) -> f64 {
        self.w.clear();
        let mut s = self.margin;
        for &(i, v) in x {
            let w = self.weight(i as usize);
            self.w.push(w);
            s += w * v;
        }
        sigmoid(f64::from(s))
    }

    /// The probability for `x`, without touching any state.
    pub fn score(&self, x: &[(u32, f32)]) -> f64 {
        let s: f32 = self.margin
            + x.iter()
                .map(|&(i, v)| self.weight(i as usize) * v)
                .sum::<f32>();
        sigmoid(f64::from(s))
    }

    /// Learns from `x` with label `y`, given `p` from the `predict` just before.
    pub fn update(&mut self, x: &[(u32, f32)], p: f64, y: bool) {
        let g0 = (p - f64::from(u8::from(y))) as f32;
        let inv_alpha = 1.0 / self.params.alpha as f32;
        for (k, &(i, v)) in x.iter().enumerate() {
            let i = i as usize;
            let g = g0 * v;
            let n = self.n[i];
            let n2 = n + g * g;
            let sigma = (n2.sqrt() - n.sqrt()) * inv_alpha;
            self.z[i] += g - sigma * self.w[k];
            self.n[i] = n2;
        }
        self.trained += 1;
        if let Some((rows, ones)) = self.labels.as_mut() {
            *rows += 1;
            *ones += u64::from(y);
            self.margin = self.margin() as f32;
        }
    }

    /// Predicts, then learns: the progressive-validation step.
    pub fn learn(&mut self, x: &[(u32, f32)], y: bool) -> f64 {
        let p = self.predict(x);
        self.update(x, p, y);
        p
    }

    /// The model as a checkpoint target: non-zero weights and the full state.
    pub fn to_target(&self, name: &str, metrics: serde_json::Value) -> Target {
        let mut weights = Vec::new();
        let mut state = Vec::new();
        for i in 0..self.z.len() {
            if self.n[i] > 0.0 {
                state.push((i as u32, self.z[i], self.n[i]));
                let w = self.weight(i);
                if w != 0.0 {
                    weights.push((i as u32, w));
                }
            }
        }
        Target {
            name: name.to_owned(),
            alpha: self.params.alpha,
            beta: self.params.beta,
            l1: self.params.l1,
            l2: self.params.l2,
            trained: self.trained,
            margin: f64::from(self.margin),
            labels: self.labels,
            weights,
            state,
            metrics,
        }
    }

    /// Resumes from a checkpoint target (its own parameters win).
    pub fn from_target(t: &Target, slots: usize) -> Ftrl {
        let params = Params {
            alpha: t.alpha,
            beta: t.beta,
            l1: t.l1,
            l2: t.l2,
        };
        let mut m = Ftrl::new(params, slots);
        for &(i, z, n) in &t.state {
            m.z[i as usize] = z;
            m.n[i as usize] = n;
        }
        m.trained = t.trained;
        m.labels = t.labels;
        m.margin = t.margin as f32;
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Algorithm 1 written out in f64, as the paper states it, with each
    /// score offset by the log-odds of the labels before it (a fixed input
    /// to the row, so the gradient is the paper's).
    fn reference(rows: &[(Vec<u32>, bool)], p: Params, slots: usize) -> Vec<f64> {
        let (mut z, mut n) = (vec![0f64; slots], vec![0f64; slots]);
        let mut out = Vec::new();
        let (mut ones, mut zeros) = (0.0f64, 0.0f64);
        for (idx, y) in rows {
            let w: Vec<f64> = idx
                .iter()
                .map(|&i| {
                    let zi = z[i as usize];
                    if zi.abs() <= p.l1 {
                        0.0
                    } else {
                        -(zi - p.l1 * zi.signum())
                            / ((p.beta + n[i as usize].sqrt()) / p.alpha + p.l2)
                    }
                })
                .collect();
            let margin = ((ones + 0.5) / (zeros + 0.5)).ln();
            let pr = sigmoid(margin + w.iter().sum::<f64>());
            let g = pr - f64::from(u8::from(*y));
            if *y {
                ones += 1.0;
            } else {
                zeros += 1.0;
            }
            for (k, &i) in idx.iter().enumerate() {
                let i = i as usize;
                let sigma = ((n[i] + g * g).sqrt() - n[i].sqrt()) / p.alpha;
                z[i] += g - sigma * w[k];
                n[i] += g * g;
            }
            out.push(pr);
        }
        out
    }

    #[test]
    fn matches_algorithm_1() {
        let mut rng = 12345u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let rows: Vec<(Vec<u32>, bool)> = (0..5000)
            .map(|_| {
                let idx: Vec<u32> = (0..8).map(|_| (next() % 64) as u32).chain([64]).collect();
                let y = next() % 10 < (idx[0] % 4) as u64 + 1;
                (idx, y)
            })
            .collect();
        let p = Params::default();
        let expected = reference(&rows, p, 65);
        let mut m = Ftrl::new(p, 65);
        for ((idx, y), e) in rows.iter().zip(expected) {
            let x: Vec<(u32, f32)> = idx.iter().map(|&i| (i, 1.0)).collect();
            let got = m.learn(&x, *y);
            assert!((got - e).abs() < 1e-4, "{got} vs {e}");
        }
    }

    #[test]
    fn a_rare_target_starts_at_its_rate_and_a_version_1_model_keeps_no_margin() {
        let mut m = Ftrl::new(Params::default(), 3);
        let x = [(0u32, 1.0f32), (2, 1.0)];
        for i in 0..1000 {
            m.learn(&x, i % 100 == 0);
        }
        // 10 ones in 1000 rows: the margin alone is the rate's log-odds.
        assert!((m.margin() - (10.5f64 / 990.5).ln()).abs() < 1e-12);
        let p = m.score(&x);
        assert!((p - 0.01).abs() < 0.01, "{p}");
        let mut t = m.to_target("cvr_long", serde_json::Value::Null);
        t.labels = None;
        t.margin = 0.0;
        let old = Ftrl::from_target(&t, 3);
        assert_eq!(old.margin(), 0.0);
    }

    #[test]
    fn checkpoint_round_trip_resumes_exactly() {
        let mut a = Ftrl::new(Params::default(), 17);
        let x = [(1u32, 1.0f32), (5, 2.0), (16, 1.0)];
        for k in 0..50 {
            a.learn(&x, k % 3 == 0);
        }
        let t = a.to_target("ctr", serde_json::Value::Null);
        let mut b = Ftrl::from_target(&t, 17);
        assert_eq!(a.score(&x), b.score(&x));
        assert_eq!(a.learn(&x, true), b.learn(&x, true));
        assert_eq!(b.trained, 51);
    }
}
