//! The models an offline pass starts from (`--model`) and writes (`--save`),
//! and the pools it is told of (`--pool`).

use std::collections::BTreeMap;
use std::path::Path;

use tidemark_checkpoint::Checkpoint;
use tidemark_ftrl::Models;

use super::{io, OfflineError, Report};

/// The checkpoint `--model FILE` starts from, every target and pool of it.
/// `target`, if given, must be one of its targets.
pub fn load(path: &Path, target: Option<&str>) -> Result<Checkpoint, OfflineError> {
    let c = Checkpoint::read(path, true)
        .map_err(|e| OfflineError::Settings(format!("--model {}: {e}", path.display())))?;
    match target {
        Some(n) if !c.targets.iter().any(|t| t.name == n) => Err(OfflineError::Settings(format!(
            "--model {}: {}",
            path.display(),
            name_one_of(&c)
        ))),
        _ => Ok(c),
    }
}

/// How to name the target of rows without a `:target` column.
pub(super) fn name_one_of(c: &Checkpoint) -> String {
    let names: Vec<&str> = c.targets.iter().map(|t| t.name.as_str()).collect();
    format!("name one of its targets {names:?} with --target")
}

/// Writes every target and pool of `models` as a checkpoint (`--save`),
/// atomically; the targets the pass saw carry its figures, the others what
/// `start` recorded of them.
pub fn save(
    path: &Path,
    models: &Models,
    start: Option<&Checkpoint>,
    r: &Report,
) -> Result<(), OfflineError> {
    let mut c = models.to_checkpoint(BTreeMap::new(), tidemark_metrics::wall_ms());
    for t in &mut c.targets {
        let before = start.and_then(|s| s.targets.iter().find(|b| b.name == t.name));
        if let Some(f) = r.targets.get(&t.name) {
            t.metrics = f.to_checkpoint_json();
        } else if let Some(b) = before {
            t.metrics = b.metrics.clone();
        }
    }
    tidemark_checkpoint::write(path, &c).map_err(io(path))
}

/// Each pooled target's pool from `--pool NAME=T1,T2,...`: a pool has a
/// name and two targets or more, and a target is in one pool at most.
pub fn pools(specs: &[String]) -> Result<BTreeMap<String, String>, OfflineError> {
    let mut of = BTreeMap::new();
    for spec in specs {
        let bad = |why: &str| OfflineError::Settings(format!("--pool {spec}: {why}"));
        let (name, targets) = spec
            .split_once('=')
            .ok_or_else(|| bad("expected NAME=TARGET,TARGET,..."))?;
        let targets: Vec<&str> = targets.split(',').collect();
        if name.is_empty() || targets.len() < 2 || targets.iter().any(|t| t.is_empty()) {
            return Err(bad("a pool has a name and two targets or more"));
        }
        for t in targets {
            if let Some(other) = of.insert(t.to_owned(), name.to_owned()) {
                return Err(bad(&format!("target {t} is already in pool {other}")));
            }
        }
    }
    Ok(of)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_are_named_hold_two_targets_and_never_share_one() {
        let of = pools(&["install=cvr_short,cvr_long".to_owned()]).unwrap();
        assert_eq!(of["cvr_short"], "install");
        assert_eq!(of["cvr_long"], "install");
        for bad in ["install", "=a,b", "install=a", "install=a,", "p=a,b;q=b,c"] {
            let specs: Vec<String> = bad.split(';').map(str::to_owned).collect();
            assert!(pools(&specs).is_err(), "{bad} accepted");
        }
    }
}
