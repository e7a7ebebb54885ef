//! Scoring bids with a checkpoint, for bidders. `Scorer` can be shared by
//! many threads and reloads a newer checkpoint while they score.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde_json::{Map, Value};
use tidemark_features::Hashing;

use crate::{Checkpoint, FormatError};

/// A loaded model: dense weights per target.
#[derive(Debug)]
pub struct Model {
    pub hashing: Hashing,
    pub targets: Vec<(String, Vec<f32>)>,
    pub created_at_ms: i64,
}

/// Predictions for one bid: a probability per target, and `p_install`.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    pub targets: Vec<(String, f64)>,
    /// `ctr × (cvr_short + cvr_long)`, when the three models exist.
    pub p_install: Option<f64>,
}

impl Scores {
    pub fn get(&self, target: &str) -> Option<f64> {
        self.targets
            .iter()
            .find(|(n, _)| n == target)
            .map(|(_, p)| *p)
    }

    pub fn to_json(&self) -> Value {
        let mut m: Map<String, Value> = self
            .targets
            .iter()
            .map(|(n, p)| (n.clone(), Value::from(*p)))
            .collect();
        if let Some(p) = self.p_install {
            m.insert("p_install".into(), Value::from(p));
        }
        Value::Object(m)
    }
}

impl Model {
    pub fn from_checkpoint(c: &Checkpoint) -> Model {
        let targets = c
            .targets
            .iter()
            .map(|t| {
                let mut w = vec![0f32; c.hashing.slots()];
                for &(i, v) in &t.weights {
                    w[i as usize] = v;
                }
                (t.name.clone(), w)
            })
            .collect();
        Model {
            hashing: c.hashing.clone(),
            targets,
            created_at_ms: c.created_at_ms,
        }
    }

    pub fn load(path: &Path) -> Result<Model, FormatError> {
        Ok(Model::from_checkpoint(&Checkpoint::read(path, false)?))
    }

    /// Scores one bid's features (a JSON object of strings, numbers and bools).
    pub fn score(&self, features: &Map<String, Value>) -> Scores {
        let mut x = Vec::with_capacity(features.len() + 1 + self.hashing.crosses.len());
        self.hashing.hash_json(features, &mut x);
        let targets: Vec<(String, f64)> = self
            .targets
            .iter()
            .map(|(name, w)| {
                let s: f64 = x
                    .iter()
                    .map(|&(i, v)| f64::from(w[i as usize]) * f64::from(v))
                    .sum();
                (name.clone(), sigmoid(s))
            })
            .collect();
        let get = |n: &str| targets.iter().find(|(t, _)| t == n).map(|(_, p)| *p);
        let p_install = match (get("ctr"), get("cvr_short"), get("cvr_long")) {
            (Some(c), Some(s), Some(l)) => Some(c * (s + l)),
            _ => None,
        };
        Scores { targets, p_install }
    }
}

/// The logistic function, with the logit clamped to ±35 as in training.
pub fn sigmoid(s: f64) -> f64 {
    1.0 / (1.0 + (-s.clamp(-35.0, 35.0)).exp())
}

/// A model that can be swapped for a newer one while other threads score.
pub struct Scorer {
    path: PathBuf,
    model: RwLock<Arc<Model>>,
}

impl Scorer {
    /// Loads a checkpoint file (or a directory's `latest.tdm`).
    pub fn open(path: &Path) -> Result<Scorer, FormatError> {
        let path = if path.is_dir() {
            path.join(crate::LATEST)
        } else {
            path.to_owned()
        };
        let model = Model::load(&path)?;
        Ok(Scorer {
            path,
            model: RwLock::new(Arc::new(model)),
        })
    }

    /// The current model; cheap (an `Arc` clone), never blocks on a reload.
    pub fn model(&self) -> Arc<Model> {
        self.model.read().expect("not poisoned").clone()
    }

    pub fn score(&self, features: &Map<String, Value>) -> Scores {
        self.model().score(features)
    }

    /// Reads the file again (following `latest.tdm` to the newest checkpoint)
    /// and swaps the model in; a bad file leaves the current model in place.
    pub fn reload(&self) -> Result<(), FormatError> {
        let model = Arc::new(Model::load(&self.path)?);
        *self.model.write().expect("not poisoned") = model;
        Ok(())
    }
}
