//! One FTRL model per target over a shared hashing, fed JSON feature
//! objects, and the pools of weights targets share: the state the online
//! learner checkpoints and resumes.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use tidemark_checkpoint::{Checkpoint, Target};
use tidemark_features::{sigmoid, Hashing, OutOfRange};

use crate::{Ftrl, Grid, Metrics, Params, Row};

/// The models of every target seen, with their progressive metrics.
#[derive(Debug, Clone)]
pub struct Models {
    /// How features become coordinates, the same for every target but for
    /// the features a target omits.
    pub hashing: Hashing,
    /// Per target: the model and its progressive-validation metrics.
    pub targets: BTreeMap<String, (Ftrl, Metrics)>,
    /// The settings a target seen for the first time tunes over.
    pub grid: Grid,
    /// Per pool: the weights its targets share (SPEC 10, docs/learner.md).
    /// A pooled target scores its margin plus its own weights plus its
    /// pool's, and every row it learns teaches both the same gradient.
    pub pools: BTreeMap<String, Ftrl>,
    /// Per pooled target, its pool. Fixed when the target is first learned
    /// (or as its checkpoint holds it): moving a trained target in or out
    /// of a pool would change what it scores.
    pool_of: BTreeMap<String, String>,
    /// The settings each new pool learns with (default: SPEC 8's).
    pool_params: BTreeMap<String, Params>,
    /// Per target, the pool its rows teach: by default each pooled target
    /// teaches its own pool ([`Models::with_teachers`] names others). A
    /// teacher outside the pool's targets teaches it as a model of its own
    /// labels: its margin plus the pool's weights.
    teaches: BTreeMap<String, String>,
    /// Per `(target, feature)`: values left out of rows as out of range
    /// (SPEC 10, v1.3). At most [`OUT_OF_RANGE_NAMES`] pairs; later names
    /// count under the feature [`OTHER_FEATURES`], so a publisher inventing
    /// names cannot grow it.
    pub out_of_range: BTreeMap<(String, String), u64>,
    /// Pairs counted for the first time since the last
    /// [`Models::take_new_out_of_range`]: what a log line names once.
    new_out_of_range: Vec<(String, String)>,
    window: u64,
    x: Vec<(u32, f32)>,
}

/// The most `(target, feature)` pairs [`Models::out_of_range`] names.
pub const OUT_OF_RANGE_NAMES: usize = 256;
/// The feature name counting out-of-range values past [`OUT_OF_RANGE_NAMES`].
pub const OTHER_FEATURES: &str = "(other)";

impl Models {
    /// No targets yet; metrics slide over about `window` rows; new targets
    /// learn with their own settings only (see [`Models::with_grid`]).
    pub fn new(hashing: Hashing, window: u64) -> Models {
        Models {
            hashing,
            targets: BTreeMap::new(),
            grid: Grid::off(),
            pools: BTreeMap::new(),
            pool_of: BTreeMap::new(),
            pool_params: BTreeMap::new(),
            teaches: BTreeMap::new(),
            out_of_range: BTreeMap::new(),
            new_out_of_range: Vec::new(),
            window,
            x: Vec::with_capacity(64),
        }
    }

    /// New targets tune over `grid` around their own settings.
    pub fn with_grid(mut self, grid: Grid) -> Models {
        self.grid = grid;
        self
    }

    /// Targets not learned yet join pools: `pool_of` maps a target to its
    /// pool's name; a new pool learns with `params(name)`, taught by its
    /// targets. A target already learned keeps what it was trained with.
    pub fn with_pools(
        mut self,
        pool_of: &BTreeMap<String, String>,
        params: impl Fn(&str) -> Params,
    ) -> Models {
        for (target, pool) in pool_of {
            if !self.targets.contains_key(target) {
                self.pool_of.insert(target.clone(), pool.clone());
                self.teaches.insert(target.clone(), pool.clone());
            }
            self.pool_params.insert(pool.clone(), params(pool));
        }
        self
    }

    /// The targets whose rows teach each pool named in `teaches` (target →
    /// pool), instead of its own targets; other pools keep their teachers.
    pub fn with_teachers(mut self, teaches: &BTreeMap<String, String>) -> Models {
        let named: std::collections::BTreeSet<&String> = teaches.values().collect();
        self.teaches.retain(|_, pool| !named.contains(pool));
        self.teaches.extend(teaches.clone());
        self
    }

    /// The pool `target` shares weights in, if any.
    pub fn pool_of(&self, target: &str) -> Option<&str> {
        self.pool_of.get(target).map(String::as_str)
    }

    /// Resumes every target and pool of a checkpoint (its own settings,
    /// grid and pools win).
    pub fn from_checkpoint(c: &Checkpoint, window: u64) -> Models {
        let mut m = Models::new(c.hashing.clone(), window);
        let slots = m.hashing.slots();
        for t in &c.targets {
            let model = Ftrl::from_target(t, slots);
            m.targets
                .insert(t.name.clone(), (model, Metrics::new(window)));
            if let Some(pool) = &t.pool {
                m.pool_of.insert(t.name.clone(), pool.clone());
                m.teaches.insert(t.name.clone(), pool.clone());
            }
        }
        for p in &c.pools {
            m.pools.insert(p.name.clone(), Ftrl::from_target(p, slots));
        }
        m
    }

    /// Predicts, then learns one observation of `target`; a target seen for
    /// the first time tunes over the grid around `params`. Returns the
    /// prediction made. Metrics count matured rows only (SPEC 5: a
    /// provisional zero is not a label yet), an early target's with the
    /// prediction served at the member's provisional row.
    pub fn learn(
        &mut self,
        target: &str,
        params: impl FnOnce() -> Params,
        features: &Map<String, Value>,
        row: Row,
    ) -> f64 {
        let mut x = std::mem::take(&mut self.x);
        x.clear();
        let (counts, new) = (&mut self.out_of_range, &mut self.new_out_of_range);
        self.hashing
            .hash_json_counted_for(target, features, &mut x, |f| count(counts, new, target, f));
        let p = self.learn_hashed(target, params, &x, row);
        self.x = x;
        p
    }

    /// [`Models::learn`] for a row already hashed (`x`, the bias included,
    /// without the features `target` omits):
    /// what the offline pass feeds, its columns hashed as online learning
    /// hashes their JSON.
    pub fn learn_hashed(
        &mut self,
        target: &str,
        params: impl FnOnce() -> Params,
        x: &[(u32, f32)],
        row: Row,
    ) -> f64 {
        let slots = self.hashing.slots();
        let (window, grid) = (self.window, &self.grid);
        // Looked up before inserting: `entry` would take an owned name per row.
        let (model, metrics) = match self.targets.get_mut(target) {
            Some(found) => found,
            None => {
                let new = (grid.model(params(), slots), Metrics::new(window));
                self.targets.entry(target.to_owned()).or_insert(new)
            }
        };
        let (pools, pool_params) = (&mut self.pools, &self.pool_params);
        let scored_with = self.pool_of.get(target);
        let taught = self.teaches.get(target);
        let mut shared = scored_with.map(|name| pool(pools, pool_params, name, slots));
        let offset = shared.as_mut().map_or(0.0, |pool| pool.shared_sum(x));
        let p = model.predict_offset(x, offset);
        model.update_row(x, row);
        match (taught, shared) {
            // Its own gradient, as the target took it.
            (Some(name), Some(shared)) if Some(name) == scored_with => {
                shared.step(x, model.last_gradient());
            }
            // A model of this target's labels: its margin plus the pool.
            (Some(name), _) => {
                let pool = pool(pools, pool_params, name, slots);
                let q = sigmoid(f64::from(model.base_margin() + pool.shared_sum(x)));
                let y = f64::from(u8::from(row.label));
                pool.step(x, row.kind.weight(q, model.is_early()) * (q - y));
            }
            (None, _) => {}
        }
        if let Some(scored) = model.scored() {
            metrics.add(scored, row.label);
        }
        p
    }

    /// The prediction `target`'s last row is scored with, if it carried a
    /// label ([`Ftrl::scored`]): what its metrics counted.
    pub fn scored(&self, target: &str) -> Option<f64> {
        self.targets.get(target)?.0.scored()
    }

    /// `target`'s prediction for `features` without learning anything
    /// (`None` before its first row).
    pub fn predict(&self, target: &str, features: &Map<String, Value>) -> Option<f64> {
        let mut x = Vec::with_capacity(features.len() + 1);
        self.hashing.hash_json_for(target, features, &mut x);
        self.score_hashed(target, &x)
    }

    /// [`Models::predict`] for a row already hashed as `target`'s.
    pub fn score_hashed(&self, target: &str, x: &[(u32, f32)]) -> Option<f64> {
        let (model, _) = self.targets.get(target)?;
        let shared = (self.pool_of.get(target))
            .and_then(|name| self.pools.get(name))
            .map_or(0.0, |pool| pool.sum(x));
        Some(model.score_offset(x, shared))
    }

    /// The `(target, feature)` pairs first counted out of range since the
    /// last call.
    pub fn take_new_out_of_range(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.new_out_of_range)
    }

    /// Puts `target` back as `from` holds it (its last good checkpoint), or,
    /// without one, forgets it so its next row starts it afresh: what a
    /// learner does with a target it found unfit to write (SPEC 10, v1.3).
    pub fn restore(&mut self, target: &str, from: Option<&Target>) {
        match from {
            Some(t) => {
                let model = Ftrl::from_target(t, self.hashing.slots());
                self.targets
                    .insert(target.to_owned(), (model, Metrics::new(self.window)));
            }
            None => {
                self.targets.remove(target);
            }
        }
    }

    /// Puts pool `name` back as `from` holds it (its last good checkpoint),
    /// or, without one, starts it afresh: as [`Models::restore`] does for a
    /// target.
    pub fn restore_pool(&mut self, name: &str, from: Option<&Target>) {
        let slots = self.hashing.slots();
        let model = match from {
            Some(p) => Ftrl::from_target(p, slots),
            None => {
                let params = self.pool_params.get(name).copied().unwrap_or_default();
                Ftrl::shared(params, slots)
            }
        };
        self.pools.insert(name.to_owned(), model);
    }

    /// Rows learned over every target.
    pub fn trained(&self) -> u64 {
        self.targets.values().map(|(m, _)| m.trained).sum()
    }

    /// A checkpoint of every target, recording `positions` and `created_at_ms`.
    pub fn to_checkpoint(
        &self,
        positions: BTreeMap<String, i64>,
        created_at_ms: i64,
    ) -> Checkpoint {
        Checkpoint {
            hashing: self.hashing.clone(),
            targets: self
                .targets
                .iter()
                .map(|(name, (m, metrics))| Target {
                    pool: self.pool_of.get(name).cloned(),
                    ..m.to_target(name, metrics.to_json())
                })
                .collect(),
            pools: (self.pools.iter())
                .map(|(name, m)| m.to_target(name, Value::Null))
                .collect(),
            positions,
            created_at_ms,
        }
    }

    /// One line per target: rows, logloss overall and recent, AUC,
    /// calibration, and the setting predicting.
    pub fn summary(&self) -> BTreeMap<&str, String> {
        self.targets
            .iter()
            .map(|(n, (m, x))| {
                let r = x.recent();
                let p = m.params();
                (
                    n.as_str(),
                    format!(
                        "trained {} logloss {:.5} recent {:.5} auc {:.4} calibration {:.3} alpha {} l2 {} switches {}",
                        m.trained,
                        x.total.logloss(),
                        r.logloss(),
                        x.auc(),
                        r.calibration(),
                        p.alpha,
                        p.l2,
                        m.choice().switches
                    ),
                )
            })
            .collect()
    }
}

/// Pool `name`, made with its settings if it is new.
fn pool<'p>(
    pools: &'p mut BTreeMap<String, Ftrl>,
    params: &BTreeMap<String, Params>,
    name: &str,
    slots: usize,
) -> &'p mut Ftrl {
    if !pools.contains_key(name) {
        let new = Ftrl::shared(params.get(name).copied().unwrap_or_default(), slots);
        pools.insert(name.to_owned(), new);
    }
    pools.get_mut(name).expect("inserted above")
}

/// Counts one value of `target` left out as out of range.
fn count(
    counts: &mut BTreeMap<(String, String), u64>,
    new: &mut Vec<(String, String)>,
    target: &str,
    f: OutOfRange<'_>,
) {
    let name = f.to_string();
    let key = (target.to_owned(), name);
    if let Some(n) = counts.get_mut(&key) {
        *n += 1;
        return;
    }
    let key = if counts.len() < OUT_OF_RANGE_NAMES {
        key
    } else {
        (target.to_owned(), OTHER_FEATURES.to_owned())
    };
    let n = counts.entry(key.clone()).or_insert(0);
    if *n == 0 && new.len() < OUT_OF_RANGE_NAMES {
        new.push(key);
    }
    *n += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resumes_exactly_from_its_checkpoint() {
        let mut a = Models::new(Hashing::new(8, 1, vec![]), 100);
        let f = |s: &str| serde_json::from_str::<Map<String, Value>>(s).unwrap();
        for i in 0..50 {
            let x = f(&format!(r#"{{"app":"a{}","n":{}}}"#, i % 3, i % 5));
            a.learn("ctr", Params::default, &x, Row::plain(i % 4 == 0));
        }
        let c = a.to_checkpoint(BTreeMap::new(), 0);
        let mut b = Models::from_checkpoint(&c, 100);
        let x = f(r#"{"app":"a1","n":2}"#);
        let pa = a.learn("ctr", Params::default, &x, Row::plain(true));
        let pb = b.learn("ctr", Params::default, &x, Row::plain(true));
        assert_eq!(pa, pb);
        assert_eq!(b.trained(), 51);
    }

    #[test]
    fn new_targets_tune_over_the_grid_and_resume_with_it() {
        let mut a = Models::new(Hashing::new(8, 1, vec![]), 100).with_grid(Grid::default());
        let f = |s: &str| serde_json::from_str::<Map<String, Value>>(s).unwrap();
        for i in 0..300 {
            let x = f(&format!(r#"{{"app":"a{}"}}"#, i % 7));
            a.learn("cvr", Params::default, &x, Row::plain(i % 7 == 0));
        }
        assert_eq!(a.targets["cvr"].0.choice().settings.len(), 8);
        let c = a.to_checkpoint(BTreeMap::new(), 0);
        assert!(c.targets[0].tuning.is_some());
        // The resumed learner keeps the checkpoint's grid, whatever it is given.
        let mut b = Models::from_checkpoint(&c, 100);
        let x = f(r#"{"app":"a3"}"#);
        assert_eq!(
            a.learn("cvr", Params::default, &x, Row::plain(true)),
            b.learn("cvr", Params::default, &x, Row::plain(true))
        );
        assert_eq!(a.targets["cvr"].0.choice(), b.targets["cvr"].0.choice());
    }

    /// Any f64 a bid can carry, specials and extremes often.
    fn hostile() -> impl proptest::strategy::Strategy<Value = f64> {
        use proptest::prelude::*;
        prop_oneof![
            any::<f64>(),
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(f64::MAX),
            Just(-1e308),
            Just(9.2e18),
            Just(3.4e38),
            Just(1e15),
            Just(-1e15),
            Just(1.0000001e15),
            Just(1e-40),
            -10.0..10.0f64,
        ]
    }

    fn hostile_hashing() -> Hashing {
        use tidemark_features::Transform;
        Hashing::new(
            10,
            3,
            vec![("a".into(), "b".into()), ("b".into(), "s".into())],
        )
        .with_transforms(BTreeMap::from([
            ("b".to_owned(), Transform::Log1p),
            (
                "c".to_owned(),
                Transform::Clip {
                    min: -1e20,
                    max: 1e20,
                },
            ),
        ]))
    }

    /// The row as JSON (serde_json writes NaN and infinities as null, so the
    /// row is built as a map, as a caller holding f64s would).
    fn row(a: f64, b: f64, c: f64, s: &str) -> Map<String, Value> {
        let mut m = Map::new();
        for (k, v) in [("a", a), ("b", b), ("c", c)] {
            if let Some(n) = serde_json::Number::from_f64(v) {
                m.insert(k.to_owned(), Value::Number(n));
            }
        }
        m.insert("s".to_owned(), Value::String(s.to_owned()));
        m
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

        /// Whatever the numbers, every state stays finite, the checkpoint
        /// holds only finite numbers and reads back, and every score is a
        /// probability (SPEC 10, v1.3).
        #[test]
        fn any_numbers_leave_every_model_finite(
            rows in proptest::collection::vec(
                (hostile(), hostile(), hostile(), 0..3u8, proptest::bool::ANY), 1..60),
        ) {
            let mut m = Models::new(hostile_hashing(), 50).with_grid(Grid::default());
            for (a, b, c, s, y) in &rows {
                let x = row(*a, *b, *c, &format!("s{s}"));
                let p = m.learn("ctr", Params::default, &x, Row::plain(*y));
                proptest::prop_assert!((0.0..=1.0).contains(&p), "p {p}");
            }
            let c = m.to_checkpoint(BTreeMap::new(), 1);
            proptest::prop_assert_eq!(c.non_finite(), None);
            let back = Checkpoint::from_bytes(&c.to_bytes(), true).unwrap();
            let resumed = Models::from_checkpoint(&back, 50);
            for (a, b, cc, s, _) in &rows {
                let x = row(*a, *b, *cc, &format!("s{s}"));
                let p = resumed.predict("ctr", &x).unwrap();
                proptest::prop_assert!((0.0..=1.0).contains(&p), "p {p}");
                proptest::prop_assert_eq!(p, m.predict("ctr", &x).unwrap());
            }
        }

        /// A value out of range is left out of its row: learning the row
        /// with it is learning the row without it. (Checked on features
        /// without crosses, against the rule as SPEC 10 states it: not
        /// finite, or over 1e15 in magnitude after the transform.)
        #[test]
        fn a_value_out_of_range_is_left_out_of_its_row(
            rows in proptest::collection::vec((hostile(), hostile(), proptest::bool::ANY), 1..40),
        ) {
            use tidemark_features::Transform;
            let hashing = Hashing::new(10, 3, vec![])
                .with_transforms(BTreeMap::from([("b".to_owned(), Transform::Log1p)]));
            let mut with = Models::new(hashing.clone(), 50);
            let mut without = Models::new(hashing, 50);
            let mut left_out = 0u64;
            for (a, b, y) in &rows {
                let full = row(*a, *b, 0.5, "x");
                let mut kept = full.clone();
                let log1p = |x: f64| x.signum() * x.abs().ln_1p();
                for (k, v) in [("a", *a), ("b", log1p(*b))] {
                    let present = full.contains_key(k);
                    if present && !(v.is_finite() && v.abs() <= 1e15) {
                        kept.remove(k);
                        left_out += 1;
                    }
                }
                let p1 = with.learn("ctr", Params::default, &full, Row::plain(*y));
                let p2 = without.learn("ctr", Params::default, &kept, Row::plain(*y));
                proptest::prop_assert_eq!(p1, p2);
            }
            let counted: u64 = with.out_of_range.values().sum();
            proptest::prop_assert_eq!(counted, left_out);
        }
    }

    #[test]
    fn extreme_rows_by_the_thousand_keep_the_state_finite() {
        // The largest values admitted, every row: n reaches its bound after
        // two rows and z after more; the model still learns a plain row.
        let mut m = Models::new(Hashing::new(6, 0, vec![]), 100).with_grid(Grid::default());
        let f = |s: &str| serde_json::from_str::<Map<String, Value>>(s).unwrap();
        for i in 0..20_000 {
            let v = if i % 3 == 0 { 1e15 } else { -1e15 };
            let x = f(&format!(r#"{{"n":{v:e},"k":{}}}"#, v / 7.0));
            m.learn("ctr", Params::default, &x, Row::plain(i % 2 == 0));
        }
        let c = m.to_checkpoint(BTreeMap::new(), 0);
        assert_eq!(c.non_finite(), None);
        let x = f(r#"{"app":"a"}"#);
        for _ in 0..100 {
            let p = m.learn("ctr", Params::default, &x, Row::plain(true));
            assert!(p.is_finite());
        }
        assert!(
            Checkpoint::from_bytes(&m.to_checkpoint(BTreeMap::new(), 0).to_bytes(), true).is_ok()
        );
    }

    #[test]
    fn out_of_range_counts_by_target_and_name_are_bounded() {
        let mut m = Models::new(Hashing::new(6, 0, vec![("a".into(), "b".into())]), 100);
        let f = |s: &str| serde_json::from_str::<Map<String, Value>>(s).unwrap();
        m.learn(
            "ctr",
            Params::default,
            &f(r#"{"a":1e300,"b":2}"#),
            Row::plain(false),
        );
        m.learn(
            "cvr",
            Params::default,
            &f(r#"{"a":1e10,"b":1e10}"#),
            Row::plain(false),
        );
        assert_eq!(m.out_of_range[&("ctr".into(), "a".into())], 1);
        // 1e300 as binary32 is infinite: the cross's product too.
        assert_eq!(m.out_of_range[&("ctr".into(), "a*b".into())], 1);
        assert_eq!(m.out_of_range[&("cvr".into(), "a*b".into())], 1);
        assert_eq!(m.take_new_out_of_range().len(), 3);
        assert!(m.take_new_out_of_range().is_empty());
        for i in 0..1000 {
            m.learn(
                "ctr",
                Params::default,
                &f(&format!(r#"{{"n{i}":1e99}}"#)),
                Row::plain(false),
            );
        }
        assert_eq!(m.out_of_range.len(), OUT_OF_RANGE_NAMES + 1);
        assert_eq!(
            m.out_of_range[&("ctr".into(), OTHER_FEATURES.into())],
            1000 - (OUT_OF_RANGE_NAMES as u64 - 3)
        );
    }
}
