//! The market's install delays and its shift: how long after its click a
//! transaction installs, as a function of the bid's features, and what
//! changes for a fifth of the apps from a chosen event time on.
//!
//! **Delays.** The delay from click to install is a mixture of exponentials
//! (weights `w_k`, means `m_k` in units of the short install window `S`),
//! every mean times the bid's delay scale
//! `s = exp(a_app + b_exchange)`: `a` is each app's, uniform in ±0.7, `b`
//! each exchange's, the five exchanges getting −0.5, −0.25, 0, 0.25 and 0.5
//! in an order drawn from the seed (the slowest exchange's delays are e ≈
//! 2.7 times the fastest's). Two presets ([`Delays`]):
//!
//! - `default`: one exponential of mean `S / 2.3`: about 85% of installs in
//!   the short window (90% at `s = 1`, from 99% to 65% across scales), so
//!   `cvr_long / cvr_short` ranges from nearly 0 to about 1 by app and
//!   exchange.
//! - `criteo`: shaped like Criteo's conversion logs (a third within the
//!   hour, half within a day, a month's tail), scaled so that the short
//!   window is about half a day: weights 0.2, 0.4, 0.4 with means `S/30`,
//!   `2·S` and `6·S`. About 58% of installs land after the short window and,
//!   with the demo's windows (long = 3 × short), about a third after the
//!   long one.
//!
//! **Shift.** From `shift_at` on (by the transaction's creation time), a
//! fixed fifth of the apps (drawn from the seed) change ([`Shift`]):
//! `propensity` adds [`SHIFT_LOGIT`] to their install logit; `delays`
//! multiplies their delay scale by [`SHIFT_DELAY_FACTOR`].
//!
//! The model's draws come from a stream of their own; the market draws
//! each transaction's install (whether, when) from a stream seeded by its
//! txid, so a shift changes the shifted apps' installs and nothing else.

use std::fmt;
use std::str::FromStr;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use crate::truth::{click_then_install, within};

/// The install delay preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Delays {
    /// One exponential of mean `install_short / 2.3`, scaled by app and exchange.
    #[default]
    Default,
    /// Criteo-like: most installs after the short window, a tail past the long one.
    Criteo,
}

/// What changes for a fifth of the apps at the market's shift.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Shift {
    /// Their install logit gains [`SHIFT_LOGIT`].
    #[default]
    Propensity,
    /// Their install delays are [`SHIFT_DELAY_FACTOR`] times as long.
    Delays,
}

/// What [`Shift::Propensity`] adds to a shifted app's install logit.
pub const SHIFT_LOGIT: f64 = 1.5;
/// What [`Shift::Delays`] multiplies a shifted app's install delays by.
pub const SHIFT_DELAY_FACTOR: f64 = 2.0;

/// Half the range of an app's log delay scale.
const APP_SPREAD: f32 = 0.7;
/// The exchanges' log delay scales, in an order drawn from the seed.
const EXCHANGE_SCALES: [f64; 5] = [-0.5, -0.25, 0.0, 0.25, 0.5];

impl Delays {
    /// The preset's names, as `FromStr` reads them.
    pub const NAMES: [&'static str; 2] = ["default", "criteo"];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Delays::Default => "default",
            Delays::Criteo => "criteo",
        }
    }

    /// Weights and means in units of the short install window.
    fn shape(self) -> &'static [(f64, f64)] {
        match self {
            Delays::Default => &[(1.0, 1.0 / 2.3)],
            Delays::Criteo => &[(0.2, 1.0 / 30.0), (0.4, 2.0), (0.4, 6.0)],
        }
    }
}

impl Shift {
    /// The kinds' names, as `FromStr` reads them.
    pub const NAMES: [&'static str; 2] = ["propensity", "delays"];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Shift::Propensity => "propensity",
            Shift::Delays => "delays",
        }
    }
}

impl FromStr for Delays {
    type Err = String;
    fn from_str(s: &str) -> Result<Delays, String> {
        match s {
            "default" => Ok(Delays::Default),
            "criteo" => Ok(Delays::Criteo),
            _ => Err(format!("{s:?} is not a delay preset: default or criteo")),
        }
    }
}

impl FromStr for Shift {
    type Err = String;
    fn from_str(s: &str) -> Result<Shift, String> {
        match s {
            "propensity" => Ok(Shift::Propensity),
            "delays" => Ok(Shift::Delays),
            _ => Err(format!("{s:?} is not a shift: propensity or delays")),
        }
    }
}

impl fmt::Display for Delays {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Shift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One transaction's install delay distribution: a mixture of
/// exponentials, `(weight, mean ms)` each, weights summing to 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mixture {
    parts: [(f64, f64); 3],
    n: usize,
}

impl Mixture {
    /// The components, `(weight, mean ms)`.
    pub fn parts(&self) -> &[(f64, f64)] {
        &self.parts[..self.n]
    }

    /// The mean delay, ms.
    pub fn mean(&self) -> f64 {
        self.parts().iter().map(|(w, m)| w * m).sum()
    }

    /// A delay drawn from one uniform `u` in `[0, 1)`: the component whose
    /// share of `[0, 1)` holds `u`, then `u` rescaled within that share as
    /// the exponential's own uniform (one draw, whatever the mixture).
    pub fn sample(&self, u: f64) -> f64 {
        let mut below = 0.0;
        for (k, &(w, m)) in self.parts().iter().enumerate() {
            if u < below + w || k + 1 == self.n {
                let v = ((u - below) / w).clamp(0.0, 1.0);
                return -m * (1.0 - v).max(f64::MIN_POSITIVE).ln();
            }
            below += w;
        }
        unreachable!("a mixture has a component")
    }

    /// P(a delay from `from` lands at or before `until`).
    pub fn within(&self, from: i64, until: i64) -> f64 {
        self.parts()
            .iter()
            .map(|&(w, m)| w * within(m, from, until))
            .sum()
    }

    /// P(a click delay of mean `click_mean` lands within `click_by` and
    /// then this delay within `install_by`), both from the impression: the
    /// components' `truth::click_then_install`, weighted (exact).
    pub fn click_then_install(&self, click_mean: f64, click_by: f64, install_by: f64) -> f64 {
        self.parts()
            .iter()
            .map(|&(w, m)| w * click_then_install(click_mean, click_by, m, install_by))
            .sum()
    }
}

/// What the market knows of a transaction's install beyond its propensity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Install {
    /// Its delay from click to install.
    pub delay: Mixture,
    /// What the shift adds to its install logit (0 if none).
    pub logit: f64,
}

/// The delay model and the shift of one market, fixed by its seed.
#[derive(Debug, Clone)]
pub struct DelayModel {
    /// Component weights and means (ms) at delay scale 1.
    base: Mixture,
    /// Each app's log delay scale.
    app: Vec<f32>,
    /// Each exchange's log delay scale.
    exchange: Vec<f64>,
    /// Whether each app is among the fifth the shift changes.
    shifted: Vec<bool>,
    /// The shift's event time (ms since the epoch) and kind.
    shift: Option<(i64, Shift)>,
}

impl DelayModel {
    /// The model of a market with seed `seed`, `apps` apps and `exchanges`
    /// exchanges (at most five), delays scaled to `install_short_ms`,
    /// shifting at an event time (ms since the epoch), if any.
    pub fn new(
        seed: u64,
        preset: Delays,
        install_short_ms: i64,
        (apps, exchanges): (usize, usize),
        shift: Option<(i64, Shift)>,
    ) -> DelayModel {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0xde1a_5ca1e);
        let shape = preset.shape();
        let mut base = Mixture {
            parts: [(0.0, 1.0); 3],
            n: shape.len(),
        };
        for (p, &(w, m)) in base.parts.iter_mut().zip(shape) {
            *p = (w, m * install_short_ms.max(1) as f64);
        }
        let app = (0..apps)
            .map(|_| rng.random_range(-APP_SPREAD..APP_SPREAD))
            .collect();
        let mut exchange = EXCHANGE_SCALES[..exchanges].to_vec();
        shuffle(&mut rng, &mut exchange);
        let mut order: Vec<usize> = (0..apps).collect();
        shuffle(&mut rng, &mut order);
        let mut shifted = vec![false; apps];
        for &a in &order[..apps / 5] {
            shifted[a] = true;
        }
        DelayModel {
            base,
            app,
            exchange,
            shifted,
            shift,
        }
    }

    /// The install of a transaction of `app` on `exchange` created at
    /// `created` (ms since the epoch).
    pub fn install(&self, app: u32, exchange: u32, created: i64) -> Install {
        let mut scale = self.scale(app, exchange);
        let mut logit = 0.0;
        match self.shift {
            Some((_, Shift::Propensity)) if self.is_shifted(app, created) => logit = SHIFT_LOGIT,
            Some((_, Shift::Delays)) if self.is_shifted(app, created) => {
                scale *= SHIFT_DELAY_FACTOR
            }
            _ => {}
        }
        let mut delay = self.base;
        delay.parts.iter_mut().for_each(|p| p.1 *= scale);
        Install { delay, logit }
    }

    /// The delay scale of `app` on `exchange`, before any shift.
    pub fn scale(&self, app: u32, exchange: u32) -> f64 {
        (f64::from(self.app[app as usize]) + self.exchange[exchange as usize]).exp()
    }

    /// Whether `app` is among the shifted fifth (whether or not the market shifts).
    pub fn in_shifted_fifth(&self, app: u32) -> bool {
        self.shifted[app as usize]
    }

    /// Whether a transaction of `app` created at `created` is shifted.
    pub fn is_shifted(&self, app: u32, created: i64) -> bool {
        self.shift.is_some_and(|(at, _)| created >= at) && self.in_shifted_fifth(app)
    }
}

/// Fisher–Yates, from the back.
fn shuffle<T>(rng: &mut SmallRng, xs: &mut [T]) {
    for i in (1..xs.len()).rev() {
        xs.swap(i, rng.random_range(0..=i));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 600_000;

    fn model(preset: Delays, shift: Option<(i64, Shift)>) -> DelayModel {
        DelayModel::new(7, preset, S, (2000, 5), shift)
    }

    #[test]
    fn names_read_back() {
        for d in [Delays::Default, Delays::Criteo] {
            assert_eq!(d.name().parse::<Delays>(), Ok(d));
            assert!(Delays::NAMES.contains(&d.name()));
        }
        for s in [Shift::Propensity, Shift::Delays] {
            assert_eq!(s.to_string().parse::<Shift>(), Ok(s));
            assert!(Shift::NAMES.contains(&s.name()));
        }
        assert!("fast".parse::<Delays>().is_err());
        assert!("Delays".parse::<Shift>().is_err());
    }

    #[test]
    fn the_model_is_a_function_of_the_seed() {
        let (a, b) = (model(Delays::Criteo, None), model(Delays::Criteo, None));
        assert_eq!(
            (&a.app, &a.exchange, &a.shifted),
            (&b.app, &b.exchange, &b.shifted)
        );
        let c = DelayModel::new(8, Delays::Criteo, S, (2000, 5), None);
        assert_ne!(a.app, c.app);
        assert_ne!(a.shifted, c.shifted);
        let mut e = a.exchange.clone();
        e.sort_by(f64::total_cmp);
        assert_eq!(e, EXCHANGE_SCALES);
    }

    #[test]
    fn a_fifth_of_the_apps_shift_and_only_from_shift_at() {
        let at = 1_000_000;
        let m = model(Delays::Default, Some((at, Shift::Delays)));
        let fifth: Vec<u32> = (0..2000).filter(|&a| m.in_shifted_fifth(a)).collect();
        assert_eq!(fifth.len(), 400);
        let (a, other) = (
            fifth[0],
            (0..2000).find(|&a| !m.in_shifted_fifth(a)).unwrap(),
        );
        let mean = |app, t| m.install(app, 2, t).delay.mean();
        assert_eq!(mean(a, at - 1), mean(a, at - 1_000));
        assert!((mean(a, at) / mean(a, at - 1) - SHIFT_DELAY_FACTOR).abs() < 1e-12);
        assert_eq!(mean(other, at), mean(other, at - 1));
        assert_eq!(m.install(a, 2, at).logit, 0.0);
        let p = model(Delays::Default, Some((at, Shift::Propensity)));
        assert_eq!(p.install(a, 2, at).logit, SHIFT_LOGIT);
        assert_eq!(p.install(a, 2, at - 1).logit, 0.0);
        assert_eq!(p.install(other, 2, at).logit, 0.0);
        assert_eq!(p.install(a, 2, at).delay, p.install(a, 2, at - 1).delay);
        // Without a shift nobody is shifted.
        assert!(!model(Delays::Default, None).is_shifted(a, i64::MAX));
    }

    #[test]
    fn the_presets_have_the_documented_means() {
        let d = model(Delays::Default, None);
        let s = d.scale(3, 1);
        assert!((d.install(3, 1, 0).delay.mean() - s * S as f64 / 2.3).abs() < 1e-6);
        let c = model(Delays::Criteo, None);
        let want = (0.2 / 30.0 + 0.4 * 2.0 + 0.4 * 6.0) * S as f64 * c.scale(3, 1);
        assert!((c.install(3, 1, 0).delay.mean() - want).abs() < 1e-6);
        let w: f64 = c.base.parts().iter().map(|p| p.0).sum();
        assert!((w - 1.0).abs() < 1e-12);
    }

    #[test]
    fn sampling_follows_the_mixture() {
        // Uniforms on a fine grid: the sampled delays' distribution is the
        // mixture's, at every quantile checked.
        let mix = model(Delays::Criteo, None).install(5, 0, 0).delay;
        let n = 200_000;
        let mut xs: Vec<f64> = (0..n)
            .map(|i| mix.sample((f64::from(i) + 0.5) / f64::from(n)))
            .collect();
        xs.sort_by(f64::total_cmp);
        for q in [0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.99] {
            let x = xs[(q * f64::from(n)) as usize];
            let cdf = mix.within(0, x as i64);
            assert!((cdf - q).abs() < 1e-3, "quantile {q}: cdf {cdf}");
        }
        let mean = xs.iter().sum::<f64>() / f64::from(n);
        assert!(
            (mean / mix.mean() - 1.0).abs() < 0.01,
            "{mean} vs {}",
            mix.mean()
        );
        assert!(mix.sample(0.999_999_999_999).is_finite());
    }

    #[test]
    fn click_then_install_of_a_mixture_is_its_integral() {
        // Midpoint rule over the click's time, against the weighted closed form.
        let mix = model(Delays::Criteo, None).install(9, 4, 0).delay;
        let (cm, cb, ib) = (15_000.0, 300_000.0, 1_800_000.0);
        let steps = 200_000;
        let dt = cb / f64::from(steps);
        let numeric: f64 = (0..steps)
            .map(|i| {
                let t = (f64::from(i) + 0.5) * dt;
                let cdf: f64 = mix
                    .parts()
                    .iter()
                    .map(|&(w, m)| w * (1.0 - (-(ib - t) / m).exp()))
                    .sum();
                (-t / cm).exp() / cm * cdf * dt
            })
            .sum();
        let closed = mix.click_then_install(cm, cb, ib);
        assert!((numeric - closed).abs() < 1e-6, "{numeric} vs {closed}");
        assert!(closed > 0.1 && closed < 0.9, "{closed}");
    }
}
