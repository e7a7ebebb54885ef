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

/// The pools of `--pool NAME=T1,T2,...` and `--teachers NAME=T1,T2,...`,
/// as the online learner's `[pools.NAME]` `targets` and `teachers`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pools {
    /// Per pooled target, its pool.
    pub of: BTreeMap<String, String>,
    /// Per teacher, the pool its rows teach (by default a pool's targets).
    pub teaches: BTreeMap<String, String>,
}

/// Reads `--pool` and `--teachers` by the rules `[pools]` keeps
/// (`crate::config::pool_members`); `--teachers` may also name a pool of
/// `start` (`--model`), whose targets it holds.
pub fn pools(
    pools: &[String],
    teachers: &[String],
    start: Option<&Checkpoint>,
) -> Result<Pools, OfflineError> {
    let split = |flag: &str, spec: &String| {
        let bad = |why: &str| OfflineError::Settings(format!("--{flag} {spec}: {why}"));
        let (name, list) =
            (spec.split_once('=')).ok_or_else(|| bad("expected NAME=TARGET,TARGET,..."))?;
        let list: Vec<String> = list.split(',').map(str::to_owned).collect();
        Ok((name.to_owned(), list))
    };
    let mut given: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for spec in pools {
        let (name, targets) = split("pool", spec)?;
        if given.insert(name.clone(), targets).is_some() {
            return Err(OfflineError::Settings(format!(
                "--pool {spec}: pool {name} is given twice (list its targets once)"
            )));
        }
    }
    let mut taught: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for spec in teachers {
        let (name, list) = split("teachers", spec)?;
        taught.entry(name).or_default().extend(list);
    }
    // A pool named by --teachers alone is a checkpoint's: its targets.
    for name in taught.keys() {
        if !given.contains_key(name) {
            let held = start.iter().flat_map(|c| &c.targets);
            let targets = held.filter(|t| t.pool.as_ref() == Some(name));
            given.insert(name.clone(), targets.map(|t| t.name.clone()).collect());
        }
    }
    let members = (given.iter())
        .map(|(n, targets)| (n.as_str(), &targets[..], taught.get(n).map(|t| &t[..])));
    let (of, teaches) = crate::config::pool_members(members)
        .map_err(|e| OfflineError::Settings(format!("--pool {e}")))?;
    Ok(Pools { of, teaches })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_are_named_hold_two_members_and_never_share_one() {
        let list = |s: &str| -> Vec<String> {
            s.split(';')
                .filter(|x| !x.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let both = pools(&list("install=cvr_short,cvr_long"), &[], None).unwrap();
        assert_eq!(both.of["cvr_short"], "install");
        assert_eq!(both.of["cvr_long"], "install");
        assert_eq!(both.teaches, both.of, "its targets teach it");
        let lent = pools(
            &list("install=cvr_long"),
            &list("install=cvr_short,cvr_long"),
            None,
        )
        .unwrap();
        assert_eq!(lent.of.len(), 1);
        assert_eq!(lent.teaches["cvr_short"], "install");
        assert_eq!(lent.teaches["cvr_long"], "install");
        for (p, t) in [
            ("install", ""),
            ("=a,b", ""),
            ("install=a", ""),
            ("install=a,", ""),
            ("p=a,b;q=b,c", ""),
            ("install=a", "install=a"),
            ("p=a,b;q=c,d", "p=a;q=a,d"),
            ("p=a,b;p=c", ""),
        ] {
            assert!(
                pools(&list(p), &list(t), None).is_err(),
                "{p} / {t} accepted"
            );
        }
    }
}
