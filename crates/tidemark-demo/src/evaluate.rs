//! Scoring the run against the market's truth: the observations replayed in
//! emission order through the learner's own configuration (progressive
//! validation: each row predicted before it is learned), once with every
//! feature, once without what the bidder read from the profiles and once
//! without what came from their counters only, beside the truth's
//! probability of each row and two constant-rate baselines: the label rate
//! in hindsight, and the running label rate predicted before each row (what
//! an online learner with no features would do). `p_install`, the figure a
//! bidder prices, is scored too: over impressions, each `ctr` row predicted
//! `ctr × (cvr_short + cvr_long)` from the same pass before it is learned,
//! labelled 1 when its transaction installed within the long window (only
//! impressions swept past that window, whose outcome is known, and emitted
//! once both install models exist).

use std::collections::BTreeMap;

use crate::store::Scored;
use serde_json::{Map, Value};
use tidemark_ftrl::{Kind, Models, Params, Row};
use tidemark_learner::Config;

/// One decile of predictions (equal row counts, by predicted probability).
#[derive(Debug, Clone, PartialEq)]
pub struct Decile {
    /// Rows in it.
    pub rows: usize,
    /// Mean predicted probability.
    pub predicted: f64,
    /// Share of labels that are 1.
    pub observed: f64,
}

/// A target's figures.
#[derive(Debug, Clone, Default)]
pub struct TargetEval {
    /// Observations.
    pub rows: usize,
    /// Share labelled 1.
    pub label_rate: f64,
    /// The learner's progressive logloss and AUC.
    pub logloss: f64,
    /// See `logloss`.
    pub auc: f64,
    /// The same learner, without the profile features.
    pub without_profiles_logloss: f64,
    /// The same learner, without what came from the profile counters only
    /// (the bidder's rate, and the counts it sent; `person` kept).
    pub without_counters_logloss: f64,
    /// The truth's logloss on the rows it knows (the floor), and on how many.
    pub truth_logloss: Option<f64>,
    /// Rows the truth knows.
    pub truth_rows: usize,
    /// Predicting the label rate for every row (in hindsight).
    pub baseline_logloss: f64,
    /// Predicting before each row the label rate of the rows before it
    /// (starting from one half), as an online learner without features.
    pub online_baseline_logloss: f64,
    /// Share of the baseline-to-truth gap the learner closes.
    pub gap_closed: Option<f64>,
    /// Predicted vs observed by decile of the learner's predictions, over
    /// the second half of the rows: the model once warmed up, as a bidder
    /// loads it.
    pub calibration: Vec<Decile>,
    /// The same over every row, the warm-up included.
    pub calibration_all: Vec<Decile>,
    /// `calibration` of the learner without the profile features.
    pub calibration_without: Vec<Decile>,
    /// Per slice of emission time: (seconds since the demo started, rows,
    /// learner's logloss, without profiles, truth's).
    pub over_time: Vec<(f64, usize, f64, f64, f64)>,
    /// The learner's setting at the end, and when it changed.
    pub tuning: Option<Tuned>,
}

/// What a self-tuning target chose during the replay.
#[derive(Debug, Clone, Default)]
pub struct Tuned {
    /// The setting predicting at the end.
    pub chosen: Params,
    /// Settings in the grid.
    pub settings: usize,
    /// Each change: (seconds since the demo started, the target's row, the
    /// setting taking over).
    pub switches: Vec<(f64, usize, Params)>,
}

/// Per-row results of one target's replay.
#[derive(Default)]
struct Rows {
    tuned: Option<Tuned>,
    p: Vec<f64>,
    without: Vec<f64>,
    no_counters: Vec<f64>,
    truth: Vec<Option<f64>>,
    label: Vec<bool>,
    emitted_ms: Vec<i64>,
}

/// Replays `rows` through `config`'s learner with the features named in
/// `profile`, without them, and without those of them named in `counters`;
/// times are reported from `t0_ms`.
pub fn evaluate(
    rows: &[Scored],
    config: &Config,
    (profile, counters): (&[String], &[String]),
    t0_ms: i64,
) -> anyhow::Result<BTreeMap<String, TargetEval>> {
    let models = || {
        Models::new(config.hashing.clone(), config.window)
            .with_grid(config.grid.clone())
            .with_pools(&config.pools, |p| config.pool_params(p))
            .with_teachers(&config.teaches)
    };
    let (mut with, mut without, mut no_counters) = (models(), models(), models());
    let mut per: BTreeMap<String, Rows> = BTreeMap::new();
    // p_install per impression (the ctr row's transaction), and the
    // transactions that installed within the long window.
    let mut installs: (Rows, Vec<String>) = (Rows::default(), Vec::new());
    let mut installed = std::collections::HashSet::new();
    // A bidder has no p_install before both install models exist: the
    // impressions before them are not scored.
    let cvr = |m: &Models, f: &Map<String, Value>| {
        Some(m.predict("cvr_short", f)? + m.predict("cvr_long", f)?)
    };
    for r in rows {
        let mut f: Map<String, Value> = serde_json::from_str(&r.features)?;
        let kind = Kind::parse(&r.kind).unwrap_or(Kind::Final);
        let row = Row::of(r.label, kind).member(&r.txid);
        let p = with.learn(&r.target, || config.params(&r.target), &f, row);
        let install_with = (r.target == "ctr" && r.settled)
            .then(|| cvr(&with, &f).map(|c| p * c))
            .flatten();
        let mut g = f.clone();
        g.retain(|k, _| !counters.contains(k));
        no_counters.learn(&r.target, || config.params(&r.target), &g, row);
        f.retain(|k, _| !profile.contains(k));
        let q = without.learn(&r.target, || config.params(&r.target), &f, row);
        if let Some(pi) = install_with {
            let (i, txids) = &mut installs;
            i.p.push(pi.min(1.0));
            i.without
                .push((q * cvr(&without, &f).unwrap_or(1.0)).min(1.0));
            i.truth.push(r.p_install);
            i.emitted_ms.push(r.emitted_ms);
            txids.push(r.txid.clone());
        }
        if r.label && (r.target == "cvr_short" || r.target == "cvr_long") {
            installed.insert(r.txid.clone());
        }
        // Scored as the learner's metrics score it: an early target's
        // member with the prediction served at its provisional row.
        let (Some(p), Some(q), Some(c)) = (
            with.scored(&r.target),
            without.scored(&r.target),
            no_counters.scored(&r.target),
        ) else {
            // Learned, weighed; not a label to score (yet).
            continue;
        };
        let e = per.entry(r.target.clone()).or_default();
        let model = &with.targets[&r.target].0;
        if model.settings().len() > 1 {
            let now = model.params();
            let t = e.tuned.get_or_insert_with(|| Tuned {
                chosen: now,
                settings: model.settings().len(),
                switches: Vec::new(),
            });
            if t.chosen != now {
                let s = (r.emitted_ms - t0_ms) as f64 / 1000.0;
                t.switches.push((s, e.p.len(), now));
                t.chosen = now;
            }
        }
        e.p.push(p);
        e.without.push(q);
        e.no_counters.push(c);
        e.truth.push(r.truth);
        e.label.push(r.label);
        e.emitted_ms.push(r.emitted_ms);
    }
    let (mut i, txids) = installs;
    i.label = txids.iter().map(|t| installed.contains(t)).collect();
    if !i.label.is_empty() {
        per.insert("p_install".to_owned(), i);
    }
    Ok(per
        .into_iter()
        .map(|(t, r)| (t, figures(&r, t0_ms)))
        .collect())
}

/// The logloss of predicting, before each label, the rate of those before
/// it (one half before the first).
pub fn online_constant(labels: &[bool]) -> f64 {
    let (mut ones, mut seen, mut sum) = (0.5f64, 1.0f64, 0.0);
    for y in labels {
        sum += logloss(ones / seen, *y);
        ones += f64::from(u8::from(*y));
        seen += 1.0;
    }
    sum / labels.len().max(1) as f64
}

/// The logloss of predicting `p` for a label `y` (p clamped off 0 and 1).
pub fn logloss(p: f64, y: bool) -> f64 {
    let p = p.clamp(1e-15, 1.0 - 1e-15);
    -(if y { p } else { 1.0 - p }).ln()
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        f64::NAN
    } else {
        s / n as f64
    }
}

fn figures(r: &Rows, t0_ms: i64) -> TargetEval {
    let n = r.label.len();
    let rate = r.label.iter().filter(|y| **y).count() as f64 / n as f64;
    let ll = |ps: &[f64]| mean(ps.iter().zip(&r.label).map(|(p, y)| logloss(*p, *y)));
    let known: Vec<(f64, bool)> = r
        .truth
        .iter()
        .zip(&r.label)
        .filter_map(|(t, y)| t.map(|t| (t, *y)))
        .collect();
    let truth = (!known.is_empty()).then(|| mean(known.iter().map(|(t, y)| logloss(*t, *y))));
    let baseline = mean(r.label.iter().map(|y| logloss(rate, *y)));
    let logloss = ll(&r.p);
    let mut pairs: Vec<(f32, bool)> = r.p.iter().map(|p| *p as f32).zip(r.label.clone()).collect();
    TargetEval {
        rows: n,
        label_rate: rate,
        logloss,
        auc: tidemark_ftrl::auc(&mut pairs),
        without_profiles_logloss: ll(&r.without),
        without_counters_logloss: ll(&r.no_counters),
        truth_logloss: truth,
        truth_rows: known.len(),
        baseline_logloss: baseline,
        online_baseline_logloss: online_constant(&r.label),
        gap_closed: truth
            .filter(|t| baseline - t > 1e-9)
            .map(|t| (baseline - logloss) / (baseline - t)),
        calibration: deciles(&r.p[n / 2..], &r.label[n / 2..]),
        calibration_all: deciles(&r.p, &r.label),
        calibration_without: deciles(&r.without[n / 2..], &r.label[n / 2..]),
        over_time: over_time(r, t0_ms),
        tuning: r.tuned.clone(),
    }
}

/// Ten slices of equal row counts by predicted probability.
pub fn deciles(p: &[f64], label: &[bool]) -> Vec<Decile> {
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by(|a, b| p[*a].total_cmp(&p[*b]));
    (0..10)
        .filter_map(|d| {
            let slice = &order[d * p.len() / 10..(d + 1) * p.len() / 10];
            (!slice.is_empty()).then(|| Decile {
                rows: slice.len(),
                predicted: mean(slice.iter().map(|i| p[*i])),
                observed: mean(slice.iter().map(|i| f64::from(u8::from(label[*i])))),
            })
        })
        .collect()
}

/// Logloss per slice of emission time, about 20 slices of equal duration.
fn over_time(r: &Rows, t0_ms: i64) -> Vec<(f64, usize, f64, f64, f64)> {
    let (Some(first), Some(last)) = (r.emitted_ms.iter().min(), r.emitted_ms.iter().max()) else {
        return Vec::new();
    };
    let width = ((last - first) / 20).max(1000);
    let mut slices: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, e) in r.emitted_ms.iter().enumerate() {
        slices.entry((e - first) / width).or_default().push(i);
    }
    slices
        .into_iter()
        .map(|(k, rows)| {
            let at = (first + (k + 1) * width - t0_ms) as f64 / 1000.0;
            let l = |v: &[f64]| mean(rows.iter().map(|i| logloss(v[*i], r.label[*i])));
            let truth = mean(
                rows.iter()
                    .filter_map(|i| r.truth[*i].map(|t| logloss(t, r.label[*i]))),
            );
            (at, rows.len(), l(&r.p), l(&r.without), truth)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deciles_split_rows_evenly_by_prediction() {
        let p: Vec<f64> = (0..100).map(|i| f64::from(i) / 100.0).collect();
        let y: Vec<bool> = (0..100).map(|i| i >= 90).collect();
        let d = deciles(&p, &y);
        assert_eq!(d.len(), 10);
        assert!(d.iter().all(|d| d.rows == 10));
        assert_eq!(d[9].observed, 1.0);
        assert_eq!(d[0].observed, 0.0);
        assert!((d[0].predicted - 0.045).abs() < 1e-12);
    }

    #[test]
    fn the_online_constant_predicts_the_rate_so_far() {
        // 0.5 first, then (0.5 + ones) / (1 + seen).
        let want =
            (logloss(0.5, true) + logloss(1.5 / 2.0, false) + logloss(1.5 / 3.0, false)) / 3.0;
        assert!((online_constant(&[true, false, false]) - want).abs() < 1e-15);
    }

    #[test]
    fn logloss_is_clamped_and_exact() {
        assert!((logloss(0.5, true) - 2f64.ln()).abs() < 1e-15);
        assert!(logloss(0.0, true).is_finite());
        assert_eq!(logloss(0.25, false), -(0.75f64).ln());
    }
}
