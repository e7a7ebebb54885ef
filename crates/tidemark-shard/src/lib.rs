//! One shard (SPEC 4-7): subscribes to a set of txid prefixes over ZeroMQ,
//! keeps each transaction's events in its PostgreSQL buffer, advances the
//! phase watermarks and emits observations.
//!
//! Owns: the shard configuration, the intake thread (the only ZeroMQ code on
//! the consuming side), clocks, phase arithmetic (down to the plan of each
//! sweep), the writer that owns the connection and the buffer's state, and
//! `run`: the loop, retries and shutdown. It holds no SQL: every statement
//! and transaction is `tidemark-store`'s. It knows nothing of the learner.

#![warn(missing_docs)]

pub mod clock;
pub mod config;
pub mod counters;
pub mod intake;
pub mod live;
pub mod liveness;
pub mod loss;
pub mod phases;
mod writer;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_store::{state, StoreError};
use tokio::sync::mpsc;

pub use config::{ClockKind, Config, ConfigError};
use counters::Counters;
pub use writer::Backoff;
use writer::Writer;

/// Why a shard stopped other than cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// The database failed in a way retrying cannot fix.
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("shard {name:?} is already running (PostgreSQL backend pid {pid} holds its lock); stop it first")]
    /// Another process holds the shard's lock.
    AlreadyRunning {
        /// The shard.
        name: String,
        /// The PostgreSQL backend holding it.
        pid: i32,
    },
    /// Another process took the shard's lock while this one was reconnecting.
    #[error("another process took shard {0:?} while this one was reconnecting; stopping")]
    LockLost(String),
    /// Intake could not start.
    #[error(transparent)]
    Intake(#[from] intake::IntakeError),
    /// The metrics endpoint could not start (`metrics_addr`).
    #[error(transparent)]
    Metrics(#[from] tidemark_metrics::ServeError),
    /// The database stayed away for the whole `shutdown_timeout`.
    #[error("stopped without writing {unwritten} accepted events: the database stayed away for the whole shutdown_timeout ({waited:?}); last error: {error}")]
    ShutdownTimeout {
        /// Accepted events not written.
        unwritten: usize,
        /// How long it tried.
        waited: Duration,
        /// The last database error.
        error: String,
    },
}

/// What a shard did in this run.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Every nonzero counter of this run, by name.
    pub counters: Vec<(String, i64)>,
}

/// How often the shard logs its counters.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// Runs a shard until `shutdown` completes, then stops reading, writes what it
/// holds, commits and returns. Transient database errors are retried forever.
pub async fn run(
    config: Config,
    database_url: &str,
    shutdown: impl Future<Output = ()>,
) -> Result<Summary, ShardError> {
    let counters = Arc::new(Counters::new(&config.types));
    let _metrics = match &config.metrics_addr {
        Some(addr) => Some(counters::serve_metrics(
            addr,
            &config.name,
            counters.clone(),
        )?),
        None => None,
    };
    let mut writer = Writer::open(config, database_url, counters.clone()).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let config = writer.config().clone();
    let capacity = (config.max_pending / 2048).max(4);
    let (tx, mut rx) = mpsc::channel(capacity);
    let (applied, reference) = writer.saved_clocks();
    let intake = intake::spawn(
        &config,
        counters.clone(),
        applied,
        reference,
        tx,
        stop.clone(),
    )?;
    tracing::info!(
        shard = config.name,
        prefixes = ?config.prefixes,
        rate = config.rate(),
        endpoints = ?config.endpoints,
        clock = ?config.clock,
        "shard started"
    );

    tokio::pin!(shutdown);
    let mut next_sweep = Instant::now() + config.period;
    let mut next_report = Instant::now() + REPORT_EVERY;
    let mut oldest_pending: Option<Instant> = None;
    let mut backoff = Backoff::new();
    let mut retry_at: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let flush_due = oldest_pending.map(|t| t + config.batch_delay);
        // Backing off, only the retry is due: the rest waits for it (a sweep
        // or report time already past would otherwise wake the loop at once).
        let wake = match retry_at {
            Some(t) => t,
            None => [Some(next_sweep), flush_due, Some(next_report)]
                .into_iter()
                .flatten()
                .min()
                .expect("sweep is always scheduled"),
        };
        // Hold at most `max_pending` events; beyond it intake drops (counted).
        let room = writer.pending_events() < config.max_pending;
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            chunk = rx.recv(), if room => match chunk {
                Some(c) => {
                    oldest_pending.get_or_insert(now);
                    writer.push(c);
                }
                None => break,
            },
            _ = tokio::time::sleep_until(wake.into()) => {}
        }
        let now = Instant::now();
        if retry_at.is_some_and(|t| now < t) {
            continue;
        }
        // Reconnect one attempt at a time, so a stop request is heard while
        // the database is away.
        if writer.disconnected() {
            match writer.reconnect(database_url).await {
                Ok(()) => {
                    retry_at = None;
                    writer.record_error().await;
                }
                Err(ShardError::Store(e)) => {
                    writer.note_error(&e);
                    let wait = backoff.fail();
                    tracing::warn!(
                        "cannot reach the database, holding {} events and retrying in {:.1}s: {e}",
                        writer.pending_events(),
                        wait.as_secs_f64()
                    );
                    retry_at = Some(Instant::now() + wait);
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        let sweep_due = now >= next_sweep;
        let batch_full = writer.pending_events() >= config.batch_events;
        let flush = sweep_due
            || batch_full
            || oldest_pending.is_some_and(|t| now >= t + config.batch_delay);
        if flush {
            let result = match writer.flush().await {
                // (flush counts its own errors, batch by batch)
                Ok(()) if sweep_due => writer.sweep().await.inspect_err(|e| {
                    counters.add(tidemark_store::telemetry::Counter::db_errors(e.class()), 1);
                }),
                other => other,
            };
            match result {
                Ok(()) => {
                    if let Some(since) = backoff.since {
                        tracing::info!(
                            "database is back after {:.1}s",
                            since.elapsed().as_secs_f64()
                        );
                    }
                    backoff.reset();
                    retry_at = None;
                    if writer.pending_events() == 0 {
                        oldest_pending = None;
                    }
                    if sweep_due {
                        next_sweep = now + config.period;
                    }
                }
                Err(e) => {
                    let wait = backoff.fail();
                    tracing::warn!(
                        "database error, holding {} events and retrying in {:.1}s: {e}",
                        writer.pending_events(),
                        wait.as_secs_f64()
                    );
                    writer.surface_error(&e).await;
                    retry_at = Some(Instant::now() + wait);
                }
            }
        }

        if now >= next_report {
            writer.report(rx.len());
            next_report = now + REPORT_EVERY;
        }
    }

    // Clean stop: no more reading; write what intake and the writer hold,
    // trying for at most `shutdown_timeout`.
    stop.store(true, Ordering::Relaxed);
    let deadline = Instant::now() + config.shutdown_timeout;
    let intake_done = tokio::task::spawn_blocking(move || intake.join());
    while let Some(c) = rx.recv().await {
        writer.push(c);
    }
    let _ = intake_done.await;
    let mut backoff = Backoff::new();
    let mut last_error = None;
    loop {
        if writer.disconnected() {
            if let Err(e) = writer.reconnect(database_url).await {
                last_error = Some(e.to_string());
            }
        }
        if !writer.disconnected() {
            match writer.final_write().await {
                Ok(()) => break,
                Err(e) => {
                    writer.surface_error(&e).await;
                    last_error = Some(e.to_string());
                }
            }
        }
        let wait = backoff.fail();
        if Instant::now() + wait >= deadline {
            return Err(ShardError::ShutdownTimeout {
                unwritten: writer.pending_events(),
                waited: config.shutdown_timeout,
                error: last_error.unwrap_or_default(),
            });
        }
        tracing::warn!(
            "stopping: cannot write {} events yet, retrying in {:.1}s: {}",
            writer.pending_events(),
            wait.as_secs_f64(),
            last_error.as_deref().unwrap_or("")
        );
        tokio::time::sleep(wait).await;
    }
    writer.report(0);
    tracing::info!(shard = config.name, "shard stopped cleanly");
    Ok(Summary {
        counters: counters.snapshot(),
    })
}

/// Counters and watermarks of a shard, from the database (for `--status`).
pub async fn status(
    client: &tokio_postgres::Client,
    shard: &str,
) -> Result<serde_json::Value, StoreError> {
    let counters: serde_json::Map<String, serde_json::Value> = state::counters(client, shard)
        .await?
        .into_iter()
        .map(|(k, v)| (k, v.into()))
        .collect();
    let marks: serde_json::Map<String, serde_json::Value> = state::watermarks(client, shard)
        .await?
        .into_iter()
        .map(|(k, v)| (k, v.into()))
        .collect();
    let Some(r) = state::shard_info(client, shard).await? else {
        return Ok(serde_json::json!({"shard": shard, "known": false}));
    };
    let running = state::lock_holder(client, shard).await?.is_some();
    Ok(serde_json::json!({
        "shard": shard,
        "known": true,
        "running": running,
        "clock_ms": r.clock_ms,
        "next_seq": r.next_seq,
        "rate": r.rate,
        "prefixes": r.prefixes,
        "started_at": r.started_at,
        "updated_at": r.updated_at,
        "watermarks_ms": marks,
        "counters": counters,
    }))
}
