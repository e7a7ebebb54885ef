//! The online learner: reads each shard's observation stream in `seq` order,
//! learns, checkpoints, and records in each source how far it has read.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures_util::future::try_join_all;
use tidemark_checkpoint::Checkpoint;
use tidemark_ftrl::{Kind, Models, Row};
use tidemark_store::observations::{self, Observation};
use tidemark_store::StoreError;

use crate::metrics;
use crate::sources::SourceDb;
use crate::Config;

/// Why the learner stopped other than cleanly.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A source's database URL is unusable.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The metrics endpoint could not start (`metrics_addr`).
    #[error("{0}")]
    Metrics(String),
    /// The latest checkpoint could not be read.
    #[error("resuming from {path}: {error}")]
    Resume {
        /// The checkpoint file.
        path: PathBuf,
        /// What was wrong with it.
        error: String,
    },
    /// The latest checkpoint was hashed otherwise than the configuration says.
    #[error("{path} was trained with hashing {found:?}, the configuration says {configured:?}: use a new checkpoint_dir to change bits, seed, crosses, transforms or omit")]
    HashingChanged {
        /// The checkpoint file.
        path: PathBuf,
        /// Its hashing.
        found: Box<tidemark_features::Hashing>,
        /// The configuration's.
        configured: Box<tidemark_features::Hashing>,
    },
    /// A checkpoint could not be written.
    #[error("writing a checkpoint in {dir}: {error}")]
    Checkpoint {
        /// The checkpoint directory.
        dir: PathBuf,
        /// The IO error.
        error: std::io::Error,
    },
}

/// What a learner did in this run.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Observations learned in this run.
    pub learned: u64,
    /// Checkpoints written in this run.
    pub checkpoints: u64,
    /// The last checkpoint written.
    pub last_checkpoint: Option<PathBuf>,
}

/// Learns until `shutdown` completes, then writes a last checkpoint and
/// returns. Every source must name its database
/// ([`Config::default_database`]). A source whose database is away is
/// retried with back-off while the others go on; positions move only after a
/// batch is read whole, and are registered in a source only after the
/// checkpoint holding them is written.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<Summary, TrainError> {
    let mut sources: Vec<SourceDb> = config
        .sources
        .iter()
        .map(SourceDb::new)
        .collect::<Result<_, _>>()?;
    let mut state = resume(&config)?;
    tracing::info!(positions = ?state.positions, "learner started");
    let board = tidemark_metrics::Board::default();
    let checkpointed = Arc::new(AtomicI64::new(now_ms()));
    let _metrics = match &config.metrics_addr {
        Some(addr) => {
            let (b, at) = (board.clone(), checkpointed.clone());
            let e = tidemark_metrics::serve(addr, "learner", move || {
                let mut v = b.read();
                let age = (now_ms() - at.load(Ordering::Relaxed)) as f64 / 1000.0;
                v.push(metrics::CHECKPOINT_AGE.sample(&[], age));
                v
            })
            .map_err(|e| TrainError::Metrics(e.to_string()))?;
            tracing::info!(addr = e.addr, "serving metrics at /metrics");
            Some(e)
        }
        None => None,
    };
    board.post(state.samples());
    tokio::pin!(shutdown);
    let mut summary = Summary::default();
    let mut last_checkpoint = Instant::now();
    tidemark_metrics::alive::ready();
    loop {
        tidemark_metrics::alive::beat();
        let mut learned = 0u64;
        for src in &mut sources {
            learned += state.read_source(&config, src).await;
        }
        state.since_checkpoint += learned;
        summary.learned += learned;
        let due = state.since_checkpoint >= config.checkpoint_every
            || (state.since_checkpoint > 0
                && last_checkpoint.elapsed() >= config.checkpoint_interval);
        if learned > 0 {
            board.post(state.samples());
        }
        if due {
            summary.last_checkpoint = Some(state.checkpoint(&config)?);
            checkpointed.store(now_ms(), Ordering::Relaxed);
            summary.checkpoints += 1;
            register(&config, &mut sources, &state.positions).await;
            last_checkpoint = Instant::now();
        }
        if learned == 0 {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(config.poll) => {}
            }
        } else if is_ready(&mut shutdown).await {
            break;
        }
    }
    summary.last_checkpoint = Some(state.checkpoint(&config)?);
    summary.checkpoints += 1;
    register(&config, &mut sources, &state.positions).await;
    tracing::info!("learner stopped cleanly");
    Ok(summary)
}

/// The models and how far each stream has been read (`<source>/<shard>` → seq).
struct State {
    models: Models,
    positions: BTreeMap<String, i64>,
    since_checkpoint: u64,
    /// Per target: checkpoints at which it was found unfit and restored.
    refused: BTreeMap<String, u64>,
    /// Streams whose position is ahead of their last seq, said once.
    ahead: std::collections::BTreeSet<String>,
}

/// Starts from the latest checkpoint in the directory, or from nothing,
/// after removing what a writer killed mid-write left behind.
fn resume(config: &Config) -> Result<State, TrainError> {
    match tidemark_checkpoint::remove_stale_temporaries(&config.checkpoint_dir) {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            removed = n,
            "removed temporary files a learner killed mid-write left behind"
        ),
        Err(e) => tracing::warn!("could not list the checkpoint directory: {e}"),
    }
    let fresh = State {
        models: Models::new(config.hashing.clone(), config.window)
            .with_grid(config.grid.clone())
            .with_pools(&config.pools, |p| config.pool_params(p))
            .with_teachers(&config.teaches),
        positions: BTreeMap::new(),
        since_checkpoint: 0,
        refused: BTreeMap::new(),
        ahead: Default::default(),
    };
    let Some(path) = tidemark_checkpoint::latest(&config.checkpoint_dir) else {
        return Ok(fresh);
    };
    let c = Checkpoint::read(&path, true).map_err(|e| TrainError::Resume {
        path: path.clone(),
        error: e.to_string(),
    })?;
    if c.hashing != config.hashing {
        return Err(TrainError::HashingChanged {
            path,
            found: Box::new(c.hashing),
            configured: Box::new(config.hashing.clone()),
        });
    }
    tracing::info!(checkpoint = %path.display(), "resumed");
    Ok(State {
        models: Models::from_checkpoint(&c, config.window)
            .with_grid(config.grid.clone())
            .with_pools(&config.pools, |p| config.pool_params(p))
            .with_teachers(&config.teaches),
        positions: c.positions,
        since_checkpoint: 0,
        refused: BTreeMap::new(),
        ahead: Default::default(),
    })
}

impl State {
    /// Reads one batch of every shard stream of a source (concurrently, one
    /// pooled connection each) and learns them in shard order. Returns the
    /// rows learned; on an error the source backs off and nothing of this
    /// round is learned from it.
    async fn read_source(&mut self, config: &Config, src: &mut SourceDb) -> u64 {
        // Connecting (bounded by the connect timeout) and a first contact's
        // migration stay outside `source_timeout`: it bounds the reads.
        let Some(c) = src.client().await else {
            return 0;
        };
        let read = async {
            let shards = match &src.source.shards {
                Some(list) => list.clone(),
                None => observations::shards(&c).await?,
            };
            let reads = shards.iter().map(|shard| {
                let after = self
                    .positions
                    .get(&key(&src.source.name, shard))
                    .copied()
                    .unwrap_or(i64::MIN);
                let src = &*src;
                async move {
                    let c = src.another().await?;
                    let rows = observations::read(&c, shard, after, config.batch).await?;
                    // Is the position ahead of the stream (a failover lost
                    // what was read)? Either nothing is after it and the
                    // stream ends before it, or the stream resumes past a
                    // jump (SPEC 12: seq jumps past a recorded gap) before
                    // this reader saw it end. Said, and read on.
                    let ahead = match (rows.first(), after > i64::MIN) {
                        (None, true) => {
                            observations::last_seq(&c, shard).await?.unwrap_or(0) < after
                        }
                        (Some(first), true) => first.seq > after.saturating_add(1),
                        (_, false) => false,
                    };
                    Ok::<_, StoreError>((rows, ahead))
                }
            });
            let batches = try_join_all(reads).await?;
            Ok::<_, StoreError>(shards.into_iter().zip(batches).collect::<Vec<_>>())
        };
        let read = tokio::time::timeout(config.source_timeout, read).await;
        drop(c);
        let batches = match read {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => {
                src.failed(&e);
                return 0;
            }
            Err(_) => {
                // Its connections may hang until TCP gives up: new ones next time.
                src.reset();
                src.failed(&StoreError::Lost(format!(
                    "no answer within source_timeout ({:?})",
                    config.source_timeout
                )));
                return 0;
            }
        };
        let mut n = 0;
        for (shard, (rows, ahead)) in batches {
            let stream = key(&src.source.name, &shard);
            if ahead && self.ahead.insert(stream.clone()) {
                tracing::warn!(
                    stream,
                    position = self.positions.get(&stream).copied(),
                    "the saved position is ahead of the stream (its last seq is behind it, or \
                     it resumes past a jump: a database failover or crash lost observations this \
                     learner had read); reading on from it, as the shard's seq jumps past every \
                     number it may have given before"
                );
            } else if !ahead && !rows.is_empty() {
                self.ahead.remove(&stream);
            }
            if ahead && !rows.is_empty() {
                // Said once for the jump; the stream goes on from here.
                self.ahead.remove(&stream);
            }
            n += self.learn(config, &rows);
            if let Some(last) = rows.last() {
                self.positions
                    .insert(key(&src.source.name, &shard), last.seq);
            }
        }
        n
    }

    fn learn(&mut self, config: &Config, rows: &[Observation]) -> u64 {
        for o in rows {
            let Ok(serde_json::Value::Object(features)) = serde_json::from_str(&o.features) else {
                tracing::warn!(
                    target = o.target,
                    "observation with features that are not a JSON object: skipped"
                );
                continue;
            };
            // A kind this learner does not know (a newer shard's) is
            // learned as a final label rather than dropped.
            let kind = Kind::parse(&o.kind).unwrap_or(Kind::Final);
            let row = Row::of(o.label, kind).member(&o.txid);
            self.models
                .learn(&o.target, || config.params(&o.target), &features, row);
        }
        // Once per (target, feature), bounded: a flood of hostile values
        // is counted in the metrics, not logged row by row.
        for (target, feature) in self.models.take_new_out_of_range() {
            tracing::warn!(
                target,
                feature,
                "a numeric value not finite or over 1e15 in magnitude: left out of its rows \
                 (counted as numeric_out_of_range, logged once per target and feature)"
            );
        }
        rows.len() as u64
    }

    /// What the metrics endpoint shows: per target the rows learned in
    /// this run and the progressive logloss, overall and recent; per stream
    /// the position reached.
    fn samples(&self) -> Vec<tidemark_metrics::Sample> {
        let mut v = Vec::new();
        for (target, (model, m)) in &self.models.targets {
            let t = [("target", target.as_str())];
            v.push(metrics::ROWS.sample(&t, model.trained as f64));
            v.push(metrics::LOGLOSS.sample(&t, m.total.logloss()));
            v.push(metrics::RECENT_LOGLOSS.sample(&t, m.recent().logloss()));
            let c = model.choice();
            v.push(metrics::TUNING_SWITCHES.sample(&t, c.switches as f64));
            for (j, p) in c.settings.iter().enumerate() {
                let (alpha, l2) = (p.alpha.to_string(), p.l2.to_string());
                let rate_only = p.is_rate_only().to_string();
                let l = [
                    ("target", target.as_str()),
                    ("alpha", &alpha),
                    ("l2", &l2),
                    ("rate_only", &rate_only),
                ];
                v.push(metrics::TUNING_RECENT_LOGLOSS.sample(&l, c.recent_loss[j]));
                v.push(metrics::TUNING_CHOSEN.sample(&l, f64::from(u8::from(j == c.chosen))));
            }
        }
        for ((target, feature), n) in &self.models.out_of_range {
            v.push(
                metrics::NUMERIC_OUT_OF_RANGE
                    .sample(&[("target", target), ("feature", feature)], *n as f64),
            );
        }
        for (target, n) in &self.refused {
            v.push(metrics::CHECKPOINT_REFUSED.sample(&[("target", target)], *n as f64));
        }
        for stream in &self.ahead {
            v.push(metrics::POSITION_AHEAD.sample(&[("stream", stream)], 1.0));
        }
        for (stream, seq) in &self.positions {
            v.push(metrics::POSITION.sample(&[("stream", stream)], *seq as f64));
        }
        v
    }

    fn checkpoint(&mut self, config: &Config) -> Result<PathBuf, TrainError> {
        let mut c = self.models.to_checkpoint(self.positions.clone(), now_ms());
        let unfit = unfit(&c);
        if !unfit.is_empty() {
            self.restore(config, &unfit);
            c = self.models.to_checkpoint(self.positions.clone(), now_ms());
        }
        let path = tidemark_checkpoint::publish(&config.checkpoint_dir, &c, config.keep).map_err(
            |error| TrainError::Checkpoint {
                dir: config.checkpoint_dir.clone(),
                error,
            },
        )?;
        tracing::info!(checkpoint = %path.display(), summary = ?self.models.summary(), "checkpoint written");
        self.since_checkpoint = 0;
        Ok(path)
    }
}

/// A part of the models a checkpoint holds: a target or a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Target,
    Pool,
}

/// Every target and pool of `c` holding a number that is not finite:
/// `(part, name, what was found)`.
fn unfit(c: &Checkpoint) -> Vec<(Part, String, String)> {
    let targets = c.targets.iter().map(|t| (Part::Target, t));
    let pools = c.pools.iter().map(|p| (Part::Pool, p));
    (targets.chain(pools))
        .filter_map(|(part, t)| t.non_finite().map(|why| (part, t.name.clone(), why)))
        .collect()
}

impl State {
    /// Puts each unfit target or pool back as the last checkpoint written
    /// holds it (or starts it afresh without one), so bidders get a sound
    /// model again at this very checkpoint instead of none for ever (SPEC
    /// 10, v1.3). The rows it learned since are lost to it; the positions
    /// stay, as every other part learned them. A pool's targets keep their
    /// own weights.
    fn restore(&mut self, config: &Config, unfit: &[(Part, String, String)]) {
        let last = tidemark_checkpoint::latest(&config.checkpoint_dir)
            .and_then(|p| Checkpoint::read(&p, true).ok());
        for (part, name, why) in unfit {
            let held = last.as_ref().map_or(&[][..], |c| match part {
                Part::Target => &c.targets[..],
                Part::Pool => &c.pools[..],
            });
            let good = held.iter().find(|t| &t.name == name);
            tracing::error!(
                part = ?part,
                name,
                found = why,
                resumed_from = if good.is_some() { "the last checkpoint" } else { "nothing (no checkpoint holds it)" },
                "a model holds a number that is not finite: it is not written; it resumes from its last good state"
            );
            let counted = match part {
                Part::Target => name.clone(),
                Part::Pool => format!("pool:{name}"),
            };
            *self.refused.entry(counted).or_insert(0) += 1;
            match part {
                Part::Target => self.models.restore(name, good),
                Part::Pool => self.models.restore_pool(name, good),
            }
        }
    }
}

fn key(source: &str, shard: &str) -> String {
    format!("{source}/{shard}")
}

/// Records in each source how far the last checkpoint reached, only after it
/// is safely written, so retention never deletes what a restart would re-read.
/// A source that is away is told at a later checkpoint.
async fn register(config: &Config, sources: &mut [SourceDb], positions: &BTreeMap<String, i64>) {
    for src in sources {
        let prefix = format!("{}/", src.source.name);
        let write = async {
            let Some(c) = src.client().await else {
                return Ok(());
            };
            for (key, seq) in positions {
                if let Some(shard) = key.strip_prefix(&prefix) {
                    observations::record_position(&c, &config.consumer, shard, *seq).await?;
                }
            }
            Ok::<_, StoreError>(())
        };
        match tokio::time::timeout(config.source_timeout, write).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => src.failed(&e),
            Err(_) => {
                src.reset();
                src.failed(&StoreError::Lost(format!(
                    "no answer within source_timeout ({:?})",
                    config.source_timeout
                )));
            }
        }
    }
}

/// Whether `f` has completed, without waiting.
async fn is_ready<F: Future + Unpin>(f: &mut F) -> bool {
    tokio::select! {
        biased;
        _ = f => true,
        _ = std::future::ready(()) => false,
    }
}

use tidemark_metrics::wall_ms as now_ms;

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_ftrl::Params;

    /// A learner with no checkpoint yet in a fresh directory named `name`,
    /// its configuration the file's `extra` lines.
    fn fresh(name: &str, extra: &str) -> (std::path::PathBuf, Config, State) {
        let dir = std::env::temp_dir().join(format!("tidemark-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let config = Config::from_toml(&format!(
            "checkpoint_dir = {:?}\n{extra}[[sources]]\nname = \"a\"\n",
            dir.display().to_string()
        ))
        .unwrap();
        let state = resume(&config).unwrap();
        (dir, config, state)
    }

    /// Row `i`'s features: five apps, a small number.
    fn row(i: u32) -> serde_json::Map<String, serde_json::Value> {
        match serde_json::json!({"app": format!("a{}", i % 5), "n": i % 3}) {
            serde_json::Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn an_unfit_target_is_not_written_and_resumes_from_its_last_good_checkpoint() {
        let (dir, config, mut state) = fresh("unfit", "");
        for i in 0..200 {
            for t in ["ctr", "cvr"] {
                state
                    .models
                    .learn(t, Params::default, &row(i), Row::plain(i % 4 == 0));
            }
        }
        let good = Checkpoint::read(&state.checkpoint(&config).unwrap(), true).unwrap();
        let good_ctr = good.targets.iter().find(|t| t.name == "ctr").unwrap();

        // A target holding NaN, as a learner without the guards made one.
        let mut bad = good_ctr.clone();
        bad.state[0].1 = f32::NAN;
        state.models.restore("ctr", Some(&bad));
        for i in 0..50 {
            state
                .models
                .learn("cvr", Params::default, &row(i), Row::plain(i % 4 == 0));
        }
        let path = state.checkpoint(&config).unwrap();
        let written = Checkpoint::read(&path, true).expect("a checkpoint every reader loads");
        let ctr = written.targets.iter().find(|t| t.name == "ctr").unwrap();
        assert_eq!(
            (ctr.trained, &ctr.weights, &ctr.state),
            (good_ctr.trained, &good_ctr.weights, &good_ctr.state),
            "ctr is back as the last good checkpoint held it"
        );
        let cvr = written.targets.iter().find(|t| t.name == "cvr").unwrap();
        assert_eq!(cvr.trained, 250, "the other target kept what it learned");
        assert_eq!(state.refused["ctr"], 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unfit_pool_is_not_written_and_resumes_from_its_last_good_checkpoint() {
        let extra = "[pools.install]\ntargets = [\"short\", \"long\"]\n";
        let (dir, config, mut state) = fresh("unfit-pool", extra);
        let learn = |state: &mut State, rows: std::ops::Range<u32>| {
            for i in rows {
                for t in ["short", "long"] {
                    let y = Row::plain(i % 3 == 0);
                    state.models.learn(t, Params::default, &row(i), y);
                }
            }
        };
        learn(&mut state, 0..200);
        let good = Checkpoint::read(&state.checkpoint(&config).unwrap(), true).unwrap();
        let good_pool = good.pools.iter().find(|p| p.name == "install").unwrap();
        assert!(good_pool.trained > 0);

        let mut bad = good_pool.clone();
        bad.state[0].1 = f32::NAN;
        state.models.restore_pool("install", Some(&bad));
        learn(&mut state, 0..50);
        let written = Checkpoint::read(&state.checkpoint(&config).unwrap(), true)
            .expect("a checkpoint every reader loads");
        let pool = written.pools.iter().find(|p| p.name == "install").unwrap();
        assert_eq!(
            (pool.trained, &pool.weights, &pool.state),
            (good_pool.trained, &good_pool.weights, &good_pool.state),
            "the pool is back as the last good checkpoint held it"
        );
        assert_eq!(written.non_finite(), None);
        assert_eq!(state.refused["pool:install"], 1);
        for t in &written.targets {
            assert_eq!(t.pool.as_deref(), Some("install"));
            // A target that scored with the poisoned pool took its NaN too:
            // it is put back as well, counted; one that did not, kept on.
            let back = state.refused.get(&t.name).copied().unwrap_or(0);
            let want = if back == 1 { 200 } else { 250 };
            assert_eq!(t.trained, want, "{} (refused {back} times)", t.name);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
