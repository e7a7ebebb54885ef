//! Which of a grid's settings predicts: each setting's progressive loss,
//! decayed, and for a target learned early the members between their
//! provisional row and their matured one (docs/learner.md).

/// The most settings one model learns side by side (a cell of 8 lanes of z
/// and n is one 64-byte cache line).
pub const MAX_SETTINGS: usize = 8;
// A checkpoint with more candidates is refused as it is read.
const _: () = assert!(MAX_SETTINGS == tidemark_checkpoint::MAX_CANDIDATES);

/// Which setting predicts: decayed progressive logloss per setting.
#[derive(Debug, Clone)]
pub(crate) struct Tuner {
    pub(crate) half_life: f64,
    pub(crate) decay: f64,
    pub(crate) decayed_rows: f64,
    pub(crate) loss: Vec<f64>,
    pub(crate) chosen: usize,
    pub(crate) switches: u64,
    pub(crate) last_switch: Option<u64>,
    /// An early target's members between their provisional row and their
    /// matured one: each setting's prediction at the provisional row, to be
    /// scored against the final label when it comes (docs/learner.md).
    /// At most [`PENDING_MAX`]; the oldest go first. Not checkpointed: the
    /// members in flight at a restart are not counted.
    pub(crate) pending: std::collections::HashMap<u64, Kept>,
    pub(crate) order: std::collections::VecDeque<u64>,
}

/// The most members an early target's tuning remembers (about 48 bytes
/// each).
pub const PENDING_MAX: usize = 1 << 17;

/// What is remembered of a member at its provisional row: each setting's
/// prediction, and the one served (the chosen setting's).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kept {
    p: [f32; MAX_SETTINGS],
    served: f32,
}

/// Another setting takes over only once its decayed loss is lower by this
/// many nats: the recent rows are e^5 ≈ 150 times likelier under it. On a
/// thin target the settings' differences are noise for thousands of rows,
/// and every switch made on noise costs; on a common one real differences
/// reach this within a few hundred rows.
const SWITCH_NATS: f64 = 5.0;

impl Tuner {
    pub(crate) fn new(k: usize, chosen: usize, half_life: f64) -> Tuner {
        Tuner {
            half_life,
            decay: 0.5f64.powf(1.0 / half_life.max(1.0)),
            decayed_rows: 0.0,
            loss: vec![0.0; k],
            chosen,
            switches: 0,
            last_switch: None,
            pending: Default::default(),
            order: Default::default(),
        }
    }

    /// Remembers each setting's prediction `p` for `member`'s provisional row.
    pub(crate) fn remember(&mut self, member: u64, p: &[f64]) {
        let mut kept = Kept {
            p: [0f32; MAX_SETTINGS],
            served: p[self.chosen] as f32,
        };
        for (k, p) in kept.p.iter_mut().zip(p) {
            *k = *p as f32;
        }
        self.pending.insert(member, kept);
        self.order.push_back(member);
        while self.pending.len() > PENDING_MAX {
            let oldest = self
                .order
                .pop_front()
                .expect("every pending member is in order");
            self.pending.remove(&oldest);
        }
        if self.order.len() > 2 * PENDING_MAX {
            // Members that matured left their keys behind: drop them.
            let pending = &self.pending;
            self.order.retain(|m| pending.contains_key(m));
        }
    }

    /// Scores a matured row of an early target: each setting's prediction
    /// at its member's provisional row, against its final label (when the
    /// grid has several). Returns the prediction served then (`None`: the
    /// member is not remembered).
    pub(crate) fn matured(&mut self, member: u64, y: bool, row: u64) -> Option<f64> {
        let kept = self.pending.remove(&member)?;
        if self.loss.len() > 1 {
            let p = kept.p.map(f64::from);
            self.add(&p[..self.loss.len()], y, row);
        }
        Some(f64::from(kept.served))
    }

    /// Counts one row's predictions `p` against `y`; `row` is its number.
    pub(crate) fn add(&mut self, p: &[f64], y: bool, row: u64) {
        self.decayed_rows = self.decayed_rows * self.decay + 1.0;
        for (l, &p) in self.loss.iter_mut().zip(p) {
            let q = p.clamp(1e-15, 1.0 - 1e-15);
            *l = *l * self.decay - if y { q.ln() } else { (1.0 - q).ln() };
        }
        let (best, &low) = self
            .loss
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .expect("at least one setting");
        if best != self.chosen && low < self.loss[self.chosen] - SWITCH_NATS {
            self.chosen = best;
            self.switches += 1;
            self.last_switch = Some(row);
        }
    }
}
