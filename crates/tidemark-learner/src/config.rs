//! The online learner's configuration (`docs/learner.md`): one TOML file,
//! validated at start with messages that name the offending key.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use tidemark_features::{Hashing, Transform};
use tidemark_ftrl::{Grid, Params};
use tidemark_wire::parse_duration;

/// A configuration that cannot be used, naming the key at fault.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

/// A validated learner configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where checkpoints are written and resumed from.
    pub checkpoint_dir: PathBuf,
    /// Observations between checkpoints.
    pub checkpoint_every: u64,
    /// A checkpoint at least this often while learning.
    pub checkpoint_interval: Duration,
    /// Checkpoints kept for rollback.
    pub keep: usize,
    /// Feature hashing shared by every target.
    pub hashing: Hashing,
    /// Observations read per query.
    pub batch: i64,
    /// The wait when every stream is drained.
    pub poll: Duration,
    /// Longest a source may take to answer one round of reads before it is
    /// treated as away (a host cut off answers nothing, it does not refuse).
    pub source_timeout: Duration,
    /// Rows in the sliding metrics window.
    pub window: u64,
    /// The name read positions are registered under in each source.
    pub consumer: String,
    /// The databases read, in order.
    pub sources: Vec<Source>,
    /// Where to serve Prometheus metrics (`host:port`), if anywhere.
    pub metrics_addr: Option<String>,
    /// The settings every new target tunes over (`[tuning]`).
    pub grid: Grid,
    /// Per target, the pool it shares weights in (`[pools.<name>]
    /// targets = [...]`), when it is first learned (docs/learner.md).
    pub pools: BTreeMap<String, String>,
    /// Per pool, the settings it learns with (its own keys, else the file's).
    pub pool_settings: BTreeMap<String, Params>,
    /// Per target, the pool its rows teach: a pool's `teachers`, which
    /// default to its `targets`.
    pub teaches: BTreeMap<String, String>,
    defaults: Params,
    targets: BTreeMap<String, Params>,
}

/// One database of shard observation streams.
#[derive(Debug, Clone)]
pub struct Source {
    /// Names the positions: `<name>/<shard>`.
    pub name: String,
    /// `None`: the embedded default (see [`Config::default_database`]).
    pub database_url: Option<String>,
    /// `None`: every shard registered in the database.
    pub shards: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    checkpoint_dir: PathBuf,
    #[serde(default = "default_every")]
    checkpoint_every: u64,
    #[serde(default = "default_interval")]
    checkpoint_interval: String,
    #[serde(default = "default_keep")]
    keep: usize,
    #[serde(default = "default_bits")]
    bits: u8,
    #[serde(default)]
    seed: u32,
    #[serde(default)]
    crosses: Vec<(String, String)>,
    #[serde(default)]
    transforms: BTreeMap<String, String>,
    #[serde(default)]
    omit: BTreeMap<String, Vec<String>>,
    alpha: Option<f64>,
    beta: Option<f64>,
    l1: Option<f64>,
    l2: Option<f64>,
    #[serde(default = "default_batch")]
    batch: i64,
    #[serde(default = "default_poll")]
    poll: String,
    #[serde(default = "default_source_timeout")]
    source_timeout: String,
    #[serde(default = "default_window")]
    window: u64,
    #[serde(default = "default_consumer")]
    consumer: String,
    #[serde(default)]
    sources: Vec<RawSource>,
    #[serde(default)]
    targets: BTreeMap<String, RawParams>,
    metrics_addr: Option<String>,
    tuning: Option<RawTuning>,
    #[serde(default)]
    pools: BTreeMap<String, RawPool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPool {
    targets: Vec<String>,
    teachers: Option<Vec<String>>,
    alpha: Option<f64>,
    beta: Option<f64>,
    l1: Option<f64>,
    l2: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTuning {
    alpha: Option<Vec<f64>>,
    l2: Option<Vec<f64>>,
    half_life: Option<f64>,
    rate: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    name: String,
    database_url: Option<String>,
    shards: Option<Vec<String>>,
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(deny_unknown_fields)]
struct RawParams {
    alpha: Option<f64>,
    beta: Option<f64>,
    l1: Option<f64>,
    l2: Option<f64>,
}

impl RawParams {
    fn over(self, base: Params) -> Params {
        Params {
            alpha: self.alpha.unwrap_or(base.alpha),
            beta: self.beta.unwrap_or(base.beta),
            l1: self.l1.unwrap_or(base.l1),
            l2: self.l2.unwrap_or(base.l2),
        }
    }
}

fn default_every() -> u64 {
    100_000
}
fn default_interval() -> String {
    "30s".into()
}
fn default_keep() -> usize {
    5
}
fn default_bits() -> u8 {
    22
}
fn default_batch() -> i64 {
    10_000
}
fn default_poll() -> String {
    "1s".into()
}
fn default_source_timeout() -> String {
    "30s".into()
}
fn default_window() -> u64 {
    100_000
}
fn default_consumer() -> String {
    "learner".into()
}

/// Per pooled target its pool, and per teacher the pool its rows teach.
pub(crate) type PoolMembers = (BTreeMap<String, String>, BTreeMap<String, String>);

/// The pools' members by the rules `[pools]` and `learn --pool` share: a
/// pool has a name, a target or more, and two members or more among its
/// targets and teachers (`None`: its targets); a target is in one pool, a
/// teacher teaches one. An error starts with the pool's name, for the
/// caller to prefix (`pools.`, `--pool `).
pub(crate) fn pool_members<'a>(
    pools: impl IntoIterator<Item = (&'a str, &'a [String], Option<&'a [String]>)>,
) -> Result<PoolMembers, String> {
    let (mut of, mut teaches) = (BTreeMap::new(), BTreeMap::new());
    for (pool, targets, teachers) in pools {
        let teachers = teachers.unwrap_or(targets);
        let mut members: Vec<&String> = targets.iter().chain(teachers).collect();
        members.sort();
        members.dedup();
        if pool.is_empty() || targets.is_empty() || members.len() < 2 {
            return Err(format!(
                "{pool}: a pool has a name, a target or more, and two members or more among its targets and teachers"
            ));
        }
        if teachers.is_empty() || members.iter().any(|m| m.is_empty()) {
            return Err(format!(
                "{pool}: name each target and teacher, one teacher or more"
            ));
        }
        for t in targets {
            if let Some(other) = of.insert(t.clone(), pool.to_owned()) {
                return Err(format!("{pool}: target {t} is already in pool {other}"));
            }
        }
        for t in teachers {
            if let Some(other) = teaches.insert(t.clone(), pool.to_owned()) {
                return Err(format!("{pool}.teachers: {t} already teaches pool {other}"));
            }
        }
    }
    Ok((of, teaches))
}

/// The features each target's rows leave out, from `target → names`
/// pairs (a configuration's `[omit]`, `learn --omit TARGET=NAME`); an
/// error names the target at fault.
pub fn parse_omit<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a [String])>,
) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let mut omit: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (target, names) in pairs {
        if target.is_empty() {
            return Err("a target needs a name".into());
        }
        for n in names {
            if n.is_empty() {
                return Err(format!("{target}: a feature name is empty"));
            }
            omit.entry(target.to_owned()).or_default().insert(n.clone());
        }
    }
    Ok(omit)
}

/// Numeric transforms by feature name, from `name → text` pairs (a
/// configuration's `[transforms]`, `learn --transform NAME=T`); an error
/// starts with the name at fault.
pub fn parse_transforms<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<BTreeMap<String, Transform>, String> {
    pairs
        .into_iter()
        .map(|(n, t)| {
            Transform::parse(t)
                .map(|t| (n.to_owned(), t))
                .map_err(|e| format!("{n}: {e}"))
        })
        .collect()
}

/// Checks `bits` as hashing takes it.
pub fn check_bits(bits: u8) -> Result<(), ConfigError> {
    if (1..=30).contains(&bits) {
        Ok(())
    } else {
        Err(ConfigError(format!(
            "bits must be between 1 and 30, got {bits}"
        )))
    }
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        Config::from_toml_with(&text, tidemark_wire::env_vars())
            .map_err(|e| ConfigError(format!("{}: {e}", path.display())))
    }

    /// Parses and validates a configuration.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml_with(text, [])
    }

    /// Parses and validates a configuration with environment overrides:
    /// `TIDEMARK_LEARNER_<KEY>` variables among `vars` (docs/operations.md).
    pub fn from_toml_with(
        text: &str,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let raw: Raw = tidemark_wire::parse_toml_env(text, "TIDEMARK_LEARNER_", vars)
            .map_err(|(key, message)| ConfigError(format!("{key}: {message}")))?;
        let duration =
            |key: &str, v: &str| parse_duration(v).map_err(|e| ConfigError(format!("{key}: {e}")));
        let checkpoint_interval = duration("checkpoint_interval", &raw.checkpoint_interval)?;
        let poll = duration("poll", &raw.poll)?;
        let source_timeout = duration("source_timeout", &raw.source_timeout)?;
        if source_timeout.is_zero() {
            return Err(ConfigError("source_timeout: must be greater than 0".into()));
        }
        if raw.sources.is_empty() {
            return Err(ConfigError(
                "sources: at least one [[sources]] is required".into(),
            ));
        }
        if raw.batch <= 0 {
            return Err(ConfigError("batch: must be greater than 0".into()));
        }
        if raw.keep == 0 {
            return Err(ConfigError("keep: must be at least 1".into()));
        }
        check_bits(raw.bits)?;
        let file = RawParams {
            alpha: raw.alpha,
            beta: raw.beta,
            l1: raw.l1,
            l2: raw.l2,
        };
        let defaults = file.over(Params::default());
        defaults.validate().map_err(ConfigError)?;
        let mut targets = BTreeMap::new();
        for (name, t) in raw.targets {
            let p = t.over(defaults);
            p.validate()
                .map_err(|e| ConfigError(format!("targets.{name}: {e}")))?;
            targets.insert(name, p);
        }
        let grid = match raw.tuning {
            None => Grid::default(),
            Some(t) => {
                let d = Grid::default();
                Grid {
                    alpha: t.alpha.unwrap_or(d.alpha),
                    l2: t.l2.unwrap_or(d.l2),
                    half_life: t.half_life.unwrap_or(d.half_life),
                    rate: t.rate.unwrap_or(d.rate),
                }
            }
        };
        grid.validate()
            .map_err(|e| ConfigError(format!("tuning.{e}")))?;
        let transforms =
            parse_transforms(raw.transforms.iter().map(|(n, t)| (n.as_str(), t.as_str())))
                .map_err(|e| ConfigError(format!("transforms.{e}")))?;
        let omit = parse_omit(raw.omit.iter().map(|(t, n)| (t.as_str(), &n[..])))
            .map_err(|e| ConfigError(format!("omit.{e}")))?;
        let members =
            (raw.pools.iter()).map(|(n, p)| (n.as_str(), &p.targets[..], p.teachers.as_deref()));
        let (pools, teaches) =
            pool_members(members).map_err(|e| ConfigError(format!("pools.{e}")))?;
        let mut pool_settings = BTreeMap::new();
        for (name, p) in &raw.pools {
            let settings = RawParams {
                alpha: p.alpha,
                beta: p.beta,
                l1: p.l1,
                l2: p.l2,
            }
            .over(defaults);
            settings
                .validate()
                .map_err(|e| ConfigError(format!("pools.{name}: {e}")))?;
            pool_settings.insert(name.clone(), settings);
        }
        Ok(Config {
            checkpoint_dir: raw.checkpoint_dir,
            checkpoint_every: raw.checkpoint_every,
            checkpoint_interval,
            keep: raw.keep,
            hashing: Hashing::new(raw.bits, raw.seed, raw.crosses)
                .with_transforms(transforms)
                .with_omit(omit),
            batch: raw.batch,
            poll,
            source_timeout,
            window: raw.window,
            consumer: raw.consumer,
            sources: raw
                .sources
                .into_iter()
                .map(|s| Source {
                    name: s.name,
                    database_url: s.database_url,
                    shards: s.shards,
                })
                .collect(),
            metrics_addr: raw.metrics_addr,
            grid,
            pools,
            pool_settings,
            teaches,
            defaults,
            targets,
        })
    }

    /// The settings pool `name` learns with: its own, else the file's,
    /// else SPEC 8's.
    pub fn pool_params(&self, name: &str) -> Params {
        self.pool_settings
            .get(name)
            .copied()
            .unwrap_or(self.defaults)
    }

    /// The learning settings of a target: its own, else the file's, else SPEC 8's.
    pub fn params(&self, target: &str) -> Params {
        self.targets.get(target).copied().unwrap_or(self.defaults)
    }

    /// Whether some source names no database (it then uses the embedded default).
    pub fn needs_default_database(&self) -> bool {
        self.sources.iter().any(|s| s.database_url.is_none())
    }

    /// Gives sources that name no database this one.
    pub fn default_database(&mut self, url: &str) {
        for s in &mut self.sources {
            s.database_url.get_or_insert_with(|| url.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_overrides_fall_back_to_the_file_then_spec_defaults() {
        let c = Config::from_toml(
            r#"checkpoint_dir = "c"
               alpha = 0.2
               [[sources]]
               name = "a"
               [targets.cvr_long]
               l1 = 3.0"#,
        )
        .unwrap();
        assert_eq!(c.params("ctr").alpha, 0.2);
        assert_eq!(c.params("ctr").l1, 1.0);
        assert_eq!(c.params("cvr_long").alpha, 0.2);
        assert_eq!(c.params("cvr_long").l1, 3.0);
        assert_eq!(c.checkpoint_interval, Duration::from_secs(30));
        assert!(c.needs_default_database());
        assert!(c.hashing.transforms.is_empty());
        let t = Config::from_toml(
            "checkpoint_dir = \"c\"\n[transforms]\nclk = \"log1p\"\n[[sources]]\nname = \"a\"\n",
        )
        .unwrap();
        assert_eq!(t.hashing.transforms["clk"], Transform::Log1p);
        assert!(t.hashing.omit.is_empty());
        let o = Config::from_toml(
            "checkpoint_dir = \"c\"\n[omit]\ncvr_long = [\"hour\", \"day\"]\nctr = []\n[[sources]]\nname = \"a\"\n",
        )
        .unwrap();
        assert_eq!(o.hashing.omitted("cvr_long").unwrap().len(), 2);
        assert!(
            o.hashing.omitted("ctr").is_none(),
            "an empty list omits nothing"
        );
        assert_eq!(t.grid, Grid::default());
        let off = Config::from_toml(
            "checkpoint_dir = \"c\"\n[tuning]\nalpha = [1.0]\nl2 = [1.0]\n[[sources]]\nname = \"a\"\n",
        )
        .unwrap();
        assert_eq!(off.grid.alpha.len() * off.grid.l2.len(), 1);
        assert!(off.pools.is_empty());
        let pooled = Config::from_toml(
            "checkpoint_dir = \"c\"\nalpha = 0.2\n[pools.install]\ntargets = [\"cvr_short\", \"cvr_long\"]\nalpha = 0.05\n[[sources]]\nname = \"a\"\n",
        )
        .unwrap();
        assert_eq!(pooled.pools["cvr_long"], "install");
        assert_eq!(pooled.pools.len(), 2);
        assert_eq!(pooled.pool_params("install").alpha, 0.05);
        assert_eq!(pooled.pool_params("install").l2, 1.0);
        assert_eq!(pooled.pool_params("other").alpha, 0.2);
        assert_eq!(pooled.teaches, pooled.pools, "its targets teach it");
        let lent = Config::from_toml(
            "checkpoint_dir = \"c\"\n[pools.install]\ntargets = [\"cvr_long\"]\nteachers = [\"cvr_short\"]\n[[sources]]\nname = \"a\"\n",
        )
        .unwrap();
        assert_eq!(lent.pools.len(), 1);
        assert_eq!(lent.teaches["cvr_short"], "install");
        assert!(!lent.teaches.contains_key("cvr_long"));
    }

    #[test]
    fn errors_name_the_key() {
        let base = "checkpoint_dir = \"c\"\n[[sources]]\nname = \"a\"\n";
        for (extra, want) in [
            ("poll = \"soon\"\n", "poll"),
            ("batch = 0\n", "batch"),
            ("bits = 31\n", "bits"),
            ("alpha = 0.0\n", "alpha"),
            ("[targets.ctr]\nl2 = -1.0\n", "targets.ctr"),
            ("[transforms]\nclk = \"log2\"\n", "transforms.clk"),
            ("[omit]\ncvr_long = [\"\"]\n", "omit.cvr_long"),
            ("[tuning]\nalpha = [1.0, -2.0]\n", "tuning.alpha"),
            ("[tuning]\nhalf_life = 0.0\n", "tuning.half_life"),
            (
                "[pools.install]\ntargets = [\"cvr_long\"]\n",
                "pools.install",
            ),
            (
                "[pools.a]\ntargets = [\"x\", \"y\"]\n[pools.b]\ntargets = [\"y\", \"z\"]\n",
                "pools.b: target y is already in pool a",
            ),
            (
                "[pools.a]\ntargets = [\"x\", \"y\"]\nalpha = 0.0\n",
                "pools.a: alpha",
            ),
            (
                "[pools.a]\ntargets = [\"x\"]\nteachers = [\"x\"]\n",
                "pools.a: a pool has",
            ),
        ] {
            let text = if extra.starts_with('[') {
                format!("{base}{extra}")
            } else {
                format!("{extra}{base}")
            };
            let e = Config::from_toml(&text).unwrap_err().to_string();
            assert!(e.contains(want), "{extra:?}: {e}");
        }
        assert!(Config::from_toml("checkpoint_dir = \"c\"")
            .unwrap_err()
            .to_string()
            .contains("sources"));
    }
}
