//! The settings a target tunes over: its own learning rate and L2, each
//! scaled by a few factors, every combination learning side by side, and
//! the label rate alone, which a target predicts until a setting has shown
//! its features do better.

use crate::ftrl::{ALPHA_MIN, DEN_MIN, PARAM_MAX};
use crate::{Ftrl, Params, MAX_SETTINGS};

/// Factors over a target's `alpha` and `l2`, and how fast old rows fade
/// from the loss that picks the setting.
#[derive(Debug, Clone, PartialEq)]
pub struct Grid {
    /// Factors applied to the target's `alpha`.
    pub alpha: Vec<f64>,
    /// Factors applied to the target's `l2`.
    pub l2: Vec<f64>,
    /// Rows after which a row's loss counts half in the choice.
    pub half_life: f64,
    /// Whether a grid of two or more settings also holds the label rate
    /// alone ([`Params::rate_only`]), predicting first.
    pub rate: bool,
}

impl Default for Grid {
    /// Eight settings (one cache line of state per coordinate): `alpha` ×
    /// 1/16, ⅛, ¼, ½, 1, 2, 4 and the label rate alone, chosen on a loss
    /// with a half-life of 20,000 rows (docs/learner.md and
    /// docs/benchmarks.md say why: `l2` mattered far less than `alpha`).
    fn default() -> Grid {
        Grid {
            alpha: vec![0.0625, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0],
            l2: vec![1.0],
            half_life: 20_000.0,
            rate: true,
        }
    }
}

impl Grid {
    /// One setting only: the target's own (no tuning).
    pub fn off() -> Grid {
        Grid {
            alpha: vec![1.0],
            l2: vec![1.0],
            half_life: 20_000.0,
            rate: false,
        }
    }

    /// Settings learning side by side: every combination of the factors,
    /// and the label rate if `rate` and there are several.
    pub fn settings_count(&self) -> usize {
        let n = self.alpha.len() * self.l2.len();
        n + usize::from(self.rate && n > 1)
    }

    /// Checks the grid is usable: positive finite factors, at most
    /// [`MAX_SETTINGS`] combinations, a half-life of at least one row.
    pub fn validate(&self) -> Result<(), String> {
        for (name, list) in [("alpha", &self.alpha), ("l2", &self.l2)] {
            if list.is_empty() {
                return Err(format!(
                    "{name}: at least one factor (1 keeps the target's own)"
                ));
            }
            if let Some(f) = list.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
                return Err(format!("{name}: factors must be positive numbers, got {f}"));
            }
        }
        let n = self.settings_count();
        if n > MAX_SETTINGS {
            return Err(format!(
                "{} alpha factors × {} l2 factors{} = {n} settings; at most {MAX_SETTINGS}",
                self.alpha.len(),
                self.l2.len(),
                if self.rate { " + the label rate" } else { "" },
            ));
        }
        if !(self.half_life.is_finite() && self.half_life >= 1.0) {
            return Err(format!(
                "half_life must be at least 1 row, got {}",
                self.half_life
            ));
        }
        Ok(())
    }

    /// The settings over `base`, `alpha` factor major, then the label rate,
    /// and the index of the one predicting first: the label rate, else the
    /// most cautious (the smallest `alpha`, then the largest `l2`). A target
    /// with few rows so does no worse than its rate while evidence gathers.
    pub fn settings(&self, base: Params) -> (Vec<Params>, usize) {
        let mut out = Vec::with_capacity(self.settings_count());
        let (mut first, mut caution) = (0, (f64::INFINITY, f64::NEG_INFINITY));
        for &a in &self.alpha {
            for &l in &self.l2 {
                if a < caution.0 || (a == caution.0 && l > caution.1) {
                    (first, caution) = (out.len(), (a, l));
                }
                // Held within what `Params::validate` admits, so a factor
                // on a setting near its bound cannot make a state unbounded.
                let alpha = (base.alpha * a).clamp(ALPHA_MIN, 1.0 / ALPHA_MIN);
                let l2 = (base.l2 * l)
                    .clamp(0.0, PARAM_MAX)
                    .max(DEN_MIN - base.beta / alpha);
                out.push(Params { alpha, l2, ..base });
            }
        }
        if self.settings_count() > out.len() {
            first = out.len();
            out.push(base.rate_only());
        }
        (out, first)
    }

    /// A model of `slots` coordinates tuning over this grid around `base`.
    pub fn model(&self, base: Params, slots: usize) -> Ftrl {
        let (settings, first) = self.settings(base);
        Ftrl::grid(settings, first, self.half_life, slots)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_from_the_targets_own_setting() {
        let base = Params::default();
        let (s, first) = Grid::default().settings(base);
        assert_eq!(s.len(), 8);
        assert_eq!((first, s[first]), (7, base.rate_only()));
        assert!(s[first].is_rate_only() && !base.is_rate_only());
        assert!(s.contains(&base));
        assert_eq!((s[0].alpha, s[6].alpha), (0.00625, 0.4));
        let (s, first) = Grid::off().settings(base);
        assert_eq!((s, first), (vec![base], 0));
        // Without the rate, the most cautious setting predicts first.
        let g = Grid {
            alpha: vec![1.0, 0.25],
            l2: vec![1.0, 16.0],
            rate: false,
            ..Grid::default()
        };
        let (s, first) = g.settings(base);
        assert_eq!((s.len(), s[first].alpha, s[first].l2), (4, 0.025, 16.0));
        // One setting is no tuning: no rate beside it.
        let one = Grid {
            rate: true,
            ..Grid::off()
        };
        assert_eq!(one.settings(base), (vec![base], 0));
    }

    #[test]
    fn refuses_what_it_cannot_run() {
        let g = |alpha: Vec<f64>, l2: Vec<f64>, half_life| Grid {
            alpha,
            l2,
            half_life,
            rate: true,
        };
        assert!(g(vec![], vec![1.0], 10.0).validate().is_err());
        assert!(g(vec![0.0], vec![1.0], 10.0).validate().is_err());
        assert!(g(vec![1.0; 5], vec![1.0; 4], 10.0).validate().is_err());
        assert!(g(vec![1.0], vec![1.0], 0.5).validate().is_err());
        // Eight combinations and the rate are nine.
        assert!(g(vec![1.0; 4], vec![1.0; 2], 10.0).validate().is_err());
        assert!(g(vec![1.0; 7], vec![1.0], 10.0).validate().is_ok());
        assert!(Grid::default().validate().is_ok());
    }
}
