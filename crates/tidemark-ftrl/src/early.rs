//! Rows of a target learned early (SPEC 5, v1.3) and the weights that keep
//! a learner unbiased for the target's final label. `docs/learner.md` has
//! the derivation; in short:
//!
//! Each member of an early target's population arrives twice: a
//! `provisional` 0 when its window starts, then a `late` 1 (its event came,
//! with probability `q`, the final label's rate) or a `final` 0. Learning
//! logistic loss with weight `w` on a row moves the logit by `w · (p − y)`.
//! Over one member, in expectation, with weights `a` (provisional), `b`
//! (late) and `c` (final):
//!
//! `a·p + q·b·(p − 1) + (1 − q)·c·p`
//!
//! which vanishes at `p = q` exactly when `a = (1 − q)·(b − c)`. Tidemark
//! takes `b = 1`, `c = 0`, so `a = 1 − q`, with the learner's own prediction
//! `p` for `q`: provisional `1 − p`, late `1`, final `0` (the member's zero
//! was learned, weighed, at its start). The expectation is then
//! `(p − q)·(1 − p)`: zero at `q`, of the sign that moves `p` toward `q`
//! from either side; every weight lies in `[0, 1]`, and a member weighs
//! about one row in all, as it would with its final label alone.
//! Unweighted, it is `2p − q`, which settles at `q / 2`: provisional zeros
//! taken at face value halve the rate. Unweighted and without the final
//! zeros it is `p + q·(p − 1)`, settling at `q / (1 + q)`: nearly `q` for a
//! rare label.
//!
//! A target is early while it has provisional rows and no `final` 1 (an
//! early target's final rows are all 0): a `final` 1 means its shard now
//! emits final labels only, and its final rows weigh 1 again.

/// What an observation is (the `kind` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A matured label: every row of a target learned from final labels,
    /// and an early target's `final` 0.
    Final,
    /// An early target's label 0 at its window's start.
    Provisional,
    /// An early target's label 1, when its event arrived.
    Late,
}

impl Kind {
    /// The `kind` column's spelling, or `None`.
    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "final" => Some(Kind::Final),
            "provisional" => Some(Kind::Provisional),
            "late" => Some(Kind::Late),
            _ => None,
        }
    }

    /// As the `kind` column spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Final => "final",
            Kind::Provisional => "provisional",
            Kind::Late => "late",
        }
    }

    /// The weight of a row of this kind learned at prediction `p`; `early`:
    /// its target is learned early, so a `final` row is a zero its
    /// provisional row already counted.
    #[inline]
    pub fn weight(self, p: f64, early: bool) -> f64 {
        match self {
            Kind::Final if early => 0.0,
            Kind::Final | Kind::Late => 1.0,
            Kind::Provisional => 1.0 - p,
        }
    }

    /// Whether the row carries a final label (`late` or `final`): what
    /// metrics, the tuning and the label rate are counted on. A provisional
    /// zero says only that the label is not known yet.
    #[inline]
    pub fn matured(self) -> bool {
        self != Kind::Provisional
    }
}

/// The rate `p` in `[0, 1]` solving `P·(1 − p)·p + L·(p − 1) + F0·p +
/// F1·(p − 1) = 0` with ½ added to `F0` and `F1` (see [`crate::Ftrl::margin`]):
/// the smaller root of `P·p² − b·p + c = 0`, written without cancellation.
pub(crate) fn weighted_rate(p: f64, late: f64, f1: f64, f0: f64) -> f64 {
    let (f0, f1) = (f0 + 0.5, f1 + 0.5);
    let b = p + late + f0 + f1;
    let c = late + f1;
    let disc = (b * b - 4.0 * p * c).max(0.0);
    (2.0 * c / (b + disc.sqrt())).clamp(1e-9, 1.0 - 1e-9)
}

/// One row's label and kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// 0 or 1.
    pub label: bool,
    /// See [`Kind`].
    pub kind: Kind,
    /// Which member of the target's population it is ([`member`] of its
    /// txid), if known: an early target's provisional row and its matured
    /// row then meet again in the tuning (`docs/learner.md`).
    pub member: Option<u64>,
}

impl Row {
    /// A matured row of a target learned from final labels.
    pub fn plain(label: bool) -> Row {
        Row::of(label, Kind::Final)
    }

    /// A row of `kind`, its member unknown.
    pub fn of(label: bool, kind: Kind) -> Row {
        Row {
            label,
            kind,
            member: None,
        }
    }

    /// This row, of the member whose transaction is `txid`.
    pub fn member(self, txid: &str) -> Row {
        Row {
            member: Some(member(txid)),
            ..self
        }
    }
}

/// A member's key: FNV-1a of its txid (a transaction's rows of one target
/// are one member).
pub fn member(txid: &str) -> u64 {
    txid.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The expected logit step over one member at prediction `p` when the
    /// final label's rate is `q`.
    fn expected_step(p: f64, q: f64) -> f64 {
        let g = |k: Kind, y: f64| k.weight(p, true) * (p - y);
        g(Kind::Provisional, 0.0) + q * g(Kind::Late, 1.0) + (1.0 - q) * g(Kind::Final, 0.0)
    }

    #[test]
    fn the_expected_step_vanishes_at_the_final_rate_and_points_to_it() {
        for qi in 0..=100 {
            let q = f64::from(qi) / 100.0;
            assert!(expected_step(q, q).abs() < 1e-12, "{q}");
            for pi in 0..=100 {
                let p = f64::from(pi) / 100.0;
                let s = expected_step(p, q);
                assert!((s - (p - q) * (1.0 - p)).abs() < 1e-12);
                // A positive step lowers the logit: toward q from either side.
                assert!(p <= q || p == 1.0 || s > 0.0, "{p} {q}");
                assert!(p >= q || s < 0.0, "{p} {q}");
            }
        }
        for k in [Kind::Final, Kind::Provisional, Kind::Late] {
            for p in [0.0, 0.3, 1.0] {
                assert!((0.0..=1.0).contains(&k.weight(p, true)));
            }
            assert_eq!(
                k.weight(0.3, false),
                if k == Kind::Provisional { 0.7 } else { 1.0 }
            );
            assert_eq!(Kind::parse(k.as_str()), Some(k));
        }
        assert_eq!(Kind::parse("Final"), None);
    }

    /// Members of two groups (final rates 0.1 and 0.4) stream in: each a
    /// provisional 0, then its late 1 after a random delay or its final 0
    /// at the window's end, rows in time order. Returns each group's
    /// prediction at the end, from a model learning every row as `as_kind`
    /// says (`None`: not at all).
    fn stream(as_kind: impl Fn(Kind) -> Option<Kind>) -> [f64; 2] {
        let q = [0.1, 0.4];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        let (window, n) = (500u64, 60_000u64);
        let mut rows: Vec<(u64, usize, Row)> = Vec::new();
        for t in 0..n {
            let g = (t % 2) as usize;
            rows.push((t, g, Row::of(false, Kind::Provisional)));
            if next() < q[g] {
                let at = t + (next() * window as f64) as u64;
                rows.push((at, g, Row::of(true, Kind::Late)));
            } else {
                rows.push((t + window, g, Row::of(false, Kind::Final)));
            }
        }
        rows.sort_by_key(|r| r.0);
        let mut m = crate::Ftrl::new(crate::Params::default(), 16);
        for (_, g, row) in rows {
            let Some(kind) = as_kind(row.kind) else {
                continue;
            };
            let row = Row { kind, ..row };
            m.learn_row(&[(g as u32, 1.0)], row);
        }
        [m.score(&[(0, 1.0)]), m.score(&[(1, 1.0)])]
    }

    #[test]
    fn a_model_learning_weighted_early_rows_predicts_the_final_rate() {
        let [a, b] = stream(Some);
        assert!((a - 0.1).abs() < 0.02 && (b - 0.4).abs() < 0.03, "{a} {b}");
        // Taken at face value, provisional zeros halve the rates: the test
        // tells the two apart.
        let [a, b] = stream(|_| Some(Kind::Final));
        assert!(a < 0.07 && b < 0.3, "{a} {b}");
    }

    #[test]
    fn fake_negatives_never_corrected_settle_at_q_over_one_plus_q() {
        // The demo's `naive` arm: provisional zeros and late ones at face
        // value, no final rows. Nearly q for a rare label, not q / 2.
        let [a, b] = stream(|k| (k != Kind::Final).then_some(Kind::Final));
        let settled = |q: f64| q / (1.0 + q);
        assert!((a - settled(0.1)).abs() < 0.015, "{a}");
        // At 0.4, q / (1 + q) is 0.286: this tells it from q and from q / 2.
        assert!((b - settled(0.4)).abs() < 0.03, "{b}");
    }
}
