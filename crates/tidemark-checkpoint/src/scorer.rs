//! Scoring bids with a checkpoint, for bidders. `Scorer` can be shared by
//! many threads and reloads a newer checkpoint while they score.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde_json::{Map, Value};
use tidemark_features::{sigmoid, Hashing};

use crate::{Checkpoint, FormatError};

/// A loaded model: dense weights per target.
#[derive(Debug)]
pub struct Model {
    /// How features are hashed.
    pub hashing: Hashing,
    /// Dense weights per target.
    pub targets: Vec<(String, Vec<f32>)>,
    /// Each target's base margin, in the order of `targets`.
    pub margins: Vec<f64>,
    /// Each target's pool, as an index into `pools` (`None`: not pooled).
    pub pooled: Vec<Option<usize>>,
    /// Dense weights per pool, added to those of the targets naming it.
    pub pools: Vec<Vec<f32>>,
    /// When the checkpoint was written, ms since the epoch.
    pub created_at_ms: i64,
}

/// Predictions for one bid: a probability per target, and `p_install`.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    /// A probability per target.
    pub targets: Vec<(String, f64)>,
    /// `ctr × (cvr_short + cvr_long)`, when the three models exist.
    pub p_install: Option<f64>,
}

impl Scores {
    /// The probability for `target`, if the model has it.
    pub fn get(&self, target: &str) -> Option<f64> {
        self.targets
            .iter()
            .find(|(n, _)| n == target)
            .map(|(_, p)| *p)
    }

    /// As one JSON object: targets and `p_install`.
    pub fn to_json(&self) -> Value {
        let mut m: Map<String, Value> = self
            .targets
            .iter()
            .map(|(n, p)| (n.clone(), Value::from(*p)))
            .collect();
        // Always present: null until the ctr, cvr_short and cvr_long models all exist.
        m.insert(
            "p_install".into(),
            self.p_install.map_or(Value::Null, Value::from),
        );
        Value::Object(m)
    }
}

impl Model {
    /// Dense weights from a checkpoint.
    pub fn from_checkpoint(c: &Checkpoint) -> Model {
        let dense = |t: &crate::Target| {
            let mut w = vec![0f32; c.hashing.slots()];
            for &(i, v) in &t.weights {
                w[i as usize] = v;
            }
            w
        };
        Model {
            hashing: c.hashing.clone(),
            targets: c
                .targets
                .iter()
                .map(|t| (t.name.clone(), dense(t)))
                .collect(),
            margins: c.targets.iter().map(|t| t.margin).collect(),
            // A file names only pools it holds (the reader checks).
            pooled: (c.targets.iter())
                .map(|t| {
                    let name = t.pool.as_ref()?;
                    c.pools.iter().position(|p| &p.name == name)
                })
                .collect(),
            pools: c.pools.iter().map(dense).collect(),
            created_at_ms: c.created_at_ms,
        }
    }

    /// Reads a checkpoint file (without resume state).
    pub fn load(path: &Path) -> Result<Model, FormatError> {
        Ok(Model::from_checkpoint(&Checkpoint::read(path, false)?))
    }

    /// Scores one bid's features (a JSON object of strings, numbers and bools).
    pub fn score(&self, features: &Map<String, Value>) -> Scores {
        let mut x = Vec::with_capacity(features.len() + 1 + self.hashing.crosses.len());
        self.hashing.hash_json(features, &mut x);
        // Hashed again only for a target that leaves features out.
        let mut own = Vec::new();
        let targets: Vec<(String, f64)> = (self.targets.iter().zip(&self.margins))
            .zip(&self.pooled)
            .map(|(((name, w), margin), pool)| {
                let x = match self.hashing.omitted(name) {
                    None => &x,
                    Some(_) => {
                        own.clear();
                        self.hashing.hash_json_for(name, features, &mut own);
                        &own
                    }
                };
                let s: f64 = margin
                    + match pool.map(|k| &self.pools[k]) {
                        None => x
                            .iter()
                            .map(|&(i, v)| f64::from(w[i as usize]) * f64::from(v))
                            .sum::<f64>(),
                        // Own weight plus the pool's, added in binary64.
                        Some(pw) => x
                            .iter()
                            .map(|&(i, v)| {
                                let i = i as usize;
                                (f64::from(w[i]) + f64::from(pw[i])) * f64::from(v)
                            })
                            .sum::<f64>(),
                    };
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
        self.model.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Scores one bid's features.
    pub fn score(&self, features: &Map<String, Value>) -> Scores {
        self.model().score(features)
    }

    /// Reads the file again (following `latest.tdm` to the newest checkpoint)
    /// and swaps the model in; a bad file leaves the current model in place.
    /// A model older than the one in place (`created_at_ms`) is not swapped
    /// in: of two reloads racing, the one that read the older file must not
    /// finish last and go back to it. Returns whether it swapped.
    pub fn reload(&self) -> Result<bool, FormatError> {
        let model = Arc::new(Model::load(&self.path)?);
        let mut current = self.model.write().unwrap_or_else(|e| e.into_inner());
        if model.created_at_ms < current.created_at_ms {
            return Ok(false);
        }
        *current = model;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{publish, Target};
    use std::collections::BTreeMap;

    fn checkpoint(bias: f32) -> Checkpoint {
        let hashing = Hashing::new(8, 0, Vec::new());
        let targets = ["ctr", "cvr_short", "cvr_long"]
            .iter()
            .map(|n| Target {
                name: n.to_string(),
                alpha: 0.1,
                beta: 1.0,
                l1: 1.0,
                l2: 1.0,
                trained: 1,
                margin: 0.0,
                labels: None,
                early_labels: None,
                weights: vec![(hashing.bias_index(), bias)],
                state: Vec::new(),
                metrics: Value::Null,
                tuning: None,
                pool: None,
            })
            .collect();
        Checkpoint {
            hashing,
            targets,
            pools: Vec::new(),
            positions: BTreeMap::new(),
            created_at_ms: 0,
        }
    }

    #[test]
    fn reloads_while_other_threads_score() {
        let dir = std::env::temp_dir().join(format!("tidemark-scorer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        publish(&dir, &checkpoint(0.0), 2).unwrap();
        let scorer = Arc::new(Scorer::open(&dir).unwrap());
        let features = Map::new();
        assert_eq!(scorer.score(&features).get("ctr"), Some(0.5));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let (s, stop) = (scorer.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut seen = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let p = s.score(&Map::new()).get("ctr").unwrap();
                        // Always one whole model or the other, never a mix.
                        assert!(p == 0.5 || (p - sigmoid(2.0)).abs() < 1e-12, "{p}");
                        seen += 1;
                    }
                    seen
                })
            })
            .collect();
        publish(&dir, &checkpoint(2.0), 2).unwrap();
        scorer.reload().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
        let s = scorer.score(&features);
        assert!((s.get("ctr").unwrap() - sigmoid(2.0)).abs() < 1e-12);
        let c = sigmoid(2.0);
        assert!((s.p_install.unwrap() - c * (c + c)).abs() < 1e-12);
        // A damaged newer file leaves the current model in place.
        std::fs::write(dir.join("checkpoint-00000003.tdm"), b"garbage").unwrap();
        std::os::unix::fs::symlink("checkpoint-00000003.tdm", dir.join("x")).unwrap();
        std::fs::rename(dir.join("x"), dir.join(crate::LATEST)).unwrap();
        assert!(scorer.reload().is_err());
        assert!((scorer.score(&features).get("ctr").unwrap() - sigmoid(2.0)).abs() < 1e-12);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_pooled_target_scores_its_weights_plus_its_pools() {
        let mut c = checkpoint(0.5);
        let b = c.hashing.bias_index();
        let mut pool = c.targets[0].clone();
        pool.name = "install".into();
        pool.weights = vec![(b, 1.25), (3, 7.0)];
        c.pools.push(pool);
        c.targets[2].pool = Some("install".into());
        c.targets[2].margin = -1.0;
        let c = Checkpoint::from_bytes(&c.to_bytes(), false).unwrap();
        let s = Model::from_checkpoint(&c).score(&Map::new());
        assert_eq!(s.get("ctr"), Some(sigmoid(0.5)));
        assert_eq!(s.get("cvr_long"), Some(sigmoid(-1.0 + 0.5 + 1.25)));
    }

    #[test]
    fn a_target_that_omits_a_feature_scores_without_it() {
        let mut c = checkpoint(0.0);
        let omit = BTreeMap::from([("cvr_long".to_owned(), ["hour".to_owned()].into())]);
        c.hashing = c.hashing.clone().with_omit(omit);
        let hour = c.hashing.categorical(c.hashing.name_seed("hour"), b"7");
        for t in &mut c.targets {
            t.weights.push((hour, 2.0));
        }
        let c = Checkpoint::from_bytes(&c.to_bytes(), false).unwrap();
        let bid: Map<String, Value> = serde_json::from_str(r#"{"hour":"7"}"#).unwrap();
        let s = Model::from_checkpoint(&c).score(&bid);
        assert_eq!(s.get("ctr"), Some(sigmoid(2.0)));
        assert_eq!(s.get("cvr_short"), Some(sigmoid(2.0)));
        assert_eq!(s.get("cvr_long"), Some(0.5), "its hour is not in its row");
    }

    #[test]
    fn a_reload_never_goes_back_to_an_older_model() {
        // Two reloads racing: the one that read the older file finishes
        // last. What it read must not replace the newer model.
        let dir = std::env::temp_dir().join(format!("tidemark-older-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut newer = checkpoint(2.0);
        newer.created_at_ms = 2_000;
        publish(&dir, &newer, 3).unwrap();
        let scorer = Scorer::open(&dir).unwrap();
        let mut older = checkpoint(0.0);
        older.created_at_ms = 1_000;
        publish(&dir, &older, 3).unwrap();
        assert!(
            !scorer.reload().unwrap(),
            "the older file is not swapped in"
        );
        let p = scorer.score(&Map::new()).get("ctr").unwrap();
        assert!((p - sigmoid(2.0)).abs() < 1e-12, "{p}");
        let mut newest = checkpoint(0.0);
        newest.created_at_ms = 3_000;
        publish(&dir, &newest, 3).unwrap();
        assert!(scorer.reload().unwrap());
        assert_eq!(scorer.score(&Map::new()).get("ctr"), Some(0.5));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
