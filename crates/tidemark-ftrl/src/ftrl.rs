//! FTRL-Proximal (McMahan et al. 2013, Algorithm 1) on sparse `(index, value)`
//! features. The weight of a coordinate is derived from `z` and `n` when
//! needed ("lazy weights"), so only `z` and `n` are stored.

use crate::early::{weighted_rate, Kind, Row};
use crate::tuner::{Tuner, MAX_SETTINGS};
#[cfg(test)]
use crate::PENDING_MAX;
use tidemark_checkpoint::{Candidate, Target, Tuning};
use tidemark_features::{sigmoid, MAX_ABS};

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

/// Bounds that keep every learner state finite in binary32 whatever the
/// rows (SPEC 10, v1.3), cheaply enough for the update's inner loop. With
/// inputs within [`MAX_ABS`] (1e15) a gradient is at most 1e15 and its
/// square 1e30; `n` stops at [`N_MAX`] and `z` at ±[`Z_MAX`]. Settings are
/// held so that a weight's denominator `(beta + √n) / alpha + l2` is at
/// least [`DEN_MIN`] and `1/alpha` at most 1e4: so a weight is at most
/// 1e15 / 1e-3 = 1e18 with no clamp of its own, a step `σ·w` at most
/// 1e15 · 1e4 · 1e18 = 1e37, and `Σ w·x` over a row of any size a bid can
/// carry far below binary32's 3.4e38. A state at a bound still moves: no
/// real model comes near them.
pub const N_MAX: f32 = 1e30;
/// See [`N_MAX`].
pub const Z_MAX: f32 = 1e15;
/// The smallest `alpha` (and the largest is its inverse).
pub const ALPHA_MIN: f64 = 1e-4;
/// The largest `beta`, `l1` or `l2` a setting may have (the label-rate
/// setting's `l1` is [`RATE_ONLY_L1`]).
pub const PARAM_MAX: f64 = 1e30;
/// The smallest `beta / alpha + l2`: a coordinate's first step is bounded.
pub const DEN_MIN: f64 = 1e-3;

/// Whether a value in a row may enter the model: finite and within
/// [`MAX_ABS`] (hashing leaves others out; a row built elsewhere is held to
/// the same rule here, the value counting as 0).
#[inline(always)]
fn admitted(v: f32) -> f32 {
    if f64::from(v).abs() <= MAX_ABS {
        v
    } else {
        0.0
    }
}

/// The L1 of the setting that is the label rate alone: no coordinate's
/// evidence `|z|` ever reaches it, so every weight stays 0 and the setting
/// predicts the running label rate ([`Ftrl::margin`]), the online constant.
pub const RATE_ONLY_L1: f64 = 1e30;

impl Params {
    /// These settings with every weight held at 0 (see [`RATE_ONLY_L1`]).
    pub fn rate_only(self) -> Params {
        Params {
            l1: RATE_ONLY_L1,
            ..self
        }
    }

    /// Whether these settings predict the label rate alone.
    pub fn is_rate_only(&self) -> bool {
        self.l1 >= RATE_ONLY_L1
    }

    /// Checks the settings are usable: `alpha` within [1e-4, 1e4], the
    /// others within [0, 1e30], and `beta / alpha + l2` at least 1e-3
    /// (bounds that keep the state finite, `N_MAX` in `ftrl.rs`).
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [("beta", self.beta), ("l1", self.l1), ("l2", self.l2)] {
            if !(0.0..=PARAM_MAX).contains(&v) {
                return Err(format!(
                    "{name} must be a number from 0 to {PARAM_MAX:e}, got {v}"
                ));
            }
        }
        if !(ALPHA_MIN..=1.0 / ALPHA_MIN).contains(&self.alpha) {
            return Err(format!(
                "alpha must be a number from {ALPHA_MIN:e} to {:e}, got {}",
                1.0 / ALPHA_MIN,
                self.alpha
            ));
        }
        if self.beta / self.alpha + self.l2 < DEN_MIN {
            return Err(format!(
                "beta / alpha + l2 must be at least {DEN_MIN:e} (got {}): with both near 0 a \
                 coordinate's first steps are unbounded",
                self.beta / self.alpha + self.l2
            ));
        }
        Ok(())
    }
}

impl From<&Target> for Params {
    /// The settings a checkpoint's target predicts with.
    fn from(t: &Target) -> Params {
        Params {
            alpha: t.alpha,
            beta: t.beta,
            l1: t.l1,
            l2: t.l2,
        }
    }
}

impl From<&Candidate> for Params {
    fn from(c: &Candidate) -> Params {
        Params {
            alpha: c.alpha,
            beta: c.beta,
            l1: c.l1,
            l2: c.l2,
        }
    }
}

/// One logistic model, or several settings of it learning side by side on
/// the same rows (a grid, see [`crate::Grid`]): each setting keeps its own
/// `z` and `n`, and the model predicts with the one whose recent progressive
/// loss is lowest.
#[derive(Debug, Clone)]
pub struct Ftrl {
    settings: Vec<Params>,
    /// Per slot a cell of `lanes` values of z then `lanes` of n (1, 4 or 8
    /// lanes: the settings, padded), so one cache line per feature serves
    /// every setting and the loops over lanes compile to vector code.
    zn: Vec<f32>,
    /// Where the first cell starts in `zn`: cells are aligned to 64 bytes.
    base: usize,
    lanes: usize,
    /// Per lane: 1/alpha, beta, l1, l2 (padding lanes copy setting 0; they
    /// see no gradient, so they never change).
    coef: [[f32; MAX_SETTINGS]; 4],
    /// Per feature of the row being learned, per lane: its weight. (Not
    /// √n: a row may hold a coordinate twice, and its second update must
    /// see the n the first left.)
    w: Vec<f32>,
    /// Per setting, the prediction for the row being learned.
    p: Vec<f64>,
    /// Rows learned so far.
    pub trained: u64,
    /// `(rows, ones)` of the `final` rows weighed 1 the base margin is
    /// counted over; `None`: a model resumed from a version-1 checkpoint,
    /// trained without one.
    labels: Option<(u64, u64)>,
    /// `(provisional, late)` rows learned while the target is early (SPEC
    /// 5, [`crate::Kind`]); `(0, 0)` otherwise.
    early: (u64, u64),
    /// The base margin of the next prediction (see [`Ftrl::margin`]).
    margin: f32,
    /// The gradient the setting predicting took from the last row learned
    /// (its weight included): what the target's pool learns from it.
    grad: f64,
    /// See [`Ftrl::scored`].
    scored: Option<f64>,
    tuner: Tuner,
}

/// Floats allocated past the cells, so they can start on a 64-byte boundary.
const PAD: usize = 16;

/// Per-lane settings as arrays of `L` (the loops over them vectorise).
struct Lanes<const L: usize> {
    inv_alpha: [f32; L],
    beta: [f32; L],
    l1: [f32; L],
    l2: [f32; L],
}

impl<const L: usize> Lanes<L> {
    fn of(coef: &[[f32; MAX_SETTINGS]; 4]) -> Lanes<L> {
        let lane = |k: usize| coef[k][..L].try_into().expect("L <= MAX_SETTINGS");
        Lanes {
            inv_alpha: lane(0),
            beta: lane(1),
            l1: lane(2),
            l2: lane(3),
        }
    }

    /// Every lane's weight from its z and n ([`Ftrl::weight`], branch-free).
    #[inline(always)]
    fn weights(&self, z: &[f32; L], n: &[f32; L]) -> [f32; L] {
        let mut w = [0f32; L];
        for j in 0..L {
            let v = -(z[j] - self.l1[j].copysign(z[j]))
                / ((self.beta[j] + n[j].sqrt()) * self.inv_alpha[j] + self.l2[j]);
            w[j] = if z[j].abs() <= self.l1[j] { 0.0 } else { v };
        }
        w
    }
}

/// What a self-tuning model has chosen, for metrics and reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// Every setting, in grid order.
    pub settings: Vec<Params>,
    /// Each setting's recent progressive logloss (decayed mean).
    pub recent_loss: Vec<f64>,
    /// The setting predicting now.
    pub chosen: usize,
    /// Times the chosen setting changed.
    pub switches: u64,
    /// The row count when it last changed.
    pub last_switch: Option<u64>,
}

impl Ftrl {
    /// A model of `slots` coordinates (the hashing's `slots()`), all zero.
    pub fn new(params: Params, slots: usize) -> Ftrl {
        Ftrl::grid(vec![params], 0, 1.0, slots)
    }

    /// Settings learning side by side, `first` predicting until another's
    /// loss, decayed by half every `half_life` rows, is lower.
    pub fn grid(settings: Vec<Params>, first: usize, half_life: f64, slots: usize) -> Ftrl {
        assert!(first < settings.len(), "the first setting is one of them");
        assert!(
            settings.len() <= MAX_SETTINGS,
            "at most {MAX_SETTINGS} settings"
        );
        let k = settings.len();
        let lanes = match k {
            1 => 1,
            2..=4 => 4,
            _ => 8,
        };
        // Zeroed memory is mapped lazily: untouched slots cost nothing.
        let zn = vec![0.0f32; slots * 2 * lanes + PAD];
        let base = (64 - zn.as_ptr() as usize % 64) % 64 / 4;
        let lane = |j: usize| settings.get(j).unwrap_or(&settings[0]);
        let coef = [
            std::array::from_fn(|j| 1.0 / lane(j).alpha as f32),
            std::array::from_fn(|j| lane(j).beta as f32),
            std::array::from_fn(|j| lane(j).l1 as f32),
            std::array::from_fn(|j| lane(j).l2 as f32),
        ];
        Ftrl {
            zn,
            base,
            lanes,
            coef,
            w: Vec::with_capacity(64 * lanes),
            p: vec![0.0; k],
            tuner: Tuner::new(k, first, half_life),
            settings,
            trained: 0,
            labels: Some((0, 0)),
            early: (0, 0),
            margin: 0.0,
            grad: 0.0,
            scored: None,
        }
    }

    /// Weights several targets share (a pool, SPEC 10): one setting, no
    /// margin of its own (each target keeps its own), learning from the
    /// gradients its targets pass it ([`Ftrl::shared_sum`], [`Ftrl::step`]).
    pub fn shared(params: Params, slots: usize) -> Ftrl {
        let mut m = Ftrl::new(params, slots);
        m.labels = None;
        m
    }

    /// The settings predicting now.
    pub fn params(&self) -> Params {
        self.settings[self.tuner.chosen]
    }

    /// Every setting, in grid order.
    pub fn settings(&self) -> &[Params] {
        &self.settings
    }

    /// The index in [`Ftrl::settings`] of the setting predicting now.
    pub fn chosen(&self) -> usize {
        self.tuner.chosen
    }

    /// What the tuning has chosen so far.
    pub fn choice(&self) -> Choice {
        let rows = self.tuner.decayed_rows.max(1e-12);
        Choice {
            settings: self.settings.clone(),
            recent_loss: self.tuner.loss.iter().map(|l| l / rows).collect(),
            chosen: self.tuner.chosen,
            switches: self.tuner.switches,
            last_switch: self.tuner.last_switch,
        }
    }

    /// The base margin every score starts from: the log-odds of the label
    /// rate learned so far, `ln((ones + ½) / (zeros + ½))` (0 before the
    /// first row). The weights learn what moves a row away from the rate, so
    /// a rare target starts at its rate instead of one half, and where data
    /// is thin (L1 and L2 keep weights at 0) predicts the rate.
    ///
    /// For a target learned early it is the rate `p` at which the weighted
    /// rows' steps cancel (docs/learner.md): with `P` provisional, `L` late,
    /// `F0` and `F1` final rows weighed 1 labelled 0 and 1 (smoothed by ½
    /// each), `P·(1 − p)·p + L·(p − 1) + F0·p + F1·(p − 1) = 0`; for a pure
    /// early target about `L / P`. Matured rows alone would read high while
    /// positives, which mature first, outnumber the zeros still waiting for
    /// their window's end.
    pub fn margin(&self) -> f64 {
        match self.labels {
            Some((rows, ones)) => {
                let (p, late) = self.early;
                if p == 0 {
                    return ((ones as f64 + 0.5) / ((rows - ones) as f64 + 0.5)).ln();
                }
                let q = weighted_rate(p as f64, late as f64, ones as f64, (rows - ones) as f64);
                (q / (1.0 - q)).ln()
            }
            None => 0.0,
        }
    }

    /// [`Ftrl::margin`] as the next prediction starts from (kept, not
    /// computed again).
    pub fn base_margin(&self) -> f32 {
        self.margin
    }

    /// The weight under settings `p` of a coordinate with `z` and `√n`.
    #[inline]
    fn weight(p: &Params, z: f32, sqrt_n: f32) -> f32 {
        let l1 = p.l1 as f32;
        if z.abs() <= l1 {
            return 0.0;
        }
        // As `Lanes::weights` computes it, to the bit.
        let inv_alpha = 1.0 / p.alpha as f32;
        -(z - l1.copysign(z)) / (((p.beta as f32) + sqrt_n) * inv_alpha + p.l2 as f32)
    }

    /// Where slot `i`'s cell starts in `zn`.
    #[inline]
    fn cell(&self, i: u32) -> usize {
        self.base + i as usize * 2 * self.lanes
    }

    /// The probability for features `x` (from the setting predicting now);
    /// remembers every setting's weights for `update`.
    pub fn predict(&mut self, x: &[(u32, f32)]) -> f64 {
        self.predict_offset(x, 0.0)
    }

    /// [`Ftrl::predict`] with `offset` added to every setting's margin: a
    /// pooled target's pool sum ([`Ftrl::shared_sum`]).
    pub fn predict_offset(&mut self, x: &[(u32, f32)], offset: f32) -> f64 {
        match self.lanes {
            1 => self.predict_lanes::<1>(x, offset),
            4 => self.predict_lanes::<4>(x, offset),
            _ => self.predict_lanes::<8>(x, offset),
        }
    }

    fn predict_lanes<const L: usize>(&mut self, x: &[(u32, f32)], offset: f32) -> f64 {
        let s = self.sums::<L>(x, offset);
        for (p, &s) in self.p.iter_mut().zip(&s) {
            *p = sigmoid(f64::from(s));
        }
        self.p[self.tuner.chosen]
    }

    /// A pool's `Σ w·x` over `x` (it has one setting and no margin);
    /// remembers the weights for [`Ftrl::step`].
    pub fn shared_sum(&mut self, x: &[(u32, f32)]) -> f32 {
        assert_eq!(self.lanes, 1, "a pool learns with one setting");
        self.sums::<1>(x, 0.0)[0]
    }

    /// Learns a pool's share of a row: the gradient `g` its target took
    /// (its weight included), given the [`Ftrl::shared_sum`] just before.
    pub fn step(&mut self, x: &[(u32, f32)], g: f64) {
        assert_eq!(self.lanes, 1, "a pool learns with one setting");
        self.apply::<1>(x, [g as f32]);
        self.trained += 1;
    }

    /// The gradient the setting predicting took from the last row learned.
    pub fn last_gradient(&self) -> f64 {
        self.grad
    }

    /// Every lane's margin plus `offset` plus `Σ w·x`; remembers the weights.
    fn sums<const L: usize>(&mut self, x: &[(u32, f32)], offset: f32) -> [f32; L] {
        let c = Lanes::<L>::of(&self.coef);
        // Load every feature's cell first: the cache misses then overlap
        // instead of waiting one by one behind the arithmetic.
        let touched: f32 = x.iter().map(|&(i, _)| self.zn[self.cell(i)]).sum();
        std::hint::black_box(touched);
        self.w.clear();
        let mut s = [self.margin + offset; L];
        for &(i, v) in x {
            let v = admitted(v);
            let at = self.cell(i);
            let z: &[f32; L] = self.zn[at..at + L].try_into().expect("L lanes");
            let n: &[f32; L] = self.zn[at + L..at + 2 * L].try_into().expect("L lanes");
            let w = c.weights(z, n);
            for j in 0..L {
                s[j] += w[j] * v;
            }
            self.w.extend_from_slice(&w);
        }
        s
    }

    /// The probability for `x` from the setting predicting now, without
    /// touching any state.
    pub fn score(&self, x: &[(u32, f32)]) -> f64 {
        self.score_offset(x, 0.0)
    }

    /// [`Ftrl::score`] with `offset` added to the margin (a pool's sum).
    pub fn score_offset(&self, x: &[(u32, f32)], offset: f32) -> f64 {
        sigmoid(f64::from(self.margin + offset + self.sum(x)))
    }

    /// `Σ w·x` of the setting predicting now, without the margin (for a
    /// pool, its share of a pooled target's score).
    pub fn sum(&self, x: &[(u32, f32)]) -> f32 {
        let (c, l) = (self.tuner.chosen, self.lanes);
        let p = &self.settings[c];
        x.iter()
            .map(|&(i, v)| {
                let at = self.cell(i);
                Ftrl::weight(p, self.zn[at + c], self.zn[at + l + c].sqrt()) * admitted(v)
            })
            .sum::<f32>()
    }

    /// Learns from `x` with label `y`, given the `predict` just before.
    pub fn update(&mut self, x: &[(u32, f32)], y: bool) {
        self.update_row(x, Row::plain(y));
    }

    /// Learns one row of any kind, given the `predict` just before: each
    /// setting weighs it by its own prediction ([`crate::Kind::weight`]).
    /// Only matured rows count toward the tuning.
    pub fn update_row(&mut self, x: &[(u32, f32)], row: Row) {
        if row.kind == Kind::Final && row.label && self.is_early() {
            // An early target's final rows are zeros: this one's shard now
            // emits final labels only.
            self.early = (0, 0);
        }
        let early = self.is_early();
        let (c, y) = (self.tuner.chosen, f64::from(u8::from(row.label)));
        self.grad = row.kind.weight(self.p[c], early) * (self.p[c] - y);
        match self.lanes {
            1 => self.update_lanes::<1>(x, row, early),
            4 => self.update_lanes::<4>(x, row, early),
            _ => self.update_lanes::<8>(x, row, early),
        }
        self.trained += 1;
        self.scored = self.tune(row, early);
        match row.kind {
            Kind::Provisional => self.early.0 += 1,
            Kind::Late => self.early.1 += 1,
            // Weighed 0: counted by its provisional row.
            Kind::Final if early => return,
            Kind::Final => {
                if let Some((rows, ones)) = self.labels.as_mut() {
                    *rows += 1;
                    *ones += u64::from(row.label);
                }
            }
        }
        if self.labels.is_some() {
            self.margin = self.margin() as f32;
        }
    }

    /// Counts a row toward the choice of setting. A plain target's matured
    /// row: each setting's prediction now, against its label. An early
    /// target's: each setting's prediction at the member's provisional row
    /// (at most the short window after the bid), against its final label.
    /// Its matured rows scored at the moment they come would favour the
    /// settings that swing with the latest rows: the positives come one by
    /// one, the zeros all at once at the window's end (docs/learner.md).
    /// Returns the prediction the row is scored with, if it is a label:
    /// metrics count the same ([`Ftrl::scored`]).
    fn tune(&mut self, row: Row, early: bool) -> Option<f64> {
        let now = self.p[self.tuner.chosen];
        match (row.kind, row.member) {
            (Kind::Provisional, Some(m)) => {
                self.tuner.remember(m, &self.p);
                None
            }
            (Kind::Provisional, None) => None,
            (_, Some(m)) if early || row.kind == Kind::Late => {
                // A member not remembered (it came before a restart, or was
                // forgotten as the oldest) is not counted.
                self.tuner.matured(m, row.label, self.trained)
            }
            // Plain rows, and rows without members (offline files), count
            // as they come.
            _ => {
                if self.settings.len() > 1 {
                    self.tuner.add(&self.p, row.label, self.trained);
                }
                Some(now)
            }
        }
    }

    /// The prediction the last row learned is scored with, if it carried a
    /// label (`None` for a provisional zero, or an early target's member
    /// not remembered): for a plain row the prediction before learning it;
    /// for an early target's matured row, the one served at its member's
    /// provisional row, as a bidder met it. Metrics count these.
    pub fn scored(&self) -> Option<f64> {
        self.scored
    }

    /// Whether the target is learned early: provisional rows since its
    /// last `final` 1.
    pub fn is_early(&self) -> bool {
        self.early.0 > 0
    }

    fn update_lanes<const L: usize>(&mut self, x: &[(u32, f32)], row: Row, early: bool) {
        // Padding lanes get no gradient: their z and n stay 0. Weights lie
        // in [0, 1] (`crate::Kind::weight`).
        let mut g0 = [0f32; L];
        let y = f64::from(u8::from(row.label));
        for (g, p) in g0.iter_mut().zip(&self.p) {
            *g = (row.kind.weight(*p, early) * (p - y)) as f32;
        }
        self.apply::<L>(x, g0);
    }

    /// Every lane's step for gradient scales `g0` (a row's `w·(p − y)` per
    /// setting), given the weights the last prediction remembered.
    fn apply<const L: usize>(&mut self, x: &[(u32, f32)], g0: [f32; L]) {
        let inv_alpha = Lanes::<L>::of(&self.coef).inv_alpha;
        for (f, &(i, v)) in x.iter().enumerate() {
            let at = self.cell(i);
            let (z, n) = self.zn[at..at + 2 * L].split_at_mut(L);
            let w = &self.w[f * L..][..L];
            let v = admitted(v);
            for j in 0..L {
                // Bounded as N_MAX says, so no state becomes non-finite.
                let g = g0[j] * v;
                let n2 = (n[j] + g * g).min(N_MAX);
                let sigma = (n2.sqrt() - n[j].sqrt()) * inv_alpha[j];
                z[j] = (z[j] + g - sigma * w[j]).clamp(-Z_MAX, Z_MAX);
                n[j] = n2;
            }
        }
    }

    /// Predicts, then learns: the progressive-validation step.
    pub fn learn(&mut self, x: &[(u32, f32)], y: bool) -> f64 {
        self.learn_row(x, Row::plain(y))
    }

    /// [`Ftrl::learn`] for a row of any kind.
    pub fn learn_row(&mut self, x: &[(u32, f32)], row: Row) -> f64 {
        let p = self.predict(x);
        self.update_row(x, row);
        p
    }

    /// Every setting's touched coordinates `(index, z, n)`, in one pass over
    /// the cells (a pass per setting would read the whole model each time).
    fn states(&self) -> Vec<Vec<(u32, f32, f32)>> {
        let (l, k) = (self.lanes, self.settings.len());
        let slots = (self.zn.len() - PAD) / (2 * l);
        let mut out = vec![Vec::new(); k];
        let cells = self.zn[self.base..self.base + slots * 2 * l].chunks_exact(2 * l);
        for (i, c) in cells.enumerate() {
            for (j, state) in out.iter_mut().enumerate() {
                if c[l + j] > 0.0 {
                    state.push((i as u32, c[j], c[l + j]));
                }
            }
        }
        out
    }

    /// The model as a checkpoint target: the weights, settings and state of
    /// the setting predicting now, and the other settings' state as `tuning`.
    pub fn to_target(&self, name: &str, metrics: serde_json::Value) -> Target {
        let c = self.tuner.chosen;
        let p = self.settings[c];
        let mut states = self.states();
        let state = std::mem::take(&mut states[c]);
        let weights = state
            .iter()
            .map(|&(i, z, n)| (i, Ftrl::weight(&p, z, n.sqrt())))
            .filter(|&(_, w)| w != 0.0)
            .collect();
        let tuning = (self.settings.len() > 1).then(|| Tuning {
            half_life: self.tuner.half_life,
            decayed_rows: self.tuner.decayed_rows,
            chosen: c,
            switches: self.tuner.switches,
            last_switch: self.tuner.last_switch,
            candidates: self
                .settings
                .iter()
                .zip(&self.tuner.loss)
                .zip(states)
                .map(|((s, &loss), state)| Candidate {
                    alpha: s.alpha,
                    beta: s.beta,
                    l1: s.l1,
                    l2: s.l2,
                    loss,
                    state,
                })
                .collect(),
        });
        Target {
            name: name.to_owned(),
            alpha: p.alpha,
            beta: p.beta,
            l1: p.l1,
            l2: p.l2,
            trained: self.trained,
            margin: f64::from(self.margin),
            labels: self.labels,
            early_labels: (self.early != (0, 0)).then_some(self.early),
            weights,
            state,
            metrics,
            tuning,
            pool: None,
        }
    }

    /// Resumes from a checkpoint target (its own settings win).
    pub fn from_target(t: &Target, slots: usize) -> Ftrl {
        let mut m = match &t.tuning {
            None => Ftrl::new(Params::from(t), slots),
            Some(u) => {
                let settings = u.candidates.iter().map(Params::from).collect();
                let mut m = Ftrl::grid(settings, u.chosen, u.half_life, slots);
                m.tuner.decayed_rows = u.decayed_rows;
                m.tuner.switches = u.switches;
                m.tuner.last_switch = u.last_switch;
                for (j, c) in u.candidates.iter().enumerate() {
                    m.tuner.loss[j] = c.loss;
                    m.set_state(j, &c.state);
                }
                m
            }
        };
        let chosen = m.tuner.chosen;
        m.set_state(chosen, &t.state);
        m.trained = t.trained;
        m.labels = t.labels;
        m.early = t.early_labels.unwrap_or((0, 0));
        m.margin = t.margin as f32;
        m
    }

    fn set_state(&mut self, j: usize, state: &[(u32, f32, f32)]) {
        // Within the bounds the update keeps (a reader refuses non-finite
        // numbers; a hand-made file may still hold ones past the bounds).
        for &(i, z, n) in state {
            let at = self.cell(i);
            self.zn[at + j] = z.clamp(-Z_MAX, Z_MAX);
            self.zn[at + self.lanes + j] = n.clamp(0.0, N_MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_early_target_is_tuned_on_its_members_predictions_at_their_provisional_row() {
        let two = vec![
            Params::default(),
            Params {
                alpha: 1.0,
                ..Params::default()
            },
        ];
        let mut m = Ftrl::grid(two, 0, 1e9, 64);
        let x = [(3u32, 1.0f32)];
        let prov = |k: u64| Row::of(false, Kind::Provisional).member(&k.to_string());
        m.learn_row(&x, prov(0));
        let at_provisional = m.p.clone();
        assert_eq!(m.tuner.decayed_rows, 0.0, "a provisional zero is no label");
        for k in 1..50 {
            m.learn_row(&x, prov(k));
        }
        assert_ne!(m.p, at_provisional, "the predictions moved on");
        m.learn_row(&x, Row::of(true, Kind::Late).member("0"));
        let scored: Vec<f64> = at_provisional.iter().map(|p| -p.ln()).collect();
        assert_eq!(m.choice().recent_loss, scored);
        // Member 0 matured: its final zero, or a member never seen, counts nothing.
        m.learn_row(&x, Row::of(false, Kind::Final).member("0"));
        m.learn_row(&x, Row::of(false, Kind::Final).member("unknown"));
        assert_eq!(m.tuner.decayed_rows, 1.0);
        // Without members (an offline file), a matured row counts as it comes.
        m.learn_row(&x, Row::of(false, Kind::Final));
        assert!((m.tuner.decayed_rows - 2.0).abs() < 1e-9);
        // What it remembers is bounded: the oldest go first.
        for k in 0..PENDING_MAX as u64 + 10 {
            m.tuner.remember(k, &[0.5, 0.5]);
        }
        assert_eq!(m.tuner.pending.len(), PENDING_MAX);
        assert!(
            !m.tuner.pending.contains_key(&0)
                && m.tuner.pending.contains_key(&(PENDING_MAX as u64 + 9))
        );
        assert!(m.tuner.order.len() <= 2 * PENDING_MAX);
    }

    #[test]
    fn the_weighted_rate_cancels_the_weighted_steps() {
        // Without provisional rows: the smoothed rate, as before.
        let r = weighted_rate(0.0, 0.0, 30.0, 70.0);
        assert!((r - 30.5 / 101.0).abs() < 1e-12);
        for (p, late, f1, f0) in [
            (100.0, 5.0, 0.0, 95.0),
            (1e6, 10.0, 3.0, 2.0),
            (50.0, 0.0, 0.0, 0.0),
        ] {
            let q = weighted_rate(p, late, f1, f0);
            let steps =
                p * (1.0 - q) * q + late * (q - 1.0) + (f0 + 0.5) * q + (f1 + 0.5) * (q - 1.0);
            assert!(steps.abs() < 1e-6 * (p + late + f0 + f1), "{steps}");
            assert!((0.0..1.0).contains(&q));
        }
        // Plain final rows beside: they count as for any target.
        let q = weighted_rate(100.0, 5.0, 10.0, 90.0);
        assert!(q > 0.05 && q < 0.1, "{q}");
        // A pure early target: about L/P, not L/(L+F) of matured rows.
        let q = weighted_rate(1000.0, 50.0, 0.0, 0.0);
        assert!((q - 0.05).abs() < 0.001, "{q}");
    }

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
    fn a_state_at_the_edge_of_binary32_stays_finite() {
        // What many rows of the largest admitted values lead to: n and z
        // as large as binary32 holds. Further rows, rows outside the rule
        // and a grid of settings at their bounds must keep every number finite.
        let edge = |m: &Ftrl| {
            let mut t = m.to_target("t", serde_json::Value::Null);
            // z as large as binary32 holds, n huge or next to nothing (a
            // hand-made file's, or one many extreme rows made).
            t.state = (0..8)
                .map(|i| {
                    let z = if i % 2 == 0 { 3e38 } else { -3e38 };
                    (i, z, if i < 4 { 3e38 } else { 1e-30 })
                })
                .collect();
            t
        };
        let at = |alpha: f64, beta: f64, l2: f64| Params {
            alpha,
            beta,
            l1: 0.0,
            l2,
        };
        let settings = vec![
            at(ALPHA_MIN, 0.0, DEN_MIN),
            at(1.0 / ALPHA_MIN, 0.0, DEN_MIN),
            at(1.0 / ALPHA_MIN, PARAM_MAX, PARAM_MAX),
            Params::default(),
        ];
        for p in settings {
            let mut m = Ftrl::from_target(&edge(&Ftrl::new(p, 17)), 17);
            for k in 0..2000u32 {
                let v = match k % 5 {
                    0 => 1e15,
                    1 => -1e15,
                    2 => f32::NAN,
                    3 => f32::INFINITY,
                    _ => 1e-30,
                };
                let x = [(k % 8, v), ((k + 3) % 8, -v), (16, 1.0)];
                let p = m.learn(&x, k % 3 == 0);
                assert!((0.0..=1.0).contains(&p), "{p}");
            }
            let t = m.to_target("t", serde_json::Value::Null);
            assert_eq!(t.non_finite(), None, "{p:?}");
        }
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

    fn stream(seed: u64, rows: usize) -> Vec<(Vec<(u32, f32)>, bool)> {
        let mut rng = seed;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        (0..rows)
            .map(|_| {
                let mut x: Vec<(u32, f32)> = (0..6).map(|_| ((next() % 200) as u32, 1.0)).collect();
                x.push((200, (next() % 7) as f32 / 3.0));
                let y = next() % 20 < u64::from(x[0].0 % 5) + 1;
                (x, y)
            })
            .collect()
    }

    /// Four settings and the label rate alone.
    fn settings() -> Vec<Params> {
        let mut s: Vec<Params> = [(0.02, 1.0), (0.1, 1.0), (0.5, 1.0), (0.1, 20.0)]
            .map(|(alpha, l2)| Params {
                alpha,
                l2,
                ..Params::default()
            })
            .to_vec();
        s.push(Params::default().rate_only());
        s
    }

    #[test]
    fn every_setting_of_a_grid_learns_as_it_would_alone() {
        let rows = stream(7, 3000);
        let mut grid = Ftrl::grid(settings(), 1, 500.0, 201);
        let mut alone: Vec<Ftrl> = settings().into_iter().map(|p| Ftrl::new(p, 201)).collect();
        for (x, y) in &rows {
            grid.predict(x);
            let each: Vec<f64> = alone.iter_mut().map(|m| m.learn(x, *y)).collect();
            assert_eq!(grid.p, each);
            grid.update(x, *y);
        }
        for (j, m) in alone.iter().enumerate() {
            assert_eq!(grid.states()[j], m.states()[0]);
        }
    }

    #[test]
    fn predicts_with_the_setting_of_lowest_decayed_loss() {
        // A strong signal: the label rate is 5 % to 85 % by the first index.
        let rows: Vec<_> = stream(11, 6000)
            .into_iter()
            .enumerate()
            .map(|(i, (x, _))| {
                let y = ((i * 2_654_435_761) >> 7) % 20 < 4 * (x[0].0 as usize % 5) + 1;
                (x, y)
            })
            .collect();
        let half_life = 300.0;
        let mut grid = Ftrl::grid(settings(), 4, half_life, 201);
        let mut alone: Vec<Ftrl> = settings().into_iter().map(|p| Ftrl::new(p, 201)).collect();
        // The rule written out: sums decayed by 2^(-1/half_life) per row; a
        // switch needs a loss lower by 5 nats.
        let d = 0.5f64.powf(1.0 / half_life);
        let (mut loss, mut chosen, mut switches) = ([0f64; 5], 4, 0);
        for (x, y) in &rows {
            let each: Vec<f64> = alone.iter_mut().map(|m| m.learn(x, *y)).collect();
            assert_eq!(grid.learn(x, *y), each[chosen]);
            for (l, p) in loss.iter_mut().zip(&each) {
                let q = p.clamp(1e-15, 1.0 - 1e-15);
                *l = *l * d - if *y { q.ln() } else { (1.0 - q).ln() };
            }
            let best = (0..5).fold(0, |b, j| if loss[j] < loss[b] { j } else { b });
            if best != chosen && loss[best] < loss[chosen] - 5.0 {
                chosen = best;
                switches += 1;
            }
        }
        let c = grid.choice();
        assert_eq!((c.chosen, c.switches), (chosen, switches));
        assert!(
            switches > 0,
            "the stream should make the grid change its mind"
        );
        assert_eq!(grid.params(), settings()[chosen]);
    }

    #[test]
    fn the_rate_alone_predicts_the_online_constant_and_keeps_a_thin_target_on_it() {
        // Labels independent of the features: nothing to learn but the rate.
        let rows: Vec<_> = stream(5, 3000)
            .into_iter()
            .enumerate()
            .map(|(i, (x, _))| (x, (i * 7919) % 50 == 0))
            .collect();
        let mut rate = Ftrl::new(Params::default().rate_only(), 201);
        let mut grid = Ftrl::grid(settings(), 4, 20_000.0, 201);
        let (mut n, mut ones) = (0.0, 0.0);
        for (x, y) in &rows {
            let constant = (ones + 0.5) / (n + 1.0);
            let p = rate.learn(x, *y);
            assert!((p - constant).abs() < 1e-6, "{p} vs {constant}");
            assert_eq!(grid.learn(x, *y), p);
            (n, ones) = (n + 1.0, ones + f64::from(u8::from(*y)));
        }
        let t = grid.to_target("cvr", serde_json::Value::Null);
        assert!(t.weights.is_empty(), "bidders get the rate alone");
        assert!((t.margin - grid.margin()).abs() < 1e-6);
    }

    #[test]
    fn a_grid_resumes_exactly_from_its_checkpoint() {
        let rows = stream(3, 2000);
        let mut a = Ftrl::grid(settings(), 1, 200.0, 201);
        for (x, y) in &rows[..1500] {
            a.learn(x, *y);
        }
        let t = a.to_target("ctr", serde_json::Value::Null);
        assert_eq!((t.alpha, t.l2), (a.params().alpha, a.params().l2));
        let mut b = Ftrl::from_target(&t, 201);
        for (x, y) in &rows[1500..] {
            assert_eq!(a.learn(x, *y), b.learn(x, *y));
        }
        assert_eq!(a.choice(), b.choice());
        // What a bidder scores is the chosen setting's weights.
        let t = a.to_target("ctr", serde_json::Value::Null);
        let (x, _) = &rows[0];
        let s: f32 = t.margin as f32
            + x.iter()
                .map(|&(i, v)| t.weights.iter().find(|w| w.0 == i).map_or(0.0, |w| w.1) * v)
                .sum::<f32>();
        assert!((sigmoid(f64::from(s)) - a.score(x)).abs() < 1e-6);
    }
}
