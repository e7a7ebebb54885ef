//! One FTRL model per target over a shared hashing, fed JSON feature
//! objects: the state the online learner checkpoints and resumes.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use tidemark_checkpoint::Checkpoint;
use tidemark_features::Hashing;

use crate::{Ftrl, Grid, Metrics, Params};

/// The models of every target seen, with their progressive metrics.
#[derive(Debug, Clone)]
pub struct Models {
    /// How features become coordinates, the same for every target.
    pub hashing: Hashing,
    /// Per target: the model and its progressive-validation metrics.
    pub targets: BTreeMap<String, (Ftrl, Metrics)>,
    /// The settings a target seen for the first time tunes over.
    pub grid: Grid,
    window: u64,
    x: Vec<(u32, f32)>,
}

impl Models {
    /// No targets yet; metrics slide over about `window` rows; new targets
    /// learn with their own settings only (see [`Models::with_grid`]).
    pub fn new(hashing: Hashing, window: u64) -> Models {
        Models {
            hashing,
            targets: BTreeMap::new(),
            grid: Grid::off(),
            window,
            x: Vec::with_capacity(64),
        }
    }

    /// New targets tune over `grid` around their own settings.
    pub fn with_grid(mut self, grid: Grid) -> Models {
        self.grid = grid;
        self
    }

    /// Resumes every target of a checkpoint (its own settings and grid win).
    pub fn from_checkpoint(c: &Checkpoint, window: u64) -> Models {
        let mut m = Models::new(c.hashing.clone(), window);
        for t in &c.targets {
            let model = Ftrl::from_target(t, m.hashing.slots());
            m.targets
                .insert(t.name.clone(), (model, Metrics::new(window)));
        }
        m
    }

    /// Predicts, then learns one observation of `target`; a target seen for
    /// the first time tunes over the grid around `params`. Returns the
    /// prediction made.
    pub fn learn(
        &mut self,
        target: &str,
        params: impl FnOnce() -> Params,
        features: &Map<String, Value>,
        label: bool,
    ) -> f64 {
        self.x.clear();
        self.hashing.hash_json(features, &mut self.x);
        let slots = self.hashing.slots();
        let (window, grid) = (self.window, &self.grid);
        let (model, metrics) = self
            .targets
            .entry(target.to_owned())
            .or_insert_with(|| (grid.model(params(), slots), Metrics::new(window)));
        let p = model.learn(&self.x, label);
        metrics.add(p, label);
        p
    }

    /// `target`'s prediction for `features` without learning anything
    /// (`None` before its first row).
    pub fn predict(&self, target: &str, features: &Map<String, Value>) -> Option<f64> {
        let (model, _) = self.targets.get(target)?;
        let mut x = Vec::with_capacity(features.len() + 1);
        self.hashing.hash_json(features, &mut x);
        Some(model.score(&x))
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
                .map(|(name, (m, metrics))| m.to_target(name, metrics.to_json()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resumes_exactly_from_its_checkpoint() {
        let mut a = Models::new(Hashing::new(8, 1, vec![]), 100);
        let f = |s: &str| serde_json::from_str::<Map<String, Value>>(s).unwrap();
        for i in 0..50 {
            let x = f(&format!(r#"{{"app":"a{}","n":{}}}"#, i % 3, i % 5));
            a.learn("ctr", Params::default, &x, i % 4 == 0);
        }
        let c = a.to_checkpoint(BTreeMap::new(), 0);
        let mut b = Models::from_checkpoint(&c, 100);
        let x = f(r#"{"app":"a1","n":2}"#);
        let pa = a.learn("ctr", Params::default, &x, true);
        let pb = b.learn("ctr", Params::default, &x, true);
        assert_eq!(pa, pb);
        assert_eq!(b.trained(), 51);
    }

    #[test]
    fn new_targets_tune_over_the_grid_and_resume_with_it() {
        let mut a = Models::new(Hashing::new(8, 1, vec![]), 100).with_grid(Grid::default());
        let f = |s: &str| serde_json::from_str::<Map<String, Value>>(s).unwrap();
        for i in 0..300 {
            let x = f(&format!(r#"{{"app":"a{}"}}"#, i % 7));
            a.learn("cvr", Params::default, &x, i % 7 == 0);
        }
        assert_eq!(a.targets["cvr"].0.choice().settings.len(), 8);
        let c = a.to_checkpoint(BTreeMap::new(), 0);
        assert!(c.targets[0].tuning.is_some());
        // The resumed learner keeps the checkpoint's grid, whatever it is given.
        let mut b = Models::from_checkpoint(&c, 100);
        let x = f(r#"{"app":"a3"}"#);
        assert_eq!(
            a.learn("cvr", Params::default, &x, true),
            b.learn("cvr", Params::default, &x, true)
        );
        assert_eq!(a.targets["cvr"].0.choice(), b.targets["cvr"].0.choice());
    }
}
