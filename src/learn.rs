//! `tidemark learn`: offline progressive validation over TSV files
//! (`--input`), or the online learner over shard databases (`--config`),
//! which resumes from and writes checkpoints.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use serde::Deserialize;
use tidemark_checkpoint::Checkpoint;
use tidemark_features::Hashing;
use tidemark_learner::{offline, Ftrl, Metrics, Params};
use tidemark_wire::parse_duration;

#[derive(clap::Args)]
pub struct Args {
    /// The learner's TOML configuration (online mode; see docs/learner.md)
    #[arg(long, conflicts_with = "input")]
    config: Option<PathBuf>,
    /// TSV files (plain or .gz), read in order, for one progressive pass
    #[arg(long, num_args = 1..)]
    input: Vec<PathBuf>,
    /// The first line of each file names the columns
    #[arg(long)]
    header: bool,
    /// Hash into 2^bits weights
    #[arg(long, default_value_t = 22)]
    bits: u8,
    #[arg(long, default_value_t = 0.1)]
    alpha: f64,
    #[arg(long, default_value_t = 1.0)]
    beta: f64,
    #[arg(long, default_value_t = 1.0)]
    l1: f64,
    #[arg(long, default_value_t = 1.0)]
    l2: f64,
    /// Hash seed
    #[arg(long, default_value_t = 0)]
    seed: u32,
    /// Cross two columns into one more feature: `--cross a,b` (repeatable)
    #[arg(long)]
    cross: Vec<String>,
    /// Write each row's progressive prediction (made before learning it), one per line
    #[arg(long)]
    predictions: Option<PathBuf>,
    /// Print the figures as JSON
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match (&args.config, args.input.is_empty()) {
        (Some(path), _) => online(path),
        (None, false) => offline(args),
        (None, true) => bail!("give --input FILE... (offline) or --config FILE (online)"),
    }
}

fn parse_crosses(cross: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    cross
        .iter()
        .map(|c| match c.split_once(',') {
            Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a.to_owned(), b.to_owned())),
            _ => bail!("--cross {c:?}: expected two column names, like a,b"),
        })
        .collect()
}

fn check_params(bits: u8, p: &Params) -> anyhow::Result<()> {
    if !(1..=30).contains(&bits) {
        bail!("bits must be between 1 and 30, got {bits}");
    }
    for (name, v) in [
        ("alpha", p.alpha),
        ("beta", p.beta),
        ("l1", p.l1),
        ("l2", p.l2),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            bail!("{name} must be a non-negative number, got {v}");
        }
    }
    if p.alpha == 0.0 {
        bail!("alpha must be greater than 0");
    }
    Ok(())
}

fn offline(args: Args) -> anyhow::Result<()> {
    let params = Params {
        alpha: args.alpha,
        beta: args.beta,
        l1: args.l1,
        l2: args.l2,
    };
    check_params(args.bits, &params)?;
    let opts = offline::Options {
        bits: args.bits,
        seed: args.seed,
        params,
        header: args.header,
        crosses: parse_crosses(&args.cross)?,
        predictions: args.predictions,
    };
    let r = offline::run(&args.input, &opts).map_err(anyhow::Error::msg)?;
    let nan_null = |x: f64| {
        if x.is_finite() {
            serde_json::json!(x)
        } else {
            serde_json::Value::Null
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "rows": r.rows, "positives": r.positives, "seconds": r.seconds,
                "rows_per_second": r.rows_per_second(), "logloss": r.logloss,
                "auc": nan_null(r.auc), "calibration": nan_null(r.calibration),
            })
        );
    } else {
        println!("rows        {}", r.rows);
        println!("rows/s      {:.0}", r.rows_per_second());
        println!("logloss     {:.6}", r.logloss);
        println!("auc         {:.6}", r.auc);
        println!(
            "calibration {:.4} (mean prediction / label rate)",
            r.calibration
        );
    }
    Ok(())
}

/// The online learner's configuration file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LearnConfig {
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
    alpha: Option<f64>,
    #[serde(default)]
    beta: Option<f64>,
    #[serde(default)]
    l1: Option<f64>,
    #[serde(default)]
    l2: Option<f64>,
    #[serde(default = "default_batch")]
    batch: i64,
    #[serde(default = "default_poll")]
    poll: String,
    #[serde(default = "default_window")]
    window: u64,
    /// Name under which read positions are recorded, so shard retention keeps what is unread.
    #[serde(default = "default_consumer")]
    consumer: String,
    sources: Vec<Source>,
    #[serde(default)]
    targets: BTreeMap<String, TargetParams>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Source {
    name: String,
    database_url: Option<String>,
    shards: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TargetParams {
    alpha: Option<f64>,
    beta: Option<f64>,
    l1: Option<f64>,
    l2: Option<f64>,
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
fn default_window() -> u64 {
    100_000
}
fn default_consumer() -> String {
    "learner".into()
}

impl LearnConfig {
    fn params(&self, target: &str) -> Params {
        let d = Params::default();
        let t = self.targets.get(target);
        let pick = |over: Option<Option<f64>>, global: Option<f64>, default: f64| {
            over.flatten().or(global).unwrap_or(default)
        };
        Params {
            alpha: pick(t.map(|t| t.alpha), self.alpha, d.alpha),
            beta: pick(t.map(|t| t.beta), self.beta, d.beta),
            l1: pick(t.map(|t| t.l1), self.l1, d.l1),
            l2: pick(t.map(|t| t.l2), self.l2, d.l2),
        }
    }
}

struct Learner {
    hashing: Hashing,
    models: BTreeMap<String, (Ftrl, Metrics)>,
    positions: BTreeMap<String, i64>,
    since_checkpoint: u64,
}

fn online(path: &PathBuf) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let cfg: LearnConfig = toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.message()))?;
    let interval = parse_duration(&cfg.checkpoint_interval)
        .map_err(|e| anyhow::anyhow!("checkpoint_interval: {e}"))?;
    let poll = parse_duration(&cfg.poll).map_err(|e| anyhow::anyhow!("poll: {e}"))?;
    if cfg.sources.is_empty() {
        bail!("sources: at least one [[sources]] is required");
    }
    if cfg.batch <= 0 {
        bail!("batch: must be greater than 0");
    }
    check_params(cfg.bits, &cfg.params(""))?;
    for t in cfg.targets.keys() {
        check_params(cfg.bits, &cfg.params(t)).with_context(|| format!("targets.{t}"))?;
    }
    let hashing = Hashing::new(cfg.bits, cfg.seed, cfg.crosses.clone());
    let mut learner = resume(&cfg, hashing)?;
    let urls: Vec<String> = cfg
        .sources
        .iter()
        .map(|s| crate::db::resolve(s.database_url.as_deref()))
        .collect::<anyhow::Result<_>>()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let shutdown = crate::shutdown_signal();
        tokio::pin!(shutdown);
        // A source whose database is away is retried with back-off; the
        // others go on. Positions move only after a batch is read whole.
        let mut sources: Vec<SourceDb> = urls.iter().map(|u| SourceDb::new(u)).collect();
        let mut last_checkpoint = Instant::now();
        tracing::info!(positions = ?learner.positions, "learner started");
        loop {
            let mut learned = 0u64;
            for (s, src) in cfg.sources.iter().zip(&mut sources) {
                let Some(c) = src.client(&s.name).await else {
                    continue;
                };
                let read = async {
                    let shards = match &s.shards {
                        Some(list) => list.clone(),
                        None => tidemark_store::observations::shards(c).await?,
                    };
                    let mut n = 0u64;
                    for shard in shards {
                        let key = format!("{}/{shard}", s.name);
                        let after = learner.positions.get(&key).copied().unwrap_or(i64::MIN);
                        let rows =
                            tidemark_store::observations::read(c, &shard, after, cfg.batch).await?;
                        for o in &rows {
                            learner.learn(&cfg, &o.target, o.label, &o.features);
                        }
                        if let Some(last) = rows.last() {
                            learner.positions.insert(key, last.seq);
                            n += rows.len() as u64;
                        }
                    }
                    Ok::<_, tidemark_store::StoreError>(n)
                }
                .await;
                match read {
                    Ok(n) => learned += n,
                    Err(e) => src.failed(&s.name, &e),
                }
            }
            learner.since_checkpoint += learned;
            let due = learner.since_checkpoint >= cfg.checkpoint_every
                || (learner.since_checkpoint > 0 && last_checkpoint.elapsed() >= interval);
            if due {
                learner.checkpoint(&cfg)?;
                register(&cfg, &mut sources, &learner.positions).await;
                last_checkpoint = Instant::now();
            }
            if learned == 0 {
                tokio::select! {
                    _ = &mut shutdown => break,
                    _ = tokio::time::sleep(poll) => {}
                }
            } else if futures_ready(&mut shutdown).await {
                break;
            }
        }
        learner.checkpoint(&cfg)?;
        register(&cfg, &mut sources, &learner.positions).await;
        tracing::info!("learner stopped cleanly");
        anyhow::Ok(())
    })
}

/// One source database: its connection, or when to try again.
struct SourceDb {
    url: String,
    client: Option<tokio_postgres::Client>,
    retry_at: Option<Instant>,
    wait: std::time::Duration,
}

impl SourceDb {
    fn new(url: &str) -> SourceDb {
        SourceDb {
            url: url.to_owned(),
            client: None,
            retry_at: None,
            wait: std::time::Duration::from_millis(100),
        }
    }

    /// The connection, (re)connecting when due; `None` while the database is away.
    async fn client(&mut self, name: &str) -> Option<&tokio_postgres::Client> {
        if self.client.as_ref().is_some_and(|c| c.is_closed()) {
            self.client = None;
        }
        if self.client.is_none() && self.retry_at.is_none_or(|t| Instant::now() >= t) {
            let connected = async {
                let mut c = tidemark_store::connect(&self.url).await?;
                tidemark_store::migrate(&mut c).await?;
                Ok::<_, tidemark_store::StoreError>(c)
            }
            .await;
            match connected {
                Ok(c) => {
                    if self.retry_at.is_some() {
                        tracing::info!(source = name, "database is back");
                    }
                    self.client = Some(c);
                    self.retry_at = None;
                    self.wait = std::time::Duration::from_millis(100);
                }
                Err(e) => self.failed(name, &e),
            }
        }
        self.client.as_ref()
    }

    /// Drops the connection and backs off: 100 ms doubling to 10 s.
    fn failed(&mut self, name: &str, e: &tidemark_store::StoreError) {
        tracing::warn!(
            source = name,
            "database error, retrying in {:.1}s: {e}",
            self.wait.as_secs_f64()
        );
        self.client = None;
        self.retry_at = Some(Instant::now() + self.wait);
        self.wait = (self.wait * 2).min(std::time::Duration::from_secs(10));
    }
}

/// Records in each source how far the last checkpoint reached, only after it
/// is safely written, so retention never deletes what a restart would re-read.
/// A source that is away is told at a later checkpoint.
async fn register(cfg: &LearnConfig, sources: &mut [SourceDb], positions: &BTreeMap<String, i64>) {
    for (s, src) in cfg.sources.iter().zip(sources) {
        let Some(c) = src.client(&s.name).await else {
            continue;
        };
        let prefix = format!("{}/", s.name);
        for (key, seq) in positions {
            if let Some(shard) = key.strip_prefix(&prefix) {
                if let Err(e) =
                    tidemark_store::observations::record_position(c, &cfg.consumer, shard, *seq)
                        .await
                {
                    src.failed(&s.name, &e);
                    break;
                }
            }
        }
    }
}

/// Whether `f` has completed, without waiting.
async fn futures_ready<F: std::future::Future + Unpin>(f: &mut F) -> bool {
    tokio::select! {
        biased;
        _ = f => true,
        _ = std::future::ready(()) => false,
    }
}

/// Starts from the latest checkpoint in the directory, or from nothing.
fn resume(cfg: &LearnConfig, hashing: Hashing) -> anyhow::Result<Learner> {
    let mut learner = Learner {
        hashing,
        models: BTreeMap::new(),
        positions: BTreeMap::new(),
        since_checkpoint: 0,
    };
    let Some(path) = tidemark_checkpoint::latest(&cfg.checkpoint_dir) else {
        return Ok(learner);
    };
    let c = Checkpoint::read(&path, true)
        .with_context(|| format!("resuming from {}", path.display()))?;
    if c.hashing != learner.hashing {
        bail!(
            "{} was trained with hashing {:?}, the configuration says {:?}: use a new checkpoint_dir to change bits, seed or crosses",
            path.display(),
            c.hashing,
            learner.hashing
        );
    }
    for t in &c.targets {
        let model = Ftrl::from_target(t, learner.hashing.slots());
        learner
            .models
            .insert(t.name.clone(), (model, Metrics::new(cfg.window)));
    }
    learner.positions = c.positions;
    tracing::info!(checkpoint = %path.display(), "resumed");
    Ok(learner)
}

impl Learner {
    fn learn(&mut self, cfg: &LearnConfig, target: &str, label: bool, features: &str) {
        let Ok(serde_json::Value::Object(map)) = serde_json::from_str(features) else {
            tracing::warn!(
                target,
                "observation with features that are not a JSON object: skipped"
            );
            return;
        };
        let mut x = Vec::with_capacity(map.len() + 1);
        self.hashing.hash_json(&map, &mut x);
        let slots = self.hashing.slots();
        let (model, metrics) = self.models.entry(target.to_owned()).or_insert_with(|| {
            (
                Ftrl::new(cfg.params(target), slots),
                Metrics::new(cfg.window),
            )
        });
        let p = model.learn(&x, label);
        metrics.add(p, label);
    }

    fn checkpoint(&mut self, cfg: &LearnConfig) -> anyhow::Result<()> {
        let targets = self
            .models
            .iter()
            .map(|(name, (m, metrics))| m.to_target(name, metrics.to_json()))
            .collect();
        let c = Checkpoint {
            hashing: self.hashing.clone(),
            targets,
            positions: self.positions.clone(),
            created_at_ms: crate::publish::now_ms(),
        };
        let path = tidemark_checkpoint::publish(&cfg.checkpoint_dir, &c, cfg.keep)
            .with_context(|| format!("writing a checkpoint in {}", cfg.checkpoint_dir.display()))?;
        let summary: HashMap<&str, String> = self
            .models
            .iter()
            .map(|(n, (m, x))| {
                let r = x.recent();
                (
                    n.as_str(),
                    format!(
                        "trained {} logloss {:.5} recent {:.5} auc {:.4} calibration {:.3}",
                        m.trained,
                        x.total.logloss(),
                        r.logloss(),
                        x.auc(),
                        r.calibration()
                    ),
                )
            })
            .collect();
        tracing::info!(checkpoint = %path.display(), ?summary, "checkpoint written");
        self.since_checkpoint = 0;
        Ok(())
    }
}
